"""The fork tree of a run and the side-by-side diff of two runs, aligned by message."""

from __future__ import annotations

from difflib import SequenceMatcher

from trajforge.schema import Message, Trajectory
from trajforge.store.runs import TreeNode
from trajforge.web.html import h, link, outcome_badge, run_link, short_id, url

PREVIEW_CHARS = 600


def tree_view(root: TreeNode, current: str) -> str:
    """Nested lists from the oldest ancestor down; the run asked for is marked."""
    return (
        f"<h1>Fork tree of {run_link(current)}</h1>"
        '<p class="dim">each fork keeps its parent\'s first N messages and continues from '
        "there; diff links compare a fork with its parent</p>"
        f'<ul class="tree" id="fork-tree">{_node(root, current)}</ul>'
    )


def _node(node: TreeNode, current: str) -> str:
    where = "" if node.fork_index is None else f"forked at message {node.fork_index} · "
    ended = f" · {h(node.termination)}" if node.termination else ""
    diff = ""
    if node.parent_id:
        diff = " · " + link(url("/diff", {"a": node.parent_id, "b": node.id}), "diff")
    cls = "node current" if node.id == current else "node"
    children = "".join(_node(child, current) for child in node.children)
    nested = f"<ul>{children}</ul>" if children else ""
    return (
        f'<li><span class="{cls}" data-id="{h(node.id)}">{run_link(node.id)} '
        f"{outcome_badge(node.status)} <span class=dim>{where}{node.n_messages} messages"
        f" · {h(node.source)} {h(node.model or '')}{ended}</span>{diff}</span>{nested}</li>"
    )


def _key(m: Message) -> tuple:
    calls = tuple((c.name, c.arguments) for c in m.tool_calls or [])
    return (m.role, m.name, m.text(), calls)


def alignment(a: Trajectory, b: Trajectory) -> list[tuple[str, int | None, int | None]]:
    """[(tag, index in a, index in b)] rows: equal, replace, delete (only in a) or insert
    (only in b), messages matched by role, speaker, text and tool calls."""
    keys_a, keys_b = [_key(m) for m in a.messages], [_key(m) for m in b.messages]
    rows: list[tuple[str, int | None, int | None]] = []
    matcher = SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        span = max(i2 - i1, j2 - j1)
        for k in range(span):
            i = i1 + k if i1 + k < i2 else None
            j = j1 + k if j1 + k < j2 else None
            rows.append((tag if tag == "equal" else _side_tag(i, j), i, j))
    return rows


def _side_tag(i: int | None, j: int | None) -> str:
    if i is None:
        return "insert"
    return "delete" if j is None else "replace"


def first_difference(rows: list[tuple[str, int | None, int | None]]) -> int | None:
    """Position in `rows` of the first row that is not equal."""
    return next((n for n, (tag, _, _) in enumerate(rows) if tag != "equal"), None)


def diff_view(a: Trajectory, b: Trajectory) -> str:
    rows = alignment(a, b)
    first = first_difference(rows)
    where = "the runs are identical message by message"
    if first is not None:
        _, i, j = rows[first]
        where = f"first difference: message {i} of A, message {j} of B"
    body = []
    for n, (tag, i, j) in enumerate(rows):
        cls = f"diff-row {tag}" + (" first" if n == first else "")
        row_id = ' id="first-diff"' if n == first else ""
        body.append(f'<tr class="{cls}"{row_id}><td>{_cell(a, i)}</td><td>{_cell(b, j)}</td></tr>')
    return (
        f"<h1>Diff</h1>{_side_heading('A', a)}{_side_heading('B', b)}"
        f'<p id="diff-summary">{h(where)}</p>'
        f'<table class="diff"><thead><tr><th>A {h(short_id(a.id))}</th>'
        f"<th>B {h(short_id(b.id))}</th></tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _side_heading(side: str, t: Trajectory) -> str:
    fork = ""
    if t.parent:
        fork = f", fork of {run_link(t.parent.trajectory_id)} at {t.parent.message_index}"
    return (
        f"<p><b>{side}</b> {run_link(t.id)} {outcome_badge(t.outcome.status)} "
        f"{h(t.source.harness)} {h(t.source.model or '')}, task {h(t.task.id)}, "
        f"{len(t.messages)} messages{fork}</p>"
    )


def _cell(t: Trajectory, index: int | None) -> str:
    if index is None:
        return ""
    m = t.messages[index]
    text = m.text()
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS] + f" … ({len(text) - PREVIEW_CHARS:,} more characters)"
    calls = "".join(
        f'<div class="call"><span class="call-name">{h(c.name)}</span> {h(c.arguments)}</div>'
        for c in m.tool_calls or []
    )
    speaker = m.role + (f" · {m.name}" if m.name else "")
    href = url(f"/runs/{t.id}", {"msg": index}) + f"#m-{index}"
    return (
        f'<div class="msg role-{m.role}"><header>{link(href, f"#{index}")} <b>{h(speaker)}</b>'
        f"</header><pre>{h(text)}</pre>{calls}</div>"
    )
