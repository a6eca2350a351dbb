"""Rollout scale: environment step rates, episodes/s at 1 and 2 workers, Ray's overhead.

Usage: python bench/rollout_scale.py [--episodes N] [--repeat R] [--no-ray]

1. Per environment, with the expert policy: `env.step` calls per second (the expert's
   actions recorded first, then replayed and timed alone), oracle `expert_action()` calls
   per second (timed alone), and whole-episode steps per second through `run_episode`.
   Goal: household env.step >= 10,000 steps/s on one core.
2. Episodes per second on the local backend (worker processes when there are 2) and its
   scaling from 1 to 2 workers on household (goal >= 1.7x), for `--episodes` and for four
   times as many (starting the pool, about 8 ms, and the last chunk's tail weigh less in
   the longer batch: on 2 cores about 1.5x at 240 episodes, 1.65-1.7x at 960), then the Ray
   backend, at
   concurrency 1 and 2, and Ray's overhead against local at the same concurrency (Ray
   started and warmed up before timing; local and Ray runs alternate), for two workloads:
   household noisy-expert episodes (milliseconds each: the worst case for Ray's fixed
   per-episode cost of shipping specs and trajectories) and swe expert episodes (sandboxed
   commands, about a second each). Goal: overhead <= 20%. Both backends return what the
   store takes (`FinishedEpisode`: the trajectory serialized where it ran), so both sides
   include the same serialization; for Ray, the driver's own CPU per episode (receiving and
   unpickling, no JSON parsing) is printed too.

Each measurement is the best of `--repeat` runs, so a busy machine disturbs it less.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from trajforge.agents import ExpertPolicy
from trajforge.envs import ENVIRONMENTS, make_env
from trajforge.rollout import Limits, run_episode
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.factory import PolicyOptions
from trajforge.rollout.runner import Progress, RolloutConfig
from trajforge.rollout.tasks import select_tasks
from trajforge.schema import ToolCall

STEP_GOAL = 10_000
RAY_OVERHEAD_GOAL = 0.20
SCALING_GOAL = 1.7
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
    env = make_env(name)
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


def household_batch(episodes: int) -> list:
    """Cheap episodes (milliseconds): the worst case for any backend's per-episode cost."""
    env = make_env("household")
    config = RolloutConfig(
        env="household",
        tasks=env.tasks(episodes),
        policy="noisy-expert",
        options=PolicyOptions(error_rate=0.2),
        faults=["transient:0.1"],
    )
    return config.specs()


def swe_batch(episodes: int) -> list:
    """Sandbox-bound episodes (about a second each), closer to real agent runs."""
    tasks = make_env("swe").tasks(episodes)
    return RolloutConfig(env="swe", tasks=tasks, policy="expert").specs()


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
    parser.add_argument("--swe-episodes", type=int, default=6, help="Episodes of the swe batch.")
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

    workloads = [
        ("household noisy-expert", household_batch(args.episodes), args.repeat, True),
        ("swe expert", swe_batch(args.swe_episodes), 1, False),
    ]
    local_scaling(workloads[0][1], args.repeat)
    local_scaling(household_batch(4 * args.episodes), args.repeat)
    if args.no_ray:
        for label, specs, repeat, _ in workloads[1:]:
            for concurrency in (1, 2):
                rate = episodes_per_s(run_local, specs, concurrency, repeat)
                print(f"{label}, {len(specs)} episodes: local workers={concurrency} {rate:.1f}/s")
        return
    local_and_ray(workloads)


def local_scaling(specs: list, repeat: int) -> None:
    """Household episodes/s on the local backend at 1 and 2 workers, runs alternating."""
    one, two = [], []
    for _ in range(repeat):
        one.append(episodes_per_s(run_local, specs, 1, 1))
        two.append(episodes_per_s(run_local, specs, 2, 1))
    ratio = statistics.median(b / a for a, b in zip(one, two, strict=True))
    print(f"\n== local backend, household, {len(specs)} episodes (medians of {repeat})")
    print(
        f"workers=1 {statistics.median(one):.1f} ep/s · workers=2 {statistics.median(two):.1f} "
        f"ep/s · ratio local 2 / 1 workers: {ratio:.2f}x "
        f"(goal >= {SCALING_GOAL}x: {'met' if ratio >= SCALING_GOAL else 'NOT met'})"
    )


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


def own_and_children_cpu() -> float:
    """CPU seconds of this process and of its finished children (local worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed_run(backend, specs, concurrency: int, whole_tree: bool) -> tuple[float, float, float]:
    """(episodes/s, CPU seconds per episode, this process's CPU seconds per episode) of one
    run; the CPU is of this process only, or of it and all its descendants (Ray's daemons
    and workers)."""
    cpu = (lambda: tree_cpu_seconds(os.getpid())) if whole_tree else own_and_children_cpu
    before, own = cpu(), time.process_time()
    rate = episodes_per_s(backend, specs, concurrency, 1)
    return rate, (cpu() - before) / len(specs), (time.process_time() - own) / len(specs)


def local_and_ray(workloads: list) -> None:
    """Local and Ray at the same concurrency, runs interleaved so load changes hit both.

    Wall-clock rates swing with other work on the machine; CPU seconds per episode (this
    process for local; this process, Ray's daemons and its workers for Ray) do not, so both
    overheads are printed where the work stays in Python (household).
    """
    import ray

    from trajforge.rollout.backends.ray import run_ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        episodes_per_s(run_ray, workloads[0][1][:8], 2, 1)  # start and warm up the workers
        for label, specs, repeat, with_cpu in workloads:
            print(f"\n== episodes/s, {label}, {len(specs)} episodes (best of {repeat})")
            for concurrency in (1, 2):
                compare(specs, concurrency, repeat, with_cpu, run_ray)
    finally:
        ray.shutdown()


def compare(specs: list, concurrency: int, repeat: int, with_cpu: bool, run_ray) -> None:
    local, ray_runs = [], []
    for _ in range(repeat):
        local.append(timed_run(run_local, specs, concurrency, whole_tree=False))
        ray_runs.append(timed_run(run_ray, specs, concurrency, whole_tree=True))
    local_rate, ray_rate = max(r[0] for r in local), max(r[0] for r in ray_runs)
    wall = local_rate / ray_rate - 1
    line = f"workers={concurrency}: local {local_rate:7.1f} ep/s · ray {ray_rate:7.1f} ep/s"
    line += f" · Ray overhead (goal <= {RAY_OVERHEAD_GOAL:.0%}): wall {wall:+.1%} {_verdict(wall)}"
    if with_cpu:
        local_cpu, ray_cpu = min(r[1] for r in local), min(r[1] for r in ray_runs)
        driver = min(r[2] for r in ray_runs)
        cpu = ray_cpu / local_cpu - 1
        line += (
            f", CPU {cpu:+.1%} {_verdict(cpu)} ({local_cpu * 1e3:.2f} vs {ray_cpu * 1e3:.2f} ms/ep,"
            f" Ray driver {driver * 1e3:.2f} ms/ep)"
        )
    print(line)


if __name__ == "__main__":
    main()
