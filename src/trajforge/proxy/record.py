"""The record of one proxied call, as written to the `proxy_calls` table."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trajforge.schema import UpstreamFaultKind, common_prefix_length

Endpoint = Literal["chat/completions", "completions"]


def _unset(value: object) -> bool:
    return value is None


class UpstreamFault(BaseModel):
    """An upstream failure: injected by the proxy or observed from the real upstream."""

    model_config = ConfigDict(extra="forbid")

    kind: UpstreamFaultKind = Field(description="upstream_timeout, upstream_5xx, ...")
    detail: str = Field(description="What happened, as the client was told.")
    injected: bool = Field(description="True when the proxy injected it on purpose.")


class MonitorStop(BaseModel):
    """The early-failure monitor's decision to stop a session, kept on each refused call."""

    model_config = ConfigDict(extra="forbid")

    risk: float = Field(description="Failure risk of the session after its last completed step.")
    threshold: float = Field(description="The stop threshold the risk reached.")
    step: int = Field(description="Completed agent steps when the session was stopped.")
    model: str = Field(description="The monitor's model file.")


class CapturedCall(BaseModel):
    """Everything recorded about one call; secrets are scrubbed before this is built."""

    model_config = ConfigDict(extra="forbid")

    session: str = Field(description="Session name (URL prefix, header, or the default).")
    endpoint: Endpoint = Field(description="Which OpenAI endpoint was called.")
    request: dict[str, Any] = Field(description="The client's request body, secrets removed.")
    response: dict[str, Any] | None = Field(
        default=None, description="The upstream's full answer (streams rebuilt into one body)."
    )
    status: int = Field(description="HTTP status the client received.")
    error: str | None = Field(default=None, description="Error text the client received.")
    stream: bool = Field(default=False, description="Whether the answer was streamed.")
    started_at: float = Field(description="Unix time the proxy received the call.")
    latency_s: float = Field(description="Seconds until the answer was complete.")
    prompt_token_ids: list[int] | None = Field(default=None, description="From the upstream.")
    completion_token_ids: list[int] | None = Field(default=None, description="From the upstream.")
    logprobs: list[float] | None = Field(default=None, description="Per completion token.")
    fault: UpstreamFault | None = Field(default=None, description="Upstream failure, if any.")
    monitor_stop: MonitorStop | None = Field(
        default=None,
        description="Set when the call was refused, not forwarded: its session was stopped "
        "by the early-failure monitor.",
    )

    messages_kept: int | None = Field(
        default=None,
        exclude_if=_unset,
        description="Stored form only: the request's first N messages are the previous call's "
        "(its `messages` holds the rest).",
    )
    prompt_ids_kept: int | None = Field(
        default=None,
        exclude_if=_unset,
        description="Stored form only: the first N prompt token ids are the previous call's "
        "prompt + completion ids (`prompt_token_ids` holds the rest).",
    )
    response_prompt_ids: Literal["body", "choice"] | None = Field(
        default=None,
        exclude_if=_unset,
        description="Stored form only: the answer's `prompt_token_ids` (in its body, or in its "
        "first choice) are the call's `prompt_token_ids` and are left out of `response`.",
    )

    def prompt_messages(self) -> list[dict[str, Any]]:
        """The chat messages sent (a text prompt counts as one user message)."""
        if self.endpoint == "chat/completions":
            return list(self.request.get("messages") or [])
        prompt = self.request.get("prompt", "")
        text = prompt[0] if isinstance(prompt, list) and prompt else prompt
        return [{"role": "user", "content": text if isinstance(text, str) else str(text)}]

    def answer_message(self) -> dict[str, Any] | None:
        """The assistant message of a successful answer."""
        if self.error is not None or not self.response:
            return None
        if self.endpoint == "chat/completions":
            return chat_answer_message(self.response)
        choice = (self.response.get("choices") or [None])[0]
        if not isinstance(choice, dict):
            return None
        return {"role": "assistant", "content": choice.get("text", "")}


def chat_answer_message(response: dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message of a chat-completions answer body (its first choice)."""
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    return message if isinstance(message, dict) else None


def _token_base(call: CapturedCall | None) -> list[int] | None:
    if call is None or call.prompt_token_ids is None:
        return None
    return call.prompt_token_ids + (call.completion_token_ids or [])


def _chat_messages(call: CapturedCall | None) -> list | None:
    if call is None or call.endpoint != "chat/completions":
        return None
    messages = call.request.get("messages")
    return messages if isinstance(messages, list) else None


def stored_call(
    call: CapturedCall, previous: CapturedCall | None, prompt_ids_shared: int | None = None
) -> CapturedCall:
    """`call` as the `proxy_calls` row keeps it: what repeats `previous` (the session's call
    before it) is kept as counts, so a row grows with the call's new messages and tokens only.
    `prompt_ids_shared`: how many prompt ids repeat `previous`'s prompt + completion ids,
    when the caller has counted them."""
    update: dict = {}
    base, messages = _chat_messages(previous), _chat_messages(call)
    if base and messages:
        kept = common_prefix_length(base, messages)
        if kept:
            update["request"] = {**call.request, "messages": messages[kept:]}
            update["messages_kept"] = kept
    ids_kept = prompt_ids_shared
    if ids_kept is None:
        ids_base = _token_base(previous)
        ids = call.prompt_token_ids
        ids_kept = common_prefix_length(ids_base, ids) if ids_base and ids else 0
    if ids_kept and call.prompt_token_ids:
        update["prompt_token_ids"] = call.prompt_token_ids[ids_kept:]
        update["prompt_ids_kept"] = ids_kept
    update |= _without_prompt_ids(call)
    return call.model_copy(update=update) if update else call


def _without_prompt_ids(call: CapturedCall) -> dict[str, Any]:
    """The update that leaves out of the answer the prompt ids it repeats (upstreams such as
    vLLM send every prompt's ids back: kept in each row, a session's rows grew with the
    square of its length)."""
    response, ids = call.response, call.prompt_token_ids
    if not response or not ids:
        return {}
    if _same(response.get("prompt_token_ids"), ids):
        slim = {k: v for k, v in response.items() if k != "prompt_token_ids"}
        return {"response": slim, "response_prompt_ids": "body"}
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        return {}
    first, *rest = choices
    if isinstance(first, dict) and _same(first.get("prompt_token_ids"), ids):
        slim_first = {k: v for k, v in first.items() if k != "prompt_token_ids"}
        slim = {**response, "choices": [slim_first, *rest]}
        return {"response": slim, "response_prompt_ids": "choice"}
    return {}


def _same(ids: Any, other: list[int]) -> bool:
    """`ids == other`, at once when they are the same list (as the proxy's answers hold)."""
    return ids is other or ids == other


def _with_prompt_ids(response: dict[str, Any], where: str, ids: list[int]) -> dict[str, Any]:
    """Undo `_without_prompt_ids`."""
    if where == "body":
        return {**response, "prompt_token_ids": ids}
    first, *rest = response["choices"]
    return {**response, "choices": [{**first, "prompt_token_ids": ids}, *rest]}


def loaded_call(stored: CapturedCall, previous: CapturedCall | None) -> CapturedCall:
    """Undo `stored_call`, given the session's previous call (already loaded)."""
    update: dict = {"messages_kept": None, "prompt_ids_kept": None}
    if stored.messages_kept is not None:
        base = _chat_messages(previous) or []
        tail = stored.request.get("messages") or []
        update["request"] = {**stored.request, "messages": base[: stored.messages_kept] + tail}
    if stored.prompt_ids_kept is not None:
        ids_base = _token_base(previous) or []
        tail = stored.prompt_token_ids or []
        update["prompt_token_ids"] = ids_base[: stored.prompt_ids_kept] + tail
    if stored.response_prompt_ids is not None and stored.response is not None:
        ids = update.get("prompt_token_ids", stored.prompt_token_ids) or []
        update["response"] = _with_prompt_ids(stored.response, stored.response_prompt_ids, ids)
        update["response_prompt_ids"] = None
    return stored.model_copy(update=update)
