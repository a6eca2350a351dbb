"""Every training-data writer on the shared data: rows, learned and masked turns, pairs.

    python bench/training_data.py [--worlds 100] [--out bench/results/training_data.json]

Writers, each on real data or real rollouts:

- rft: `trajforge rft --env household --policy noisy-expert --k 4 --tasks 10`;
- lab: the learning lab's recovery rows (arm E+R) on `--worlds` household worlds;
- recover: guided recovery of the tau2-bench failures (toolorchestra, gpt-5) with the
  expert teacher (which checks the machinery, not a model);
- aet: the diagnosis and actor-recovery views of the tau-bench airline and retail failures,
  localized by the heuristic and verified by fork;
- export sft / openai / dpo: `trajforge export` of a store holding the rft samples and the
  diagnosed tau-bench runs;
- pairs: fork pairs at the first labelled mistake of noisy-teacher household runs.

Prints a line per writer as it finishes, then the counts per writer and form; checks that
every file loads together in one `datasets.load_dataset("json", ...)` call (with
`trajforge.generate.rows.dataset_features()`). Writes the result JSON with the command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.agents.user_sim import ScriptedUser
from trajforge.diagnose.run import diagnose_run, make_localizer
from trajforge.diagnose.storage import save_diagnoses
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.export import export
from trajforge.generate.guided import GuidedRecovery, RecoverConfig, recover_runs, write_recovered
from trajforge.generate.pairs import fork_pair
from trajforge.generate.recovery import first_labelled_error, recovery_rows
from trajforge.generate.rft import rft_dataset
from trajforge.generate.rows import dataset_features, row_counts, write_forms, write_rows
from trajforge.generate.views import write_views
from trajforge.importers.tau2_bench import Tau2BenchImporter
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.episode import Limits, run_episode
from trajforge.rollout.factory import PolicyOptions
from trajforge.rollout.runner import RolloutConfig, run_batch
from trajforge.store import Store

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).parent / "results" / "training_data.json"
TAU = (
    "tau-bench/historical_trajectories/gpt-4o-airline.json",
    "agentrx/tau-retail/tau_dataset_full.json",
)
TAU2 = ("tau2-bench/toolorchestra_gpt-5/toolorchestra_airline_gpt-5_1trial.json",
        "tau2-bench/toolorchestra_gpt-5/toolorchestra_retail_gpt-5_1trial.json")  # fmt: skip


def _rows(paths: list[Path]) -> list[dict]:
    return [orjson.loads(line) for path in paths for line in path.read_bytes().splitlines()]


def _say(started: float, writer: str, paths: list[Path]) -> None:
    rows = _rows(paths)
    print(
        f"[{time.time() - started:6.0f}s] {writer}: {len(rows)} rows in {len(paths)} files",
        flush=True,
    )


def rft_files(store: Store, work: Path) -> list[Path]:
    env = HouseholdEnv()
    config = RolloutConfig(env="household", tasks=env.tasks(10), policy="noisy-expert", n=4,
                           options=PolicyOptions(), limits=Limits(max_steps=30))  # fmt: skip
    _, trajs = run_batch(config, store, run_local)
    return rft_dataset(trajs, "household", work / "rft").data


def lab_files(worlds: int, work: Path) -> list[Path]:
    forks = []
    for seed in range(worlds):
        noisy = NoisyObservableTeacher(seed=seed, error_rate=0.2)
        run = run_episode(HouseholdEnv(), noisy, task_for(seed, 1), limits=Limits(max_steps=20))
        if (error := first_labelled_error(run)) is not None:
            forks.append((run, error))
    rows = recovery_rows(HouseholdEnv, forks, ObservableTeacher(), 20, "R")
    return list(write_forms(work / "lab" / "recoveries.jsonl", rows).values())


def pair_files(worlds: int, work: Path) -> list[Path]:
    pairs = []
    for seed in range(worlds):
        noisy = NoisyObservableTeacher(seed=seed, error_rate=0.2)
        run = run_episode(HouseholdEnv(), noisy, task_for(seed, 1), limits=Limits(max_steps=20))
        error = first_labelled_error(run)
        if error is not None and (
            pair := fork_pair(HouseholdEnv, run, error, ObservableTeacher(), 20)
        ):
            pairs.append(pair)
    path = work / "pairs" / "fork-pairs.jsonl"
    write_rows(path, pairs)
    return [path]


def recover_files(work: Path) -> list[Path]:
    runs = [t.with_id() for name in TAU2 for t in Tau2BenchImporter().read(SHARED / name)]
    failures = [t for t in runs if not t.outcome.success]
    recovery = GuidedRecovery(ExpertPolicy, ScriptedUser, RecoverConfig(sources=["correction"]))
    report, demos = recover_runs(failures, recovery, {})
    return write_recovered(demos, report, work / "recovered")


def aet_files(store: Store, work: Path) -> list[Path]:
    runs = [t.with_id() for name in TAU for t in TauBenchImporter().read(SHARED / name)]
    store.add_many(runs)
    localizer = make_localizer("heuristic")
    diagnoses = [diagnose_run(t, localizer) for t in runs if t.outcome.success is False]
    save_diagnoses(store, diagnoses)
    by_id = {t.id: t for t in runs}
    write_views([(by_id[d.trajectory_id], d) for d in diagnoses], work / "views")
    return [work / "views" / "diagnosis.jsonl", work / "views" / "recovery.jsonl"]


def export_files(store: Store, work: Path) -> dict[str, list[Path]]:
    out = work / "export"
    out.mkdir(parents=True, exist_ok=True)
    export("sft", store, out / "sft.jsonl")
    export("dpo", store, out / "pairs.jsonl")
    export("openai", store, out / "openai.jsonl")
    return {
        "export sft": sorted(out.glob("sft.*.jsonl")),
        "export dpo": [out / "pairs.jsonl"],
        "export openai": [out / "openai.jsonl"],
    }


def counts(files: dict[str, list[Path]]) -> dict[str, dict[str, dict[str, int]]]:
    """Per writer, per form: rows, learned and masked turns, pairs (openai: lines)."""
    table: dict[str, dict[str, dict[str, int]]] = {}
    for writer, paths in files.items():
        if writer == "export openai":
            table[writer] = {"openai": {"lines": len(_rows(paths))}}
            continue
        rows = _rows(paths)
        forms = sorted({row["form"] for row in rows})
        table[writer] = {form: row_counts(r for r in rows if r["form"] == form) for form in forms}
    return table


def load_together(files: dict[str, list[Path]]) -> int:
    import datasets

    paths = [str(p) for writer, ps in files.items() if writer != "export openai" for p in ps]
    loaded = datasets.load_dataset(
        "json", data_files=paths, split="train", features=dataset_features()
    )
    return loaded.num_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=100, help="Household worlds (lab, pairs).")
    parser.add_argument("--work", type=Path, default=Path("/tmp/training_data"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.time()
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / "runs.db").unlink(missing_ok=True)
    files: dict[str, list[Path]] = {}
    with Store(args.work / "runs.db") as store:
        steps = {
            "rft": lambda: rft_files(store, args.work),
            "lab E+R": lambda: lab_files(args.worlds, args.work),
            "pairs (fork)": lambda: pair_files(args.worlds, args.work),
            "recover": lambda: recover_files(args.work),
            "aet views": lambda: aet_files(store, args.work),
        }
        for writer, make in steps.items():
            files[writer] = make()
            _say(started, writer, files[writer])
        files.update(export_files(store, args.work))
    table = counts(files)
    together = load_together(files)
    expected = sum(len(_rows(p)) for w, p in files.items() if w != "export openai")
    assert together == expected, (together, expected)
    command = "python bench/training_data.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": command.strip(), "counts": table, "loaded_together": together,
              "files": {w: [p.name for p in ps] for w, ps in files.items()},
              "wall_s": round(time.time() - started, 1)}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    for writer, forms in table.items():
        for form, numbers in forms.items():
            print(f"{writer:14} {form:18} " + ", ".join(f"{k} {v}" for k, v in numbers.items()))
    loaded = sum(len(p) for w, p in files.items() if w != "export openai")
    print(f"all {together} rows of {loaded} files load in one datasets call; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
