"""The record of one proxied call, as written to the `proxy_calls` table."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Endpoint = Literal["chat/completions", "completions"]


class UpstreamFault(BaseModel):
    """An upstream failure: injected by the proxy or observed from the real upstream."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="upstream_timeout, upstream_5xx, upstream_malformed, ...")
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
