"""Masking's worst case over adversarial inputs up to 64 KiB: the goal is under 5 ms per call.

Each input family targets one way a backtracking detector can go quadratic (a long run of a
pattern's own characters with no valid end, many overlapping starts, long separator runs), plus
ordinary text full of real secrets. Every input is masked through each entry point a span value
takes: ``text`` (free text: messages, raw arguments, ids), ``raw_json`` (arguments that did not
parse), ``json`` (parsed arguments holding the string) and ``mask_text`` (the full scan, no cap:
what a 64 KiB value costs when everything must be scanned). Reported: the worst per-call time per
entry point, the input that caused it, and, for scale, the same inputs through main's masker
(``git show main:telemetry/masking.py``), measured once each and only up to 16 KiB (it takes
seconds beyond). The machine may be loaded by other work: read the ratios, and the worst case with
that in mind.

Run: ``.venv/bin/python bench/masking.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from telemetry.masking import Masker  # noqa: E402

KEY = b"bench-key"
SIZES = (1024, 4096, 16384, 65536)
GOAL_MS = 5.0


def families() -> dict[str, Callable[[int], str]]:
    """Input name -> a function giving an input of about ``n`` characters."""

    def rep(unit: str, tail: str = "") -> Callable[[int], str]:
        return lambda n: (unit * (n // len(unit) + 1))[: n - len(tail)] + tail

    return {
        "a*n + @": rep("a", "@"),
        "a*n + @a": rep("a", "@a"),
        "a.@ runs": rep("a.", "@"),
        "@a.a.a. (domain)": lambda n: "x@" + rep("a.")(n - 2),
        "a@a@a@": rep("a@"),
        "eyJ- starts": rep("eyJ-"),
        "eyJ long header": lambda n: "eyJ" + rep("a")(n - 3),
        "eyJa.a. segments": lambda n: "eyJaaaa." + rep("a.")(n - 8),
        "sk- starts": rep("sk-"),
        "ghp_ starts": rep("ghp_"),
        "bearer + spaces": lambda n: "bearer" + rep(" ")(n - 7) + "x",
        "bearer bearer": rep("bearer "),
        "digits, spaced": rep("1 "),
        "digits, dashed": rep("1-"),
        "digit run": rep("1"),
        "card groups": rep("4111 "),
        "IBAN-like": rep("AA11"),
        "IBAN spaced": rep("GB82 "),
        "phone-like": rep("+1 (2) "),
        "JSON escapes": rep("\\u0034"),
        "sensitive key soup": rep('"card_number": "'),
        "secrets in prose": rep(
            "mail maria.silva@example.com card 4111 1111 1111 1111 iban GB82WEST12345698765432 "
            "key sk-proj-abcdefghijklmnop1234 "
        ),
    }


def entry_points(masker: Any) -> dict[str, Callable[[str], Any]]:
    points: dict[str, Callable[[str], Any]] = {"text": masker.text, "mask_text": masker.mask_text}
    if hasattr(masker, "raw_json"):
        points["raw_json"] = lambda s: masker.raw_json('{"card_number": "' + s, {"card_number"})
    points["json"] = lambda s: masker.json({"note": s, "card_number": s}, {"card_number"})
    return points


def timed(function: Callable[[str], Any], value: str, repeat: int) -> tuple[float, float]:
    """The median and the slowest of ``repeat`` calls, in ms, GC off.

    The median is what the input costs; the slowest also holds what the loaded machine added
    (another process on the core, a page fault), so the goal is judged on the median per input.
    """
    times = []
    gc.disable()
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            function(value)
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return statistics.median(times) * 1000, max(times) * 1000


def main_masker() -> ModuleType | None:
    """main's telemetry/masking.py, loaded under another name; None outside a git checkout."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", "main:telemetry/masking.py"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "main_masking.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("main_masking", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["main_masking"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=9, help="calls per input (median counts)")
    parser.add_argument("--no-main", action="store_true", help="skip main's masker")
    options = parser.parse_args()
    masker = Masker(key=KEY)
    inputs = families()
    print(f"{len(inputs)} input families x sizes {SIZES} chars; {options.repeat} calls per input")
    print(
        f"{'entry point':<12} {'worst input ms':>14} {'slowest call ms':>15} {'median ms':>10}  worst input"
    )
    verdict = True
    worst_all = 0.0
    for point, function in entry_points(masker).items():
        results = []
        slowest = 0.0
        for name, make in inputs.items():
            for size in SIZES:
                median, longest = timed(function, make(size), options.repeat)
                results.append((median, name, size))
                slowest = max(slowest, longest)
        results.sort()
        worst, name, size = results[-1]
        typical = results[len(results) // 2][0]
        worst_all = max(worst_all, worst)
        verdict = verdict and worst < GOAL_MS
        print(
            f"{point:<12} {worst:>14.3f} {slowest:>15.3f} {typical:>10.3f}  {name} ({size} chars)"
        )
    print(f"goal: the worst input costs < {GOAL_MS} ms per call, every input up to 64 KiB: "
          f"{'met' if verdict else 'NOT met'} (worst {worst_all:.3f} ms)")  # fmt: skip
    old = None if options.no_main else main_masker()
    if old is None:
        return
    before = old.Masker(key=KEY)
    print("\nmain's masker, same inputs, mask_text once each up to 16 KiB (ms; x = main / this):")
    rows = []
    for name, make in inputs.items():
        for size in (4096, 16384):
            value = make(size)
            ms_old = timed(before.mask_text, value, 1)[0]
            ms_new = timed(masker.mask_text, value, options.repeat)[0]
            rows.append((ms_old, name, size, ms_new))
    rows.sort(reverse=True)
    for ms_old, name, size, ms_new in rows[:8]:
        print(
            f"  {name:<22} {size:>6}  main {ms_old:>9.2f}  now {ms_new:>7.3f}  {ms_old / max(ms_new, 1e-6):>8.0f}x"
        )


if __name__ == "__main__":
    main()
