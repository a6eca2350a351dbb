"""Candidate strategies and the proposers that make them from a family's distillation runs.

A proposer reads runs (with their first calls and outcome) and returns candidates: a checkable
rule and its text. Whether a candidate is kept is decided elsewhere, on held-out runs
(`distil.py`), whoever proposed it.
"""

from __future__ import annotations

from itertools import permutations
from typing import NamedTuple, Protocol

from pydantic import BaseModel, Field

from trajforge.schema import StrategyRule, StrategySource, Trajectory
from trajforge.strategies.patterns import first_calls, render, support


class Candidate(NamedTuple):
    rule: StrategyRule
    text: str
    source: StrategySource


class FamilyRun(NamedTuple):
    """A run of the family as the proposers see it."""

    run: Trajectory
    first: dict[str, int]
    success: bool


def family_run(run: Trajectory) -> FamilyRun:
    return FamilyRun(run, first_calls(run), bool(run.outcome.success))


class Proposer(Protocol):
    source: StrategySource

    def propose(self, runs: list[FamilyRun]) -> list[Candidate]: ...


def comparable(first: str, then: str) -> bool:
    """Two actions whose order is a choice: the same tool aimed at two kinds of thing
    (`go:cabinet`, `go:countertop`), or two tools. A tool aimed at a thing against another
    tool (`take` before `go:sinkbasin`) mostly tells how far a run got, not what to do."""
    tool_a, _, what_a = first.partition(":")
    tool_b, _, what_b = then.partition(":")
    if what_a and what_b:
        return tool_a == tool_b
    return not what_a and not what_b


class ContrastConfig(BaseModel):
    """What a precedence pattern needs to become a contrast candidate (in-sample)."""

    min_each: int = Field(default=3, ge=1, description="Runs that follow and that break it.")
    min_lift: float = Field(default=0.15, description="Success rate followed minus broken.")
    max_candidates: int = Field(default=8, ge=1, description="The strongest this many.")


class ContrastProposer:
    """Precedence patterns (first call to A before the first call to B) whose followers succeed
    more often than their breakers in the distillation runs: the contrast of a task's
    successful and failed siblings, pooled over the family."""

    source: StrategySource = "contrast"

    def __init__(self, config: ContrastConfig | None = None) -> None:
        self.config = config or ContrastConfig()

    def propose(self, runs: list[FamilyRun]) -> list[Candidate]:
        keys = sorted({key for item in runs for key in item.first})
        scored = []
        pairs = [(item.first, item.success) for item in runs]
        for first, then in permutations(keys, 2):
            if not comparable(first, then):
                continue
            rule = StrategyRule(first=first, then=then)
            counts = support(rule, pairs)
            lift = counts.lift()
            if lift is None or lift < self.config.min_lift:
                continue
            if min(counts.followed, counts.violated) < self.config.min_each:
                continue
            scored.append((lift * min(counts.followed, counts.violated) ** 0.5, rule))
        scored.sort(key=lambda pair: (-pair[0], pair[1].first, pair[1].then))
        best = [rule for _, rule in scored[: self.config.max_candidates]]
        return [Candidate(rule, render(rule), self.source) for rule in best]
