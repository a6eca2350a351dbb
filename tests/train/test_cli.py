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
    result = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"}).invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["success"]["n"] == 8 and report["tasks"] == 4
    assert report["recovery"]["n"] == 3 and set(report["pass_hat_k"]) == {"1", "2"}
    lines = _progress(result.stderr, f"eval {ckpt}: episode ")
    assert lines[0].startswith(f"eval {ckpt}: episode 0/8 (0%)")
    assert lines[-1].startswith(f"eval {ckpt}: episode 11/11 (100%)") and "success " in lines[-1]
    # each batched step is reported too, so long episodes that end nothing still show a line
    assert any(", step 1, running " in line for line in lines), lines


def _progress(stderr: str, prefix: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) >= 2, stderr
    assert all(" elapsed" in line for line in lines)
    assert any("/s, " in line and "ETA" in line for line in lines), lines
    return lines


def test_eval_of_a_policy_over_http_prints_progress_lines(tmp_path: Path) -> None:
    from trajforge.models.mock_server import MockOpenAIServer

    with MockOpenAIServer() as server:
        args = ["eval", "--policy", "llm", "--base-url", server.base_url, "--llm-model", "m",
                "--tasks", "3", "--recovery", "2", "--max-steps", "2", "--json"]  # fmt: skip
        result = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"}).invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = _progress(result.stderr, "eval llm: episode ")
    assert lines[-1].startswith("eval llm: episode 5/5 (100%)")


def test_train_sft_names_a_bad_dataset_line(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_bytes(orjson.dumps(teacher_rows(range(1))[0]) + b"\nnot json\n")
    out = str(tmp_path / "ckpt")
    result = CliRunner().invoke(app, ["train", "sft", "--data", str(data), "--out", out])
    assert result.exit_code != 0
    assert "bad.jsonl [record line 2]: malformed JSON" in result.output


def test_train_sft_prints_progress_lines_when_its_output_is_a_pipe(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    data = tmp_path / "train.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in teacher_rows(range(4))))
    args = [sys.executable, "-m", "trajforge", "train", "sft", "--data", str(data),
            "--out", str(tmp_path / "ckpt"), "--steps", "4", "--batch-size", "2",
            "--hidden", "16", "--layers", "1"]  # fmt: skip
    env = {**os.environ, "TRAJFORGE_PROGRESS_EVERY": "0", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("train sft: step")]
    assert [line.split(",")[0] for line in lines] == [
        f"train sft: step {n}/4 ({n * 25}%)" for n in range(1, 5)
    ]
    assert " step/s, " in lines[1] and " tok/s, loss " in lines[1] and "ETA" in lines[1]


def test_train_sft_refuses_a_row_of_no_known_form(tmp_path: Path) -> None:
    """A chat row with `weight: 0` marks (the old row shape) is not a training row."""
    data = tmp_path / "old.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "weight": 0}]
    old = {"messages": turns, "tools": []}
    data.write_bytes(orjson.dumps(old) + b"\n")
    out = str(tmp_path / "ckpt")
    result = CliRunner().invoke(app, ["train", "sft", "--data", str(data), "--out", out])
    assert result.exit_code == 1
    assert "old.jsonl [record line 1]: not a training row: unknown form None" in result.output
