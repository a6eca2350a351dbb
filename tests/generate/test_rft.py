"""Rejection-sampling fine-tuning: verified successes only, deduplicated, loadable SFT data."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.household import HouseholdEnv
from trajforge.generate.rft import RFTConfig, rft_dataset, select, verify_by_replay, write_sft
from trajforge.generate.rows import chat_messages, labelled_mistakes, validate_row
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.episode import Limits
from trajforge.rollout.factory import PolicyOptions
from trajforge.rollout.runner import RolloutConfig, run_batch


def _sample(store, policy: str, k: int, error_rate: float = 0.5, max_steps: int = 14):
    config = RolloutConfig(
        env="household",
        tasks=HouseholdEnv().tasks(4),
        policy=policy,
        n=k,
        options=PolicyOptions(error_rate=error_rate),
        limits=Limits(max_steps=max_steps),
    )
    return run_batch(config, store, run_local)[1]


def test_only_verified_successes_are_kept(store) -> None:
    trajs = _sample(store, "noisy-expert", k=4)
    assert any(not t.outcome.success for t in trajs) and any(t.outcome.success for t in trajs)
    forged = next(t for t in trajs if not t.outcome.success).model_copy(deep=True)
    forged.outcome.success = True  # claims success, but its actions do not reach the goal
    forged.metadata["sample"] = 99
    kept, report = select([*trajs, forged], "household", RFTConfig(similarity=1.0))
    assert forged not in kept
    assert all(t.outcome.success and verify_by_replay(t, "household") for t in kept)
    assert sum(r.successes for r in report) == sum(1 for t in trajs if t.outcome.success) + 1
    assert sum(r.verified for r in report) == sum(r.successes for r in report) - 1


def test_duplicates_and_near_duplicates_are_removed(store) -> None:
    kept, report = select(_sample(store, "expert", k=3, max_steps=60), "household")
    assert [r.kept for r in report] == [1, 1, 1, 1] and len(kept) == 4
    noisy = _sample(store, "noisy-expert", k=6, error_rate=0.1, max_steps=60)
    strict, _ = select(noisy, "household", RFTConfig(similarity=1.0))
    loose, _ = select(noisy, "household", RFTConfig(similarity=0.5))
    assert len(loose) < len(strict)


def test_output_is_training_rows_that_never_teach_a_labelled_mistake(store, tmp_path: Path) -> None:
    import datasets

    runs = _sample(store, "noisy-expert", k=3, max_steps=60)
    runs += _sample(store, "expert", k=1, max_steps=60)
    kept, report = select(runs, "household", RFTConfig(similarity=1.0))
    files = write_sft(kept, report, tmp_path / "sft").data
    assert [f.name for f in files] == ["train.messages.jsonl", "train.prompt-completion.jsonl"]
    rows = [orjson.loads(line) for f in files for line in f.read_bytes().splitlines()]
    assert all(validate_row(row) for row in rows)
    by_run = {t.content_id(): t for t in kept}
    assert {row["run_id"] for row in rows} == set(by_run)
    mistaken = [t for t in kept if labelled_mistakes(t)]
    assert mistaken and len(mistaken) < len(kept)  # both kinds of kept run are present
    for row in rows:
        traj = by_run[row["run_id"]]
        assert not set(row["learned"]) & labelled_mistakes(traj)
        if row["form"] == "messages":
            assert row["messages"] == chat_messages(traj.messages)
            assert row["learned"] == traj.assistant_indices()
        else:
            assert row["prompt"] == chat_messages(traj.messages[: row["prompt_end"]])
            assert row["completion"] == chat_messages(traj.messages)[row["prompt_end"] :][:1]
            assert set(row["masked"]) <= labelled_mistakes(traj)
    assert {row["form"] for row in rows} == {"messages", "prompt-completion"}
    calls = [
        c for r in rows for m in r.get("messages") or r["prompt"] for c in m.get("tool_calls") or []
    ]
    assert calls and all(isinstance(c["function"]["arguments"], str) for c in calls)
    learned = sum(len(r["learned"]) for r in rows)
    steps = sum(len(t.assistant_indices()) for t in kept)
    assert learned == steps - sum(len(labelled_mistakes(t)) for t in kept)
    for path in files:  # one form per file
        loaded = datasets.load_dataset("json", data_files=str(path), split="train")
        assert set(loaded["form"]) == {path.name.split(".")[1]}
    assert sum(len(f.read_bytes().splitlines()) for f in files) == len(rows)
    summary = json.loads((tmp_path / "sft" / "yield.json").read_text())
    assert summary["kept"] == len(kept) and len(summary["tasks"]) == 4
    assert summary["rows"] == len(rows) and summary["learned_turns"] == learned


def test_cli_rft_reports_yield(tmp_path: Path) -> None:
    args = ["rft", "--env", "household", "--tasks", "0-1", "--k", "2", "--out"]
    args += [str(tmp_path / "out"), "--db", str(tmp_path / "rft.db"), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["sampled"] == 4 and len(summary["tasks"]) == 2
    assert (tmp_path / "out" / "train.messages.jsonl").exists()


def test_rft_dataset_selects_writes_and_summarizes(store, tmp_path: Path) -> None:
    runs = _sample(store, "noisy-expert", k=2, max_steps=60)
    result = rft_dataset(runs, "household", tmp_path / "out")
    kept, report = select(runs, "household")
    assert result.report == report
    lines = [line for path in result.data for line in path.read_bytes().splitlines()]
    assert {orjson.loads(line)["run_id"] for line in lines} == {t.content_id() for t in kept}
    summary = result.summary()
    assert summary["kept"] == len(kept) and summary["out"] == [str(p) for p in result.data]
    assert summary["rows"] == len(lines)


def test_actions_written_in_text_are_compared_by_their_command() -> None:
    from trajforge.envs.swe_bench import SweBenchEnv
    from trajforge.generate.rft import actions
    from trajforge.schema import Message, Task, Trajectory

    thought = "THOUGHT: " + "the same long reasoning, " * 12  # longer than 200 characters

    def run(command: str) -> Trajectory:
        text = f"{thought}\n\n```bash\n{command}\n```"
        return Trajectory(
            task=Task(id="t", environment="swe-bench"),
            messages=[
                Message(role="user", content="fix it"),
                Message(role="assistant", content=text),
            ],
        )

    reader = SweBenchEnv()  # reads bash blocks; never reset
    listing, reading = run("ls"), run("cat setup.py")
    assert actions(listing, reader) == ['bash({"command":"ls"})']
    assert actions(listing, reader) != actions(reading, reader)
    assert actions(listing) == actions(reading)  # without the environment: the text's start
