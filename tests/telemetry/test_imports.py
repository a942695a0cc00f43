"""The span contract is importable alone: analytics and the dashboard load no guard, SDK or grpc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("guard", "opentelemetry.sdk", "grpc")


def loaded_after(statement: str) -> list[str]:
    """The heavy modules loaded by running ``statement`` in a fresh interpreter."""
    probe = (
        f"{statement}\n"
        "import json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if any(m == h or m.startswith(h + '.') for h in heavy))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


class TestContractAlone:
    """Importing the readers of the trail does not import its writers."""

    @pytest.mark.parametrize(
        "statement",
        [
            "from telemetry import attributes",
            "import telemetry.records, telemetry.encoder, telemetry.otlpjson",
            "import analytics",
            "import analytics.cli, analytics.metrics, analytics.reconstruct",
            "import dashboards",
            "import dashboards.main",
        ],
    )
    def test_no_guard_no_sdk_no_grpc(self, statement: str) -> None:
        """`statement` loads none of guard, opentelemetry.sdk, grpc."""
        assert loaded_after(statement) == []

    def test_the_probe_sees_heavy_imports(self) -> None:
        """The check can fail: `telemetry.configure` loads the guard, OTLP export the SDK."""
        loaded = loaded_after("import telemetry\ntelemetry.configure")
        assert any(name.startswith("guard") for name in loaded)
        assert "opentelemetry.sdk" not in loaded  # the trail needs no SDK
        assert "opentelemetry.sdk" in loaded_after("import telemetry.export")

    def test_the_trail_needs_no_sdk(self, tmp_path: Path) -> None:
        """Configuring and writing the trail loads neither the SDK, nor grpc, nor protobuf."""
        statement = (
            "import telemetry\n"
            f"handle = telemetry.configure(trail_dir={str(tmp_path)!r}, masking_key=b'k' * 32)\n"
            "handle.shutdown()"
        )
        loaded = loaded_after(statement)
        assert [name for name in loaded if not name.startswith("guard")] == []

    def test_encoding_a_record_needs_no_guard(self) -> None:
        """A span record encodes to an OTLP line without the guard or the SDK."""
        statement = (
            "from telemetry.records import SpanRecord\nfrom telemetry.encoder import encode_spans\n"
            "line = encode_spans([SpanRecord(trace_id='0'*32, span_id='1'*16, parent_span_id='',"
            " name='x', start_ns=1, end_ns=2, attributes=[('k', 'v')])],"
            " resource={'service.name': 's'}, scope_name='callgate.telemetry')\n"
            "assert json.loads(line)['resourceSpans'][0]['scopeSpans'][0]['spans'][0]['name'] == 'x'"
        )
        assert loaded_after("import json\n" + statement) == []


class TestSyntheticWorld:
    """analytics.synth's fixtures speak the guard's codes and the trail's encoding."""

    def test_codes_match_the_guard(self) -> None:
        """Every code the fixtures use has the guard's stage and fixability."""
        from analytics.synth import CODES
        from guard.shop import build_shop

        codes = build_shop().guard.registry.codes  # core codes and the shop's own
        assert {name: (codes[name].stage, codes[name].fixable) for name in CODES} == CODES

    def test_fixture_lines_are_trail_lines(self) -> None:
        """A synthetic line parses as OTLP and carries the code's stage and fixability."""
        from analytics.synth import Call, encode_request, spans_of
        from telemetry import parse_request

        call = Call(trace_id="a" * 32, span_id="b" * 16, tool="get_order", session="s-1",
                    principal="p_1", step=1, code="INVALID_ARGUMENTS", start_ns=1_000)  # fmt: skip
        request = parse_request(encode_request(spans_of(call), "svc"))
        spans = request.resource_spans[0].scope_spans[0].spans
        head = {a.key: a.value for a in spans[-1].attributes}
        assert head["guard.code.stage"].string_value == "schema"
        assert head["guard.fixable"].bool_value is True
        reject = {a.key: a.value for a in spans[-2].attributes}
        assert reject["guard.fixable"].bool_value is True
        assert [s.name for s in spans[:-1]] == [f"guard.{s}" for s in call.stages]
