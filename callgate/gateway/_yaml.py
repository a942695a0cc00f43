"""YAML that remembers where each key was written, so a refusal can name its line.

The loader refuses duplicate keys (YAML would keep the last one silently) and non-string keys; the
pydantic models in ``callgate.gateway.config`` do every other check. ``line_of`` walks a pydantic
error location back through the loaded mappings to the line of the key it names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

__all__ = ["LineMap", "line_of", "load"]


class LineMap(dict[str, Any]):
    """A mapping that remembers its own line and the line of each key."""

    line: int = 0
    lines: dict[str, int]


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> LineMap:  # type: ignore[override]
        mapping = LineMap()
        mapping.line = node.start_mark.line + 1
        mapping.lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"keys must be strings, got {key!r}", key_node.start_mark
                )
            if key in mapping:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            mapping[key] = self.construct_object(value_node, deep=True)
            mapping.lines[key] = key_node.start_mark.line + 1
        return mapping


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping
)


def load(text: str) -> Any:
    """Parse ``text``; ``yaml.YAMLError`` (with a ``problem_mark``) when it is not valid YAML."""
    return yaml.load(text, Loader=_LineLoader)


def line_of(data: Any, location: Sequence[str | int]) -> tuple[int, str]:
    """The line of the deepest key of ``location`` found in ``data``, and the location as a path.

    An integer step into a mapping is its n-th key (the models turn ``upstreams`` into a tuple), so
    the path reads ``upstreams.shop.timeout`` rather than ``upstreams.0.timeout``."""
    line = data.line if isinstance(data, LineMap) else 1
    path = ""
    node = data
    for step in location:
        if isinstance(node, LineMap):
            key = list(node)[step] if isinstance(step, int) and step < len(node) else step
            path = f"{path}.{key}" if path else str(key)
            if str(key) not in node:
                break
            line, node = node.lines[str(key)], node[str(key)]
        elif isinstance(node, list) and isinstance(step, int) and step < len(node):
            path, node = f"{path}[{step}]", node[step]
            if isinstance(node, LineMap):
                line = node.line
        else:
            path = f"{path}.{step}" if path else str(step)
            break
    return line, path
