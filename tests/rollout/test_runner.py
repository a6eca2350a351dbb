"""The batch runner: storing, resuming, crash isolation, limits, seeding, task selection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajforge.agents import POLICIES, EpisodeState, PolicyStep
from trajforge.cli.main import app
from trajforge.envs import ENVIRONMENTS
from trajforge.envs.household import HouseholdEnv
from trajforge.errors import UserError
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.episode import Limits
from trajforge.rollout.factory import PolicyOptions
from trajforge.rollout.runner import RolloutConfig, run_batch
from trajforge.rollout.tasks import select_tasks
from trajforge.schema import Message, Trajectory


class CrashOnThirdTask:
    """Fails in act() on one task; plays the expert elsewhere."""

    name = "crash-on-third"

    def act(self, state: EpisodeState) -> PolicyStep:
        if state.task.id == HouseholdEnv().tasks(3)[2].id and state.step == 1:
            raise RuntimeError("policy exploded")
        call = state.env.expert_action()
        if call is None:
            return PolicyStep(message=Message(role="assistant", content="done"))
        message = Message(role="assistant", tool_calls=[call.model_copy(update={"id": "c"})])
        return PolicyStep(message=message)


class NoTasksEnv(HouseholdEnv):
    name = "no-tasks"

    def tasks(self, count=None, seed=0):
        return []


POLICIES.add("crash-on-third", CrashOnThirdTask)
ENVIRONMENTS.add("no-tasks", NoTasksEnv)


def _config(**overrides) -> RolloutConfig:
    values = {"env": "household", "tasks": HouseholdEnv().tasks(4), "policy": "noisy-expert"}
    values.update(overrides)
    return RolloutConfig(**values)


def _comparable(traj: Trajectory) -> dict:
    data = traj.model_dump(exclude={"id"})
    data["usage"].pop("wall_time_s")
    return data


def test_batch_stores_every_episode_with_its_key_and_resumes(store) -> None:
    config = _config(n=2, faults=["transient:0.3"])
    summary, trajs = run_batch(config, store, run_local, concurrency=2)
    assert (summary.episodes, summary.ran, summary.skipped) == (8, 8, 0)
    assert store.count() == 8
    assert len({t.metadata["episode_key"] for t in trajs}) == 8
    assert summary.faults_injected == sum(len(t.faults) for t in trajs) > 0
    again, _ = run_batch(config, store, run_local)
    assert (again.ran, again.skipped, again.successes) == (0, 8, summary.successes)
    more, _ = run_batch(_config(n=3, faults=["transient:0.3"]), store, run_local)
    assert (more.ran, more.skipped) == (4, 8)
    assert store.count() == 12


def test_a_crashing_policy_ends_only_its_episode(store) -> None:
    config = _config(tasks=HouseholdEnv().tasks(5), policy="crash-on-third")
    summary, trajs = run_batch(config, store, run_local, concurrency=2)
    assert summary.episodes == 5 and summary.errors == 1 and summary.successes == 4
    (crashed,) = [t for t in trajs if t.outcome.termination_reason == "error"]
    assert "policy exploded" in crashed.metadata["error"]
    assert len(crashed.assistant_indices()) == 1  # the step before the crash is kept
    assert store.get(crashed.id).metadata["error"] == crashed.metadata["error"]
    rerun, _ = run_batch(config, store, run_local)
    assert (rerun.ran, rerun.skipped, rerun.errors) == (1, 4, 1)
    assert store.count() == 5  # the crashed record was replaced, not duplicated


def test_environment_setup_failure_is_recorded(store) -> None:
    broken = HouseholdEnv().tasks(1)[0].model_copy(update={"data": {"world_seed": "x"}})
    summary, (traj,) = run_batch(_config(tasks=[broken]), store, run_local)
    assert summary.errors == 1 and "ValueError" in traj.metadata["error"]


def test_limits_end_episodes_with_their_reason(store) -> None:
    config = _config(policy="expert", limits=Limits(max_steps=2))
    summary, trajs = run_batch(config, store, run_local)
    assert summary.termination == {"max_steps": 4}
    assert all(len(t.assistant_indices()) == 2 for t in trajs)


def test_same_seed_gives_identical_trajectories(tmp_path: Path) -> None:
    from trajforge.store import Store

    config = _config(faults=["transient:0.2,silent:0.2"], options=PolicyOptions(error_rate=0.3))
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        _, first = run_batch(config, a, run_local, concurrency=2)
        _, second = run_batch(config, b, run_local)
        _, other = run_batch(config.model_copy(update={"seed": 1}), b, run_local)
    key = lambda t: t.metadata["episode_key"]  # noqa: E731
    first, second = sorted(first, key=key), sorted(second, key=key)
    assert [_comparable(t) for t in first] == [_comparable(t) for t in second]
    assert [t.messages for t in sorted(other, key=key)] != [t.messages for t in first]


def test_task_selection_counts_ranges_and_files(tmp_path: Path) -> None:
    env = HouseholdEnv()
    assert [t.id for t in select_tasks(env, "3")] == [t.id for t in env.tasks(3)]
    assert [t.id for t in select_tasks(env, "2-4")] == [t.id for t in env.tasks(5)[2:5]]
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([env.tasks(3)[2].id]))
    assert select_tasks(env, str(ids)) == [env.tasks(3)[2]]
    objects = tmp_path / "tasks.jsonl"
    objects.write_text("\n".join(t.model_dump_json() for t in env.tasks(2)))
    assert select_tasks(env, str(objects)) == env.tasks(2)
    (tmp_path / "bad.json").write_text('[{"instruction": "no id"}]')
    with pytest.raises(UserError, match=r"bad.json \[record 0\]"):
        select_tasks(env, str(tmp_path / "bad.json"))
    with pytest.raises(UserError, match="accepts N"):
        select_tasks(env, "7-3")


def test_environment_without_tasks_lists_what_is_accepted() -> None:
    with pytest.raises(UserError) as caught:
        select_tasks(NoTasksEnv(), "5")
    assert "has no tasks" in str(caught.value) and "A-B" in str(caught.value)


def test_cli_rollout_json_summary_and_errors(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    args = ["rollout", "--env", "household", "--tasks", "0-2", "--policy", "noisy-expert"]
    args += ["--faults", "transient:0.3", "--faults", "persistent@examine", "--db", db]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["episodes"] == 3 and summary["faults_injected"] >= 1
    assert {"episodes", "successes", "faults_injected"} <= set(summary)
    bad = CliRunner().invoke(app, ["rollout", "--env", "household", "--faults", "oops", "--db", db])
    assert bad.exit_code == 1 and "unknown fault kind 'oops'" in bad.output
    tool = CliRunner().invoke(app, ["rollout", "--env", "household", "--faults", "silent@fly"])
    assert (
        tool.exit_code == 1 and "unknown tool(s) fly" in tool.output and "go, open" in tool.output
    )
    nobody = CliRunner().invoke(app, ["rollout", "--env", "household", "--policy", "nobody"])
    assert nobody.exit_code == 1 and "unknown policy 'nobody'; known: " in nobody.output
    empty = CliRunner().invoke(app, ["rollout", "--env", "no-tasks", "--db", db])
    assert empty.exit_code == 1 and "has no tasks" in empty.output
