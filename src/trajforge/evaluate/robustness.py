"""Fault robustness: the same tasks and seeds with and without injected faults.

For every condition (a fault spec, and the baseline without faults):

- success rate over all episodes;
- per fault kind: how many episodes received a fault of that kind, and the recovery rate:
  among those episodes whose fault-free twin (same task, seed and sample) succeeded, the
  share that still succeeded;
- pass^k as tau-bench defines it: the chance that k i.i.d. trials of a task all succeed,
  estimated per task as C(c, k) / C(n, k) (c successes in n trials) and averaged over tasks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from math import comb

from pydantic import BaseModel, Field

from trajforge.rollout.runner import RolloutConfig
from trajforge.schema import Trajectory

BASELINE = "none"


def pass_hat_k(outcomes: dict[str, list[bool]], k: int) -> float | None:
    """tau-bench's pass^k over tasks with at least k trials (None when there are none)."""
    values = [comb(sum(trials), k) / comb(len(trials), k) for trials in outcomes.values()
              if len(trials) >= k]  # fmt: skip
    return round(sum(values) / len(values), 4) if values else None


class KindReport(BaseModel):
    kind: str = Field(description="Fault kind.")
    episodes: int = Field(description="Episodes that received at least one fault of this kind.")
    faults: int = Field(description="Fault events of this kind.")
    successes: int = Field(description="Of those episodes, how many succeeded.")
    recovery_rate: float | None = Field(
        description="Success share among them whose fault-free twin succeeded."
    )


class ConditionReport(BaseModel):
    condition: str = Field(description="The fault spec, or 'none' for the baseline.")
    episodes: int = Field(description="Episodes.")
    successes: int = Field(description="Successful episodes.")
    success_rate: float = Field(description="successes / episodes.")
    faulted_episodes: int = Field(description="Episodes with at least one fault.")
    kinds: list[KindReport] = Field(description="Per fault kind.")
    pass_k: dict[int, float | None] = Field(description="pass^k for k = 1..samples.")


def _twin_key(traj: Trajectory) -> tuple:
    meta = traj.metadata
    return (traj.task.id, meta.get("seed"), meta.get("sample"))


def _kind_report(kind: str, trajs: list[Trajectory], baseline: dict[tuple, bool]) -> KindReport:
    hit = [t for t in trajs if any(f.kind == kind for f in t.faults)]
    paired = [t for t in hit if baseline.get(_twin_key(t))]
    recovered = sum(1 for t in paired if t.outcome.success)
    return KindReport(
        kind=kind,
        episodes=len(hit),
        faults=sum(1 for t in hit for f in t.faults if f.kind == kind),
        successes=sum(1 for t in hit if t.outcome.success),
        recovery_rate=round(recovered / len(paired), 4) if paired else None,
    )


def condition_report(
    condition: str, trajs: list[Trajectory], baseline: dict[tuple, bool]
) -> ConditionReport:
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for traj in trajs:
        outcomes[traj.task.id].append(bool(traj.outcome.success))
    samples = max((len(v) for v in outcomes.values()), default=0)
    successes = sum(1 for t in trajs if t.outcome.success)
    kinds = sorted({f.kind for t in trajs for f in t.faults})
    return ConditionReport(
        condition=condition,
        episodes=len(trajs),
        successes=successes,
        success_rate=round(successes / len(trajs), 4) if trajs else 0.0,
        faulted_episodes=sum(1 for t in trajs if t.faults),
        kinds=[_kind_report(kind, trajs, baseline) for kind in kinds],
        pass_k={k: pass_hat_k(outcomes, k) for k in range(1, samples + 1)},
    )


def robustness_report(conditions: dict[str, list[Trajectory]]) -> list[ConditionReport]:
    """Reports for each condition; `conditions[BASELINE]` pairs episodes for recovery."""
    baseline = {_twin_key(t): bool(t.outcome.success) for t in conditions.get(BASELINE, [])}
    return [condition_report(name, trajs, baseline) for name, trajs in conditions.items()]


BatchRunner = Callable[[RolloutConfig], list[Trajectory]]
"""Runs one batch and returns its trajectories (with a progress bar, on a backend...)."""


def run_robustness(
    base: RolloutConfig, conditions: Sequence[str], run: BatchRunner
) -> list[ConditionReport]:
    """The tasks and seeds of `base` without faults (`BASELINE`) and under each condition
    (a fault spec), run by `run`; the report compares every condition with its twin runs."""
    runs: dict[str, list[Trajectory]] = {}
    for condition in [BASELINE, *conditions]:
        faults = [] if condition == BASELINE else [condition]
        runs[condition] = run(base.model_copy(update={"faults": faults}))
    return robustness_report(runs)
