"""Fork speed: rebuild the state at a recorded tau run's midpoint, against re-running it.

Usage: python bench/fork_speed.py [DATA_DIR]   (or $TRAJFORGE_SHARED_DATA, or ../shared/data
beside the repository). Uses the real tau-bench runs of 26 to 34 messages (a "30-message
run") and measures, in the same process:

- fork: `replay_to(env, run, midpoint)` on a reused environment (reset, re-execute the
  prefix's tool calls on the copy-on-write database) plus copying the prefix into a child,
  per run (median of `--repeat`); the mean over runs and the slowest run are reported;
- baseline A, tau-bench's reset: a deep copy of the whole database, then the same calls;
- baseline B, from scratch: load the database from the bundled files, then the same calls;
- snapshot and restore of an environment after the prefix's writes;
- a whole fork with the expert finishing the run (continuation included), for scale.

The other timings are the median of `--repeat` rounds over all selected runs (the slow
baselines: over 6 of them, 3 rounds), divided by the number of runs. Goal: every fork
≤ 5 ms.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from shared_data import data_dir
from trajforge.agents import ExpertPolicy
from trajforge.agents.user_sim import ScriptedUser
from trajforge.envs import make_env
from trajforge.envs.replay import answered_calls, replay_to
from trajforge.envs.tau.db import DOMAIN_TABLES, TauDB, base_tables
from trajforge.envs.tau.tooling import run_tool
from trajforge.importers.tau_bench import TauBenchImporter
from trajforge.rollout.fork import ForkOptions, fork, prefix_child
from trajforge.schema import Trajectory

GOAL_MS = 5.0
BASELINE_RUNS = 6
RUN_FILES = (
    "tau-bench/historical_trajectories/gpt-4o-airline.json",
    "agentrx/tau-retail/tau_dataset_full.json",
)


def thirty_message_runs(data: Path) -> list[Trajectory]:
    importer = TauBenchImporter()
    runs = [t.with_id() for name in RUN_FILES for t in importer.read(data / name)]
    return [t for t in runs if 26 <= len(t.messages) <= 34]


def median_ms(action: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def fork_timings(runs: list[Trajectory], repeat: int) -> list[float]:
    """Per run: median ms to rebuild the midpoint state and copy the prefix into a child."""
    expert = ExpertPolicy()
    timings = []
    for run in runs:
        env, middle = make_env(run), len(run.messages) // 2

        def one_fork(env=env, run=run, middle=middle) -> None:
            replay_to(env, run, middle)
            prefix_child(run, middle, expert, ForkOptions())

        one_fork()  # warm: the env's first reset
        timings.append(median_ms(one_fork, repeat))
    return timings


def rerun_with_copy(runs: list[Trajectory], cold: bool) -> Callable[[], None]:
    """Re-run each prefix on a database that is copied whole (A) or loaded from files (B)."""

    def action() -> None:
        for run in runs:
            env = make_env(run)
            db = TauDB(env.domain, env.config.address_key)
            db.base = _load_tables(env.domain) if cold else copy.deepcopy(db.base)
            for _, call, _ in answered_calls(run.messages, len(run.messages) // 2):
                run_tool(env.tool_map, db, call.name, call.arguments)

    return action


def _load_tables(domain: str) -> dict:
    from importlib import resources

    folder = resources.files("trajforge.envs.tau") / "data" / domain
    return {
        table: orjson.loads(gzip.decompress((folder / f"{table}.json.gz").read_bytes()))
        for table in DOMAIN_TABLES[domain]
    }


def snapshot_restore(runs: list[Trajectory]) -> tuple[Callable[[], None], Callable[[], None]]:
    envs = []
    for run in runs:
        env = make_env(run)
        replay_to(env, run, len(run.messages))
        envs.append(env)
    states = [env.snapshot() for env in envs]

    def snap() -> None:
        for env in envs:
            env.snapshot()

    def restore() -> None:
        for env, state in zip(envs, states, strict=True):
            env.restore(state)

    return snap, restore


def whole_fork(runs: list[Trajectory]) -> Callable[[], None]:
    def action() -> None:
        for run in runs:
            fork(run, len(run.messages) // 2, ExpertPolicy(), user=ScriptedUser())

    return action


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runs = thirty_message_runs(data_dir(args.data))
    for domain in DOMAIN_TABLES:
        base_tables(domain)  # loaded once per process, as in any long-running use
    n = len(runs)
    few = runs[:: max(1, n // BASELINE_RUNS)][:BASELINE_RUNS]  # the baselines are slow
    calls = sum(len(answered_calls(t.messages, len(t.messages) // 2)) for t in runs) / n
    forks = fork_timings(runs, args.repeat)
    per_run = {
        "fork (restore + replay)": statistics.mean(forks),
        "fork, slowest run": max(forks),
        "baseline A: deep-copy db + re-run": median_ms(rerun_with_copy(few, False), 3) / len(few),
        "baseline B: load db + re-run": median_ms(rerun_with_copy(few, True), 3) / len(few),
    }
    snap, restore = snapshot_restore(runs)
    per_run["snapshot"] = median_ms(snap, args.repeat) / n
    per_run["restore"] = median_ms(restore, args.repeat) / n
    per_run["whole fork, expert continues"] = median_ms(whole_fork(runs), 3) / n
    print(
        f"{n} real tau runs of 26-34 messages; forked at the midpoint "
        f"({calls:.1f} tool calls replayed on average)"
    )
    for name, value in per_run.items():
        print(f"  {name:36s} {value:9.3f} ms per run")
    fork_ms = per_run["fork (restore + replay)"]
    print(
        f"speed-up vs baseline A: {per_run['baseline A: deep-copy db + re-run'] / fork_ms:.0f}x, "
        f"vs baseline B: {per_run['baseline B: load db + re-run'] / fork_ms:.0f}x"
    )
    verdict = "met" if max(forks) <= GOAL_MS else "NOT met"
    print(
        f"goal: fork a 30-message run in <= {GOAL_MS} ms: mean {fork_ms:.3f} ms, "
        f"slowest {max(forks):.3f} ms ({verdict})"
    )


if __name__ == "__main__":
    main()
