"""Trajectory filters shared by every command that selects runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field


def model_error_sql(table: str = "", true: str = "1") -> str:
    """SQL true for runs a model or endpoint failure ended (status `model_error`, as
    `outcome_status` says); `table` qualifies the columns (`t.`), `true` is how the engine
    writes a true `success`."""
    return (
        f"(coalesce({table}termination_reason, '') = 'model_error' "
        f"AND {table}success IS NOT {true})"
    )


TEXT_CLAUSE = (
    "id IN (SELECT m.id FROM trajectories AS m WHERE m.rowid IN "
    "(SELECT rowid FROM run_search WHERE run_search MATCH ?))"
)
"""Runs whose full-text row matches (written by ids, so the clause stays unambiguous where
`trajectories` is joined to `run_search`)."""


@dataclass(frozen=True)
class Dialect:
    """How one SQL engine writes the parts of a run filter that differ between engines."""

    like: str
    """The operator of a substring or prefix match that ignores ASCII case."""
    true: str
    """A true `success` as written in SQL."""
    success: Callable[[bool], Any]
    """The parameter a `success = ?` comparison takes."""
    text: Callable[[str], tuple[str, list[Any]]]
    """A full-text query's condition and its parameters."""


SQLITE = Dialect(like="LIKE", true="1", success=int, text=lambda query: (TEXT_CLAUSE, [query]))
"""SQLite, whose LIKE ignores ASCII case and whose full-text search is the FTS5 index."""


class TrajectoryFilter(BaseModel):
    """Which trajectories to select. Empty fields do not filter."""

    ids: list[str] = Field(default_factory=list, description="Ids or unique id prefixes.")
    harness: str | None = Field(default=None, description="Source harness (exact).")
    model: str | None = Field(default=None, description="Model name (substring).")
    environment: str | None = Field(default=None, description="Environment name (exact).")
    task_id: str | None = Field(default=None, description="Task id (exact).")
    success: bool | None = Field(
        default=None,
        description="Outcome: solved or not (runs a model error ended are neither: not judged).",
    )
    model_error: bool | None = Field(
        default=None, description="Only runs ended by a model or endpoint failure, or none."
    )
    run: str | None = Field(default=None, description="Run name (exact).")
    forks: bool | None = Field(default=None, description="Only forks (True) or originals (False).")
    text: str | None = Field(
        default=None,
        description='Full-text query over the run\'s text (FTS5: words, "phrases", AND / OR / '
        "NOT, prefix*): messages, tool calls, labels, faults, how it ended.",
    )
    limit: int | None = Field(default=None, description="At most this many.")

    def where(self, dialect: Dialect = SQLITE) -> tuple[str, list[Any]]:
        """SQL WHERE clause (with leading WHERE, or empty) and its parameters."""
        clauses: list[str] = []
        params: list[Any] = []
        exact = {
            "harness": self.harness,
            "environment": self.environment,
            "task_id": self.task_id,
            "run": self.run,
        }
        for column, value in exact.items():
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.model is not None:
            clauses.append(f"model {dialect.like} ?")
            params.append(f"%{self.model}%")
        if self.success is not None:
            clauses.append("success = ?")
            params.append(dialect.success(self.success))
        if self.model_error is not None:
            error = model_error_sql(true=dialect.true)
            clauses.append(error if self.model_error else f"NOT {error}")
        if self.forks is not None:
            clauses.append("parent_id IS NOT NULL" if self.forks else "parent_id IS NULL")
        if self.ids:
            clauses.append("(" + " OR ".join(f"id {dialect.like} ?" for _ in self.ids) + ")")
            params.extend(f"{i}%" for i in self.ids)
        if self.text is not None:
            condition, patterns = dialect.text(self.text)
            clauses.append(condition)
            params.extend(patterns)
        sql = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        return sql, params
