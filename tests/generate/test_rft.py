"""Rejection-sampling fine-tuning: verified successes only, deduplicated, loadable SFT data."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.household import HouseholdEnv
from trajforge.generate.rft import (
    RFTConfig,
    chat_message,
    rft_dataset,
    select,
    verify_by_replay,
    write_sft,
)
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


def test_output_loads_with_datasets_and_matches_the_kept_runs(store, tmp_path: Path) -> None:
    import datasets

    kept, report = select(_sample(store, "noisy-expert", k=3, max_steps=60), "household")
    data = write_sft(kept, report, tmp_path / "sft")
    loaded = datasets.load_dataset("json", data_files=str(data), split="train")
    assert loaded.num_rows == len(kept) > 0
    assert set(loaded.column_names) == {"messages", "tools"}
    first = orjson.loads(data.read_text().splitlines()[0])
    assert first["messages"] == [chat_message(m) for m in kept[0].messages]
    call = next(m for m in first["messages"] if m.get("tool_calls"))["tool_calls"][0]
    assert isinstance(call["function"]["arguments"], dict)
    assert loaded[0]["tools"][0]["function"]["name"] == kept[0].tools[0]["function"]["name"]
    summary = json.loads((tmp_path / "sft" / "yield.json").read_text())
    assert summary["kept"] == len(kept) and len(summary["tasks"]) == 4


def test_cli_rft_reports_yield(tmp_path: Path) -> None:
    args = ["rft", "--env", "household", "--tasks", "0-1", "--k", "2", "--out"]
    args += [str(tmp_path / "out"), "--db", str(tmp_path / "rft.db"), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["sampled"] == 4 and len(summary["tasks"]) == 2
    assert (tmp_path / "out" / "train.jsonl").exists()


def test_rft_dataset_selects_writes_and_summarizes(store, tmp_path: Path) -> None:
    runs = _sample(store, "noisy-expert", k=2, max_steps=60)
    result = rft_dataset(runs, "household", tmp_path / "out")
    kept, report = select(runs, "household")
    assert result.report == report and result.data.read_text().count("\n") == len(kept)
    assert result.summary()["kept"] == len(kept) and result.summary()["out"] == str(result.data)
