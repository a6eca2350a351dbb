"""The trained diagnoser: a step-ranking model over per-step features.

Every candidate step of a labelled failed run is a training row (`step_features`); the
labelled decisive step is the positive one. A logistic regression on standardized features
scores each step (one model per log format with enough training runs, and one for all runs
that serves the other formats); the diagnosis is the highest-scoring step of the run and its
confidence the softmax share of that score among the run's steps.

Training data: failures whose decisive step is known exactly — noisy-expert runs in
forkable environments labelled by the counterfactual oracle (`diagnose synthesize`) — and
labelled logs such as Who&When. The model file is JSON (no pickle): a format version, the
feature version it was computed with, and the datasets and tasks it was trained on, which
`diagnose eval` uses to keep its in-sample figures apart.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from trajforge.diagnose.datasets import dataset_of, log_format
from trajforge.diagnose.eval import reference_label
from trajforge.diagnose.evidence import speaker
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.prior import NOT_FITTED
from trajforge.diagnose.step_features import FEATURE_VERSION, FEATURES, step_features
from trajforge.errors import UserError
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter

FORMAT_VERSION = 1
ALL = "*"


class RankerConfig(BaseModel):
    """How the ranker is fitted."""

    c: float = Field(default=1.0, description="Inverse L2 regularization strength.")
    max_iter: int = Field(default=2000, description="Solver iterations.")
    min_format_runs: int = Field(
        default=20, description="A log format gets its own model from this many runs."
    )


class Weights(BaseModel):
    """One fitted logistic regression over standardized step features."""

    mean: list[float] = Field(description="Feature means (standardization).")
    scale: list[float] = Field(description="Feature standard deviations.")
    coef: list[float] = Field(description="Weights, in feature order.")
    intercept: float = Field(description="Intercept.")
    runs: int = Field(description="Training runs it was fitted on.")


class RankerModel(BaseModel):
    """A fitted step ranker, as saved in its model file."""

    format_version: int = Field(default=FORMAT_VERSION, description="Model file layout.")
    feature_version: str = Field(description="`step_features.FEATURE_VERSION` it was fitted on.")
    features: list[str] = Field(description="Feature names, in column order.")
    weights: dict[str, Weights] = Field(
        description="Per log format with enough training runs, and `*` for all runs together."
    )
    trained_on: list[str] = Field(description="Datasets of the training runs.")
    trained_tasks: list[str] = Field(description="Task keys (dataset:task) of the training runs.")
    runs: int = Field(description="Training runs.")
    calibration: dict | None = Field(
        default=None,
        description="calibrated-trained: the priors per log format and the exact-hit rates "
        "of the ranker's confidence bins (see `trajforge.diagnose.calibrated`).",
    )
    created_at: float = Field(default_factory=time.time, description="Unix time.")


def _fit_weights(
    rows: list[np.ndarray], targets: list[list[int]], config: RankerConfig
) -> Weights | None:
    from sklearn.linear_model import LogisticRegression

    y = np.asarray([t for run in targets for t in run])
    if len(set(y.tolist())) < 2:
        return None
    x = np.vstack(rows)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    fitted = LogisticRegression(C=config.c, max_iter=config.max_iter, class_weight="balanced")
    fitted.fit((x - mean) / scale, y)
    return Weights(
        mean=mean.tolist(),
        scale=scale.tolist(),
        coef=fitted.coef_[0].tolist(),
        intercept=float(fitted.intercept_[0]),
        runs=len(rows),
    )


def fit_ranker(runs: list[Trajectory], config: RankerConfig | None = None) -> RankerModel:
    """Fit the ranker on the labelled runs among `runs`: one model for all of them and one
    per log format with at least `config.min_format_runs` runs."""
    from trajforge.diagnose.holdout import task_key

    config = config or RankerConfig()
    groups: dict[str, tuple[list, list]] = {ALL: ([], [])}
    used = []
    for traj in runs:
        label = reference_label(traj)
        steps, features = step_features(traj)
        if label is None or label.message_index not in steps:
            continue
        target = [int(step == label.message_index) for step in steps]
        for key in (ALL, log_format(traj)):
            groups.setdefault(key, ([], []))
            groups[key][0].append(features)
            groups[key][1].append(target)
        used.append(traj)
    weights = {
        key: fitted
        for key, (rows, targets) in groups.items()
        if (key == ALL or len(rows) >= config.min_format_runs)
        and (fitted := _fit_weights(rows, targets, config)) is not None
    }
    if ALL not in weights:
        raise UserError("no labelled runs whose labelled step is an agent step: nothing to train")
    return RankerModel(
        feature_version=FEATURE_VERSION,
        features=list(FEATURES),
        weights=weights,
        trained_on=sorted({dataset_of(t) for t in used}),
        trained_tasks=sorted({task_key(t) for t in used}),
        runs=len(used),
    )


class TrainedLocalizer:
    """Localize with a fitted ranker (hand-tuned in the sense of `holdout`: its training
    datasets and tasks are declared, so figures on them are labelled in-sample)."""

    name = "trained"

    def __init__(self, model: RankerModel) -> None:
        self.model = model
        self.tuned_on = frozenset(model.trained_on)
        self.tuned_tasks = frozenset(model.trained_tasks)

    def check(self, traj: Trajectory) -> None:
        return None

    def weights_for(self, traj: Trajectory) -> Weights:
        return self.model.weights.get(log_format(traj)) or self.model.weights[ALL]

    def scores(self, traj: Trajectory) -> tuple[list[int], np.ndarray]:
        steps, features = step_features(traj)
        w = self.weights_for(traj)
        standardized = (features - np.asarray(w.mean)) / np.asarray(w.scale)
        return steps, standardized @ np.asarray(w.coef) + w.intercept

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        steps, logits = self.scores(traj)
        if not steps:
            return None
        shares = np.exp(logits - logits.max())
        shares /= shares.sum()
        best = int(np.argmax(logits))
        step = steps[best]
        return Diagnosis(
            trajectory_id=traj.id,
            method="trained",
            step=step,
            agent=speaker(traj.messages[step]),
            confidence=round(float(shares[best]), 4),
            explanation=f"the step ranker ({self.model.runs} training runs) scores message "
            f"{step} highest among {len(steps)} agent steps",
            details={"detector": "ranker", "runner_up": _runner_up(steps, logits, best)},
        )


def _runner_up(steps: list[int], logits: np.ndarray, best: int) -> int | None:
    order = np.argsort(-logits)
    return steps[int(order[1])] if len(order) > 1 else None


class RankerTrainer:
    """The `trained` method before training: fitted per fold by `diagnose eval`; to diagnose,
    train it first (`diagnose train`) and pass the model file."""

    name = "trained"

    def __init__(self, config: RankerConfig | None = None) -> None:
        self.config = config or RankerConfig()

    def fit(self, runs: list[Trajectory]) -> TrainedLocalizer:
        return TrainedLocalizer(fit_ranker(runs, self.config))

    def check(self, traj: Trajectory) -> None:
        raise UserError(NOT_FITTED.format(method=self.name))

    def localize(self, traj: Trajectory) -> Diagnosis | None:
        raise UserError(NOT_FITTED.format(method=self.name))


def save_ranker(model: RankerModel, path: str | Path) -> None:
    """Write the model file atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(model.model_dump_json(indent=1))
    os.replace(tmp, path)


def load_ranker(path: str | Path) -> RankerModel:
    """Read a model file, checking its format and feature versions."""
    path = Path(path)
    try:
        model = RankerModel.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise UserError(
            f"no model file at {path}; train one with `trajforge diagnose train`"
        ) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "file"
        raise UserError(f"{path}: not a diagnoser model file ({where}: {first['msg']})") from None
    if model.format_version != FORMAT_VERSION:
        raise UserError(
            f"{path}: model file format {model.format_version}, this trajforge reads "
            f"{FORMAT_VERSION}; retrain it with `trajforge diagnose train --out {path}`"
        )
    if model.feature_version != FEATURE_VERSION or model.features != list(FEATURES):
        raise UserError(
            f"{path}: model was trained on feature set '{model.feature_version}', this "
            f"trajforge computes '{FEATURE_VERSION}'; retrain it with `trajforge diagnose "
            f"train --out {path}`"
        )
    return model


def labelled_failures(store: Store, flt: TrajectoryFilter) -> list[Trajectory]:
    """The labelled failed runs matching `flt` (a clear error when there are none)."""
    from trajforge.diagnose.run import select_failures

    labelled = [t for t in select_failures(store, flt) if reference_label(t) is not None]
    if not labelled:
        raise UserError("no labelled failed runs match the filters; nothing to train on")
    return labelled
