"""Settings, filters and formatting: the small pieces the pages stand on."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import dashboards
from analytics.metrics import FilterOptions, Filters
from dashboards import fmt
from dashboards.filters import CUSTOM, Selection, bucket_for, resolve
from dashboards.settings import CLICKHOUSE_ENV, DB_ENV, Settings

OPTIONS = FilterOptions(
    services=("a",),
    tools=("t",),
    principals=("p",),
    first=datetime(2026, 1, 1, 0, 0),
    last=datetime(2026, 1, 3, 12, 0),
)


class TestPublicApi:
    def test_all_sorted_and_complete(self) -> None:
        """dashboards re-exports a sorted __all__ whose names all exist."""
        assert dashboards.__all__ == sorted(dashboards.__all__)
        for name in dashboards.__all__:
            assert hasattr(dashboards, name)

    def test_dashboard_is_a_click_command(self) -> None:
        """The command callgate/cli.py registers is a click.Command named dashboard."""
        import click

        assert isinstance(dashboards.dashboard, click.Command)
        assert dashboards.dashboard.name == "dashboard"


class TestSettings:
    def test_round_trip_through_the_environment(self) -> None:
        """to_env and from_env carry the source and the refresh interval."""
        settings = Settings(db="/x/calls.duckdb", refresh_seconds=30)
        assert Settings.from_env(settings.to_env()) == settings

    def test_blank_means_unset(self) -> None:
        """Empty variables are no source at all."""
        assert Settings.from_env({DB_ENV: " ", CLICKHOUSE_ENV: ""}) == Settings()

    def test_describe_hides_the_password(self) -> None:
        """A ClickHouse URL is shown without its password."""
        text = Settings(clickhouse="http://u:secret@ch:8123/otel").describe()
        assert "secret" not in text and "u:***@ch:8123" in text


class TestFilters:
    def test_all_time(self) -> None:
        """All time is no time bounds; the bucket fits the data's span."""
        filters, bucket = resolve(Selection(tools=("t",)), OPTIONS)
        assert filters == Filters(tools=("t",))
        assert bucket == timedelta(hours=1)

    def test_relative_window_ends_at_the_latest_call(self) -> None:
        """Last hour starts an hour before the latest call and is open-ended."""
        filters, bucket = resolve(Selection(window="Last hour"), OPTIONS)
        assert filters.start == datetime(2026, 1, 3, 11, 0) and filters.end is None
        assert bucket == timedelta(minutes=1)

    def test_custom_days_are_inclusive(self) -> None:
        """Custom dates cover whole UTC days, the last one included."""
        selection = Selection(window=CUSTOM, days=(date(2026, 1, 1), date(2026, 1, 2)))
        filters, _ = resolve(selection, OPTIONS)
        assert (filters.start, filters.end) == (datetime(2026, 1, 1), datetime(2026, 1, 3))

    def test_bucket_for_draws_at_most_sixty_points(self) -> None:
        """The bucket is the smallest that keeps a trend to 60 points."""
        assert bucket_for(timedelta(minutes=30)) == timedelta(minutes=1)
        assert bucket_for(timedelta(hours=3)) == timedelta(minutes=5)
        assert bucket_for(timedelta(days=365)) == timedelta(days=7)


class TestFormat:
    def test_numbers(self) -> None:
        """Counts with separators, rates to 0.1%, a dash for no rate, durations in words."""
        assert fmt.count(1234567) == "1,234,567"
        assert fmt.rate(0.36415) == "36.4%"
        assert fmt.rate(None) == fmt.NO_RATE
        assert fmt.ms(0.20785) == "208 µs" and fmt.ms(42.58) == "42.6 ms"
        assert fmt.ms(0.000852) == "0.852 µs" and fmt.ms(0.0085) == "8.50 µs"
        assert fmt.ms(1234) == "1.23 s" and fmt.ms(0) == "0 µs"
        assert fmt.time_unit([0.2, 0.9]) == ("µs", 1000.0)
        assert fmt.time_unit([0.2, 62.0]) == ("ms", 1.0)
        assert fmt.time_unit([12_000.0]) == ("s", 0.001)
        assert fmt.duration(timedelta(minutes=5)) == "5 minutes"
        assert fmt.duration(timedelta(hours=1)) == "1 hour"


class TestAttributeText:
    def test_retry_delay_reads_as_a_duration(self) -> None:
        """A retry's delay in seconds prints in ms, not as 0.04347474027872161."""
        from analytics.units import attribute_text

        assert attribute_text("guard.retry.delay_s", 0.04347474027872161) == "43.5 ms"
        assert attribute_text("guard.approval.wait_ms", 192000.0) == "192 s"
        assert attribute_text("guard.retry.attempt", 2) == "2"
        assert attribute_text("x.ratio", 0.123456) == "0.123"
