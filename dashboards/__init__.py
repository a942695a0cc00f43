"""callgate's Streamlit dashboard: reads analytics' query functions, never SQL of its own.

``callgate dashboard --db FILE`` serves it; :func:`start_server` does the same from Python.
"""

from dashboards.cli import dashboard
from dashboards.server import free_port, start_server, wait_until_ready
from dashboards.settings import Settings

__all__ = ["Settings", "dashboard", "free_port", "start_server", "wait_until_ready"]
