"""The learning lab: what does each kind of trajforge data do to a student?

    python bench/learning_loop.py [--quick] [--seeds 3] [--steps 1200] [--jobs 2] [--arms E,O]
                                  [--resume PARTIAL] [--report PARTIAL]
                                  [--out bench/results/learning_loop.json]

Students (the `tiny` preset: a ~0.7M-parameter Llama-style model trained from scratch with a
word-level vocabulary) are trained at equal steps on household difficulty-1 data, one arm per
kind of data, each with several seeds:

- E:   the observable teacher's successes on the training worlds;
- E+R: plus recovery demonstrations from teacher failures (a noisy teacher's run forked at its
       first mistake, the clean teacher continuing; the mistake in context, masked from loss);
- E+S: plus corrections of the student's own failures (the E student of the same seed rolled
       out on the training worlds; each failed run forked at the first step where the teacher
       would have acted otherwise; the teacher continuing; a DAgger-style second round);
- O:   the privileged oracle's demonstrations on the same worlds (the cautionary control).

Every student is evaluated greedily (at most 20 steps) on held-out worlds (seeds from
`HELD_OUT_START`, disjoint from every training seed; `check_held_out` enforces it against the
checkpoint's own list of training tasks) and on recovery from perturbed states (a teacher
prefix of random length, then one injected wrong move). Arms are a list: `ARMS.append(Arm(...))`
adds one (its rows function sees the lab and the seed; `needs` names arms it builds on).
Each (arm, seed) runs in its own worker process (`--jobs` at once) on one CPU thread. The
JSON result records the command. Finished (arm, seed) results are saved to
`<out>.partial.json` as they come; `--resume` starts from such a file and runs only what is
missing (for example arms added later), and the result then records every command that
contributed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from trajforge.agents.expert import ExpertPolicy
from trajforge.agents.household_teacher import NoisyObservableTeacher, ObservableTeacher
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.generate.recovery import (
    first_disagreement,
    first_labelled_error,
    recovery_rows,
    training_row,
)
from trajforge.rollout.episode import Limits, run_episode
from trajforge.serve.student import Student
from trajforge.train.evaluate import (
    check_held_out,
    fresh_starts,
    held_out_tasks,
    rate,
    recovery_starts,
    run_lockstep,
    wilson,
)
from trajforge.train.sft import SFTConfig, train_sft

Row = tuple[list[dict], list[dict]]
RESULTS = Path(__file__).parent / "results" / "learning_loop.json"


@dataclass
class LabConfig:
    train_worlds: int = 400
    test_worlds: int = 300
    recovery_states: int = 300
    steps: int = 1200
    batch_size: int = 16
    lr: float = 1e-3
    hidden: int = 128
    layers: int = 4
    max_steps: int = 20
    noise: float = 0.2
    difficulty: int = 1
    work: str = "/tmp/learning_loop"


class Lab:
    """Shared data of one seed's worker: training worlds, teacher rows, trained students."""

    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.tasks = [task_for(seed, config.difficulty) for seed in range(config.train_worlds)]
        self._cache: dict[str, list[dict]] = {}

    def demos(self, policy_name: str) -> list[dict]:
        """Successful runs of a deterministic policy on every training world."""
        if policy_name not in self._cache:
            policy = {"teacher": ObservableTeacher, "oracle": ExpertPolicy}[policy_name]()
            runs = [self._run(policy, task) for task in self.tasks]
            self._cache[policy_name] = [training_row(t) for t in runs if t.outcome.success]
        return self._cache[policy_name]

    def _run(self, policy, task):
        return run_episode(
            HouseholdEnv(), policy, task, limits=Limits(max_steps=self.config.max_steps)
        )

    def teacher_recoveries(self, seed: int) -> list[dict]:
        """Recovery demonstrations from the noisy teacher's runs (first mistake of each)."""
        forks = []
        for index, task in enumerate(self.tasks):
            noisy = NoisyObservableTeacher(
                seed=seed * 100_003 + index, error_rate=self.config.noise
            )
            run = self._run(noisy, task)
            error = first_labelled_error(run)
            if error is not None:
                forks.append((run, error))
        return recovery_rows(HouseholdEnv, forks, ObservableTeacher(), self.config.max_steps, "R")

    def student_recoveries(self, seed: int) -> list[dict]:
        """Corrections of the E student's own failed runs on the training worlds."""
        student = Student(checkpoint_dir(self.config, "E", seed))
        runs = run_lockstep(student, fresh_starts(HouseholdEnv, self.tasks), self.config.max_steps)
        teacher = ObservableTeacher()
        forks = []
        for run in runs:
            if not run.outcome.success:
                error = first_disagreement(HouseholdEnv, run, teacher)
                if error is not None:
                    forks.append((run, error))
        return recovery_rows(HouseholdEnv, forks, teacher, self.config.max_steps, "S")


def checkpoint_dir(config: LabConfig, arm: str, seed: int) -> Path:
    return Path(config.work) / f"{arm}-seed{seed}"


@dataclass
class Arm:
    name: str
    about: str
    rows: Callable[[Lab, int], list[dict]]
    needs: tuple[str, ...] = ()


ARMS: list[Arm] = [
    Arm("E", "observable-teacher successes", lambda lab, seed: lab.demos("teacher")),
    Arm(
        "E+R",
        "plus recovery demonstrations from noisy-teacher failures",
        lambda lab, seed: lab.demos("teacher") + lab.teacher_recoveries(seed),
    ),
    Arm(
        "E+S",
        "plus corrections of the E student's own failures",
        lambda lab, seed: lab.demos("teacher") + lab.student_recoveries(seed),
        needs=("E",),
    ),
    Arm("O", "privileged-oracle demonstrations", lambda lab, seed: lab.demos("oracle")),
]


def _train(lab: Lab, arm: Arm, seed: int, rows: list[dict]) -> Path:
    config = lab.config
    out = checkpoint_dir(config, arm.name, seed)
    sft = SFTConfig(
        steps=config.steps,
        batch_size=config.batch_size,
        lr=config.lr,
        warmup=min(50, config.steps // 5),
        seed=seed,
        save_every=config.steps,
        hidden=config.hidden,
        layers=config.layers,
        threads=1,
    )
    tasks = sorted({row["task_id"] for row in rows})
    manifest = {"name": f"{arm.name}-seed{seed}", "train_tasks": tasks}
    train_sft([(r["messages"], r["tools"]) for r in rows], out, sft, manifest=manifest)
    return out


def _evaluate(lab: Lab, checkpoint: Path) -> dict[str, Any]:
    config = lab.config
    student = Student(checkpoint)
    env = HouseholdEnv()
    tests = held_out_tasks(env, config.test_worlds, config.difficulty)
    recovery_tasks = held_out_tasks(env, config.recovery_states + 40, config.difficulty, 500_000)
    trained_on = student.manifest["train_tasks"]
    check_held_out([t.id for t in tests + recovery_tasks], trained_on)
    runs = run_lockstep(student, fresh_starts(HouseholdEnv, tests), config.max_steps)
    starts = recovery_starts(HouseholdEnv, recovery_tasks, ObservableTeacher(), seed=7)
    starts = starts[: config.recovery_states]
    recovered = run_lockstep(student, starts, config.max_steps)
    return {
        "success": [bool(t.outcome.success) for t in runs],
        "recovery": [bool(t.outcome.success) for t in recovered],
        "test_tasks": [t.id for t in tests],
        "recovery_tasks": [t.task.id for t in recovered],
    }


def run_arm(config: LabConfig, seed: int, name: str) -> dict[str, Any]:
    """Train and evaluate one arm for one seed (one worker process, one CPU thread)."""
    import torch

    torch.set_num_threads(1)
    lab = Lab(config)
    arm = next(a for a in ARMS if a.name == name)
    started = time.time()
    rows = arm.rows(lab, seed)
    checkpoint = _train(lab, arm, seed, rows)
    trained = time.time()
    evaluation = _evaluate(lab, checkpoint)
    lines = (checkpoint / "loss.jsonl").read_bytes().splitlines()
    curve = [orjson.loads(line) for line in lines]
    result = {
        "rows": len(rows),
        "rows_by_kind": _kinds(rows),
        "loss_curve": [[r["step"], r["loss"]] for r in curve[:: max(1, len(curve) // 60)]],
        "final_loss": statistics.fmean(r["loss"] for r in curve[-20:]),
        "train_s": round(trained - started, 1),
        "eval_s": round(time.time() - trained, 1),
        **evaluation,
    }
    print(
        f"seed {seed} {name}: rows {len(rows)} success "
        f"{sum(evaluation['success'])}/{len(evaluation['success'])} recovery "
        f"{sum(evaluation['recovery'])}/{len(evaluation['recovery'])} "
        f"({time.time() - started:.0f}s)",
        flush=True,
    )
    return result


def run_all(
    config: LabConfig,
    seeds: list[int],
    names: list[str],
    jobs: int,
    partial: Path,
    done: dict[int, dict[str, Any]],
    commands: list[str],
) -> dict:
    """Every (arm, seed) not in `done`, in a process pool; an arm starts once the arms it
    needs are done."""
    results: dict[int, dict[str, Any]] = {seed: dict(done.get(seed, {})) for seed in seeds}
    pending = [(seed, name) for seed in seeds for name in names if name not in results[seed]]
    needs = {arm.name: arm.needs for arm in ARMS}
    running: dict[Any, tuple[int, str]] = {}
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        while pending or running:
            for seed, name in list(pending):
                if all(need in results[seed] for need in needs[name]):
                    pending.remove((seed, name))
                    running[pool.submit(run_arm, config, seed, name)] = (seed, name)
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                seed, name = running.pop(future)
                results[seed][name] = future.result()
                saved = {"commands": commands, **results}
                partial.write_bytes(orjson.dumps(saved, option=orjson.OPT_NON_STR_KEYS))
    return results


def _kinds(rows: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    return counts


def summarize(per_seed: dict[int, dict[str, Any]], arm_names: list[str]) -> dict[str, Any]:
    arms = {}
    for name in arm_names:
        runs = [per_seed[s][name] for s in sorted(per_seed) if name in per_seed[s]]
        if not runs:
            continue
        success = [x for r in runs for x in r["success"]]
        recovery = [x for r in runs for x in r["recovery"]]
        arms[name] = {
            "success": rate(success)["rate"],
            "success_ci": list(wilson(sum(success), len(success))),
            "recovery": rate(recovery)["rate"],
            "recovery_ci": list(wilson(sum(recovery), len(recovery))),
            "success_by_seed": [rate(r["success"])["rate"] for r in runs],
            "recovery_by_seed": [rate(r["recovery"])["rate"] for r in runs],
            "rows_by_seed": [r["rows"] for r in runs],
            "final_loss_by_seed": [round(r["final_loss"], 4) for r in runs],
        }
    if "E" in arms:
        for name in arms:
            if name != "E":
                arms[name]["vs_E"] = {
                    key: paired_difference(per_seed, name, "E", key)
                    for key in ("success", "recovery")
                }
    return arms


def paired_difference(per_seed, arm: str, base: str, key: str, draws: int = 2000) -> dict:
    """Mean difference over seeds, 95% bootstrap interval resampling test items (paired)."""
    seeds = [s for s in sorted(per_seed) if arm in per_seed[s] and base in per_seed[s]]
    if not seeds:
        return None
    a = [per_seed[s][arm][key] for s in seeds]
    b = [per_seed[s][base][key] for s in seeds]
    items = len(a[0])
    diffs = [
        [int(x) - int(y) for x, y in zip(ra, rb, strict=True)] for ra, rb in zip(a, b, strict=True)
    ]
    point = statistics.fmean(statistics.fmean(d) for d in diffs)
    rng = random.Random(0)
    samples = []
    for _ in range(draws):
        picks = [rng.randrange(items) for _ in range(items)]
        samples.append(statistics.fmean(statistics.fmean(d[i] for i in picks) for d in diffs))
    samples.sort()
    return {
        "diff": round(point, 4),
        "ci": [round(samples[int(0.025 * draws)], 4), round(samples[int(0.975 * draws)], 4)],
    }


def table(arms: dict[str, Any]) -> str:
    lines = [
        "| arm | held-out success [95% CI] | recovery [95% CI] | vs E: success | vs E: recovery |",
        "|---|---|---|---|---|",
    ]
    for name, arm in arms.items():
        versus = arm.get("vs_E", {})
        cells = [
            f"{arm['success']:.3f} [{arm['success_ci'][0]:.3f}, {arm['success_ci'][1]:.3f}]",
            f"{arm['recovery']:.3f} [{arm['recovery_ci'][0]:.3f}, {arm['recovery_ci'][1]:.3f}]",
        ]
        for key in ("success", "recovery"):
            d = versus.get(key) if versus else None
            cells.append(f"{d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]" if d else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="A smoke run (minutes).")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=None, help="Student width.")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=2, help="Arms trained in parallel.")
    parser.add_argument("--arms", default=",".join(a.name for a in ARMS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--report", type=Path, help="Only summarize a .partial.json of an unfinished run."
    )
    parser.add_argument(
        "--resume", type=Path, help="Keep the (arm, seed) results of a .partial.json."
    )
    args = parser.parse_args(argv)
    config = LabConfig()
    if args.quick:
        config = LabConfig(
            train_worlds=40,
            test_worlds=30,
            recovery_states=30,
            steps=30,
            work="/tmp/learning_loop_quick",
        )
    for field in ("steps", "hidden", "batch_size"):
        if getattr(args, field):
            setattr(config, field, getattr(args, field))
    names = [n for n in args.arms.split(",") if n]
    started = time.time()
    seeds = list(range(args.seeds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".partial.json")
    command = "python bench/learning_loop.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    earlier = _load_partial(args.report or args.resume)
    commands = [*earlier.pop("commands", []), command]
    names += [n for runs in earlier.values() for n in runs if n not in names]
    if args.report:
        per_seed = earlier
    else:
        per_seed = run_all(config, seeds, names, args.jobs, partial, earlier, commands)
    result = report(per_seed, names, config, commands, time.time() - started)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    if not args.report:
        partial.unlink(missing_ok=True)
    print(table(result["arms"]))
    print(
        f"test worlds {result['test_worlds']}, recovery states {result['recovery_states']}, "
        f"seeds {result['seeds']}, complete {result['complete']}; wrote {args.out}"
    )
    return 0


def _load_partial(path: Path | None) -> dict:
    """Results per seed (and the commands that made them) from a .partial.json."""
    if path is None:
        return {}
    loaded = orjson.loads(path.read_bytes())
    commands = loaded.pop("commands", [])
    return {"commands": commands, **{int(seed): runs for seed, runs in loaded.items()}}


def report(per_seed, names: list[str], config: LabConfig, commands: list[str], wall: float) -> dict:
    """The JSON result; `complete` is false when some (arm, seed) has no result."""
    arms = summarize(per_seed, names)
    done = [r for runs in per_seed.values() for r in runs.values()]
    return {
        "command": commands[-1],
        "commands": commands,
        "complete": all(name in runs for runs in per_seed.values() for name in names),
        "arms": arms,
        "test_worlds": len(done[0]["success"]) if done else 0,
        "recovery_states": len(done[0]["recovery"]) if done else 0,
        "seeds": len(per_seed),
        "seeds_done": {name: sum(name in runs for runs in per_seed.values()) for name in names},
        "config": config.__dict__,
        "about": {arm.name: arm.about for arm in ARMS if arm.name in names},
        "wall_s": round(wall, 1),
        "per_seed": {
            str(seed): {
                name: {k: v for k, v in r.items() if k not in ("test_tasks", "recovery_tasks")}
                for name, r in runs.items()
            }
            for seed, runs in per_seed.items()
        },
    }


if __name__ == "__main__":
    sys.exit(main())
