"""The dashboard's server process: ``python -m dashboards.launch run dashboards/app.py [flags]``.

Streamlit imports nothing of the app until the first browser session runs the script, so the first
person to open a freshly started dashboard (the link ``callgate demo`` prints) waited for every
import of the pages, analytics, DuckDB, pandas and Altair (seconds on a loaded machine) before
anything was drawn. This entry point imports them first, then hands the command line to
Streamlit's own ``streamlit`` command unchanged.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["WARM", "main", "warm"]


WARM = ("duckdb", "pandas", "pyarrow", "altair", "dashboards.main")
"""What the first render needs: DuckDB, the pandas and Arrow that Streamlit converts chart data
through (imported lazily, on the first chart), Altair, and the pages with analytics' queries."""


def warm() -> None:
    """Import :data:`WARM`: the script's modules then stay in ``sys.modules`` for every session."""
    for name in WARM:
        importlib.import_module(name)


def main() -> None:
    warm()
    from streamlit.web.cli import main as streamlit

    sys.argv[0] = "streamlit"
    streamlit()


if __name__ == "__main__":
    main()
