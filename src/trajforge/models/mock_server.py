"""A mock OpenAI-compatible model server on loopback: scripted replies, real HTTP.

    with MockOpenAIServer(["hi", {"tool_calls": [{"name": "bash", "arguments": {...}}]}]) as s:
        client = openai.OpenAI(base_url=s.base_url, api_key="x")

It serves `/v1/chat/completions` (plain and SSE streaming), `/v1/completions` and
`/v1/models`, with deterministic token ids, logprobs and usage (see `mock_answers` for the
fields and `mock_script` for what a script can say). `trajforge mock-server` runs it in the
foreground; `trajforge.models.tiny` puts a small real causal LM behind the same code.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trajforge.models.mock_answers import (
    chat_answer,
    chat_body,
    chat_chunks,
    text_answer,
    text_body,
    text_chunks,
)
from trajforge.models.mock_script import MockReply, Script, ScriptCursor
from trajforge.models.mock_tokens import HashTokenBackend, TokenBackend
from trajforge.models.serve import BackgroundServer
from trajforge.openai_wire import error_body

REQUEST_LOG_SIZE = 10_000
"""Request bodies (and headers) an in-process mock keeps for its tests to read."""


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _error_response(reply: MockReply) -> Response:
    status = reply.status or 500
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(error_body(reply.error or f"mock error {status}", kind), status_code=status)


async def _sse(chunks: list[dict[str, Any]], truncate: bool) -> AsyncIterator[bytes]:
    """All events in one write: a mock has every token at once, and fewer writes keep it fast."""
    cut = max(1, len(chunks) // 2) if truncate else len(chunks)
    events = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks[:cut]]
    if not truncate:
        events.append(b"data: [DONE]\n\n")
    yield b"".join(events)


class MockApp:
    """The ASGI app and its state: script cursor, token backend, request log (the last
    `request_log` requests, for tests to read). The `mock-server` command keeps none: no one
    can read its log, and a long benchmark's megabyte bodies filled gigabytes of it."""

    def __init__(
        self, script: Script | None = None, backend: TokenBackend | None = None,
        request_log: int = REQUEST_LOG_SIZE,
    ) -> None:  # fmt: skip
        self.backend = backend or HashTokenBackend()
        self.cursor = ScriptCursor(script)
        self.requests: deque[dict[str, Any]] = deque(maxlen=request_log)
        self.headers: deque[dict[str, str]] = deque(maxlen=request_log)
        self._ids = itertools.count(1)
        self.app = FastAPI(title="trajforge mock OpenAI server")
        self.app.post("/v1/chat/completions")(self.chat_completions)
        self.app.post("/v1/completions")(self.completions)
        self.app.get("/v1/models")(self.models)

    async def _reply(self, request: Request) -> tuple[dict[str, Any], MockReply]:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise HTTPException(400, f"request body is not JSON: {exc}") from None
        if self.requests.maxlen:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        reply = self.cursor.next(body)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        return body, reply

    async def chat_completions(self, request: Request) -> Response:
        body, reply = await self._reply(request)
        if reply.status or reply.raw is not None:
            return _error_response(reply) if reply.status else Response(reply.raw, 200)
        answer = chat_answer(self.backend, reply, body, f"chatcmpl-mock-{next(self._ids)}")
        if body.get("stream"):
            chunks = chat_chunks(answer, body)
            return StreamingResponse(_sse(chunks, reply.truncate), media_type="text/event-stream")
        return _JSON(chat_body(answer, body))

    async def completions(self, request: Request) -> Response:
        body, reply = await self._reply(request)
        if reply.status or reply.raw is not None:
            return _error_response(reply) if reply.status else Response(reply.raw, 200)
        answer = text_answer(self.backend, reply, body, f"cmpl-mock-{next(self._ids)}")
        if body.get("stream"):
            chunks = text_chunks(answer, body)
            return StreamingResponse(_sse(chunks, reply.truncate), media_type="text/event-stream")
        return _JSON(text_body(answer, body))

    async def models(self) -> Response:
        model = {"id": self.backend.name, "object": "model", "created": 0, "owned_by": "trajforge"}
        return _JSON({"object": "list", "data": [model]})


class MockOpenAIServer:
    """The mock server running on a background thread; a context manager.

    `base_url` ends in `/v1`; `requests` lists the request bodies received, `headers` their
    HTTP headers (for tests that check what a proxy forwards).
    """

    def __init__(
        self,
        script: Script | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        backend: TokenBackend | None = None,
    ) -> None:
        self.mock = MockApp(script, backend)
        self._server = BackgroundServer(self.mock.app, host, port)

    @property
    def base_url(self) -> str:
        return f"{self._server.url}/v1"

    @property
    def requests(self) -> deque[dict[str, Any]]:
        return self.mock.requests

    @property
    def headers(self) -> deque[dict[str, str]]:
        return self.mock.headers

    def start(self) -> MockOpenAIServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> MockOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
