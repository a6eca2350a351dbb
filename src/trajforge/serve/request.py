"""A chat completion request, parsed and checked before it is queued for a batch.

`parse_chat_request` turns a request body into a `ChatRequest` or raises `BadRequest` with
a one-line message naming the field at fault (`messages.1: Input should be an object`).
The model is the OpenAI wire form and knows nothing of the model that answers it: any
backend `serve` runs reads the same checked fields. Types are strict (`"max_tokens":
"12"` is refused, as OpenAI refuses it); fields the server does not use (`n`,
`tool_choice`, `user`...) are accepted and ignored.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from trajforge.errors import first_error, one_line
from trajforge.serve.memo import JsonMemo

MAX_PROBLEM = 300
MAX_BODY_BYTES = 8 * 2**20
"""Default request body limit (8 MiB: a long agent conversation is well under 1 MiB)."""
DEFAULT_MAX_TOKENS = 48
"""Default new tokens for a request that sets no limit (`serve --max-tokens`)."""
SEED_RANGE = (-(2**63), 2**64 - 1)
"""What the sampler's random generator accepts as a seed."""


class BadRequest(ValueError):
    """A request the server refuses: its HTTP status and what is wrong, on one line."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(one_line(message, MAX_PROBLEM))


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class FunctionCall(_Wire):
    """The function of a tool call in an assistant message."""

    name: str = Field(description="Name of the called tool.")
    arguments: str | dict[str, Any] | None = Field(
        default=None, description="Arguments: a JSON string (OpenAI) or an object."
    )


class ToolCall(_Wire):
    """A tool call of an earlier assistant turn: OpenAI's nested form or a flat one."""

    id: str | None = Field(default=None, description="Call id the tool answer refers to.")
    function: FunctionCall | None = Field(default=None, description="Name and arguments.")
    name: str | None = Field(default=None, description="Flat form: the tool's name.")

    @model_validator(mode="after")
    def _named(self) -> ToolCall:
        if self.function is None and self.name is None:
            raise ValueError("a tool call needs function.name")
        return self


class ChatMessage(_Wire):
    """One message of the conversation."""

    role: Literal["system", "user", "assistant", "tool", "developer", "function"] = Field(
        description="Who speaks."
    )
    content: str | list[dict[str, Any]] | None = Field(
        default=None, description="Text, or a list of content parts ({'type', 'text'})."
    )
    name: str | None = Field(default=None, description="Speaker or tool name.")
    tool_calls: list[ToolCall] | None = Field(default=None, description="Calls the turn made.")
    tool_call_id: str | None = Field(default=None, description="Call a tool message answers.")


class FunctionSpec(_Wire):
    """A tool's function: its name and JSON-schema parameters."""

    name: str = Field(description="Tool name.")
    description: str | None = Field(default=None, description="What the tool does.")
    parameters: dict[str, Any] | None = Field(default=None, description="JSON schema object.")

    @model_validator(mode="after")
    def _properties_object(self) -> FunctionSpec:
        properties = (self.parameters or {}).get("properties")
        if properties is not None and not isinstance(properties, dict):
            raise ValueError("parameters.properties must be an object")
        return self


class ToolSpec(_Wire):
    """A tool the model may call."""

    type: Literal["function"] = Field(default="function", description="Always 'function'.")
    function: FunctionSpec = Field(description="The callable function.")


class StreamOptions(_Wire):
    include_usage: bool = Field(default=False, description="Send a final usage chunk.")


class ChatRequest(_Wire):
    """`POST /v1/chat/completions`: the fields `serve` reads, each checked."""

    messages: list[ChatMessage] = Field(min_length=1, description="The conversation so far.")
    tools: list[ToolSpec] | None = Field(default=None, description="Tools the model may call.")
    model: str | None = Field(default=None, description="Echoed back; the checkpoint answers.")
    max_tokens: int | None = Field(default=None, ge=1, description="New tokens at most.")
    max_completion_tokens: int | None = Field(default=None, ge=1, description="Same, newer name.")
    temperature: float | None = Field(
        default=None, ge=0.0, le=2.0, allow_inf_nan=False, description="0 is greedy."
    )
    seed: int | None = Field(
        default=None, ge=SEED_RANGE[0], le=SEED_RANGE[1], description="Sampling seed."
    )
    stream: bool | None = Field(default=None, description="Answer as server-sent events.")
    stream_options: StreamOptions | None = Field(default=None, description="Streaming extras.")
    logprobs: bool | None = Field(default=None, description="Return each token's logprob.")
    top_logprobs: int | None = Field(default=None, ge=0, le=20, description="Alternatives.")
    return_tokens_as_token_ids: bool | None = Field(
        default=None, description="vLLM: name tokens as `token_id:N`."
    )

    _body: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def body(self) -> dict[str, Any]:
        """The request as sent (checked): the codecs read its messages and tools unchanged,
        so a chat template sees the client's key order."""
        return self._body

    @property
    def tool_list(self) -> list[dict[str, Any]]:
        return list(self._body.get("tools") or [])

    @property
    def message_list(self) -> list[dict[str, Any]]:
        return list(self._body["messages"])


CHECKED_BYTES = 32 * 2**20
"""Bytes of messages and tool lists `CheckedParts` keeps (all forgotten at once past this)."""


class CheckedParts:
    """Messages and tool lists already checked, by their JSON: an agent sends its whole
    conversation and its tools at every turn, and checking every message of every request
    took 0.8 ms of the server's event-loop CPU a request during RL rollouts (0.12 ms alone:
    the decoding thread runs beside it), time the decoding thread waits for."""

    def __init__(self, max_bytes: int = CHECKED_BYTES) -> None:
        self.memo: JsonMemo[Any] = JsonMemo(max_bytes)

    def request(self, body: dict[str, Any]) -> ChatRequest:
        """`ChatRequest.model_validate(body)`, checking only the messages and tool list not
        met before; a body that does not check is validated whole, for its error."""
        try:
            return ChatRequest.model_validate(self._with_checked_parts(body))
        except ValidationError:
            return ChatRequest.model_validate(body)

    def _with_checked_parts(self, body: dict[str, Any]) -> dict[str, Any]:
        parts = dict(body)
        if isinstance(body.get("messages"), list):
            check = ChatMessage.model_validate
            parts["messages"] = [self.memo.get(m, partial(check, m)) for m in body["messages"]]
        if isinstance(body.get("tools"), list):
            tools = body["tools"]
            parts["tools"] = self.memo.get(tools, partial(_TOOL_LIST.validate_python, tools))
        return parts


_TOOL_LIST = TypeAdapter(list[ToolSpec])


def parse_chat_request(raw: bytes, checked: CheckedParts | None = None) -> ChatRequest:
    """The checked request in `raw`, or `BadRequest` (400) saying what is wrong; with
    `checked`, the messages and tools it holds are not checked again."""
    body = json_object(raw)
    try:
        request = ChatRequest.model_validate(body) if checked is None else checked.request(body)
    except ValidationError as exc:
        raise BadRequest(400, f"invalid request: {first_error(exc)}") from None
    request._body = body
    return request


def json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object in a request body, or `BadRequest` (400)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body
