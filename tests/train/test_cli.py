"""The train sft and eval commands end to end (a very small student)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from tests.train.conftest import teacher_rows
from typer.testing import CliRunner

from trajforge.cli.main import app


def test_train_sft_from_a_dataset_then_eval_on_held_out_worlds(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in teacher_rows(range(8))))
    ckpt = tmp_path / "ckpt"
    args = ["train", "sft", "--data", str(data), "--out", str(ckpt)]
    args += ["--steps", "6", "--batch-size", "2", "--save-every", "3"]
    args += ["--hidden", "16", "--layers", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len((ckpt / "loss.jsonl").read_text().splitlines()) == 6
    args = ["eval", "--ckpt", str(ckpt), "--tasks", "4", "--recovery", "3", "--samples", "2",
            "--temperature", "1.0", "--max-steps", "3", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["success"]["n"] == 8 and report["tasks"] == 4
    assert report["recovery"]["n"] == 3 and set(report["pass_hat_k"]) == {"1", "2"}


def test_train_sft_names_a_bad_dataset_line(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_bytes(orjson.dumps(teacher_rows(range(1))[0]) + b"\nnot json\n")
    result = CliRunner().invoke(app, ["train", "sft", "--data", str(data), "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "bad.jsonl: line 2 is not JSON" in result.output


def test_train_sft_refuses_a_row_of_no_known_form(tmp_path: Path) -> None:
    """A chat row with `weight: 0` marks (the old row shape) is not a training row."""
    data = tmp_path / "old.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "weight": 0}]
    old = {"messages": turns, "tools": []}
    data.write_bytes(orjson.dumps(old) + b"\n")
    result = CliRunner().invoke(app, ["train", "sft", "--data", str(data), "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "old.jsonl: line 1 is not a training row: unknown form None" in result.output
