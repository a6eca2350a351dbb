"""The loop's progress in the store it records rollouts in, for `trajforge ui` to show live.

The run is registered under its resolved output directory with `rl.json`'s document (base,
settings, the starting held-out success), and each iteration's row, the same one written to
`metrics.json`, is added once its checkpoint is in place. A resumed run writes the rows of its
finished checkpoints again, so the store holds every iteration the directory does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from trajforge.store import Store
from trajforge.store.training import put_training_iteration, put_training_run
from trajforge.train.rl import checkpoints as ckpt

KIND = "rl"
STORE_FILE = "rollouts.db"


def run_name(out: Path) -> str:
    return str(out.resolve())


def record_run(out: Path) -> None:
    """Register (or update) the run in `out`'s store."""
    with Store(out / STORE_FILE) as store:
        put_training_run(store, run_name(out), KIND, (out / ckpt.RUN_FILE).read_bytes())


def record_iteration(out: Path, row: dict[str, Any]) -> None:
    with Store(out / STORE_FILE) as store:
        put_training_iteration(store, run_name(out), int(row["iteration"]), orjson.dumps(row))


def record_finished(out: Path) -> None:
    """Register the run and write the row of every whole checkpoint (resuming)."""
    record_run(out)
    for iteration in ckpt.completed(out):
        metrics = (ckpt.iteration_dir(out, iteration) / ckpt.METRICS_FILE).read_bytes()
        record_iteration(out, orjson.loads(metrics))
