"""The runner on a conversational environment (tau-retail): user simulator, faults."""

from __future__ import annotations

from trajforge.rollout.backends.local import run_local
from trajforge.rollout.factory import make_env
from trajforge.rollout.runner import RolloutConfig, run_batch
from trajforge.rollout.tasks import select_tasks


def _config(**overrides) -> RolloutConfig:
    tasks = select_tasks(make_env("tau-retail"), "0-2")
    return RolloutConfig(env="tau-retail", tasks=tasks, policy="expert", **overrides)


def test_expert_conversations_with_the_scripted_user_succeed(store) -> None:
    summary, trajs = run_batch(_config(), store, run_local)
    assert summary.successes == 3 and summary.termination == {"user_stop": 3}
    for traj in trajs:
        assert [m.role for m in traj.messages[:2]] == ["system", "user"]
        assert traj.outcome.judged_by == "tau-bench-reward"


def test_transient_fault_in_a_conversation_is_recorded_and_recovered(store) -> None:
    summary, trajs = run_batch(_config(faults=["transient:#1"]), store, run_local)
    assert summary.faults_injected == 3 and summary.successes == 3
    for traj in trajs:
        (fault,) = traj.faults
        failed = traj.messages[fault.message_index]
        assert failed.role == "tool" and failed.name == fault.tool
        assert failed.text().startswith("Error: tool")
