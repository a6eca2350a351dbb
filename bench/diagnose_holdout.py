"""Out-of-sample localization: every diagnosis method on every labelled dataset, the trained
ranker before/after on held-out synthetic failures, and across environments.

    python bench/diagnose_holdout.py [DATA_DIR] [--out bench/results/diagnose_holdout.json]

Datasets: Who&When algorithm-generated (126 runs, human labels), the Who&When hand-crafted
sample (3 runs; scored, never used for tuning), and noisy-expert failures in household,
tau-retail, tau-airline, tau2-retail and tau2-airline labelled with their counterfactual
decisive step. Methods with
tuned parts are refitted per fold (`trajforge.diagnose.holdout`); the heuristic is
hand-tuned on Who&When algorithm-generated and labelled in-sample there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

from shared_data import REPO, data_dir
from trajforge.diagnose.calibrated import CalibratedLocalizer, calibrated_trained
from trajforge.diagnose.datasets import dataset_of
from trajforge.diagnose.eval import reference_label
from trajforge.diagnose.holdout import HoldoutConfig, evaluate_holdout
from trajforge.diagnose.localize import HeuristicLocalizer
from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.prior import PriorLocalizer
from trajforge.diagnose.synthetic import SyntheticConfig, counterfactual_labels, synthetic_failures
from trajforge.diagnose.trained import RankerTrainer, TrainedLocalizer, fit_ranker
from trajforge.importers.who_and_when import WhoAndWhenImporter
from trajforge.schema import Trajectory

HAND = "who-and-when/hand-crafted"
SYNTHETIC = {
    "household": (150, 0.3),
    "tau-retail": (80, 0.2),
    "tau-airline": (80, 0.2),
    "tau2-retail": (60, 0.2),
    "tau2-airline": (60, 0.2),
}


def who_and_when(folder: Path) -> list[Trajectory]:
    files = sorted(folder.glob("*.json"), key=lambda p: int(p.stem))
    return [t.with_id() for path in files for t in WhoAndWhenImporter().read(path)]


def synthetic(seed: int) -> list[Trajectory]:
    runs = []
    for env, (count, rate) in SYNTHETIC.items():
        config = SyntheticConfig(
            environment=env, failures=count, error_rate=rate, seed=seed, max_attempts=2000
        )
        runs += counterfactual_labels(synthetic_failures(config))
    return runs


def diagnose(localizer, runs: list[Trajectory]) -> list[Diagnosis]:
    out = []
    for traj in runs:
        found = localizer.localize(traj)
        out.append(found or Diagnosis(trajectory_id=traj.id, method="heuristic", step=None))
    return out


def methods() -> dict:
    return {
        "heuristic": HeuristicLocalizer(),
        "prior": PriorLocalizer(),
        "calibrated": CalibratedLocalizer(),
        "trained": RankerTrainer(),
        "calibrated-trained": calibrated_trained(),
    }


def holdout_tables(runs: list[Trajectory], seed: int) -> dict:
    tables = {}
    for split in ("task", "dataset"):
        config = HoldoutConfig(split=split, seed=seed, never_tune=frozenset({HAND}))
        for name, method in methods().items():
            report = evaluate_holdout(runs, method, diagnose, config)
            tables[f"{split}/{name}"] = report.model_dump()
            print(f"{split:8} {name:20}", _line(report.model_dump()), file=sys.stderr)
    return tables


def _line(report: dict) -> str:
    parts = []
    for item in report["datasets"]:
        exact = item["scores"]["exact"]["value"]
        mark = "*" if item["sample"] == "in-sample" else ""
        parts.append(f"{item['dataset'].split('/')[-1]}={exact}{mark}")
    return " ".join(parts)


def without_gold(runs: list[Trajectory], seed: int) -> dict:
    """The tau failures with their gold actions removed (logs as a deployment records them):
    the heuristic can no longer diff against gold; before/after on held-out tasks."""
    stripped = []
    for traj in runs:
        if dataset_of(traj).startswith("synthetic/tau"):
            copy = traj.model_copy(deep=True)
            copy.task.gold = None
            copy.id = ""
            stripped.append(copy.with_id())
    config = HoldoutConfig(split="task", seed=seed)
    out = {}
    for name, method in (("heuristic", HeuristicLocalizer()), ("trained", RankerTrainer())):
        report = evaluate_holdout(stripped, method, diagnose, config).model_dump()
        out[name] = report
        print(f"no-gold  {name:20}", _line(report), file=sys.stderr)
    return out


def exact(localizer, runs: list[Trajectory]) -> float:
    hits = [
        d.step == reference_label(t).message_index
        for t, d in zip(runs, diagnose(localizer, runs), strict=True)
    ]
    return round(sum(hits) / len(hits), 4)


def cross_environment(runs: list[Trajectory]) -> list[dict]:
    """Train the ranker on one dataset only; score it and the heuristic on each other one."""
    by_dataset: dict[str, list[Trajectory]] = {}
    for traj in runs:
        by_dataset.setdefault(dataset_of(traj), []).append(traj)
    rows = []
    for train_name, train in sorted(by_dataset.items()):
        if train_name == HAND:
            continue
        ranker = TrainedLocalizer(fit_ranker(train))
        for test_name, test in sorted(by_dataset.items()):
            if test_name == train_name:
                continue
            rows.append(
                {
                    "trained_on": train_name,
                    "tested_on": test_name,
                    "runs": len(test),
                    "heuristic_exact": exact(HeuristicLocalizer(), test),
                    "heuristic_sample": "in-sample"
                    if test_name in HeuristicLocalizer.tuned_on
                    else "out-of-sample",
                    "trained_exact": exact(ranker, test),
                }
            )
            print("cross", rows[-1], file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?")
    parser.add_argument("--out", default=str(REPO / "bench/results/diagnose_holdout.json"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = data_dir(args.data_dir)
    started = time.time()
    runs = who_and_when(data / "who-and-when/Algorithm-Generated")
    runs += who_and_when(data / "who-and-when/Hand-Crafted-sample")
    runs += synthetic(args.seed)
    counts: dict[str, int] = {}
    for traj in runs:
        counts[dataset_of(traj)] = counts.get(dataset_of(traj), 0) + 1
    print("datasets", counts, file=sys.stderr)
    result = {
        "command": "python bench/diagnose_holdout.py",
        "seed": args.seed,
        "datasets": counts,
        "never_tuned_on": [HAND],
        "holdout": holdout_tables(runs, args.seed),
        "cross_environment": cross_environment(runs),
        "without_gold": without_gold(runs, args.seed),
        "seconds": round(time.time() - started, 1),
    }
    Path(args.out).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
