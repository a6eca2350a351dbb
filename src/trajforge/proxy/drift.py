"""Drift audit: is this prompt the previous prompt plus its completion, extended?

A trainer that treats a session as one growing sequence needs every prompt to start with the
previous prompt and completion, token for token. Harnesses break that by rewriting history
(editing or dropping messages, compacting context) or, more quietly, when the chat template
re-tokenizes text differently from how it was sampled. Each call is compared with the last
successful call of its session, by token ids when both calls have them and by messages always.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from trajforge.schema import common_prefix_length


def normalize_message(message: dict[str, Any]) -> tuple:
    """The parts of a chat message that reach the model (drops ids and harness extras)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    calls = tuple(
        (
            str((c.get("function") or c).get("name", "")),
            str((c.get("function") or c).get("arguments", "")),
        )
        for c in message.get("tool_calls") or []
    )
    return (message.get("role"), content or "", calls, message.get("tool_call_id"))


class DriftAudit(BaseModel):
    """The audit of one call against the last successful call of its session."""

    status: str = Field(
        description="first, extends, rewritten (history edited), compacted (history "
        "shortened), retokenized (same messages, different tokens) or side (a side call "
        "outside the main conversation, not compared)."
    )
    by_tokens: bool | None = Field(
        default=None, description="Token-level extension (None: token ids unknown)."
    )
    common_prefix_tokens: int | None = Field(
        default=None, description="Tokens shared with the expected prefix."
    )
    common_prefix_messages: int = Field(description="Messages shared with the expected prefix.")


def audit(
    previous_messages: list[tuple] | None,
    previous_tokens: list[int] | None,
    messages: list[tuple],
    prompt_tokens: list[int] | None,
) -> DriftAudit:
    """Compare a prompt with the previous prompt + completion (messages and tokens)."""
    if previous_messages is None:
        return DriftAudit(status="first", common_prefix_messages=0)
    shared = common_prefix_length(previous_messages, messages)
    by_tokens = shared_tokens = None
    if previous_tokens is not None and prompt_tokens is not None:
        shared_tokens = common_prefix_length(previous_tokens, prompt_tokens)
        by_tokens = shared_tokens == len(previous_tokens)
    if shared < len(previous_messages):
        status = "compacted" if len(messages) < len(previous_messages) else "rewritten"
    elif by_tokens is False:
        status = "retokenized"
    else:
        status = "extends"
    return DriftAudit(
        status=status,
        by_tokens=by_tokens,
        common_prefix_tokens=shared_tokens,
        common_prefix_messages=shared,
    )
