"""The `strategies` table: the strategy library, one row per (name, version), as JSON bytes.

The store knows the columns, not the `Strategy` model; `trajforge.strategies.library` maps
between the two. A version row is never rewritten: a new version is a new row, and the primary
key (name, version) refuses a second writer of the same version.
"""

from __future__ import annotations

from typing import NamedTuple

from trajforge.store.sqlite import Store


class StrategyRow(NamedTuple):
    name: str
    version: int
    environment: str
    source: str
    created_at: float
    doc: bytes


_COLUMNS = "name, version, environment, source, created_at, doc"


def insert_strategy(store: Store, row: StrategyRow) -> None:
    """Write one version row (inside the caller's transaction, or in its own)."""
    with store.transaction():
        store.db.execute(f"INSERT INTO strategies ({_COLUMNS}) VALUES (?,?,?,?,?,?)", row)


def strategy_versions(store: Store, name: str) -> list[StrategyRow]:
    """Every version of one strategy, oldest first."""
    rows = store.db.execute(
        f"SELECT {_COLUMNS} FROM strategies WHERE name = ? ORDER BY version", (name,)
    )
    return [_row(values) for values in rows]


def latest_strategies(store: Store, environment: str | None = None) -> list[StrategyRow]:
    """The latest version of each strategy, by name, optionally of one environment."""
    where = "WHERE environment = ?" if environment is not None else ""
    params = [environment] if environment is not None else []
    rows = store.db.execute(
        f"SELECT {_COLUMNS} FROM strategies s {where} "
        f"{'AND' if where else 'WHERE'} version = "
        "(SELECT MAX(version) FROM strategies t WHERE t.name = s.name) ORDER BY name",
        params,
    )
    return [_row(values) for values in rows]


def strategy_names(store: Store, prefix: str) -> list[str]:
    """Names starting with `prefix` (for `show` by a unique prefix)."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = store.db.execute(
        "SELECT DISTINCT name FROM strategies WHERE name LIKE ? ESCAPE '\\' ORDER BY name",
        (escaped + "%",),
    )
    return [name for (name,) in rows]


def _row(values: tuple) -> StrategyRow:
    name, version, environment, source, created_at, doc = values
    return StrategyRow(name, version, environment, source, created_at, bytes(doc))
