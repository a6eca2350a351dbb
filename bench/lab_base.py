"""Choosing the learning lab's base student on validation worlds, never on its test worlds.

    python bench/lab_base.py [--shapes 128x4,256x8] [--seeds 2] [--train-worlds 400]
                             [--steps 1200] [--validation-worlds 200] [--jobs 2]
                             [--out bench/results/lab_base.json]

Trains the lab's E student (the observable teacher's successes on the training worlds, at the
lab's steps, batch and learning rate) for each shape (`HIDDENxHEADS`, 4 layers) and seed, one
worker process per (shape, seed) on one CPU thread, and plays each greedily on two sets of
worlds: the first `--validation-worlds` training worlds (in-sample) and as many validation
worlds, taken from the held-out seed range at offset 800,000, far past the lab's test worlds
(which start at offset 0), so choosing a shape here does not look at the lab's test worlds.
The JSON result keeps the command, each run's training seconds, final loss and both
success rates with Wilson 95% intervals, and each shape's pooled validation rate. A
checkpoint already under `--work` with the same configuration and rows is scored, not
trained again (`trained_here` false, no training seconds).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from learning_loop import Lab, LabConfig, train_rows
from trajforge.envs.household import HouseholdEnv
from trajforge.serve.student import Student
from trajforge.train.evaluate import fresh_starts, held_out_tasks, rate, run_lockstep, wilson

RESULTS = Path(__file__).parent / "results" / "lab_base.json"
VALIDATION_OFFSET = 800_000
"""Where the validation worlds start in the held-out seed range (the test worlds start at 0)."""


def parse_shape(text: str) -> tuple[int, int]:
    hidden, _, heads = text.partition("x")
    if not (hidden.isdigit() and heads.isdigit()):
        raise SystemExit(f"--shapes: {text!r} is not HIDDENxHEADS (such as 256x8)")
    return int(hidden), int(heads)


def success(student: Student, tasks: list, max_steps: int) -> dict[str, Any]:
    runs = run_lockstep(student, fresh_starts(HouseholdEnv, tasks), max_steps)
    return rate([run.outcome.success for run in runs])


def one_run(config: LabConfig, seed: int, worlds: int) -> dict[str, Any]:
    """Train the E student of `config` and `seed`, and score it in and out of sample."""
    import torch

    torch.set_num_threads(1)
    name = f"E-{config.hidden}x{config.heads}-seed{seed}"
    out = Path(config.work) / name
    lab = Lab(config)
    manifest = out / "trajforge.json"
    before = manifest.stat().st_mtime_ns if manifest.is_file() else None
    started = time.monotonic()
    train_rows(config, lab.demos("teacher"), out, name, seed)
    trained_here = manifest.stat().st_mtime_ns != before
    student = Student(out)
    validation = held_out_tasks(HouseholdEnv(), worlds, config.difficulty, VALIDATION_OFFSET)
    losses = (out / "loss.jsonl").read_text().splitlines()
    return {
        "hidden": config.hidden,
        "heads": config.heads,
        "seed": seed,
        "trained_here": trained_here,
        "train_s": round(time.monotonic() - started, 1) if trained_here else None,
        "final_loss": orjson.loads(losses[-1])["loss"],
        "in_sample": success(student, lab.tasks[:worlds], config.max_steps),
        "validation": success(student, validation, config.max_steps),
    }


def pooled(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each shape's validation successes over its seeds."""
    counts: dict[str, tuple[int, int]] = {}
    for run in runs:
        shape = f"{run['hidden']}x{run['heads']}"
        successes, n = counts.get(shape, (0, 0))
        counts[shape] = (successes + run["validation"]["successes"], n + run["validation"]["n"])
    return {
        shape: {"n": n, "successes": k, "rate": round(k / n, 4), "ci": list(wilson(k, n))}
        for shape, (k, n) in counts.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="128x4,256x8", help="HIDDENxHEADS, comma-separated.")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--train-worlds", type=int, default=400)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--validation-worlds", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--work", default="/tmp/lab_base")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    base = LabConfig(train_worlds=args.train_worlds, steps=args.steps, work=args.work)
    shapes = [parse_shape(text) for text in args.shapes.split(",") if text]
    configs = [replace(base, hidden=hidden, heads=heads) for hidden, heads in shapes]
    jobs = [(config, seed) for config in configs for seed in range(args.seeds)]
    runs: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(one_run, c, s, args.validation_worlds) for c, s in jobs]
        for future in futures:
            runs.append(future.result())
            run = runs[-1]
            print(
                f"{run['hidden']}x{run['heads']} seed {run['seed']}: validation "
                f"{run['validation']['rate']:.3f} {run['validation']['ci']}, in-sample "
                f"{run['in_sample']['rate']:.3f}, "
                + (f"trained in {run['train_s']:.0f}s" if run["trained_here"] else "reused"),
                flush=True,
            )
    result = {
        "command": "python bench/lab_base.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "validation_offset": VALIDATION_OFFSET,
        "config": {k: v for k, v in base.__dict__.items() if k not in ("hidden", "heads")},
        "runs": runs,
        "validation_by_shape": pooled(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    for shape, found in result["validation_by_shape"].items():
        print(f"{shape}: validation {found['rate']:.3f} {found['ci']} over {found['n']} episodes")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
