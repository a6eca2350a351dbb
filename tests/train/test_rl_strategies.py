"""`train rl --strategies K`: the run's library reaches the rollouts' prompts and grows."""

from __future__ import annotations

from pathlib import Path

from trajforge.agents.household_teacher import NoisyObservableTeacher
from trajforge.agents.llm import STRATEGIES_HEADER
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Trajectory
from trajforge.store import Store
from trajforge.store.filters import TrajectoryFilter
from trajforge.train.rl import RLConfig, train_rl
from trajforge.train.rl.strategies import RunLibrary, run_name


def contrasting_runs() -> list[Trajectory]:
    """A clumsy teacher on short difficulty-1 episodes: mostly failures, a few successes,
    enough of both for the contrast proposer to keep a rule."""
    tasks = [task for task in (task_for(seed, 1) for seed in range(80)) if task.gold][:60]
    return [
        run_episode(
            HouseholdEnv(),
            NoisyObservableTeacher(seed=index * 7 + sample, error_rate=0.7),
            task,
            limits=Limits(max_steps=8),
        ).with_id()
        for index, task in enumerate(tasks)
        for sample in range(2)
    ]


def test_the_library_learns_retrieves_and_forgets_a_crashed_iteration(tmp_path: Path) -> None:
    library = RunLibrary(tmp_path, k=2, difficulty=1)
    learned = library.learn(1, contrasting_runs())
    assert learned["distilled_from"] == 120 and learned["kept"] >= 1
    assert learned["library"] == learned["new_versions"] >= 1
    tasks = [task_for(seed, 1) for seed in (3, 4, 3)]
    texts, uses = library.texts_for(tasks)
    assert set(texts) == {tasks[0].id, tasks[1].id}
    assert all(1 <= len(found) <= 2 for found in texts.values())
    assert sum(uses.values()) == sum(len(found) for found in texts.values())
    assert library.learn(1, [])["new_versions"] == 0  # nothing new: no new version
    assert library.forget_after(1) == 0
    assert library.forget_after(0) == 120
    assert library.strategies()  # the library itself is kept
    library.close()


def test_rollouts_carry_the_strategies_and_their_runs_join_the_library(
    student_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    seeded = RunLibrary(out, k=2, difficulty=1)
    seeded.learn(0, contrasting_runs())
    rule = seeded.strategies()[0].text
    seeded.close()
    config = RLConfig(iterations=1, tasks_per_iteration=2, group_size=4, max_steps=4,
                      eval_every=0, concurrency=8, threads=1, strategies=2)  # fmt: skip
    (row,) = train_rl(student_dir, out, config)
    assert sum(row["strategies"]["retrieved"].values()) >= 2
    assert row["strategies"]["distilled_from"] == 128
    with Store(out / "rollouts.db") as store:
        recorded = list(store.query())
    assert len(recorded) == 8
    for session in recorded:  # the prompt the proxy saw ends its system message with them
        system = session.messages[0]
        assert system.role == "system" and STRATEGIES_HEADER in system.text()
        assert rule in system.text()
    with Store(out / "strategies.db") as store:
        assert store.count(TrajectoryFilter(run=run_name(1))) == 8
