"""The RL update's time with rows grouped into passes as drawn, against longest first.

    python bench/rl_update.py --run DIR [--iteration 2] [--repeat 3] [--threads 1]
                              [--out bench/results/rl_update.json]

`DIR` is a `train rl` output directory. The iteration's recorded episodes become the loop's
training sequences (outcome advantages, as `bench/rl_loop.py --runs` rebuilds them), and the
checkpoint the loop updated then (the previous iteration's, or the base for the first) runs
`grpo_update` with the run's settings (epochs, minibatch, clip, KL coefficient, learning
rate), once with each way of cutting a minibatch into passes of at most `PASS_TOKENS`
padded tokens:

- **drawn**: the rows in the order the minibatch drew them (the loop before this bench);
- **longest first**: `trajforge.train.rl.grpo.passes` today, rows sorted by length and cut
  where the padded tokens plus a fixed cost a pass are least, so a pass holds rows of like
  length.

On a quiet machine (one thread; iteration 29 of seed 1 of the 256 x 8 student's lr 1e-4
run, 28,384 tokens trained on): 35.8 s against 25.4 s, 1.41x, with 41,132 and 30,596 padded
tokens (`bench/results/rl_update.json`).

The two alternate `--repeat` times in this process, each from a fresh copy of the model and
optimizer and the same shuffling seed; each side's fastest run counts. Printed: each side's
update seconds and padded tokens (rows times the longest row, summed over passes), and the
last line `ratio drawn / longest first: N.NNx (update seconds)`.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from rl_loop import _outcome_sequences
from trajforge.train.rl import grpo
from trajforge.train.rl.checkpoints import completed, iteration_dir, read_run
from trajforge.train.rl.config import RLConfig


def drawn_passes(batch: Sequence[Any], tokens: int = grpo.PASS_TOKENS) -> Iterator[list]:
    """The baseline: rows in the order given, a run closed when the next would overflow."""
    run: list[Any] = []
    for seq in batch:
        if run and (len(run) + 1) * max(len(seq.ids), *(len(s.ids) for s in run)) > tokens:
            yield run
            run = []
        run.append(seq)
    if run:
        yield run


SIDES = {"drawn": drawn_passes, "longest first": grpo.passes}


class Counted:
    """A way of cutting minibatches into passes that counts the tokens its passes hold."""

    def __init__(self, cut: Any) -> None:
        self.cut, self.padded, self.real = cut, 0, 0

    def __call__(self, batch: Sequence[Any]) -> Iterator[list]:
        for run in self.cut(batch):
            self.padded += len(run) * max(len(s.ids) for s in run)
            self.real += sum(len(s.ids) for s in run)
            yield run


def timed_update(model: Any, sequences: list, config: RLConfig, pad: int, cut: Counted) -> float:
    import torch

    model = copy.deepcopy(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(config.seed)
    saved, grpo.passes = grpo.passes, cut
    try:
        started = time.perf_counter()
        grpo.grpo_update(
            model, None, optimizer, sequences, pad, epochs=config.epochs,
            minibatch=config.minibatch, clip=config.clip, kl_coef=config.kl_coef,
            generator=generator,
        )  # fmt: skip
        return time.perf_counter() - started
    finally:
        grpo.passes = saved


def updated_checkpoint(run: Path, iteration: int) -> Path:
    if iteration == 1:
        return Path(read_run(run)["base"])
    if iteration - 1 not in completed(run):
        raise SystemExit(f"{run}: iteration {iteration - 1} has no checkpoint")
    return iteration_dir(run, iteration - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a train rl output directory")
    parser.add_argument("--iteration", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    from trajforge.serve.student import Student

    torch.set_num_threads(args.threads)
    config = RLConfig(**read_run(args.run)["config"])
    episodes, sequences = _outcome_sequences(args.run, args.iteration)
    if not sequences:
        raise SystemExit(f"{args.run}: iteration {args.iteration} recorded no episodes")
    student = Student(updated_checkpoint(args.run, args.iteration))
    pad = student.codec.pad_id
    print(
        f"{episodes} episodes, {len(sequences)} sequences ({config.epochs} epochs, "
        f"minibatch {config.minibatch})",
        file=sys.stderr,
    )
    best = {name: float("inf") for name in SIDES}
    counted: dict[str, Counted] = {}
    for repeat in range(args.repeat):
        for name, cut in SIDES.items():
            counted[name] = Counted(cut)  # each run counts its own passes
            seconds = timed_update(student.model, sequences, config, pad, counted[name])
            best[name] = min(best[name], seconds)
            print(f"  run {repeat + 1} {name}: {seconds:.1f} s", file=sys.stderr)
    result: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "run": str(args.run),
        "iteration": args.iteration,
        "threads": args.threads,
        "sequences": len(sequences),
        "tokens_trained": counted["drawn"].real,
        "sides": {},
    }
    for name, count in counted.items():
        result["sides"][name] = {"update_s": round(best[name], 2), "padded_tokens": count.padded}
        print(f"{name:>14}: update {best[name]:.1f} s, padded tokens {count.padded:,}")
    ratio = best["drawn"] / best["longest first"]
    result["ratio"] = round(ratio, 3)
    if args.out:
        args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"ratio drawn / longest first: {ratio:.2f}x (update seconds)")


if __name__ == "__main__":
    main()
