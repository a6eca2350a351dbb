"""RL rollouts on Ray: the same episodes, samples and update as threads here, for one seed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trajforge.serve.student import Student
from trajforge.store import Store
from trajforge.train.rl import RLConfig, train_rl

pytest.importorskip("ray")

ONE = RLConfig(iterations=1, tasks_per_iteration=2, group_size=4, max_steps=6, lr=1e-3,
               eval_every=0, concurrency=8, threads=1, seed=3)  # fmt: skip


def _episodes(out: Path) -> dict[str, list[list[int]]]:
    """Each rollout's generated token ids by (task, sample), the session's nonce left out."""
    with Store(out / "rollouts.db") as store:
        runs = list(store.query())
    return {
        re.sub(r"-[0-9a-f]+-", "-", str(run.metadata["session"])): [
            call.completion_token_ids or [] for call in run.llm_calls
        ]
        for run in runs
    }


def test_ray_rollouts_equal_local_ones_for_a_seed(student_dir: Path, tmp_path: Path) -> None:
    local = train_rl(student_dir, tmp_path / "local", ONE)
    remote = train_rl(student_dir, tmp_path / "ray", ONE.model_copy(update={"backend": "ray"}))
    episodes = _episodes(tmp_path / "local")
    assert len(episodes) == 8 and episodes == _episodes(tmp_path / "ray")
    assert len({str(tokens) for tokens in episodes.values()}) > 1  # samples differ within a group
    for key in ("reward", "success", "correlation", "scored_tokens", "loss"):
        assert local[0][key] == remote[0][key]
    weights = [Student(tmp_path / run / "iter-0001").model.parameters() for run in ("local", "ray")]
    assert all((a == b).all() for a, b in zip(*weights, strict=True))
