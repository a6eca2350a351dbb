"""The RL run directory: one checkpoint per iteration, written atomically, and resuming.

    OUT/rl.json            the base checkpoint and the RLConfig of the run
    OUT/iter-0003/         a servable checkpoint (trajforge.json, model/) plus
                 state.pt      optimizer, sampling generator and iteration, for resuming
                 metrics.json  the iteration's row (also appended to OUT/iterations.jsonl)
    OUT/rollouts.db        every rollout as the proxy recorded it (token ids, logprobs)

A checkpoint is built in a hidden directory beside it and renamed when complete
(`trajforge.train.atomic`, the writer `train sft` uses too), so a killed run leaves either a
whole checkpoint or none; `--resume` continues after the last whole one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import UserError
from trajforge.serve.student import MANIFEST, MODEL_DIR, read_manifest
from trajforge.train.atomic import write_directory

RUN_FILE = "rl.json"
LOG_FILE = "iterations.jsonl"
STATE_FILE = "state.pt"
METRICS_FILE = "metrics.json"
_ITER = re.compile(r"^iter-(\d{4,})$")


def iteration_dir(out: Path, iteration: int) -> Path:
    return out / f"iter-{iteration:04d}"


def completed(out: Path) -> list[int]:
    """Iterations with a whole checkpoint, in order."""
    found = []
    for path in out.glob("iter-*"):
        match = _ITER.match(path.name)
        if match and (path / STATE_FILE).is_file() and (path / METRICS_FILE).is_file():
            found.append(int(match.group(1)))
    return sorted(found)


def write_run(out: Path, base: Path, config: dict[str, Any], initial: dict | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    run = {"base": str(base), "config": config, "initial": initial}
    (out / RUN_FILE).write_bytes(orjson.dumps(run, option=orjson.OPT_INDENT_2))


def read_run(out: Path) -> dict[str, Any]:
    path = out / RUN_FILE
    if not path.is_file():
        raise UserError(f"{out}: nothing to resume (no {RUN_FILE})")
    return orjson.loads(path.read_bytes())


def save_iteration(
    out: Path, iteration: int, model: Any, base_manifest: dict, state: dict, metrics: dict,
    evaluate: Callable[[Path], dict | None] | None = None, tokenizer: Any = None,
) -> Path:  # fmt: skip
    """Write the iteration's checkpoint and metrics; returns the final directory.

    `evaluate` runs on the written checkpoint before it is renamed into place; what it
    returns is stored with the metrics under `heldout`. A Hugging Face codec's `tokenizer` is
    saved beside the weights (a compact codec lives in the manifest).
    """
    import torch
    from transformers.utils import logging

    logging.disable_progress_bar()
    final = iteration_dir(out, iteration)

    def fill(staging: Path) -> None:
        model.save_pretrained(staging / MODEL_DIR)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging / MODEL_DIR)
        manifest = {**base_manifest, "name": final.name, "rl": {"iteration": iteration}}
        (staging / MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        torch.save(state, staging / STATE_FILE)
        if evaluate is not None and (heldout := evaluate(staging)) is not None:
            metrics["heldout"] = heldout
        (staging / METRICS_FILE).write_bytes(orjson.dumps(metrics, option=orjson.OPT_INDENT_2))

    return write_directory(final, fill)


def load_state(path: Path) -> dict[str, Any]:
    import torch

    read_manifest(path)
    return torch.load(path / STATE_FILE, weights_only=False)


def rebuild_log(out: Path) -> list[dict]:
    """The rows of every whole checkpoint, rewritten to `iterations.jsonl`."""
    rows = [
        orjson.loads((iteration_dir(out, i) / METRICS_FILE).read_bytes()) for i in completed(out)
    ]
    (out / LOG_FILE).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return rows
