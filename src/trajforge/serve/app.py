"""`trajforge serve CKPT`: an OpenAI-compatible server for a trained student, with batching.

`POST /v1/chat/completions` answers with the assistant message (tool calls parsed from the
generated tokens, arguments as JSON strings), `finish_reason`, `usage`, the vLLM-style token
fields the proxy and the RL export read (`prompt_token_ids` at the top, `token_ids` in the
choice) and, when asked (`logprobs: true`), `choices[].logprobs.content` with the model's own
log-probabilities. `stream: true` sends each token as it is generated (server-sent events,
`trajforge.serve.stream`). `GET /v1/models` lists the checkpoint; `GET /stats` counts what
the server has done since it started (`ServeStats`: batches, requests, prompt tokens fed and
taken from the cache, generated tokens, seconds inside the model) and names the served
checkpoint and its codec (`codec_identity`).

Concurrent requests are batched: once the model is free and a request is waiting, the loop
waits `max_wait_ms` for company (requests that came while the last batch was decoding are
already there, and wait that long again), then all waiting requests with the same sampling
settings (up to `max_batch`) are decoded together by one `Student.generate` call, one forward
pass per token for the whole batch. Each prompt is fed from the longest prefix whose
key/value states the server still holds from an earlier request
(`trajforge.serve.prefix_cache`): a session that sends its conversation again costs only the
tokens it added.

A request is parsed and checked (`trajforge.serve.request`) before it is queued: a wrong
field, a body that is not a JSON object or one over `max_body_bytes` is answered with a 4xx
in OpenAI's error shape and never reaches the loop. Whatever fails inside the loop fails the
requests of that batch (500, logged) and the loop goes on serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field

from trajforge.models.mock_answers import Answer, chat_body
from trajforge.openai_wire import error_body
from trajforge.serve.prefix_cache import DEFAULT_MB, PrefixCache
from trajforge.serve.request import (
    DEFAULT_MAX_TOKENS,
    MAX_BODY_BYTES,
    BadRequest,
    ChatRequest,
    CheckedParts,
    parse_chat_request,
)
from trajforge.serve.stream import TokenStream, sse_events
from trajforge.serve.student import (
    Generated,
    Student,
    TokenSink,
    answer_message,
    codec_identity,
    finish_reason,
)

CHAT_PATH = "/v1/chat/completions"
log = logging.getLogger(__name__)


class ServeConfig(BaseModel):
    """How `serve` batches and what it accepts."""

    max_batch: int = Field(default=64, ge=1, description="Requests decoded together at most.")
    max_wait_ms: float = Field(
        default=5.0, ge=0, description="How long batching waits for company once the model is free."
    )
    max_body_bytes: int = Field(
        default=MAX_BODY_BYTES, ge=1024, description="Larger request bodies get a 413."
    )
    max_tokens: int = Field(
        default=DEFAULT_MAX_TOKENS,
        ge=1,
        description="New tokens for a request that sets no limit; a request's own limit is "
        "capped at 8 times this.",
    )
    prefix_cache_mb: float = Field(
        default=DEFAULT_MB,
        ge=0,
        description="Megabytes of served sequences' key/value states kept for reuse by later "
        "requests that extend them (0: no prefix cache).",
    )


@dataclass
class ServeStats:
    """What a server has done since it started (`GET /stats`)."""

    batches: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens whose states came from the prefix cache (not fed to the model)."""
    generated_tokens: int = 0
    model_seconds: float = 0.0
    """Wall time inside `Student.generate`."""

    def count(self, generated: list[Generated], seconds: float) -> None:
        self.batches += 1
        self.requests += len(generated)
        self.prompt_tokens += sum(len(g.prompt_ids) for g in generated)
        self.cached_tokens += sum(g.cached_tokens for g in generated)
        self.generated_tokens += sum(len(g.token_ids) for g in generated)
        self.model_seconds += seconds


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(status: int, message: str) -> Response:
    """An OpenAI-shaped error answer."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return _JSON(error_body(message, kind), status_code=status)


def unexpected_error(request: Request, exc: Exception) -> Response:
    """The 500 answer to a request whose handling failed (logged with its traceback)."""
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, f"the server failed on this request ({type(exc).__name__})")


class _ChatFastPath:
    """ASGI entry: `POST /v1/chat/completions` goes straight to its handler (same errors as
    through FastAPI), the rest to FastAPI. FastAPI's middleware stack, router and dependency
    solving ran on the event loop for every request, beside the decoding thread."""

    def __init__(self, served: StudentApp) -> None:
        self.served = served

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != CHAT_PATH:
            await self.served.routes(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await self.served.chat_completions(request)
        except BadRequest as exc:
            response = error_response(exc.status, str(exc))
        except Exception as exc:
            response = unexpected_error(request, exc)
        await response(scope, receive, send)


@dataclass
class _Pending:
    request: ChatRequest
    prompt: list[int]
    answer_id: str
    future: asyncio.Future = field(repr=False)
    arrivals: asyncio.Queue | None = field(default=None, repr=False)
    """A streamed request's tokens as they are chosen, then its answer (`serve.stream`)."""

    def key(self, default_max_tokens: int) -> tuple[float, int]:
        return (
            float(self.request.temperature or 0.0),
            _max_tokens(self.request, default_max_tokens),
        )

    def sampling_seed(self, counter: itertools.count) -> int:
        """The seed of this request's random generator: its `seed` with its prompt (one seed
        sent at every turn of a conversation samples each turn afresh, and a request sent
        again samples the same), or the server's counter's next value."""
        if self.request.seed is None:
            return next(counter)
        text = f"{self.request.seed}:{','.join(map(str, self.prompt))}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def _max_tokens(request: ChatRequest, default: int) -> int:
    value = request.max_completion_tokens or request.max_tokens or default
    return min(value, default * 8)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or `BadRequest` (413) once it passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body over {limit} bytes ({declared} declared)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class StudentApp:
    """The ASGI app and its batching loop."""

    def __init__(self, student: Student, config: ServeConfig | None = None) -> None:
        self.config = config or ServeConfig()
        self.use(student)
        self.max_batch = self.config.max_batch
        self.max_wait_s = self.config.max_wait_ms / 1000
        self.batches: list[int] = []
        self.stats = ServeStats()
        self.checked_parts = CheckedParts()
        """The messages and tool lists of earlier requests, checked (`CheckedParts`)."""
        self._queue: asyncio.Queue[_Pending] | None = None
        self._ids = itertools.count(1)
        self._worker: asyncio.Task | None = None
        self.routes = FastAPI(title="trajforge student server", lifespan=self._lifespan)
        """Every route, with FastAPI's error handling (`add_reload_route` adds one)."""
        self.routes.post(CHAT_PATH)(self.chat_completions)
        self.routes.get("/v1/models")(self.models)
        self.routes.get("/stats")(self.stats_answer)
        self._add_error_handlers()
        self.app = _ChatFastPath(self)
        """The ASGI app to serve."""

    def use(self, student: Student) -> None:
        """Serve `student` from now on, with an empty prefix cache (the cached states are
        those of the weights that computed them; a batch still running keeps its own)."""
        self.student = student
        size = int(self.config.prefix_cache_mb * 2**20)
        self.prefix_cache = PrefixCache(size) if size else None

    def _add_error_handlers(self) -> None:
        async def bad_request(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, BadRequest)
            return error_response(exc.status, str(exc))

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            return error_response(exc.status_code, str(exc.detail))

        async def unexpected(request: Request, exc: Exception) -> Response:
            return unexpected_error(request, exc)

        self.routes.add_exception_handler(BadRequest, bad_request)
        self.routes.add_exception_handler(HTTPException, http_error)
        self.routes.add_exception_handler(RequestValidationError, http_error)
        self.routes.add_exception_handler(Exception, unexpected)

    async def body(self, request: Request) -> bytes:
        """The body of `request`, within the configured size limit."""
        return await read_body(request, self.config.max_body_bytes)

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
        checked = parse_chat_request(await self.body(request), self.checked_parts)
        student = self.student
        prompt = student.codec.prompt(checked.message_list, checked.tool_list)
        prompt = student.fit(prompt, _max_tokens(checked, self.config.max_tokens))
        future = asyncio.get_running_loop().create_future()
        pending = _Pending(checked, prompt, f"chatcmpl-student-{next(self._ids)}", future)
        if checked.stream:
            pending.arrivals = asyncio.Queue()
            model = checked.model or student.name
            stream = TokenStream(student.codec, checked, pending.answer_id, model)
            await self.queue.put(pending)
            events = sse_events(stream, prompt, pending.arrivals)
            return StreamingResponse(events, media_type="text/event-stream")
        await self.queue.put(pending)
        return _JSON(chat_body(await future, checked.body))

    async def models(self) -> Response:
        entry = {"id": self.student.name, "object": "model", "created": 0, "owned_by": "trajforge"}
        return _JSON({"object": "list", "data": [entry]})

    async def stats_answer(self) -> Response:
        served = {"checkpoint": self.student.name, "codec": codec_identity(self.student)}
        return _JSON({**served, **asdict(self.stats)})

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
                groups.setdefault(item.key(self.config.max_tokens), []).append(item)
            for (temperature, max_tokens), items in groups.items():
                await self._run_guarded(items, temperature, max_tokens)

    async def _run_guarded(self, items: list[_Pending], temperature: float, limit: int) -> None:
        """Answer one batch; whatever fails fails those requests (500), never the loop."""
        try:
            await self._run(items, temperature, limit)
        except Exception as exc:
            log.error("a batch of %d request(s) failed", len(items), exc_info=exc)
            for item in items:
                if item.arrivals is not None:
                    item.arrivals.put_nowait(exc)
                elif not item.future.done():
                    item.future.set_exception(exc)

    async def _run(self, items: list[_Pending], temperature: float, max_tokens: int) -> None:
        self.batches.append(len(items))
        seeds = [item.sampling_seed(self._ids) for item in items]
        student, cache = self.student, self.prefix_cache
        started = time.perf_counter()
        generated = await asyncio.to_thread(
            student.generate, [i.prompt for i in items], max_tokens, temperature, seeds, cache,
            _token_sink(items, asyncio.get_running_loop()),
        )  # fmt: skip
        self.stats.count(generated, time.perf_counter() - started)
        for item, gen in zip(items, generated, strict=True):
            answer = self._answer(student, item, gen)
            if item.arrivals is not None:
                item.arrivals.put_nowait(answer)
            elif not item.future.done():  # a client that hung up has cancelled its future
                item.future.set_result(answer)

    def _answer(self, student: Student, item: _Pending, gen: Generated) -> Answer:
        answer_id = item.answer_id
        codec = student.codec
        message = answer_message(codec, gen, item.request.tool_list, answer_id)
        pieces = codec.pieces(gen.token_ids)
        return Answer(
            id=answer_id,
            model=item.request.model or student.name,
            message=message,
            finish_reason=finish_reason(message, gen),
            prompt_ids=gen.prompt_ids,
            token_ids=gen.token_ids,
            logprobs=gen.logprobs,
            pieces=pieces,
            cached_tokens=gen.cached_tokens,
        )


def _token_sink(items: list[_Pending], loop: asyncio.AbstractEventLoop) -> TokenSink | None:
    """Hands each token of a streamed request to its stream (from the decoding thread)."""
    if all(item.arrivals is None for item in items):
        return None

    def sink(row: int, token: int, logprob: float) -> None:
        arrivals = items[row].arrivals
        if arrivals is not None:
            loop.call_soon_threadsafe(arrivals.put_nowait, (token, logprob))

    return sink
