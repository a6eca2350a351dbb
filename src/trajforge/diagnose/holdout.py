"""Out-of-sample scoring of localization: a method is scored only on runs it was not tuned on.

Methods come in three kinds, told apart by protocol:

- `Fittable` (prior, calibrated, trained): fitted afresh for every test fold on the tuning
  side of the split only, so every figure is out of sample by construction;
- `HandTuned` (heuristic; a trained model loaded from a file): tuned once, on the datasets
  (and tasks) it declares. On those its figure is labelled `in-sample`; elsewhere it is
  out of sample;
- anything else (counterfactual, llm) has no tuned parts.

Splits (stated in every report):
- `dataset`: each dataset is tested with the tuning side = every other dataset;
- `task`: each dataset's tasks are cut into k folds (by task id, so every run of a task
  falls in one fold); a fold is tested with the tuning side = the other folds of the same
  dataset plus every other dataset.

Baselines are constants chosen on the tuning side of the same split (never on the tested
runs): the most common labelled step and the most common labelled agent, among the tuning
runs of the same log format when there are any, else among all tuning runs. Intervals are
percentile bootstraps over runs.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field

from trajforge.diagnose.datasets import agent_key, dataset_of, log_format, same_agent
from trajforge.diagnose.eval import reference_label, verification_summary
from trajforge.diagnose.localize import Localizer
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.run import Progress, diagnose_runs, select_failures
from trajforge.diagnose.storage import load_diagnoses
from trajforge.errors import UserError
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter

Split = Literal["dataset", "task"]
NO_TUNING = (
    "select labelled runs of another dataset (--split dataset tunes on the other datasets) or "
    "use --split task"
)
Diagnose = Callable[[Localizer, list[Trajectory]], list[Diagnosis]]


@runtime_checkable
class Fittable(Protocol):
    """A method whose tuned parts are fitted on labelled runs."""

    name: str

    def fit(self, runs: list[Trajectory]) -> Localizer: ...


@runtime_checkable
class HandTuned(Protocol):
    """A method tuned once, on the datasets (and, when known, the tasks) it declares."""

    tuned_on: frozenset[str]
    tuned_tasks: frozenset[str]


class Metric(BaseModel):
    """A share of runs with its 95% bootstrap interval."""

    value: float | None = Field(description="The share (None when nothing was scored).")
    ci95: list[float] | None = Field(description="Percentile bootstrap interval over runs.")
    n: int = Field(description="Runs it is a share of.")


class Scores(BaseModel):
    """Step and agent accuracy over a set of runs."""

    exact: Metric
    within1: Metric
    within3: Metric
    agent: Metric


class Baselines(Scores):
    """Constants chosen on the tuning side of the split."""

    chosen_on: str = Field(description="Where the constants were chosen.")
    steps: list[int | None] = Field(description="The constant step of each fold.")
    agents: list[str | None] = Field(description="The constant agent of each fold.")


class DatasetScore(BaseModel):
    """One method on one dataset."""

    dataset: str
    runs: int = Field(description="Labelled runs scored.")
    sample: Literal["out-of-sample", "in-sample"] = Field(
        description="in-sample: the method was tuned on these runs; not a generalization figure."
    )
    split: str = Field(description="How tuning and test data were separated.")
    tuned_on: list[str] = Field(description="Datasets the method's tuned parts saw.")
    scores: Scores = Field(description="All runs; an abstention counts with its fallback.")
    coverage: Metric = Field(description="Runs the method answered itself (no abstention).")
    answered: Scores = Field(description="Accuracy on the runs it answered itself.")
    baselines: Baselines
    in_sample: Scores | None = Field(
        default=None,
        description="A hand-tuned method on this dataset's tuning tasks (labelled in-sample).",
    )


class HoldoutReport(BaseModel):
    """A method on every labelled dataset of a selection."""

    method: str
    split: Split
    folds: int
    seed: int
    datasets: list[DatasetScore]


class HoldoutConfig(BaseModel):
    """How the evaluation splits and resamples."""

    split: Split = Field(default="task", description="dataset or task (see module docstring).")
    folds: int = Field(default=5, description="Task folds per dataset (split task).")
    seed: int = Field(default=0, description="Seed of the task folds and the bootstrap.")
    bootstrap: int = Field(default=1000, description="Bootstrap rounds.")
    never_tune: frozenset[str] = Field(
        default=frozenset(), description="Datasets never used as tuning data (test only)."
    )


def evaluate_holdout(
    runs: Sequence[Trajectory],
    method: Localizer,
    diagnose: Diagnose,
    config: HoldoutConfig | None = None,
) -> HoldoutReport:
    """Score `method` on each labelled dataset in `runs`; see module docstring."""
    config = config or HoldoutConfig()
    labelled = [t for t in runs if reference_label(t) is not None]
    if not labelled:
        raise UserError("no selected run carries an error label with a step; nothing to score")
    by_dataset: dict[str, list[Trajectory]] = {}
    for traj in labelled:
        by_dataset.setdefault(dataset_of(traj), []).append(traj)
    scores = [
        _dataset_score(name, tested, labelled, method, diagnose, config)
        for name, tested in sorted(by_dataset.items())
    ]
    name = str(getattr(method, "name", type(method).__name__))
    return HoldoutReport(
        method=name, split=config.split, folds=config.folds, seed=config.seed, datasets=scores
    )


def task_key(traj: Trajectory) -> str:
    """The split unit: a task of a dataset (every run of a task falls on one side)."""
    return f"{dataset_of(traj)}:{traj.task.id}"


def _folds(
    name: str, tested: list[Trajectory], everything: list[Trajectory], config: HoldoutConfig
) -> list[tuple[list[Trajectory], list[Trajectory]]]:
    """(test, tuning) pairs for one dataset."""
    others = [
        t for t in everything if dataset_of(t) != name and dataset_of(t) not in config.never_tune
    ]
    if config.split == "dataset":
        return [(tested, others)]
    tasks = sorted({task_key(t) for t in tested})
    random.Random(config.seed).shuffle(tasks)
    k = max(1, min(config.folds, len(tasks)))
    fold_of = {task: i % k for i, task in enumerate(tasks)}
    pairs = []
    for fold in range(k):
        test = [t for t in tested if fold_of[task_key(t)] == fold]
        rest = [t for t in tested if fold_of[task_key(t)] != fold]
        pairs.append((test, ([] if name in config.never_tune else rest) + others))
    return pairs


def _split_text(config: HoldoutConfig, name: str) -> str:
    if config.split == "dataset":
        return f"by dataset: tuned on every selected dataset but {name}"
    return (
        f"by task: {config.folds} folds of {name}'s tasks; each fold tuned on the other folds "
        "and every other selected dataset"
    )


def _dataset_score(
    name: str,
    tested: list[Trajectory],
    everything: list[Trajectory],
    method: Localizer,
    diagnose: Diagnose,
    config: HoldoutConfig,
) -> DatasetScore:
    pairs = _folds(name, tested, everything, config)
    predicted: dict[str, Diagnosis] = {}
    in_sample_ids: set[str] = set()
    tuned_on: set[str] = set()
    split = _split_text(config, name)
    if isinstance(method, Fittable):
        for test, tuning in pairs:
            if not tuning:
                raise UserError(f"{method.name}: no tuning runs left for {name}; {NO_TUNING}")
            tuned_on |= {dataset_of(t) for t in tuning}
            fitted = method.fit(tuning)
            predicted |= {d.trajectory_id: d for d in diagnose(fitted, test)}
    else:
        predicted = {d.trajectory_id: d for d in diagnose(method, tested)}
        split = "none needed: the method has no tuned parts"
    if isinstance(method, HandTuned):
        tuned_on |= set(method.tuned_on)
        in_sample_ids = _seen(tested, method, name)
        if in_sample_ids or not isinstance(method, Fittable):
            split = _hand_tuned_text(method, name, len(in_sample_ids), len(tested))
    unseen = [t for t in tested if t.id not in in_sample_ids]
    seen = [t for t in tested if t.id in in_sample_ids]
    scored = unseen or seen
    answered = [t for t in scored if _answered(predicted.get(t.id))]
    return DatasetScore(
        dataset=name,
        runs=len(scored),
        sample="out-of-sample" if unseen else "in-sample",
        split=split,
        tuned_on=sorted(tuned_on),
        scores=_scores(scored, predicted, config),
        coverage=_metric([_answered(predicted.get(t.id)) for t in scored], config),
        answered=_scores(answered, predicted, config),
        baselines=_baselines(pairs, scored, config),
        in_sample=_scores(seen, predicted, config) if unseen and seen else None,
    )


def _seen(tested: list[Trajectory], method: HandTuned, name: str) -> set[str]:
    """Runs a hand-tuned method saw: its tasks when it names them, else its whole datasets."""
    if method.tuned_tasks:
        return {t.id for t in tested if task_key(t) in method.tuned_tasks}
    return {t.id for t in tested} if name in method.tuned_on else set()


def _hand_tuned_text(method: HandTuned, name: str, seen: int, total: int) -> str:
    tuned = ", ".join(sorted(method.tuned_on)) or "nothing"
    if seen == 0:
        return f"by dataset: the method was tuned on {tuned}, not on {name}"
    if seen == total:
        return f"none: the method was tuned on these runs ({name}); figures are in-sample"
    return f"by task: {total - seen} runs of tasks the method was not tuned on"


def _answered(diagnosis: Diagnosis | None) -> bool:
    return diagnosis is not None and diagnosis.step is not None and not diagnosis.abstained


def _hits(
    runs: list[Trajectory], step_of: Callable[[Trajectory], int | None], width: int
) -> list[bool]:
    hits = []
    for traj in runs:
        label, step = reference_label(traj), step_of(traj)
        assert label is not None and label.message_index is not None
        hits.append(step is not None and abs(step - label.message_index) <= width)
    return hits


def _agent_hits(runs: list[Trajectory], agent_of: Callable[[Trajectory], str | None]) -> list:
    out = []
    for traj in runs:
        label = reference_label(traj)
        if label is not None and label.agent:
            out.append(same_agent(agent_of(traj), label.agent))
    return out


def _scores(
    runs: list[Trajectory], predicted: dict[str, Diagnosis], config: HoldoutConfig
) -> Scores:
    def step(traj: Trajectory) -> int | None:
        d = predicted.get(traj.id)
        return d.step if d else None

    def agent(traj: Trajectory) -> str | None:
        d = predicted.get(traj.id)
        return d.agent if d else None

    return _score_functions(runs, step, agent, config)


def _score_functions(runs, step, agent, config: HoldoutConfig) -> Scores:
    return Scores(
        exact=_metric(_hits(runs, step, 0), config),
        within1=_metric(_hits(runs, step, 1), config),
        within3=_metric(_hits(runs, step, 3), config),
        agent=_metric(_agent_hits(runs, agent), config),
    )


def _baselines(pairs, scored: list[Trajectory], config: HoldoutConfig) -> Baselines:
    scored_ids = {t.id for t in scored}
    step_for: dict[str, int | None] = {}
    agent_for: dict[str, str | None] = {}
    steps, agents = [], []
    for test, tuning in pairs:
        formats = {log_format(t) for t in test}
        same = [t for t in tuning if log_format(t) in formats] or tuning
        step, agent = constant_step(same), majority_agent(same)
        steps.append(step)
        agents.append(agent)
        for traj in test:
            if traj.id in scored_ids:
                step_for[traj.id], agent_for[traj.id] = step, agent
    chosen = "the tuning side of each fold (same log format where present)"
    base = _score_functions(
        scored, lambda t: step_for.get(t.id), lambda t: agent_for.get(t.id), config
    )
    return Baselines(**base.model_dump(), chosen_on=chosen, steps=steps, agents=agents)


def constant_step(runs: list[Trajectory]) -> int | None:
    """The most common labelled step (ties: the earliest)."""
    steps = Counter(lb.message_index for t in runs if (lb := reference_label(t)))
    steps.pop(None, None)
    return min(steps, key=lambda s: (-steps[s], s)) if steps else None


def majority_agent(runs: list[Trajectory]) -> str | None:
    """The most common labelled agent (names compared as in `same_agent`)."""
    names: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for traj in runs:
        label = reference_label(traj)
        key = agent_key(label.agent) if label else None
        if key and label:
            names.setdefault(key, label.agent or key)
            counts[key] += 1
    return names[min(counts, key=lambda k: (-counts[k], k))] if counts else None


def _metric(hits: list[bool], config: HoldoutConfig) -> Metric:
    if not hits:
        return Metric(value=None, ci95=None, n=0)
    values = np.asarray(hits, dtype=float)
    return Metric(
        value=round(float(values.mean()), 4),
        ci95=bootstrap_ci(values, config.bootstrap, config.seed),
        n=len(hits),
    )


def bootstrap_ci(values: np.ndarray, rounds: int, seed: int) -> list[float] | None:
    """95% percentile bootstrap interval of the mean of `values`."""
    if rounds <= 0 or len(values) == 0:
        return None
    rng = np.random.default_rng(_seed(seed))
    means = values[rng.integers(0, len(values), size=(rounds, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return [round(float(low), 4), round(float(high), 4)]


def _seed(seed: int) -> int:
    return int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:4], "big")


def evaluate_store(
    store: Store,
    flt: TrajectoryFilter,
    method: Localizer,
    config: HoldoutConfig | None = None,
    fresh: bool = False,
    on_run: Progress | None = None,
) -> dict:
    """`diagnose eval`: the out-of-sample report of `method` on the failed runs matching
    `flt`, and how its corrections verified. Stored diagnoses of a method without fitted parts
    are reused (unless `fresh`); a fittable method is always fitted and run per fold."""
    runs = select_failures(store, flt)
    reuse = not fresh and not isinstance(method, Fittable)
    ids = [t.id for t in runs] if reuse else []
    stored = {d.trajectory_id: d for d in load_diagnoses(store, ids, method.name)}
    made: dict[str, Diagnosis] = {}

    def diagnose(localizer: Localizer, batch: list[Trajectory]) -> list[Diagnosis]:
        todo = [t for t in batch if t.id not in stored]
        found = {d.trajectory_id: d for d in diagnose_runs(todo, localizer, on_run)}
        out = [stored.get(t.id) or found[t.id] for t in batch]
        made.update({d.trajectory_id: d for d in out})
        return out

    report = evaluate_holdout(runs, method, diagnose, config)
    pairs = [(t, made[t.id]) for t in runs if t.id in made]
    return report.model_dump() | {"verification": verification_summary(pairs)}
