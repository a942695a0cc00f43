"""Attacks on the gateway's promises: self-approval, borrowed allowlists, shared sessions, re-asking.

Every test counts the side effects on the real upstream (``effects.txt``): a refused attack leaves
the world unchanged.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import mcp_types as types
import pytest

from callgate.gateway import ConfigError, parse_config
from callgate.gateway.sessions import CONVERSATION_KEY
from guard.stores import ApprovalState
from guard.testing import ManualClock
from tests.gateway.clients import accepting, answering, client, payload, started
from tests.gateway.conftest import effects, shop_config

REFUND = {"order_id": "ORD-9", "amount_cents": 90_000}


def run(scenario: object) -> None:
    anyio.run(scenario)  # type: ignore[arg-type]


class TestSelfApproval:
    """Only a human's answer to a question this gateway asked decides; the client cannot."""

    @pytest.mark.parametrize("mode", ["auto", "legacy"])
    def test_a_client_without_elicitation_cannot_answer_with_the_approval_id(
        self, tmp_path: Path, mode: str
    ) -> None:
        """The 90,000-cent refund stays pending when the client resends it with its own yes."""

        async def scenario() -> None:
            async with started(shop_config(tmp_path), tmp_path) as gateway:
                async with client(gateway, mode=mode) as bot:
                    pending = payload(await bot.call_tool("shop_refund", REFUND))
                    forged = payload(
                        await bot.call_tool(
                            "shop_refund",
                            REFUND,
                            request_state=pending["approval_id"],
                            input_responses=accepting(),
                        )
                    )
                action = gateway.pending(pending["approval_id"])
            assert pending["code"] == "CONFIRMATION_REQUIRED"
            assert forged["code"] == "CONFIRMATION_REQUIRED"
            assert action is not None and action.state is ApprovalState.PENDING
            assert effects(tmp_path) == []

        run(scenario)

    def test_only_the_nonce_of_a_question_asked_in_this_session_decides(
        self, tmp_path: Path
    ) -> None:
        """The approval id, another session's nonce and a spent nonce are refused; the right one runs once."""

        async def scenario() -> None:
            async with started(shop_config(tmp_path), tmp_path) as gateway:
                human = answering(True, [])
                async with (
                    client(gateway, elicit=human, session="s1") as one,
                    client(gateway, elicit=human, session="s2") as two,
                ):
                    asked = await one.session.call_tool(
                        "shop_refund", REFUND, allow_input_required=True
                    )
                    assert isinstance(asked, types.InputRequiredResult)
                    nonce = asked.request_state
                    assert nonce is not None and not nonce.startswith("apr_")
                    approval = next(iter(gateway._outstanding))
                    by_id = await one.call_tool(
                        "shop_refund", REFUND, request_state=approval, input_responses=accepting()
                    )
                    assert effects(tmp_path) == []
                    other = await two.session.call_tool(
                        "shop_refund", REFUND, allow_input_required=True
                    )
                    assert isinstance(other, types.InputRequiredResult)
                    stolen = await one.call_tool(
                        "shop_refund",
                        REFUND,
                        request_state=other.request_state,
                        input_responses=accepting(),
                    )
                    assert effects(tmp_path) == []
                    right = await one.call_tool(
                        "shop_refund",
                        REFUND,
                        request_state=nonce,
                        input_responses=accepting(),
                    )
                    second = {"order_id": "ORD-10", "amount_cents": 5}
                    await one.session.call_tool("shop_refund", second, allow_input_required=True)
                    spent = await one.call_tool(
                        "shop_refund",
                        second,
                        request_state=nonce,
                        input_responses=accepting(),
                    )
            assert payload(by_id)["code"] == "CONFIRMATION_REQUIRED"
            assert payload(stolen)["code"] == "CONFIRMATION_REQUIRED"
            assert payload(right)["code"] == "OK"
            assert payload(spent)["code"] == "CONFIRMATION_REQUIRED"
            assert effects(tmp_path) == ["refund ORD-9 90000"]

        run(scenario)

    @pytest.mark.parametrize("mode", ["auto", "legacy"])
    def test_in_band_approval_off_asks_nobody(self, tmp_path: Path, mode: str) -> None:
        """policy.in_band_approval: false: an eliciting client is not asked; the action waits."""
        text = shop_config(tmp_path) + "policy:\n  in_band_approval: false\n"
        asked: list[str] = []

        async def scenario() -> None:
            async with (
                started(text, tmp_path) as gateway,
                client(gateway, elicit=answering(True, asked), mode=mode) as bot,
            ):
                result = payload(await bot.call_tool("shop_refund", REFUND))
            assert result["code"] == "CONFIRMATION_REQUIRED"
            assert asked == [] and effects(tmp_path) == []

        run(scenario)


class TestPrincipals:
    """Each principal's own allowlist is enforced, whatever role it shares."""

    def test_principals_sharing_a_role_keep_their_own_allowlists(self, tmp_path: Path) -> None:
        """The reader shares the bot's role yet cannot call, list or be told of the bot's tools."""
        text = (
            shop_config(tmp_path)
            .replace('    tools: ["*"]\n', '    tools: ["*"]\n    role: staff\n')
            .replace(
                "    tools: [shop_get_order]\n", "    tools: [shop_get_order]\n    role: staff\n"
            )
        )

        async def scenario() -> None:
            async with (
                started(text, tmp_path) as gateway,
                client(gateway, principal="reader") as reader,
            ):
                listed = [t.name for t in (await reader.list_tools()).tools]
                refund = payload(await reader.call_tool("shop_refund", REFUND))
                wipe = payload(await reader.call_tool("shop_wipe", {"target": "all"}))
                unknown = payload(await reader.call_tool("shop_nope", {}))
            assert listed == ["shop_get_order"]
            assert refund["code"] == wipe["code"] == "TOOL_NOT_ALLOWED"
            assert unknown["code"] == "UNKNOWN_TOOL"
            assert unknown["data"]["available"] == ["shop_get_order"]
            assert effects(tmp_path) == []

        run(scenario)

    def test_a_role_named_like_another_principal_is_refused(self) -> None:
        """auditor's role 'bot' would read as the bot principal on spans and limits."""
        text = (
            "upstreams: {shop: {command: [python, s.py]}}\n"
            "principals:\n  bot: {tools: ['*']}\n  auditor: {tools: [x], role: bot}\n"
        )
        with pytest.raises(ConfigError, match=r":4: principals.auditor.role: 'bot' is the name"):
            parse_config(text)


class TestSessions:
    """Two sessions of one principal share nothing: taint, loops, budgets, replays, approvals."""

    def test_taint_loops_budget_and_replays_stay_in_their_session(self, tmp_path: Path) -> None:
        """Session one reads injection text, loops, exhausts its budget and gets a refund approved;
        session two writes untainted, calls freely, and its identical refund waits for a human."""

        async def scenario() -> None:
            async with (
                started(shop_config(tmp_path), tmp_path) as gateway,
                client(gateway, session="s1", elicit=answering(True, [])) as one,
                client(gateway, session="s2") as two,
            ):
                assert payload(await one.call_tool("shop_refund", REFUND))["code"] == "OK"
                await one.call_tool("shop_fetch_page", {"url": "https://example.com"})
                for _ in range(4):
                    await one.call_tool("shop_get_order", {"order_id": "L"})
                for _ in range(3):
                    await one.call_tool("shop_get_order", {"order_id": 7})
                locked = payload(await one.call_tool("shop_get_order", {"order_id": "M"}))
                note = payload(await two.call_tool("shop_add_note", {"order_id": "N", "text": "t"}))
                loops = [
                    payload(await two.call_tool("shop_get_order", {"order_id": "L"}))["code"]
                    for _ in range(3)
                ]
                twin = payload(await two.call_tool("shop_refund", REFUND))
            assert locked["code"] == "VALIDATION_BUDGET_EXHAUSTED"
            assert note["code"] == "OK" and loops == ["OK", "OK", "OK"]
            assert twin["code"] == "CONFIRMATION_REQUIRED" and twin["replayed"] is False
            assert effects(tmp_path) == ["refund ORD-9 90000", "note N t"]

        run(scenario)

    def test_a_conversation_id_selects_its_own_session(self, tmp_path: Path) -> None:
        """Within one connection, two conversation ids are two sessions: taint does not cross."""
        page = {"url": "https://example.com"}
        note = {"order_id": "C", "text": "x"}

        async def scenario() -> None:
            async with started(shop_config(tmp_path), tmp_path) as gateway:
                from callgate.gateway.server import build_server
                from callgate.gateway.sessions import session_of

                server = build_server(gateway, lambda ctx: ("bot", session_of(ctx, "bot", "one")))
                from mcp import Client

                async with Client(server) as bot:
                    await bot.call_tool("shop_fetch_page", page, meta={CONVERSATION_KEY: "a"})
                    tainted = await bot.call_tool(
                        "shop_add_note", note, meta={CONVERSATION_KEY: "a"}
                    )
                    clean = await bot.call_tool("shop_add_note", note, meta={CONVERSATION_KEY: "b"})
            assert payload(tainted)["code"] == "TAINTED_CONTEXT"
            assert payload(clean)["code"] == "OK"
            assert effects(tmp_path) == ["note C x"]

        run(scenario)

    def test_an_exhausted_validation_budget_cools_down(self, tmp_path: Path) -> None:
        """Three invalid calls lock the session for validation_cooldown seconds, then valid calls run."""
        clock = ManualClock(start=time.time())
        text = shop_config(tmp_path) + "policy:\n  validation_cooldown: 30\n"

        async def scenario() -> None:
            async with started(text, tmp_path, clock=clock) as gateway, client(gateway) as bot:
                for _ in range(3):
                    await bot.call_tool("shop_get_order", {"order_id": 7})
                locked = payload(await bot.call_tool("shop_get_order", {"order_id": "A"}))
                clock.advance(29)
                still = payload(await bot.call_tool("shop_get_order", {"order_id": "A"}))
                clock.advance(2)
                free = payload(await bot.call_tool("shop_get_order", {"order_id": "A"}))
            assert locked["code"] == still["code"] == "VALIDATION_BUDGET_EXHAUSTED"
            assert free["code"] == "OK"

        run(scenario)


class TestDenied:
    """A denied call re-proposed in its session is answered CONFIRMATION_DENIED, nobody asked again."""

    def test_after_a_cli_deny_the_re_proposal_is_denied(self, tmp_path: Path) -> None:
        """Denied by `callgate approvals deny` (the store); the same refund again: denied, no new approval."""

        async def scenario() -> None:
            async with started(shop_config(tmp_path), tmp_path) as gateway, client(gateway) as bot:
                first = payload(await bot.call_tool("shop_refund", REFUND))
                gateway.stores.approvals.decide(
                    first["approval_id"], approve=False, by="alice", now=time.time()
                )
                await gateway.run_decided()
                again = payload(await bot.call_tool("shop_refund", REFUND))
                pending = [
                    a
                    for i in gateway.stores.approvals.ids()
                    if (a := gateway.stores.approvals.get(i)) is not None
                    and a.state is ApprovalState.PENDING
                ]
            assert again["code"] == "CONFIRMATION_DENIED"
            assert pending == [] and effects(tmp_path) == []

        run(scenario)

    def test_after_a_denial_in_elicitation_nobody_is_asked_again(self, tmp_path: Path) -> None:
        """The human said no once: the re-proposal is denied without a second question."""
        asked: list[str] = []

        async def scenario() -> None:
            async with (
                started(shop_config(tmp_path), tmp_path) as gateway,
                client(gateway, elicit=answering(False, asked)) as bot,
            ):
                first = payload(await bot.call_tool("shop_refund", REFUND))
                again = payload(await bot.call_tool("shop_refund", REFUND))
            assert first["code"] == again["code"] == "CONFIRMATION_DENIED"
            assert len(asked) == 1 and effects(tmp_path) == []

        run(scenario)

    def test_a_denial_made_while_the_gateway_was_down_holds_after_restart(
        self, tmp_path: Path
    ) -> None:
        """Pending under one process, denied in the store between runs, re-proposed under the next."""

        async def scenario() -> None:
            async with started(shop_config(tmp_path), tmp_path) as gateway, client(gateway) as bot:
                approval = payload(await bot.call_tool("shop_refund", REFUND))["approval_id"]
            from callgate.approvals import open_stores

            stores = open_stores(str(tmp_path / "gateway.db"))
            stores.approvals.decide(approval, approve=False, by="bob", now=time.time())
            stores.close()
            async with started(shop_config(tmp_path), tmp_path) as gateway, client(gateway) as bot:
                again = payload(await bot.call_tool("shop_refund", REFUND))
            assert again["code"] == "CONFIRMATION_DENIED" and effects(tmp_path) == []

        run(scenario)
