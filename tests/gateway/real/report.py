"""The per-server table of docs/gateway.md, and what differs where: drives the seven servers as the
tests do and prints, per server, the tools, whether the listing and the results equal the direct
ones, the refusal's code, and each difference (``python -m tests.gateway.real.report [NAME ...]``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from threading import Thread

from tests.gateway.real.conftest import Run, drive, verdict
from tests.gateway.real.install import install
from tests.gateway.real.servers import SERVERS
from tests.gateway.real.test_published import listing_differences, result_differences

__all__ = ["row"]


def row(run: Run) -> str:
    """One server's line of the table."""
    server = run.server
    inputs = sum(
        json.dumps(run.listed_gateway.get(name, {}).get("inputSchema"))
        == json.dumps(tool["inputSchema"])
        for name, tool in run.listed_direct.items()
    )
    fields = {key.split(".", 1)[1] for key in listing_differences(run)}
    results = len(run.results_direct) - len(result_differences(run))
    codes = [verdict(r).get("code") for r in run.results_gateway]
    return (
        f"| {server.name} ({server.registry}) | {len(run.listed_direct)} | yes | "
        f"{inputs}/{len(run.listed_direct)} | {', '.join(sorted(fields)) or 'none'} | "
        f"{results}/{len(run.results_direct)} | {codes.count('OK')}/{len(codes)} | "
        f"{verdict(run.refused).get('code')} |"
    )


def main(names: list[str]) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.gateway.real.conftest import PAGE

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

    page = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    Thread(target=page.serve_forever, daemon=True).start()
    installed = install()
    print(
        "| server | tools | starts | input schemas equal | listed fields that differ | results equal | let through | refused as |"
    )
    print("|---|---|---|---|---|---|---|---|")
    details: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        for server in SERVERS:
            if names and server.name not in names:
                continue
            url = f"http://127.0.0.1:{page.server_address[1]}/tides.html"
            run = drive(server, installed, Path(folder) / server.name, url)
            print(row(run), flush=True)
            for key, (mine, theirs) in {
                **listing_differences(run),
                **result_differences(run),
            }.items():
                details.append(
                    f"{server.name} {key}\n  direct:  {str(mine)[:300]}\n  gateway: {str(theirs)[:300]}"
                )
    page.shutdown()
    page.server_close()
    print("\n".join(details))


if __name__ == "__main__":
    main(sys.argv[1:])
