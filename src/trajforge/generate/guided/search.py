"""Guidance search: turn each failed run into a clean passing demonstration, if it can.

For a failed run (with its diagnosis, when there is one), the sources are tried in order of
cost (`RecoverConfig.sources`): the verified correction as advice, the oracle's privileged
plan, then chat-model guidance refined for up to `llm_rounds` rounds. Each guidance is
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

from collections.abc import Callable, Iterator
from typing import Literal, get_args

from pydantic import BaseModel, Field

from trajforge.agents.base import Policy, UserSimulator
from trajforge.diagnose.model import Diagnosis
from trajforge.envs.replay import make_env, replay_to
from trajforge.generate.guided.guidance import (
    SOURCES,
    Feedback,
    Guidance,
    GuidanceSource,
    LLMGuidanceProposer,
    correction_guidance,
    hidden_state_guidance,
    oracle_plan,
    privileged_guidance,
)
from trajforge.generate.guided.leak import LeakConfig, find_leaks
from trajforge.generate.guided.teacher import GuidedPolicy, InterveningPolicy, strip
from trajforge.rollout.episode import Limits
from trajforge.rollout.fork import ForkOptions, fork
from trajforge.schema import Trajectory

StartMode = Literal["decisive", "start"]
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


class GuidedRecovery:
    """The search for one run at a time; `teacher` and `user` make fresh agents per run."""

    def __init__(
        self,
        teacher: Callable[[], Policy],
        user: Callable[[], UserSimulator],
        config: RecoverConfig | None = None,
        proposer: LLMGuidanceProposer | None = None,
    ) -> None:
        self.teacher = teacher
        self.user = user
        self.config = config or RecoverConfig()
        self.proposer = proposer

    def recover(
        self, failed: Trajectory, diagnosis: Diagnosis | None
    ) -> tuple[RecoveryResult, Trajectory | None]:
        """The result and the clean demonstration (None when nothing passed cleanly)."""
        decisive = diagnosis.step if diagnosis is not None else None
        result = RecoveryResult(
            trajectory_id=failed.id, environment=failed.task.environment, decisive=decisive
        )
        demo = self._search(failed, diagnosis, result)
        if self.config.intervene:
            result.intervene = self._intervene(failed, diagnosis, result)
        return result, demo

    def _starts(self, decisive: int | None) -> list[tuple[StartMode, int]]:
        starts: list[tuple[StartMode, int]] = []
        for mode in self.config.starts:
            if mode == "start":
                starts.append((mode, 0))
            elif decisive is not None:
                starts.append((mode, decisive))
        return starts

    def _search(
        self, failed: Trajectory, diagnosis: Diagnosis | None, result: RecoveryResult
    ) -> Trajectory | None:
        for source in self.config.sources:
            found = False
            for start, at in self._starts(result.decisive):
                for guidance, attempt in self._attempts(source, failed, diagnosis, start, at):
                    found = True
                    result.rounds += 1
                    result.attempts.append(attempt.summary)
                    if not attempt.summary.success:
                        continue
                    leaks = find_leaks(attempt.run, guidance, at, self.config.leak)
                    if leaks:
                        attempt.summary.leaks = leaks
                        result.leak_rejections += 1
                        continue
                    return self._keep(failed, guidance, attempt, result)
            if not found:
                result.unavailable.append(source)
        return None

    def _attempts(
        self, source: GuidanceSource, failed: Trajectory, diagnosis, start: StartMode, at: int
    ) -> Iterator[tuple[Guidance, _Run]]:
        if source == "correction":
            guidance = correction_guidance(diagnosis)
            if guidance is not None:
                yield guidance, self._run(failed, guidance, start, at)
        elif source == "privileged":
            for guidance in self._privileged(failed, at):
                yield guidance, self._run(failed, guidance, start, at)
        elif self.proposer is not None:
            yield from self._llm_rounds(failed, start, at)

    def _llm_rounds(self, failed: Trajectory, start: StartMode, at: int):
        assert self.proposer is not None
        feedback = Feedback.of(failed.outcome)
        guidance: Guidance | None = None
        run: _Run | None = None
        for _ in range(self.config.llm_rounds):
            guidance = self.proposer.propose(
                failed,
                feedback,
                previous=guidance,
                attempt=run.run if run else None,
                attempt_feedback=Feedback.of(run.run.outcome) if run else None,
            )
            run = self._run(failed, guidance, start, at)
            yield guidance, run

    def _privileged(self, failed: Trajectory, at: int) -> list[Guidance]:
        """The hidden-state hint (if the environment has one), then the oracle's plan, both
        from the state after the first `at` messages."""
        env = make_env(failed)
        replay_to(env, failed, at)
        hint = hidden_state_guidance(env)
        plan = privileged_guidance(oracle_plan(env, self.config.plan_steps))
        return [g for g in (hint, plan) if g is not None]

    def _run(self, failed: Trajectory, guidance: Guidance, start: StartMode, at: int) -> _Run:
        policy = GuidedPolicy(self.teacher(), guidance, system_prompt(failed))
        child = self._fork(failed, at, policy)
        summary = Attempt(
            source=guidance.source,
            start=start,
            at=at,
            round=guidance.round,
            success=bool(child.outcome.success),
            reward=child.outcome.reward,
        )
        return _Run(child, summary)

    def _fork(self, failed: Trajectory, at: int, policy: Policy) -> Trajectory:
        options = ForkOptions(limits=Limits(max_steps=self.config.max_steps), harness=HARNESS)
        return fork(failed, at, policy, user=self.user(), options=options)

    def _keep(
        self, failed: Trajectory, guidance: Guidance, attempt: _Run, result: RecoveryResult
    ) -> Trajectory:
        summary = attempt.summary
        provenance = {
            "parent": failed.id,
            "source": guidance.source,
            "privileged": guidance.privileged,
            "guidance": guidance.text,
            "rounds": result.rounds,
            "round": guidance.round,
            "start": summary.start,
            "at": summary.at,
            "teacher": attempt.run.source.model,
        }
        demo = strip(attempt.run, guidance, summary.at, provenance).with_id()
        result.recovered = True
        result.source = guidance.source
        result.privileged = guidance.privileged
        result.start = summary.start
        result.demo_id = demo.id
        return demo

    def _intervene(
        self, failed: Trajectory, diagnosis: Diagnosis | None, result: RecoveryResult
    ) -> bool | None:
        if diagnosis is None or diagnosis.step is None or diagnosis.correction is None:
            return None
        teacher = GuidedPolicy(self.teacher(), None, system_prompt(failed))
        policy = InterveningPolicy(teacher, diagnosis.correction.as_message())
        child = self._fork(failed, diagnosis.step, policy)
        success = bool(child.outcome.success)
        result.attempts.append(
            Attempt(
                source="intervene",
                start="decisive",
                at=diagnosis.step,
                success=success,
                reward=child.outcome.reward,
            )
        )
        return success


def system_prompt(run: Trajectory) -> str | None:
    """The environment's system prompt for a run recorded without a system message."""
    if run.messages and run.messages[0].role == "system":
        return None
    opening = make_env(run).reset(run.task)
    return next((m.text() for m in opening if m.role == "system"), None)


class _Run:
    """A teacher run and its summary."""

    def __init__(self, run: Trajectory, summary: Attempt) -> None:
        self.run = run
        self.summary = summary
