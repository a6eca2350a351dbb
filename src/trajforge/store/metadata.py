"""Metadata set on runs already in the store (model, run name, error labels), logged.

Every change rewrites the run in place (`Store.rewrite`: same id, so diagnoses and forks
keep pointing at it, as with `import --model`) and adds one `metadata_changes` row per run
and field: who, when, which command, the old and the new value (JSON). All runs of one call
change in one transaction, or none does.

- `set_metadata`: the runs matching a filter get the given model, run name and labels
  (a label already on a run is not added twice; a field already at its value is not logged);
- `fill_unknown`: what `import --model/--run` does to a run it finds already stored: a field
  the stored run lacks is filled in, one it has with another value is kept and reported;
- `metadata_history`: the log of one run, oldest first.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson
from pydantic import BaseModel, Field

from trajforge.errors import UserError
from trajforge.schema import Label, Trajectory
from trajforge.store.filters import TrajectoryFilter
from trajforge.store.sqlite import Store

_LOG_COLUMNS = "trajectory_id, field, old_value, new_value, changed_by, changed_at, command"


class MetadataUpdate(BaseModel):
    """What to set on each selected run."""

    model: str | None = Field(default=None, description="Model that drove the agent.")
    run: str | None = Field(default=None, description="Run or experiment name.")
    labels: list[Label] = Field(default_factory=list, description="Error labels to add.")

    def is_empty(self) -> bool:
        return self.model is None and self.run is None and not self.labels


class MetadataChange(NamedTuple):
    """One logged change of one field of one run."""

    trajectory_id: str
    field: str
    old_value: Any
    new_value: Any
    changed_by: str
    changed_at: float
    command: str


class Actor(NamedTuple):
    """Who changes the metadata, and with which command (both logged)."""

    name: str
    command: str


def _changes(traj: Trajectory, update: MetadataUpdate, actor: Actor) -> list[MetadataChange]:
    """The field changes `update` makes to `traj`, applied to it."""
    now = time.time()
    found = []
    for name in ("model", "run"):
        value = getattr(update, name)
        old = getattr(traj.source, name)
        if value is not None and value != old:
            traj.source = traj.source.model_copy(update={name: value})
            found.append(MetadataChange(traj.id, name, old, value, actor.name, now, actor.command))
    added = [label for label in update.labels if label not in traj.labels]
    if added:
        old_labels = [label.model_dump(mode="json") for label in traj.labels]
        traj.labels = [*traj.labels, *added]
        new_labels = [label.model_dump(mode="json") for label in traj.labels]
        change = (traj.id, "labels", old_labels, new_labels, actor.name, now, actor.command)
        found.append(MetadataChange(*change))
    return found


def _check_labels(traj: Trajectory, labels: Iterable[Label]) -> None:
    for label in labels:
        index = label.message_index
        if index is not None and not 0 <= index < len(traj.messages):
            raise UserError(
                f"trajectory {traj.id}: label at message {index}, but the run has "
                f"{len(traj.messages)} messages (0..{len(traj.messages) - 1})"
            )


def set_metadata(
    store: Store, flt: TrajectoryFilter, update: MetadataUpdate, actor: Actor
) -> tuple[int, list[MetadataChange]]:
    """(runs selected, changes made): see module docstring. Nothing changes when any run
    cannot take the update (a label outside it)."""
    if update.is_empty():
        raise UserError("nothing to set: give --model, --run or --label")
    with store.transaction():
        runs = list(store.query(flt))
        if not runs:
            raise UserError("no trajectories match the selection; check it with trajforge ls")
        changes: list[MetadataChange] = []
        for traj in runs:
            _check_labels(traj, update.labels)
            made = _changes(traj, update, actor)
            if made:
                store.rewrite(traj)
                _log(store, made)
                changes.extend(made)
    return len(runs), changes


class Filled(NamedTuple):
    """What `fill_unknown` did: fields filled in, and fields kept at another stored value."""

    filled: list[str]
    kept: list[str]


def fill_unknown(store: Store, traj_id: str, update: MetadataUpdate, actor: Actor) -> Filled:
    """Fill the model / run name of a stored run that has none; keep (and report) one that
    has another. Labels are not filled."""
    row = store.db.execute("SELECT model, run FROM trajectories WHERE id = ?", (traj_id,))
    stored = dict(zip(("model", "run"), row.fetchone() or (None, None), strict=True))
    wanted = {"model": update.model, "run": update.run}
    fill = {k: v for k, v in wanted.items() if v is not None and stored[k] is None}
    kept = [k for k, v in wanted.items() if v is not None and stored[k] not in (None, v)]
    if fill:
        traj = store.get(traj_id)
        made = _changes(traj, MetadataUpdate.model_validate(fill), actor)
        with store.transaction():
            store.rewrite(traj)
            _log(store, made)
    return Filled(sorted(fill), kept)


def _log(store: Store, changes: list[MetadataChange]) -> None:
    store.db.executemany(
        f"INSERT INTO metadata_changes ({_LOG_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (c.trajectory_id, c.field, _json(c.old_value), _json(c.new_value), *c[4:])
            for c in changes
        ],
    )


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def metadata_history(store: Store, traj_id: str) -> list[MetadataChange]:
    """The logged metadata changes of one run (exact id), oldest first."""
    rows = store.db.execute(
        f"SELECT {_LOG_COLUMNS} FROM metadata_changes WHERE trajectory_id = ? ORDER BY id",
        (traj_id,),
    )
    return [
        MetadataChange(tid, field, orjson.loads(old), orjson.loads(new), by, at, command)
        for tid, field, old, new, by, at, command in rows
    ]
