"""Online early stop in RL rollouts: a monitor fitted on earlier runs stops doomed sessions."""

from __future__ import annotations

from pathlib import Path

from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.models.openai_compat import OpenAIModelConfig
from trajforge.rollout.episode import Limits, run_episode
from trajforge.store import Store
from trajforge.train.rl.early_stop import stopped, train_monitor
from trajforge.train.rl.rollouts import RolloutService


def _earlier_runs(db: Path) -> None:
    """Short teacher successes and long, erring noisy-teacher failures."""
    with Store(db) as store:
        for seed in range(24):
            task = task_for(seed, 1)
            store.add(run_episode(HouseholdEnv(), ObservableTeacher(), task).with_id())
            noisy = NoisyObservableTeacher(seed=seed, error_rate=0.7)
            store.add(
                run_episode(HouseholdEnv(), noisy, task, limits=Limits(max_steps=12)).with_id()
            )


def test_monitor_fitted_on_earlier_runs_stops_doomed_rollouts(student_dir: Path, tmp_path: Path):
    _earlier_runs(tmp_path / "earlier.db")
    info = train_monitor(tmp_path / "earlier.db", tmp_path / "monitor.model")
    assert 0 < info["failed"] < info["runs"]
    model = OpenAIModelConfig(base_url="http://x", model="student", api_key="k", logprobs=True,
                              temperature=1.0, max_tokens=16, max_retries=0)  # fmt: skip
    jobs = [(f"s{i}", "g", task_for(100 + i, 1)) for i in range(8)]
    with RolloutService(student_dir, tmp_path / "rollouts.db") as service:
        service.use_monitor(tmp_path / "monitor.model", 0.05)
        episodes, _ = service.run(jobs, Limits(max_steps=16), model, concurrency=8)
    halted = [e for e in episodes if stopped(e.recorded)]
    assert halted, [e.run.metadata.get("model_failure") for e in episodes]
    assert all(len(e.run.assistant_indices()) < 16 for e in halted)
    assert all("failure monitor" in e.run.metadata["model_failure"] for e in halted)
    assert not any(e.run.outcome.success for e in halted)
    # a stopped episode is a failure of its group, with its samples, not an unjudged error
    assert all(e.judged and e.reward == 0.0 and e.samples for e in halted)
