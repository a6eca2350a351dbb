"""A tiny student trained once per test session on observable-teacher demonstrations."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.generate.recovery import household_rows
from trajforge.rollout.episode import run_episode
from trajforge.train.rows import sequences
from trajforge.train.sft import SFTConfig, train_sft

TRAIN_SEEDS = range(40)
SMALL = SFTConfig(steps=240, batch_size=8, lr=3e-3, warmup=20, hidden=48, layers=2, heads=2,
                  save_every=120, seed=0, threads=1)  # fmt: skip


def teacher_rows(seeds=TRAIN_SEEDS) -> list[dict]:
    rows = []
    for seed in seeds:
        run = run_episode(HouseholdEnv(), ObservableTeacher(), task_for(seed, 1))
        rows += household_rows(run)
    return rows


@pytest.fixture(scope="session")
def student_dir(tmp_path_factory) -> Path:
    rows = teacher_rows()
    out = tmp_path_factory.mktemp("student") / "ckpt"
    tasks = sorted({r["task_id"] for r in rows})
    manifest = {"name": "tiny-test", "train_tasks": tasks}
    train_sft(sequences(rows), out, SMALL, manifest=manifest)
    return out
