"""Trace explorer: find a call by trace id, session or call id; its stages as a waterfall.

The URL carries the search (``?page=trace&trace=<id>``, ``&session=<s>``, ``&call_id=<c>``), so a
link from another page, a chat message or an incident ticket opens the same view.
"""

from __future__ import annotations

import json
import shlex
from functools import partial
from typing import Any

import streamlit as st

from analytics import reconstruct
from analytics.render import decision_lines, enumeration_lines
from analytics.units import attribute_text
from telemetry import attributes as A

from .. import charts, data, fmt, safe
from .base import Page, PageContext, open_button, open_selected, trace_link

__all__ = ["PAGE"]

_QUERY_KEY = "trace_query"
_PARAMS = ("trace", "session", "call_id", "q")


def render(ctx: PageContext) -> None:
    """A search box, what it matched, and the trace it opens."""
    st.header("Trace explorer")
    if _QUERY_KEY not in st.session_state:
        st.session_state[_QUERY_KEY] = next(
            (str(st.query_params[p]) for p in _PARAMS if p in st.query_params), ""
        )
    query = str(st.text_input("Trace id, session or call id", key=_QUERY_KEY)).strip()
    if not query:
        st.caption("Paste a trace id from a log line, a session id or the model's call id.")
        return
    try:
        found = data.lookup(ctx.source, query)
    except reconstruct.AmbiguousIdError as exc:
        st.warning(f"{safe.text(str(exc))}: give more characters")
        return
    if found.trace is None and not found.calls:
        st.warning(f"Nothing found for {safe.text(query)}")
        return
    _keep_in_url(found.matched, found.id)
    if found.trace is not None:
        _trace(ctx, found.trace)
        return
    st.markdown(f"**{len(found.calls)}** call(s) in {found.matched} {safe.text(found.id)}")
    if found.matched == "session":
        for line in enumeration_lines(found.calls):
            st.warning(safe.text(line))
    _call_table(found.calls, key="trace_calls")
    labels = {_label(c): c.trace_id for c in found.calls}
    picked = st.selectbox("Open a call", list(labels), key="trace_pick")
    view = data.lookup(ctx.source, labels[str(picked)]).trace
    if view is not None:
        _trace(ctx, view)


def _keep_in_url(matched: str, query: str) -> None:
    """Put the search in the URL, so the address bar is a link to what is on screen."""
    param = {"trace": "trace", "session": "session", "call id": "call_id"}[matched]
    if st.query_params.get(param) != query:
        for other in _PARAMS:
            if other in st.query_params:
                del st.query_params[other]
        st.query_params[param] = query


def _label(call: reconstruct.CallSummary) -> str:
    return f"step {call.step} · {call.tool} · {call.code} · {call.trace_id}"


def _call_table(calls: tuple[reconstruct.CallSummary, ...], *, key: str) -> None:
    st.dataframe(
        [
            {
                "trace": trace_link(trace=c.trace_id),
                "start": fmt.when(c.start_time),
                "step": c.step,
                "tool": c.tool,
                "code": c.code,
                "stage": c.rejected_stage or "",
                "replayed": bool(c.replayed),
                "approval": c.approval_outcome or "",
                "arguments (masked)": c.arguments or "",
                "took": fmt.ms(c.duration_ms),
            }
            for c in calls
        ],
        hide_index=True,
        column_config={"trace": st.column_config.LinkColumn("trace", display_text=r"trace=(.*)$")},
        key=key,
        on_select=partial(open_selected, key, [c.trace_id for c in calls]),
        selection_mode="single-row",
    )


def _trace(ctx: PageContext, view: reconstruct.TraceView) -> None:
    st.subheader(f"Trace {safe.text(view.trace_id)}")
    view, unreadable = data.named_deciders(view, ctx.settings.store)
    if unreadable:
        st.caption(safe.text(f"{unreadable}; deciders are shown by their keyed hash"))
    call = view.calls[0] if view.calls else None
    if call is not None:
        facts = {
            "tool": call.tool,
            "code": call.code,
            "stage": call.rejected_stage or "—",
            "session": call.session,
            "principal": call.principal,
            "call id": call.call_id,
            "step": call.step,
            "attempts": call.attempts,
            "outcome": call.outcome,
        }
        st.markdown(" · ".join(f"**{k}** {safe.text(_shown(v))}" for k, v in facts.items()))
        _why(ctx, view, call)
    rows = _waterfall_rows(view)
    st.altair_chart(charts.waterfall(rows), width="stretch")
    # A static table (not a canvas grid): a handful of rows that people copy into tickets.
    st.table(
        [
            {
                "span": safe.text(r["span"]),
                "outcome": safe.text(r["outcome"]),
                "code": safe.text(r["code"]),
                "start": "+" + fmt.ms(r["start_ms"]),
                "took": fmt.ms(r["duration_ms"]),
            }
            for r in rows
        ]
    )
    if call is not None and call.arguments:
        st.markdown("**Arguments** (masked before they were recorded)")
        st.code(_pretty(call.arguments), language="json")
    retries = [
        {
            "span": node.name,
            "event": e.name,
            "time": fmt.when(e.time),
            **{k: attribute_text(k, v) for k, v in e.attributes.items()},
        }
        for node in _nodes(view)
        for e in node.events
    ]
    keys = list(dict.fromkeys(k for r in retries for k in r))
    retries = [{k: "" if r.get(k) is None else r[k] for k in keys} for r in retries]
    if retries:
        st.markdown("**Events**")
        st.dataframe(retries, hide_index=True)
    if view.approvals:
        st.markdown("**Approval history**")
        _call_table(view.approvals, key="trace_approvals")
        for line in decision_lines(view.approvals):
            st.caption(safe.text(line))
    _reproduce(ctx, view)


def _why(ctx: PageContext, view: reconstruct.TraceView, call: reconstruct.CallSummary) -> None:
    """What the model was told, the call's untrusted/injection flags, and for a write held as
    TAINTED_CONTEXT the call that tainted the session, linked."""
    attributes = view.roots[0].attributes if view.roots else {}
    message = call.message or attributes.get(A.MESSAGE)
    if message:
        st.markdown("**Message the model received**")
        st.code(str(message), language=None, wrap_lines=True)
    if attributes.get(A.UNTRUSTED):
        st.warning(
            "This call returned **untrusted** outside text"
            + _injection(attributes.get(A.INJECTION_DETECTED), attributes.get(A.INJECTION_RULE))
            + f". Later writes in session {safe.text(call.session)} wait for a human."
        )
        _evidence(attributes.get(A.INJECTION_EXCERPT))
    _value_source(view)
    held = any(c.code == data.TAINTED_CONTEXT for c in (*view.calls, *view.approvals))
    if not held:
        return
    source = data.taint_source(ctx.source, view)
    if source is None:
        st.warning(
            "Held because the session was tainted, but no call of it that returned untrusted "
            "text is stored (it may predate the loaded spans)."
        )
        return
    st.error(
        "**Held: the session read untrusted text.** It was tainted by step "
        f"{safe.text(_shown(source.step))}, **{safe.text(_shown(source.tool))}** at "
        f"{fmt.when(source.start_time)} UTC"
        + _injection(source.injection_detected, source.injection_rule)
        + "."
    )
    open_button("Open the call that tainted the session", key="open_taint", trace=source.trace_id)
    _evidence(source.injection_excerpt)
    if source.message:
        st.caption("What the model was told for that call:")
        st.code(source.message, language=None, wrap_lines=True)


def _evidence(excerpt: object) -> None:
    """The text the injection rule matched, masked and cut (``guard.injection.excerpt``)."""
    if excerpt:
        st.caption("The text that matched (masked, cut around the match):")
        st.code(str(excerpt), language=None, wrap_lines=True)


def _value_source(view: reconstruct.TraceView) -> None:
    """For a call held as UNTRUSTED_VALUE: which argument, its masked value, and the earlier call
    whose untrusted output held it, linked (analytics' ``TraceView.value_from``)."""
    held = next((c for c in (*view.calls, *view.approvals) if c.provenance_field), None)
    if held is None:
        return
    where = (
        f"Argument **{safe.text(_shown(held.provenance_field))}** carries "
        f"{safe.text(_shown(held.provenance_value))}, which no trusted source vouches for"
    )
    if not view.value_from:
        st.error(f"**Held: untrusted value.** {where}; no earlier result of the session had it.")
        return
    source = view.value_from[0]
    st.error(
        f"**Held: untrusted value.** {where}. It came from step {safe.text(_shown(source.step))}, "
        f"**{safe.text(_shown(source.tool))}** at {fmt.when(source.start_time)} UTC"
        + _injection(source.injection_detected, source.injection_rule)
        + "."
    )
    open_button("Open the call the value came from", key="open_value", trace=source.trace_id)


def _injection(detected: object, rule: object) -> str:
    if not detected:
        return "; no instruction-like text was detected in it"
    return f"; instruction-like text was detected (rule **{safe.text(_shown(rule))}**)"


def _nodes(view: reconstruct.TraceView) -> list[reconstruct.SpanNode]:
    out: list[reconstruct.SpanNode] = []
    stack = list(reversed(view.roots))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def _waterfall_rows(view: reconstruct.TraceView) -> list[dict[str, Any]]:
    nodes = _nodes(view)
    t0 = min(n.start_time for n in nodes)
    rows = []
    for node in nodes:
        start = (node.start_time - t0).total_seconds() * 1000
        outcome = node.stage_outcome or ("call" if node.stage is None else "")
        rows.append(
            {
                "span": node.stage or node.name,
                "outcome": outcome,
                "code": node.code or "",
                "start_ms": start,
                "end_ms": start + node.duration_ms,
                "duration_ms": node.duration_ms,
                "label": f"{node.code or outcome} · {fmt.ms(node.duration_ms)}",
            }
        )
    return rows


def _shown(value: object) -> str:
    return fmt.NO_RATE if value is None or value == "" else str(value)


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def _reproduce(ctx: PageContext, view: reconstruct.TraceView) -> None:
    st.markdown(f"[Link to this view](<{trace_link(trace=view.trace_id)}>)")
    source = f"--db {shlex.quote(ctx.settings.db)}" if ctx.settings.db else "--clickhouse URL"
    st.code(f"callgate trace {shlex.quote(view.trace_id)} {source}", language="bash")
    with st.expander("As `callgate trace --json` prints it"):
        st.json(reconstruct.to_jsonable(view), expanded=False)


PAGE = Page(slug="trace", title="Trace explorer", render=render)
