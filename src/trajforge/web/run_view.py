"""The run view: task, source, outcome, risk curve, then the conversation as a timeline with
tool calls as JSON, long outputs folded, and labels, faults and diagnoses at their message."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping

import orjson

from trajforge.diagnose.model import Diagnosis
from trajforge.schema import Message, Trajectory
from trajforge.web.html import h, link, outcome_badge, run_link, url
from trajforge.web.plots import risk_plot
from trajforge.web.risk import RiskCurve

FOLD_CHARS = 1200
"""Text longer than this is folded (first lines shown, the rest one click away)."""


def run_view(
    traj: Trajectory, diagnoses: list[Diagnosis], params: Mapping[str, str], children: int
) -> str:
    """The page body. The risk curve is a separate fragment (`risk_block`) the page loads
    after it shows: scoring every prefix costs more than the rest of the page."""
    selected = _int_or_none(params.get("msg"))
    terms = _terms(params.get("q"))
    notes = _annotations(traj, diagnoses)
    parts = [
        _heading(traj, children),
        _diagnoses_block(traj, diagnoses),
        f'<section class="risk" id="risk" data-src="/runs/{h(traj.id)}/risk">'
        '<p class="dim">scoring failure risk…</p></section>',
        '<section class="timeline" id="timeline">',
        *(
            _message(traj, i, m, notes.get(i, []), i == selected, terms)
            for i, m in enumerate(traj.messages)
        ),
        "</section>",
    ]
    return "".join(parts)


def _int_or_none(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


def _terms(q: str | None) -> re.Pattern | None:
    words = [w for w in re.findall(r"\w+", q or "") if w not in ("AND", "OR", "NOT", "NEAR")]
    if not words:
        return None
    return re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)


def _heading(traj: Trajectory, children: int) -> str:
    task, source, outcome = traj.task, traj.source, traj.outcome
    facts = [
        ("source", source.harness),
        ("model", source.model),
        ("run", source.run),
        ("environment", task.environment),
        ("task", task.id),
        ("reward", outcome.reward),
        ("ended", outcome.termination_reason),
        ("judged by", outcome.judged_by),
        ("tokens", traj.usage.total_tokens),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{h(v)}</dd>" for k, v in facts if v not in (None, ""))
    links = [link(f"/api/runs/{traj.id}", "JSON")]
    if traj.parent or children:
        links.append(link(f"/runs/{traj.id}/tree", "fork tree"))
    if traj.parent:
        links.append(
            link(url("/diff", {"a": traj.parent.trajectory_id, "b": traj.id}), "diff with parent")
        )
    if any(c.completion_token_ids for c in traj.llm_calls):
        links.append(link(f"/runs/{traj.id}/tokens", "tokens"))
    if task.id:
        same_task = url("/", {"task": task.id, "env": task.environment})
        links.append(link(same_task, "other runs of this task"))
    links.append(
        f'<form action="/diff" method="get" class="inline"><input type="hidden" name="a" '
        f'value="{h(traj.id)}"><input name="b" placeholder="run id to diff with" size="18">'
        "<button>diff</button></form>"
    )
    parent = ""
    if traj.parent:
        parent = (
            f"<p>fork of {run_link(traj.parent.trajectory_id)} at message "
            f"{traj.parent.message_index}</p>"
        )
    instruction = _text_block(task.instruction or "", None) if task.instruction else ""
    return (
        f'<h1>Run <span class="mono" id="run-id">{h(traj.id)}</span> '
        f"{outcome_badge(outcome.status)}</h1>{parent}<dl class=facts>{dl}</dl>"
        f'<p class="links">{" · ".join(links)}</p>'
        f'<details class="task" open><summary>Task</summary>{instruction}</details>'
    )


VERIFIED_MEANS = (
    "verified: the correction at the decisive message passes (by fork: the expert continuing "
    "after it succeeds; by evidence: the cited messages and the call's schema check out). It "
    "does not say the decisive message is the run's first mistake."
)


def _diagnoses_block(traj: Trajectory, diagnoses: list[Diagnosis]) -> str:
    if not diagnoses:
        return ""
    items = []
    for d in diagnoses:
        step = "" if d.step is None else f" at {_message_link(d.step)}"
        verdict = "verified" if d.verified else "not verified"
        fix = f"<br>correction: <code>{h(d.correction.text())}</code>" if d.correction else ""
        items.append(
            f"<li><b>{h(d.category or 'uncategorized')}</b> by {h(d.method)}{step}"
            f" ({verdict}): {h(d.explanation)}{_localizations(d)}{fix}</li>"
        )
    return (
        f'<section class="diagnoses"><h2>Diagnoses</h2><ul>{"".join(items)}</ul>'
        f'<p class="dim">{h(VERIFIED_MEANS)}</p></section>'
    )


def _message_link(index: int) -> str:
    return link(f"#m-{index}", f"message {index}")


def _localizations(d: Diagnosis) -> str:
    """The point of no return and the first deviation, named (counterfactual diagnoses)."""
    parts = []
    if d.point_of_no_return is not None:
        parts.append(
            f"point of no return: {_message_link(d.point_of_no_return)} (the last message "
            "from which the expert still succeeds)"
        )
    found = d.first_deviation
    if found is not None:
        fix = (
            f"; correction there: <code>{h(found.correction.text())}</code>"
            if found.correction
            else ""
        )
        repaired = "" if found.repaired is None else f" ({h(found.repair_detail)})"
        parts.append(
            f'<span class="first-deviation">first deviation: '
            f"{_message_link(found.message_index)}, {h(found.reason)}: {h(found.detail)}"
            f"{fix}{repaired}</span>"
        )
    return "".join(f"<br>{part}" for part in parts)


def risk_block(curve: RiskCurve | None, note: str) -> str:
    """The failure-risk plot with its threshold and stop point (an HTML fragment)."""
    if curve is None:
        return '<p class="dim">no failure-risk curve: this run has no agent steps</p>'
    labels = [f"message {i}" for i in curve.message_indices]
    stop = (
        f"stops at step {curve.stop_step} (message "
        f"{link(f'#m-{curve.stop_message}', curve.stop_message)})"
        if curve.stop_step
        else "the stop rule does not fire on this run"
    )
    threshold = "" if curve.threshold is None else f", threshold {curve.threshold:.3f}"
    marker = ""
    if curve.stop_message is not None:  # app.js puts this markup on the stop message
        stop_note = f'<div class="note stop">monitor would stop here (step {curve.stop_step})</div>'
        marker = (
            f'<span hidden data-stop-message="{curve.stop_message}" '
            f'data-note="{h(stop_note)}"></span>'
        )
    return (
        f"<h2>Failure risk ({h(curve.detector)}{threshold})</h2>"
        f"{risk_plot(curve.risks, curve.threshold, curve.stop_step, labels)}"
        f'<p class="dim">{stop}. {h(note)}</p>{marker}'
    )


def _pnr(d: Diagnosis) -> str:
    return ", point of no return" if d.point_of_no_return is not None else ""


def _annotations(traj: Trajectory, diagnoses: list[Diagnosis]) -> dict[int, list[str]]:
    notes: dict[int, list[str]] = defaultdict(list)
    for label in traj.labels:
        where = label.message_index if label.message_index is not None else 0
        text = " · ".join(str(v) for v in (label.agent, label.category, label.reason) if v)
        notes[where].append(f'<div class="note label">{h(label.source)} label: {h(text)}</div>')
    for fault in traj.faults:
        text = " ".join(str(v) for v in (fault.kind, fault.tool, fault.detail) if v)
        notes[fault.message_index].append(
            f'<div class="note fault">injected fault: {h(text)}</div>'
        )
    for d in diagnoses:
        if d.step is None:
            continue
        cites = ", ".join(link(f"#m-{e.message_index}", e.message_index) for e in d.evidence)
        cited = f" (evidence: {cites})" if cites else ""
        notes[d.step].append(
            f'<div class="note diagnosis">diagnosis {h(d.method)}{_pnr(d)}: '
            f"<b>{h(d.category)}</b> {h(d.explanation)}{cited}</div>"
        )
        if d.first_deviation is not None:
            found = d.first_deviation
            notes[found.message_index].append(
                f'<div class="note diagnosis">first deviation ({h(d.method)}): '
                f"<b>{h(found.reason)}</b> {h(found.detail)}</div>"
            )
        for e in d.evidence:
            notes[e.message_index].append(
                f'<div class="note evidence">cited by the {h(d.method)} diagnosis: '
                f"{h(e.note or e.quote)}</div>"
            )
    return notes


def _message(
    traj: Trajectory, i: int, m: Message, notes: list[str], selected: bool, terms: re.Pattern | None
) -> str:
    speaker = m.role + (f" · {m.name}" if m.name else "")
    cls = f"msg role-{m.role}" + (" selected" if selected else "")
    body = _text_block(m.text(), terms) if m.text() else ""
    calls = "".join(_tool_call(c.name, c.arguments) for c in m.tool_calls or [])
    answered = f' <span class="dim">answers {h(m.tool_call_id)}</span>' if m.tool_call_id else ""
    run = h(traj.id)
    actions = (
        f'<a href="/runs/{run}?msg={i}" class="dim">#{i}</a> '
        f'<a href="/runs/{run}/fork?at={i}" class="fork-link">fork from here</a>'
    )
    return (
        f'<article class="{cls}" id="m-{i}" data-index="{i}"><header><b>{h(speaker)}</b>'
        f'{answered}<span class="actions">{actions}</span></header>'
        f"{''.join(notes)}{body}{calls}</article>"
    )


def _tool_call(name: str, arguments: str) -> str:
    try:
        shown = orjson.dumps(orjson.loads(arguments), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        shown = arguments
    return f'<div class="call"><span class="call-name">{h(name)}</span><pre>{h(shown)}</pre></div>'


def _text_block(text: str, terms: re.Pattern | None) -> str:
    if len(text) <= FOLD_CHARS:
        return f"<pre>{_marked(text, terms)}</pre>"
    head, rest = text[:FOLD_CHARS], text[FOLD_CHARS:]
    return (
        f"<pre>{_marked(head, terms)}</pre><details class=fold>"
        f"<summary>{len(rest):,} more characters</summary>"
        f"<pre>{_marked(rest, terms)}</pre></details>"
    )


def _marked(text: str, terms: re.Pattern | None) -> str:
    """Escaped text with the search terms in <mark>."""
    if terms is None:
        return h(text)
    parts, last = [], 0
    for match in terms.finditer(text):
        parts.append(h(text[last : match.start()]))
        parts.append(f"<mark>{h(match.group(0))}</mark>")
        last = match.end()
    parts.append(h(text[last:]))
    return "".join(parts)
