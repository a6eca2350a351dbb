"""Public functions called from Python take names or objects and say what they expect."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajforge.envs.household import HouseholdEnv
from trajforge.errors import UserError
from trajforge.rollout.fork import fork
from trajforge.rollout.runner import RolloutConfig, run_episode_spec
from trajforge.rollout.tasks import select_tasks
from trajforge.store import Store


def test_select_tasks_takes_an_environment_name_or_object_and_a_count() -> None:
    by_name = select_tasks("household", "3")
    assert [t.id for t in by_name] == [t.id for t in select_tasks(HouseholdEnv(), 3)]
    assert len(by_name) == 3 and all(t.environment == "household" for t in by_name)
    with pytest.raises(UserError, match="environment or its name"):
        select_tasks(3, "3")
    with pytest.raises(UserError, match="no-such-env"):
        select_tasks("no-such-env", "3")


def test_fork_from_a_store_positionally_or_by_keyword(tmp_path: Path) -> None:
    tasks = select_tasks("household", "1")
    parent = run_episode_spec(
        RolloutConfig(env="household", tasks=tasks, policy="expert").specs()[0]
    )
    with Store(tmp_path / "s.db") as store:
        store.add(parent)
        positional = fork(store, parent.id[:8], 2, "expert")
        keyword = fork(store, 2, "expert", parent_id=parent.id)
        assert positional.parent == keyword.parent
        assert positional.parent.trajectory_id == parent.id
        with pytest.raises(UserError, match="parent id"):
            fork(store, 2, "expert")
        with pytest.raises(UserError, match="message index"):
            fork(parent, "2", "expert")
