"""The lean upstream path of a stdio connection (``_stdio.RawCalls``), fed the lines an upstream
could write: answers at either end of the line, errors, garbage, notifications that look like
answers, progress and log messages while a call is out."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.gateway._stdio import NotSent, RawCalls, RawRefused, TooLarge

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


class _Upstream:
    """The far side of the pipe: what the calls wrote, and a way to answer them."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.wrote = anyio.Event()
        self.logs: list[Any] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(json.loads(data))
        self.wrote.set()

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def request_id(self) -> str:
        with anyio.fail_after(10):
            while not self.sent:
                self.wrote = anyio.Event()
                await self.wrote.wait()
        return str(self.sent[-1]["id"])


async def _exchange(
    reply: Callable[[RawCalls, str, _Upstream], Awaitable[None]],
    *,
    on_progress: Any = None,
) -> tuple[Any, _Upstream]:
    """One call, answered by ``reply``: its result, or the exception it raised."""
    upstream = _Upstream()
    calls = RawCalls(on_log=upstream.on_log)
    calls.bind(upstream.send)
    outcome: list[Any] = []

    async def call() -> None:
        try:
            outcome.append(
                await calls.request("tools/call", {"name": "t"}, on_progress=on_progress)
            )
        except Exception as err:
            outcome.append(err)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await reply(calls, await upstream.request_id(), upstream)
    return outcome[0], upstream


def _answer(request_id: str, result: Any, *, id_last: bool = False) -> bytes:
    body = {"jsonrpc": "2.0", "result": result, "id": request_id}
    if not id_last:
        body = {"jsonrpc": "2.0", "id": request_id, "result": result}
    return json.dumps(body).encode()


class TestAnswers:
    """Answers reach the call that asked, as sent; everything else is not the path's."""

    @settings(max_examples=60, deadline=None)
    @given(result=st.dictionaries(st.text(), JSON, max_size=5), id_last=st.booleans())
    def test_any_result_comes_back_as_sent_with_the_id_at_either_end(
        self, result: dict[str, Any], id_last: bool
    ) -> None:
        """Integers stay integers, nesting and strings unchanged, wherever the SDK puts the id."""

        async def reply(calls: RawCalls, request_id: str, upstream: _Upstream) -> None:
            assert await calls.take(_answer(request_id, result, id_last=id_last))

        got, _ = anyio.run(_exchange, reply)
        assert got == result
        assert json.dumps(got, sort_keys=True) == json.dumps(result, sort_keys=True)

    def test_an_error_answer_is_a_refusal_with_its_code(self) -> None:
        """A JSON-RPC error (even -32000, the SDK's own closed-connection code) is the upstream's."""

        async def reply(calls: RawCalls, request_id: str, upstream: _Upstream) -> None:
            error = {"code": -32000, "message": "no such order"}
            line = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
            assert await calls.take(line)

        got, _ = anyio.run(_exchange, reply)
        assert isinstance(got, RawRefused) and got.code == -32000

    @pytest.mark.parametrize(
        "line",
        [
            b'{"jsonrpc":"2.0","id":"%s","result":{"content":[',  # cut off
            b'{"jsonrpc":"2.0","id":"%s","result":\xff}',  # not UTF-8
        ],
    )
    def test_a_garbled_answer_fails_the_call_as_a_lost_connection(self, line: bytes) -> None:
        """The upstream may have acted: never a refusal (nothing done) nor a hang."""

        async def reply(calls: RawCalls, request_id: str, upstream: _Upstream) -> None:
            assert await calls.take(line.replace(b"%s", request_id.encode()))

        got, _ = anyio.run(_exchange, reply)
        assert isinstance(got, anyio.EndOfStream)

    def test_lines_that_look_like_answers_are_left_to_the_sdk(self) -> None:
        """A request or notification naming the id, an answer to an SDK id, a stranger's id."""

        async def reply(calls: RawCalls, request_id: str, upstream: _Upstream) -> None:
            lookalikes = [
                {"jsonrpc": "2.0", "id": request_id, "method": "ping"},
                {"jsonrpc": "2.0", "id": 3, "result": {"text": request_id}},
                {"jsonrpc": "2.0", "id": request_id + "0", "result": {}},
                {"jsonrpc": "2.0", "method": "notifications/x", "params": {"id": request_id}},
            ]
            for message in lookalikes:
                assert not await calls.take(json.dumps(message).encode()), message
            text = {"content": [{"type": "text", "text": "notifications/progress"}]}
            assert await calls.take(_answer(request_id, text))

        got, _ = anyio.run(_exchange, reply)
        assert got == {"content": [{"type": "text", "text": "notifications/progress"}]}

    def test_an_oversized_answer_fails_only_its_call(self) -> None:
        """The reader dropped it as it arrived: TooLarge, with the limit."""

        async def reply(calls: RawCalls, request_id: str, upstream: _Upstream) -> None:
            assert not calls.too_large(7, 100)  # an SDK request's: the SDK's
            assert calls.too_large(request_id, 100)

        got, _ = anyio.run(_exchange, reply)
        assert isinstance(got, TooLarge) and got.size == 100


class TestEnd:
    """A connection that ends fails what is out and sends nothing more."""

    def test_calls_out_fail_and_later_ones_are_never_sent(self) -> None:
        """Out when it ended: EndOfStream (may have acted); after: NotSent (nothing written)."""

        async def reply(calls: RawCalls, request_id: str, upstream: _Upstream) -> None:
            calls.end()
            with pytest.raises(NotSent):
                await calls.request("tools/call", {"name": "t"})
            assert len(upstream.sent) == 1

        got, _ = anyio.run(_exchange, reply)
        assert isinstance(got, anyio.EndOfStream)

    def test_an_abandoned_call_is_cancelled_upstream(self) -> None:
        """A call cancelled (its deadline) sends notifications/cancelled for its own id."""

        async def scenario() -> list[dict[str, Any]]:
            upstream = _Upstream()
            calls = RawCalls(on_log=upstream.on_log)
            calls.bind(upstream.send)
            with anyio.move_on_after(0.05):
                await calls.request("tools/call", {"name": "t"})
            with anyio.fail_after(10):
                while len(upstream.sent) < 2:
                    upstream.wrote = anyio.Event()
                    await upstream.wrote.wait()
            return upstream.sent

        first, cancel = anyio.run(scenario)
        assert cancel["method"] == "notifications/cancelled"
        assert cancel["params"]["requestId"] == first["id"]


class TestReports:
    """Progress and log messages sent while a call is out reach it before its answer."""

    def test_progress_on_the_calls_token_and_logs_are_relayed_in_order(self) -> None:
        """Both handled before the answer is; another token's progress is the SDK's."""
        seen: list[Any] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(("progress", progress, total, message))

        async def reply(calls: RawCalls, request_id: str, upstream: _Upstream) -> None:
            token = upstream.sent[0]["params"]["_meta"]["progressToken"]
            note = {"jsonrpc": "2.0", "method": "notifications/progress"}
            assert not await calls.take(
                json.dumps({**note, "params": {"progressToken": "other", "progress": 1}}).encode()
            )
            assert await calls.take(
                json.dumps(
                    {**note, "params": {"progressToken": token, "progress": 2, "total": 4}}
                ).encode()
            )
            log = {"method": "notifications/message", "params": {"level": "info", "data": "half"}}
            assert await calls.take(json.dumps({"jsonrpc": "2.0", **log}).encode())
            seen.append(("logs", list(upstream.logs)))
            assert await calls.take(_answer(request_id, {"content": []}))

        got, _ = anyio.run(functools.partial(_exchange, reply, on_progress=on_progress))
        assert got == {"content": []}
        assert seen == [("progress", 2, 4, None), ("logs", ["half"])]

    def test_with_no_call_out_nothing_is_taken(self) -> None:
        """Between calls a log message is the SDK's (logged, nobody's to relay)."""

        async def scenario() -> bool:
            calls = RawCalls(on_log=_Upstream().on_log)
            line = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1}}'
            return await calls.take(line)

        assert anyio.run(scenario) is False
