"""Guidance search: turn each failed run into a clean passing demonstration, if it can.

For a failed run (with its diagnosis, when there is one), the sources are tried in order of
cost (`RecoverConfig.sources`): the verified correction as advice, the strategies retrieved
for the run (when a `StrategyLookup` is given), the oracle's privileged plan, then
chat-model guidance refined for up to `llm_rounds` rounds. Each guidance is
tried from each start in `RecoverConfig.starts`: `decisive` forks the run at its decisive
message (the diagnosis's step), `start` runs the task from the beginning. The teacher runs
with the guidance in its system prompt. The first passing attempt whose demonstration does
not leak the guidance (see `leak.py`) is kept, stripped, with its provenance; a passing
attempt that leaks is rejected and the search goes on.

Beside it, intervene-and-replay (`RecoverConfig.intervene`): fork at the decisive message,
send the correction in place of the agent's message, and let the teacher continue
unguided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, Field

from trajforge.agents.base import Policy, UserSimulator
from trajforge.diagnose.model import Diagnosis
from trajforge.envs import make_env
from trajforge.envs.base import Environment
from trajforge.envs.replay import replay_to
from trajforge.generate.guided.guidance import (
    SOURCES,
    Feedback,
    Guidance,
    GuidanceSource,
    LLMGuidanceProposer,
    StrategyLookup,
    correction_guidance,
    hidden_state_guidance,
    oracle_plan,
    privileged_guidance,
    strategy_guidance,
)
from trajforge.generate.guided.leak import LeakConfig, find_leaks
from trajforge.generate.guided.teacher import GuidedPolicy, InterveningPolicy, strip
from trajforge.models.retry import model_failure
from trajforge.rollout.episode import Limits
from trajforge.rollout.fork import ForkOptions, fork
from trajforge.schema import Message, Trajectory

StartMode = Literal["decisive", "start"]
PrivilegedForm = Literal["hint", "plan"]
HARNESS = "trajforge-recover"


class RecoverConfig(BaseModel):
    """How the guidance search runs."""

    sources: list[GuidanceSource] = Field(
        default_factory=lambda: list(SOURCES), description="Guidance sources, in this order."
    )
    starts: list[StartMode] = Field(
        default_factory=lambda: list(get_args(StartMode)),
        description="Where the teacher starts: the decisive message, or the task's start.",
    )
    llm_rounds: int = Field(default=3, ge=1, description="Rounds of LLM guidance (K).")
    intervene: bool = Field(default=True, description="Also run intervene-and-replay.")
    max_steps: int = Field(default=40, ge=1, description="Teacher steps per attempt.")
    plan_steps: int = Field(default=30, ge=1, description="Longest privileged plan.")
    privileged_forms: list[PrivilegedForm] = Field(
        default_factory=lambda: list(get_args(PrivilegedForm)),
        description="Privileged guidance tried, in order: the environment's hidden-state "
        "hint, the oracle's plan.",
    )
    leak: LeakConfig = Field(default_factory=LeakConfig, description="Leak check.")


class Attempt(BaseModel):
    """One teacher run under one guidance."""

    source: str = Field(description="Guidance source, or 'intervene'.")
    start: StartMode
    at: int = Field(description="Fork index the teacher continued from.")
    round: int = 1
    success: bool
    reward: float | None = None
    leaks: list[str] = Field(default_factory=list, description="Why it was rejected.")
    model_failure: str | None = Field(
        default=None, description="Why the model could not be reached, when that ended it."
    )


class RecoveryResult(BaseModel):
    """What the search did for one failed run."""

    trajectory_id: str
    environment: str | None
    decisive: int | None = Field(description="The diagnosis's decisive message index.")
    recovered: bool = False
    source: str | None = Field(default=None, description="Source of the kept guidance.")
    privileged: bool = False
    start: StartMode | None = None
    rounds: int = Field(default=0, description="Teacher runs up to the kept one (or all).")
    leak_rejections: int = 0
    unavailable: list[str] = Field(default_factory=list, description="Sources with no guidance.")
    intervene: bool | None = Field(default=None, description="None: no correction to try.")
    demo_id: str | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    failed_calls: list[str] = Field(
        default_factory=list,
        description="Model calls that failed every retry (guidance writer, teacher, user), "
        "with the reason; the search went on without them.",
    )


@dataclass
class Job:
    """One teacher run to make: continue `failed` after its first `at` messages."""

    failed: Trajectory
    at: int
    guidance: Guidance | None = None
    first: Message | None = None
    """Intervene-and-replay: this message is sent first, in place of the decisive one."""
    system: str | None = None
    """The environment's system prompt, for a run recorded without one."""


@runtime_checkable
class Runner(Protocol):
    """Runs teacher jobs (a batch at a time, so a runner can batch model calls)."""

    def run(self, jobs: list[Job]) -> list[Trajectory]: ...


class ForkRunner:
    """Runs each job as a fork with a fresh teacher that sees the guidance in its system
    prompt (`GuidedPolicy`), and a fresh user simulator."""

    def __init__(
        self,
        teacher: Callable[[], Policy],
        user: Callable[[], UserSimulator | None],
        max_steps: int = 40,
    ) -> None:
        self.teacher = teacher
        self.user = user
        self.max_steps = max_steps

    def run(self, jobs: list[Job]) -> list[Trajectory]:
        return [self._one(job) for job in jobs]

    def _one(self, job: Job) -> Trajectory:
        policy: Policy = GuidedPolicy(self.teacher(), job.guidance, job.system)
        if job.first is not None:
            policy = InterveningPolicy(policy, job.first)
        options = ForkOptions(limits=Limits(max_steps=self.max_steps), harness=HARNESS)
        return fork(job.failed, job.at, policy, user=self.user(), options=options)


class _Search:
    """The search state of one failed run."""

    def __init__(self, failed: Trajectory, diagnosis: Diagnosis | None) -> None:
        self.failed = failed
        self.diagnosis = diagnosis
        decisive = diagnosis.step if diagnosis is not None else None
        self.result = RecoveryResult(
            trajectory_id=failed.id, environment=failed.task.environment, decisive=decisive
        )
        self.demo: Trajectory | None = None
        self.system = system_prompt(failed)
        self.found: set[str] = set()
        self.privileged: dict[int, list[Guidance]] = {}
        self.llm: dict[str, tuple[Guidance, Trajectory]] = {}

    def at(self, start: StartMode) -> int | None:
        return 0 if start == "start" else self.result.decisive


class GuidedRecovery:
    """The guidance search (see the module docstring). Teacher runs go through a `Runner`:
    by default a `ForkRunner` over `teacher` and `user` (factories of fresh agents); give
    `runner` to batch them (a trained model stepping many runs in lock-step, say). The
    `strategies` source and the `llm` source are tried only with `strategies` and `proposer`."""

    def __init__(
        self,
        teacher: Callable[[], Policy] | None = None,
        user: Callable[[], UserSimulator | None] | None = None,
        config: RecoverConfig | None = None,
        proposer: LLMGuidanceProposer | None = None,
        runner: Runner | None = None,
        strategies: StrategyLookup | None = None,
    ) -> None:
        self.config = config or RecoverConfig()
        if runner is None:
            if teacher is None:
                raise ValueError("GuidedRecovery needs a teacher factory or a runner")
            runner = ForkRunner(teacher, user or (lambda: None), self.config.max_steps)
        self.runner = runner
        self.proposer = proposer
        self.strategies = strategies

    def recover(
        self, failed: Trajectory, diagnosis: Diagnosis | None
    ) -> tuple[RecoveryResult, Trajectory | None]:
        """The result and the clean demonstration (None when nothing passed cleanly)."""
        return self.recover_many([(failed, diagnosis)])[0]

    def recover_many(
        self, runs: Sequence[tuple[Trajectory, Diagnosis | None]]
    ) -> list[tuple[RecoveryResult, Trajectory | None]]:
        """Search all runs stage by stage (source, start, form or round), so that each stage
        is one batch of teacher jobs; a run leaves the search at its first clean success."""
        searches = [_Search(failed, diagnosis) for failed, diagnosis in runs]
        for source in self.config.sources:
            for start in self.config.starts:
                for index in range(self._stage_count(source)):
                    self._stage(searches, source, start, index)
            for search in searches:
                if source not in search.found:
                    search.result.unavailable.append(source)
        if self.config.intervene:
            self._intervene(searches)
        return [(s.result, s.demo) for s in searches]

    def _stage_count(self, source: GuidanceSource) -> int:
        if source == "privileged":
            return len(self.config.privileged_forms)
        if source == "llm":
            return self.config.llm_rounds if self.proposer is not None else 0
        if source == "strategies":
            return 1 if self.strategies is not None else 0
        return 1

    def _stage(
        self, searches: list[_Search], source: GuidanceSource, start: StartMode, index: int
    ) -> None:
        batch: list[tuple[_Search, Job]] = []
        for search in searches:
            at = search.at(start)
            if search.demo is not None or at is None:
                continue
            guidance = self._guidance(search, source, start, at, index)
            if guidance is not None:
                search.found.add(source)
                batch.append((search, Job(search.failed, at, guidance, system=search.system)))
        if not batch:
            return
        children = self.runner.run([job for _, job in batch])
        for (search, job), child in zip(batch, children, strict=True):
            self._judge(search, job, start, child)

    def _guidance(
        self, search: _Search, source: GuidanceSource, start: StartMode, at: int, index: int
    ) -> Guidance | None:
        if source == "correction":
            return correction_guidance(search.diagnosis)
        if source == "strategies":
            assert self.strategies is not None
            return strategy_guidance(self.strategies.texts(search.failed, at))
        if source == "privileged":
            if at not in search.privileged:
                search.privileged[at] = self._privileged(search.failed, at)
            forms = search.privileged[at]
            return forms[index] if index < len(forms) else None
        return self._llm_guidance(search, start)

    def _llm_guidance(self, search: _Search, start: StartMode) -> Guidance | None:
        """The proposer's guidance; None (the failure recorded) when its call failed."""
        assert self.proposer is not None
        previous = search.llm.get(start)
        asked = self.proposer.propose(
            search.failed,
            Feedback.of(search.failed.outcome),
            previous=previous[0] if previous else None,
            attempt=previous[1] if previous else None,
            attempt_feedback=Feedback.of(previous[1].outcome) if previous else None,
        )
        if asked.failure is not None:
            search.result.failed_calls.append(f"guidance writer: {asked.failure}")
        return asked.value

    def _judge(self, search: _Search, job: Job, start: StartMode, child: Trajectory) -> None:
        guidance = job.guidance
        assert guidance is not None
        result = search.result
        _note_model_failure(result, child)
        attempt = Attempt(
            source=guidance.source,
            start=start,
            at=job.at,
            round=guidance.round,
            success=bool(child.outcome.success),
            reward=child.outcome.reward,
            model_failure=model_failure(child),
        )
        result.rounds += 1
        result.attempts.append(attempt)
        if guidance.source == "llm":
            search.llm[start] = (guidance, child)
        if not attempt.success:
            return
        demo = strip(child, guidance, job.at, self._provenance(search, guidance, attempt, child))
        leaks = find_leaks(demo, guidance, job.at, self.config.leak)
        if leaks:
            attempt.leaks = leaks
            result.leak_rejections += 1
            return
        search.demo = demo.with_id()
        result.recovered = True
        result.source = guidance.source
        result.privileged = guidance.privileged
        result.start = start
        result.demo_id = search.demo.id

    def _provenance(
        self, search: _Search, guidance: Guidance, attempt: Attempt, child: Trajectory
    ) -> dict[str, Any]:
        return {
            "parent": search.failed.id,
            "source": guidance.source,
            "privileged": guidance.privileged,
            "guidance": guidance.text,
            "rounds": search.result.rounds,
            "round": guidance.round,
            "start": attempt.start,
            "at": attempt.at,
            "teacher": child.source.model,
        }

    def _privileged(self, failed: Trajectory, at: int) -> list[Guidance]:
        """The privileged guidance forms (`privileged_forms`), from the state after the
        first `at` messages: the environment's hidden-state hint, the oracle's plan."""
        env = make_env(failed)
        replay_to(env, failed, at)
        forms = {
            "hint": lambda: hidden_state_guidance(env),
            "plan": lambda: privileged_guidance(self._plan_from(env)),
        }
        found = [forms[form]() for form in self.config.privileged_forms]
        return [g for g in found if g is not None]

    def _plan_from(self, env: Environment) -> list[str] | None:
        """The oracle's plan from the environment's state, which is left as it was."""
        state = env.snapshot()
        plan = oracle_plan(env, self.config.plan_steps)
        env.restore(state)
        return plan

    def _intervene(self, searches: list[_Search]) -> None:
        batch = []
        for search in searches:
            diagnosis = search.diagnosis
            if diagnosis is None or diagnosis.step is None or diagnosis.correction is None:
                continue
            first = diagnosis.correction.as_message()
            batch.append(
                (search, Job(search.failed, diagnosis.step, first=first, system=search.system))
            )
        if not batch:
            return
        children = self.runner.run([job for _, job in batch])
        for (search, job), child in zip(batch, children, strict=True):
            _note_model_failure(search.result, child)
            success = bool(child.outcome.success)
            search.result.intervene = success
            search.result.attempts.append(
                Attempt(
                    source="intervene",
                    start="decisive",
                    at=job.at,
                    success=success,
                    reward=child.outcome.reward,
                    model_failure=model_failure(child),
                )
            )


def _note_model_failure(result: RecoveryResult, child: Trajectory) -> None:
    """Record a teacher run that ended because its agent or user model call failed."""
    failure = child.metadata.get("model_failure")
    if failure:
        result.failed_calls.append(f"teacher run: {failure}")


def system_prompt(run: Trajectory) -> str | None:
    """The environment's system prompt for a run recorded without a system message."""
    if run.messages and run.messages[0].role == "system":
        return None
    opening = make_env(run).reset(run.task)
    return next((m.text() for m in opening if m.role == "system"), None)
