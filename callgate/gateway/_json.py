"""Duplicate JSON keys in what a downstream client sends, caught before the SDK merges them.

Python's JSON reader keeps the last of two equal keys, another reader the first: a reviewer, a log
and the upstream could each see another value. The SDK parses every message before the gateway
sees it, so ``rewrite`` looks at the raw text first:

- duplicates only inside a ``tools/call``'s ``arguments``: the call goes on with empty arguments and
  the original text under ``_meta[RAW_ARGUMENTS_KEY]``; the gateway hands that text to the guard,
  whose parse stage refuses it (``INVALID_JSON`` naming the key), on the call's span like any other;
- duplicates anywhere else in a request with one id: it becomes a request for the method
  ``DUPLICATE_METHOD``, which the SDK answers with a JSON-RPC error; without a usable id, dropped.

A client cannot set ``RAW_ARGUMENTS_KEY`` itself: it is removed from every message first.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DUPLICATE_METHOD", "RAW_ARGUMENTS_KEY", "rewrite"]

RAW_ARGUMENTS_KEY = "io.callgate/raw-arguments"
DUPLICATE_METHOD = "callgate/refused: duplicate JSON keys"


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key-value pairs, duplicates kept."""

    def first(self, key: str) -> Any:
        return next((value for k, value in self if k == key), None)

    def unique(self) -> bool:
        return len({k for k, _ in self}) == len(self)


def _duplicated(node: Any, skip: Any = None) -> bool:
    if node is skip:
        return False
    if isinstance(node, _Pairs):
        return not node.unique() or any(_duplicated(v, skip) for _, v in node)
    if isinstance(node, list):
        return any(_duplicated(v, skip) for v in node)
    return False


def _dump(node: Any) -> str:
    """JSON text of ``node`` with every duplicate kept, so the guard sees what the client sent."""
    if isinstance(node, _Pairs):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in node) + "}"
    if isinstance(node, list):
        return "[" + ",".join(_dump(v) for v in node) + "]"
    return json.dumps(node)


def _plain(node: Any) -> Any:
    if isinstance(node, _Pairs):
        return {k: _plain(v) for k, v in node}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def rewrite(text: str) -> str | None:
    """``text`` unchanged when it has no duplicate keys (and no smuggled raw arguments); otherwise
    the message as described above, or None to drop it."""
    if RAW_ARGUMENTS_KEY not in text and '"' not in text:
        return text
    try:
        tree = json.loads(text, object_pairs_hook=_Pairs)
    except ValueError:
        return text  # not JSON: the SDK answers that itself
    smuggled = RAW_ARGUMENTS_KEY in text
    if not smuggled and not _duplicated(tree):
        return text
    if not isinstance(tree, _Pairs):
        return text  # a batch or a scalar: the SDK refuses those
    params = tree.first("params")
    arguments = params.first("arguments") if isinstance(params, _Pairs) else None
    message = _plain(tree)
    if tree.unique() and isinstance(params, _Pairs) and params.unique():
        meta = message["params"].get("_meta")
        if isinstance(meta, dict):
            meta.pop(RAW_ARGUMENTS_KEY, None)
        if not _duplicated(tree):
            return json.dumps(message)
        if message.get("method") == "tools/call" and not _duplicated(tree, skip=arguments):
            message["params"]["arguments"] = {}
            meta = message["params"].get("_meta")
            message["params"]["_meta"] = {
                **(meta if isinstance(meta, dict) else {}),
                RAW_ARGUMENTS_KEY: _dump(arguments),
            }
            return json.dumps(message)
    ids = [v for k, v in tree if k == "id"]
    if len(ids) != 1 or not isinstance(ids[0], str | int):
        return None
    return json.dumps({"jsonrpc": "2.0", "id": ids[0], "method": DUPLICATE_METHOD})
