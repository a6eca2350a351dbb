"""`stream: true`: the answer as server-sent events, one chunk per token as it is generated.

The first chunk opens the assistant turn (`role`, the `prompt_token_ids`); then every token
the batch chooses for this request is sent at once as its own `chat.completion.chunk`, with
its `token_ids` and, when asked, its `logprobs.content` entry. A chunk's `delta.content` is
the text the generation adds to the visible content: the text before any tool call, without
leading or trailing whitespace (`Codec.visible_text`), so a tail that may still turn into a
tool call (`<tool_cal`...) or an unfinished character is held back until it is settled, and
such a chunk's content is empty. Tool calls are parsed from the whole generation when it
ends and sent as one `tool_calls` delta; the last chunk has the `finish_reason` and the
`usage` (with `prompt_tokens_details.cached_tokens`), then an `include_usage` chunk when
asked, then `data: [DONE]`. A batch that fails after the stream has started ends it with
an OpenAI-shaped `error` event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from trajforge.models.mock_answers import Answer, wants_logprobs
from trajforge.openai_wire import error_body
from trajforge.serve.codec import Codec
from trajforge.serve.request import ChatRequest

DONE = b"data: [DONE]\n\n"


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


@dataclass
class TokenStream:
    """The chunks of one streamed answer, built as its tokens arrive."""

    codec: Codec
    request: ChatRequest
    answer_id: str
    model: str
    tokens: list[int] = field(default_factory=list)
    shown: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def _chunk(self, delta: dict[str, Any], **choice: Any) -> dict[str, Any]:
        return {
            "id": self.answer_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": None, "logprobs": None, **choice}
            ],
        }

    def opening(self, prompt_ids: Sequence[int]) -> dict[str, Any]:
        chunk = self._chunk({"role": "assistant", "content": ""}, token_ids=[])
        chunk["prompt_token_ids"] = list(prompt_ids)
        return chunk

    def token(self, token_id: int, logprob: float) -> dict[str, Any]:
        """The chunk of one newly generated token."""
        self.tokens.append(token_id)
        visible = self.codec.visible_text(self.tokens, self.request.tool_list).strip()
        added = visible[len(self.shown) :] if visible.startswith(self.shown) else ""
        self.shown += added
        logprobs = None
        if wants_logprobs(self.request.body):
            logprobs = {"content": [self._entry(token_id, logprob)]}
        return self._chunk({"content": added}, token_ids=[token_id], logprobs=logprobs)

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        (piece,) = self.codec.pieces([token_id])
        as_ids = bool(self.request.return_tokens_as_token_ids)
        entry = {
            "token": f"token_id:{token_id}" if as_ids else piece,
            "logprob": logprob,
            "bytes": list(piece.encode()),
        }
        entry["top_logprobs"] = [dict(entry)] if self.request.top_logprobs else []
        return entry

    def closing(self, answer: Answer) -> list[dict[str, Any]]:
        """The tool calls (one delta), the finish chunk with usage, the usage chunk if asked."""
        chunks = []
        calls = answer.message.get("tool_calls")
        if calls:
            delta = {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}
            chunks.append(self._chunk(delta, token_ids=[]))
        finish = self._chunk({}, token_ids=[])
        finish["choices"][0]["finish_reason"] = answer.finish_reason
        errors = answer.message.get("tool_call_errors")
        if errors:
            finish["choices"][0]["delta"] = {"tool_call_errors": errors}
        finish["usage"] = answer.usage()
        chunks.append(finish)
        options = self.request.stream_options
        if options is not None and options.include_usage:
            usage = self._chunk({})
            usage["choices"], usage["usage"] = [], answer.usage()
            chunks.append(usage)
        return chunks


async def sse_events(
    stream: TokenStream, prompt_ids: Sequence[int], arrivals: asyncio.Queue
) -> AsyncIterator[bytes]:
    """The events of a streamed answer: `arrivals` brings (token id, logprob) pairs as the
    batch chooses them, then the finished `Answer` (or the exception that failed the batch)."""
    yield event(stream.opening(prompt_ids))
    while True:
        item = await arrivals.get()
        if isinstance(item, Answer):
            for chunk in stream.closing(item):
                yield event(chunk)
            yield DONE
            return
        if isinstance(item, BaseException):
            message = f"the server failed on this request ({type(item).__name__})"
            yield event(error_body(message, "server_error"))
            return
        yield event(stream.token(*item))
