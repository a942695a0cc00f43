"""Every Python example in docs/integrations.md runs as written (offline models, real frameworks)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest
from agents.tracing import set_trace_processors
from agents.tracing.processors import default_processor

from tests.docs_blocks import ROOT, code_blocks

DOC = ROOT / "docs" / "integrations.md"
BLOCKS = [block.text for block in code_blocks(DOC) if block.language == "python"]


@pytest.fixture(autouse=True)
def no_trace_export() -> Iterator[None]:
    """The Agents SDK would export its traces to OpenAI; the examples keep them local."""
    set_trace_processors([])
    yield
    set_trace_processors([default_processor()])


class TestIntegrationsDoc:
    """The examples of docs/integrations.md."""

    def test_there_is_an_example_per_framework(self) -> None:
        """Each adapter module appears in at least one example."""
        text = "\n".join(BLOCKS)
        for module in ("pydantic_ai", "openai_agents", "langgraph"):
            assert f"callgate.adapters.{module} import" in text

    @pytest.mark.parametrize("index", range(len(BLOCKS)))
    def test_example_runs(
        self, index: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The example runs to its end (its own asserts included) and prints what it says."""
        name = f"integrations_example_{index}"
        module = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, module)
        code = compile(BLOCKS[index], f"{DOC}:example {index + 1}", "exec")
        exec(code, module.__dict__)
        out = capsys.readouterr().out
        if "print(" in BLOCKS[index]:
            assert ("approve?" in out or "Approve " in out) and "done" in out
