"""The dashboard on the retail trail: shadow decisions and warnings apart from rejections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from analytics import connect
from analytics.load import load
from tests.dashboards.conftest import make_app

SPANS = tuple[Path, dict[str, int]]


@pytest.fixture
def retail_app(retail_trail: SPANS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    db = tmp_path / "retail.duckdb"
    con = connect(db)
    load(con, sorted(retail_trail[0].glob("*.jsonl")))
    con.close()
    return make_app(monkeypatch, db)


def table(at: AppTest, title: str) -> list[dict[str, Any]]:
    """The rows of the first dataframe after the subheader ``title``."""
    blocks = list(at.main)
    start = next(
        i
        for i, b in enumerate(blocks)
        if isinstance(getattr(b, "value", None), str) and b.value == title
    )
    frame = next(b for b in blocks[start:] if type(b).__name__ == "Dataframe")
    rows: list[dict[str, Any]] = frame.value.to_dict("records")
    return rows


class TestRetailOnTheDashboard:
    """Where a user looks for rejections, shadow decisions and warnings are shown apart."""

    def test_rejections_page_shows_shadow_and_warnings_apart(self, retail_app: AppTest) -> None:
        """The heatmap counts the enforced VARIANT_MISMATCH once; shadow and warnings have tables."""
        retail_app.run()
        retail_app.sidebar.radio(key="page").set_value("rejections").run()
        assert not retail_app.exception, retail_app.exception
        heat = retail_app.dataframe[0].value.to_dict("records")
        assert [r["rejected"] for r in heat if r["code"] == "VARIANT_MISMATCH"] == [1]
        (shadow,) = table(retail_app, "Shadow mode: would have rejected")
        assert (shadow["tool"], shadow["code"], shadow["would have rejected"]) == (
            "exchange_delivered_order_items",
            "VARIANT_MISMATCH",
            1,
        )
        (warning,) = table(retail_app, "Warnings that let calls through")
        assert (warning["code"], warning["warnings"]) == ("SAME_ITEM", 1)
