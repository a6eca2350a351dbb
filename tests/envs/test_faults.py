"""Tool-fault injection: spec parsing, each kind recorded as ground truth, seeding."""

from __future__ import annotations

import pytest

from trajforge.agents import ExpertPolicy
from trajforge.envs.faults import FaultyEnvironment, parse_fault_spec
from trajforge.envs.household import HouseholdEnv
from trajforge.errors import UserError
from trajforge.rollout import Limits, run_episode
from trajforge.schema import ToolCall


def _run(spec: str, seed: int = 0, task_index: int = 4):
    env = HouseholdEnv()
    task = env.tasks(6)[task_index]
    faulty = FaultyEnvironment(env, parse_fault_spec(spec), seed=seed)
    return run_episode(faulty, ExpertPolicy(), task, limits=Limits(max_steps=60))


def test_spec_parses_rates_schedules_and_tool_lists() -> None:
    spec = parse_fault_spec(["transient:0.3,persistent@take,put", "silent", "transient:#2+5"])
    assert [r.kind for r in spec.rules] == ["transient", "persistent", "silent", "transient"]
    assert spec.rules[1].tools == ["take", "put"]
    assert spec.rules[2].rate == 0.1
    assert spec.rules[3].schedule == [2, 5]
    assert parse_fault_spec(spec.spec()) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flaky:0.2", "unknown fault kind 'flaky'"),
        ("transient:2", "outside [0, 1]"),
        ("transient:abc", "bad rate"),
        ("silent:#3", "only transient faults take a schedule"),
        ("persistent@", "has '@' but no tool"),
        ("transient,,silent", "empty rule"),
        ("@go", "malformed fault rule"),
    ],
)
def test_bad_specs_say_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_fault_spec(text)
    assert message in str(caught.value)
    assert "transient, persistent, silent" in str(caught.value)


def test_transient_fault_is_recorded_at_its_message_and_retry_succeeds() -> None:
    traj = _run("transient:#3")
    (fault,) = traj.faults
    assert fault.kind == "transient"
    failed = traj.messages[fault.message_index]
    assert failed.role == "tool" and failed.text().startswith("Error:")
    call = traj.messages[fault.message_index - 1].tool_calls[0]
    assert call.name == fault.tool
    retry = traj.messages[fault.message_index + 1].tool_calls[0]
    assert (retry.name, retry.arguments) == (call.name, call.arguments)
    assert not traj.messages[fault.message_index + 2].text().startswith("Error:")
    assert traj.outcome.success


def test_persistent_fault_downs_a_tool_for_the_whole_episode() -> None:
    traj = _run("persistent@take")
    assert traj.faults and all(f.kind == "persistent" and f.tool == "take" for f in traj.faults)
    for fault in traj.faults:
        assert traj.messages[fault.message_index].role == "tool"
        assert "unavailable" in traj.messages[fault.message_index].text()
    take_results = [
        traj.messages[i + 1]
        for i, m in enumerate(traj.messages)
        if m.tool_calls and m.tool_calls[0].name == "take"
    ]
    assert len(take_results) == len(traj.faults)
    assert not traj.outcome.success
    assert traj.outcome.termination_reason == "max_steps"


def test_silent_fault_shows_wrong_data_without_error() -> None:
    traj = _run("silent:1.0@go")
    assert traj.faults and {f.kind for f in traj.faults} == {"silent"}
    env = HouseholdEnv()
    task = env.tasks(6)[4]
    env.reset(task)
    for fault in traj.faults:
        message = traj.messages[fault.message_index]
        call = traj.messages[fault.message_index - 1].tool_calls[0]
        assert call.name == "go" and not message.text().startswith("Error")
    # the real observations differ from what the agent saw
    truth = [env.step(c).content for m in traj.messages if m.tool_calls for c in m.tool_calls]
    seen = [m.text() for m in traj.messages if m.role == "tool"]
    assert truth != seen
    assert traj.outcome.success  # the state is real; only the observation lied


def test_same_seed_same_faults_other_seed_other_faults() -> None:
    first = _run("transient:0.3,silent:0.3", seed=7)
    again = _run("transient:0.3,silent:0.3", seed=7)
    other = _run("transient:0.3,silent:0.3", seed=8)
    assert first.faults == again.faults
    assert first.messages == again.messages
    assert first.faults != other.faults


def test_snapshot_restore_includes_the_injector_state() -> None:
    env = FaultyEnvironment(HouseholdEnv(), parse_fault_spec("transient:0.5"), seed=3)
    task = env.tasks(3)[0]
    env.reset(task)
    state = env.snapshot()
    call = ToolCall(id="c", name="look", arguments="{}")
    first = [env.step(call).model_dump() for _ in range(6)]
    env.restore(state)
    assert [env.step(call).model_dump() for _ in range(6)] == first
