"""One policy for every command that asks a model: retry, then report the failure and go on.

`ask_parsed` calls the model up to `attempts` times until `parse` accepts its reply. A call
that errors (connection, HTTP status) or a reply `parse` rejects counts as one failed attempt.
After the last attempt it returns the reason instead of raising, so a batch records the
failure with its reason beside that item and continues; callers count and report failures.
`ask_reply` is the same for callers that keep the whole reply (the call record too): an
agent, whose episode then ends with `ModelCallFailed` (the LLM user simulator, which keeps
only the words, asks with `ask_parsed` and ends its episode the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from trajforge.errors import EpisodeEnd, UserError
from trajforge.models.base import ChatModel, ModelReply
from trajforge.models.openai_compat import NotACompletion
from trajforge.schema import MODEL_ERROR, Message, Trajectory

T = TypeVar("T")
ATTEMPTS = 3


@dataclass
class Asked(Generic[T]):
    """The parsed answer, or None with the reason the last attempt failed."""

    value: T | None
    failure: str | None = None


class ModelCallFailed(EpisodeEnd):
    """Ends an episode whose agent or user model failed every attempt (termination reason
    `model_error`; the episode keeps `failure` in `metadata["model_failure"]`)."""

    def __init__(self, failure: str) -> None:
        self.failure = failure
        super().__init__(MODEL_ERROR, failure)


def model_failure(traj: Trajectory) -> str | None:
    """Why the model could not be reached, for a run a model error ended (else None)."""
    if traj.outcome.status != "model_error":
        return None
    return str(traj.metadata.get("model_failure") or "the model call failed")


def require_an_answer(
    failures: Sequence[str | None],
    what: str = "run",
    kept: str = "stored with status model_error, not as failures",
) -> None:
    """A `UserError` when every one of a command's runs ended by a model failure (`failures`
    holds each run's reason, None for a run the model answered): the endpoint failed, not
    the agent, and the command must fail too rather than report runs nobody judged."""
    reasons = [f for f in failures if f]
    if failures and len(reasons) == len(failures):
        count = f"the {what}" if len(failures) == 1 else f"all {len(failures)} {what}s"
        raise UserError(f"{count} ended because the model call failed ({reasons[0]}); {kept}")


def ask_parsed(
    model: ChatModel,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    parse: Callable[[Message], T | None],
    attempts: int = ATTEMPTS,
) -> Asked[T]:
    """The first reply `parse` accepts (its result), or the reason none was."""
    return _ask(model, messages, tools, lambda reply: parse(reply.message), attempts)


def ask_reply(
    model: ChatModel,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    attempts: int = ATTEMPTS,
) -> Asked[ModelReply]:
    """The first reply of a call that did not fail, or the reason every call failed."""
    return _ask(model, messages, tools, lambda reply: reply, attempts)


def _ask(
    model: ChatModel,
    messages: list[Message],
    tools: list[dict[str, Any]] | None,
    parse: Callable[[ModelReply], T | None],
    attempts: int,
) -> Asked[T]:
    import openai

    reason = "no attempt made"
    for _ in range(max(1, attempts)):
        try:
            reply = model.complete(messages, tools)
        except (openai.APIConnectionError, openai.APIStatusError) as exc:
            reason = f"model call to {exc.request.url} failed: {exc}"
            continue
        except NotACompletion as exc:
            reason = str(exc)
            continue
        value = parse(reply)
        if value is not None:
            return Asked(value)
        shown = reply.message.text() or str(reply.message.tool_calls)
        reason = f"unparseable reply: {shown[:200]!r}"
    return Asked(None, f"{reason} (after {max(1, attempts)} attempts)")
