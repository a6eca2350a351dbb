"""Guidance texts for a failed scenario, from four sources in order of cost.

- `correction`: the verified correction of the run's diagnosis, rendered as advice;
- `strategies`: the strategies of a library retrieved for the run's task and the messages
  before the fork (a `StrategyLookup`; `trajforge.strategies.run.RetrievedStrategies`);
- `privileged`: the environment's hidden-state hint when it has one (household: where the
  goal's objects are), then the oracle's plan from the state the teacher starts in (it
  knows the gold actions and the hidden state); flagged `privileged`;
- `llm`: proposed by a chat model from the failed transcript and the verifier's feedback,
  then refined round by round with the feedback of the teacher's last failed attempt.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

import orjson
from pydantic import BaseModel, Field

from trajforge.diagnose.model import Diagnosis
from trajforge.diagnose.transcript import transcript
from trajforge.envs.base import Environment, Oracle
from trajforge.models.base import ChatModel
from trajforge.models.retry import Asked, ask_parsed
from trajforge.schema import Message, Outcome, ToolCall, Trajectory

GuidanceSource = Literal["correction", "strategies", "privileged", "llm"]
SOURCES: tuple[GuidanceSource, ...] = ("correction", "strategies", "privileged", "llm")


class Guidance(BaseModel):
    """One guidance text and where it came from."""

    text: str = Field(description="What the teacher reads in its system prompt.")
    source: GuidanceSource = Field(description="correction, strategies, privileged or llm.")
    privileged: bool = Field(description="Derived from information the agent cannot see.")
    round: int = Field(default=1, description="Refinement round (llm guidance).")


def render_call(call: ToolCall) -> str:
    return f"{call.name}({call.arguments or '{}'})"


def correction_guidance(diagnosis: Diagnosis | None) -> Guidance | None:
    """The diagnosis's correction as advice; None unless it was verified."""
    if diagnosis is None or not diagnosis.verified or diagnosis.correction is None:
        return None
    correction = diagnosis.correction
    if correction.tool_call is not None:
        step = f"call {render_call(correction.tool_call)}"
    else:
        step = f"say: {correction.message}"
    why = diagnosis.explanation.split(". ")[0]
    text = (
        f"A review of an earlier attempt at this task found a mistake ({why}). "
        f"At that point the right step is to {step}."
    )
    return Guidance(text=text, source="correction", privileged=False)


def oracle_plan(env: Environment, max_steps: int = 30) -> list[str] | None:
    """The oracle's actions from the environment's current state until it is done (the
    environment is stepped: pass a copy or restore it after); None without an oracle."""
    if not isinstance(env, Oracle):
        return None
    plan: list[str] = []
    said: list[Message] = []
    env.bind_conversation(said)
    for _ in range(max_steps):
        if env.distance() in (0, None):
            break
        action = env.expert_action()
        if isinstance(action, ToolCall):
            plan.append(f"call {render_call(action)}")
            env.step(action)
        elif isinstance(action, Message):
            plan.append(_say_step(env))
            said.append(action)
        else:
            break
    return plan


class StrategyLookup(Protocol):
    """Strategy texts for a failed run continued after its first `at` messages."""

    def texts(self, failed: Trajectory, at: int) -> list[str]: ...


STRATEGIES_INTRO = "Strategies that worked on similar tasks:"


def strategy_guidance(texts: list[str]) -> Guidance | None:
    """Retrieved strategies as a bulleted guidance; None when none were retrieved."""
    if not texts:
        return None
    lines = "\n".join(f"- {text}" for text in texts)
    return Guidance(text=f"{STRATEGIES_INTRO}\n{lines}", source="strategies", privileged=False)


@runtime_checkable
class PrivilegedHint(Protocol):
    """Optional environment method: hidden state worth a hint (where things are, ...)."""

    def privileged_hint(self) -> str | None: ...


def hidden_state_guidance(env: Environment) -> Guidance | None:
    """The environment's hidden-state hint (privileged), when it offers one."""
    hint = env.privileged_hint() if isinstance(env, PrivilegedHint) else None
    if not hint:
        return None
    return Guidance(text=f"Hidden from you: {hint}", source="privileged", privileged=True)


@runtime_checkable
class RequiredOutputs(Protocol):
    """Optional environment method: facts the agent must state to succeed."""

    def required_outputs(self) -> list[str]: ...


def _say_step(env: Environment) -> str:
    """A final message as a plan step: the facts to state, not the oracle's wording."""
    outputs = env.required_outputs() if isinstance(env, RequiredOutputs) else []
    if outputs:
        return "tell the user: " + "; ".join(outputs)
    return "tell the user that the request is done"


NOTHING_TO_DO = (
    "Nothing needs to change for this task: make no changes to the records and end the "
    "conversation once the user has what they need."
)


def privileged_guidance(plan: list[str] | None) -> Guidance | None:
    """The oracle's plan as a numbered hint (privileged: it reads the gold and hidden state);
    an empty plan (nothing left to do) says so; None: no oracle."""
    if plan is None:
        return None
    if not plan:
        return Guidance(text=NOTHING_TO_DO, source="privileged", privileged=True)
    steps = "\n".join(f"{i}. {step}" for i, step in enumerate(plan, 1))
    return Guidance(
        text=f"A plan that completes this task from here:\n{steps}",
        source="privileged",
        privileged=True,
    )


PROPOSER_PROMPT = """You help an agent that failed a task. You see its failed attempt and
what the verifier said. Write short, concrete guidance (at most 6 sentences) that would
make the next attempt succeed: what to check, which step to take or avoid. Do not write the
agent's messages for it. Answer with the guidance only."""


class Feedback(BaseModel):
    """What the verifier said about one failed attempt."""

    reward: float | None = None
    details: dict = Field(default_factory=dict)

    @classmethod
    def of(cls, outcome: Outcome) -> Feedback:
        return cls(reward=outcome.reward, details=outcome.details)

    def text(self) -> str:
        details = orjson.dumps(self.details, default=str).decode()[:1500]
        return f"reward {self.reward}; verifier details: {details}"


class LLMGuidanceProposer:
    """Proposes and refines guidance with a chat model (any OpenAI-compatible endpoint)."""

    def __init__(self, model: ChatModel, max_chars: int = 1500) -> None:
        self.model = model
        self.max_chars = max_chars
        self.name = f"llm-proposer:{model.name}"

    def propose(
        self,
        failed: Trajectory,
        feedback: Feedback,
        previous: Guidance | None = None,
        attempt: Trajectory | None = None,
        attempt_feedback: Feedback | None = None,
    ) -> Asked[Guidance]:
        """Guidance from the model (the shared retry policy: an empty reply or a failed call
        is retried; after the last attempt the reason comes back instead)."""
        parts = [
            f"Task: {failed.task.instruction or failed.task.id}",
            "Failed attempt:\n" + transcript(failed.messages, self.max_chars),
            "Verifier: " + feedback.text(),
        ]
        if previous is not None:
            parts.append(f"Guidance tried before:\n{previous.text}")
        if attempt is not None and attempt_feedback is not None:
            parts.append("The attempt with that guidance:\n" + transcript(attempt.messages, 400))
            parts.append("Verifier on that attempt: " + attempt_feedback.text())
        prompt = [
            Message(role="system", content=PROPOSER_PROMPT),
            Message(role="user", content="\n\n".join(parts)),
        ]
        round_ = previous.round + 1 if previous is not None else 1

        def parse(reply: Message) -> Guidance | None:
            text = reply.text().strip()
            if not text:
                return None
            return Guidance(text=text, source="llm", privileged=False, round=round_)

        return ask_parsed(self.model, prompt, None, parse)
