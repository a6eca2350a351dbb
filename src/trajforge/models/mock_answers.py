"""Response bodies of the mock server, in the OpenAI form with vLLM-style token fields.

Besides the OpenAI fields, every answer carries the token ids a trainer needs, as vLLM does
when asked (`return_token_ids`): `prompt_token_ids` at the top of a chat answer (in each choice
of a text completion) and `token_ids` in each choice (each streamed chunk carries its own).
Log-probabilities come in `choices[].logprobs` when the request asks for them; the token
strings are `token_id:N` when the request sets `return_tokens_as_token_ids`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from trajforge.models.mock_script import MockReply
from trajforge.models.mock_tokens import TokenBackend, completion_ids, prompt_ids


@dataclass
class Answer:
    """One generated answer: the assistant message with its tokens and logprobs."""

    id: str
    model: str
    message: dict[str, Any]
    finish_reason: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    pieces: list[str] = field(default_factory=list)
    content_tokens: int = 0
    cached_tokens: int | None = None
    """Prompt tokens a server took from its prefix cache (`usage.prompt_tokens_details`)."""
    created: int = field(default_factory=lambda: int(time.time()))

    def usage(self) -> dict[str, Any]:
        prompt, completion = len(self.prompt_ids), len(self.token_ids)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage


def _tool_calls(reply: MockReply, answer_id: str) -> list[dict[str, Any]]:
    calls = []
    for position, call in enumerate(reply.tool_calls):
        function = call.get("function", call)
        arguments = function.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        calls.append(
            {
                "id": call.get("id") or f"call_{answer_id.rsplit('-', 1)[-1]}_{position}",
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return calls


def chat_answer(
    backend: TokenBackend, reply: MockReply, request: dict[str, Any], answer_id: str
) -> Answer:
    """Tokenize and score a scripted reply to a chat request."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    calls = _tool_calls(reply, answer_id)
    if calls:
        message["tool_calls"] = calls
    prompt = prompt_ids(backend, request.get("messages") or [])
    tokens = completion_ids(backend, message)
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    return Answer(
        id=answer_id,
        model=str(request.get("model") or backend.name),
        message=message,
        finish_reason=finish,
        prompt_ids=prompt,
        token_ids=tokens,
        logprobs=backend.score(prompt, tokens),
        pieces=[backend.piece(t) for t in tokens],
        content_tokens=len(backend.encode(reply.content or "")),
    )


def text_answer(
    backend: TokenBackend, reply: MockReply, request: dict[str, Any], answer_id: str
) -> Answer:
    """Tokenize and score a scripted reply to a text-completion request."""
    prompt_field = request.get("prompt", "")
    if isinstance(prompt_field, list) and prompt_field and isinstance(prompt_field[0], int):
        prompt = [int(t) for t in prompt_field]
    else:
        text = prompt_field[0] if isinstance(prompt_field, list) and prompt_field else prompt_field
        prompt = backend.encode(str(text or ""))
    tokens = backend.encode(reply.content or "")
    return Answer(
        id=answer_id,
        model=str(request.get("model") or backend.name),
        message={"role": "assistant", "content": reply.content or ""},
        finish_reason=reply.finish_reason or "stop",
        prompt_ids=prompt,
        token_ids=tokens,
        logprobs=backend.score(prompt, tokens),
        pieces=[backend.piece(t) for t in tokens],
        content_tokens=len(tokens),
    )


def logprob_entries(
    answer: Answer, start: int, end: int, request: dict[str, Any]
) -> list[dict[str, Any]]:
    """`logprobs.content` entries of completion tokens [start, end)."""
    as_ids = bool(request.get("return_tokens_as_token_ids"))
    top = int(request.get("top_logprobs") or 0)
    entries = []
    for position in range(start, end):
        token = answer.pieces[position]
        shown = f"token_id:{answer.token_ids[position]}" if as_ids else token
        entry = {
            "token": shown,
            "logprob": answer.logprobs[position],
            "bytes": list(token.encode()),
        }
        entry["top_logprobs"] = [dict(entry)] if top else []
        entries.append(entry)
    return entries


def wants_logprobs(request: dict[str, Any]) -> bool:
    return bool(request.get("logprobs"))


def chat_body(answer: Answer, request: dict[str, Any]) -> dict[str, Any]:
    """The non-streamed `chat.completion` body."""
    logprobs = None
    if wants_logprobs(request):
        logprobs = {"content": logprob_entries(answer, 0, len(answer.token_ids), request)}
    choice = {
        "index": 0,
        "message": answer.message,
        "finish_reason": answer.finish_reason,
        "logprobs": logprobs,
        "token_ids": answer.token_ids,
    }
    return {
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [choice],
        "usage": answer.usage(),
        "prompt_token_ids": answer.prompt_ids,
    }


def text_body(answer: Answer, request: dict[str, Any]) -> dict[str, Any]:
    """The non-streamed `text_completion` body (legacy logprobs form)."""
    logprobs = None
    if request.get("logprobs") is not None and request.get("logprobs") is not False:
        offsets, offset = [], 0
        for piece in answer.pieces:
            offsets.append(offset)
            offset += len(piece)
        logprobs = {
            "tokens": answer.pieces,
            "token_logprobs": answer.logprobs,
            "top_logprobs": None,
            "text_offset": offsets,
        }
    choice = {
        "index": 0,
        "text": answer.message["content"],
        "finish_reason": answer.finish_reason,
        "logprobs": logprobs,
        "token_ids": answer.token_ids,
        "prompt_token_ids": answer.prompt_ids,
    }
    return {
        "id": answer.id,
        "object": "text_completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [choice],
        "usage": answer.usage(),
    }


def _chunk(answer: Answer, delta: dict, request: dict, span: tuple[int, int]) -> dict[str, Any]:
    start, end = span
    logprobs = None
    if wants_logprobs(request):
        logprobs = {"content": logprob_entries(answer, start, end, request)}
    choice = {
        "index": 0,
        "delta": delta,
        "finish_reason": answer.finish_reason if end == len(answer.token_ids) else None,
        "logprobs": logprobs,
        "token_ids": answer.token_ids[start:end],
    }
    return {
        "id": answer.id,
        "object": "chat.completion.chunk",
        "created": answer.created,
        "model": answer.model,
        "choices": [choice],
    }


def chat_chunks(answer: Answer, request: dict[str, Any]) -> list[dict[str, Any]]:
    """The streamed `chat.completion.chunk`s: role, one per content token, tool calls, end."""
    first = _chunk(answer, {"role": "assistant", "content": ""}, request, (0, 0))
    first["prompt_token_ids"] = answer.prompt_ids
    chunks = [first]
    for position in range(answer.content_tokens):
        piece = {"content": answer.pieces[position]}
        chunks.append(_chunk(answer, piece, request, (position, position + 1)))
    end = len(answer.token_ids) - 1
    calls = answer.message.get("tool_calls")
    if calls:
        delta = {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}
        chunks.append(_chunk(answer, delta, request, (answer.content_tokens, end)))
    chunks.append(_chunk(answer, {}, request, (end, end + 1)))
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = _chunk(answer, {}, request, (0, 0))
        usage["choices"], usage["usage"] = [], answer.usage()
        chunks.append(usage)
    return chunks


def text_chunks(answer: Answer, request: dict[str, Any]) -> list[dict[str, Any]]:
    """The streamed `text_completion` chunks: one per token, the last with the finish reason."""
    chunks = []
    last = len(answer.token_ids) - 1
    for position, piece in enumerate(answer.pieces):
        choice: dict[str, Any] = {
            "index": 0,
            "text": piece,
            "finish_reason": answer.finish_reason if position == last else None,
            "token_ids": [answer.token_ids[position]],
            "logprobs": None,
        }
        if position == 0:
            choice["prompt_token_ids"] = answer.prompt_ids
        if request.get("logprobs") is not None and request.get("logprobs") is not False:
            choice["logprobs"] = {"tokens": [piece], "token_logprobs": [answer.logprobs[position]]}
        chunks.append(
            {
                "id": answer.id,
                "object": "text_completion",
                "created": answer.created,
                "model": answer.model,
                "choices": [choice],
            }
        )
    return chunks
