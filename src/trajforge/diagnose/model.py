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
        """The short JSON listing form (CLI `--json`)."""
        return {
            "id": self.id,
            "trajectory_id": self.trajectory_id,
            "step": self.step,
            "agent": self.agent,
            "category": self.category,
            "verified": self.verified,
            "verify_method": self.verification.method if self.verification else None,
            "method": self.method,
            "omission": self.omission,
            "confidence": self.confidence,
            "abstained": self.abstained,
        }


def no_decisive_error(trajectory_id: str, method: Method) -> Diagnosis:
    """The diagnosis of a method that found no decisive error in a failed run."""
    return Diagnosis(
        trajectory_id=trajectory_id,
        method=method,
        step=None,
        explanation="the method found no decisive error in this run",
    )
