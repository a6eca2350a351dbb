"""`train dpo`: a student trained further on exported preference pairs prefers the chosen
answers more than its starting checkpoint does, and only the answers carry loss."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import torch
from tests.train.conftest import teacher_rows
from typer.testing import CliRunner

from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.cli.main import app
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.rollout.episode import Limits, run_episode
from trajforge.serve.student import Student
from trajforge.store import Store
from trajforge.train.dpo import encode_pairs, sequence_logps
from trajforge.train.rows import preference_pairs, read_rows


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory) -> Path:
    """`export --format dpo` of a store holding clean and noisy teacher runs of 24 worlds."""
    folder = tmp_path_factory.mktemp("pairs")
    db = folder / "runs.db"
    with Store(db) as store:
        for seed in range(24):
            task = task_for(seed, 1)
            noisy = NoisyObservableTeacher(seed=seed, error_rate=0.6)
            runs = [run_episode(HouseholdEnv(), ObservableTeacher(), task)]
            runs.append(run_episode(HouseholdEnv(), noisy, task, limits=Limits(max_steps=8)))
            store.add_many(runs)
    out = folder / "pairs.jsonl"
    result = CliRunner().invoke(app, ["export", "--db", str(db), "-f", "dpo", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _margins(policy: Student, reference: Student, pairs_path: Path) -> torch.Tensor:
    """(log pi(c) - log ref(c)) - (log pi(r) - log ref(r)) of every pair."""
    pairs = preference_pairs(read_rows(pairs_path, form="preference"))
    data = encode_pairs(policy.codec, [c for c, _ in pairs], [r for _, r in pairs], 1024)
    sides = [s for pair in data for s in pair]
    with torch.inference_mode():
        new = sequence_logps(policy.model, sides, policy.codec.pad_id).view(-1, 2)
        old = sequence_logps(reference.model, sides, reference.codec.pad_id).view(-1, 2)
    return (new[:, 0] - old[:, 0]) - (new[:, 1] - old[:, 1])


def test_dpo_steps_raise_the_chosen_over_rejected_margin(
    student_dir: Path, pairs_file: Path, tmp_path: Path
) -> None:
    pairs = read_rows(pairs_file, form="preference")
    assert len(pairs) >= 4 and {p["method"] for p in pairs} == {"siblings"}
    out = tmp_path / "dpo"
    args = ["train", "dpo", "--base", str(student_dir), "--data", str(pairs_file),
            "--out", str(out), "--steps", "12", "--beta", "0.5", "--lr", "1e-3",
            "--batch-size", "4"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    margins = _margins(Student(out), Student(student_dir), pairs_file)
    assert margins.mean() > 0.5 and (margins > 0).float().mean() > 0.7, margins
    log = [orjson.loads(line) for line in (out / "loss.jsonl").read_bytes().splitlines()]
    assert len(log) == 12 and log[-1]["margin"] > log[0]["margin"]
    manifest = Student(out).manifest
    assert manifest["objective"] == "dpo" and manifest["base"] == str(student_dir)
    tasks = {p["task_id"] for p in pairs} | set(Student(student_dir).manifest["train_tasks"])
    assert set(manifest["train_tasks"]) == tasks


def test_only_the_chosen_and_rejected_answers_carry_loss(
    student_dir: Path, pairs_file: Path
) -> None:
    codec = Student(student_dir).codec
    rows = read_rows(pairs_file, form="preference")
    pairs = preference_pairs(rows)
    data = encode_pairs(codec, [c for c, _ in pairs], [r for _, r in pairs], 4096)
    assert len(data) == len(rows)
    for row, sides in zip(rows, data, strict=True):
        prompt = codec.prompt(row["prompt"], row["tools"])
        for (ids, mask), answer in zip(sides, (row["chosen"], row["rejected"]), strict=True):
            start = mask.index(1)
            assert ids[:start] == prompt and set(mask[start:]) == {1}
            alone, _ = codec.encode([answer[0]], row["tools"])
            assert ids[start - 1 :] == alone  # the answer: every token after the role token
        assert sides[0][0] != sides[1][0]


def test_train_dpo_names_a_row_that_is_not_a_pair(student_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_bytes(orjson.dumps(teacher_rows(range(1))[0]) + b"\n")
    args = ["train", "dpo", "--base", str(student_dir), "--data", str(data),
            "--out", str(tmp_path / "out")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {data} [record line 1]: form: must be 'preference'")
