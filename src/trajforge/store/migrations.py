"""Numbered schema migrations of the SQLite store.

Each migration is a small function that takes a connection; `PRAGMA user_version` records how
many have run. Add a migration by appending a function to `MIGRATIONS`; never edit one that
has shipped.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable

from trajforge.progress import heartbeat


def m001_trajectories(db: sqlite3.Connection) -> None:
    db.execute(
        """
        CREATE TABLE trajectories (
            id TEXT PRIMARY KEY,
            format_version INTEGER NOT NULL,
            harness TEXT,
            model TEXT,
            run TEXT,
            environment TEXT,
            task_id TEXT,
            success INTEGER,
            reward REAL,
            n_messages INTEGER NOT NULL,
            n_steps INTEGER NOT NULL,
            total_tokens INTEGER,
            parent_id TEXT,
            fork_index INTEGER,
            format TEXT,
            source_file TEXT,
            created_at REAL NOT NULL,
            doc BLOB NOT NULL
        )
        """
    )
    for column in ("harness", "model", "environment", "task_id", "success", "parent_id"):
        db.execute(f"CREATE INDEX idx_trajectories_{column} ON trajectories({column})")


def m002_diagnoses(db: sqlite3.Connection) -> None:
    """Error-to-training diagnoses: one per (trajectory, method)."""
    db.execute(
        """
        CREATE TABLE diagnoses (
            id TEXT PRIMARY KEY,
            trajectory_id TEXT NOT NULL,
            method TEXT NOT NULL,
            step INTEGER,
            agent TEXT,
            category TEXT,
            verified INTEGER NOT NULL,
            created_at REAL NOT NULL,
            doc BLOB NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_diagnoses_trajectory ON diagnoses(trajectory_id)")


def m003_proxy_calls(db: sqlite3.Connection) -> None:
    """Model calls recorded by the proxy: one row per call, in session order."""
    db.execute(
        """
        CREATE TABLE proxy_calls (
            session TEXT NOT NULL,
            seq INTEGER NOT NULL,
            trajectory_id TEXT NOT NULL,
            call_id TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            status INTEGER,
            error TEXT,
            started_at REAL NOT NULL,
            latency_s REAL,
            doc BLOB NOT NULL,
            PRIMARY KEY (session, seq)
        )
        """
    )
    db.execute("CREATE INDEX idx_proxy_calls_trajectory ON proxy_calls(trajectory_id)")


def m004_summary_columns_and_filter_indexes(db: sqlite3.Connection) -> None:
    """Token and annotation counts as columns (analytics export reads them without parsing
    documents), and indexes that serve the CLI's combined filters in insertion order."""
    for column in ("prompt_tokens", "completion_tokens", "n_labels", "n_faults"):
        db.execute(f"ALTER TABLE trajectories ADD COLUMN {column} INTEGER")
    db.execute(
        """
        UPDATE trajectories SET
            prompt_tokens = json_extract(CAST(doc AS TEXT), '$.usage.prompt_tokens'),
            completion_tokens = json_extract(CAST(doc AS TEXT), '$.usage.completion_tokens'),
            n_labels = json_array_length(CAST(doc AS TEXT), '$.labels'),
            n_faults = json_array_length(CAST(doc AS TEXT), '$.faults')
        """
    )
    for columns in (("environment", "success"), ("harness", "success"), ("task_id", "success")):
        name = "_".join(columns)
        db.execute(f"CREATE INDEX idx_trajectories_{name} ON trajectories({', '.join(columns)})")


# The text a run is found by: task, messages (content, speaker, tool calls with arguments),
# labels, faults, failed model calls and how the run ended. `{doc}` is the JSON document.
_RUN_TEXT = """
SELECT group_concat(part, char(10)) FROM (
    SELECT json_extract({doc}, '$.task.id') AS part
    UNION ALL SELECT json_extract({doc}, '$.task.instruction')
    UNION ALL SELECT json_extract({doc}, '$.outcome.termination_reason')
    UNION ALL SELECT p.atom FROM json_each({doc}, '$.messages') AS m,
        json_tree(m.value, '$.content') AS p
        WHERE p.type = 'text' AND (p.key IS NULL OR p.key = 'text')
    UNION ALL SELECT json_extract(m.value, '$.name') FROM json_each({doc}, '$.messages') AS m
    UNION ALL SELECT json_extract(c.value, '$.name') || ' ' || json_extract(c.value, '$.arguments')
        FROM json_each({doc}, '$.messages') AS m, json_each(m.value, '$.tool_calls') AS c
    UNION ALL SELECT coalesce(json_extract(x.value, '$.category'), '') || ' '
            || coalesce(json_extract(x.value, '$.agent'), '') || ' '
            || coalesce(json_extract(x.value, '$.reason'), '')
        FROM json_each({doc}, '$.labels') AS x
    UNION ALL SELECT json_extract(f.value, '$.kind') || ' '
            || coalesce(json_extract(f.value, '$.tool'), '') || ' '
            || coalesce(json_extract(f.value, '$.detail'), '')
        FROM json_each({doc}, '$.faults') AS f
    UNION ALL SELECT json_extract(c.value, '$.error') FROM json_each({doc}, '$.llm_calls') AS c
)
"""

# The text a diagnosis is found by: its category, agent, explanation, cited evidence and fix.
_DIAGNOSIS_TEXT = """
SELECT group_concat(part, char(10)) FROM (
    SELECT json_extract({doc}, '$.method') AS part
    UNION ALL SELECT json_extract({doc}, '$.category')
    UNION ALL SELECT json_extract({doc}, '$.agent')
    UNION ALL SELECT json_extract({doc}, '$.explanation')
    UNION ALL SELECT json_extract(e.value, '$.quote') || ' ' || json_extract(e.value, '$.note')
        FROM json_each({doc}, '$.evidence') AS e
    UNION ALL SELECT json_extract({doc}, '$.correction.message')
    UNION ALL SELECT json_extract({doc}, '$.correction.tool_call.name') || ' '
        || json_extract({doc}, '$.correction.tool_call.arguments')
)
"""


# Short summaries the runs table shows beside each run, stored unindexed in `run_search`.
_RUN_LABELS = """SELECT group_concat(json_extract(x.value, '$.source') || ':'
    || coalesce(json_extract(x.value, '$.message_index'), 'run'), ' ')
    FROM json_each({doc}, '$.labels') AS x"""
_RUN_FAULTS = """SELECT group_concat(json_extract(f.value, '$.kind') || ':'
    || json_extract(f.value, '$.message_index'), ' ')
    FROM json_each({doc}, '$.faults') AS f"""


def _search_index(db: sqlite3.Connection, table: str, index: str, columns: dict[str, str]) -> None:
    """An FTS5 index over `table`'s documents, one row per table row (same rowid), kept in
    step by triggers. `columns` maps each index column to the SQL of its value from `{doc}`;
    the first is the searched text, the others are stored unindexed. An insert first drops
    any index row with its rowid, so an index row left behind by `INSERT OR REPLACE` (whose
    implicit delete fires no trigger unless recursive triggers are on) never describes the
    row that reuses its rowid; readers join the index to `table` on rowid, so such a leftover
    is never returned."""
    names = list(columns)
    declared = ", ".join([names[0], *(f"{n} UNINDEXED" for n in names[1:])])
    db.execute(f"CREATE VIRTUAL TABLE {index} USING fts5({declared})")

    def values(doc: str) -> str:
        return ", ".join(f"({sql.format(doc=doc)})" for sql in columns.values())

    insert = f"INSERT INTO {index}(rowid, {', '.join(names)})"
    new_values = values("CAST(new.doc AS TEXT)")
    db.execute(
        f"""CREATE TRIGGER {index}_insert AFTER INSERT ON {table} BEGIN
            DELETE FROM {index} WHERE rowid = new.rowid;
            {insert} VALUES (new.rowid, {new_values});
        END"""
    )
    db.execute(
        f"""CREATE TRIGGER {index}_update AFTER UPDATE OF doc ON {table} BEGIN
            DELETE FROM {index} WHERE rowid = old.rowid;
            {insert} VALUES (new.rowid, {new_values});
        END"""
    )
    db.execute(
        f"""CREATE TRIGGER {index}_delete AFTER DELETE ON {table} BEGIN
            DELETE FROM {index} WHERE rowid = old.rowid;
        END"""
    )
    db.execute(f"{insert} SELECT rowid, {values('CAST(doc AS TEXT)')} FROM {table}")


def m005_full_text_search(db: sqlite3.Connection) -> None:
    """Full-text search (FTS5) over runs and diagnoses: `run_search` (text, plus the labels
    and faults summaries of the runs table) and `diagnosis_search`, each row's rowid that of
    its run or diagnosis; existing rows are indexed here."""
    run_columns = {"body": _RUN_TEXT, "labels": _RUN_LABELS, "faults": _RUN_FAULTS}
    _search_index(db, "trajectories", "run_search", run_columns)
    _search_index(db, "diagnoses", "diagnosis_search", {"body": _DIAGNOSIS_TEXT})


def m006_episode_columns(db: sqlite3.Connection) -> None:
    """A rollout's episode key, environment and termination reason as columns, indexed for
    the runner's resume (which episodes of an environment are already stored)."""
    columns = {
        "episode_key": "$.metadata.episode_key",
        "episode_env": "$.metadata.env",
        "termination_reason": "$.outcome.termination_reason",
    }
    for column in columns:
        db.execute(f"ALTER TABLE trajectories ADD COLUMN {column} TEXT")
    assignments = ", ".join(
        f"{column} = json_extract(CAST(doc AS TEXT), '{path}')" for column, path in columns.items()
    )
    db.execute(f"UPDATE trajectories SET {assignments}")
    db.execute(
        "CREATE INDEX idx_trajectories_episode ON trajectories(harness, episode_env, episode_key)"
        " WHERE episode_key IS NOT NULL"
    )


def m007_run_search_written_by_the_store(db: sqlite3.Connection) -> None:
    """The store writes each run's `run_search` row itself, from the trajectory it holds
    (`trajforge.store.search_text`); the triggers that extracted it from the stored JSON
    parsed every document again several times over. Deletes still go through the trigger."""
    db.execute("DROP TRIGGER run_search_insert")
    db.execute("DROP TRIGGER run_search_update")


def m008_training_progress(db: sqlite3.Connection) -> None:
    """Training runs and one row per iteration, written by the training loop as it goes, so
    that a viewer of the store follows its progress. `seq` grows with every write (a rewritten
    iteration gets a new one): a watcher asks for what came after the last `seq` it saw."""
    db.execute(
        """
        CREATE TABLE training_runs (
            name TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            started_at REAL NOT NULL,
            doc BLOB NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE training_iterations (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            run TEXT NOT NULL,
            iteration INTEGER NOT NULL,
            written_at REAL NOT NULL,
            doc BLOB NOT NULL,
            UNIQUE (run, iteration)
        )
        """
    )


def m009_metadata_changes(db: sqlite3.Connection) -> None:
    """The log of metadata set on stored runs (`trajforge set`, `import --model` filling in an
    unknown model): one row per run and field, with the old and new value as JSON."""
    db.execute(
        """
        CREATE TABLE metadata_changes (
            id INTEGER PRIMARY KEY,
            trajectory_id TEXT NOT NULL,
            field TEXT NOT NULL,
            old_value TEXT,
            new_value TEXT,
            changed_by TEXT NOT NULL,
            changed_at REAL NOT NULL,
            command TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_metadata_changes_trajectory ON metadata_changes(trajectory_id)")


def m010_model_errors_not_judged(db: sqlite3.Connection) -> None:
    """A run ended by a model or endpoint failure is not judged: runs an older version stored
    as failures get no `success` (their documents load the same way)."""
    db.execute(
        "UPDATE trajectories SET success = NULL "
        "WHERE termination_reason = 'model_error' AND success = 0"
    )


def m011_strategies(db: sqlite3.Connection) -> None:
    """The strategy library: one row per (strategy name, version), never overwritten; an edit
    or a re-distillation adds the next version."""
    db.execute(
        """
        CREATE TABLE strategies (
            name TEXT NOT NULL,
            version INTEGER NOT NULL,
            environment TEXT NOT NULL,
            source TEXT NOT NULL,
            created_at REAL NOT NULL,
            doc BLOB NOT NULL,
            PRIMARY KEY (name, version)
        )
        """
    )
    db.execute("CREATE INDEX idx_strategies_environment ON strategies(environment)")


def m012_document_last(db: sqlite3.Connection) -> None:
    """The runs table rebuilt with the document as its last column. Columns added after it
    (m004, m006) sat behind it in each row, and SQLite reaches a column behind a document
    of many pages by reading them all: listing 30,150 runs' summaries read 4.7 GB in 1.0 s
    instead of 0.11 s. Rows keep their rowids (the full-text index is keyed by them); the
    indexes and triggers are made again as they were. A one-time copy of every document,
    in one transaction (a process killed half-way leaves the store as it was): on a 30x
    store (4.7 GB) 72 s, with the copy in the write-ahead log until it is checkpointed, so
    it needs free disk of about twice the runs' size; the file keeps the old table's pages
    as free space that later imports fill."""
    keep = db.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'trajectories' "
        "AND type IN ('index', 'trigger') AND sql IS NOT NULL"
    ).fetchall()
    _announce_rewrite(db)
    columns = db.execute("PRAGMA table_info(trajectories)").fetchall()
    ordered = sorted(columns, key=lambda column: column[1] == "doc")  # stable: doc last
    declared = ", ".join(_declaration(*column[1:6]) for column in ordered)
    db.execute(f"CREATE TABLE trajectories_rebuilt ({declared})")
    names = ", ".join(column[1] for column in ordered)
    with heartbeat("trajforge: upgrading this store", "copying its runs") as now:
        db.execute(
            f"INSERT INTO trajectories_rebuilt (rowid, {names}) "
            f"SELECT rowid, {names} FROM trajectories ORDER BY rowid"
        )
        now("freeing the old copy's pages")
        db.execute("DROP TABLE trajectories")
    db.execute("ALTER TABLE trajectories_rebuilt RENAME TO trajectories")
    for (sql,) in keep:
        db.execute(sql)


def _declaration(name: str, kind: str, not_null: int, default: str | None, key: int) -> str:
    """A column's definition from its `PRAGMA table_info` row."""
    parts = [name, kind, "NOT NULL" if not_null else "", "PRIMARY KEY" if key else ""]
    if default is not None:
        parts.append(f"DEFAULT {default}")
    return " ".join(part for part in parts if part)


REWRITE_NOTICE_BYTES = 256 * 2**20


def _announce_rewrite(db: sqlite3.Connection) -> None:
    """One line on stderr before a rewrite of a store big enough to take a while (a
    `heartbeat` line follows every 15 s while it lasts)."""
    if not db.execute("SELECT EXISTS (SELECT 1 FROM trajectories)").fetchone()[0]:
        return
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    if pages * page_size >= REWRITE_NOTICE_BYTES:
        size_gb = pages * page_size / 1e9
        sys.stderr.write(
            f"trajforge: upgrading this store ({size_gb:.1f} GB) once: its runs are copied "
            "so that listings no longer read their documents (about 15 s per GB, and "
            "free disk of twice its size)\n"
        )
        sys.stderr.flush()


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    m001_trajectories,
    m002_diagnoses,
    m003_proxy_calls,
    m004_summary_columns_and_filter_indexes,
    m005_full_text_search,
    m006_episode_columns,
    m007_run_search_written_by_the_store,
    m008_training_progress,
    m009_metadata_changes,
    m010_model_errors_not_judged,
    m011_strategies,
    m012_document_last,
]


def migrate(db: sqlite3.Connection) -> int:
    """Run the migrations not yet applied; returns the schema version reached.

    All pending migrations and the version bump commit in one `BEGIN IMMEDIATE`
    transaction, and the version is read again once the write lock is held: a process
    killed half-way leaves the store as it was, and of two processes creating the same
    new store at once the second finds the first one's work done. `db` must be in
    autocommit mode (`isolation_level=None`).
    """
    if _version(db) == len(MIGRATIONS):
        return len(MIGRATIONS)
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _version(db)
        for migration in MIGRATIONS[version:]:
            migration(db)
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return len(MIGRATIONS)


def _version(db: sqlite3.Connection) -> int:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        from trajforge.errors import UserError

        raise UserError(
            f"this store has schema version {version}, newer than this trajforge "
            f"({len(MIGRATIONS)}); upgrade trajforge"
        )
    return version
