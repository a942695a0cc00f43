"""The fenced code blocks of the docs (docs/*.md and README.md), as a reader sees them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

# A fence at the start of a line, its language, its body up to the closing fence; and the line
# before it, where `<!-- excerpt: why -->` says the block is not meant to run as copied.
_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_EXCERPT = re.compile(r"<!--\s*excerpt:(.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text, and why it is an excerpt if it is."""

    path: Path
    line: int
    language: str
    text: str
    excerpt: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def code_blocks(path: Path) -> list[Block]:
    """Every fenced block of one Markdown file, in order."""
    text = path.read_text()
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _EXCERPT.search(before)
        blocks.append(
            Block(
                path=path,
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group(1),
                text=match.group(2),
                excerpt=marker.group(1).strip() if marker else None,
            )
        )
    return blocks
