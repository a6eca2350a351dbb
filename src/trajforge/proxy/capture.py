"""What a call left behind: the answer, its token ids, logprobs and usage.

Non-streamed bodies are read directly. A streamed answer is rebuilt chunk by chunk by
`StreamAssembly` into the body a non-streamed call would have returned, so both are recorded
the same way. Token ids come from vLLM-style fields (`prompt_token_ids`, per-choice
`token_ids`) or, failing those, from `token_id:N` logprob tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from trajforge.proxy.record import CapturedCall, Endpoint, MonitorStop, UpstreamFault
from trajforge.proxy.redact import scrub_request


@dataclass
class Tokens:
    """Token-level data of one call, each None when the upstream did not give it."""

    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None


@dataclass
class CallContext:
    """One call in flight (through the proxy or captured in-process)."""

    session: str
    endpoint: Endpoint
    body: dict[str, Any]
    stream: bool
    started_at: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.perf_counter)

    def captured(
        self,
        status: int,
        response: dict | None = None,
        tokens: Tokens | None = None,
        error: str | None = None,
        fault: UpstreamFault | None = None,
        monitor_stop: MonitorStop | None = None,
    ) -> CapturedCall:
        """The record of the finished call (request scrubbed of secrets)."""
        tokens = tokens or Tokens()
        return CapturedCall.model_construct(
            session=self.session,
            endpoint=self.endpoint,
            request=scrub_request(self.body),
            response=response,
            status=status,
            error=error,
            stream=self.stream,
            started_at=self.started_at,
            latency_s=time.perf_counter() - self.t0,
            prompt_token_ids=tokens.prompt_ids,
            completion_token_ids=tokens.completion_ids,
            logprobs=tokens.logprobs,
            fault=fault,
            monitor_stop=monitor_stop,
        )


def _logprob_entries(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    if isinstance(logprobs.get("content"), list):
        return logprobs["content"]
    if isinstance(logprobs.get("token_logprobs"), list):  # legacy text completions
        tokens = logprobs.get("tokens") or []
        return [
            {"token": t, "logprob": lp}
            for t, lp in zip(tokens, logprobs["token_logprobs"], strict=False)
        ]
    return None


def _ids_from_entries(entries: list[dict[str, Any]]) -> list[int] | None:
    ids = []
    for entry in entries:
        token = str(entry.get("token", ""))
        if not token.startswith("token_id:"):
            return None
        ids.append(int(token.removeprefix("token_id:")))
    return ids


def tokens_of(body: dict[str, Any]) -> Tokens:
    """Token ids and logprobs of the first choice of a chat or text completion body."""
    choices = body.get("choices") or [{}]
    choice = choices[0]
    entries = _logprob_entries(choice)
    completion = choice.get("token_ids")
    if completion is None and entries:
        completion = _ids_from_entries(entries)
    prompt = body.get("prompt_token_ids", choice.get("prompt_token_ids"))
    logprobs = [float(e["logprob"]) for e in entries] if entries else None
    return Tokens(prompt_ids=prompt, completion_ids=completion, logprobs=logprobs)


@dataclass
class StreamAssembly:
    """Rebuilds a complete chat/text completion body from streamed chunks."""

    base: dict[str, Any] = field(default_factory=dict)
    content: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    token_ids: list[int] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    has_token_ids: bool = False
    finish_reason: str | None = None
    done: bool = False

    def add(self, chunk: dict[str, Any]) -> None:
        if not self.base:
            self.base = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
        if "prompt_token_ids" in chunk:
            self.base["prompt_token_ids"] = chunk["prompt_token_ids"]
        if chunk.get("usage"):
            self.base["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:
                self._add_choice(choice)

    def _add_choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self.content.append(delta["content"])
        if choice.get("text"):
            self.text.append(choice["text"])
        for call in delta.get("tool_calls") or []:
            self._add_tool_call(call)
        if choice.get("token_ids") is not None:
            self.has_token_ids = True
            self.token_ids.extend(choice["token_ids"])
        if "prompt_token_ids" in choice:
            self.base["prompt_token_ids"] = choice["prompt_token_ids"]
        self.entries.extend(_logprob_entries(choice) or [])
        self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def _add_tool_call(self, call: dict[str, Any]) -> None:
        slot = self.tool_calls.setdefault(
            call.get("index", len(self.tool_calls)),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        slot["id"] = call.get("id") or slot["id"]
        function = call.get("function") or {}
        slot["function"]["name"] += function.get("name") or ""
        slot["function"]["arguments"] += function.get("arguments") or ""

    def body(self, chat: bool) -> dict[str, Any]:
        """The equivalent non-streamed body."""
        choice: dict[str, Any] = {"index": 0, "finish_reason": self.finish_reason}
        if chat:
            content = "".join(self.content) if self.content or not self.tool_calls else None
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if self.tool_calls:
                message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
            choice["message"] = message
        else:
            choice["text"] = "".join(self.text)
        if self.entries:
            choice["logprobs"] = {"content": self.entries}
        if self.has_token_ids:
            choice["token_ids"] = self.token_ids
        kind = "chat.completion" if chat else "text_completion"
        return {**self.base, "object": kind, "choices": [choice]}
