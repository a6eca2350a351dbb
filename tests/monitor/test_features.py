"""Prefix features use the prefix only, and carry a version."""

from __future__ import annotations

import numpy as np

from trajforge.monitor import FEATURE_VERSION, feature_names, prefix_features
from trajforge.monitor.steps import extract_steps

from .doors import looping_run


def _truncated(traj, end: int):
    return traj.model_copy(update={"messages": traj.messages[:end]})


def test_features_after_step_k_do_not_depend_on_later_messages(swe_trajs, tau_trajs):
    for traj in [*swe_trajs[:8], *tau_trajs[:8]]:
        full = prefix_features(traj)
        steps = extract_steps(traj)
        for k in (1, len(steps) // 2, len(steps) - 1):
            if k < 1:
                continue
            prefix = prefix_features(_truncated(traj, steps[k - 1].end))
            np.testing.assert_array_equal(prefix[k - 1], full[k - 1])


def test_one_row_per_step_with_named_columns(swe_trajs):
    traj = swe_trajs[1]
    matrix = prefix_features(traj)
    assert matrix.shape == (len(traj.assistant_indices()), len(feature_names()))
    assert np.isfinite(matrix).all()
    steps = matrix[:, feature_names().index("steps")]
    assert list(steps) == list(range(1, len(steps) + 1))
    assert FEATURE_VERSION


def test_a_run_that_repeats_a_failing_command_shows_a_loop():
    names = feature_names()
    last = prefix_features(looping_run(steps=6))[-1]
    assert last[names.index("error_streak")] == 6
    assert last[names.index("repeats_last5")] == 4
    assert last[names.index("cycle2_share")] > 0
