"""A finished call as UTF-8, for the trail's lines: ``encode_call``'s text, made as bytes.

A plain call with stages (``telemetry.calltext``'s plain calls) is written whole from one
``PlainTemplate``: its call span's template and its stages' joined, as a bytes ``%`` format in
which the integers are formatted in place and nothing is encoded after. Any other call's stage
spans come from their ``StagesTemplate`` as UTF-8 too, after its call span's text, encoded. Tests
hold every path byte for byte equal to ``encode_call``'s text under the same ids.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import Any

from guard.call import Call
from guard.result import ToolResult
from telemetry.calltext import (
    _CACHE_LIMIT,
    _INT_HOLES,
    CallTemplate,
    StagesTemplate,
    _call_template,
    _head_text,
    _is_plain,
    _message_text,
    _plain_key,
    _stage_template,
    _utf8_format,
    encode_call,
)
from telemetry.masking import Masker
from telemetry.records import SPAN_ID_SUFFIXES, CallIds, given_prefix, new_id_prefix
from telemetry.spans import _masked_arguments, _path, span_count

__all__ = ["PlainTemplate", "encode_call_utf8"]


class PlainTemplate:
    """A plain call's whole text for the trail, its call span then its stage spans, as UTF-8 with
    a hole for each id, time and varying attribute: one ``%`` of bytes per call (about twice as
    fast as text's), integers formatted in place, and no encoding pass over the text after.

    ``render`` takes the values in ``_HOLES``' numbering as UTF-8 (the integers as they are),
    then the call's marks from value 10 on; it is ``encode_call``'s text, encoded.
    """

    __slots__ = ("_pick", "_text", "spec")

    def __init__(self, head: CallTemplate, stages: StagesTemplate) -> None:
        self.spec = head.spec
        """The tool spec the key names by id (held, so the id cannot be reused)."""
        pieces = [*head.pieces[:-1], head.pieces[-1] + "," + stages.pieces[0], *stages.pieces[1:]]
        holes = [*head.holes, *(hole + 8 if hole >= 2 else hole for hole in stages.holes)]
        self._text = _utf8_format(pieces, holes, lambda hole: hole in _INT_HOLES or hole >= 10)
        self._pick = operator.itemgetter(*holes)

    def render(self, values: Sequence[bytes | int]) -> bytes:
        """The call's spans as UTF-8, from its values."""
        data: bytes = self._text % self._pick(values)
        return data


_plains: dict[tuple[Any, ...], PlainTemplate] = {}
"""A plain call's template key and its stages (``_plain_key``, chain, marks) -> its whole
text's template (cleared when full)."""


def encode_call_utf8(
    call: Call,
    result: ToolResult,
    masker: Masker,
    *,
    capture_content: bool = False,
    parent: tuple[str, str] | None = None,
    ids: CallIds | None = None,
) -> bytes:
    """``encode_call(..., check_text=False)`` as UTF-8, for the trail's lines: a plain call with
    stages from its ``PlainTemplate``; any other call's stage spans from its ``StagesTemplate``
    as UTF-8 too (``render_utf8``) after its call span's text, encoded.

    Raises ``UnicodeEncodeError`` when the call holds text UTF-8 cannot carry (a lone surrogate):
    its caller then writes ``encode_call`` with ``check_text``, which replaces it and says so.
    """
    if not capture_content:
        data = _plain_utf8(call, result, masker, parent, ids)
        if data is not None:
            return data
    marks = call.marks
    if (
        call.retries
        or call.settled is not None
        or not 2 <= len(marks) <= len(SPAN_ID_SUFFIXES)
        or 0 in marks
    ):  # written span by span, or a call span alone
        text = encode_call(
            call, result, masker, capture_content=capture_content, parent=parent,
            check_text=False, ids=ids,
        )  # fmt: skip
        return text.encode("utf-8")
    given = given_prefix(ids, span_count(call))
    trace_id, prefix, text = _head_text(call, result, masker, capture_content, parent, given)
    stages = _stage_template(_path(call, result)).render_utf8(trace_id, prefix, marks)
    return text.encode("utf-8") + b"," + stages


def _plain_utf8(
    call: Call,
    result: ToolResult,
    masker: Masker,
    parent: tuple[str, str] | None,
    ids: CallIds | None,
) -> bytes | None:
    """A plain call's spans from its ``PlainTemplate``; None when the call is not plain, has no
    stage, or has a time, step or turn the template cannot write as the records do."""
    marks = call.marks
    count = len(marks)
    if (
        count < 2
        or count > len(SPAN_ID_SUFFIXES)
        or call.retries
        or call.settled is not None
        or not call.start_ns
        or 0 in marks
        or call.step.__class__ is not int
        or call.turn.__class__ is not int
        or not _is_plain(call, result)
    ):
        return None
    spec = call.spec
    arguments = _masked_arguments(call, masker)
    key = (_plain_key(call, result, masker, parent is None, arguments is None), call.chain, count)
    template = _plains.get(key)
    if template is None or template.spec is not spec:
        head = _call_template(call, result, masker, parent is not None)
        if head is None:
            return None
        template = PlainTemplate(head, _stage_template(_path(call, result)))
        if len(_plains) >= _CACHE_LIMIT:
            _plains.clear()
        _plains[key] = template
    given = given_prefix(ids, count) if ids is not None else None
    trace_id, prefix = given if given is not None else new_id_prefix()
    parent_id = ""
    if parent is not None:
        trace_id, parent_id = parent
    call_id = call.call_id
    return template.render(
        (
            trace_id.encode(), prefix.encode(), parent_id.encode(), call.start_ns,
            call.end_ns or marks[-1], call.step, call.turn,
            _message_text(masker, result.message).encode(),
            b"" if call_id is None else encode_basestring(masker.text(call_id)).encode(),
            b"" if arguments is None else encode_basestring(arguments).encode(),
            *marks,
        )
    )  # fmt: skip
