"""Task-grouped evaluation on real runs: no leakage, and the learned detector beats length."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from trajforge.monitor import LearnedConfig, LearnedDetector, LengthDetector, cross_validate
from trajforge.monitor.dataset import RunFeatures, featurize_run
from trajforge.monitor.detectors import RuleDetector
from trajforge.monitor.stoprule import stop_step, threshold_for_loss


class SpyDetector(RuleDetector):
    """A rule detector that remembers which runs it was trained on."""

    trained_on: ClassVar[list[list[RunFeatures]]] = []

    def fit(self, runs: list[RunFeatures]) -> None:
        SpyDetector.trained_on.append(list(runs))
        super().fit(runs)


def _prefix_copy(traj, steps: int) -> RunFeatures:
    """A second run of the same task: the first `steps` steps of `traj`, relabeled."""
    cut = traj.assistant_indices()[steps] if steps < len(traj.assistant_indices()) else None
    copy = traj.model_copy(update={"messages": traj.messages[:cut], "id": traj.id + "-prefix"})
    return featurize_run(copy)


def test_no_task_is_on_both_sides_of_a_split(swe_trajs, swe_runs, tau_runs):
    prefixes = [_prefix_copy(t, 12) for t in swe_trajs[:40]]
    runs = [*swe_runs[:120], *prefixes, *tau_runs]  # tau: four trials of each task
    SpyDetector.trained_on = []
    evaluation = cross_validate(runs, SpyDetector, folds=5)
    assert sorted(s.run.traj_id for s in evaluation.scored) == sorted(r.traj_id for r in runs)
    for fold, trained in enumerate(SpyDetector.trained_on):
        train_groups = {r.group for r in trained}
        tested = [s.run for s in evaluation.scored if s.fold == fold]
        assert tested and not train_groups & {r.group for r in tested}


def test_learned_detector_beats_length_on_held_out_swe_tasks(swe_runs):
    def learned():
        return LearnedDetector(LearnedConfig(candidates=("logistic",), inner_folds=3))

    learned_eval = cross_validate(swe_runs, learned, folds=4).summary(bootstrap=0)
    length_eval = cross_validate(swe_runs, LengthDetector, folds=4).summary(bootstrap=0)
    learned_auroc = np.mean(list(learned_eval["auroc_at_step"].values()))
    length_auroc = np.mean(list(length_eval["auroc_at_step"].values()))
    assert learned_auroc > length_auroc + 0.03, (learned_auroc, length_auroc)
    assert learned_eval["runs"] == len(swe_runs)
    for key in ("tokens_saved_at_loss", "successful_stopped_at_loss"):
        assert set(learned_eval[key]) == {"0.01", "0.05"}


def test_stop_rule_never_stops_on_the_last_step_or_before_min_step():
    risks = np.array([0.9, 0.1, 0.2, 0.9])
    assert stop_step(risks, 0.5, min_step=2) is None
    assert stop_step(risks, 0.5, min_step=1) == 1
    assert stop_step(np.array([0.1, 0.6, 0.7]), 0.5, min_step=1) == 2


def test_threshold_stops_at_most_the_target_share_of_successes():
    maxima = list(np.linspace(0.0, 0.99, 100))
    threshold = threshold_for_loss(maxima, 0.05)
    assert sum(m >= threshold for m in maxima) == 5
    assert sum(m >= threshold_for_loss(maxima, 0.0) for m in maxima) == 0


def _synthetic_run(name: str, failed: bool, risks: np.ndarray) -> RunFeatures:
    steps = len(risks)
    return RunFeatures(
        traj_id=name,
        group=name,
        failed=failed,
        features=np.zeros((steps, 1)),
        tokens=np.full(steps, 100.0),
        message_index=np.arange(steps),
    )


def test_learned_detector_picks_the_earliest_stop_step_that_saves_most():
    # successful runs spike at step 6; failed runs are high from step 8 on
    success = np.full(30, 0.1)
    success[5] = 0.9
    doomed = np.where(np.arange(30) >= 7, 0.8, 0.1)
    runs = [_synthetic_run(f"s{i}", False, success) for i in range(20)]
    runs += [_synthetic_run(f"f{i}", True, doomed) for i in range(10)]
    risks = [success if not r.failed else doomed for r in runs]
    detector = LearnedDetector(LearnedConfig(min_step_candidates=(5, 10, 15)))
    assert detector._best_min_step(runs, risks) == 10
    fixed = LearnedDetector(LearnedConfig(min_step=5, min_step_candidates=(5,)))
    assert fixed._best_min_step(runs, risks) == 5
