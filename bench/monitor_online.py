"""Online monitor: the incremental SessionMonitor against scoring the whole run at every call.

Usage: python bench/monitor_online.py [DATA_DIR] [--runs N] [--model MODEL]
(DATA_DIR, or $TRAJFORGE_SHARED_DATA, or ../shared/data beside the repository). Reads the real
SWE-bench runs (mini-swe-agent + gemini-3-pro; all 393 by default) with the importer, trains
a learned detector on them (logistic regression, 3 inner folds; or loads MODEL), then replays
every run message by message, as a proxy sees a session grow, and at every call measures in
the same process:

- baseline, the old way: `current_risk(prefix, model)`: extract the steps and the prefix
  features of the whole run so far and score them, at every call;
- incremental: one `SessionMonitor` per run, `should_stop(prefix)`: only the new steps.

A call is one decision; latency is per call, reported overall and for calls with at least 50
completed steps. Both must give the same risk (checked to 1e-12 at every call). Also printed:
how much of an incremental call at step >= 50 the check that the run extends the one seen
(`message_key` of every consumed message) costs.

Measured 2026-11-30 on 2 shared cores, all 393 runs (32,688 calls, 3,469 at step >= 50,
longest run 145 steps), logistic detector trained here:

    batch        total 391.34 s | per call mean 11.972 ms, p50 9.571, p99 51.276 |
                 step >= 50: mean 30.687 ms, p50 25.902, p99 110.304
    incremental  total  50.58 s | per call mean  1.547 ms, p50 0.813, p99  7.955 |
                 step >= 50: mean  2.157 ms, p50  1.959, p99   9.878
    mean ms per call by steps (batch / incremental): 0-24: 6.81 / 1.35; 25-49: 15.76 / 1.72;
    50-74: 25.15 / 1.97; 75-99: 38.01 / 2.38; 100-999: 58.12 / 3.14
    prefix check at step >= 50: 0.362 ms of the 2.157 ms; rebuilds 0; largest risk
    difference 5.7e-15
    speed-up: 7.7x in total, 14.2x per call at step >= 50

The whole run takes about 8 minutes (the batch baseline is most of it); `--runs 40` about
30 seconds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from shared_data import data_dir
from trajforge.importers.mini_swe_agent import MiniSweAgentImporter
from trajforge.monitor import (
    LearnedConfig,
    LearnedDetector,
    SessionMonitor,
    featurize_runs,
    load_detector,
)
from trajforge.monitor.detectors import Detector
from trajforge.monitor.scoring import current_risk
from trajforge.monitor.steps import message_key
from trajforge.schema import Trajectory

RUNS = "swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs"
LATE_STEP = 50
TOLERANCE = 1e-12
MIN_TRAIN_RUNS = 20
"""Fewer runs can leave an inner training fold with one class."""
STEP_BANDS = ((0, 25), (25, 50), (50, 75), (75, 100), (100, 1000))


def read_runs(data: Path, count: int | None) -> list[Trajectory]:
    importer = MiniSweAgentImporter()
    files = sorted((data / RUNS).glob("*/*.traj.json"))[:count]
    return [next(iter(importer.read(path))) for path in files]


def detector_for(runs: list[Trajectory], model: str | None) -> Detector:
    if model:
        return load_detector(model)
    if len(runs) < MIN_TRAIN_RUNS:
        raise SystemExit(f"training needs at least {MIN_TRAIN_RUNS} runs; use --model MODEL")
    trained = LearnedDetector(LearnedConfig(candidates=("logistic",), inner_folds=3))
    trained.fit(featurize_runs(runs))
    return trained


class Replay:
    """Per-call latencies (seconds) of both ways, the completed steps at each call, and the
    largest risk difference between them."""

    def __init__(self) -> None:
        self.batch: list[float] = []
        self.incremental: list[float] = []
        self.steps: list[int] = []
        self.check: list[float] = []
        self.max_difference = 0.0
        self.rebuilds = 0

    def run(self, traj: Trajectory, model: Detector) -> None:
        monitor = SessionMonitor(model)
        for n in range(1, len(traj.messages) + 1):
            prefix = traj.model_copy(update={"messages": traj.messages[:n]})
            started = time.perf_counter()
            steps, risk = current_risk(prefix, model)
            middle = time.perf_counter()
            monitor.should_stop(prefix)
            self.incremental.append(time.perf_counter() - middle)
            self.batch.append(middle - started)
            self.steps.append(steps)
            self._compare(monitor, steps, risk)
            if steps >= LATE_STEP:
                self.check.append(_key_check_seconds(prefix))
        self.rebuilds += monitor.scorer.rebuilds

    def _compare(self, monitor: SessionMonitor, steps: int, risk: float | None) -> None:
        if monitor.steps_seen != steps or (risk is None) != (monitor.last_risk is None):
            raise SystemExit(f"step count or risk presence differs at {steps} steps")
        if risk is not None:
            self.max_difference = max(self.max_difference, abs(risk - monitor.last_risk))


def _key_check_seconds(prefix: Trajectory) -> float:
    started = time.perf_counter()
    for message in prefix.messages:
        message_key(message)
    return time.perf_counter() - started


def latency(ms: np.ndarray) -> str:
    """Mean, p50 and p99 of per-call milliseconds."""
    p50, p99 = np.percentile(ms, [50, 99])
    return f"mean {ms.mean():7.3f} ms, p50 {p50:7.3f}, p99 {p99:7.3f}"


def report(name: str, seconds: list[float], late: np.ndarray) -> None:
    ms = np.asarray(seconds) * 1000
    print(
        f"  {name:12s} total {ms.sum() / 1000:8.2f} s | per call {latency(ms)} | "
        f"step >= {LATE_STEP}: {latency(ms[late])}"
    )


def by_steps(replay: Replay) -> None:
    """Mean ms per call by completed steps: the batch cost grows with the run, the
    incremental one should not (except the per-message prefix check)."""
    steps = np.asarray(replay.steps)
    cells = []
    for low, high in STEP_BANDS:
        inside = (steps >= low) & (steps < high)
        if inside.any():
            batch = 1000 * np.mean(np.asarray(replay.batch)[inside])
            incremental = 1000 * np.mean(np.asarray(replay.incremental)[inside])
            cells.append(f"{low}-{high - 1}: {batch:.2f} / {incremental:.2f}")
    print("  mean ms per call by steps (batch / incremental): " + "; ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?")
    parser.add_argument("--runs", type=int, default=None, help="first N runs (default: all)")
    parser.add_argument("--model", default=None, help="a detector file (default: train one)")
    args = parser.parse_args()
    runs = read_runs(data_dir(args.data), args.runs)
    started = time.perf_counter()
    model = detector_for(runs, args.model)
    trained_in = time.perf_counter() - started
    replay = Replay()
    for traj in runs:
        replay.run(traj, model)
    late = np.asarray(replay.steps) >= LATE_STEP
    print(
        f"{len(runs)} real SWE-bench runs, {len(replay.steps)} calls (one per message), "
        f"{int(late.sum())} at step >= {LATE_STEP}, longest run {max(replay.steps)} steps; "
        f"detector: {getattr(model, 'kind', model.name)} ({trained_in:.1f} s to load/train)"
    )
    report("batch", replay.batch, late)
    report("incremental", replay.incremental, late)
    by_steps(replay)
    check_ms = 1000 * float(np.mean(replay.check)) if replay.check else 0.0
    late_ms = 1000 * float(np.mean(np.asarray(replay.incremental)[late]))
    print(
        f"  prefix check at step >= {LATE_STEP}: {check_ms:.3f} ms of the {late_ms:.3f} ms; "
        f"rebuilds {replay.rebuilds}; largest risk difference {replay.max_difference:.1e}"
    )
    batch_late = float(np.mean(np.asarray(replay.batch)[late]))
    print(
        f"speed-up: {sum(replay.batch) / sum(replay.incremental):.1f}x in total, "
        f"{batch_late * 1000 / late_ms:.1f}x per call at step >= {LATE_STEP}"
    )
    if replay.max_difference > TOLERANCE:
        raise SystemExit(f"risks differ by {replay.max_difference:.1e} > {TOLERANCE}")


if __name__ == "__main__":
    main()
