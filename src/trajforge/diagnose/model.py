"""The result of error-to-training on one failed run: a `Diagnosis`.

A diagnosis names the decisive error (a message index), its category, an explanation that
cites evidence by message index, a proposed correction for that step, and the verdict of
verifying the correction.
"""

from __future__ import annotations

import hashlib
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trajforge.diagnose.taxonomy import Category
from trajforge.schema import Message, ToolCall

Method = Literal["counterfactual", "heuristic", "llm", "prior", "calibrated", "trained"]
VerifyMethod = Literal["fork", "evidence", "none"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Evidence(_Model):
    """A message the explanation relies on."""

    message_index: int = Field(description="Index of the cited message.")
    quote: str = Field(
        default="", description="A short excerpt of that message (checked on verification)."
    )
    note: str = Field(default="", description="What this message shows.")


class Correction(_Model):
    """What the agent should have done at the decisive step."""

    tool_call: ToolCall | None = Field(default=None, description="The corrected tool call.")
    message: str | None = Field(
        default=None, description="The corrected text message (when the fix is not a call)."
    )
    source: str = Field(description="Where it came from: oracle, gold, heuristic, llm.")

    def summary(self) -> dict:
        """`{tool_call: {name, arguments}}` or `{message}`, with its source."""
        if self.tool_call is not None:
            call = {"name": self.tool_call.name, "arguments": self.tool_call.arguments}
            return {"tool_call": call, "source": self.source}
        return {"message": self.message, "source": self.source}

    def text(self) -> str:
        """One line: `name(arguments)` or the message."""
        if self.tool_call is not None:
            return f"{self.tool_call.name}({self.tool_call.arguments})"
        return self.message or ""

    def as_message(self) -> Message:
        """The correction as the assistant message that replaces the decisive one."""
        calls = [self.tool_call] if self.tool_call else None
        return Message(role="assistant", content=self.message, tool_calls=calls)


class Verification(_Model):
    """The verdict on a correction and how it was reached."""

    method: VerifyMethod = Field(
        description="fork: replayed and continued by the expert; evidence: cited messages and "
        "the call's schema checked; none: nothing could be checked."
    )
    verified: bool = Field(description="The correction passed the check.")
    detail: str = Field(default="", description="Why it passed or failed.")
    fork_id: str | None = Field(default=None, description="The fork trajectory, when one ran.")


DeviationReason = Literal["distance_increased", "wrong_statement", "no_return"]


class Deviation(_Model):
    """The first message where the privileged expert would have acted otherwise, in a way
    that matters (forkable runs; see `trajforge.diagnose.deviation`)."""

    message_index: int = Field(description="Message index of the first deviation.")
    reason: DeviationReason = Field(
        description="distance_increased: the oracle distance rose after the message; "
        "wrong_statement: the message states a value other than an answer the task requires "
        "(never stated correctly later); no_return: none earlier, so it is the point of no "
        "return itself."
    )
    detail: str = Field(default="", description="What the oracle saw there.")
    correction: Correction | None = Field(
        default=None, description="What the expert would have sent instead."
    )
    repaired: bool | None = Field(
        default=None,
        description="Fork at the message with the correction, the run's own later turns "
        "replayed: the fork succeeds (the change alone repairs the run). None: not tried.",
    )
    repair_detail: str = Field(default="", description="How the repair fork ended.")

    def summary(self) -> dict:
        """The JSON listing form."""
        return {
            "message": self.message_index,
            "reason": self.reason,
            "detail": self.detail,
            "correction": self.correction.summary() if self.correction else None,
            "repaired": self.repaired,
        }


class Diagnosis(_Model):
    """The decisive error of one failed run, its category, explanation and correction."""

    id: str = Field(default="", description="Derived from trajectory id and method.")
    trajectory_id: str = Field(description="The diagnosed trajectory.")
    method: Method = Field(description="How the error was localized.")
    step: int | None = Field(
        description="Message index of the decisive error (None: not localized)."
    )
    agent: str | None = Field(default=None, description="Who wrote that message.")
    category: Category | None = Field(default=None, description="Taxonomy category.")
    explanation: str = Field(default="", description="Why this is the decisive error.")
    evidence: list[Evidence] = Field(default_factory=list, description="Cited messages.")
    correction: Correction | None = Field(default=None, description="The proposed fix.")
    verification: Verification | None = Field(default=None, description="Its verdict.")
    omission: bool = Field(
        default=False,
        description="The error is something the agent failed to do at `step` (ending early).",
    )
    confidence: float | None = Field(
        default=None,
        description="Estimated chance that `step` is exactly right (calibrated on tuning data "
        "where the method was fitted; 1.0 for the counterfactual oracle).",
    )
    abstained: bool = Field(
        default=False,
        description="The method's own answer fell below its confidence threshold; `step` and "
        "`agent` come from the calibrated prior instead.",
    )
    point_of_no_return: int | None = Field(
        default=None,
        description="Counterfactual method: the last message from which the expert still "
        "succeeds (forked there, keeping the messages before it), not after it; equals `step`.",
    )
    first_deviation: Deviation | None = Field(
        default=None,
        description="Counterfactual method: the first message where the expert would have "
        "acted otherwise and the change matters; at or before the point of no return.",
    )
    details: dict = Field(default_factory=dict, description="Method-specific data (V(t)...).")
    created_at: float = Field(default_factory=time.time, description="Unix time.")

    def with_id(self) -> Diagnosis:
        key = f"{self.trajectory_id}:{self.method}".encode()
        self.id = hashlib.sha256(key).hexdigest()[:20]
        return self

    @property
    def verified(self) -> bool:
        return bool(self.verification and self.verification.verified)

    def summary(self) -> dict:
        """The short JSON listing form (CLI `--json`); message indices are named `*_message`."""
        deviation = self.first_deviation
        return {
            "id": self.id,
            "trajectory_id": self.trajectory_id,
            "decisive_message": self.step,
            "point_of_no_return": self.point_of_no_return,
            "first_deviation": deviation.summary() if deviation else None,
            "agent": self.agent,
            "category": self.category,
            "correction": self.correction.summary() if self.correction else None,
            "verified": self.verified,
            "verify_method": self.verification.method if self.verification else None,
            "verification": self.verification.detail if self.verification else None,
            "method": self.method,
            "omission": self.omission,
            "confidence": self.confidence,
            "abstained": self.abstained,
            "evidence_messages": [e.message_index for e in self.evidence],
            "failure": self.failure(),
        }

    def failure(self) -> str | None:
        """Why a model-backed method gave no diagnosis: its call failed after retries, or its
        answer was invalid (`details.failed_call`, `details.invalid`); None otherwise."""
        for key in ("failed_call", "invalid"):
            if self.details.get(key):
                return f"{key.replace('_', ' ')}: {self.details[key]}"
        return None


def no_decisive_error(trajectory_id: str, method: Method) -> Diagnosis:
    """The diagnosis of a method that found no decisive error in a failed run."""
    return Diagnosis(
        trajectory_id=trajectory_id,
        method=method,
        step=None,
        explanation="the method found no decisive error in this run",
    )
