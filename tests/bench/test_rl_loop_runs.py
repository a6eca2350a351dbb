"""`bench/rl_loop.py --runs` summarises train rl run directories of one base and setting:
the start and each evaluated iteration pooled over seeds, and the update's signal means."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from trajforge.train.rl.checkpoints import iteration_dir, write_run

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
import rl_loop

START = {"n": 10, "successes": 3, "rate": 0.3, "ci": [0.108, 0.603]}
CONFIG = {"tasks_per_iteration": 2, "group_size": 4, "lr": 1e-4}


def _row(iteration: int, seed: int, held: int | None) -> dict:
    row = {
        "iteration": iteration, "reward": 0.5, "correlation": 1.0, "max_logprob_diff": 1e-5,
        "episodes": 8, "tokens_per_s": 100.0, "rollout_s": 1.0, "update_s": 0.5,
        "advantage_s": 0.0, "episodes_per_s": 8.0, "drift_points_dropped": 0,
        "zero_variance_groups": 0.5 * seed, "advantage_tokens": 0.4, "entropy": 0.2,
        "kl": 0.01, "clipped": 0.05,
    }  # fmt: skip
    if held is not None:
        row["heldout"] = {"n": 10, "successes": held, "rate": held / 10, "ci": [0.0, 1.0]}
    return row


def _run(
    root: Path, seed: int, base: str, finals: int, reward: str = "outcome", stop_after: int = 0
) -> Path:
    out = root / f"{reward}-{stop_after}-seed{seed}"
    config = {**CONFIG, "seed": seed, "reward": reward, "early_stop_after": stop_after}
    write_run(out, Path(base), config, START)
    for iteration, held in ((1, None), (2, finals)):
        folder = iteration_dir(out, iteration)
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"")
        row = _row(iteration, seed, held)
        stopped = stop_after and iteration > stop_after
        row.update(episode_steps=40 if stopped else 100, stopped=5 if stopped else 0)
        (folder / "metrics.json").write_bytes(orjson.dumps(row))
    return out


def test_runs_are_pooled_by_iteration(tmp_path: Path) -> None:
    dirs = [_run(tmp_path, 0, "/base", 4), _run(tmp_path, 1, "/base", 6)]
    result = rl_loop.from_runs(dirs, "python bench/rl_loop.py --runs ...", probe_kl=False)
    start, final = result["outcome"]["curve"]
    assert (start["iteration"], start["success"], start["n"]) == (0, 0.3, 10)
    assert (final["iteration"], final["episodes"], final["success"]) == (2, 16, 0.5)
    assert final["success_by_seed"] == [0.4, 0.6] and final["seeds"] == 2
    first = result["signal_by_iteration"][0]
    assert (first["iteration"], first["zero_variance_groups"], first["entropy"]) == (1, 0.25, 0.2)
    assert result["seeds"] == [0, 1] and result["outcome"]["correlation_min"] == 1.0


def test_runs_of_another_base_are_refused(tmp_path: Path) -> None:
    dirs = [_run(tmp_path, 0, "/base", 4), _run(tmp_path, 1, "/other", 6)]
    with pytest.raises(SystemExit, match="differ in base or settings"):
        rl_loop.from_runs(dirs, "", probe_kl=False)


def test_a_process_arm_is_held_against_the_outcome_arm_on_all_seeds_and_on_its_own(
    tmp_path: Path,
) -> None:
    outcome = [_run(tmp_path, seed, "/base", held) for seed, held in ((0, 4), (1, 8), (2, 9))]
    process = [_run(tmp_path, 0, "/base", 6, reward="process")]
    result = rl_loop.with_process_arm(rl_loop.from_runs(outcome, "", probe_kl=False), process)
    assert (result["process"]["success"], result["process_seeds"]) == (0.6, [0])
    assert result["outcome"]["success"] == 0.7 and result["correlation_min"] == 1.0
    assert result["at_equal_episodes"]["process_minus_outcome"] == -0.1
    same_seeds = result["at_equal_episodes_same_seeds"]
    assert (same_seeds["outcome"]["success"], same_seeds["process_minus_outcome"]) == (0.4, 0.2)
    assert result["process_episodes_to_outcome_final"] is None
    assert result["outcome_episodes_to_outcome_final"] == 16


def test_a_process_arm_of_other_settings_or_reward_is_refused(tmp_path: Path) -> None:
    outcome = _run(tmp_path, 0, "/base", 4)
    result = rl_loop.from_runs([outcome], "", probe_kl=False)
    with pytest.raises(SystemExit, match="another reward"):
        rl_loop.with_process_arm(result, [outcome])
    with pytest.raises(SystemExit, match=r"no outcome run of seed \[1\]"):
        rl_loop.with_process_arm(result, [_run(tmp_path, 1, "/base", 4, reward="process")])
    other = _run(tmp_path, 0, "/base", 4, reward="process")
    config = orjson.loads((other / "rl.json").read_bytes())
    config["config"]["lr"] = 1e-3
    (other / "rl.json").write_bytes(orjson.dumps(config))
    with pytest.raises(SystemExit, match="other than reward"):
        rl_loop.with_process_arm(result, [other])


def test_an_early_stop_arm_is_held_against_the_outcome_runs_of_its_seeds(tmp_path: Path) -> None:
    outcome = [_run(tmp_path, seed, "/base", held) for seed, held in ((0, 4), (1, 8))]
    stopping = [_run(tmp_path, 1, "/base", 7, stop_after=1)]
    (stopping[0] / "monitor.json").write_bytes(orjson.dumps({"after": 1, "threshold": 0.7}))
    result = rl_loop.from_runs(outcome, "", probe_kl=False)
    stop = rl_loop.with_early_stop_arm(result, stopping)["early_stop"]
    assert (stop["compared_iterations"], stop["episode_steps_with"]) == (1, 40)
    assert (stop["episode_steps_without"], stop["compute_saved"]) == (100, 0.6)
    assert stop["compute_saved_by_seed"] == [0.6]
    assert stop["heldout_final"]["success"] == 0.7 and stop["monitors"][0]["threshold"] == 0.7
    assert stop["outcome_same_seeds_then"]["success_by_seed"] == [0.8]
    with pytest.raises(SystemExit, match="without --early-stop-after"):
        rl_loop.with_early_stop_arm(result, [outcome[0]])
    with pytest.raises(SystemExit, match=r"no outcome run of seed \[2\]"):
        rl_loop.with_early_stop_arm(result, [_run(tmp_path, 2, "/base", 7, stop_after=1)])


def test_arms_of_different_lengths_meet_at_equal_episodes() -> None:
    long_rows = [[_row(2, 0, 4), _row(4, 0, 8)]]
    short_rows = [[_row(2, 0, 5)]]
    kinds = {
        "outcome": rl_loop.summarize(long_rows, START, 8),
        "process": rl_loop.summarize(short_rows, START, 8),
    }
    equal = rl_loop.at_equal_episodes(kinds)
    assert (equal["iteration"], equal["episodes"]) == (2, 16)
    assert (equal["outcome"]["success"], equal["process"]["success"]) == (0.4, 0.5)
    assert equal["process_minus_outcome"] == 0.1
    assert kinds["outcome"]["success"] == 0.8


def test_early_stop_is_held_against_the_outcome_arm_on_its_seeds_then() -> None:
    outcome = rl_loop.summarize([[_row(2, 0, 4), _row(4, 0, 8)], [_row(2, 1, 6)]], START, 8)
    stopping = rl_loop.summarize([[_row(2, 0, 3)]], START, 8)
    then = rl_loop.same_seeds_then(outcome, stopping)
    assert (then["iteration"], then["success"], then["seeds"]) == (2, 0.4, 1)


def test_the_handoff_of_runs_pairs_the_start_with_each_runs_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [_run(tmp_path, seed, "/base", 4) for seed in range(3)]
    result = rl_loop.from_runs(dirs, "", probe_kl=False)
    asked = []

    def matrix(checkpoints: dict, worlds: int) -> dict:
        asked.append((checkpoints, worlds))
        return {"k": 2, "tasks": worlds, "pairs": {}}

    monkeypatch.setattr(rl_loop, "handoff_matrix", matrix)
    matrices = rl_loop.runs_handoff(result, 2, 50)
    assert [m["run"] for m in matrices] == [str(d) for d in dirs[:2]]
    assert [m["iteration"] for m in matrices] == [2, 2] and matrices[0]["tasks"] == 50
    assert asked[1] == ({"sft": Path("/base"), "rl-outcome": iteration_dir(dirs[1], 2)}, 50)
