from __future__ import annotations

import json
from typing import Any

import pytest

from guard.codes import Code
from guard.providers import ProposedCall, mcp_tools, parse_mcp, render_mcp
from guard.registry import Effect, Risk, ToolSpec
from guard.result import ToolResult
from tests.guard.providers.schema_checks import assert_valid_schema
from tests.guard.providers.tools import GET_ORDER, REFUND_ORDER, VALID_REFUND


def _request(params: Any, request_id: Any = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class TestTools:
    def test_read_tool_shape(self) -> None:
        """A read tool is listed with its schema and read-only, idempotent hints."""
        assert mcp_tools([GET_ORDER]) == [
            {
                "name": "get_order",
                "description": "Look up one order. Use before any refund.",
                "inputSchema": {
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
                "annotations": {
                    "readOnlyHint": True,
                    "destructiveHint": False,
                    "idempotentHint": True,
                },
            }
        ]

    def test_high_risk_write_is_destructive(self) -> None:
        """A high-risk write is not read-only and is destructive; its backend dedupes by key."""
        (tool,) = mcp_tools([REFUND_ORDER])
        assert tool["annotations"] == {
            "readOnlyHint": False,
            "destructiveHint": True,
            "idempotentHint": True,
        }
        assert_valid_schema(tool["inputSchema"], VALID_REFUND)

    def test_low_risk_write_without_idempotent_backend(self) -> None:
        """A low-risk write is additive, and without a deduplicating backend not idempotent."""
        spec = ToolSpec(
            name="add_note",
            description="Add a note.",
            arguments=GET_ORDER.arguments,
            handler=GET_ORDER.handler,
            effect=Effect.WRITE,
            risk=Risk.LOW,
            idempotent_backend=False,
        )
        (tool,) = mcp_tools([spec])
        assert tool["annotations"] == {
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": False,
        }


class TestParse:
    def test_round_trip(self) -> None:
        """A tools/call request becomes a call whose arguments the argument model accepts."""
        proposed = parse_mcp(_request({"name": "refund_order", "arguments": VALID_REFUND}))
        assert proposed == ProposedCall(
            name="refund_order", arguments=json.dumps(VALID_REFUND), call_id="7", provider="mcp"
        )
        REFUND_ORDER.arguments.model_validate_json(proposed.arguments, strict=True)

    def test_string_request_id(self) -> None:
        """A string request id is the call id as it is."""
        assert parse_mcp(_request({"name": "get_order"}, "req-1")).call_id == "req-1"

    def test_missing_arguments_mean_none(self) -> None:
        """MCP makes arguments optional, so a missing one reads as an empty object."""
        assert parse_mcp(_request({"name": "get_order"})).arguments == "{}"

    def test_null_arguments_become_empty_text(self) -> None:
        """Explicitly null arguments get "" so the parse stage answers INVALID_JSON."""
        assert parse_mcp(_request({"name": "get_order", "arguments": None})).arguments == ""

    def test_missing_name(self) -> None:
        """A call without a name gets "" so the resolve stage answers UNKNOWN_TOOL."""
        assert parse_mcp(_request({"arguments": {}})).name == ""

    @pytest.mark.parametrize(
        "request_",
        [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call"},
            _request("refund"),
            ["tools/call"],
        ],
        ids=["other-method", "no-params", "params-not-object", "not-an-object"],
    )
    def test_rejects_non_tool_calls(self, request_: Any) -> None:
        """Anything but a tools/call request with params is a caller bug: ValueError."""
        with pytest.raises(ValueError):
            parse_mcp(request_)


class TestRender:
    def test_success(self) -> None:
        """The response echoes the request id and carries the payload as text and structure."""
        result = ToolResult(ok=True, code=Code.OK, message="Found.", data={"status": "paid"})
        response = render_mcp(result, 7)
        assert response == {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {
                "content": [{"type": "text", "text": json.dumps(result.for_model())}],
                "structuredContent": result.for_model(),
                "isError": False,
            },
        }
        assert json.loads(response["result"]["content"][0]["text"]) == result.for_model()

    def test_rejection_is_a_tool_error(self) -> None:
        """A rejected call is a tool error the model reads, not a JSON-RPC error."""
        result = ToolResult(ok=False, code=Code.INVALID_ARGUMENTS, message="amount_cents: int")
        response = render_mcp(result, "req-1")
        assert response["id"] == "req-1"
        assert "error" not in response
        assert response["result"]["isError"] is True
        assert response["result"]["structuredContent"]["code"] == "INVALID_ARGUMENTS"
