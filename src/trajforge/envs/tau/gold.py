"""The gold solution of a task: its actions, the states they produce, and progress along them.

tau-bench judges a run by its final database: it must equal the database the task's gold
actions produce. `Gold` runs those actions once per task and remembers the states after
every subset of the *effective* gold writes (writes that changed the database), so that
`progress(db)` can tell which gold writes a state already contains, in any order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import orjson

from trajforge.envs.tau.db import Key, Record, TauDB
from trajforge.envs.tau.tooling import Tool, run_tool
from trajforge.schema import Task

MAX_SUBSET_WRITES = 8
"""Above this many effective writes only ordered prefixes are matched (2^n states otherwise)."""


@dataclass(frozen=True)
class GoldAction:
    index: int
    name: str
    kwargs: dict[str, Any]
    writes: bool

    @property
    def arguments(self) -> str:
        return orjson.dumps(self.kwargs).decode()


@dataclass
class Gold:
    """Gold actions of a task and the database states along them."""

    domain: str
    address_key: str
    tools: dict[str, Tool]
    actions: list[GoldAction]
    outputs: list[str]
    effective: list[int]
    """Indices (into `actions`) of writes that change the database."""
    final: dict[Key, Record]
    _states: dict[tuple[int, ...], dict[Key, Record]] = field(default_factory=dict)

    def progress(self, db: TauDB) -> tuple[int, ...] | None:
        """The effective writes whose combined result equals `db` (None: off the gold path).

        Ordered prefixes of the gold writes are tried first; other subsets (the same writes
        done in another order, or some skipped) only when no prefix matches.
        """
        current = db.changes()
        prefixes = [tuple(self.effective[:n]) for n in range(len(self.effective), -1, -1)]
        for subset in prefixes:
            if self._state(subset) == current:
                return subset
        if len(self.effective) > MAX_SUBSET_WRITES:
            return None
        for size in range(len(self.effective) - 1, 0, -1):
            for subset in itertools.combinations(self.effective, size):
                if self._state(subset) == current:
                    return subset if self._completes(current, subset) else None
        return None

    def _completes(self, current: dict[Key, Record], done: tuple[int, ...]) -> bool:
        """Whether the missing writes, done now in gold order, still reach the gold state
        (an out-of-order write can block a later one: a modified order is no longer
        pending, say)."""
        db = TauDB(self.domain, self.address_key)
        db.overlay = dict(current)  # shared records: the first edit of each copies it
        for index in self.effective:
            if index not in done:
                action = self.actions[index]
                run_tool(self.tools, db, action.name, action.arguments)
        return db.changes() == self.final

    def _state(self, subset: tuple[int, ...]) -> dict[Key, Record]:
        if subset not in self._states:
            db = TauDB(self.domain, self.address_key)
            for index in subset:
                run_tool(self.tools, db, self.actions[index].name, self.actions[index].arguments)
            self._states[subset] = db.changes()
        return self._states[subset]


def load_gold(task: Task, domain: str, address_key: str, tools: dict[str, Tool]) -> Gold:
    """Run the task's gold actions once from the initial database."""
    gold = task.gold if isinstance(task.gold, dict) else {}
    actions = [
        GoldAction(i, a["name"], a.get("kwargs") or {}, _writes(tools, a["name"]))
        for i, a in enumerate(gold.get("actions") or [])
    ]
    db = TauDB(domain, address_key)
    effective = []
    for action in actions:
        if action.name == "transfer_to_human_agents":
            continue  # tau-bench leaves hand-overs out of the gold database
        before = db.changes()
        db.snapshot()  # later edits copy records, so `before` stays as it was
        run_tool(tools, db, action.name, action.arguments)
        if action.writes and db.changes() != before:
            effective.append(action.index)
    outputs = [str(o) for o in gold.get("outputs") or []]
    return Gold(domain, address_key, tools, actions, outputs, effective, db.changes())


def _writes(tools: dict[str, Tool], name: str) -> bool:
    tool = tools.get(name)
    return bool(tool and tool.writes)
