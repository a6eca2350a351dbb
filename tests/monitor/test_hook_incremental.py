"""SessionMonitor scores a growing run incrementally and gets the batch result at every call."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from trajforge.agents.llm import LLMPolicy
from trajforge.models.scripted import ScriptedModel
from trajforge.monitor import LearnedConfig, LearnedDetector, SessionMonitor, featurize_runs
from trajforge.monitor.scoring import completed_steps, current_risk, risk_curve
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Message, Task, ToolCall, Trajectory

from .doors import LockedDoorEnv

EXACT = 1e-12
"""Incremental and batch risks may differ only by the rounding of a one-row matrix product."""


@pytest.fixture(scope="module")
def detector(swe_trajs: list[Trajectory]) -> LearnedDetector:
    """A logistic detector: it weighs every feature column, so any column that differed
    between the incremental and the batch row would change the risk."""
    config = LearnedConfig(candidates=("logistic",), inner_folds=2, min_step_candidates=(5,))
    trained = LearnedDetector(config)
    trained.fit(featurize_runs(swe_trajs[::4]))
    return trained


def spread(trajs: list[Trajectory], count: int) -> list[Trajectory]:
    """`count` runs spread over the list, plus the longest run."""
    chosen = trajs[:: max(1, len(trajs) // count)][:count]
    return [*chosen, max(trajs, key=lambda t: len(t.messages))]


def prefixes(traj: Trajectory) -> Iterator[tuple[int, Trajectory]]:
    """The run as it grows, one message at a time."""
    for n in range(1, len(traj.messages) + 1):
        yield n, traj.model_copy(update={"messages": traj.messages[:n]})


def after_observations(traj: Trajectory, n: int) -> bool:
    """The first n messages end with the whole observation of a step."""
    return n == len(traj.messages) or traj.messages[n].role == "assistant"


def assert_same_as_batch(monitor: SessionMonitor, traj: Trajectory) -> None:
    stopped = monitor.should_stop(traj)
    steps, risk = current_risk(traj, monitor.model)
    assert monitor.steps_seen == steps
    if risk is None:
        assert monitor.last_risk is None and not stopped
        return
    assert monitor.last_risk == pytest.approx(risk, abs=EXACT)
    assert stopped == (steps >= monitor.min_step and risk >= monitor.threshold)


def test_swe_runs_fed_message_by_message_match_the_risk_curve(swe_trajs, detector):
    for traj in spread(swe_trajs, 10):
        curve = [risk for _, risk in risk_curve(traj, detector)]
        threshold = SessionMonitor(detector).threshold
        monitor = SessionMonitor(detector)
        for n, prefix in prefixes(traj):
            stopped = monitor.should_stop(prefix)
            if after_observations(traj, n) and monitor.steps_seen:
                risk = curve[monitor.steps_seen - 1]
                assert monitor.last_risk == pytest.approx(risk, abs=EXACT), (traj.id, n)
                assert stopped == (monitor.steps_seen >= monitor.min_step and risk >= threshold)
        assert monitor.steps_seen == len(completed_steps(traj))
        assert monitor.scorer.rebuilds == 0


def test_between_steps_the_risk_is_that_of_the_last_completed_step(swe_trajs, detector):
    short = sorted(swe_trajs, key=lambda t: len(t.messages))[:3]
    for traj in short:
        monitor = SessionMonitor(detector)
        for _, prefix in prefixes(traj):
            assert_same_as_batch(monitor, prefix)


def proxy_request(traj: Trajectory, n: int) -> Trajectory:
    """The run as a proxy rebuilds it from a request: new message objects every time."""
    messages = [Message.model_validate(m.model_dump()) for m in traj.messages[:n]]
    calls = [c for c in traj.llm_calls if c.message_index is not None and c.message_index < n]
    return Trajectory(task=traj.task, messages=messages, llm_calls=calls)


def test_new_message_objects_each_call_are_recognized_as_the_same_run(swe_trajs, detector):
    traj = spread(swe_trajs, 3)[1]
    monitor = SessionMonitor(detector)
    for n in range(1, len(traj.messages) + 1):
        if after_observations(traj, n):
            assert_same_as_batch(monitor, proxy_request(traj, n))
    assert monitor.scorer.rebuilds == 0
    assert monitor.steps_seen == len(traj.assistant_indices())


def _drop_middle_message(run: Trajectory, rest: list[Message], other: Trajectory) -> Trajectory:
    return run.model_copy(update={"messages": run.messages[:7] + run.messages[8:]})


def _drop_middle_exchange(run: Trajectory, rest: list[Message], other: Trajectory) -> Trajectory:
    """An old step and its observation left out, and the next step in: same length, and an
    assistant message still ends it, so only the messages themselves differ."""
    kept = run.messages[:6] + run.messages[8:] + rest[:2]
    return run.model_copy(update={"messages": kept})


def _other_instruction(run: Trajectory, rest: list[Message], other: Trajectory) -> Trajectory:
    task = run.task.model_copy(update={"instruction": "Fix the bug."})
    return run.model_copy(update={"task": task})


def _other_run(run: Trajectory, rest: list[Message], other: Trajectory) -> Trajectory:
    return other


def _truncated(run: Trajectory, rest: list[Message], other: Trajectory) -> Trajectory:
    return run.model_copy(update={"messages": run.messages[:13]})


def _edited_in_place(run: Trajectory, rest: list[Message], other: Trajectory) -> Trajectory:
    run.messages[9].content = "<returncode>1</returncode>\n<output>Traceback (most recent call"
    return run


def _usage_recorded_later(run: Trajectory, rest: list[Message], other: Trajectory) -> Trajectory:
    step_two = run.assistant_indices()[1]
    call = next(c for c in run.llm_calls if c.message_index == step_two)
    call.usage = call.usage.model_copy(update={"prompt_tokens": 123456})
    return run


def _history_grows_inside_a_step(
    run: Trajectory, rest: list[Message], other: Trajectory
) -> Trajectory:
    note = Message(role="user", content="Reminder: one bash block per reply.")
    return run.model_copy(update={"messages": [*run.messages, note]})


Rewrite = Callable[[Trajectory, list[Message], Trajectory], Trajectory]
"""(the run seen so far, the messages that follow it, another run) -> the run shown next."""

REWRITES: list[Rewrite] = [
    _drop_middle_message,
    _drop_middle_exchange,
    _other_run,
    _other_instruction,
    _truncated,
    _edited_in_place,
    _usage_recorded_later,
    _history_grows_inside_a_step,
]


@pytest.mark.parametrize("rewrite", REWRITES, ids=lambda f: f.__name__.strip("_"))
def test_a_rewritten_history_starts_over_and_matches_the_batch_result(swe_trajs, detector, rewrite):
    first, second = (t.model_copy(deep=True) for t in spread(swe_trajs, 4)[1:3])
    cut = first.assistant_indices()[12]  # 12 completed steps, observations included
    seen, rest = first.model_copy(update={"messages": first.messages[:cut]}), first.messages[cut:]
    monitor = SessionMonitor(detector)
    monitor.should_stop(seen)
    assert monitor.steps_seen == 12
    rewritten = rewrite(seen.model_copy(update={"messages": list(seen.messages)}), rest, second)
    assert_same_as_batch(monitor, rewritten)
    assert monitor.scorer.rebuilds == 1
    grown = rewritten.model_copy(update={"messages": rewritten.messages + rest})
    assert_same_as_batch(monitor, grown)


def test_reset_forgets_the_run(swe_trajs, detector):
    traj = spread(swe_trajs, 3)[0]
    monitor = SessionMonitor(detector)
    monitor.should_stop(traj)
    monitor.reset()
    assert monitor.steps_seen == 0 and monitor.last_risk is None
    assert_same_as_batch(monitor, traj)
    assert monitor.scorer.rebuilds == 0


def test_tau_runs_fed_message_by_message_match_the_batch_result(tau_trajs, detector):
    """Tool-call runs (no recorded usage: tokens estimated from the text so far)."""
    for traj in spread(tau_trajs, 8):
        monitor = SessionMonitor(detector)
        for _, prefix in prefixes(traj):
            assert_same_as_batch(monitor, prefix)
        assert monitor.scorer.rebuilds == 0


def _two_knocks(messages: list[Message]) -> Message:
    calls = [ToolCall(id=f"c{len(messages)}-{i}", name="open_door") for i in range(2)]
    return Message(role="assistant", content="Both doors.", tool_calls=calls)


def test_tool_results_arriving_one_at_a_time_match_the_batch_result(detector):
    model = ScriptedModel([_two_knocks], cycle=True)
    traj = run_episode(
        LockedDoorEnv(), LLMPolicy(model), Task(id="door"), limits=Limits(max_steps=8)
    )
    monitor = SessionMonitor(detector, min_step=2)
    for _, prefix in prefixes(traj):
        assert_same_as_batch(monitor, prefix)
    assert monitor.scorer.rebuilds == 8  # each step's second result extends a scored step


def test_a_later_bash_block_changes_the_format_of_the_whole_run(swe_trajs, detector):
    traj = spread(swe_trajs, 3)[0].model_copy(deep=True)
    for index in traj.assistant_indices()[:4]:
        traj.messages[index].content = "I will look at the repository first."
    monitor = SessionMonitor(detector)
    for n, prefix in prefixes(traj):
        if n > traj.assistant_indices()[6]:
            break
        assert_same_as_batch(monitor, prefix)
    assert monitor.scorer.rebuilds == 1
