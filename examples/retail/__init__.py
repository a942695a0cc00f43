"""A second reference domain: retail customer support, written with callgate's public API only.

Users are found by e-mail or by name and zip code; orders hold several items; delivered items can
be exchanged for another variant of the same product or returned; payment methods include gift
cards with a balance. ``docs/domains.md`` walks through it; ``tests/examples/test_retail.py`` runs
its scenario.
"""

from examples.retail.app import RetailApp, build_retail, replay_target, retail_policy
from examples.retail.backend import RetailBackend, default_backend
from examples.retail.codes import RETAIL_CODES
from examples.retail.deps import RetailDeps
from examples.retail.tools import retail_tools

__all__ = [
    "RETAIL_CODES",
    "RetailApp",
    "RetailBackend",
    "RetailDeps",
    "build_retail",
    "default_backend",
    "replay_target",
    "retail_policy",
    "retail_tools",
]
