"""What the host hands every check and handler: ``Guard(deps=RetailDeps(...))``."""

from __future__ import annotations

from dataclasses import dataclass

from examples.retail.backend import RetailBackend

__all__ = ["RetailDeps"]


@dataclass(frozen=True, kw_only=True)
class RetailDeps:
    """Typed dependencies: checks read ``ctx.deps.backend`` instead of a global."""

    backend: RetailBackend
    """The store's systems."""
    max_items_per_exchange: int = 3
    """A business setting the checks read."""
