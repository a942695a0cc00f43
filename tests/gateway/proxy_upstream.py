"""An upstream with resources, templates, prompts and completions, and tools that report progress,
log, return a resource link, and try to reach the client (sampling, elicitation, roots)."""

from __future__ import annotations

import warnings

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

app = MCPServer("library")


@app.resource("docs://readme", description="The readme.")
def readme() -> str:
    return "read me first"


@app.resource("secret://key")
def secret() -> str:
    return "the key"


@app.resource("docs://pages/{page}")
def page(page: str) -> str:
    return f"page {page}"


@app.prompt(description="Greets someone.")
def greet(name: str) -> str:
    return f"Say hello to {name}."


@app.completion()
async def complete(
    ref: types.PromptReference | types.ResourceTemplateReference,
    argument: types.CompletionArgument,
    context: types.CompletionContext | None,
) -> types.Completion | None:
    names = ["alice", "alan", "bob"]
    return types.Completion(values=[n for n in names if n.startswith(argument.value)])


@app.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def count(ctx: Context) -> str:
    """Counts to four, reporting progress and logging three messages."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(1, 5):
            await ctx.report_progress(step, 4, f"step {step}")
            if step < 4:
                await ctx.info(f"counted {step}")
    return "counted"


@app.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def report_link() -> list[types.ContentBlock]:
    """Returns a link to a page, as tools that produce files do."""
    return [types.ResourceLink(name="report", uri="docs://pages/report")]


@app.tool(annotations=types.ToolAnnotations(destructive_hint=False))
def save_note(text: str) -> str:
    """A write that changes nothing irreversible (medium risk): runs unless the session is tainted."""
    return f"saved {text}"


class Reach(BaseModel):
    sampling: str
    elicitation: str
    roots: str


@app.tool(annotations=types.ToolAnnotations(read_only_hint=True))
async def reach_client(ctx: Context) -> Reach:
    """Tries the three client features an upstream may ask for; says how each ended."""

    async def attempt(request: object) -> str:
        try:
            await request  # type: ignore[misc]
        except Exception as err:
            return f"refused: {err}"
        return "answered"

    session = ctx.session
    return Reach(
        sampling=await attempt(
            session.create_message(
                messages=[
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text="hi")
                    )
                ],
                max_tokens=5,
            )
        ),
        elicitation=await attempt(
            session.elicit_form(
                message="your password?",
                requested_schema={"type": "object", "properties": {"p": {"type": "string"}}},
            )
        ),
        roots=await attempt(session.list_roots()),
    )


if __name__ == "__main__":
    app.run()
