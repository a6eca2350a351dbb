"""Training progress as `trajforge train rl` writes it (same store calls, rows of its shape)."""

from __future__ import annotations

from pathlib import Path

import orjson

from trajforge.store import Store
from trajforge.store.training import put_training_iteration, put_training_run

SETTINGS = {
    "base": "checkpoints/sft",
    "config": {"iterations": 6, "tasks_per_iteration": 4, "group_size": 8, "reward": "outcome",
               "lr": 1e-5, "eval_every": 2, "min_correlation": 0.99},
    "initial": {"n": 200, "successes": 31, "rate": 0.155, "ci": [0.111, 0.212]},
}  # fmt: skip


def rl_row(iteration: int, reward: float) -> dict:
    row = {"iteration": iteration, "reward": reward, "success": reward, "correlation": 0.99998,
           "max_logprob_diff": 2.1e-05, "kl": 0.0004 * iteration, "loss": 0.43, "episodes": 32,
           "episodes_per_s": 2.4, "tokens_per_s": 268.8, "drift_points_dropped": 3,
           "monitor_on": False, "stopped": 0}  # fmt: skip
    if iteration % 2 == 0:
        successes = 30 + iteration
        row["heldout"] = {"n": 200, "successes": successes, "rate": successes / 200,
                          "ci": [successes / 200 - 0.045, successes / 200 + 0.055]}  # fmt: skip
    return row


def register(db: Path, name: str) -> None:
    with Store(db) as store:
        put_training_run(store, name, "rl", orjson.dumps(SETTINGS))


def add_iteration(db: Path, name: str, iteration: int, reward: float) -> dict:
    row = rl_row(iteration, reward)
    with Store(db) as store:
        put_training_iteration(store, name, iteration, orjson.dumps(row))
    return row
