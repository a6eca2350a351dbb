"""A chat model behind any OpenAI-compatible endpoint (vLLM, SGLang, OpenAI, the proxy...)."""

from __future__ import annotations

import os
import ssl
import sys
import threading
import time
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.errors import UserError
from trajforge.models.base import ModelReply
from trajforge.openai_wire import to_message
from trajforge.schema import LLMCall, Message, Usage


class OpenAIModelConfig(BaseModel):
    """Where and how to call the model."""

    base_url: str | None = Field(
        default=None,
        description="Endpoint base URL, e.g. http://127.0.0.1:8000/v1 "
        "(default: $TRAJFORGE_BASE_URL, then $OPENAI_BASE_URL).",
    )
    api_key: str | None = Field(
        default=None, description="API key (default: $TRAJFORGE_API_KEY, then $OPENAI_API_KEY)."
    )
    model: str | None = Field(default=None, description="Model name (default: $TRAJFORGE_MODEL).")
    temperature: float = Field(default=0.0, description="Sampling temperature.")
    max_tokens: int | None = Field(default=None, description="Completion token limit.")
    seed: int | None = Field(default=None, description="Sampling seed, for servers that take one.")
    timeout_s: float = Field(default=120.0, description="Seconds before a call times out.")
    max_retries: int = Field(default=3, description="Retries on transport errors and 5xx.")
    logprobs: bool = Field(default=False, description="Ask for token logprobs.")


def _resolve(config: OpenAIModelConfig) -> OpenAIModelConfig:
    env = os.environ.get
    resolved = config.model_copy(
        update={
            "base_url": config.base_url or env("TRAJFORGE_BASE_URL") or env("OPENAI_BASE_URL"),
            "api_key": config.api_key or env("TRAJFORGE_API_KEY") or env("OPENAI_API_KEY"),
            "model": config.model or env("TRAJFORGE_MODEL"),
        }
    )
    if not resolved.base_url or not resolved.model:
        raise UserError(
            "an OpenAI-compatible model needs a base URL and a model name: pass --base-url and "
            "--llm-model, or set TRAJFORGE_BASE_URL and TRAJFORGE_MODEL"
        )
    return resolved


def message_to_openai(message: Message) -> dict[str, Any]:
    """The OpenAI request form of a message (drops trajforge's `extra`)."""
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        data["name"] = message.name
    if message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    return data


class NotACompletion(Exception):
    """An endpoint answered a chat request (status 2xx) with something other than a chat
    completion: a failed call, as an error status is."""


_THREAD = threading.local()


_SSL_CONTEXT: list[ssl.SSLContext] = []
_SSL_CONTEXT_LOCK = threading.Lock()


def ssl_context() -> ssl.SSLContext:
    """The TLS context of this process's model clients, as the SDK's HTTP library (httpx, or
    httpx2 in later SDKs) makes its default one: its certificate store, `SSL_CERT_FILE` and
    `SSL_CERT_DIR` honoured. Made once, under a lock: an RL iteration's episode threads all
    ask for it at once, and each loading the store itself cost them 7 s of CPU together."""
    import openai

    with _SSL_CONTEXT_LOCK:
        if not _SSL_CONTEXT:
            library = openai.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0]
            _SSL_CONTEXT.append(sys.modules[library].create_ssl_context())
        return _SSL_CONTEXT[0]


def thread_http_client() -> Any:
    """The connection pool the model clients made on this thread send through (the RL
    rollouts post their outcomes through it too): one a thread, made once (timeouts and
    retries stay per client). Not one a client: making a pool loads
    the certificate store, about 27 ms, an episode's worth of model calls on a small served
    model (`ssl_context` loads it once a process). Not one a process: the pool walks all of
    its connections to place every request and again at every answer; with an RL
    iteration's 128 episode threads on one pool, the rollout process spent 10.3-11.2 ms of CPU
    a model call, and 7.1 with a pool a thread (and a client a thread for the outcomes)."""
    import openai

    client = getattr(_THREAD, "http_client", None)
    if client is None:
        client = _THREAD.http_client = openai.DefaultHttpxClient(verify=ssl_context())
    return client


class OpenAICompatibleModel:
    """Calls `/chat/completions` with the openai SDK; records usage, latency and logprobs.

    The request goes out as the JSON it is and the answer is read as JSON (the SDK's `post`,
    with its retries, timeouts and errors): its typed `create` checks and converts every
    message of the request and builds typed objects of the answer, about 5 ms of CPU a call,
    six times the HTTP exchange itself."""

    def __init__(self, config: OpenAIModelConfig | None = None) -> None:
        import openai

        self.config = _resolve(config or OpenAIModelConfig())
        self.name = self.config.model or "openai"
        self._client = openai.OpenAI(
            base_url=self.config.base_url,
            api_key=self.config.api_key or "not-needed",
            timeout=self.config.timeout_s,
            max_retries=self.config.max_retries,
            http_client=thread_http_client(),
        )

    def complete(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> ModelReply:
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": [message_to_openai(m) for m in messages],
            "temperature": self.config.temperature,
        }
        if tools:
            request["tools"] = tools
        if self.config.max_tokens:
            request["max_tokens"] = self.config.max_tokens
        if self.config.seed is not None:
            request["seed"] = self.config.seed
        if self.config.logprobs:
            request["logprobs"] = True
        started = time.time()
        answer = self._client.post("/chat/completions", body=request, cast_to=bytes)
        latency = time.time() - started
        body = self._completion(answer)
        choice = body["choices"][0]
        message = to_message(choice["message"])
        message.extra.pop("refusal", None)
        return ModelReply(message=message, call=call_record(request, body, started, latency))

    def _completion(self, answer: bytes) -> dict[str, Any]:
        """The answer as a chat completion without null fields, or `NotACompletion`."""
        try:
            body = orjson.loads(answer)
        except orjson.JSONDecodeError:
            body = None
        choices = body.get("choices") if isinstance(body, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        if not (isinstance(first, dict) and isinstance(first.get("message"), dict)):
            shown = answer[:200].decode("utf-8", "replace")
            raise NotACompletion(
                f"model call to {self.config.base_url}/chat/completions answered what is not "
                f"a chat completion: {shown!r}"
            )
        return _without_nulls(body)


def _without_nulls(value: Any) -> Any:
    """`value` with every null field of its objects left out (as the SDK's typed answer,
    dumped without None, had it)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def call_record(request: dict, body: dict, started: float, latency: float) -> LLMCall:
    """The record of one call: the request sent, the answer (usage, logprobs) and its timing."""
    usage = body.get("usage") or {}
    content = ((body["choices"][0].get("logprobs") or {}).get("content")) or []
    logprobs = [entry["logprob"] for entry in content] or None
    return LLMCall(
        id=str(body.get("id") or f"call-{started}"),
        model=body.get("model"),
        request=request,
        response=body,
        logprobs=logprobs,
        latency_s=latency,
        started_at=started,
        usage=Usage(
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            total_tokens=usage.get("total_tokens"),
        ),
    )
