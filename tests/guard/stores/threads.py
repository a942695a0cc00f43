"""Start several threads at one instant, to make races likely rather than lucky."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_together(threads: int, work: Callable[[int], T]) -> list[T]:
    """Run ``work(i)`` on ``threads`` threads released at the same instant; results in order."""
    barrier = threading.Barrier(threads)
    results: dict[int, T] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as err:  # re-raised below, on the test's thread
            errors.append(err)

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    return [results[i] for i in range(threads)]
