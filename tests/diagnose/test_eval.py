"""Scoring against labels: accuracies and constant baselines on the same runs."""

from __future__ import annotations

from trajforge.diagnose.eval import evaluate, reference_label
from trajforge.diagnose.model import Diagnosis, Verification
from trajforge.schema import Label, Message, Task, ToolCall, Trajectory


def _run(label_step: int, agent: str) -> Trajectory:
    messages = [Message(role="user", content="go")] + [
        Message(role="assistant", name=f"agent{i % 2}", content=f"step {i}") for i in range(1, 9)
    ]
    label = Label(message_index=label_step, agent=agent, source="human")
    return Trajectory(task=Task(id="t"), messages=messages, labels=[label]).with_id()


def _diagnosis(traj: Trajectory, step: int, agent: str, verified: bool) -> Diagnosis:
    return Diagnosis(
        trajectory_id=traj.id,
        method="heuristic",
        step=step,
        agent=agent,
        category="wrong_plan",
        verification=Verification(method="fork", verified=verified),
        details={"first_proposal_verified": verified},
    )


def test_accuracies_and_baselines() -> None:
    runs = [_run(1, "a"), _run(1, "a"), _run(3, "b")]
    diagnoses = [
        _diagnosis(runs[0], 1, "a", True),
        _diagnosis(runs[1], 2, "b", False),
        _diagnosis(runs[2], 6, "b", True),
    ]
    report = evaluate("heuristic", list(zip(runs, diagnoses, strict=True)))
    assert report.runs == 3
    assert (report.exact, report.within1, report.within3) == (0.3333, 0.6667, 1.0)
    assert report.agent == 0.6667
    assert report.baseline_step == 1 and report.baseline_agent_name == "a"
    assert (report.baseline_exact, report.baseline_within1, report.baseline_within3) == (
        0.6667,
        0.6667,
        1.0,
    )
    assert report.baseline_agent == 0.6667
    assert report.verified_rate == 0.6667 and report.first_proposal_rate == 0.6667


def test_reference_label_skips_harmless_reads() -> None:
    read = ToolCall(id="r", name="get_order_details", arguments="{}")
    write = ToolCall(id="w", name="cancel_pending_order", arguments="{}")
    traj = Trajectory(
        task=Task(id="t"),
        messages=[
            Message(role="user", content="hi"),
            Message(role="assistant", tool_calls=[read]),
            Message(role="tool", tool_call_id="r", content="{}"),
            Message(role="assistant", tool_calls=[write]),
        ],
        labels=[
            Label(message_index=1, source="oracle"),
            Label(message_index=3, source="oracle"),
        ],
    )
    label = reference_label(traj)
    assert label is not None and label.message_index == 3
    traj.labels = [Label(message_index=1, source="oracle"), Label(message_index=2, source="human")]
    label = reference_label(traj)
    assert label is not None and label.source == "human"
