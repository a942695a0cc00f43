"""Stage 2: arguments must be a JSON object."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.shop import ShopApp, build_shop
from guard.stages.parse import MAX_DEPTH, MAX_SAFE_INTEGER
from guard.testing import ManualClock


class TestParse:
    @pytest.mark.parametrize(
        "raw",
        [
            '{"order_id": "ORD-1001"',
            "ORD-1001",
            "",
            "[]",
            '"ORD-1001"',
            "1001",
            "null",
            "true",
            '{"order_id": NaN}',
            "x" * 70_000,
            None,
        ],
    )
    def test_not_a_json_object(self, shop: ShopApp, raw: str | None) -> None:
        """Malformed text, non-objects, NaN and oversize input are INVALID_JSON and never reach a handler."""
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_JSON"
        assert result.ok is False
        assert "JSON" in result.message or "large" in result.message
        assert shop.backend.requests == 0

    def test_error_position_is_reported(self, shop: ShopApp) -> None:
        """The message says where the JSON broke, so the model can fix it."""
        result = shop.session("s1", "CUS-1").execute("get_order", '{"order_id" "ORD-1001"}')
        assert "column" in result.message

    def test_object_arguments_are_accepted(self, shop: ShopApp) -> None:
        """Providers that send objects (Anthropic, MCP) are handled like their JSON text."""
        result = shop.session("s1", "CUS-1").execute("get_order", {"order_id": "ORD-1001"})
        assert result.ok


keys = st.text(st.characters(codec="utf-8", exclude_characters='"\\'), min_size=1, max_size=8)
scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8)
objects = st.recursive(
    st.dictionaries(keys, scalars, max_size=3),
    lambda children: st.dictionaries(keys, children | st.lists(children, max_size=2), max_size=3),
    max_leaves=10,
)


def with_duplicate(value: Any, path: list[int], key: str) -> str:
    """JSON text of ``value`` with ``key`` written twice in the object reached by following ``path``
    (list elements of the ``objects`` strategy are always objects)."""
    if isinstance(value, list):
        chosen = (path[0] if path else 0) % len(value)
        items = [
            with_duplicate(v, path[1:], key) if i == chosen else json.dumps(v)
            for i, v in enumerate(value)
        ]
        return "[" + ",".join(items) + "]"
    children = [k for k, v in value.items() if isinstance(v, dict | list) and v]
    if path and children:
        target = children[path[0] % len(children)]
        members = [
            json.dumps(k)
            + ":"
            + (with_duplicate(v, path[1:], key) if k == target else json.dumps(v))
            for k, v in value.items()
        ]
    else:
        members = [json.dumps(k) + ":" + json.dumps(v) for k, v in value.items() if k != key]
        members += [json.dumps(key) + ":1", json.dumps(key) + ":2"]
    return "{" + ",".join(members) + "}"


class TestAmbiguousJson:
    """Text that parsers read differently is refused, so every reader of a call sees one value."""

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(objects, st.lists(st.integers(0, 3), max_size=4), keys)
    def test_duplicate_keys_are_refused_at_any_depth(
        self, value: dict[str, Any], path: list[int], key: str
    ) -> None:
        """A key written twice in any object, however deep, is INVALID_JSON naming the key."""
        raw = with_duplicate({"order_id": "ORD-1001", "nested": value}, [1, *path], key)
        shop = build_shop(clock=ManualClock())
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_JSON"
        assert f"duplicate key {json.dumps(key)[:40]}" in result.message
        assert shop.backend.requests == 0

    def test_a_duplicate_write_argument_runs_nothing(self, shop: ShopApp) -> None:
        """Two amounts in one refund: refused before anything, not 'the last one wins'."""
        session = shop.session("s1", "CUS-1")
        assert session.execute("get_order", '{"order_id": "ORD-1001"}').ok
        raw = (
            '{"order_id": "ORD-1001", "amount_cents": 100, "currency": "BRL",'
            ' "reason": "damaged", "amount_cents": 2590}'
        )
        result = session.execute("refund_order", raw)
        assert result.code == "INVALID_JSON" and '"amount_cents"' in result.message
        assert result.approval_id is None and shop.backend.side_effects == 0

    def test_an_escaped_spelling_of_the_same_key_is_a_duplicate(self, shop: ShopApp) -> None:
        """`order_id` and its \\u-escaped spelling are one key to every parser: a duplicate."""
        raw = '{"order_id": "ORD-1001", "\\u006frder_id": "ORD-1002"}'
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_JSON" and '"order_id"' in result.message

    def test_object_keys_that_collide_as_json_are_duplicates(self, shop: ShopApp) -> None:
        """A provider object with keys 1 and "1" becomes two "1" keys: refused, not merged."""
        result = shop.session("s1", "CUS-1").execute("get_order", {1: "a", "1": "b"})
        assert result.code == "INVALID_JSON" and "duplicate" in result.message

    @pytest.mark.parametrize(
        "raw",
        [
            '{"order_id": "ORD-1001", "x": 1e999}',
            '{"order_id": "ORD-1001", "x": -1e400}',
            '{"order_id": "ORD-1001", "x": Infinity}',
            '{"order_id": "ORD-1001", "x": -Infinity}',
            '{"order_id": "ORD-1001", "x": NaN}',
            '{"order_id": "ORD-1001", "x": ' + "9" * 5000 + "}",
        ],
    )
    def test_numbers_no_backend_can_hold_are_refused(self, shop: ShopApp, raw: str) -> None:
        """NaN, infinities (also spelt as 1e999) and integers past Python's limit are INVALID_JSON."""
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_JSON" and shop.backend.requests == 0

    @given(
        st.integers(MAX_SAFE_INTEGER + 1, 10**30) | st.integers(-(10**30), -MAX_SAFE_INTEGER - 1)
    )
    @settings(max_examples=50, deadline=None)
    def test_integers_a_double_cannot_hold_are_refused(self, value: int) -> None:
        """A JavaScript approver UI would show another amount than the one executed: refused."""
        shop = build_shop(clock=ManualClock())
        session = shop.session("s1", "CUS-1")
        assert session.execute("get_order", '{"order_id": "ORD-1001"}').ok
        raw = json.dumps(
            {"order_id": "ORD-1001", "amount_cents": value, "currency": "BRL", "reason": "damaged"}
        )
        result = session.execute("refund_order", raw)
        assert result.code == "INVALID_JSON" and "2^53" in result.message
        assert shop.backend.side_effects == 0 and result.approval_id is None

    @pytest.mark.parametrize("value", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, 2590])
    def test_integers_in_the_safe_range_parse(self, shop: ShopApp, value: int) -> None:
        """The boundary itself is fine: parsed, then judged by the schema and the rules."""
        raw = json.dumps({"order_id": "ORD-1001", "x": value})
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_ARGUMENTS"  # parsed; "x" is not an argument

    @given(st.integers(MAX_DEPTH, 5000))
    @settings(max_examples=30, deadline=None)
    def test_deep_nesting_is_refused(self, depth: int) -> None:
        """Nesting beyond MAX_DEPTH, as arrays or objects, is INVALID_JSON, never a RecursionError."""
        shop = build_shop(clock=ManualClock())
        arrays = '{"order_id": "ORD-1001", "x": ' + "[" * depth + "]" * depth + "}"
        objects_ = '{"order_id": "ORD-1001", "x": ' + '{"a":' * depth + "1" + "}" * depth + "}"
        for raw in (arrays, objects_):
            result = shop.session("s1", "CUS-1").execute("get_order", raw)
            assert result.code == "INVALID_JSON", raw[:80]
        assert shop.backend.requests == 0

    def test_nesting_within_the_limit_is_parsed(self, shop: ShopApp) -> None:
        """The depth limit is not a bracket count: many shallow brackets still parse."""
        raw = '{"order_id": "ORD-1001", "x": [' + ",".join(["[]"] * 100) + "]}"
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_ARGUMENTS"  # parsed, then the schema refuses "x"

    @given(st.integers(0xD800, 0xDFFF), st.booleans(), st.sampled_from(["key", "value"]))
    @settings(max_examples=50, deadline=None)
    def test_lone_surrogates_are_refused(self, code: int, escaped: bool, where: str) -> None:
        """A lone surrogate, escaped or literal, in a key or a value, is INVALID_JSON."""
        shop = build_shop(clock=ManualClock())
        text = f"\\u{code:04x}" if escaped else chr(code)
        member = f'"{text}": 1' if where == "key" else f'"reason": "{text}"'
        raw = '{"order_id": "ORD-1001", ' + member + "}"
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_JSON" and "surrogate" in result.message
        assert shop.backend.requests == 0

    def test_surrogate_pairs_and_other_unicode_are_fine(self, shop: ShopApp) -> None:
        """A proper pair (an emoji, escaped) and non-ASCII text parse as usual."""
        raw = '{"order_id": "ORD-1001", "note": "\\ud83d\\ude00 São"}'
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_ARGUMENTS"  # parsed; "note" is not an argument


class TestFastDecode:
    """The stage calls the C scanner directly; it must answer exactly as ``JSONDecoder.decode``."""

    @settings(max_examples=500, deadline=None)
    @given(st.text(alphabet=' \t\n\r\u00a0{}[]",:0123456789abnulltrue-.eE\\', max_size=24))
    def test_same_values_and_errors_as_the_decoder(self, text: str) -> None:
        """Values, error messages and error positions are those of the stdlib decoder."""
        from guard.stages.parse import _DECODER, _decode

        def answer(decode: Any) -> Any:
            try:
                return ("ok", decode(text))
            except (ValueError, RecursionError) as error:
                return (type(error).__name__, str(error))

        assert answer(_decode) == answer(_DECODER.decode)
