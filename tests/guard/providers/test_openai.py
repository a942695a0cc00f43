from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, create_model

from guard.codes import Code
from guard.providers import (
    openai_chat_tools,
    openai_responses_tools,
    parse_openai_chat,
    parse_openai_responses,
    render_openai_chat,
    render_openai_responses,
)
from guard.providers.call import ProposedCall
from guard.registry import ToolRegistry, ToolSpec
from guard.result import ToolResult
from tests.guard.providers.schema_checks import assert_valid_schema, subschemas
from tests.guard.providers.tools import (
    GET_ORDER,
    OPEN_METADATA,
    RECURSIVE,
    REFUND_ORDER,
    TITLED,
    VALID_REFUND,
)

STRICT_REFUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {
            "description": "The order id, like ORD-1001.",
            "pattern": r"^ORD-[0-9]{4}$",
            "type": "string",
        },
        "amount_cents": {
            "description": "Integer cents; 25.90 is 2590.",
            "exclusiveMinimum": 0,
            "type": "integer",
        },
        "currency": {"enum": ["BRL", "USD"], "type": "string"},
        "note": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "description": "Optional note for the ledger.",
        },
        "contact": {
            "type": "object",
            "description": "Who to notify.",
            "properties": {
                "channel": {"enum": ["email", "sms"], "type": "string"},
                "address": {
                    "type": "string",
                    "description": "Where to send the notice. (maxLength: 120)",
                },
            },
            "required": ["channel", "address"],
            "additionalProperties": False,
        },
    },
    "required": ["order_id", "amount_cents", "currency", "note", "contact"],
    "additionalProperties": False,
}

FORBIDDEN_IN_STRICT = {
    "title",
    "default",
    "$ref",
    "$defs",
    "allOf",
    "oneOf",
    "minLength",
    "maxLength",
}


def _result(**overrides: Any) -> ToolResult:
    fields: dict[str, Any] = {
        "ok": True,
        "code": Code.OK,
        "message": "Order found.",
        "data": {"order_id": "ORD-1001", "status": "paid"},
        "call_id": "call_1",
    }
    return ToolResult(**{**fields, **overrides})


class TestChatTools:
    def test_read_tool_shape(self) -> None:
        """A Chat Completions tool is a function: name, description, strict parameters, flag."""
        assert openai_chat_tools([GET_ORDER]) == [
            {
                "type": "function",
                "function": {
                    "name": "get_order",
                    "description": "Look up one order. Use before any refund.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "order_id": {
                                "description": "The order id, like ORD-1001.",
                                "pattern": r"^ORD-[0-9]{4}$",
                                "type": "string",
                            }
                        },
                        "required": ["order_id"],
                        "additionalProperties": False,
                    },
                    "strict": True,
                },
            }
        ]

    def test_write_tool_strict_schema(self) -> None:
        """Nested models inlined, optional fields as null unions, unsupported limits noted."""
        (tool,) = openai_chat_tools([REFUND_ORDER])
        assert tool["function"]["strict"] is True
        assert tool["function"]["parameters"] == STRICT_REFUND_SCHEMA

    def test_accepts_a_registry(self) -> None:
        """A ToolRegistry renders its specs, not its names."""
        tools = openai_chat_tools(ToolRegistry([GET_ORDER, REFUND_ORDER]))
        assert [tool["function"]["name"] for tool in tools] == ["get_order", "refund_order"]

    def test_non_strict_on_request(self) -> None:
        """With strict=False the plain schema goes out, flagged non-strict."""
        (tool,) = openai_chat_tools([REFUND_ORDER], strict=False)
        assert tool["function"]["strict"] is False
        assert "$defs" in tool["function"]["parameters"]
        assert tool["function"]["parameters"]["required"] == [
            "order_id",
            "amount_cents",
            "currency",
            "contact",
        ]

    @pytest.mark.parametrize("spec", [OPEN_METADATA, RECURSIVE], ids=["open-object", "recursive"])
    def test_falls_back_when_no_strict_form(self, spec: Any) -> None:
        """A schema strict mode cannot express goes out as it is, with strict false."""
        (tool,) = openai_chat_tools([spec])
        assert tool["function"]["strict"] is False
        assert tool["function"]["parameters"]["properties"].keys() == (
            spec.arguments.model_fields.keys()
        )

    def test_default_of_non_nullable_field_is_required_and_noted(self) -> None:
        """A defaulted int stays non-null but required; its default moves to the description."""
        (tool,) = openai_chat_tools([TITLED])
        parameters = tool["function"]["parameters"]
        assert parameters["required"] == ["title", "limit"]
        assert parameters["properties"]["limit"] == {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "description": "default: 10",
        }
        assert "title" in parameters["properties"]


class TestStrictRules:
    @pytest.mark.parametrize("spec", [GET_ORDER, REFUND_ORDER, TITLED], ids=lambda s: s.name)
    def test_every_object_is_closed_and_fully_required(self, spec: Any) -> None:
        """Every object has additionalProperties false and requires all its properties."""
        (tool,) = openai_chat_tools([spec])
        objects = [
            n for n in subschemas(tool["function"]["parameters"]) if n.get("type") == "object"
        ]
        assert objects
        for node in objects:
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])

    @pytest.mark.parametrize("spec", [GET_ORDER, REFUND_ORDER, TITLED], ids=lambda s: s.name)
    def test_no_unsupported_keywords(self, spec: Any) -> None:
        """No strict schema node carries a title, default, reference or unsupported constraint."""
        (tool,) = openai_chat_tools([spec])
        for node in subschemas(tool["function"]["parameters"]):
            assert not FORBIDDEN_IN_STRICT & node.keys(), node

    def test_strict_schema_is_valid_json_schema(self) -> None:
        """The strict schema is valid draft 2020-12, takes a valid call, refuses an extra field."""
        (tool,) = openai_chat_tools([REFUND_ORDER])
        assert_valid_schema(tool["function"]["parameters"], VALID_REFUND)

    def test_non_strict_schema_is_valid_json_schema(self) -> None:
        """The plain schema is valid draft 2020-12 too, with its references resolved."""
        (tool,) = openai_chat_tools([REFUND_ORDER], strict=False)
        assert_valid_schema(tool["function"]["parameters"], VALID_REFUND)

    def test_strict_valid_arguments_validate_with_the_model(self) -> None:
        """What strict mode lets the model send, the argument model accepts (nulls included)."""
        REFUND_ORDER.arguments.model_validate_json(json.dumps(VALID_REFUND), strict=True)


class TestResponsesTools:
    def test_shape(self) -> None:
        """A Responses tool is flat: type, name, description, parameters, strict."""
        (chat,) = openai_chat_tools([REFUND_ORDER])
        assert openai_responses_tools([REFUND_ORDER]) == [{"type": "function", **chat["function"]}]

    def test_strict_flag_always_written(self) -> None:
        """strict is written out even when false, because the Responses API assumes true."""
        (tool,) = openai_responses_tools([GET_ORDER], strict=False)
        assert tool["strict"] is False


class TestParseChat:
    def test_message_round_trip(self) -> None:
        """An assistant message's tool call parses to arguments the argument model accepts."""
        arguments = json.dumps(VALID_REFUND)
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "refund_order", "arguments": arguments},
                }
            ],
        }
        (proposed,) = parse_openai_chat(message)
        assert proposed == ProposedCall(
            name="refund_order", arguments=arguments, call_id="call_abc", provider="openai_chat"
        )
        REFUND_ORDER.arguments.model_validate_json(proposed.arguments, strict=True)

    def test_arguments_text_kept_verbatim(self) -> None:
        """The arguments are the model's text, spacing and all, not a re-encoding."""
        text = '{ "order_id" : "ORD-1001" }'
        calls = [
            {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": text}}
        ]
        assert parse_openai_chat(calls)[0].arguments == text

    def test_message_without_tool_calls(self) -> None:
        """An assistant message that only talks has no calls."""
        assert parse_openai_chat({"role": "assistant", "content": "Hello"}) == []

    def test_missing_arguments_become_empty_text(self) -> None:
        """A call without arguments gets "" so the parse stage answers INVALID_JSON."""
        (proposed,) = parse_openai_chat(
            [{"id": "c1", "type": "function", "function": {"name": "x"}}]
        )
        assert proposed.arguments == ""
        assert proposed.name == "x"

    def test_missing_function_becomes_nameless_call(self) -> None:
        """A call without a function object still gets an answer, under its id."""
        (proposed,) = parse_openai_chat([{"id": "c1", "type": "custom"}])
        assert (proposed.name, proposed.arguments, proposed.call_id) == ("", "", "c1")

    def test_object_arguments_are_dumped(self) -> None:
        """Arguments sent as an object (some compatible servers do) become JSON text."""
        calls = [
            {"id": "c1", "function": {"name": "get_order", "arguments": {"order_id": "ORD-1001"}}}
        ]
        assert json.loads(parse_openai_chat(calls)[0].arguments) == {"order_id": "ORD-1001"}

    @pytest.mark.parametrize(
        "container",
        [{"choices": []}, "tool_calls", [42], {"role": "assistant", "tool_calls": "x"}],
        ids=["completion", "string", "non-object-entry", "tool-calls-not-a-list"],
    )
    def test_rejects_non_provider_containers(self, container: Any) -> None:
        """Something that is not a message or a tool-call list is a caller bug: ValueError."""
        with pytest.raises(ValueError):
            parse_openai_chat(container)


class TestParseResponses:
    def test_function_calls_only(self) -> None:
        """Only function_call items are calls; messages and reasoning are skipped."""
        output: list[dict[str, Any]] = [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_order",
                "arguments": '{"order_id":"ORD-1001"}',
            },
            {"type": "message", "role": "assistant", "content": []},
        ]
        assert parse_openai_responses(output) == [
            ProposedCall(
                name="get_order",
                arguments='{"order_id":"ORD-1001"}',
                call_id="call_1",
                provider="openai_responses",
            )
        ]

    def test_accepts_the_response(self) -> None:
        """A whole response works as well as its output list."""
        response = {
            "id": "resp_1",
            "output": [{"type": "function_call", "call_id": "c", "name": "n"}],
        }
        (proposed,) = parse_openai_responses(response)
        assert (proposed.call_id, proposed.arguments) == ("c", "")

    def test_round_trip(self) -> None:
        """A Responses function call parses to arguments the argument model accepts."""
        item = {"type": "function_call", "call_id": "c", "name": "refund_order"}
        (proposed,) = parse_openai_responses([{**item, "arguments": json.dumps(VALID_REFUND)}])
        REFUND_ORDER.arguments.model_validate_json(proposed.arguments, strict=True)

    @pytest.mark.parametrize("container", [{"id": "resp_1"}, None, [None]], ids=repr)
    def test_rejects_non_provider_containers(self, container: Any) -> None:
        """Something that is not an output list or a response is a caller bug: ValueError."""
        with pytest.raises(ValueError):
            parse_openai_responses(container)


class TestRender:
    def test_chat_tool_message(self) -> None:
        """The tool message quotes the call id and carries the model's payload as JSON text."""
        result = _result()
        message = render_openai_chat(result, "call_9")
        assert message == {
            "role": "tool",
            "tool_call_id": "call_9",
            "content": json.dumps(result.for_model(), ensure_ascii=False),
        }
        assert json.loads(message["content"]) == result.for_model()

    def test_responses_output_item(self) -> None:
        """The function_call_output item quotes the call id and parses back to the payload."""
        result = _result(ok=False, code=Code.NOT_FOUND, message="No such order.", data=None)
        item = render_openai_responses(result, "call_2")
        assert item["type"] == "function_call_output"
        assert item["call_id"] == "call_2"
        assert json.loads(item["output"]) == result.for_model()

    def test_call_id_defaults_to_the_results(self) -> None:
        """Without an explicit id the result's own call id is quoted."""
        assert render_openai_chat(_result())["tool_call_id"] == "call_1"
        assert render_openai_responses(_result())["call_id"] == "call_1"

    def test_no_call_id_is_a_bug(self) -> None:
        """A result with no call id to quote cannot be rendered."""
        with pytest.raises(ValueError):
            render_openai_chat(_result(call_id=None))

    def test_non_ascii_kept(self) -> None:
        """Non-ASCII text goes out as itself, not as escapes (fewer tokens)."""
        message = render_openai_chat(_result(message="Pedido não encontrado."))
        assert "não" in message["content"]


class TestStrictConversion:
    def test_ignoring_nested_model_is_closed(self) -> None:
        """A nested model that ignores extra keys still gets additionalProperties false."""

        class Loose(BaseModel):
            street: str

        class Args(BaseModel):
            model_config = ConfigDict(extra="forbid")
            address: Loose

        (tool,) = openai_chat_tools([_spec(Args)])
        assert tool["function"]["strict"] is True
        assert (
            tool["function"]["parameters"]["properties"]["address"]["additionalProperties"] is False
        )

    @pytest.mark.parametrize("annotation", [Any, dict[str, Any]], ids=["any", "open-dict"])
    def test_untyped_field_is_not_strict(self, annotation: Any) -> None:
        """A field that accepts any value or any keys has no strict form."""
        Args = create_model("Args", __config__=ConfigDict(extra="forbid"), value=(annotation, ...))
        (tool,) = openai_chat_tools([_spec(Args)])
        assert tool["function"]["strict"] is False

    def test_lookaround_pattern_moves_to_description(self) -> None:
        """A pattern strict mode cannot compile is noted in the description instead."""

        class Args(BaseModel):
            model_config = ConfigDict(extra="forbid", regex_engine="python-re")
            code: str = Field(pattern=r"^(?!X)[A-Z]+$", description="A code.")

        (tool,) = openai_chat_tools([_spec(Args)])
        assert tool["function"]["parameters"]["properties"]["code"] == {
            "type": "string",
            "description": "A code. (pattern: ^(?!X)[A-Z]+$)",
        }


def _spec(arguments: type[BaseModel]) -> ToolSpec:
    return ToolSpec(name="t", description="A tool.", arguments=arguments, handler=lambda a, c: {})
