from __future__ import annotations

import json
from typing import Any

import pytest

from guard.codes import Code
from guard.providers import (
    ProposedCall,
    anthropic_tool_results_message,
    anthropic_tools,
    parse_anthropic,
    render_anthropic,
)
from guard.result import ToolResult
from tests.guard.providers.schema_checks import assert_valid_schema
from tests.guard.providers.tools import GET_ORDER, RECURSIVE, REFUND_ORDER, TITLED, VALID_REFUND


def _result(call_id: str | None = "toolu_1", *, ok: bool = True) -> ToolResult:
    if ok:
        return ToolResult(ok=True, code=Code.OK, message="Refunded.", call_id=call_id)
    return ToolResult(ok=False, code=Code.NOT_FOUND, message="No such order.", call_id=call_id)


class TestTools:
    def test_read_tool_shape(self) -> None:
        """A tool is name, description and input_schema: pydantic's schema without titles."""
        assert anthropic_tools([GET_ORDER]) == [
            {
                "name": "get_order",
                "description": "Look up one order. Use before any refund.",
                "input_schema": {
                    "additionalProperties": False,
                    "properties": {
                        "order_id": {
                            "description": "The order id, like ORD-1001.",
                            "pattern": r"^ORD-[0-9]{4}$",
                            "type": "string",
                        }
                    },
                    "required": ["order_id"],
                    "type": "object",
                },
            }
        ]

    def test_write_tool_keeps_constraints_and_definitions(self) -> None:
        """The write tool's schema keeps $defs, bounds, enums, patterns and true optionality."""
        (tool,) = anthropic_tools([REFUND_ORDER])
        schema = tool["input_schema"]
        assert schema["required"] == ["order_id", "amount_cents", "currency", "contact"]
        assert schema["properties"]["amount_cents"]["exclusiveMinimum"] == 0
        assert schema["properties"]["currency"]["enum"] == ["BRL", "USD"]
        assert schema["properties"]["contact"] == {
            "$ref": "#/$defs/Contact",
            "description": "Who to notify.",
        }
        assert schema["$defs"]["Contact"]["properties"]["address"]["maxLength"] == 120
        assert_valid_schema(schema, VALID_REFUND)

    def test_titles_dropped_but_a_field_called_title_kept(self) -> None:
        """Only title annotations go; a property named title stays."""
        (tool,) = anthropic_tools([TITLED])
        schema = tool["input_schema"]
        assert "title" not in schema
        assert list(schema["properties"]) == ["title", "limit"]
        assert "title" not in schema["properties"]["title"]

    def test_recursive_model_has_an_object_root(self) -> None:
        """A recursive model's root $ref is resolved, so the root is an object."""
        (tool,) = anthropic_tools([RECURSIVE])
        schema = tool["input_schema"]
        assert schema["type"] == "object"
        assert_valid_schema(schema, {"label": "a", "children": [{"label": "b", "children": []}]})


class TestParse:
    def test_response_round_trip(self) -> None:
        """A tool_use block's input becomes JSON text the argument model accepts."""
        response = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Refunding now."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "refund_order",
                    "input": VALID_REFUND,
                },
            ],
            "stop_reason": "tool_use",
        }
        (proposed,) = parse_anthropic(response)
        assert proposed == ProposedCall(
            name="refund_order",
            arguments=json.dumps(VALID_REFUND),
            call_id="toolu_1",
            provider="anthropic",
        )
        REFUND_ORDER.arguments.model_validate_json(proposed.arguments, strict=True)

    def test_content_list(self) -> None:
        """The content list works as well as the message; non-tool blocks are skipped."""
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": "..."},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_order", "input": {}},
        ]
        assert [call.call_id for call in parse_anthropic(content)] == ["toolu_2"]

    def test_text_content(self) -> None:
        """A message whose content is plain text has no calls."""
        assert parse_anthropic({"role": "assistant", "content": "Hi"}) == []

    def test_missing_input_becomes_empty_text(self) -> None:
        """A tool_use without input gets "" so the parse stage answers INVALID_JSON."""
        (proposed,) = parse_anthropic([{"type": "tool_use", "id": "t", "name": "get_order"}])
        assert proposed.arguments == ""

    def test_non_object_input_is_dumped(self) -> None:
        """An input that is not an object goes on as JSON text, for the parse stage to refuse."""
        (proposed,) = parse_anthropic([{"type": "tool_use", "id": "t", "name": "x", "input": [1]}])
        assert proposed.arguments == "[1]"

    @pytest.mark.parametrize(
        "container", [{"role": "assistant"}, "text", [1]], ids=["no-content", "string", "entry"]
    )
    def test_rejects_non_provider_containers(self, container: Any) -> None:
        """Something that is not a message or a content list is a caller bug: ValueError."""
        with pytest.raises(ValueError):
            parse_anthropic(container)


class TestRender:
    def test_tool_result_block(self) -> None:
        """The block quotes the tool_use id and carries the payload as JSON text, not an error."""
        result = _result()
        block = render_anthropic(result, "toolu_7")
        assert block == {
            "type": "tool_result",
            "tool_use_id": "toolu_7",
            "content": json.dumps(result.for_model()),
            "is_error": False,
        }
        assert json.loads(block["content"]) == result.for_model()

    def test_rejection_is_an_error(self) -> None:
        """A rejected call is rendered with is_error true."""
        assert render_anthropic(_result(ok=False))["is_error"] is True

    def test_results_message(self) -> None:
        """All results of a turn go back in one user message, each under its own id."""
        message = anthropic_tool_results_message([_result("toolu_1"), _result("toolu_2", ok=False)])
        assert message["role"] == "user"
        assert [block["tool_use_id"] for block in message["content"]] == ["toolu_1", "toolu_2"]
        assert [block["is_error"] for block in message["content"]] == [False, True]

    def test_result_without_id_is_a_bug(self) -> None:
        """A result with no call id cannot be put in the results message."""
        with pytest.raises(ValueError):
            anthropic_tool_results_message([_result(None)])
