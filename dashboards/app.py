"""The Streamlit script: ``streamlit run dashboards/app.py``, or ``callgate dashboard --db FILE``.

Settings come from the environment (:mod:`dashboards.settings`); everything else is in
:mod:`dashboards.main`.
"""

from dashboards.main import run

run()
