"""Scoring localization against the error labels in the store, beside trivial baselines.

For every diagnosed run that carries a label with a message index (human labels first, then
oracle, then others; the earliest such label when there are several), the predicted step is
compared exactly and within ±1 / ±3 messages, and the predicted agent with the labelled one.
A labelled step whose calls only read (a harmless deliberate mistake of the noisy expert)
cannot be decisive, so it is passed over when the run has another label.

The baselines answer the same runs with a constant: the most common labelled step and the
most common labelled agent. A method is worth its margin over them.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from trajforge.diagnose.datasets import agent_key, same_agent
from trajforge.diagnose.evidence import is_write
from trajforge.diagnose.model import Diagnosis
from trajforge.schema import Label, Trajectory

_SOURCE_RANK = {"human": 0, "oracle": 1, "model": 2, "heuristic": 3}


class EvalReport(BaseModel):
    """Localization accuracy of one method on labelled runs (fractions of `runs`)."""

    method: str = Field(description="The diagnosis method scored.")
    runs: int = Field(description="Labelled runs scored.")
    exact: float | None = Field(description="Predicted step equals the labelled step.")
    within1: float | None = Field(description="Predicted step within ±1 message of the label.")
    within3: float | None = Field(description="Predicted step within ±3 messages of the label.")
    agent: float | None = Field(description="Predicted agent equals the labelled agent.")
    agent_runs: int = Field(description="Runs whose label names an agent.")
    baseline_exact: float | None = Field(description="Always the most common labelled step.")
    baseline_within1: float | None = Field(description="The same constant step, within ±1.")
    baseline_within3: float | None = Field(description="The same constant step, within ±3.")
    baseline_agent: float | None = Field(description="Always the most common labelled agent.")
    baseline_step: int | None = Field(description="That most common step.")
    baseline_agent_name: str | None = Field(description="That most common agent.")
    diagnosed: int = Field(description="Failed runs diagnosed (labelled or not).")
    verified: int = Field(description="Diagnoses whose correction passed verification.")
    verified_rate_all: float | None = Field(description="verified / diagnosed.")
    forkable: int = Field(description="Diagnoses verified by fork (forkable failures).")
    verified_rate: float | None = Field(description="Verified share of the forkable failures.")
    first_proposal_rate: float | None = Field(
        description="Share of diagnosed runs whose first proposed correction was verified."
    )
    by_category: dict[str, int] = Field(description="Diagnoses per category.")


def verification_summary(pairs: list[tuple[Trajectory, Diagnosis]]) -> dict:
    """How many corrections passed verification (by fork and overall), and the categories."""
    report = evaluate("", pairs)
    keys = ("diagnosed", "verified", "verified_rate_all", "forkable", "verified_rate")
    return {key: getattr(report, key) for key in (*keys, "first_proposal_rate", "by_category")}


def reference_label(traj: Trajectory) -> Label | None:
    """The label a diagnosis is scored against (see module docstring)."""
    located = [label for label in traj.labels if label.message_index is not None]
    harmful = [label for label in located if not _read_only(traj, label.message_index)]
    candidates = harmful or located
    if not candidates:
        return None
    return min(candidates, key=lambda lb: (_SOURCE_RANK.get(lb.source, 9), lb.message_index))


def _read_only(traj: Trajectory, index: int | None) -> bool:
    """A labelled step that only reads (every call a reader) cannot be decisive."""
    if index is None or not 0 <= index < len(traj.messages):
        return False
    calls = traj.messages[index].tool_calls or []
    return bool(calls) and not any(is_write(call.name) for call in calls)


def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def evaluate(method: str, pairs: list[tuple[Trajectory, Diagnosis]]) -> EvalReport:
    """Score diagnoses against reference labels; see module docstring."""
    scored = [(d, label) for t, d in pairs if (label := reference_label(t)) is not None]
    steps = [label.message_index for _, label in scored]
    agents = [label.agent for _, label in scored if label.agent]
    constant_step = Counter(steps).most_common(1)[0][0] if steps else None
    top = Counter(map(agent_key, agents)).most_common(1)[0][0] if agents else None
    constant_agent = next((a for a in agents if agent_key(a) == top), None)
    n = len(scored)

    def near(predicted: int | None, truth: int | None, width: int) -> bool:
        return predicted is not None and truth is not None and abs(predicted - truth) <= width

    forks = [d for _, d in pairs if d.verification and d.verification.method == "fork"]
    verified = sum(d.verified for _, d in pairs)
    return EvalReport(
        method=method,
        runs=n,
        exact=_share(sum(near(d.step, lb.message_index, 0) for d, lb in scored), n),
        within1=_share(sum(near(d.step, lb.message_index, 1) for d, lb in scored), n),
        within3=_share(sum(near(d.step, lb.message_index, 3) for d, lb in scored), n),
        agent=_share(
            sum(same_agent(d.agent, lb.agent) for d, lb in scored if lb.agent), len(agents)
        ),
        agent_runs=len(agents),
        baseline_exact=_share(sum(near(constant_step, s, 0) for s in steps), n),
        baseline_within1=_share(sum(near(constant_step, s, 1) for s in steps), n),
        baseline_within3=_share(sum(near(constant_step, s, 3) for s in steps), n),
        baseline_agent=_share(sum(same_agent(a, constant_agent) for a in agents), len(agents)),
        baseline_step=constant_step,
        baseline_agent_name=constant_agent,
        diagnosed=len(pairs),
        verified=verified,
        verified_rate_all=_share(verified, len(pairs)),
        forkable=len(forks),
        verified_rate=_share(sum(d.verified for d in forks), len(forks)),
        first_proposal_rate=_share(
            sum(d.details.get("first_proposal_verified") is True for _, d in pairs), len(pairs)
        ),
        by_category=dict(Counter(d.category or "none" for _, d in pairs).most_common()),
    )
