"""Checkpoint handoff between students: every reacher × solver pair of checkpoints.

The experiment of the checkpoint-handoff work in miniature: does an RL checkpoint reach
solvable states more often than the SFT checkpoint it started from (REACH@k), and how well
does each solve from the states the other reached (SOLVE)? The protocol is that of
`rollout.handoff` (`trajforge handoff`): before each reacher move the oracle's distance to
success is read; at the first state within `k` actions the environment is cloned
(`snapshot`/`restore`) with the history, and the solver continues within the same total step
budget. Here all episodes of a pair advance together, greedily, through `run_lockstep` (the
batched decoding `trajforge serve` uses), since one episode at a time is too slow on CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trajforge.envs.base import Environment, Oracle
from trajforge.envs.household import HouseholdEnv
from trajforge.schema import Trajectory
from trajforge.serve.student import Student
from trajforge.train.evaluate import Start, fresh_starts, held_out_tasks, run_lockstep, wilson

HANDOFF_OFFSET = 200_000
"""Handoff worlds come from the held-out range, apart from the success evaluation's."""


def reach(student: Student, starts: list[Start], k: int, max_steps: int) -> list[Start | None]:
    """Advance each episode until its state is within `k` actions of success: the reached
    (environment, history) pairs, None where the reacher never got there."""
    reached: list[Start | None] = [None] * len(starts)
    active = list(range(len(starts)))
    for _ in range(max_steps + 1):
        still = []
        for i in active:
            env, traj = starts[i]
            distance = _distance(env)
            if distance is not None and distance <= k:
                reached[i] = (env, traj)
            elif traj.outcome.termination_reason is None:
                still.append(i)
        if not still or _steps(starts[still[0]][1]) >= max_steps:
            break
        run_lockstep(student, [starts[i] for i in still], 1)
        for i in still:  # one step taken: reopen the episodes that only hit the 1-step budget
            traj = starts[i][1]
            if traj.outcome.termination_reason == "max_steps":
                traj.outcome.termination_reason = None
        active = still
    return reached


def _steps(traj: Trajectory) -> int:
    return len(traj.assistant_indices())


def _clone(start: Start) -> Start:
    env, traj = start
    twin = HouseholdEnv()
    twin.reset(traj.task)
    twin.restore(env.snapshot())
    return twin, traj.model_copy(deep=True)


def handoff_pair(
    reacher: Student, solver: Student, tasks: list, k: int, max_steps: int
) -> dict[str, Any]:
    starts = fresh_starts(HouseholdEnv, tasks)
    reached = [s for s in reach(reacher, starts, k, max_steps) if s is not None]
    solved = 0
    by_budget: dict[int, list[Start]] = {}
    for start in map(_clone, reached):
        if _distance(start[0]) == 0:
            solved += 1
        else:
            by_budget.setdefault(max_steps - _steps(start[1]), []).append(start)
    for left, group in by_budget.items():
        if left > 0:
            solved += sum(bool(t.outcome.success) for t in run_lockstep(solver, group, left))
    n = len(tasks)
    return {
        "reach": round(len(reached) / n, 4),
        "reach_ci": list(wilson(len(reached), n)),
        "solve": round(solved / len(reached), 4) if reached else None,
        "solve_ci": list(wilson(solved, len(reached))),
        "end_to_end": round(solved / n, 4),
        "reached": len(reached),
    }


def handoff_matrix(
    checkpoints: Mapping[str, Path], tasks: int, k: int = 2, max_steps: int = 20,
    difficulty: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """REACH@k, SOLVE and end-to-end success (Wilson intervals) of every pair."""
    worlds = held_out_tasks(HouseholdEnv(), tasks, difficulty, offset=HANDOFF_OFFSET)
    students = {name: Student(path) for name, path in checkpoints.items()}
    pairs = {
        f"{a}->{b}": handoff_pair(students[a], students[b], worlds, k, max_steps)
        for a in students
        for b in students
    }
    return {"k": k, "tasks": tasks, "max_steps": max_steps, "pairs": pairs}


def _distance(env: Environment) -> int | None:
    """The oracle's fewest actions to success (household environments have the oracle)."""
    if not isinstance(env, Oracle):
        raise TypeError(f"environment '{env.name}' has no oracle")
    return env.distance()
