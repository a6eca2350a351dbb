"""`trajforge serve CKPT`: an OpenAI-compatible server for a trained student, with batching.

`POST /v1/chat/completions` answers with the assistant message (tool calls parsed from the
generated tokens, arguments as JSON strings), `finish_reason`, `usage`, the vLLM-style token
fields the proxy and the RL export read (`prompt_token_ids` at the top, `token_ids` in the
choice) and, when asked (`logprobs: true`), `choices[].logprobs.content` with the model's own
log-probabilities. `stream: true` returns the same answer as SSE chunks. `GET /v1/models`
lists the checkpoint.

Concurrent requests are batched: requests wait at most `max_wait_ms` for company, then all
waiting requests with the same sampling settings (up to `max_batch`) are decoded together by
one `Student.generate` call, one forward pass per token for the whole batch.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response, StreamingResponse

from trajforge.models.mock_answers import Answer, chat_body, chat_chunks
from trajforge.models.tool_text import CALL_OPEN
from trajforge.serve.student import Student, answer_message, finish_reason

DEFAULT_MAX_TOKENS = 48


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


@dataclass
class _Pending:
    body: dict[str, Any]
    prompt: list[int]
    future: asyncio.Future = field(repr=False)

    def key(self) -> tuple[float, int]:
        return (float(self.body.get("temperature") or 0.0), _max_tokens(self.body))


def _max_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    return max(1, min(int(value), DEFAULT_MAX_TOKENS * 8))


class StudentApp:
    """The ASGI app and its batching loop."""

    def __init__(self, student: Student, max_batch: int = 64, max_wait_ms: float = 5.0) -> None:
        self.student = student
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000
        self.batches: list[int] = []
        self._queue: asyncio.Queue[_Pending] | None = None
        self._ids = itertools.count(1)
        self._worker: asyncio.Task | None = None
        self.app = FastAPI(title="trajforge student server", lifespan=self._lifespan)
        self.app.post("/v1/chat/completions")(self.chat_completions)
        self.app.get("/v1/models")(self.models)

    @property
    def queue(self) -> asyncio.Queue[_Pending]:
        """Requests waiting for a batch; only while the app is started."""
        if self._queue is None:
            raise RuntimeError("the student server is not started (run it under its lifespan)")
        return self._queue

    @asynccontextmanager
    async def _lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._batch_loop())
        yield
        self._worker.cancel()

    async def chat_completions(self, request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise HTTPException(400, f"request body is not JSON: {exc}") from None
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HTTPException(400, "'messages' must be a non-empty list")
        tools = body.get("tools") or []
        prompt = self.student.codec.prompt(messages, tools)
        future = asyncio.get_running_loop().create_future()
        await self.queue.put(_Pending(body, prompt, future))
        answer = await future
        if body.get("stream"):
            events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chat_chunks(answer, body)]
            events.append(b"data: [DONE]\n\n")
            return StreamingResponse(iter([b"".join(events)]), media_type="text/event-stream")
        return _JSON(chat_body(answer, body))

    async def models(self) -> Response:
        entry = {"id": self.student.name, "object": "model", "created": 0, "owned_by": "trajforge"}
        return _JSON({"object": "list", "data": [entry]})

    async def _batch_loop(self) -> None:
        queue = self.queue
        while True:
            first = await queue.get()
            await asyncio.sleep(self.max_wait_s)
            waiting = [first]
            while not queue.empty() and len(waiting) < self.max_batch:
                waiting.append(queue.get_nowait())
            groups: dict[tuple, list[_Pending]] = {}
            for item in waiting:
                groups.setdefault(item.key(), []).append(item)
            for (temperature, max_tokens), items in groups.items():
                await self._run(items, temperature, max_tokens)

    async def _run(self, items: list[_Pending], temperature: float, max_tokens: int) -> None:
        self.batches.append(len(items))
        seed = int(items[0].body.get("seed") or next(self._ids))
        try:
            generated = await asyncio.to_thread(
                self.student.generate, [i.prompt for i in items], max_tokens, temperature, seed
            )
        except Exception as exc:  # every waiting request gets the error, the loop goes on
            for item in items:
                item.future.set_exception(exc)
            return
        for item, gen in zip(items, generated, strict=True):
            item.future.set_result(self._answer(item, gen))

    def _answer(self, item: _Pending, gen) -> Answer:
        answer_id = f"chatcmpl-student-{next(self._ids)}"
        tools = item.body.get("tools") or []
        codec = self.student.codec
        message = answer_message(codec, gen, tools, answer_id)
        pieces = codec.pieces(gen.token_ids)
        return Answer(
            id=answer_id,
            model=str(item.body.get("model") or self.student.name),
            message=message,
            finish_reason=finish_reason(message, gen),
            prompt_ids=gen.prompt_ids,
            token_ids=gen.token_ids,
            logprobs=gen.logprobs,
            pieces=pieces,
            content_tokens=_content_tokens(pieces, codec.pieces([codec.eos_id])[0]),
        )


def _content_tokens(pieces: list[str], eos_piece: str) -> int:
    """Tokens before the first tool call (a compact `<|call|>`, or where a `<tool_call>` tag
    starts) and the end of turn: what is streamed as content deltas."""
    cut = "".join(pieces).find(CALL_OPEN)
    length = 0
    for position, piece in enumerate(pieces):
        if piece in ("<|call|>", eos_piece) or 0 <= cut < length + len(piece):
            return position
        length += len(piece)
    return len(pieces)
