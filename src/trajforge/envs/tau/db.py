"""A copy-on-write view of a tau database: cheap snapshots, shared read-only base tables.

The bundled tables (users, orders, flights...) are loaded once per process and never
mutated. A `TauDB` keeps only the records its tools changed (the overlay). A tool reads a
record with `get` and asks for a private, mutable copy with `edit` before changing it.

`snapshot()` copies the overlay's index (not the records) and marks every record shared;
the next `edit` of a shared record copies it again. Snapshot and restore therefore cost a
dict copy of the touched records' keys, whatever the database size.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from typing import Any

import orjson

from trajforge.errors import ToolError

Record = dict[str, Any]
Key = tuple[str, str]

DOMAIN_TABLES = {
    "retail": ("orders", "products", "users"),
    "airline": ("flights", "reservations", "users"),
}


TABLE_SOURCES: dict[str, Callable[[], dict[str, dict[str, Record]]]] = {}
"""Other table sets by name (tau2's domains register theirs), loaded by `base_tables`."""


@cache
def base_tables(domain: str, address_key: str = "state") -> dict[str, dict[str, Record]]:
    """The bundled tables of a domain, loaded once (treat as read-only).

    `domain` is `retail` or `airline` (tau-bench's tables) or a name in `TABLE_SOURCES`.

    `address_key="province"` renames the `state` field of user addresses (keeping the
    field order), reproducing the earlier airline `users.json` the tau-bench historical
    runs were recorded with.
    """
    if domain in TABLE_SOURCES:
        return TABLE_SOURCES[domain]()
    folder = resources.files("trajforge.envs.tau") / "data" / domain
    tables = {}
    for table in DOMAIN_TABLES[domain]:
        raw = (folder / f"{table}.json.gz").read_bytes()
        tables[table] = orjson.loads(gzip.decompress(raw))
    if address_key != "state":
        for user in tables["users"].values():
            user["address"] = {
                (address_key if k == "state" else k): v for k, v in user["address"].items()
            }
    return tables


class DBState:
    """A frozen snapshot of a `TauDB` overlay (records are shared, never mutated)."""

    __slots__ = ("overlay",)

    def __init__(self, overlay: dict[Key, Record]) -> None:
        self.overlay = overlay


class TauDB:
    """Tables of one domain: shared base plus the records changed since reset."""

    def __init__(self, domain: str, address_key: str = "state") -> None:
        self.domain = domain
        self.address_key = address_key
        self.base = base_tables(domain, address_key)
        self.overlay: dict[Key, Record] = {}
        self._owned: set[Key] = set()

    def get(self, table: str, key: str) -> Record | None:
        """The current record (do not mutate it; use `edit`)."""
        record = self.overlay.get((table, key))
        if record is not None:
            return record
        return self.base[table].get(key)

    def require(self, table: str, key: str, what: str) -> Record:
        """The current record; a `ToolError` "<what> not found" (the agent sees it) when absent."""
        record = self.get(table, key)
        if record is None:
            raise ToolError(f"{what} not found")
        return record

    def has(self, table: str, key: str) -> bool:
        return (table, key) in self.overlay or key in self.base[table]

    def edit(self, table: str, key: str) -> Record:
        """A mutable copy of a record, owned by this state; KeyError when it does not exist."""
        slot = (table, key)
        if slot in self._owned:
            return self.overlay[slot]
        current = self.get(table, key)
        if current is None:
            raise KeyError(key)
        record = copy.deepcopy(current)
        self.overlay[slot] = record
        self._owned.add(slot)
        return record

    def insert(self, table: str, key: str, record: Record) -> None:
        """Add a new record (or replace one) owned by this state."""
        self.overlay[(table, key)] = record
        self._owned.add((table, key))

    def items(self, table: str) -> Iterator[tuple[str, Record]]:
        """(key, current record) in storage order; untouched tables iterate the base dict."""
        changed = {key: record for (t, key), record in self.overlay.items() if t == table}
        base = self.base[table]
        if not changed:
            yield from base.items()
            return
        for key, record in base.items():
            yield key, changed.get(key, record)
        for key, record in changed.items():
            if key not in base:
                yield key, record

    def snapshot(self) -> DBState:
        self._owned = set()
        return DBState(dict(self.overlay))

    def restore(self, state: DBState) -> None:
        self.overlay = dict(state.overlay)
        self._owned = set()

    def reset(self) -> None:
        self.overlay = {}
        self._owned = set()

    def changes(self) -> dict[Key, Record]:
        """The records that differ from the base (edits that restored a value are dropped)."""
        return {
            slot: record
            for slot, record in self.overlay.items()
            if record != self.base[slot[0]].get(slot[1])
        }

    def state_hash(self) -> str:
        """A hash of the full database state, computed from the changed records only."""
        changed = sorted(self.changes().items())
        data = [[table, key, record] for (table, key), record in changed]
        return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def merged(self) -> dict[str, dict[str, Record]]:
        """The full tables as plain dicts (slow: copies the key index of every table)."""
        return {table: dict(self.items(table)) for table in self.base}

    def tau_hash(self) -> str:
        """The database hash exactly as tau-bench computes it (`gt_data_hash`); slow."""
        return hashlib.sha256(str(_hashable(self.merged())).encode("utf-8")).hexdigest()


def _hashable(item: Any) -> Any:
    if isinstance(item, dict):
        return tuple((key, _hashable(value)) for key, value in sorted(item.items()))
    if isinstance(item, list):
        return tuple(_hashable(element) for element in item)
    return item
