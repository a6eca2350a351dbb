"""The ceiling figures: perfect-stop savings by hand, hindsight AUROC on separable and real runs."""

from __future__ import annotations

import numpy as np

from trajforge.monitor import headroom
from trajforge.monitor.dataset import RunFeatures
from trajforge.monitor.headroom import hindsight_auroc, perfect_savings


def _run(name: str, failed: bool, tokens: list[float], last_row: list[float]) -> RunFeatures:
    features = np.zeros((len(tokens), len(last_row)))
    features[-1] = last_row
    return RunFeatures(
        traj_id=name,
        group=f"task:{name}",
        failed=failed,
        features=features,
        tokens=np.asarray(tokens, dtype=float),
        message_index=np.arange(len(tokens)) * 2,
    )


def test_perfect_savings_counts_only_failed_tokens_after_the_stop_step():
    runs = [
        _run("a", True, [10, 20, 30, 40], [0]),  # stop after step 2 saves 70 of 100
        _run("b", True, [50, 50], [0]),  # 2 steps: nothing left after step 2
        _run("c", False, [1000, 1000, 1000], [0]),  # successful: never counted
    ]
    assert perfect_savings(runs, 2) == round(70 / 200, 4)
    assert perfect_savings([runs[2]], 2) is None


def test_hindsight_auroc_separates_when_the_last_row_does():
    rng = np.random.default_rng(0)
    runs = [
        _run(f"r{i}", i % 2 == 0, [1.0] * 3, [float(i % 2 == 0) + 0.1 * rng.normal(), 1.0])
        for i in range(60)
    ]
    assert hindsight_auroc(runs) > 0.95  # folds pooled: each fold has its own scale
    noise = [_run(f"n{i}", i % 2 == 0, [1.0] * 3, list(rng.normal(size=4))) for i in range(200)]
    assert abs(hindsight_auroc(noise) - 0.5) < 0.15


def test_headroom_on_real_swe_runs_bounds_the_prefix_figures(swe_runs):
    ceiling = headroom(swe_runs)
    saved = ceiling["perfect_tokens_saved_at_step"]
    assert 0 < saved["20"] < saved["10"] < saved["5"] <= 1
    assert 0.5 < ceiling["hindsight_auroc"] < 1
    assert ceiling["final_length_auroc"] > 0.5  # failed runs are longer, a little
