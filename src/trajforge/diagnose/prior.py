"""The calibrated prior: where, in a log of a given format, decisive errors usually are.

Learned per log format (`trajforge.diagnose.datasets.log_format`) from labelled tuning runs:

- step: the most common labelled message index that exists in the run; when none of the
  common ones does, the message nearest the median relative position of the labels;
- agent: the most common labelled agent when it speaks in the run, else the speaker of the
  predicted step;
- confidence: the share of tuning runs of the format whose label the prior hits exactly.

A format absent from the tuning runs uses the prior of all tuning runs together. The prior
is the fallback of the calibrated diagnoser when a method abstains, and a method
(`--method prior`) on its own.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from trajforge.diagnose.datasets import agent_key, log_format
from trajforge.diagnose.eval import reference_label
from trajforge.diagnose.evidence import speaker
from trajforge.diagnose.model import Diagnosis
from trajforge.errors import UserError
from trajforge.schema import Trajectory

ALL_FORMATS = "*"
NOT_FITTED = (
    "method '{method}' is fitted on labelled runs: score it with `trajforge diagnose eval "
    "--method {method}` (fitted per fold); to diagnose new runs with a trained model, train "
    "the step ranker with `trajforge diagnose train --out FILE` and pass `--model-file FILE`"
)


@dataclass
class FormatPrior:
    """The prior of one log format."""

    steps: Counter[int] = field(default_factory=Counter)
    relative: float = 0.5
    agents: Counter[str] = field(default_factory=Counter)
    names: dict[str, str] = field(default_factory=dict)
    accuracy: float = 0.0
    runs: int = 0

    def step_for(self, traj: Trajectory) -> int | None:
        n = len(traj.messages)
        if n == 0:
            return None
        known = [s for s in self.steps if s < n]
        if known:
            return min(known, key=lambda s: (-self.steps[s], s))
        return min(round(self.relative * (n - 1)), n - 1)

    def to_json(self) -> dict:
        return {
            "steps": {str(k): v for k, v in self.steps.items()},
            "relative": self.relative,
            "agents": dict(self.agents),
            "names": self.names,
            "accuracy": self.accuracy,
            "runs": self.runs,
        }

    @classmethod
    def from_json(cls, data: dict) -> FormatPrior:
        return cls(
            steps=Counter({int(k): v for k, v in data["steps"].items()}),
            relative=data["relative"],
            agents=Counter(data["agents"]),
            names=data["names"],
            accuracy=data["accuracy"],
            runs=data["runs"],
        )

    def agent_for(self, traj: Trajectory, step: int) -> str | None:
        present = {agent_key(speaker(m)) for m in traj.messages}
        for key, _ in sorted(self.agents.items(), key=lambda kv: (-kv[1], kv[0])):
            if key in present:
                return self.names[key]
        return speaker(traj.messages[step])


def _fit_format(runs: list[Trajectory]) -> FormatPrior:
    prior = FormatPrior(runs=len(runs))
    fractions = []
    for traj in runs:
        label = reference_label(traj)
        if label is None or label.message_index is None:
            continue
        prior.steps[label.message_index] += 1
        fractions.append(label.message_index / max(1, len(traj.messages) - 1))
        key = agent_key(label.agent)
        if key and label.agent:
            prior.agents[key] += 1
            prior.names.setdefault(key, label.agent)
    prior.relative = statistics.median(fractions) if fractions else 0.5
    labels = [(t, label) for t in runs if (label := reference_label(t)) is not None]
    hits = [prior.step_for(t) == label.message_index for t, label in labels]
    prior.accuracy = sum(hits) / len(hits) if hits else 0.0
    return prior


class PriorLocalizer:
    """Predicts the prior's step and agent (fitted: see `fit`)."""

    name = "prior"

    def __init__(self, priors: dict[str, FormatPrior] | None = None) -> None:
        self.priors = priors or {}

    def fit(self, runs: list[Trajectory]) -> PriorLocalizer:
        labelled = [t for t in runs if reference_label(t) is not None]
        by_format: dict[str, list[Trajectory]] = {}
        for traj in labelled:
            by_format.setdefault(log_format(traj), []).append(traj)
        priors = {name: _fit_format(group) for name, group in by_format.items()}
        priors[ALL_FORMATS] = _fit_format(labelled)
        return PriorLocalizer(priors)

    def prior_for(self, traj: Trajectory) -> FormatPrior:
        return self.priors.get(log_format(traj)) or self.priors.get(ALL_FORMATS) or FormatPrior()

    def check(self, traj: Trajectory) -> None:
        if not self.priors:
            raise UserError(NOT_FITTED.format(method=self.name))

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        prior = self.prior_for(traj)
        step = prior.step_for(traj)
        if step is None:
            return None
        return Diagnosis(
            trajectory_id=traj.id,
            method="prior",
            step=step,
            agent=prior.agent_for(traj, step),
            confidence=round(prior.accuracy, 4),
            explanation=f"the calibrated prior of this log format ({prior.runs} tuning runs): "
            f"decisive errors are most often at message {step}",
            details={"log_format": log_format(traj), "prior_runs": prior.runs},
        )
