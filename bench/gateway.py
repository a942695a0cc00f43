"""What the MCP gateway adds per ``tools/call``, against calling the upstream directly in the same run.

Two comparisons, both with the demo upstream (``callgate.gateway.demo_upstream``, the SDK's
MCPServer) over stdio, a read tool (``echo``) with a different argument per call so no loop guard
fires, rate limits off, in-memory stores, telemetry off:

1. **End to end over stdio** (what an agent host sees): an SDK client talking to the upstream
   directly, against the same client talking to ``callgate gateway`` over stdio, which talks to its
   own copy of the upstream over stdio. The difference includes the extra process hop (one more
   JSON-RPC encode/decode and pipe round trip each way) as well as the guard. A third path, a bare
   SDK proxy (a low-level ``Server`` that forwards ``tools/call`` to the upstream, no guard), prices
   the hop alone, so gateway minus bare proxy is what the guard and the gateway's own work add.
2. **Inside the gateway process** (what the gateway itself costs): ``Gateway.call`` (the whole
   pipeline, the upstream call and the result conversion) against ``Upstream.call`` on the same
   connection. The difference is the gateway's own work, without any transport.

Blocks of the two paths alternate so drift on a loaded machine lands on both. Run:
``.venv/bin/python bench/gateway.py`` (``--calls N`` for more samples). ``--server time`` puts the
published ``mcp-server-time`` (from ``make real-servers``, in ``.cache/mcp-servers`` or
``$CALLGATE_MCP_CACHE``) in place of the demo upstream, called with ``convert_time``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment

from callgate.gateway import parse_config, running
from callgate.gateway.demo import gateway_command
from callgate.gateway.upstream import inherited

CHILD_ENV = {
    **get_default_environment(),
    **inherited(),
    **{k: v for k, v in os.environ.items() if k == "CALLGATE_MCP_CACHE"},
}
"""What the bench's children inherit: the SDK's safe variables and this process's Python path."""

CONFIG = """\
policy:
  max_steps_per_session: 10000000
  max_identical_calls: 1000
upstreams:
  shop:
    command: [python, -m, callgate.gateway.demo_upstream]
principals:
  bench: {tools: [echo]}
serve:
  stdio: {principal: bench}
telemetry: {trail: false}
"""


TIME_CONFIG = """\
policy:
  max_steps_per_session: 10000000
  max_identical_calls: 1000
upstreams:
  time:
    command: [{command}, --local-timezone, UTC]
    tools:
      convert_time: {{effect: read}}
principals:
  bench: {{tools: [convert_time]}}
serve:
  stdio: {{principal: bench}}
telemetry: {{trail: false}}
"""


@dataclass(frozen=True)
class Target:
    """The upstream the bench calls, and the call it makes (a new argument each time)."""

    command: list[str]
    config: str
    tool: str
    arguments: Callable[[int], dict[str, Any]]


def _demo() -> Target:
    return Target(
        [sys.executable, "-m", "callgate.gateway.demo_upstream"], CONFIG, "echo", lambda i: {"n": i}
    )


def _time() -> Target:
    root = Path(__file__).resolve().parents[1]
    cache = Path(os.environ.get("CALLGATE_MCP_CACHE", root / ".cache" / "mcp-servers"))
    script = cache / "servers" / "bin" / "mcp-server-time"
    if not script.exists():
        sys.exit(f"{script} is not installed: run make real-servers (or set CALLGATE_MCP_CACHE)")

    def arguments(i: int) -> dict[str, Any]:
        minute = i % 1440
        return {
            "source_timezone": "UTC",
            "time": f"{minute // 60:02d}:{minute % 60:02d}",
            "target_timezone": "Europe/Paris",
        }

    return Target(
        [str(script), "--local-timezone", "UTC"],
        TIME_CONFIG.format(command=script),
        "convert_time",
        arguments,
    )


TARGET = _demo()
TARGET_NAME = {"echo": "demo", "convert_time": "time"}


def upstream_command() -> StdioServerParameters:
    command, *args = TARGET.command
    return StdioServerParameters(
        command=command,
        args=args,
        env=CHILD_ENV,  # this checkout's callgate, as the gateway's own upstream gets
    )


async def timed(call: Callable[[int], Awaitable[Any]], start: int, n: int) -> list[int]:
    samples = []
    gc.disable()
    try:
        for i in range(start, start + n):
            begin = time.perf_counter_ns()
            await call(i)
            samples.append(time.perf_counter_ns() - begin)
    finally:
        gc.enable()
    return samples


def summary(samples: list[int]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) / 1e6, ordered[
        min(len(ordered) - 1, int(len(ordered) * 0.99))
    ] / 1e6


async def alternate(
    a: Callable[[int], Awaitable[Any]], b: Callable[[int], Awaitable[Any]], calls: int, block: int
) -> tuple[list[int], list[int]]:
    for i in range(200):  # warm up both paths
        await a(i)
        await b(i)
    first: list[int] = []
    second: list[int] = []
    offset = 1000
    while len(first) < calls:
        first += await timed(a, offset, block)
        second += await timed(b, offset, block)
        offset += block
    return first, second


def children() -> dict[int, str]:
    """This process's child processes: pid to command line."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid():
                found[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().decode()
        except (OSError, IndexError, ValueError):
            continue
    return found


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def middle_pids() -> tuple[int, int] | None:
    """The bare proxy's and the gateway's pids (the processes between client and upstream)."""
    by_role = {
        ("proxy" if "--serve-bare-proxy" in line else "gateway"): pid
        for pid, line in children().items()
        if "--serve-bare-proxy" in line or "gateway\0--config" in line
    }
    if set(by_role) != {"proxy", "gateway"}:
        return None
    return by_role["proxy"], by_role["gateway"]


async def end_to_end(
    config: Path, calls: int, block: int
) -> tuple[list[list[int]], tuple[float, float] | None]:
    """Samples of the three paths, and the CPU per call of the bare proxy and of the gateway
    process (wall times on a loaded machine are mostly waiting; CPU is what the hop costs)."""
    bare = StdioServerParameters(
        command=sys.executable,
        args=[__file__, "--serve-bare-proxy", "--server", TARGET_NAME[TARGET.tool]],
        env=CHILD_ENV,
    )
    async with (
        Client(upstream_command()) as direct,
        Client(bare) as proxied,
        Client(gateway_command(config)) as gated,
    ):
        paths = []
        for client in (direct, proxied, gated):

            async def call(i: int, client: Client = client) -> Any:
                result = await client.call_tool(TARGET.tool, TARGET.arguments(i))
                assert not result.is_error, result

            paths.append(call)
        pids = middle_pids()
        before = [cpu_seconds(pid) for pid in pids] if pids else []
        samples = await alternate_all(paths, calls, block)
        if not pids:
            return samples, None
        done = len(samples[0]) + 200  # the warm-up calls ran inside the window too
        proxy, gateway = (cpu_seconds(pid) - start for pid, start in zip(pids, before, strict=True))
        return samples, (proxy * 1e3 / done, gateway * 1e3 / done)


async def alternate_all(
    paths: list[Callable[[int], Awaitable[Any]]], calls: int, block: int
) -> list[list[int]]:
    for i in range(200):  # warm up every path
        for path in paths:
            await path(i)
    samples: list[list[int]] = [[] for _ in paths]
    offset = 1000
    while len(samples[0]) < calls:
        for path, kept in zip(paths, samples, strict=True):
            kept += await timed(path, offset, block)
        offset += block
    return samples


async def serve_bare_proxy() -> None:
    """A proxy with no guard: list and call forwarded to the upstream as they are."""
    import mcp_types as types
    from mcp.server import Server
    from mcp.server.stdio import stdio_server

    async with Client(upstream_command()) as upstream:

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return await upstream.list_tools()

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await upstream.call_tool(params.name, params.arguments)

        server = Server("bare-proxy", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def in_process(config_text: str, calls: int, block: int) -> tuple[list[int], list[int]]:
    async with running(parse_config(config_text)) as gateway:
        upstream = gateway.upstreams[0]

        async def call_upstream(i: int) -> Any:
            await upstream.call(TARGET.tool, TARGET.arguments(i), 10.0)

        async def call_gateway(i: int) -> Any:
            result = await gateway.call("bench", "bench-session", TARGET.tool, TARGET.arguments(i))
            assert result.ok, result

        return await alternate(call_upstream, call_gateway, calls, block)


def report(
    title: str,
    base: list[int],
    gated: list[int],
    base_name: str,
    gated_name: str,
    added: str = "added by the gateway",
) -> None:
    base_median, base_p99 = summary(base)
    gated_median, gated_p99 = summary(gated)
    print(f"\n{title} ({len(base)} calls each)")
    print(f"  {base_name:<28} median {base_median:7.3f} ms   p99 {base_p99:7.3f} ms")
    print(f"  {gated_name:<28} median {gated_median:7.3f} ms   p99 {gated_p99:7.3f} ms")
    print(
        f"  {added:<28} median {gated_median - base_median:7.3f} ms   "
        f"p99 {gated_p99 - base_p99:7.3f} ms   (x{gated_median / base_median:.2f} the median)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="Timed calls per path.")
    parser.add_argument("--block", type=int, default=10, help="Calls per alternating block.")
    parser.add_argument(
        "--server", choices=["demo", "time"], default="demo", help="The upstream to call."
    )
    parser.add_argument("--serve-bare-proxy", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    global TARGET
    TARGET = _time() if options.server == "time" else _demo()
    if options.serve_bare_proxy:
        anyio.run(serve_bare_proxy)
        return
    with tempfile.TemporaryDirectory(prefix="callgate-bench-") as folder:
        config = Path(folder) / "gateway.yaml"
        config.write_text(TARGET.config)
        (direct, proxied, gated), cpu = anyio.run(end_to_end, config, options.calls, options.block)
        report(
            "end to end over stdio",
            direct,
            gated,
            "client -> upstream",
            "client -> gateway -> upstream",
        )
        report(
            "the hop alone",
            direct,
            proxied,
            "client -> upstream",
            "client -> bare SDK proxy -> up",
            "added by the hop",
        )
        report(
            "the guard and gateway alone, end to end",
            proxied,
            gated,
            "client -> bare SDK proxy -> up",
            "client -> gateway -> upstream",
            "added by guard + gateway",
        )
        if cpu is not None:
            print("\nCPU per call of the process in the middle (user + system, same run)")
            print(f"  bare SDK proxy               {cpu[0]:7.3f} ms")
            print(f"  gateway (guard included)     {cpu[1]:7.3f} ms   (x{cpu[1] / cpu[0]:.2f})")
        upstream, gateway = anyio.run(in_process, TARGET.config, options.calls, options.block)
        report(
            "inside the gateway process",
            upstream,
            gateway,
            "Upstream.call",
            "Gateway.call (full pipeline)",
        )
    print(
        "\nThe machine is shared (2 cores, other jobs running): compare the paths, not absolute times."
    )


if __name__ == "__main__":
    main()
