from pathlib import Path

import pytest

from trajforge.schema import Message, Outcome, Task, Trajectory
from trajforge.store import Store, TrajectoryFilter


def make(task_id: str, success: bool) -> Trajectory:
    return Trajectory(
        task=Task(id=task_id, environment="test-env"),
        messages=[Message(role="user", content=f"do {task_id}")],
        outcome=Outcome(success=success),
    )


def test_add_is_idempotent(store: Store) -> None:
    assert store.add_many([make("a", True), make("b", False)]) == (2, 0)
    assert store.add_many([make("a", True)]) == (0, 1)
    assert store.count() == 2


def test_count_is_what_a_query_yields_its_limit_included(store: Store) -> None:
    store.add_many([make(task, False) for task in "abc"])
    for limit in (None, 0, 2, 5):
        flt = TrajectoryFilter(limit=limit)
        assert store.count(flt) == len(list(store.query(flt)))


def test_failed_transaction_leaves_store_unchanged(store: Store) -> None:
    store.add(make("a", True))

    def broken():
        yield make("b", True)
        raise ValueError("bad record")

    with pytest.raises(ValueError):
        store.add_many(broken())
    assert [r.task_id for r in store.rows()] == ["a"]


def test_query_by_outcome_and_prefix(store: Store) -> None:
    store.add_many([make("a", True), make("b", False)])
    failed = list(store.query(TrajectoryFilter(success=False)))
    assert [t.task.id for t in failed] == ["b"]
    assert store.get(failed[0].id[:8]).task.id == "b"


def test_reopen_keeps_data(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as first:
        first.add(make("a", True))
    with Store(tmp_path / "s.db") as second:
        assert second.count() == 1
