"""Upstream faults sorted by what they say about the world: refused, lost, or never sent.

A write is "outcome unknown" only when it may have reached the upstream; a JSON-RPC error is a
refusal whatever its code; a connection that died between calls is reconnected before anything is
sent. Side effects and calls are counted on the upstreams themselves.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
from pathlib import Path

import anyio
import pytest

from tests.gateway.clients import client, payload, started
from tests.gateway.conftest import HERE, effects, shop_config


class TestJsonRpcErrors:
    """-32000 and -32001 from an upstream are its answer, not a lost connection or a timeout."""

    def test_the_sdk_s_own_codes_from_an_upstream_are_refusals(self, tmp_path: Path) -> None:
        """A read is sent once (not retried); a write is refused, not 'outcome unknown'."""
        calls = tmp_path / "calls.txt"
        text = shop_config(tmp_path).replace(
            "upstreams:\n",
            f"upstreams:\n  broken:\n    command: [python, {HERE / 'broken_upstream.py'}]\n"
            f'    env: {{BROKEN_CALLS: "{calls}"}}\n'
            "    tools:\n      refuse_closed: {effect: read}\n"
            "      refuse_timeout: {effect: write, risk: low}\n",
        )

        async def scenario() -> None:
            async with started(text, tmp_path) as gateway, client(gateway) as bot:
                read = payload(await bot.call_tool("refuse_closed", {}))
                write = payload(await bot.call_tool("refuse_timeout", {}))
                after = payload(await bot.call_tool("shop_get_order", {"order_id": "A"}))
            assert read["code"] == "UPSTREAM_REJECTED" and "-32000" in read["message"]
            assert write["code"] == "UPSTREAM_REJECTED" and write.get("outcome") != "unknown"
            assert calls.read_text().splitlines() == ["refuse_closed", "refuse_timeout"]
            assert after["code"] == "OK"

        anyio.run(scenario)


class TestNeverSent:
    """A write after the upstream died between calls goes to the restarted upstream, once."""

    def test_a_write_after_a_crash_between_calls_runs_on_the_restarted_upstream(
        self, tmp_path: Path
    ) -> None:
        """The shop is killed from outside; the next non-idempotent write runs once, not 'unknown'."""
        pid_file = tmp_path / "pid.txt"
        text = shop_config(tmp_path, timeout=10, extra_tools="      wipe: {risk: low}").replace(
            "    env: {", f'    env: {{SHOP_PID_FILE: "{pid_file}", '
        )

        async def scenario() -> None:
            async with started(text, tmp_path) as gateway, client(gateway) as bot:
                first = payload(await bot.call_tool("shop_wipe", {"target": "one"}))
                shop = gateway.upstreams[0]
                ended = shop._ended
                assert ended is not None
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                with anyio.fail_after(20):
                    await ended.wait()  # the gateway saw the connection end
                second = payload(await bot.call_tool("shop_wipe", {"target": "two"}))
            assert first["code"] == "OK"
            assert second["code"] == "OK", second
            assert effects(tmp_path) == ["wipe one", "wipe two"]

        anyio.run(scenario)


class TestOversized:
    """A result over max_result_bytes is dropped as it arrives, never held nor parsed whole."""

    def test_a_50_mb_result_costs_no_more_than_a_few_megabytes(self, tmp_path: Path) -> None:
        """Both id placements: UPSTREAM_REJECTED, peak RSS grows < 60 MB, the next call answers."""
        calls = tmp_path / "calls.txt"
        text = shop_config(tmp_path).replace(
            "upstreams:\n",
            f"upstreams:\n  big:\n    command: [python, {HERE / 'big_upstream.py'}]\n"
            f'    env: {{BIG_CALLS: "{calls}", BIG_MB: "50"}}\n    timeout: 60\n',
        )

        async def scenario() -> tuple[dict[str, object], ...]:
            async with started(text, tmp_path) as gateway, client(gateway) as bot:
                last = payload(await bot.call_tool("blob", {}))
                first = payload(await bot.call_tool("blob_first", {}))
                small = payload(await bot.call_tool("small", {}))
            return last, first, small

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        last, first, small = anyio.run(scenario)
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert last["code"] == first["code"] == "UPSTREAM_REJECTED"
        assert "over 1000000 bytes" in str(last["message"])
        assert small["code"] == "OK"
        assert calls.read_text().splitlines() == ["blob", "blob_first", "small"]  # none retried
        assert grown_mb < 60, grown_mb


class TestStartupNotes:
    """What the gateway says at startup about an upstream, without refusing it."""

    def test_an_unannotated_upstream_is_named_at_startup(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """No hints at all: a warning says every call will wait for a human, and how to change it."""
        text = shop_config(tmp_path).replace(
            "upstreams:\n",
            f"upstreams:\n  plain:\n    command: [python, {HERE / 'plain_upstream.py'}]\n",
        )

        async def scenario() -> dict[str, object]:
            async with started(text, tmp_path) as gateway, client(gateway) as bot:
                return payload(await bot.call_tool("lookup", {"key": "k"}))

        with caplog.at_level(logging.WARNING, logger="callgate.gateway"):
            looked_up = anyio.run(scenario)
        warned = [
            r.getMessage() for r in caplog.records if "declares no annotations" in r.getMessage()
        ]
        assert len(warned) == 1 and "plain" in warned[0] and "effect: read" in warned[0]
        assert looked_up["code"] == "CONFIRMATION_REQUIRED"
