"""The clocks leases are judged on: one the processes sharing a store share, and no caller steps.

A claim's lease used to be judged on each caller's clock, so a caller whose clock was ahead saw
another's live claim stale and took it over mid-write (the soak did it with a +1000 s step). A
lease is a duration, so it is measured on a steady clock of the store's, read by the store:

- the memory store (one process): the process's monotonic clock;
- SQLite (processes on one host): ``CLOCK_BOOTTIME``, system-wide on Linux and never stepped
  (it also counts suspend, so a suspended holder's lease runs out as the wall clock's would),
  paired with the kernel's boot id, so a claim from before a reboot reads as stale;
- Redis: the server's ``TIME``, read inside the claim script (``guard.stores._redis_lua``).

A reading is ``(epoch, seconds)``: readings compare only within one epoch, and a claim stamped in
another epoch (another boot) is stale. Tests pass their own clock (``ManualClock.lease_clock``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["BOOT_ID_PATH", "LeaseClock", "host_lease_clock", "process_lease_clock"]

LeaseClock = Callable[[], tuple[str, float]]
"""A store's lease clock: ``(epoch, seconds)``; seconds never go back within an epoch."""

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str | None:
    try:
        return BOOT_ID_PATH.read_text().strip() or None
    except OSError:
        return None


_BOOT_ID = _boot_id()
_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)
_PROCESS_EPOCH = f"process:{id(object())}:{time.monotonic_ns()}"


def host_lease_clock() -> tuple[str, float]:
    """The host's steady clock, shared by every process on it: the SQLite store's default.

    Without a boot id and ``CLOCK_BOOTTIME`` (not Linux) it is the wall clock, epoch ``"wall"``:
    leases are then judged on the host's clock, which at least every process on the host shares.
    """
    if _BOOT_ID is None or _BOOTTIME is None:
        return "wall", time.time()
    return _BOOT_ID, time.clock_gettime(_BOOTTIME)


def process_lease_clock() -> tuple[str, float]:
    """This process's monotonic clock: the memory store's default (its callers share the process)."""
    return _PROCESS_EPOCH, time.monotonic()
