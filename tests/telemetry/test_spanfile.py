"""Span files a failed write leaves behind: never an empty one.

The 10-minute soak's one unexplained `callgate verify` failure was an empty sidecar file: the
sidecar restarted while its disk was full, a new worker opened its first file, the write failed
(ENOSPC), the file was cut back to nothing, and the worker stopped before any write landed in it.
Every writer of span files (the trail, each sidecar worker) shares ``SpanFileWriter``, so the class
is "a file opened for a batch the disk refused". The kernel's own write failure comes from
RLIMIT_FSIZE in a child process (EFBIG, as ENOSPC would), so no mount is needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import json, os, resource, signal, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from telemetry.chain import verify
from telemetry.spanfile import SpanFileWriter, TrailWriteError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
home = Path({home!r})
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

def refused(writer, lines):
    try:
        writer.write_lines(lines)
    except TrailWriteError:
        return True
    return False

def names(directory):
    return sorted((p.name.rsplit("-", 1)[-1], p.stat().st_size > 0) for p in directory.iterdir())

line = '{{"resourceSpans":[{{"resource":{{"attributes":[]}},"pad":"' + "x" * 200 + '"}}]}}'
report = {{}}

# 1. A writer whose very first write fails, then stops: it leaves no file at all.
first = SpanFileWriter(home / "first")
resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))
report["first_refused"] = refused(first, [line])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
first.close()
report["first_files"] = names(home / "first")

# 2. The same writer's next write, once there is room, opens the file again, same name.
again = SpanFileWriter(home / "again")
resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))
refused(again, [line])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
again.write_lines([line])
again.close()
report["again_files"] = names(home / "again")

# 3. Rotation onto a full disk: the next file is refused and removed; the chain goes on in it.
rotating = SpanFileWriter(home / "rotating", max_bytes=300)
rotating.write_lines([line])
resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))
report["rotation_refused"] = refused(rotating, [line])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
report["stopped_files"] = names(home / "rotating")
rotating.write_lines([line])
rotating.close()
report["rotating_files"] = names(home / "rotating")
report["lines"], report["lost"] = rotating.lines, rotating.lost_lines
checked = verify([home / "again", home / "rotating"])
report["verified"] = checked.ok
report["problems"] = [str(p) for p in checked.problems]
print(json.dumps(report))
"""


def run_child(home: Path) -> dict[str, object]:
    script = textwrap.dedent(_CHILD.format(root=str(ROOT), home=str(home)))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


class TestNoEmptyFiles:
    """A file opened for a batch the kernel refused is removed; the next write opens it again."""

    def test_a_failed_write_leaves_no_empty_file(self, tmp_path: Path) -> None:
        """A writer whose only write failed leaves nothing; one that writes later has one file,
        under the first name; a rotation onto a full disk leaves the earlier file alone, and the
        chain verifies across both files."""
        report = run_child(tmp_path)
        assert report["first_refused"] is True and report["first_files"] == []
        assert report["again_files"] == [["0001.jsonl", True]]
        assert report["rotation_refused"] is True
        assert report["stopped_files"] == [["0001.jsonl", True]]
        assert report["rotating_files"] == [["0001.jsonl", True], ["0002.jsonl", True]]
        assert (report["lines"], report["lost"]) == (2, 1)
        assert report["verified"] is True, report["problems"]
