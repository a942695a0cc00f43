"""Spans the store cannot hold go to load_errors; every other span of the file loads (issue 9.9).

Hypothesis writes span files where any field of a span may be missing, of another JSON type, out of
range (ints beyond 64 bits, negative or zero times) or malformed (ids that are not hex), mixed with
valid spans. Whatever it writes, the load finishes, every valid span is stored, every span that was
not stored is accounted for in ``load_errors``, and what was stored can be read back.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytics import metrics, reconstruct
from analytics.database import connect
from analytics.follow import follow
from analytics.load import load

T0_NS = 1_767_225_600_000_000_000

_counter = itertools.count()

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["0", "-1", str(2**63), str(2**64 + 1), "1e30", "zz" * 16, "A" * 32]),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
any_value = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {},
        optional={
            "stringValue": json_value,
            "intValue": json_value,
            "boolValue": json_value,
            "doubleValue": json_value,
            "arrayValue": json_value,
        },
    ),
)
attribute = st.fixed_dictionaries(
    {
        "key": st.one_of(
            st.sampled_from(["guard.step", "guard.ok", "guard.code", "gen_ai.tool.name"]),
            json_value,
        ),
        "value": any_value,
    }
)

_FIELDS = (
    "traceId",
    "spanId",
    "parentSpanId",
    "name",
    "kind",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "attributes",
    "events",
    "status",
)


def _valid_span(n: int) -> dict[str, Any]:
    start = T0_NS + n * 1_000_000
    return {
        "traceId": f"{n:032x}",
        "spanId": f"{n:016x}",
        "name": "execute_tool get_order" if n % 2 else "guard.schema",
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1_000),
        "attributes": [
            {"key": "gen_ai.tool.name", "value": {"stringValue": "get_order"}},
            {"key": "guard.step", "value": {"intValue": str(n)}},
        ],
        "status": {},
    }


@st.composite
def hostile_span(draw: st.DrawFn) -> Any:
    """A valid span with some fields removed or replaced, or not an object at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_value)
    span: dict[str, Any] = _valid_span(draw(st.integers(10_000, 20_000)))
    for name in draw(st.sets(st.sampled_from(_FIELDS), min_size=1, max_size=4)):
        if draw(st.booleans()):
            span.pop(name, None)
        elif name == "attributes":
            span[name] = draw(st.one_of(json_value, st.lists(attribute, max_size=4)))
        elif name == "events":
            event = st.fixed_dictionaries(
                {"timeUnixNano": json_value, "name": json_value, "attributes": json_value}
            )
            span[name] = draw(st.one_of(json_value, st.lists(event, max_size=2)))
        else:
            span[name] = draw(json_value)
    return span


def _line(spans: list[Any]) -> str:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]
                    },
                    "scopeSpans": [{"scope": {"name": "callgate"}, "spans": spans}],
                }
            ]
        }
    )


@st.composite
def span_file(draw: st.DrawFn) -> tuple[list[list[Any]], int]:
    """Lines of spans, valid ones (ids 1..n) and hostile ones mixed; returns (lines, n valid)."""
    valid = draw(st.integers(1, 6))
    spans: list[Any] = [_valid_span(n) for n in range(1, valid + 1)]
    spans += draw(st.lists(hostile_span(), min_size=1, max_size=5))
    order = draw(st.permutations(range(len(spans))))
    shuffled = [spans[i] for i in order]
    cut = draw(st.integers(1, len(shuffled)))
    return [shuffled[:cut], shuffled[cut:]], valid


def _check_readable(con: Any) -> None:
    """What was stored can be read back by every reader."""
    metrics.overview(con)
    metrics.stage_latency(con)
    for (trace_id,) in con.execute("SELECT DISTINCT trace_id FROM spans").fetchall():
        assert reconstruct.trace(con, trace_id) is not None


class TestSpansTheStoreCannotHold:
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(span_file())
    def test_every_valid_span_loads_and_the_rest_is_accounted_for(
        self, tmp_path: Path, drawn: tuple[list[list[Any]], int]
    ) -> None:
        """No span value stops a load: valid spans are stored, the others are in load_errors."""
        lines, valid = drawn
        path = tmp_path / f"spans-{next(_counter)}.jsonl"
        path.write_text("".join(_line(spans) + "\n" for spans in lines if spans))
        con = connect(":memory:")
        try:
            report = load(con, [path])
            stored = {
                int(span_id, 16)
                for (span_id,) in con.execute(
                    "SELECT span_id FROM spans WHERE span_id LIKE '00000000000000%'"
                ).fetchall()
            }
            assert set(range(1, valid + 1)) <= stored
            total = sum(len(spans) for spans in lines)
            rejected = con.execute("SELECT count(*) FROM load_errors").fetchall()[0][0]
            kept = con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
            assert rejected == report.errors
            # Every span is stored or rejected; a hostile span may repeat a stored span's ids.
            assert kept + rejected <= total and kept >= valid
            assert load(con, [path]).spans == 0
            _check_readable(con)
        finally:
            con.close()


class TestZeroStartTime:
    def _file(self, tmp_path: Path) -> Path:
        spans = [_valid_span(n) for n in range(1, 7)]
        zero = _valid_span(99)
        zero["startTimeUnixNano"] = "0"
        no_time = _valid_span(98)
        del no_time["startTimeUnixNano"]
        path = tmp_path / "sidecar.jsonl"
        path.write_text(_line([*spans[:3], zero]) + "\n" + _line([no_time, *spans[3:]]) + "\n")
        return path

    def test_six_valid_spans_load_two_are_recorded(self, tmp_path: Path) -> None:
        """The 6 valid spans load; the two without a start time are in load_errors, by line."""
        con = connect(tmp_path / "db.duckdb")
        try:
            report = load(con, [self._file(tmp_path)])
            assert (report.spans, report.errors) == (6, 2)
            rows = con.execute("SELECT line, reason FROM load_errors ORDER BY line").fetchall()
            assert [line for line, _ in rows] == [1, 2]
            assert all("no start time" in reason for _, reason in rows)
        finally:
            con.close()

    def test_follow_keeps_going(self, tmp_path: Path) -> None:
        """--follow loads the file and does not exit on the bad spans."""
        path = self._file(tmp_path)
        rounds: list[int] = []
        follow(
            tmp_path / "db.duckdb",
            [path],
            interval=0.01,
            on_load=lambda r: rounds.append(r.spans),
            should_stop=lambda: len(rounds) >= 1,
        )
        assert rounds == [6]

    @pytest.mark.parametrize("value", [str(2**64 + 5), "-3", "12abc", 1.5e30])
    def test_other_unholdable_times(self, tmp_path: Path, value: object) -> None:
        """Times beyond 63 bits, negative, or not numbers are recorded, not loaded."""
        bad = _valid_span(50)
        bad["endTimeUnixNano"] = value
        path = tmp_path / "t.jsonl"
        path.write_text(_line([bad, _valid_span(1)]) + "\n")
        con = connect(":memory:")
        try:
            assert (load(con, [path]).spans, load(con, [path]).spans) == (1, 0)
            assert con.execute("SELECT count(*) FROM load_errors").fetchall() == [(1,)]
        finally:
            con.close()


class TestValuesKeptAsSent:
    def test_int_beyond_64_bits_is_kept(self, tmp_path: Path) -> None:
        """An intValue the BIGINT column cannot hold is kept in the span's attribute list."""
        span = _valid_span(1)
        span["attributes"][1]["value"]["intValue"] = str(2**70)
        path = tmp_path / "big.jsonl"
        path.write_text(_line([span]) + "\n")
        con = connect(":memory:")
        try:
            load(con, [path])
            view = reconstruct.trace(con, f"{1:032x}")
            assert view is not None and view.roots[0].attributes["guard.step"] == 2**70
        finally:
            con.close()


class TestIdCase:
    def test_an_uppercase_trace_id_is_found_by_either_spelling(self, tmp_path: Path) -> None:
        """Hex in capitals is the same id: stored lowercase, found as typed and lowercased."""
        span = _valid_span(1)
        span["traceId"] = span["traceId"].upper().replace("0", "A", 1)
        path = tmp_path / "spans.jsonl"
        path.write_text(_line([span]) + "\n")
        con = connect(":memory:")
        try:
            assert load(con, [path]).spans == 1
            for typed in (span["traceId"], span["traceId"].lower()):
                assert reconstruct.trace(con, typed) is not None, typed
        finally:
            con.close()
