"""The HTTP/JSON pass-through reads and writes with orjson and writes what ``json`` would write."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.sidecar.passthrough import NotCanonical, pass_through

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=16)
"""Any text a client may send: quotes, backslashes, control characters, non-ASCII, U+2028."""
_HEX = st.sampled_from("0123456789abcdef")


def _hex(size: int) -> st.SearchStrategy[str]:
    return st.text(_HEX, min_size=2 * size, max_size=2 * size)


_VALUES: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.builds(lambda v: {"stringValue": v}, st.text(max_size=16)),
    st.builds(lambda v: {"boolValue": v}, st.booleans()),
    st.builds(lambda v: {"intValue": str(v)}, st.integers(1, 2**63 - 1)),
    st.builds(lambda v: {"doubleValue": v}, st.floats(allow_nan=False, allow_infinity=False)),
    st.builds(
        lambda vs: {"arrayValue": {"values": [{"stringValue": v} for v in vs]}},
        st.lists(st.text(max_size=8), min_size=1, max_size=3),
    ),
)
_ATTRIBUTES = st.lists(
    st.fixed_dictionaries({"key": _TEXT, "value": _VALUES}), min_size=1, max_size=4
)


@st.composite
def _span(draw: st.DrawFn) -> dict[str, Any]:
    span: dict[str, Any] = {"traceId": draw(_hex(16)), "spanId": draw(_hex(8))}
    if draw(st.booleans()):
        span["parentSpanId"] = draw(_hex(8))
    span["name"] = draw(_TEXT)
    span["kind"] = draw(st.integers(1, 5))
    start = draw(st.integers(1, 2**63))
    span["startTimeUnixNano"] = str(start)
    span["endTimeUnixNano"] = str(start + draw(st.integers(0, 10**9)))
    if draw(st.booleans()):
        span["attributes"] = draw(_ATTRIBUTES)
    span["status"] = draw(st.sampled_from([{}, {"code": 1}, {"message": "no", "code": 2}]))
    return span


_REQUESTS = st.builds(
    lambda resource, scope, spans: {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [{"scope": {"name": scope}, "spans": spans}],
            }
        ]
    },
    _ATTRIBUTES,
    _TEXT,
    st.lists(_span(), min_size=1, max_size=4),
)


def _stdlib(body: str | bytes) -> str:
    return json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":"))


class TestSameTextAsTheStandardLibrary:
    """Whichever library reads and writes a request, the line is the one ``json`` makes."""

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_REQUESTS, st.booleans(), st.booleans())
    def test_any_canonical_request(
        self, request: dict[str, Any], ascii_only: bool, as_text: bool
    ) -> None:
        """Escapes, non-ASCII text, doubles and ``\\u`` escapes all come out as ``json`` writes them."""
        text = json.dumps(request, ensure_ascii=ascii_only)
        body: str | bytes = text if as_text else text.encode()
        encoded = pass_through(body)
        assert encoded.line == _stdlib(body)
        assert encoded.spans == len(request["resourceSpans"][0]["scopeSpans"][0]["spans"])

    def test_doubles_are_spelled_as_json_spells_them(self) -> None:
        """orjson writes 1e-05 as 0.00001; the line keeps the protobuf path's spelling."""
        body = (
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"' + "ab" * 16 + '",'
            '"spanId":"' + "cd" * 8 + '","name":"n","startTimeUnixNano":"1",'
            '"endTimeUnixNano":"2","attributes":[{"key":"delay","value":{"doubleValue":1e-05}}],'
            '"status":{}}]}]}]}'
        )
        assert '{"doubleValue":1e-05}' in pass_through(body).line


class TestWhatOrjsonRefuses:
    """Bodies orjson will not read get the standard library's answer, as before."""

    def test_a_lone_surrogate_is_read_and_left_for_the_caller(self) -> None:
        """json reads it; the line holds it, and the receiver's UTF-8 check sends it the long way."""
        body = (
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"' + "ab" * 16 + '",'
            '"spanId":"' + "cd" * 8 + '","name":"\\ud800","startTimeUnixNano":"1",'
            '"endTimeUnixNano":"2","status":{}}]}]}]}'
        )
        line = pass_through(body).line
        with pytest.raises(UnicodeEncodeError):
            line.encode("utf-8")

    @pytest.mark.parametrize(
        "body",
        [
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":99999999999999999999999}]}]}]}',
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":1e400}]}]}]}',
        ],
    )
    def test_numbers_beyond_64_bits_are_not_canonical(self, body: bytes) -> None:
        """A huge number is read by json as json reads it, and sent the long way, not passed."""
        with pytest.raises(NotCanonical):
            pass_through(body)

    @pytest.mark.parametrize("body", [b"{not json", b"[" * 5000 + b"]" * 5000, b'{"a": NaN}'])
    def test_not_json_is_still_a_value_error(self, body: bytes) -> None:
        """The error comes from json, with its message, as before orjson."""
        with pytest.raises(ValueError):
            pass_through(body)
