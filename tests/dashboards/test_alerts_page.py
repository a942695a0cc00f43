"""The Overview shows the firing alert rules `callgate alerts` reports, and deltas per tile."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from analytics.cli import alerts_command
from analytics.load import connect
from analytics.metrics import filter_options
from dashboards import data
from dashboards.filters import Selection, resolve
from dashboards.settings import ALERTS_ENV

from .conftest import make_app
from .test_pages import metric_values


def _firing(db: Path, *args: str) -> set[str]:
    result = CliRunner().invoke(alerts_command, ["--db", str(db), "--json", *args])
    return {r["name"] for r in json.loads(result.output) if r["firing"]}


class TestFiringRules:
    def test_the_overview_lists_what_the_command_fires(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """Each rule `callgate alerts` fires is named on the Overview, and no other."""
        rules = tmp_path / "alerts.toml"
        rules.write_text(
            '[[rule]]\nname = "traffic"\nmetric = "calls"\nwindow = "1d"\nabove = 0\n'
            '[[rule]]\nname = "loops"\nmetric = "loop_guards"\nwindow = "1d"\nabove = 0\n'
            '[[rule]]\nname = "flood"\nmetric = "calls"\nwindow = "1d"\nabove = 1e9\n'
        )
        firing = _firing(demo_db, "--rules", str(rules))
        assert firing == {"traffic", "loops"}
        monkeypatch.setenv(ALERTS_ENV, str(rules))
        app = make_app(monkeypatch, demo_db)
        app.run()
        assert not app.exception, app.exception
        shown = " ".join(str(m.value) for m in app.markdown)
        assert all(f"` {name} `" in shown for name in firing) and "flood" not in shown
        assert "2 alert rule(s) firing" in shown

    def test_quiet_rules_say_so(self, demo_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """When the command fires nothing, the page shows no alert and says how many it checked."""
        assert _firing(demo_db) == set()
        app = make_app(monkeypatch, demo_db)
        app.run()
        assert not [m for m in app.markdown if "firing" in str(m.value)]
        assert any("none of 4 rules fire" in str(c.value) for c in app.caption)

    def test_a_rules_file_marks_its_tile(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """A threshold from the rules file marks the tile of its metric when crossed."""
        rules = tmp_path / "alerts.toml"
        rules.write_text(
            '[[rule]]\nname = "any model error"\nmetric = "model_error_rate"\n'
            'window = "1d"\nabove = 0.0\n'
        )
        assert _firing(demo_db, "--rules", str(rules)) == {"any model error"}
        monkeypatch.setenv(ALERTS_ENV, str(rules))
        app = make_app(monkeypatch, demo_db)
        app.run()
        captions = " ".join(str(c.value) for c in app.caption)
        assert "over its threshold: ` model_error_rate > 0.0% over 1d `" in captions

    def test_a_bad_rules_file_is_an_error_on_the_page(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """The page says what is wrong with the file and keeps the built-in rules."""
        rules = tmp_path / "bad.toml"
        rules.write_text('rule = [{name = "x", metric = "calls", above = nan}]')
        monkeypatch.setenv(ALERTS_ENV, str(rules))
        app = make_app(monkeypatch, demo_db)
        app.run()
        assert not app.exception
        assert any("bad.toml" in str(e.value) for e in app.error)


class TestDeltas:
    def test_calls_delta_is_the_previous_window(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Over "Last hour", the Calls tile's delta is calls now minus calls in the hour before."""
        con = connect(demo_db, read_only=True)
        try:
            options = filter_options(con)
            filters, _ = resolve(Selection(window="Last hour"), options)
            earlier = data.previous_window(filters, options.last)
            assert earlier is not None and earlier.end == filters.start
            assert earlier.start == filters.start - timedelta(hours=1) - timedelta(microseconds=1)
            now = data.headline(con, filters)
            before = data.headline(con, earlier)
        finally:
            con.close()
        assert now is not None and before is not None
        app = make_app(monkeypatch, demo_db)
        app.run()
        app.sidebar.selectbox(key="window").set_value("Last hour").run()
        assert not app.exception, app.exception
        [calls] = [m for m in app.metric if m.label == "Calls"]
        assert calls.value == f"{now.calls:,}"
        assert calls.delta == f"{now.calls - before.calls:+,}"
        assert metric_values(app)["Calls"] == f"{now.calls:,}"

    def test_all_time_has_no_delta(self, demo_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """With no window there is nothing before to compare with."""
        app = make_app(monkeypatch, demo_db)
        app.run()
        assert app.metric and all(not m.delta for m in app.metric)
