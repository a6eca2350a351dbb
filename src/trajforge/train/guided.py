"""Guided recovery with a trained checkpoint as the teacher, in lock-step.

`LockstepRunner` is a `Runner` for `GuidedRecovery`: it continues a whole stage of the
search (every failed run's job under its guidance, or its intervention) with one batched
generation per step (`run_lockstep`). The guidance is written into each continuation's
system message, where the model reads it; `strip` takes it out again before the leak check
and before a demonstration is kept, so no demonstration carries it.
"""

from __future__ import annotations

from trajforge.envs import make_env
from trajforge.envs.base import Environment
from trajforge.envs.replay import replay_calls
from trajforge.generate.guided import Job, with_guidance
from trajforge.generate.guided.search import HARNESS
from trajforge.schema import ForkParent, Message, Outcome, Source, TerminationReason, Trajectory
from trajforge.serve.student import Student
from trajforge.train.evaluate import run_lockstep


class LockstepRunner:
    """Runs guided-recovery jobs with `student`, each for up to `max_steps` more steps."""

    def __init__(self, student: Student, max_steps: int, max_new_tokens: int | None = None) -> None:
        """`max_new_tokens`: per agent step (default: the student's `turn_tokens`)."""
        self.student = student
        self.max_steps = max_steps
        self.max_new_tokens = max_new_tokens

    def run(self, jobs: list[Job]) -> list[Trajectory]:
        starts = [self.start(job) for job in jobs]
        running = [(env, child) for env, child in starts if not child.outcome.termination_reason]
        if running:
            run_lockstep(self.student, running, self.max_steps, max_new_tokens=self.max_new_tokens)
        return [child for _, child in starts]

    def start(self, job: Job) -> tuple[Environment, Trajectory]:
        """The job's environment and continuation before the model's first step: the failed
        run's first `at` messages (its opening when `at` falls inside it), the guidance in
        the system message, and the intervention sent and answered."""
        failed = job.failed
        env = make_env(failed)
        opening = env.reset(failed.task)
        replay_calls(env, failed, job.at)
        kept = failed.messages[: job.at] if job.at >= len(opening) else opening
        child = Trajectory(
            task=failed.task,
            source=Source(
                harness=HARNESS, model=self.student.name, run=f"fork:{failed.id}@{job.at}"
            ),
            messages=with_guidance([m.model_copy() for m in kept], job.guidance, job.system),
            tools=list(failed.tools) or env.tools,
            parent=ForkParent(trajectory_id=failed.id, message_index=job.at),
            metadata={"fork": {"parent": failed.id, "at": job.at, "policy": self.student.name}},
        )
        if job.first is not None:
            ended = _send(env, child, job.first)
            if ended is not None:
                child.outcome = _judged(env, ended)
        return env, child


def _send(env: Environment, child: Trajectory, message: Message) -> TerminationReason | None:
    """Append `message` and the answers to its tool calls; why the episode ended, if it did."""
    child.messages.append(message)
    if not message.tool_calls:
        return "agent_stop"
    done = False
    for call in message.tool_calls or []:
        result = env.step(call)
        child.messages.append(
            Message(role="tool", content=result.content, tool_call_id=call.id, name=call.name)
        )
        done = done or result.done
    return "env_done" if done else None


def _judged(env: Environment, reason: TerminationReason) -> Outcome:
    outcome = env.evaluate()
    outcome.termination_reason = reason
    return outcome
