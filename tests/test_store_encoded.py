"""The store's pre-encoded path (`encode` + `Store.add_encoded`) against the validated one."""

import pickle
from pathlib import Path

import pytest

from trajforge.schema import (
    Fault,
    ForkParent,
    Label,
    LLMCall,
    Message,
    Outcome,
    Source,
    Task,
    ToolCall,
    Trajectory,
    Usage,
)
from trajforge.store import EncodedTrajectory, Store, encode


def rich(task_id: str = "t-1") -> Trajectory:
    """A trajectory using every part of the schema, non-ASCII text included."""
    call = ToolCall(id="c1", name="search", arguments='{"q": "café"}')
    return Trajectory(
        task=Task(id=task_id, environment="env", instruction="find the café ☕", gold=[1, 2]),
        source=Source(harness="h", model="m", run="r", file="/data/run.json", format="x"),
        messages=[
            Message(role="user", content="hello \u2028 world"),
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id="c1", content="no result"),
            Message(role="assistant", content="done"),
        ],
        outcome=Outcome(success=False, reward=0.5, termination_reason="agent_stop"),
        usage=Usage(prompt_tokens=120, completion_tokens=30),
        llm_calls=[LLMCall(id="l1", message_index=1, logprobs=[-0.1, -2.5])],
        faults=[Fault(message_index=2, kind="silent", tool="search", detail="emptied")],
        labels=[Label(message_index=1, category="tool", reason="wrong query", source="human")],
        parent=ForkParent(trajectory_id="abc", message_index=2),
        metadata={"episode_key": "k", "nested": {"a": [1, None]}},
    )


def stored(store: Store) -> list[tuple]:
    """Every column of every trajectory row except the insertion time."""
    rows = store.db.execute("SELECT * FROM trajectories ORDER BY id").fetchall()
    return [row[:16] + row[17:] for row in rows]


def test_encoded_round_trip_equals_validated_path(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as validated, Store(tmp_path / "b.db") as encoded:
        for task_id in ("t-1", "t-2"):
            assert validated.add(rich(task_id))
            shipped = pickle.loads(pickle.dumps(encode(rich(task_id))))  # as Ray ships it
            assert encoded.add_encoded(shipped)
        assert stored(encoded) == stored(validated)
        assert len(stored(encoded)) == 2
        row = encoded.rows()[0]
        assert (row.total_tokens, row.n_steps, row.fork_index) == (150, 2, 2)
        original = rich("t-1")
        again = encoded.get(original.with_id().id)
        assert again == original


def test_encode_sets_the_content_id_and_decodes_back() -> None:
    traj = rich()
    item = encode(traj)
    assert item.id == traj.id == rich().content_id()
    assert item.decode() == traj


def test_encoded_duplicates_are_skipped(store: Store) -> None:
    assert store.add(rich())
    assert not store.add_encoded(encode(rich()))
    assert store.add_many([rich("t-2")]) == (1, 0)
    assert not store.add_encoded(encode(rich("t-2")))
    assert store.count() == 2


def _forged(item: EncodedTrajectory, **changes: object) -> EncodedTrajectory:
    return item._replace(**changes)


@pytest.mark.parametrize(
    "forge",
    [
        lambda item, other: _forged(item, document=other.document),  # another run's document
        lambda item, other: _forged(item, document=b"not json at all"),
        lambda item, other: _forged(item, document=item.document.decode()),  # text, not bytes
        lambda item, other: _forged(item, row=item.row[:-1]),  # a column missing
        lambda item, other: _forged(item, row=("", *item.row[1:])),  # no id
        lambda item, other: _forged(item, row=(item.row[0], 99, *item.row[2:])),  # newer format
        lambda item, other: _forged(item, row=(item.row[0], "1", *item.row[2:])),
        lambda item, other: EncodedTrajectory(),
    ],
)
def test_forged_encodings_are_refused_and_store_unchanged(store: Store, forge) -> None:
    store.add(rich("kept"))
    before = stored(store)
    with pytest.raises(ValueError):
        store.add_encoded(forge(encode(rich("t-1")), encode(rich("t-2"))))
    assert stored(store) == before


def test_a_refused_encoding_rolls_back_its_transaction(store: Store) -> None:
    bad = encode(rich("t-2"))._replace(document=b"{}")
    with pytest.raises(ValueError), store.transaction():
        store.add_encoded(encode(rich("t-1")))
        store.add_encoded(bad)
    assert store.count() == 0
