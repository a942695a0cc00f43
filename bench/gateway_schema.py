"""What the gateway's jsonschema checks add to argument validation, on a schema the SDK lists.

One tool with ordinary type hints (dict, Any, tuples, a discriminated union, a set, an integer
Literal, a float). "typed" is the same schema without the keywords that need a check (the set's
``uniqueItems``, the integer enum); "checked" is the schema as listed. Blocks of the two alternate
and repeat, so a loaded machine slows both alike; the figure is the ratio and the difference of
medians, per validation of one call's arguments (the guard's strict JSON path).

    python bench/gateway_schema.py [--rounds 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from callgate.gateway import model_from_schema


class A(BaseModel):
    kind: Literal["a"]
    x: int


class B(BaseModel):
    kind: Literal["b"]
    y: str | None = None


def listed() -> dict[str, Any]:
    app = MCPServer("bench")

    @app.tool()
    def f(
        d: dict[str, Any],
        di: dict[str, int],
        a: Any,
        t: tuple[int, str],
        u: Annotated[A | B, Field(discriminator="kind")],
        s: set[int],
        n: float | None = None,
        lit: Literal[1, 2] = 1,
    ) -> str:
        return "x"

    async def tools() -> Any:
        return await app.list_tools()

    schema: dict[str, Any] = anyio.run(tools)[0].input_schema
    return schema


ARGUMENTS = json.dumps(
    {
        "d": {"a": 1},
        "di": {"x": 3},
        "a": [1],
        "t": [1, "a"],
        "u": {"kind": "a", "x": 1},
        "s": [1, 2],
    }
)


def per_call(model: Any, calls: int) -> float:
    validator = model.__pydantic_validator__
    start = time.perf_counter()
    for _ in range(calls):
        validator.validate_json(ARGUMENTS, strict=True)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    options = parser.parse_args()
    schema = listed()
    typed_schema = json.loads(json.dumps(schema))
    typed_schema["properties"]["s"].pop("uniqueItems")
    typed_schema["properties"]["lit"] = {"enum": ["1", "2"], "default": "1"}
    checked, typed = model_from_schema("f", schema), model_from_schema("f", typed_schema)
    typed_us, checked_us = [], []
    for _ in range(options.rounds):
        typed_us.append(per_call(typed, options.calls))
        checked_us.append(per_call(checked, options.calls))
    ratios = [c / t for c, t in zip(checked_us, typed_us, strict=True)]
    print(
        f"typed {statistics.median(typed_us):.1f} us, checked {statistics.median(checked_us):.1f} us"
        f" per call (medians of {options.rounds} alternating blocks of {options.calls});"
        f" added {statistics.median(checked_us) - statistics.median(typed_us):.1f} us,"
        f" ratio {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
