"""Approvals across gateway restarts, and an approved call's re-check against a per-tool rate limit.

An approval decided with ``callgate approvals approve`` while no gateway runs is run by the next
``callgate gateway`` process that starts (a real subprocess over stdio, the demo shop upstream),
once, and only when the seal of the pending action verifies under the deployment's key.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from callgate.cli import main
from guard.stages.idempotency import approval_key
from guard.stores.sqlite import open_sqlite_stores
from tests.gateway.clients import client, payload, started
from tests.gateway.conftest import effects, shop_config
from tests.gateway.test_crash_restart import StdioGateway

REFUND = {"order_id": "RS", "amount_cents": 42}


def refund(gateway: StdioGateway) -> dict[str, object]:
    answer = gateway.request("tools/call", {"name": "shop_refund", "arguments": REFUND})
    structured: dict[str, object] = answer["_meta"]["callgate"]
    return structured


def config(tmp: Path, *, refund_delay: float = 0) -> Path:
    # A restarted gateway's first call also waits for its upstream to start: a loaded machine
    # must not turn that into a timeout.
    path = tmp / "gateway.yaml"
    path.write_text(shop_config(tmp, timeout=30, refund_delay=refund_delay))
    return path


def propose_then_stop(tmp: Path) -> str:
    """A gateway process proposes the refund (held for a human), then exits; the approval id."""
    first = StdioGateway(config(tmp))
    try:
        pending = refund(first)
    finally:
        first.close()
    assert pending["code"] == "CONFIRMATION_REQUIRED", pending
    approval = pending["approval_id"]
    assert isinstance(approval, str)
    return approval


def approve_offline(tmp: Path, approval: str) -> None:
    store = str(tmp / "gateway.db")
    out = CliRunner().invoke(
        main, ["approvals", "approve", approval, "--store", store, "--by", "al"]
    )
    assert out.exit_code == 0, out.output
    assert effects(tmp) == []  # no gateway runs: the decision is only recorded


class TestApprovedWhileDown:
    """The next gateway finds approved-but-not-run actions in the store and runs them once."""

    def test_the_next_gateway_runs_it_and_the_one_after_does_not(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Approved with no gateway up: the restarted one refunds once; a third start adds none."""
        monkeypatch.setenv("CALLGATE_MASKING_KEY", "deployment-key")
        approval = propose_then_stop(tmp_path)
        approve_offline(tmp_path, approval)
        second = StdioGateway(config(tmp_path))
        try:
            deadline = time.monotonic() + 60
            while not effects(tmp_path):  # the watcher runs what it adopted at startup
                assert time.monotonic() < deadline, "the approved refund never ran"
                time.sleep(0.05)
        finally:
            second.close()
        third = StdioGateway(config(tmp_path))
        try:
            # A call resumes every decided action the gateway watches before it is answered:
            # were the refund adopted again, it would have run by the time this returns.
            again = refund(third)
        finally:
            third.close()
        assert again["code"] in ("CONFIRMATION_REQUIRED", "OK"), again
        assert effects(tmp_path) == ["refund RS 42"]

    def test_a_gateway_stopping_mid_run_finishes_the_write_first(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Stdin closes while the adopted refund is at the upstream: the result is kept, not TIMEOUT."""
        monkeypatch.setenv("CALLGATE_MASKING_KEY", "deployment-key")
        approval = propose_then_stop(tmp_path)
        approve_offline(tmp_path, approval)
        second = StdioGateway(config(tmp_path, refund_delay=1.5))
        try:
            deadline = time.monotonic() + 60
            while not effects(tmp_path):  # made; its answer is held for 1.5 s
                assert time.monotonic() < deadline, "the approved refund never ran"
                time.sleep(0.01)
        finally:
            second.close()  # at once: the gateway drains the run before its upstream stops
        stores = open_sqlite_stores(tmp_path / "gateway.db")
        try:
            kept = stores.idempotency.record(approval_key(approval))
        finally:
            stores.close()
        assert kept is not None and kept.result is not None
        assert json.loads(kept.result)["code"] == "OK", kept.result
        assert effects(tmp_path) == ["refund RS 42"]

    def test_an_action_whose_seal_does_not_verify_is_not_run(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A restarted gateway holding another key adopts the action but refuses it: no refund."""
        monkeypatch.setenv("CALLGATE_MASKING_KEY", "key-of-the-first-process")
        approval = propose_then_stop(tmp_path)
        approve_offline(tmp_path, approval)
        monkeypatch.setenv("CALLGATE_MASKING_KEY", "another-key")
        second = StdioGateway(config(tmp_path))
        try:
            refund(second)  # resumes the adopted action first, which the seal check refuses
        finally:
            second.close()
        assert effects(tmp_path) == []


class TestApprovedAgainstARateLimit:
    """An approved call's re-check does not count again against its tool's rate limit."""

    def test_one_call_per_window_proposed_then_approved_runs(self, tmp_path: Path) -> None:
        """Propose (counts 1), approve: runs OK, not RATE_LIMITED; a new refund still is limited."""
        text = shop_config(
            tmp_path, extra_tools="      refund: {rate_limit: {calls: 1, seconds: 86400}}"
        )

        async def scenario() -> tuple[dict[str, object], str, dict[str, object]]:
            async with started(text, tmp_path) as gateway, client(gateway) as bot:
                pending = payload(await bot.call_tool("shop_refund", REFUND))
                assert pending["code"] == "CONFIRMATION_REQUIRED", pending
                approval = pending["approval_id"]
                assert isinstance(approval, str)
                ran = await gateway.decide(approval, approve=True, by="carol")
                other = payload(
                    await bot.call_tool("shop_refund", {"order_id": "R2", "amount_cents": 1})
                )
            return pending, str(ran.code), other

        _, code, other = anyio.run(scenario)
        assert code == "OK"
        assert effects(tmp_path) == ["refund RS 42"]
        assert other["code"] == "RATE_LIMITED"
