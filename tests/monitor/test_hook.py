"""The stop hook ends a rollout with reason `monitor`; the proxy check says the same."""

from __future__ import annotations

import pytest

from trajforge.agents.llm import LLMPolicy
from trajforge.errors import UserError
from trajforge.models.scripted import ScriptedModel
from trajforge.monitor import RuleDetector, SessionMonitor, StopHook, risk_curve
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Message, Task, Trajectory

from .doors import LockedDoorEnv, knock, looping_run


def test_stop_hook_ends_the_rollout_and_records_the_reason():
    hook = StopHook(RuleDetector(), threshold=0.25, min_step=3)
    model = ScriptedModel([knock], cycle=True)
    traj = run_episode(
        LockedDoorEnv(),
        LLMPolicy(model),
        Task(id="door"),
        limits=Limits(max_steps=30),
        hooks=[hook],
    )
    assert traj.outcome.termination_reason == "monitor"
    assert len(traj.assistant_indices()) < 30
    assert traj.metadata["monitor"]["risk"] >= 0.25


def test_without_the_hook_the_same_run_goes_to_the_step_limit():
    traj = looping_run(steps=12)
    assert traj.outcome.termination_reason == "max_steps"


def test_session_monitor_decides_on_completed_steps_only():
    traj = looping_run(steps=8)
    monitor = SessionMonitor(RuleDetector(), threshold=0.25, min_step=3)
    assert monitor.should_stop(traj)
    assert not monitor.should_stop(traj.model_copy(update={"messages": traj.messages[:2]}))
    pending = traj.messages[:3]  # one assistant message whose tool call has not run
    assert not monitor.should_stop(traj.model_copy(update={"messages": pending}))


def test_risk_curve_has_one_point_per_step():
    traj = looping_run(steps=6)
    curve = risk_curve(traj, RuleDetector())
    assert [index for index, _ in curve] == traj.assistant_indices()
    assert curve[-1][1] > curve[0][1]


def test_scoring_a_run_without_steps_is_a_clear_error():
    empty = Trajectory(task=Task(id="t"), messages=[Message(role="user", content="hi")])
    with pytest.raises(UserError, match="no agent steps"):
        risk_curve(empty, RuleDetector())
    assert not SessionMonitor(RuleDetector(), threshold=0.0).should_stop(empty)
