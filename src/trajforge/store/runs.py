"""Pages of runs for browsing: filters, full-text search, sorting, fork trees, live changes.

`run_page(store, query)` answers one page of the runs table in two SQL statements (the page
and its total) plus, when searching, one for the snippets of the page's rows. Search uses the
FTS5 indexes of migration 5 (`run_search`, `diagnosis_search`): a run matches when its text
or one of its diagnoses does. The query is FTS5 syntax (words, "phrases", AND/OR/NOT,
prefix*); a query SQLite cannot parse is a `UserError` that says how to write it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from trajforge.errors import UserError
from trajforge.schema import OutcomeStatus, outcome_status
from trajforge.store.filters import TrajectoryFilter, model_error_sql
from trajforge.store.sqlite import CHECK_SEARCH_SQL, Store

SortKey = Literal[
    "created", "harness", "model", "environment", "task_id", "success", "steps", "tokens", "reward"
]
_SORT_COLUMNS: dict[str, str] = {
    "created": "t.rowid",
    "harness": "t.harness",
    "model": "t.model",
    "environment": "t.environment",
    "task_id": "t.task_id",
    "success": "t.success",
    "steps": "t.n_steps",
    "tokens": "t.total_tokens",
    "reward": "t.reward",
}
MAX_PER_PAGE = 500
MAX_PAGE = 1_000_000
"""A page past this is refused (its offset would be over 500 million runs)."""
SNIPPET_MARKS = ("\x02", "\x03")
"""Start and end of a matched term in a snippet (control characters, never in the text)."""


class RunQuery(BaseModel):
    """One page of runs: which runs, in which order."""

    filter: TrajectoryFilter = Field(default_factory=TrajectoryFilter, description="Which runs.")
    q: str | None = Field(default=None, description="Full-text query (FTS5 syntax).")
    sort: SortKey = Field(default="created", description="Column to sort by.")
    descending: bool = Field(default=True, description="Largest (newest) first.")
    page: int = Field(default=1, ge=1, le=MAX_PAGE, description="Page number, from 1.")
    per_page: int = Field(default=50, ge=1, le=MAX_PER_PAGE, description="Runs per page.")


@dataclass(slots=True)
class RunSummary:
    """One row of the runs table (a dataclass: a page builds fifty of them per request)."""

    id: str
    source: str | None
    model: str | None
    environment: str | None
    task_id: str | None
    success: bool | None
    reward: float | None
    run: str | None
    n_messages: int
    steps: int
    tokens: int | None
    parent_id: str | None
    fork_index: int | None
    status: OutcomeStatus = "unjudged"
    """Success, failure, model error or unjudged (see `OutcomeStatus`)."""
    labels: list[str] = field(default_factory=list)
    """source:message per label."""
    faults: list[str] = field(default_factory=list)
    """kind:message per fault."""
    diagnoses: list[str] = field(default_factory=list)
    """Categories of the run's diagnoses."""
    snippet: str | None = None
    """Matched text, when searching."""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class RunPage:
    total: int
    runs: list[RunSummary]


_ROW_FIELDS = (
    "t.rowid, t.id, t.harness, t.model, t.environment, t.task_id, t.success, t.reward, t.run, "
    "t.n_messages, t.n_steps, t.total_tokens, t.parent_id, t.fork_index, s.labels, s.faults, "
    "t.termination_reason"
)


def _search_clause(q: str | None) -> tuple[str, list[Any]]:
    if not q or not q.strip():
        return "", []
    clause = (
        "t.rowid IN (SELECT rowid FROM run_search WHERE run_search MATCH ? "
        "UNION SELECT t2.rowid FROM diagnosis_search AS ds "
        "JOIN diagnoses AS d ON d.rowid = ds.rowid "
        "JOIN trajectories AS t2 ON t2.id = d.trajectory_id WHERE diagnosis_search MATCH ?)"
    )
    return clause, [q, q]


def _where(query: RunQuery) -> tuple[str, list[Any]]:
    """WHERE clause over `trajectories AS t` (joined to `run_search`, whose columns have
    other names, so the filter's unqualified columns stay unambiguous)."""
    where, params = query.filter.where()
    search, search_params = _search_clause(query.q)
    if not search:
        return where, params
    joiner = " AND " if where else " WHERE "
    return where + joiner + search, params + search_params


def page_sql(query: RunQuery) -> list[tuple[str, list[Any]]]:
    """The SQL statements (with parameters) of a page: its rows, then its total."""
    where, params = _where(query)
    order = "DESC" if query.descending else "ASC"
    column = _SORT_COLUMNS[query.sort]
    tiebreak = "" if column == "t.rowid" else f", t.rowid {order}"
    offset = (query.page - 1) * query.per_page
    rows = (
        f"SELECT {_ROW_FIELDS} FROM trajectories AS t LEFT JOIN run_search AS s "
        f"ON s.rowid = t.rowid{where} ORDER BY {column} {order}{tiebreak} "
        f"LIMIT {query.per_page} OFFSET {offset}"
    )
    total = f"SELECT count(*) FROM trajectories AS t{where}"
    return [(rows, params), (total, params)]


def run_page(store: Store, query: RunQuery) -> RunPage:
    """One page of the runs table and the number of runs matching in all."""
    if query.q:
        store.check_search(query.q)
    (rows_sql, params), (total_sql, _) = page_sql(query)
    rows = store.db.execute(rows_sql, params).fetchall()
    total = store.db.execute(total_sql, params).fetchone()[0]
    runs = [_summary(row) for row in rows]
    _attach_diagnoses(store, runs)
    if query.q and rows:
        _attach_snippets(store, query.q, rows, runs)
    return RunPage(total=total, runs=runs)


def _summary(row: tuple) -> RunSummary:
    """A row of `_ROW_FIELDS` as a summary."""
    (_, traj_id, harness, model, env, task, success, reward, run, n_messages, steps, tokens,
     parent, fork_index, labels, faults, termination) = row  # fmt: skip
    return RunSummary(
        id=traj_id,
        source=harness,
        model=model,
        environment=env,
        task_id=task,
        success=None if success is None else bool(success),
        reward=reward,
        run=run,
        n_messages=n_messages,
        steps=steps,
        tokens=tokens,
        parent_id=parent,
        fork_index=fork_index,
        status=outcome_status(success, termination),
        labels=labels.split() if labels else [],
        faults=faults.split() if faults else [],
    )


def _diagnoses_sql(ids: list[str]) -> tuple[str, list[Any]]:
    marks = ",".join("?" for _ in ids)
    sql = f"SELECT trajectory_id, category FROM diagnoses WHERE trajectory_id IN ({marks})"
    return sql, ids


def _snippets_sql(q: str, rowids: list[int]) -> tuple[str, list[Any]]:
    marks = ",".join("?" for _ in rowids)
    start, end = SNIPPET_MARKS
    sql = (
        f"SELECT rowid, snippet(run_search, 0, '{start}', '{end}', '…', 16) FROM run_search "
        f"WHERE run_search MATCH ? AND rowid IN ({marks})"
    )
    return sql, [q, *rowids]


def _attach_diagnoses(store: Store, runs: list[RunSummary]) -> None:
    if not runs:
        return
    by_id = {run.id: run for run in runs}
    for traj_id, category in store.db.execute(*_diagnoses_sql(list(by_id))):
        by_id[traj_id].diagnoses.append(category or "unknown")


def _attach_snippets(store: Store, q: str, rows: list[tuple], runs: list[RunSummary]) -> None:
    by_rowid = {row[0]: run for row, run in zip(rows, runs, strict=True)}
    for rowid, snippet in store.db.execute(*_snippets_sql(q, list(by_rowid))):
        by_rowid[rowid].snippet = snippet


def page_statements(store: Store, query: RunQuery) -> list[tuple[str, list[Any]]]:
    """Every SQL statement `run_page` runs for `query`, with parameters, in order (for
    measuring the bare SQL a page needs; the page's rows are read once to know them)."""
    statements = [(CHECK_SEARCH_SQL, [query.q])] if query.q else []
    (rows_sql, params), total = page_sql(query)
    rows = store.db.execute(rows_sql, params).fetchall()
    statements += [(rows_sql, params), total]
    if rows:
        statements.append(_diagnoses_sql([row[1] for row in rows]))
        if query.q:
            statements.append(_snippets_sql(query.q, [row[0] for row in rows]))
    return statements


def run_statements(store: Store, statements: list[tuple[str, list[Any]]]) -> int:
    """Run statements and fetch all their rows; returns the number of rows (benchmarks)."""
    return sum(len(store.db.execute(sql, params).fetchall()) for sql, params in statements)


def run_view_statements(store: Store, traj_id: str) -> list[tuple[str, list[Any]]]:
    """The SQL statements the run view needs: resolve the id, read the document, its
    diagnoses and its number of forks."""
    return [
        ("SELECT id FROM trajectories WHERE id LIKE ? LIMIT 3", [f"{traj_id}%"]),
        ("SELECT doc FROM trajectories WHERE id = ?", [traj_id]),
        (
            "SELECT doc FROM diagnoses WHERE trajectory_id IN (?) ORDER BY created_at",
            [traj_id],
        ),
        ("SELECT count(*) FROM trajectories WHERE parent_id = ?", [traj_id]),
    ]


def run_document(store: Store, traj_id: str) -> bytes:
    """The stored JSON document of a run (by id or unique prefix), as stored."""
    full_id = store.resolve_id(traj_id)
    sql = "SELECT doc FROM trajectories WHERE id = ?"
    return bytes(store.db.execute(sql, (full_id,)).fetchone()[0])


class TreeNode(BaseModel):
    """A run in a fork tree."""

    id: str
    parent_id: str | None
    fork_index: int | None
    success: bool | None
    n_messages: int
    source: str | None
    model: str | None
    termination: str | None = None
    children: list[TreeNode] = Field(default_factory=list)

    @property
    def status(self) -> OutcomeStatus:
        return outcome_status(self.success, self.termination)


def fork_tree(store: Store, traj_id: str, max_nodes: int = 500) -> TreeNode:
    """The fork tree that holds `traj_id`: from its oldest stored ancestor down through every
    descendant (children by `parent_id`, which is indexed), at most `max_nodes` runs."""
    root = _tree_row(store, store.resolve_id(traj_id))
    if root is None:
        raise UserError(f"no trajectory '{traj_id}' in {store.path}")
    seen = {root.id}
    while root.parent_id is not None and root.parent_id not in seen:
        parent = _tree_row(store, root.parent_id)
        if parent is None:
            break
        root = parent
        seen.add(root.id)
    frontier, count = [root], 1
    while frontier and count < max_nodes:
        node = frontier.pop()
        for child in _children(store, node.id):
            if count >= max_nodes:
                break
            node.children.append(child)
            frontier.append(child)
            count += 1
    return root


_TREE_FIELDS = "id, parent_id, fork_index, success, n_messages, harness, model, termination_reason"


def _tree_node(row: tuple) -> TreeNode:
    traj_id, parent, fork_index, success, n_messages, harness, model, termination = row
    return TreeNode(
        id=traj_id,
        parent_id=parent,
        fork_index=fork_index,
        success=None if success is None else bool(success),
        n_messages=n_messages,
        source=harness,
        model=model,
        termination=termination,
    )


def _tree_row(store: Store, traj_id: str) -> TreeNode | None:
    sql = f"SELECT {_TREE_FIELDS} FROM trajectories WHERE id = ?"
    row = store.db.execute(sql, (traj_id,)).fetchone()
    return None if row is None else _tree_node(row)


def _children(store: Store, traj_id: str) -> list[TreeNode]:
    sql = f"SELECT {_TREE_FIELDS} FROM trajectories WHERE parent_id = ? ORDER BY fork_index, rowid"
    return [_tree_node(row) for row in store.db.execute(sql, (traj_id,))]


def child_count(store: Store, traj_id: str) -> int:
    """How many stored forks continue this run."""
    sql = "SELECT count(*) FROM trajectories WHERE parent_id = ?"
    return store.db.execute(sql, (traj_id,)).fetchone()[0]


class Change(BaseModel):
    """A run written since a point in time (a live proxy session grows by rewrites)."""

    id: str
    created_at: float
    rowid: int


def changes_since(store: Store, rowid: int, created_at: float) -> list[Change]:
    """Runs inserted or rewritten after (`rowid`, `created_at`), oldest first.

    A rewrite (`Store.put`) gives the row a new rowid at the end of the table, or keeps the
    last rowid when it was the last row; both are found from the last seen rowid on.
    """
    sql = (
        "SELECT id, created_at, rowid FROM trajectories WHERE rowid >= ? AND created_at > ? "
        "ORDER BY rowid"
    )
    rows = store.db.execute(sql, (rowid, created_at)).fetchall()
    return [Change(id=i, created_at=c, rowid=r) for i, c, r in rows]


def latest_position(store: Store) -> tuple[int, float]:
    """(last rowid, newest created_at): where `changes_since` starts for a new watcher."""
    row = store.db.execute(
        "SELECT coalesce(max(rowid), 0), coalesce(max(created_at), 0) FROM trajectories"
    ).fetchone()
    return int(row[0]), float(row[1])


def run_groups(store: Store, column: str, limit: int = 50) -> list[tuple[str | None, int]]:
    """The most common values of one run column (model, run, environment, harness)."""
    if column not in ("model", "run", "environment", "harness"):
        raise UserError(f"cannot group runs by {column!r}; use model, run, environment, harness")
    sql = (
        f"SELECT {column}, count(*) FROM trajectories GROUP BY {column} "
        f"ORDER BY count(*) DESC LIMIT {int(limit)}"
    )
    return [(value, count) for value, count in store.db.execute(sql)]


def group_outcomes(
    store: Store, flt: TrajectoryFilter
) -> list[tuple[str | None, bool | None, int, int | None]]:
    """(task id, success, steps, tokens) of every run matching `flt`, in insertion order."""
    where, params = store.checked_where(flt)
    sql = f"SELECT task_id, success, n_steps, total_tokens FROM trajectories{where} ORDER BY rowid"
    return [
        (task, None if ok is None else bool(ok), steps, tokens)
        for task, ok, steps, tokens in store.db.execute(sql, params)
    ]


def diagnosis_counts(store: Store) -> list[tuple[str | None, str | None, bool, bool, int]]:
    """(environment, category, verified, has a correction, count) over stored diagnoses."""
    sql = (
        "SELECT t.environment, d.category, d.verified, "
        "json_extract(CAST(d.doc AS TEXT), '$.correction') IS NOT NULL, count(*) "
        "FROM diagnoses AS d JOIN trajectories AS t ON t.id = d.trajectory_id "
        "GROUP BY 1, 2, 3, 4 ORDER BY 1, 2"
    )
    return [(e, c, bool(v), bool(fix), n) for e, c, v, fix, n in store.db.execute(sql)]


def first_diagnosis(store: Store, verified: bool = True) -> tuple[str, bytes] | None:
    """(trajectory id, diagnosis document) of the oldest (verified) diagnosis, or None."""
    where = " WHERE verified = 1" if verified else ""
    sql = f"SELECT trajectory_id, doc FROM diagnoses{where} ORDER BY created_at LIMIT 1"
    row = store.db.execute(sql).fetchone()
    return None if row is None else (row[0], bytes(row[1]))


def outcome_counts(store: Store) -> list[tuple[str | None, int, int, int]]:
    """(environment, runs, successes, runs recorded by the proxy) per environment."""
    sql = (
        "SELECT environment, count(*), coalesce(sum(success = 1), 0), "
        "coalesce(sum(EXISTS (SELECT 1 FROM proxy_calls AS p WHERE p.trajectory_id = t.id)), 0) "
        "FROM trajectories AS t GROUP BY environment ORDER BY count(*) DESC"
    )
    return [tuple(row) for row in store.db.execute(sql)]


class Activity(BaseModel):
    """Runs of one (source, run name) written since some time: a rollout batch or sessions."""

    source: str | None
    run: str | None
    runs: int
    successes: int
    failures: int
    open: int
    """Runs without an outcome yet (proxy sessions in progress; model errors are not)."""
    faults: int
    """Injected faults over those runs."""
    messages: int
    last_at: float
    model_errors: int = 0
    """Runs a model or endpoint failure ended (neither successes nor failures)."""


def activity_since(store: Store, since: float) -> list[Activity]:
    """What was written since `since` (Unix time), by source and run name, newest first."""
    sql = (
        "SELECT t.harness, t.run, count(*), coalesce(sum(t.success = 1), 0), "
        "coalesce(sum(t.success = 0), 0), "
        f"coalesce(sum(t.success IS NULL AND NOT {model_error_sql('t.')}), 0), "
        "coalesce(sum(length(s.faults) - length(replace(s.faults, ' ', '')) + "
        "(s.faults IS NOT NULL AND s.faults != '')), 0), sum(t.n_messages), max(t.created_at), "
        f"coalesce(sum({model_error_sql('t.')}), 0) "
        "FROM trajectories AS t LEFT JOIN run_search AS s ON s.rowid = t.rowid "
        "WHERE t.created_at > ? GROUP BY t.harness, t.run ORDER BY max(t.created_at) DESC"
    )
    names = list(Activity.model_fields)
    return [
        Activity(**dict(zip(names, row, strict=True))) for row in store.db.execute(sql, (since,))
    ]


def recent_runs(
    store: Store, since: float, limit: int = 50
) -> list[tuple[str, str | None, int, OutcomeStatus, float]]:
    """(id, source, messages, outcome status, written at) of runs written since `since`,
    newest first."""
    sql = (
        "SELECT id, harness, n_messages, success, termination_reason, created_at "
        "FROM trajectories WHERE created_at > ? ORDER BY created_at DESC LIMIT ?"
    )
    return [
        (i, src, n, outcome_status(ok, reason), at)
        for i, src, n, ok, reason, at in store.db.execute(sql, (since, limit))
    ]
