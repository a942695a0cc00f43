"""Command-line options that more than one command reads, defined once so they cannot drift.

``callgate report`` and ``callgate dashboard`` must split pending from expired approvals at the same
TTL, or the CLI and the dashboard disagree about the same database (issue 22).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from .confirmations import DEFAULT_CONFIRMATION_TTL

__all__ = ["CONFIRMATION_TTL_ENV", "confirmation_ttl_option"]

CONFIRMATION_TTL_ENV = "CALLGATE_CONFIRMATION_TTL"
"""Seconds an approval stays open in the deployment, for every command that counts approvals."""

F = TypeVar("F", bound=Callable[..., object])


def confirmation_ttl_option(command: F) -> F:
    """``--confirmation-ttl SECONDS`` (or ``$CALLGATE_CONFIRMATION_TTL``; default the guard's
    ``Policy.confirmation_ttl``): older undecided approvals count as expired, not pending."""
    return click.option(
        "--confirmation-ttl",
        "confirmation_ttl",
        default=DEFAULT_CONFIRMATION_TTL.total_seconds(),
        envvar=CONFIRMATION_TTL_ENV,
        show_default=True,
        show_envvar=True,
        type=click.FloatRange(min=0, min_open=True, max=10 * 365 * 86400),
        help="Seconds a pending approval stays open (the guard's Policy.confirmation_ttl): "
        "older undecided approvals count as expired, not pending.",
    )(command)
