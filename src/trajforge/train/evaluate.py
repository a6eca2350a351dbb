"""Evaluate a policy on held-out tasks: success with 95% intervals, pass^k, and recovery.

- Held-out: `check_held_out` refuses any task a checkpoint was trained on (its manifest lists
  the task ids of its training rows); the bench also draws its test worlds from a seed range
  no training data ever uses (`HELD_OUT_START`).
- Success: each task run `samples` times; the rate over all judged runs (a run a model error
  ended is left out and counted in `model_errors`) with a Wilson 95% interval,
  and pass^k (the chance that k runs of one task all succeed, unbiased from n samples:
  C(c, k) / C(n, k) averaged over tasks).
- Recovery: episodes that start right after an injected wrong action. A teacher runs the
  task for a random number of steps, then the environment's distractor (a plausible wrong
  move) is executed; the policy under test continues from there and is scored on success.

`run_lockstep` rolls many episodes of a student checkpoint at once: one batched generation
per step for every episode still running (the same `Student.generate` that `trajforge serve`
uses for concurrent requests).

Both evaluators report each finished episode to an optional `ProgressLines` (episodes done of
those planned, success so far).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from trajforge.agents.base import EpisodeState, Policy, PolicyStep
from trajforge.agents.expert import Distractor
from trajforge.agents.household_teacher import ObservableTeacher
from trajforge.envs.base import Environment
from trajforge.envs.household import HouseholdEnv
from trajforge.errors import EpisodeEnd, UserError
from trajforge.models.openai_compat import message_to_openai
from trajforge.models.retry import model_failure, require_an_answer
from trajforge.openai_wire import to_message
from trajforge.progress import ProgressLines
from trajforge.rollout.episode import Limits, run_episode, start_trajectory
from trajforge.schema import Message, Outcome, Task, TerminationReason, Trajectory
from trajforge.serve.student import DecodeSession, Student, answer_message

HELD_OUT_START = 1_000_000
"""Household world seeds from here on are never used to make training data."""
LOCKSTEP_ROWS = 128
"""Episodes `run_lockstep` decodes in one batch."""
Start = tuple[Environment, Trajectory]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4))


def rate(outcomes: Sequence[bool]) -> dict[str, Any]:
    successes = sum(outcomes)
    n = len(outcomes)
    return {
        "n": n,
        "successes": successes,
        "rate": round(successes / n, 4) if n else 0.0,
        "ci": list(wilson(successes, n)),
    }


def pass_hat_k(per_task: Sequence[Sequence[bool]], k: int) -> float:
    """Mean over tasks of C(c, k) / C(n, k): all of k runs succeed."""
    values = [
        math.comb(sum(runs), k) / math.comb(len(runs), k) for runs in per_task if len(runs) >= k
    ]
    return round(sum(values) / len(values), 4) if values else 0.0


def check_held_out(task_ids: Sequence[str], trained_on: Sequence[str]) -> None:
    """Refuse to evaluate on a task that is in the training data."""
    overlap = sorted(set(task_ids) & set(trained_on))
    if overlap:
        shown = ", ".join(overlap[:5]) + (" ..." if len(overlap) > 5 else "")
        raise UserError(
            f"{len(overlap)} evaluation task(s) were used to make the training data: {shown}; "
            "evaluate on held-out tasks"
        )


def held_out_tasks(env: Any, count: int, difficulty: int, offset: int = 0) -> list[Task]:
    """`count` household tasks from the held-out seed range (solvable worlds only)."""
    tasks: list[Task] = []
    seed = HELD_OUT_START + offset
    while len(tasks) < count:
        task = env.task_by_id(f"household-d{difficulty}-{seed}")
        if task.gold:
            tasks.append(task)
        seed += 1
    return tasks


# -- lock-step rollouts of a student ----------------------------------------------------------


def run_lockstep(
    student: Student,
    starts: Sequence[Start],
    max_steps: int,
    temperature: float = 0.0,
    seed: int = 0,
    reuse_cache: bool = True,
    max_new_tokens: int | None = None,
    on_finished: Callable[[Trajectory], None] | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Continue every (environment, trajectory) for up to `max_steps` more agent steps, of
    at most `max_new_tokens` each (default: the student's `turn_tokens`).

    With `reuse_cache` each conversation keeps its key/value cache between steps
    (`DecodeSession`); without it every step re-encodes the whole history. `on_finished`
    is called with each episode as it ends, `on_round` after each batched step with the
    step's number and the episodes still running (a pretrained student's long last episodes
    finish nothing for many minutes). Episodes run in batches of `LOCKSTEP_ROWS` (the
    key/value states of a batch grow with its rows times their history).
    """
    new_tokens = max_new_tokens or student.turn_tokens
    for first in range(0, len(starts), LOCKSTEP_ROWS):
        chunk = starts[first : first + LOCKSTEP_ROWS]
        _lockstep_rows(
            student, chunk, max_steps, temperature, seed, reuse_cache, new_tokens,
            on_finished, on_round,
        )  # fmt: skip
    return [traj for _, traj in starts]


def _lockstep_rows(
    student: Student,
    starts: Sequence[Start],
    max_steps: int,
    temperature: float,
    seed: int,
    reuse_cache: bool,
    max_new_tokens: int,
    on_finished: Callable[[Trajectory], None] | None,
    on_round: Callable[[int, int], None] | None,
) -> None:
    budget = {id(traj): len(traj.assistant_indices()) + max_steps for _, traj in starts}
    session = DecodeSession(student) if reuse_cache else None
    active = list(starts)
    round_index = 0
    while active:
        prompts = [_prompt(student, traj) for _, traj in active]
        decode = session.generate if session is not None else student.generate
        generated = decode(prompts, max_new_tokens, temperature, seed + round_index)
        still, kept = [], []
        for row, ((env, traj), answer) in enumerate(zip(active, generated, strict=True)):
            reason = _advance(student, env, traj, answer, round_index)
            if reason is None and len(traj.assistant_indices()) >= budget[id(traj)]:
                reason = "max_steps"
            if reason is None:
                still.append((env, traj))
                kept.append(row)
            else:
                _finish(env, traj, reason)
                if on_finished is not None:
                    on_finished(traj)
        if session is not None:
            session.keep(kept)
        active = still
        round_index += 1
        if on_round is not None:
            on_round(round_index, len(active))


def _prompt(student: Student, traj: Trajectory) -> list[int]:
    return student.codec.prompt([message_to_openai(m) for m in traj.messages], traj.tools)


def _advance(student: Student, env: Environment, traj: Trajectory, answer, round_index: int):
    """Append the answer and run its tool calls; a termination reason, or None to go on."""
    data = answer_message(student.codec, answer, traj.tools, f"s-{round_index}")
    traj.messages.append(to_message(data))
    calls = traj.messages[-1].tool_calls
    if not calls:
        return "agent_stop"
    done = False
    for call in calls:
        result = env.step(call)
        traj.messages.append(
            Message(role="tool", content=result.content, tool_call_id=call.id, name=call.name)
        )
        done = done or result.done
    return "env_done" if done else None


def _finish(env: Environment, traj: Trajectory, reason: TerminationReason) -> None:
    try:
        outcome = env.evaluate()
    except Exception as exc:  # a crash in judging must not lose the episode
        traj.metadata["error"] = f"evaluate failed: {exc}"
        outcome = Outcome(success=False, reward=0.0, judged_by="error")
    outcome.termination_reason = reason
    traj.outcome = outcome


def fresh_starts(env_factory: Callable[[], Environment], tasks: Sequence[Task]) -> list[Start]:
    starts = []
    for task in tasks:
        env = env_factory()
        starts.append((env, start_trajectory(env, task)))
    return starts


# -- recovery states ------------------------------------------------------------------------


class _PerturbAt:
    """Acts as `teacher` for `at` steps, then once as the environment's distractor, then stops."""

    name = "perturbed-teacher"

    def __init__(self, teacher: Policy, at: int, rng: random.Random) -> None:
        self.teacher, self.at, self.rng = teacher, at, rng

    def act(self, state: EpisodeState) -> PolicyStep:
        if state.step < self.at:
            return self.teacher.act(state)
        if state.step > self.at or not isinstance(state.env, Distractor):
            raise EpisodeEnd("perturbed", "the wrong action has been taken")
        wrong = state.env.distractor_action(self.rng)
        if wrong is None:
            raise EpisodeEnd("no_distractor", "no wrong action available")
        call = wrong.model_copy(update={"id": f"call_{state.step}_perturb"})
        return PolicyStep(message=Message(role="assistant", content=None, tool_calls=[call]))


def recovery_starts(
    env_factory: Callable[[], Environment], tasks: Sequence[Task], teacher: Policy, seed: int
) -> list[Start]:
    """One perturbed state per task: teacher prefix of random length, then a wrong action.

    The prefix length is drawn below the teacher's own episode length, so the wrong action
    lands before the goal; states already solved (or without a wrong move) are skipped.
    """
    rng = random.Random(seed)
    starts = []
    for task in tasks:
        length = len(run_episode(env_factory(), teacher, task).assistant_indices())
        at = rng.randrange(max(1, length - 1))
        env = env_factory()
        traj = run_episode(env, _PerturbAt(teacher, at, rng), task, limits=Limits(max_steps=at + 2))
        if traj.outcome.termination_reason == "perturbed" and not traj.outcome.success:
            traj.metadata["perturbed_at"] = traj.assistant_indices()[-1]
            starts.append((env, traj))
    return starts


# -- the eval command --------------------------------------------------------------------------


class EvalConfig(BaseModel):
    """Which held-out tasks and how many runs."""

    difficulty: int = Field(default=1, ge=1, le=3, description="Household difficulty.")
    tasks: int = Field(default=300, ge=1, description="Held-out worlds for success.")
    recovery: int = Field(default=300, ge=0, description="Perturbed states for recovery.")
    samples: int = Field(default=1, ge=1, description="Runs per task (pass^k for k <= samples).")
    temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature.")
    max_steps: int = Field(default=20, ge=1, description="Agent steps per episode.")
    seed: int = Field(default=0, description="Seed of sampling and of the perturbations.")
    bf16: bool = Field(default=False, description="The student's weights in bfloat16.")


def check_training_tasks(task_ids: Sequence[str]) -> None:
    """Refuse training data made from held-out household worlds."""
    held = [t for t in task_ids if (m := _SEED.match(t)) and int(m.group(1)) >= HELD_OUT_START]
    if held:
        raise UserError(
            f"{len(held)} training row(s) come from held-out worlds (seed >= {HELD_OUT_START}), "
            f"e.g. {held[0]}; the evaluation needs them unseen"
        )


_SEED = re.compile(r"^household-d[123]-(\d+)$")


def eval_tasks(config: EvalConfig) -> tuple[list[Task], list[Task]]:
    """The held-out test worlds and the worlds of the perturbed recovery starts."""
    env = HouseholdEnv()
    tests = held_out_tasks(env, config.tasks, config.difficulty)
    spare = config.recovery + config.recovery // 5 + 5 if config.recovery else 0
    recovery = held_out_tasks(env, spare, config.difficulty, offset=500_000)
    return tests, recovery


def _report(name: str, config: EvalConfig, every: list[Trajectory], tried: list[Trajectory]):
    """Rates over the judged runs: a run a model error ended says nothing about the policy."""
    runs = [r for r in every if r.outcome.status != "model_error"]
    recovered = [r for r in tried if r.outcome.status != "model_error"]
    per_task: dict[str, list[bool]] = {}
    for run in runs:
        per_task.setdefault(run.task.id, []).append(bool(run.outcome.success))
    return {
        "policy": name,
        "difficulty": config.difficulty,
        "config": config.model_dump(),
        "success": rate([bool(r.outcome.success) for r in runs]),
        "pass_hat_k": {
            str(k): pass_hat_k(list(per_task.values()), k) for k in range(1, config.samples + 1)
        },
        "recovery": rate([bool(r.outcome.success) for r in recovered]),
        "tasks": len(per_task),
        "model_errors": len(every) - len(runs) + len(tried) - len(recovered),
    }


class _Counted:
    """Episodes planned and finished, shown on an optional progress reporter (success among
    the judged episodes; model errors apart)."""

    def __init__(self, progress: ProgressLines | None) -> None:
        self.progress = progress
        self.finished = self.judged = self.successes = 0

    def plan(self, episodes: int) -> None:
        if self.progress is not None:
            self.progress.total = (self.progress.total or 0) + episodes
            self.progress.update(self.finished)

    def done(self, traj: Trajectory) -> None:
        self.finished += 1
        if self.progress is None:
            return
        if model_failure(traj) is not None:
            errors = self.finished - self.judged
            self.progress.update(self.finished, **{"model errors": errors})
            return
        self.judged += 1
        self.successes += bool(traj.outcome.success)
        self.progress.update(self.finished, success=f"{self.successes / self.judged:.0%}")

    def stepped(self, step: int, running: int) -> None:
        """A batched step is over: a line when one is due, even if no episode ended."""
        if self.progress is not None:
            self.progress.update(self.finished, step=step, running=running)


def evaluate_checkpoint(
    path, config: EvalConfig, trained_on: Sequence[str] = (), progress: ProgressLines | None = None
) -> dict:
    """Batched evaluation of a student checkpoint on held-out tasks."""
    student = Student(path, bf16=config.bf16)
    tests, recovery_tasks = eval_tasks(config)
    avoid = [*trained_on, *student.manifest.get("train_tasks", [])]
    check_held_out([t.id for t in tests + recovery_tasks], avoid)
    counted = _Counted(progress)
    counted.plan(config.samples * len(tests))
    runs: list[Trajectory] = []
    for sample in range(config.samples):
        starts = fresh_starts(HouseholdEnv, tests)
        runs += run_lockstep(
            student, starts, config.max_steps, config.temperature,
            seed=config.seed + 1000 * sample, on_finished=counted.done, on_round=counted.stepped,
        )  # fmt: skip
    recovered = []
    if config.recovery:
        starts = recovery_starts(HouseholdEnv, recovery_tasks, ObservableTeacher(), config.seed)
        counted.plan(len(starts[: config.recovery]))
        recovered = run_lockstep(
            student, starts[: config.recovery], config.max_steps, config.temperature,
            seed=config.seed, on_finished=counted.done, on_round=counted.stepped,
        )  # fmt: skip
    return _report(student.name, config, runs, recovered)


def evaluate_policy(
    name: str, options: dict, config: EvalConfig, trained_on: Sequence[str] = (),
    progress: ProgressLines | None = None,
) -> dict:  # fmt: skip
    """Episode-by-episode evaluation of any registered policy (e.g. `llm` against a server)."""
    from trajforge.rollout.factory import AgentSpec, PolicyOptions, build

    tests, recovery_tasks = eval_tasks(config)
    check_held_out([t.id for t in tests + recovery_tasks], trained_on)
    policy_options = PolicyOptions(**{k: v for k, v in options.items() if v is not None})
    spec = AgentSpec(policy=name, options=policy_options)
    limits = Limits(max_steps=config.max_steps)
    counted = _Counted(progress)
    counted.plan(config.samples * len(tests))
    runs: list[Trajectory] = []
    for sample in range(config.samples):
        for task in tests:
            policy = build(spec, config.seed + sample).policy
            runs.append(run_episode(HouseholdEnv(), policy, task, limits=limits))
            if len(runs) == 1:  # an endpoint that cannot answer the first episode: stop here
                require_an_answer([model_failure(runs[0])], "first episode", "nothing to report")
            counted.done(runs[-1])
    recovered = []
    if config.recovery:
        starts = recovery_starts(HouseholdEnv, recovery_tasks, ObservableTeacher(), config.seed)
        counted.plan(len(starts[: config.recovery]))
        for env, traj in starts[: config.recovery]:
            policy = build(spec, config.seed).policy
            steps = Limits(max_steps=len(traj.assistant_indices()) + config.max_steps)
            recovered.append(run_episode(env, policy, traj.task, trajectory=traj, limits=steps))
            counted.done(recovered[-1])
    return _report(name, config, runs, recovered)
