"""The gateway's argument and answer limits: configurable, named in the refusal, and bounded."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from tests.gateway.clients import client, payload, started
from tests.gateway.conftest import effects, shop_config


class TestArgumentSize:
    """policy.max_argument_bytes decides; the refusal says the size and the limit."""

    def test_a_100_kb_write_runs_by_default_and_is_refused_under_a_lower_limit(
        self, tmp_path: Path
    ) -> None:
        """100,000 characters pass the default 1 MiB; under 50,000 they are INVALID_JSON, unsent."""
        text = {"order_id": "BIG", "text": "x" * 100_000}

        async def scenario(config: str) -> dict[str, object]:
            async with started(config, tmp_path) as gateway, client(gateway) as bot:
                return payload(await bot.call_tool("shop_add_note", text))

        default = anyio.run(scenario, shop_config(tmp_path))
        low = anyio.run(scenario, shop_config(tmp_path) + "policy:\n  max_argument_bytes: 50000\n")
        assert default["code"] == "OK"
        assert low["code"] == "INVALID_JSON" and "the limit is 50000" in str(low["message"])
        assert len(effects(tmp_path)) == 1


class TestBoundedAnswers:
    """An INVALID_ARGUMENTS answer names at most 20 problems, whatever the client sent."""

    def test_two_thousand_unknown_fields_give_a_short_answer(self, tmp_path: Path) -> None:
        """2,000 unknown fields: under 10,000 characters, 20 problems listed, the rest counted."""
        junk = {"order_id": "O", **{f"field_{i}": i for i in range(2000)}}

        async def scenario() -> dict[str, object]:
            async with started(shop_config(tmp_path), tmp_path) as gateway, client(gateway) as bot:
                return payload(await bot.call_tool("shop_get_order", junk))

        answer = anyio.run(scenario)
        assert answer["code"] == "INVALID_ARGUMENTS"
        data = answer["data"]
        assert isinstance(data, dict) and len(data["problems"]) == 20
        assert data["more_problems"] == 1980
        assert len(json.dumps(answer)) < 10_000
