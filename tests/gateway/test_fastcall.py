"""The lean ``tools/call`` path of a stdio gateway: the SDK's answers, byte for byte as JSON, and
only the lines it can answer so."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from callgate.gateway._fastcall import FastCalls, Lines
from callgate.gateway.server import build_server
from tests.gateway.clients import started
from tests.gateway.conftest import effects, shop_config
from tests.gateway.line_client import INITIALIZE, INITIALIZED, MODERN_META, LineClient

DUPLICATED = (
    '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"shop_add_note",'
    '"arguments":{"order_id":"A-1","text":"x","text":"y"}%s}}'
)


def _call(
    request_id: int, name: str, arguments: Any, meta: dict[str, Any] | None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def _script(meta: dict[str, Any] | None) -> list[dict[str, Any] | str]:
    """Calls of every kind the guard answers: through, refused, held, replayed, malformed."""
    progress = {**(meta or {}), "progressToken": "p-1"}
    calls: list[dict[str, Any] | str] = [
        _call(10, "shop_get_order", {"order_id": "A-1"}, meta),
        _call(11, "shop_get_order", {}, meta),
        _call(12, "shop_nope", {}, meta),
        _call(13, "shop_add_note", {"order_id": "A-1", "text": "hi"}, meta),
        _call(14, "shop_add_note", {"order_id": "A-1", "text": "hi"}, meta),
        _call(15, "shop_refund", {"order_id": "A-1", "amount_cents": 100}, meta),
        _call(16, "shop_wipe", {"target": "all"}, meta),
        _call(17, "shop_get_order", ["A-1"], meta),
        _call(18, "shop_get_order", {"order_id": "B-2"}, progress),
        _call(19, "shop_get_order", {"order_id": 7}, meta),
        _call(20, "shop_fetch_page", {"url": "https://example.com/"}, meta),
        DUPLICATED % (21, "" if meta is None else ',"_meta":' + json.dumps(meta)),
    ]
    return calls


LIST = {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {"_meta": MODERN_META}}
"""A 2026-07-28 connection's first request (the SDK's: it decides the era)."""


def _config(tmp: Path, *, lean: bool) -> Path:
    text = shop_config(tmp, store=False).replace(
        "stdio: {principal: bot}", f"stdio: {{principal: bot, lean: {str(lean).lower()}}}"
    )
    path = tmp / "gateway.yaml"
    path.write_text(text)
    return path


_VOLATILE = ("approval_id", "trace_id", "idempotency_key")


def _normalised(answers: list[dict[str, Any]]) -> str:
    """The answers as JSON text with what differs by run (ids, traces) replaced by a name."""
    text = json.dumps(answers, sort_keys=True)
    found = set(re.findall(r"\"(?:" + "|".join(_VOLATILE) + r")\": \"([^\"]+)\"", text))
    found |= set(re.findall(r'\\"approval_id\\": \\"([^"\\]+)\\"', text))
    for value in found:
        text = text.replace(value, "<volatile>")
    return re.sub(r'(\\?"expires_at\\?": )[0-9.]+', r"\1<volatile>", text)


def _run(tmp: Path, *, lean: bool, modern: bool) -> tuple[list[dict[str, Any]], list[str]]:
    tmp.mkdir()
    answers = []
    with LineClient(_config(tmp, lean=lean)) as client:
        if modern:  # the first request opens the era: the SDK's, on both paths
            client.call(
                0,
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "tools/list",
                    "params": {"_meta": MODERN_META},
                },
            )
        else:
            client.handshake()
        for message in _script(MODERN_META if modern else None):
            request_id = json.loads(message)["id"] if isinstance(message, str) else message["id"]
            answers.append(client.call(request_id, message))
    return answers, effects(tmp)


class TestSameAnswers:
    """Every answer of the lean path equals the SDK's for the same calls, in both eras."""

    @pytest.mark.parametrize("modern", [False, True], ids=["handshake", "2026-07-28"])
    def test_each_answer_and_side_effect_equals_the_sdk_paths(
        self, tmp_path: Path, modern: bool
    ) -> None:
        """Through, refused, held, replayed, malformed and duplicate-key calls answer alike."""
        lean, lean_effects = _run(tmp_path / "lean", lean=True, modern=modern)
        sdk, sdk_effects = _run(tmp_path / "sdk", lean=False, modern=modern)
        assert _normalised(lean) == _normalised(sdk)
        assert lean_effects == sdk_effects
        verdicts = [a.get("result", {}).get("_meta", {}).get("callgate", {}) for a in lean]
        codes = [v.get("code") for v in verdicts]
        assert codes[:3] == ["OK", "INVALID_ARGUMENTS", "UNKNOWN_TOOL"]
        assert "CONFIRMATION_REQUIRED" in codes and "INVALID_JSON" in codes
        assert verdicts[4].get("replayed") is True  # the idempotent note, sent twice, ran once

    @pytest.mark.parametrize("modern", [False, True], ids=["handshake", "2026-07-28"])
    def test_progress_and_logs_come_before_the_answer_as_on_the_sdks(
        self, tmp_path: Path, modern: bool
    ) -> None:
        """Four progress notifications on the caller's token and three log messages, then the
        answer: the same messages in the same order as the SDK's path writes them."""
        seen = []
        for lean in (True, False):
            folder = tmp_path / str(lean)
            folder.mkdir()
            config = folder / "gateway.yaml"
            config.write_text(LIB.format(tmp=folder, lean=str(lean).lower()))
            meta: dict[str, Any] = {"progressToken": "tok-9"}
            with LineClient(config) as client:
                if modern:
                    meta |= {**MODERN_META, "io.modelcontextprotocol/logLevel": "debug"}
                    client.call(0, LIST)
                else:
                    client.handshake()
                client.send(_call(5, "lib_count", {}, meta))
                answer, notes = client.answer(5)
            assert answer["result"]["_meta"]["callgate"]["code"] == "OK"
            seen.append(notes)
        lean_notes, sdk_notes = seen
        assert lean_notes == sdk_notes
        assert [
            n["params"]["progress"] for n in lean_notes if n["method"].endswith("progress")
        ] == [
            1,
            2,
            3,
            4,
        ]
        assert {
            n["params"]["progressToken"] for n in lean_notes if "progressToken" in n["params"]
        } == {"tok-9"}
        assert [n["params"]["data"] for n in lean_notes if n["method"].endswith("message")] == [
            "counted 1",
            "counted 2",
            "counted 3",
        ]


LIB = """\
upstreams:
  lib:
    command: [python, -m, tests.gateway.proxy_upstream]
    namespace: lib
    timeout: 20
    connect_timeout: 30
principals:
  bot:
    tools: ["*"]
serve:
  stdio: {{principal: bot, lean: {lean}}}
"""


class _Pipe:
    """The output pipe of the stdio server, kept in memory: each line written is one answer."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.wrote = anyio.Event()

    def write(self, data: bytes) -> None:
        self.lines.extend(json.loads(line) for line in data.splitlines())
        self.wrote.set()

    async def drain(self) -> None:
        return None

    async def next_answer(self) -> dict[str, Any]:
        with anyio.fail_after(30):
            while not self.lines:
                self.wrote = anyio.Event()
                await self.wrote.wait()
        return self.lines.pop(0)


def _line(message: dict[str, Any] | str) -> bytes:
    return (message if isinstance(message, str) else json.dumps(message)).encode() + b"\n"


class TestWhatItTakes:
    """The lean path answers plain calls only; every other line is left to the SDK."""

    async def _fast(self, tmp_path: Path, body: Any) -> None:
        async with started(shop_config(tmp_path, store=False), tmp_path) as gateway:
            server = build_server(gateway, lambda ctx: ("bot", "stdio-test"))
            pipe = _Pipe()
            fast = FastCalls(
                gateway, server, principal="bot", transport_session="stdio-test", lines=Lines(pipe)
            )
            try:
                await body(fast, pipe)
            finally:
                await fast.aclose()

    def test_a_handshake_connection_is_taken_once_initialized(self, tmp_path: Path) -> None:
        """Before the handshake completes nothing is taken; after it a plain call is answered."""

        async def body(fast: FastCalls, pipe: _Pipe) -> None:
            call = _call(3, "shop_get_order", {"order_id": "A-1"}, None)
            assert not fast.offer(_line({**INITIALIZE, "id": 1}))
            assert not fast.offer(_line(call))  # not answered yet: the SDK refuses it
            fast.answered(
                json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}})
            )
            assert not fast.offer(_line(call))  # answered, but not yet initialized
            assert not fast.offer(_line(INITIALIZED))
            assert fast.offer(_line(call))
            answer = await pipe.next_answer()
            assert answer["id"] == 3 and answer["result"]["_meta"]["callgate"]["code"] == "OK"
            assert "resultType" not in answer["result"]  # a handshake-era answer

        anyio.run(self._fast, tmp_path, body)

    def test_lines_it_cannot_answer_as_the_sdk_would_are_left(self, tmp_path: Path) -> None:
        """Duplicates, smuggled raw arguments, retries with an answer, bad params: the SDK's."""

        async def body(fast: FastCalls, pipe: _Pipe) -> None:
            assert not fast.offer(
                _line(
                    {
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "tools/list",
                        "params": {"_meta": MODERN_META},
                    }
                )
            )
            hostile: list[dict[str, Any] | str] = [
                DUPLICATED % (1, ',"_meta":' + json.dumps(MODERN_META)),
                _call(
                    2,
                    "shop_get_order",
                    {"order_id": "A"},
                    {**MODERN_META, "io.callgate/raw-arguments": "{}"},
                ),
                {
                    **_call(3, "shop_get_order", {"order_id": "A"}, MODERN_META),
                    "params": {
                        "name": "shop_get_order",
                        "arguments": {},
                        "requestState": "x",
                        "_meta": MODERN_META,
                    },
                },
                _call(4, "shop_get_order", ["A"], MODERN_META),
                _call(
                    5,
                    "shop_get_order",
                    {"order_id": "A"},
                    {
                        "io.modelcontextprotocol/protocolVersion": "1999-01-01",
                        "io.modelcontextprotocol/clientCapabilities": {},
                    },
                ),
                _call(
                    6, "shop_get_order", {"order_id": "A"}, None
                ),  # no envelope on a 2026 connection
                _call(7, 42, {}, MODERN_META),
                '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":',
            ]
            for message in hostile:
                assert not fast.offer(_line(message)), message
            assert fast.taken == 0 and not pipe.lines
            assert fast.offer(_line(_call(9, "shop_get_order", {"order_id": "A"}, MODERN_META)))
            answer = await pipe.next_answer()
            assert answer["result"]["resultType"] == "complete"
            assert "io.modelcontextprotocol/serverInfo" in answer["result"]["_meta"]

        anyio.run(self._fast, tmp_path, body)

    def test_a_client_asked_over_the_back_channel_is_left_to_the_sdk(self, tmp_path: Path) -> None:
        """A handshake-era client that declared elicitation: its calls go to the SDK's session."""

        async def body(fast: FastCalls, pipe: _Pipe) -> None:
            init = {
                **INITIALIZE,
                "id": 1,
                "params": {**INITIALIZE["params"], "capabilities": {"elicitation": {}}},
            }  # type: ignore[dict-item]
            fast.offer(_line(init))
            fast.answered(
                json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}})
            )
            fast.offer(_line(INITIALIZED))
            assert not fast.offer(
                _line(_call(2, "shop_refund", {"order_id": "A", "amount_cents": 5}, None))
            )
            assert effects(tmp_path) == []

        anyio.run(self._fast, tmp_path, body)

    def test_a_cancelled_call_is_not_answered_and_a_stranger_is_the_sdks(
        self, tmp_path: Path
    ) -> None:
        """notifications/cancelled for a taken call cancels it unanswered; another id: the SDK's."""

        async def body(fast: FastCalls, pipe: _Pipe) -> None:
            fast.offer(
                _line(
                    {
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "tools/list",
                        "params": {"_meta": MODERN_META},
                    }
                )
            )
            assert fast.offer(_line(_call(1, "shop_hang", {}, MODERN_META)))
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 99},
            }
            assert not fast.offer(_line(cancel))
            assert fast.offer(_line({**cancel, "params": {"requestId": 1}}))
            assert fast.offer(_line(_call(2, "shop_get_order", {"order_id": "A"}, MODERN_META)))
            answer = await pipe.next_answer()
            assert answer["id"] == 2 and not pipe.lines

        anyio.run(self._fast, tmp_path, body)
