"""Distillation: candidates from one task family's runs, kept only if held-out tasks agree.

The runs are split by task (a hash of the task id, so every run of a task lands on one side):
proposers see only the distillation side; a candidate is kept when, on runs of the held-out
tasks, the runs that followed its rule succeeded more often than those that broke it, by at
least `min_lift`, with at least `min_each` runs of each kind. Both supports are reported for
every candidate, kept or not.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, Field

from trajforge.schema import (
    EvidenceKind,
    Strategy,
    StrategyEffect,
    StrategyEvidence,
    StrategyScope,
    StrategySupport,
    Trajectory,
)
from trajforge.strategies.candidates import Candidate, FamilyRun, Proposer, family_run
from trajforge.strategies.patterns import check, support


class DistilConfig(BaseModel):
    """How a family's runs are split and what held-out support keeps a candidate."""

    family: str = Field(description="Name of the task family (a prefix of strategy names).")
    held_out: float = Field(default=0.4, gt=0.0, lt=1.0, description="Share of tasks held out.")
    salt: str = Field(default="", description="Changes the split by task.")
    min_each: int = Field(default=2, ge=1, description="Held-out runs following and breaking.")
    min_lift: float = Field(default=0.0, description="Held-out success lift needed (exclusive).")
    max_evidence: int = Field(default=12, ge=1, description="Evidence runs kept per strategy.")


class Judged(BaseModel):
    """One candidate with its supports and the verdict."""

    strategy: Strategy
    kept: bool


class DistilReport(BaseModel):
    """What a distillation saw and decided."""

    family: str
    distil_runs: int
    distil_tasks: int
    held_out_runs: int
    held_out_tasks: int
    judged: list[Judged]

    def kept(self) -> list[Strategy]:
        return [item.strategy for item in self.judged if item.kept]


def held_out_task(task_id: str, share: float, salt: str = "") -> bool:
    digest = hashlib.sha256(f"{salt}{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def split_by_task(
    runs: Iterable[Trajectory], share: float, salt: str = ""
) -> tuple[list[FamilyRun], list[FamilyRun]]:
    """(distillation runs, held-out runs); every run of one task falls on the same side."""
    distil: list[FamilyRun] = []
    held: list[FamilyRun] = []
    for run in runs:
        if run.outcome.success is None:
            continue
        side = held if held_out_task(run.task.id, share, salt) else distil
        side.append(family_run(run))
    return distil, held


def distil(
    runs: Iterable[Trajectory],
    proposers: list[Proposer],
    config: DistilConfig,
    decisive: dict[str, int] | None = None,
) -> DistilReport:
    """Propose from the distillation side, judge every candidate on the held-out side.
    `decisive` maps failed runs to the decisive message of their verified diagnosis: a failure
    that broke a rule exactly there is evidence marked `decisive`."""
    distil_side, held = split_by_task(runs, config.held_out, config.salt)
    scope = _scope(distil_side)
    seen: set[tuple[str, str]] = set()
    judged = []
    for proposer in proposers:
        for candidate in proposer.propose(distil_side):
            key = (candidate.rule.first, candidate.rule.then)
            if key not in seen:
                seen.add(key)
                judged.append(_judge(candidate, distil_side, held, scope, config, decisive or {}))
    return DistilReport(
        family=config.family,
        distil_runs=len(distil_side),
        distil_tasks=len({item.run.task.id for item in distil_side}),
        held_out_runs=len(held),
        held_out_tasks=len({item.run.task.id for item in held}),
        judged=judged,
    )


def _judge(
    candidate: Candidate,
    distil_side: list[FamilyRun],
    held: list[FamilyRun],
    scope: StrategyScope,
    config: DistilConfig,
    decisive: dict[str, int],
) -> Judged:
    in_sample = support(candidate.rule, [(item.first, item.success) for item in distil_side])
    held_counts = support(candidate.rule, [(item.first, item.success) for item in held])
    speaks_to = {item.run.task.id for item in held if check(candidate.rule, item.first)}
    strategy = Strategy(
        name=f"{config.family}/{candidate.rule.first}-before-{candidate.rule.then}",
        text=candidate.text,
        scope=scope.model_copy(update={"situation": f"before the first {candidate.rule.then}"}),
        rule=candidate.rule,
        source=candidate.source,
        evidence=_evidence(candidate, distil_side, config.max_evidence, decisive),
        effect=StrategyEffect(
            distilled=in_sample, held_out=held_counts, held_out_tasks=len(speaks_to)
        ),
    )
    return Judged(strategy=strategy, kept=_supported(held_counts, config))


def _supported(counts: StrategySupport, config: DistilConfig) -> bool:
    lift = counts.lift()
    enough = min(counts.followed, counts.violated) >= config.min_each
    return enough and lift is not None and lift > config.min_lift


def _evidence(
    candidate: Candidate, runs: list[FamilyRun], limit: int, decisive: dict[str, int]
) -> list[StrategyEvidence]:
    """Successes (and recovered failures) that followed the rule, failures that broke it
    (those whose diagnosis puts the decisive error at the break first)."""
    found = []
    for item in runs:
        checked = check(candidate.rule, item.first)
        if checked is None or checked.followed != item.success:
            continue
        kind: EvidenceKind = "failure"
        if item.success:
            kind = "recovered" if "recovery" in item.run.metadata else "success"
        found.append(
            StrategyEvidence(
                trajectory_id=item.run.id,
                task_id=item.run.task.id,
                message_index=checked.message_index,
                kind=kind,
                decisive=kind == "failure" and decisive.get(item.run.id) == checked.message_index,
            )
        )
    found.sort(
        key=lambda e: (not e.decisive, e.kind != "recovered", e.kind != "failure", e.trajectory_id)
    )
    return found[:limit]


def _scope(runs: list[FamilyRun]) -> StrategyScope:
    """The family's environment and the task features all its runs share."""
    environments = Counter(item.run.task.environment or "unknown" for item in runs)
    environment = environments.most_common(1)[0][0] if environments else "unknown"
    shared: dict[str, str] | None = None
    for item in runs:
        features = {
            key: str(value)
            for key, value in item.run.task.data.items()
            if isinstance(value, str | int | bool) and key not in {"world_seed", "user_id"}
        }
        shared = (
            features
            if shared is None
            else {key: value for key, value in shared.items() if features.get(key) == value}
        )
    return StrategyScope(environment=environment, task_features=shared or {})
