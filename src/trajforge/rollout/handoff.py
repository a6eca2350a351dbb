"""Checkpoint handoff: a reacher runs to a handoff point, a solver continues from there.

For each task the reacher starts a fresh conversation. Before each of its moves the
environment oracle is asked for the distance to success; at the first state within `k`
actions (or after `at` reacher steps, when fixed) the state and history are cloned and
the solver continues from the identical state in a fresh environment.

- REACH = share of runs that reached a handoff state;
- SOLVE = success rate of the solver from the reached states;
- end-to-end = share of all runs that ended in success (solver's result when reached,
  else the reacher's own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from trajforge.agents.base import EpisodeState, Policy, PolicyStep, UserSimulator
from trajforge.agents.user_sim import ScriptedUser
from trajforge.envs import make_env
from trajforge.envs.base import Environment, Oracle, StateHashing, TaskSet
from trajforge.errors import EpisodeEnd, UserError
from trajforge.models.retry import ModelCallFailed, model_failure, require_an_answer
from trajforge.progress import ProgressLines
from trajforge.rollout.episode import Limits, run_episode
from trajforge.rollout.factory import AgentSpec, build
from trajforge.rollout.fork import prepare_turn
from trajforge.schema import MODEL_ERROR, ForkParent, Outcome, Source, Task, Trajectory

AgentFactory = Callable[[int], tuple[Policy, UserSimulator]]
"""Builds a fresh (policy, user) pair for the run with the given index (seeds vary by run)."""


class HandoffConfig(BaseModel):
    """Where the handoff happens."""

    k: int = Field(default=1, ge=0, description="Hand off at the first state within k actions.")
    at: int | None = Field(
        default=None, description="Hand off after this many reacher steps instead of by k."
    )
    limits: Limits = Field(default_factory=Limits, description="Limits of each episode.")


class HandoffRun(BaseModel):
    """One task: did the reacher reach a handoff state, and did the solver finish it?"""

    task_id: str
    reached: bool
    handoff_index: int | None = Field(description="Message index of the handoff (None: never).")
    distance_at_handoff: int | None
    solved: bool | None = Field(description="Solver success from the handoff (None: not reached).")
    success: bool = Field(description="End-to-end success.")
    state_hash: str | None = Field(
        default=None, description="Hash of the cloned state the solver started from."
    )
    model_failure: str | None = Field(
        default=None,
        description="Why a model could not be reached, when that ended the reacher or solver "
        "(the run is then left out of REACH, SOLVE and end-to-end).",
    )


class HandoffResult(BaseModel):
    """REACH / SOLVE / end-to-end for one reacher and solver over a task set."""

    reacher: str
    solver: str
    k: int
    at: int | None
    tasks: int
    reach: float
    solve: float | None
    end_to_end: float
    runs: list[HandoffRun]


class _HandoffProbe:
    """Wraps the reacher: ends its episode ("handoff") when the handoff state is reached."""

    def __init__(self, reacher: Policy, config: HandoffConfig) -> None:
        self.reacher = reacher
        self.config = config
        self.name = reacher.name

    def act(self, state: EpisodeState) -> PolicyStep:
        if is_handoff_state(state.env, state.step, self.config):
            raise EpisodeEnd("handoff")
        return self.reacher.act(state)


def is_handoff_state(env: Environment, step: int, config: HandoffConfig) -> bool:
    if config.at is not None:
        return step >= config.at
    distance = env.distance() if isinstance(env, Oracle) else None
    return distance is not None and distance <= config.k


def start_conversation(
    env: Environment, task: Task, user: UserSimulator, source: Source
) -> Trajectory:
    """A fresh trajectory: the environment's opening messages and the user's first turn (a
    user model that cannot be reached ends it as a model error, not judged)."""
    trajectory = Trajectory(task=task, source=source, messages=env.reset(task), tools=env.tools)
    env.bind_conversation(trajectory.messages)
    try:
        prepare_turn(env, trajectory, user)
    except ModelCallFailed as failed:
        trajectory.metadata["model_failure"] = failed.failure
        trajectory.outcome = Outcome(termination_reason=MODEL_ERROR)
    return trajectory


def run_handoff(
    env_name: str,
    task: Task,
    reacher: tuple[Policy, UserSimulator],
    solver: tuple[Policy, UserSimulator],
    config: HandoffConfig,
) -> tuple[HandoffRun, Trajectory, Trajectory | None]:
    """One handoff on one task; returns the run summary, the reacher's and solver's runs."""
    env = make_env(env_name)
    policy, user = reacher
    source = Source(harness="trajforge-handoff", model=policy.name, run="reacher")
    reached_traj = start_conversation(env, task, user, source)
    if model_failure(reached_traj) is None:
        reached_traj = run_episode(
            env,
            _HandoffProbe(policy, config),
            task,
            user=user,
            trajectory=reached_traj,
            limits=config.limits,
        )
    failure = model_failure(reached_traj)
    reached = failure is None and (
        reached_traj.outcome.termination_reason == "handoff"
        or (config.at is None and is_handoff_state(env, 0, config))
    )
    if not reached:
        run = HandoffRun(
            task_id=task.id,
            reached=False,
            handoff_index=None,
            distance_at_handoff=None,
            solved=None,
            success=bool(reached_traj.outcome.success),
            model_failure=failure,
        )
        return run, reached_traj, None
    return _solve_from(env, env_name, task, reached_traj, solver, config)


def _solve_from(
    env: Environment,
    env_name: str,
    task: Task,
    reached_traj: Trajectory,
    solver: tuple[Policy, UserSimulator],
    config: HandoffConfig,
) -> tuple[HandoffRun, Trajectory, Trajectory]:
    """Clone the reached state into a fresh environment and let the solver continue."""
    distance = env.distance() if isinstance(env, Oracle) else None
    index = len(reached_traj.messages)
    solver_env = make_env(env_name)
    solver_env.reset(task)
    solver_env.restore(env.snapshot())
    state_hash = solver_env.state_hash() if isinstance(solver_env, StateHashing) else None
    history = reached_traj.model_copy(deep=True)
    history.source = Source(harness="trajforge-handoff", model=solver[0].name, run="solver")
    history.parent = ForkParent(trajectory_id=reached_traj.with_id().id, message_index=index)
    solver_env.bind_conversation(history.messages)
    if reached_traj.outcome.termination_reason == "handoff":
        solved_traj = run_episode(
            solver_env, solver[0], task, user=solver[1], trajectory=history, limits=config.limits
        )
    else:  # reached only at the very end: nothing left for the solver to do
        solved_traj = history
        solved_traj.outcome = solver_env.evaluate()
    solved = bool(solved_traj.outcome.success)
    run = HandoffRun(
        task_id=task.id,
        reached=True,
        handoff_index=index,
        distance_at_handoff=distance,
        solved=solved,
        success=solved,
        state_hash=state_hash,
        model_failure=model_failure(solved_traj),
    )
    return run, reached_traj, solved_traj


def evaluate_handoff(
    env_name: str,
    tasks: Sequence[Task],
    reacher: AgentFactory,
    solver: AgentFactory,
    config: HandoffConfig,
    names: tuple[str, str] = ("reacher", "solver"),
    collect: list[Trajectory] | None = None,
    on_task: Callable[[], None] | None = None,
) -> HandoffResult:
    """REACH / SOLVE / end-to-end of one reacher and one solver over `tasks`; the reacher's
    and solver's trajectories are appended to `collect` when given, and `on_task` is called
    after each task."""
    if not tasks:
        raise UserError(f"no tasks to run for environment '{env_name}'")
    runs = []
    for i, task in enumerate(tasks):
        run, reached, solved = run_handoff(env_name, task, reacher(i), solver(i), config)
        runs.append(run)
        if collect is not None:
            collect.extend(t.with_id() for t in (reached, solved) if t is not None)
        if i == 0:  # a model that cannot answer the first run: stop here
            require_an_answer([run.model_failure], "first handoff run", "nothing to report")
        if on_task is not None:
            on_task()
    judged = [r for r in runs if r.model_failure is None]
    reaching = [r for r in judged if r.reached]
    return HandoffResult(
        reacher=names[0],
        solver=names[1],
        k=config.k,
        at=config.at,
        tasks=len(runs),
        reach=len(reaching) / max(1, len(judged)),
        solve=(sum(bool(r.solved) for r in reaching) / len(reaching)) if reaching else None,
        end_to_end=sum(r.success for r in judged) / max(1, len(judged)),
        runs=runs,
    )


class HandoffMatrix(BaseModel):
    """Every reacher × solver pair over the same tasks."""

    env: str
    k: int
    at: int | None
    tasks: int
    results: list[HandoffResult]

    def cell(self, reacher: str, solver: str) -> HandoffResult:
        return next(r for r in self.results if r.reacher == reacher and r.solver == solver)

    def to_json(self) -> dict[str, Any]:
        """Summary keys (reach, solve, end_to_end: of the only pair, or per pair in `matrix`)."""
        pairs = [r.model_dump(exclude={"runs"}) for r in self.results]
        data: dict[str, Any] = {"env": self.env, "k": self.k, "at": self.at, "tasks": self.tasks}
        if len(self.results) == 1:
            only = self.results[0]
            data |= {"reach": only.reach, "solve": only.solve, "end_to_end": only.end_to_end}
        data["matrix"] = pairs
        data["runs"] = {
            f"{r.reacher}->{r.solver}": [run.model_dump() for run in r.runs] for r in self.results
        }
        return data


def task_list(env_name: str, count: int | None, seed: int = 0) -> list[Task]:
    """Tasks of an environment that offers a task set (`tasks(count, seed)`)."""
    env = make_env(env_name)
    if not isinstance(env, TaskSet):
        raise UserError(f"environment '{env_name}' offers no task set for handoff")
    return list(env.tasks(count, seed))


def run_matrix(
    env_name: str,
    reachers: Sequence[str],
    solvers: Sequence[str],
    specs: dict[str, AgentSpec],
    config: HandoffConfig,
    count: int | None = None,
    collect: list[Trajectory] | None = None,
    seed: int = 0,
    progress: ProgressLines | None = None,
) -> HandoffMatrix:
    """Handoff for every reacher × solver pair of policy names (built from `specs`; run i
    is seeded `seed + i`); `progress` counts the (pair, task) handoffs done."""
    tasks = task_list(env_name, count)
    if progress is not None:
        progress.total = len(reachers) * len(solvers) * len(tasks)
        progress.update(0)
    results = []
    for reacher in reachers:
        for solver in solvers:
            results.append(
                evaluate_handoff(
                    env_name,
                    tasks,
                    agent_factory(specs[reacher], seed),
                    agent_factory(specs[solver], seed),
                    config,
                    names=(reacher, solver),
                    collect=collect,
                    on_task=None if progress is None else progress.advance,
                )
            )
    return HandoffMatrix(env=env_name, k=config.k, at=config.at, tasks=len(tasks), results=results)


def agent_factory(spec: AgentSpec, seed: int = 0) -> AgentFactory:
    """Fresh agents per run, seeded `seed + index`; the scripted user unless asked otherwise."""
    build(spec, seed)  # an unknown name or a policy that needs a parent fails here, once

    def agents(index: int) -> tuple[Policy, UserSimulator]:
        policy, user = build(spec, seed + index)
        return policy, user or ScriptedUser()

    return agents
