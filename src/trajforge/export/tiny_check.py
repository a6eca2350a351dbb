"""Training consistency check: recompute recorded logprobs with the tiny model, compare.

    python -m trajforge.export.tiny_check --db trajforge.db [--seed 0] [--min-pearson 0.999]

Runs in its own process, as a trainer would: rebuilds the tiny model from its seed, turns the
recorded proxy sessions into token-level RL samples (`trajforge.export.rl`), scores every
sample in one forward pass and compares the model-token logprobs with those recorded at
rollout time. Prints a JSON report (Pearson correlation, largest and mean absolute
difference); exits 1 when the correlation is below `--min-pearson`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import orjson

from trajforge.export.rl import rl_samples
from trajforge.models.tiny import load_tiny_backend
from trajforge.store import Store, TrajectoryFilter


def compare(db: Path, seed: int = 0, ids: list[str] | None = None) -> dict:
    """Recorded vs recomputed logprobs over every RL sample in the store."""
    backend = load_tiny_backend(seed)
    recorded: list[float] = []
    recomputed: list[float] = []
    samples = 0
    with Store(db) as store:
        for traj in store.query(TrajectoryFilter(ids=ids or [])):
            for sample in rl_samples(traj):
                scores = backend.score(sample["prompt_ids"], sample["completion_ids"])
                for mask, old, new in zip(
                    sample["loss_mask"], sample["logprobs"], scores, strict=True
                ):
                    if mask:
                        recorded.append(old)
                        recomputed.append(new)
                samples += 1
    if len(recorded) < 2:
        return {"samples": samples, "tokens": len(recorded), "pearson": None}
    differences = [abs(a - b) for a, b in zip(recorded, recomputed, strict=True)]
    return {
        "samples": samples,
        "tokens": len(recorded),
        "pearson": statistics.correlation(recorded, recomputed),
        "max_abs_diff": max(differences),
        "mean_abs_diff": statistics.fmean(differences),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="Store the proxy recorded into.")
    parser.add_argument("--seed", type=int, default=0, help="Seed the tiny upstream used.")
    parser.add_argument("--id", action="append", default=[], help="Only these trajectories.")
    parser.add_argument("--min-pearson", type=float, default=0.999, help="Pass threshold.")
    args = parser.parse_args(argv)
    report = compare(args.db, args.seed, args.id)
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0 if (report["pearson"] or 0.0) >= args.min_pearson else 1


if __name__ == "__main__":
    sys.exit(main())
