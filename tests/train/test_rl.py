"""`train rl` end to end over loopback: serve → proxy → rollouts → export → update → reload."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.export.rl import rl_samples
from trajforge.serve.student import MANIFEST, Student
from trajforge.store import Store
from trajforge.store.training import training_iterations, training_runs
from trajforge.train.rl import RLConfig, RLError, train_rl
from trajforge.train.rl.checkpoints import read_run
from trajforge.train.rl.grpo import agreement, from_sample
from trajforge.train.rl.loop import check_agreement
from trajforge.web import UiConfig, create_app

QUICK = RLConfig(iterations=2, tasks_per_iteration=2, group_size=4, max_steps=6, lr=1e-3,
                 reward="process", eval_every=0, concurrency=8, threads=1)  # fmt: skip


@pytest.fixture(scope="module")
def rl_run(student_dir: Path, tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("rl") / "run"
    return out, train_rl(student_dir, out, QUICK)


def _params(path: Path) -> list:
    return [p.detach().clone() for p in Student(path).model.parameters()]


def _recorded(out: Path) -> list:
    with Store(out / "rollouts.db") as store:
        return list(store.query())


def test_an_iteration_updates_the_weights_and_the_next_one_keeps_recording(
    student_dir: Path, rl_run
) -> None:
    out, rows = rl_run
    assert [r["iteration"] for r in rows] == [1, 2]
    before, after = _params(student_dir), _params(out / "iter-0001")
    assert any(not (a == b).all() for a, b in zip(before, after, strict=True))
    recorded = _recorded(out)
    assert len(recorded) == 2 * QUICK.tasks_per_iteration * QUICK.group_size
    assert all(t.llm_calls and t.llm_calls[0].completion_token_ids for t in recorded)
    for row in rows:  # iteration 2 samples from the reloaded weights the trainer holds
        assert row["updates"] > 0 and row["scored_tokens"] > 0
        assert row["correlation"] >= 0.999 and row["max_logprob_diff"] < 1e-3
        for key in ("kl", "tokens_per_s", "episodes_per_s", "drift_points_dropped"):
            assert key in row
        assert 0.0 <= row["zero_variance_groups"] <= 1.0 and 0.0 < row["advantage_tokens"] <= 1.0
        assert row["entropy"] > 0.0
        assert row["kl_median"] >= 0.0


def _progress(out: Path) -> list[dict]:
    """The iteration rows the loop wrote into its store (what `trajforge ui` shows)."""
    with Store(out / "rollouts.db") as store:
        [run] = training_runs(store)
        assert (run.name, run.kind) == (str(out.resolve()), "rl")
        return [orjson.loads(r.doc) for r in training_iterations(store, run.name)]


def test_each_iteration_row_reaches_the_store_and_the_ui(rl_run) -> None:
    out, rows = rl_run
    assert _progress(out) == rows
    client = TestClient(create_app(UiConfig(db=out / "rollouts.db")))
    [run] = client.get("/api/training").json()["runs"]
    assert run["iterations"] == rows and run["settings"]["config"]["iterations"] == 2
    page = client.get("/training").text
    assert '<tr data-iteration="2">' in page and f"{rows[1]['correlation']:.6f}" in page


def test_masks_exclude_environment_tokens(student_dir: Path, rl_run) -> None:
    codec = Student(student_dir).codec
    for traj in _recorded(rl_run[0])[:6]:
        completions = [t for c in traj.llm_calls for t in c.completion_token_ids or []]
        learned: list[int] = []
        for sample in rl_samples(traj):
            seq = from_sample(sample, "g", 0.0)
            learned += [t for t, m in zip(seq.ids, seq.mask, strict=True) if m]
            assert all(
                (lp is None) == (m == 0) for lp, m in zip(seq.behaviour, seq.mask, strict=True)
            )
            masked = set(codec.pieces([t for t, m in zip(seq.ids, seq.mask, strict=True) if not m]))
            assert "<|tool|>" in masked or len(traj.llm_calls) == 1
        assert learned == completions  # what the model sampled, role tokens it sampled included


def _mismatched_tokenizer(student_dir: Path, out: Path) -> Path:
    """The same network under a vocabulary whose word ids are shuffled (rows permuted alike)."""
    import torch

    shutil.copytree(student_dir, out)
    manifest = orjson.loads((out / MANIFEST).read_bytes())
    vocab: dict[str, int] = manifest["codec"]["vocab"]
    words = [w for w, i in vocab.items() if i >= 9]
    ids = [vocab[w] for w in words]
    shuffled = ids[:]
    random.Random(0).shuffle(shuffled)
    student = Student(student_dir)
    weights = student.model.get_input_embeddings().weight
    with torch.no_grad():
        weights[shuffled] = weights[ids].clone()
    student.model.save_pretrained(out / "model")
    manifest["codec"]["vocab"] = {**vocab, **dict(zip(words, shuffled, strict=True))}
    (out / MANIFEST).write_bytes(orjson.dumps(manifest))
    return out


def test_correlation_check_fails_on_a_mismatched_tokenizer(
    student_dir: Path, rl_run, tmp_path: Path
) -> None:
    sequences = [from_sample(s, "g", 0.0) for t in _recorded(rl_run[0])[:8] for s in rl_samples(t)]
    same = agreement(Student(student_dir).model, sequences, 0)
    wrong_dir = _mismatched_tokenizer(student_dir, tmp_path / "wrong")
    wrong = agreement(Student(wrong_dir).model, sequences, 0)
    assert same.correlation > 0.999
    assert wrong.correlation < 0.9 and wrong.max_abs_diff > 1.0
    check_agreement(same, 0.999, 1)
    with pytest.raises(RLError, match="correlation"):
        check_agreement(wrong, 0.999, 1)


def test_the_loop_resumes_after_being_killed(student_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "-m", "trajforge.cli.main", "train", "rl", "--out", str(out),
            "--base", str(student_dir), "--iterations", "3", "--tasks", "2", "--group", "2",
            "--max-steps", "4", "--eval-every", "3", "--eval-tasks", "3",
            "--reward", "outcome", "--threads", "1"]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 900  # a guard against a hang, not a speed check
    while not (out / "iter-0001" / "metrics.json").exists():
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    first = (out / "iter-0001" / "state.pt").stat().st_mtime_ns
    runner = CliRunner(env={"TRAJFORGE_PROGRESS_EVERY": "0"})
    assert read_run(out)["config"]["threads"] == 1
    resumed = runner.invoke(
        app, ["train", "rl", "--out", str(out), "--resume", "--threads", "1", "--json"]
    )
    assert resumed.exit_code == 0, resumed.output
    rows = orjson.loads(resumed.stdout)["iterations"]
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    lines = [line for line in resumed.stderr.splitlines() if line.startswith("train rl: ")]
    assert lines[-1].startswith("train rl: iteration 3/3 (100%), ")
    assert " iteration/s, reward " in lines[-1] and " elapsed" in lines[-1]
    assert any(line.startswith("train rl: iteration 3: rollout 4/4 (100%)") for line in lines)
    assert any(
        line.startswith("train rl: held-out evaluation: episode 3/3 (100%)") for line in lines
    )
    assert "heldout" in rows[-1]
    assert (out / "iter-0001" / "state.pt").stat().st_mtime_ns == first
    assert not list(out.glob("*.partial"))
    assert _progress(out) == rows  # the store shows the iterations of both processes


def test_bad_options_are_refused_with_the_flag_named(tmp_path: Path) -> None:
    args = ["train", "rl", "--base", str(tmp_path / "base"), "--out", str(tmp_path / "run")]
    refused = {
        ("--lr", "-1"): "--lr -1.0: must be greater than 0",
        ("--concurrency", "0"): "--concurrency 0: must be greater than or equal to 1",
        ("--threads", "0"): "--threads 0: must be greater than or equal to 1",
    }
    for option, problem in refused.items():
        result = CliRunner().invoke(app, [*args, *option])
        assert result.exit_code == 1, result.output
        assert result.output.startswith(f"error: {problem}"), result.output
    assert not (tmp_path / "run").exists()
