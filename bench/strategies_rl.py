"""RL whose strategies accumulate between iterations against RL without strategies.

    python bench/strategies_rl.py --base CKPT [--plain-runs DIR,DIR,...] [--seeds 3]
                                  [--iterations 8] [--tasks 16] [--group 8] [--lr 1e-4]
                                  [--k 3] [--test-worlds 300] [--eval-every 4]
                                  [--work DIR] [--out bench/results/strategies_rl.json]

Two outcome-reward `train rl` arms from one SFT checkpoint, per seed the same iterations,
training worlds, group size and sampling seeds (equal episodes; the strategies cost prompt
tokens only):
- `plain`: no strategies (or the `--plain-runs` directories, made earlier with the same
  settings, one seed each: their settings are checked);
- `accumulating`: `--strategies K`: after each iteration the run distils its library again
  from all its rollouts so far (contrast proposer, kept only when tasks it was not distilled
  from support it), and the next iteration's episodes, and the held-out evaluations, get each
  task's `--k` best strategies at the end of the system prompt.

Held-out success (greedy, difficulty-1 worlds of the held-out seed range, 20 steps) every
`--eval-every` iterations, pooled over seeds with the interval counting each world once (as
`rl_loop.py`). The accumulating arm's final checkpoints are also evaluated without their
strategies, to tell the prompt's effect from the training's. The result also holds which
strategies were retrieved how often and the final libraries. `--quick` is a smoke run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from rl_loop import curve, heldout_success, pooled, same_run, trained
from trajforge.envs.household import HouseholdEnv
from trajforge.serve.student import Student
from trajforge.store import Store
from trajforge.strategies import latest
from trajforge.train.conditioned import conditioned_starts
from trajforge.train.evaluate import held_out_tasks, rate, run_lockstep
from trajforge.train.rl import RLConfig
from trajforge.train.rl.checkpoints import completed, iteration_dir, read_run
from trajforge.train.rl.strategies import STRATEGIES_FILE, RunLibrary

RESULTS = Path(__file__).parent / "results" / "strategies_rl.json"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def shown(arm: str, seed: int):
    def line(row: dict[str, Any]) -> None:
        text = f"{arm} s{seed} it {row['iteration']:>3}"
        if "reward" in row:
            text += f" reward {row['reward']:.3f} {row['episodes_per_s']:.1f} ep/s"
        if "strategies" in row:
            text += f" library {row['strategies']['library']}"
        if "heldout" in row:
            held = row["heldout"]
            text += f" held-out {held['rate']:.3f} {held['ci']}"
        log(text)

    return line


def checked_plain(dirs: list[Path], base: Path, config: RLConfig) -> None:
    """Refuse `--plain-runs` made from another base, with other settings or unfinished."""
    for index, path in enumerate(dirs):
        same_run(path, base, config.model_copy(update={"seed": index}))
        if len(completed(path)) != config.iterations:
            raise SystemExit(f"--plain-runs: {path} has not finished its iterations")


def library_figures(runs: list[Path], rows: list[list[dict]]) -> dict[str, Any]:
    """How often each strategy was retrieved (task draws over every iteration and seed) and
    each seed's final library."""
    uses: Counter[str] = Counter()
    for seed_rows in rows:
        for row in seed_rows:
            uses.update(row.get("strategies", {}).get("retrieved", {}))
    libraries = []
    for path in runs:
        with Store(path / STRATEGIES_FILE) as store:
            libraries.append(
                [
                    {
                        "name": s.name,
                        "text": s.text,
                        "version": s.version,
                        "held_out": s.effect.held_out.model_dump() if s.effect else None,
                    }
                    for s in latest(store)
                ]
            )
    return {"retrieved": dict(uses.most_common()), "final_libraries": libraries}


def with_library(checkpoint: Path, run: Path, k: int, worlds: int) -> dict[str, Any]:
    """Held-out success of `checkpoint` with the `k` strategies `run`'s final library gives
    each world: what the strategies block alone does to a student."""
    tasks = held_out_tasks(HouseholdEnv(), worlds, 1)
    library = RunLibrary(run, k, 1)
    try:
        texts, _ = library.texts_for(tasks)
    finally:
        library.close()
    runs = run_lockstep(Student(checkpoint), conditioned_starts(HouseholdEnv, tasks, texts), 20)
    return {**rate([bool(r.outcome.success) for r in runs]), "with_strategies": len(texts)}


def arm_summary(rows: list[list[dict]], initial: dict, per_iteration: int) -> dict[str, Any]:
    points = curve(rows, initial, per_iteration)
    return {"final": points[-1], "curve": points, "rows": rows}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="The SFT checkpoint.")
    parser.add_argument("--plain-runs", default="", help="Finished plain runs, by seed.")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--test-worlds", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work", type=Path, default=Path("/tmp/strategies_rl"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.iterations, args.tasks, args.group = 1, 2, 4, 4
        args.test_worlds, args.eval_every = 20, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    config = RLConfig(
        iterations=args.iterations, tasks_per_iteration=args.tasks, group_size=args.group,
        lr=args.lr, eval_every=args.eval_every, eval_tasks=args.test_worlds,
        threads=args.threads,
    )  # fmt: skip
    plain_dirs = [Path(p) for p in args.plain_runs.split(",") if p]
    if plain_dirs:
        checked_plain(plain_dirs, args.base, config)
    plain_dirs += [args.work / f"plain-seed{s}" for s in range(len(plain_dirs), args.seeds)]
    strategy_dirs = [args.work / f"strategies-seed{s}" for s in range(args.seeds)]
    rows: dict[str, list[list[dict]]] = {"plain": [], "accumulating": []}
    for seed in range(args.seeds):
        seeded = config.model_copy(update={"seed": seed})
        rows["plain"].append(trained(args.base, plain_dirs[seed], seeded, shown("plain", seed)))
        with_k = seeded.model_copy(update={"strategies": args.k})
        accumulating = trained(args.base, strategy_dirs[seed], with_k, shown("accum", seed))
        rows["accumulating"].append(accumulating)
    initial = read_run(strategy_dirs[0])["initial"]
    per_iteration = args.tasks * args.group
    without = []
    for path in strategy_dirs:
        log(f"{path.name}: final checkpoint without its strategies")
        final = iteration_dir(path, args.iterations)
        without.append(heldout_success(final, args.test_worlds))
    log("the starting checkpoint with seed 0's final library")
    base_with = with_library(args.base, strategy_dirs[0], args.k, args.test_worlds)
    result = {
        "command": "python bench/strategies_rl.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "label": "held-out household difficulty-1 worlds (seeds >= 1,000,000), greedy, 20 steps; "
        "pooled over seeds, each world counted once in the interval",
        "base": str(args.base),
        "rl": config.model_dump(exclude={"seed"}),
        "k": args.k,
        "sft": initial,
        "sft_with_seed0_final_strategies": base_with,
        "plain": {
            "runs": [str(p) for p in plain_dirs],
            **arm_summary(rows["plain"], initial, per_iteration),
        },
        "accumulating": {
            "runs": [str(p) for p in strategy_dirs],
            **arm_summary(rows["accumulating"], initial, per_iteration),
            "final_without_strategies": {"by_seed": without, **pooled(without)},
            **library_figures(strategy_dirs, rows["accumulating"]),
        },
        "wall_s": round(time.monotonic() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    for arm in ("plain", "accumulating"):
        final = result[arm]["final"]
        by_seed = final["success_by_seed"]
        log(f"{arm:>12}: {final['success']:.3f} {final['success_ci']} by seed {by_seed}")
    off = result["accumulating"]["final_without_strategies"]
    log(f"{'without them':>12}: {off['success']:.3f} {off['success_ci']}")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
