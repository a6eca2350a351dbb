"""Rollout scale: environment step rates, episodes/s at 1 and 2 workers, Ray's overhead.

Usage: python bench/rollout_scale.py [--episodes N] [--repeat R] [--no-ray]

1. Per environment, with the expert policy: `env.step` calls per second (the expert's
   actions recorded first, then replayed and timed alone), oracle `expert_action()` calls
   per second (timed alone), and whole-episode steps per second through `run_episode`.
   Goal: household env.step >= 10,000 steps/s on one core.
2. Episodes per second for a household noisy-expert batch on the local backend (threads)
   and the Ray backend, at concurrency 1 and 2, and Ray's overhead against local at the
   same concurrency (Ray started and warmed up before timing; local and Ray runs
   alternate). Goal: overhead <= 20%.

Each measurement is the best of `--repeat` runs, so a busy machine disturbs it less.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from trajforge.agents import ExpertPolicy
from trajforge.envs import ENVIRONMENTS
from trajforge.rollout import Limits, run_episode
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.factory import PolicyOptions
from trajforge.rollout.runner import Progress, RolloutConfig
from trajforge.rollout.tasks import select_tasks
from trajforge.schema import ToolCall

STEP_GOAL = 10_000
RAY_OVERHEAD_GOAL = 0.20
TASKS_PER_ENV = {"household": 60, "swe": 3, "tau-retail": 20, "tau-airline": 20}


def best(repeat: int, func: Callable[[], float]) -> float:
    return min(func() for _ in range(repeat))


def expert_actions(env, task) -> list[ToolCall]:
    env.reset(task)
    calls = []
    while (action := env.expert_action()) is not None and len(calls) < 200:
        if not isinstance(action, ToolCall):
            break  # a message to the user: the tool part of the episode ends here
        calls.append(action)
        if env.step(action).done:
            break
    return calls


def time_steps(env, plans) -> float:
    spent = 0.0
    for task, calls in plans:
        env.reset(task)
        started = time.perf_counter()
        for call in calls:
            env.step(call)
        spent += time.perf_counter() - started
    return spent


def time_oracle(env, plans) -> float:
    spent = 0.0
    for task, calls in plans:
        env.reset(task)
        for call in calls:
            started = time.perf_counter()
            env.expert_action()
            spent += time.perf_counter() - started
            env.step(call)
    return spent


def time_episodes(env, plans) -> float:
    started = time.perf_counter()
    for task, _ in plans:
        run_episode(env, ExpertPolicy(), task, limits=Limits(max_steps=200))
    return time.perf_counter() - started


def env_rates(name: str, repeat: int) -> dict[str, float] | None:
    env = ENVIRONMENTS.get(name)()
    try:
        tasks = select_tasks(env, str(TASKS_PER_ENV.get(name, 10)))
    except Exception as exc:  # an environment that cannot run here is reported, not fatal
        print(f"{name:12s} skipped: {exc}")
        return None
    plans = [(task, expert_actions(env, task)) for task in tasks]
    steps = sum(len(calls) for _, calls in plans)
    if not steps:
        return None
    rates = {
        "step": steps / best(repeat, lambda: time_steps(env, plans)),
        "oracle": steps / best(repeat, lambda: time_oracle(env, plans)),
        "episode": steps / best(repeat, lambda: time_episodes(env, plans)),
    }
    close = getattr(env, "close", None)
    if callable(close):
        close()
    return rates


def batch(episodes: int) -> list:
    env = ENVIRONMENTS.get("household")()
    config = RolloutConfig(
        env="household",
        tasks=env.tasks(episodes),
        policy="noisy-expert",
        options=PolicyOptions(error_rate=0.2),
        faults=["transient:0.1"],
    )
    return config.specs()


def episodes_per_s(backend, specs, concurrency: int, repeat: int) -> float:
    def run() -> float:
        started = time.perf_counter()
        count = sum(1 for _ in backend(specs, concurrency, Progress()))
        assert count == len(specs)
        return time.perf_counter() - started

    return len(specs) / best(repeat, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=240, help="Episodes per batch.")
    parser.add_argument("--repeat", type=int, default=3, help="Runs per measurement.")
    parser.add_argument("--no-ray", action="store_true", help="Skip the Ray measurements.")
    args = parser.parse_args()

    print("== environment steps/s with the expert policy (best of", args.repeat, "runs)")
    print(f"{'env':12s} {'env.step/s':>12s} {'oracle/s':>12s} {'episode steps/s':>16s}")
    household = None
    for name in ENVIRONMENTS.names():
        rates = env_rates(name, args.repeat)
        if rates:
            household = rates if name == "household" else household
            print(f"{name:12s} {rates['step']:12,.0f} {rates['oracle']:12,.0f} "
                  f"{rates['episode']:16,.0f}")  # fmt: skip
    if household:
        verdict = "met" if household["step"] >= STEP_GOAL else "NOT met"
        print(f"household env.step goal >= {STEP_GOAL:,}/s: {verdict}")

    specs = batch(args.episodes)
    print(f"\n== episodes/s, household noisy-expert, {len(specs)} episodes")
    if args.no_ray:
        for concurrency in (1, 2):
            rate = episodes_per_s(run_local, specs, concurrency, args.repeat)
            print(f"local  workers={concurrency}: {rate:8.1f} episodes/s")
        return
    local_and_ray(specs, args.repeat)


def _verdict(overhead: float) -> str:
    return "met" if overhead <= RAY_OVERHEAD_GOAL else "NOT met"


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) of process `root` and all its descendants (Linux /proc)."""
    parents, cpu = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    tree, frontier = {root}, [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        frontier = [pid for pid in children if pid not in tree]
        tree.update(frontier)
    return sum(cpu.get(pid, 0.0) for pid in tree)


def cpu_per_episode(backend, specs, concurrency: int, whole_tree: bool) -> float:
    """CPU seconds per episode: this process only, or with all its descendants (Ray)."""
    before = tree_cpu_seconds(os.getpid()) if whole_tree else time.process_time()
    episodes_per_s(backend, specs, concurrency, 1)
    after = tree_cpu_seconds(os.getpid()) if whole_tree else time.process_time()
    return (after - before) / len(specs)


def local_and_ray(specs: list, repeat: int) -> None:
    """Local and Ray at the same concurrency, runs interleaved so load changes hit both.

    Wall-clock rates swing with other work on the machine; CPU seconds per episode (this
    process for local; this process, Ray's daemons and its workers for Ray) do not, so both
    overheads are printed.
    """
    import ray

    from trajforge.rollout.backends.ray import run_ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        episodes_per_s(run_ray, specs[:8], 2, 1)  # start and warm up the workers
        for concurrency in (1, 2):
            local = ray_rate = 0.0
            for _ in range(repeat):
                local = max(local, episodes_per_s(run_local, specs, concurrency, 1))
                ray_rate = max(ray_rate, episodes_per_s(run_ray, specs, concurrency, 1))
            local_cpu = cpu_per_episode(run_local, specs, concurrency, whole_tree=False)
            ray_cpu = cpu_per_episode(run_ray, specs, concurrency, whole_tree=True)
            wall, cpu = local / ray_rate - 1, ray_cpu / local_cpu - 1
            print(f"workers={concurrency}: local {local:7.1f} ep/s {local_cpu * 1e3:5.2f} CPU ms/ep"
                  f" · ray {ray_rate:7.1f} ep/s {ray_cpu * 1e3:5.2f} CPU ms/ep")  # fmt: skip
            print(f"  Ray overhead vs local (goal <= {RAY_OVERHEAD_GOAL:.0%}): "
                  f"wall {wall:+.1%} {_verdict(wall)}, CPU {cpu:+.1%} {_verdict(cpu)}")  # fmt: skip
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
