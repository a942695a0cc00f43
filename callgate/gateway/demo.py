"""``callgate gateway demo``: the gateway in action, end to end, with nothing to set up.

Writes a config for the demo upstream (``callgate.gateway.demo_upstream``, a real MCP server made
with the SDK), starts ``callgate gateway`` as a subprocess over stdio, and drives it with a real MCP
client whose elicitation callback plays the human. Every call prints the code the gateway answered.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment

from callgate.gateway.results import VERDICT_KEY
from callgate.gateway.upstream import inherited

__all__ = ["demo_config", "gateway_command", "run_demo"]


def gateway_command(config: Path) -> StdioServerParameters:
    """``callgate gateway --config config`` with this interpreter, as an MCP stdio server.

    It inherits this process's Python path (the SDK passes a child only a few safe variables), so
    it runs the same ``callgate`` as its caller, a checkout's included."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-c", "from callgate.cli import main; main()", "gateway", "--config", str(config)],
        cwd=str(config.parent),
        env={**get_default_environment(), **inherited()},
    )


def demo_config(workdir: Path) -> Path:
    """A complete config: one stdio upstream, a store, spans, policy per tool, two principals."""
    text = f"""\
store: {workdir / "gateway.db"}
telemetry:
  service_name: callgate-gateway-demo
  trail_dir: {workdir / "spans"}
policy:
  confirm_at: high
upstreams:
  shop:
    command: [python, -m, callgate.gateway.demo_upstream]
    env: {{SHOP_EFFECTS: "{workdir / "effects.txt"}"}}
    namespace: shop
    timeout: 2
    tools:
      get_order: {{result_fields: [order_id, status, total_cents]}}
      fetch_page: {{untrusted_output: true}}
      refund:
        scope: refunds:write
        amount_limit: {{field: amount_cents, per_request: 5000}}
      add_note: {{rate_limit: {{calls: 5, seconds: 60}}}}
      big: {{hidden: true}}
principals:
  support-bot:
    tools: [shop_get_order, shop_refund, shop_add_note, shop_fetch_page, shop_crash, shop_hang]
    scopes: [refunds:write]
serve:
  stdio: {{principal: support-bot}}
"""
    path = workdir / "gateway.yaml"
    path.write_text(text)
    return path


_SCRIPT: list[tuple[str, str, dict[str, Any]]] = [
    ("an allowed read, result fields filtered", "shop_get_order", {"order_id": "ORD-1"}),
    ("invalid arguments: a number where a string goes", "shop_get_order", {"order_id": 1001}),
    ("unknown field refused (strict)", "shop_get_order", {"order_id": "ORD-1", "admin": True}),
    ("a tool not on the allowlist", "shop_wipe", {"target": "all"}),
    ("a write: idempotent note", "shop_add_note", {"order_id": "ORD-1", "text": "called back"}),
    (
        "the same write again: replayed, one side effect",
        "shop_add_note",
        {"order_id": "ORD-1", "text": "called back"},
    ),
    ("over the per-request cap", "shop_refund", {"order_id": "ORD-1", "amount_cents": 9000}),
    (
        "a destructive write: the human approves via elicitation",
        "shop_refund",
        {"order_id": "ORD-1", "amount_cents": 500},
    ),
    (
        "untrusted content read (injection text)",
        "shop_fetch_page",
        {"url": "https://example.com/review"},
    ),
    (
        "a write after it: tainted, the human declines",
        "shop_refund",
        {"order_id": "ORD-9", "amount_cents": 2590},
    ),
    ("the upstream crashes", "shop_crash", {}),
    ("and is restarted for the next call", "shop_get_order", {"order_id": "ORD-2"}),
]


def run_demo(workdir: Path | None = None) -> Iterator[str | dict[str, Any]]:
    """Run the script; yields a line per step (and the config first)."""
    holder = tempfile.TemporaryDirectory(prefix="callgate-gateway-") if workdir is None else None
    root = Path(holder.name) if holder is not None else workdir
    assert root is not None
    root.mkdir(parents=True, exist_ok=True)
    try:
        config = demo_config(root)
        yield f"config: {config}"
        lines: list[str | dict[str, Any]] = []
        anyio.run(_drive, config, lines)
        yield from lines
        effects = root / "effects.txt"
        count = len(effects.read_text().splitlines()) if effects.exists() else 0
        yield f"side effects the upstream counted: {count}"
        if holder is None:
            yield f"spans in {root / 'spans'}; approvals: callgate approvals list --store {root / 'gateway.db'}"
        else:
            yield "pass --workdir DIR to keep the config, store and spans"
    finally:
        if holder is not None:
            holder.cleanup()


async def _drive(config: Path, lines: list[str | dict[str, Any]]) -> None:
    asked: list[str] = []

    async def human(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        message = getattr(params, "message", "")
        asked.append(message)
        approve = "ORD-9" not in message  # the tainted refund of the whole order: declined
        lines.append({"human was asked": message.splitlines()[0], "approves": approve})
        return types.ElicitResult(action="accept", content={"approve": approve})

    async with Client(gateway_command(config), elicitation_callback=human) as client:
        listed = await client.list_tools()
        lines.append({"tools/list": [tool.name for tool in listed.tools]})
        for why, name, arguments in _SCRIPT:
            result = await client.call_tool(name, arguments)
            payload = (result.meta or {}).get(VERDICT_KEY) or {}
            lines.append(
                {
                    "step": why,
                    "call": f"{name}({json.dumps(arguments)})",
                    "isError": result.is_error,
                    "code": payload.get("code"),
                    "message": str(payload.get("message", ""))[:140],
                }
            )
