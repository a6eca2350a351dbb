"""In-process capture: record a Python harness's model calls without a proxy in between.

`capture_in_process(db, session)` records every OpenAI-style completion call that an httpx client of
this process sends (the openai SDK, LiteLLM and most Python harnesses use httpx) while the
block runs; `CaptureTransport` / `AsyncCaptureTransport` do the same for one client. The
calls go straight to the model server: what the proxy's loopback hop did is done here, in
the harness's own thread. The records are the proxy's: the same additions to the request
(logprobs, `return_token_ids`, streamed usage, removed again from the answer the harness
sees), the same `proxy_calls` rows, and the same session trajectory, written by the same
`Recorder`; each call is committed before the harness gets its answer.

Only POST requests to a path ending in `/chat/completions` or `/completions` with a JSON
object body are recorded; anything else passes through untouched. Both `httpx` and its
successor `httpx2` (which recent openai SDKs use) are covered: the objects a transport makes
come from the library of the request it was given.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field

from trajforge.proxy.capture import CallContext, StreamAssembly, tokens_of
from trajforge.proxy.record import CapturedCall, Endpoint, UpstreamFault
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.shaping import ClientAsked, augment, for_client
from trajforge.schema import Outcome
from trajforge.store import Store

_DROPPED_HEADERS = ("content-length", "content-encoding", "transfer-encoding")
_DONE_LINE = b"data: [DONE]"


class CaptureOptions(BaseModel):
    """What in-process capture asks the model server for, and how runs are labelled."""

    model_config = ConfigDict(extra="forbid")

    session: str = Field(default="default", description="Session (trajectory) of the calls.")
    harness: str = Field(default="inprocess", description="Source harness of the trajectory.")
    ask_logprobs: bool = Field(
        default=True, description="Ask for logprobs even when the harness did not."
    )
    ask_token_ids: bool = Field(
        default=True,
        description="Ask vLLM/SGLang-style servers for token ids (`return_token_ids`); if the "
        "server refuses the field with HTTP 400, the call is sent again without it, and from "
        "then on it is not asked for.",
    )


def http_library(request: httpx.Request) -> ModuleType:
    """`httpx` or `httpx2`: the library that made `request` (their types do not mix)."""
    return importlib.import_module(type(request).__module__.partition(".")[0])


def endpoint_of(request: httpx.Request) -> Endpoint | None:
    """The OpenAI endpoint a request calls, or None when it is not a completion call."""
    if request.method != "POST":
        return None
    path = request.url.path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat/completions"
    return "completions" if path.endswith("/completions") else None


@dataclass(kw_only=True)
class _Call(CallContext):
    """One captured call in flight: besides the harness's body and timing, what was added
    for the upstream and the answer's chunks."""

    asked: ClientAsked
    upstream_body: dict[str, Any]
    assembly: StreamAssembly = field(default_factory=StreamAssembly)

    @property
    def chat(self) -> bool:
        return self.endpoint == "chat/completions"


class Capturer:
    """The shared part of the sync and async transports: reshape, record, strip."""

    def __init__(self, recorder: Recorder, options: CaptureOptions | None = None) -> None:
        self.recorder = recorder
        self.options = options or CaptureOptions()
        self.token_ids_refused = False

    def begin(self, request: httpx.Request) -> _Call | None:
        """The call to record, or None for a request that is not one (passed through)."""
        endpoint = endpoint_of(request)
        if endpoint is None:
            return None
        try:
            body = orjson.loads(request.content)
        except (orjson.JSONDecodeError, http_library(request).RequestNotRead):
            return None
        if not isinstance(body, dict):
            return None
        ask_ids = self.options.ask_token_ids and not self.token_ids_refused
        upstream, asked = augment(body, endpoint == "chat/completions", self.options, ask_ids)
        return _Call(
            session=self.options.session,
            endpoint=endpoint,
            body=body,
            stream=bool(body.get("stream")),
            asked=asked,
            upstream_body=upstream,
        )

    def upstream_request(self, request: httpx.Request, call: _Call) -> httpx.Request:
        headers = [
            (k, v) for k, v in request.headers.multi_items() if k.lower() not in _DROPPED_HEADERS
        ]
        return http_library(request).Request(
            request.method,
            request.url,
            headers=headers,
            content=orjson.dumps(call.upstream_body),
            extensions=request.extensions,
        )

    def should_retry(self, call: _Call, status: int, content: bytes) -> bool:
        """Whether the server refused the added `return_token_ids` (then ask no more)."""
        added = "return_token_ids" in call.upstream_body and not call.asked.token_ids
        if status != 400 or not added or b"return_token_ids" not in content:
            return False
        self.token_ids_refused = True
        call.upstream_body.pop("return_token_ids")
        return True

    def plain_answer(self, call: _Call, status: int, content: bytes) -> tuple[bytes, CapturedCall]:
        """(the body the harness gets, the record) of a non-streamed answer."""
        data = _json_or_none(content)
        if status != 200 or not isinstance(data, dict):
            return content, call.captured(status, error=_error_text(data, content))
        record = call.captured(200, response=data, tokens=tokens_of(data))
        shown = for_client(data, call.asked)
        return (content if shown is data else orjson.dumps(shown)), record

    def stream_lines(self, call: _Call, lines: list[bytes]) -> bytes:
        """The lines of a stream as the harness sees them; chunks are kept for the record."""
        out = []
        for line in lines:
            stripped = line.strip()
            if not stripped.startswith(b"data:") or stripped == _DONE_LINE:
                out.append(line)
                continue
            chunk = _json_or_none(stripped[5:])
            if not isinstance(chunk, dict):
                out.append(line)
                continue
            call.assembly.add(chunk)
            shown = chunk if call.asked.everything else for_client(chunk, call.asked)
            if shown is chunk:
                out.append(line)
            elif shown is not None:
                out.append(b"data: " + orjson.dumps(shown))
        return b"\n".join(out)

    def stream_record(self, call: _Call, complete: bool) -> CapturedCall:
        body = call.assembly.body(call.chat) if call.assembly.base else None
        tokens = tokens_of(body) if body else None
        if complete:
            return call.captured(200, response=body, tokens=tokens)
        detail = "stream ended without [DONE]"
        fault = UpstreamFault(kind="upstream_truncated", detail=detail, injected=False)
        return call.captured(200, response=body, tokens=tokens, error=detail, fault=fault)

    def unreachable(self, call: _Call, exc: Exception) -> CapturedCall:
        detail = f"upstream connection failed: {exc!r}"
        fault = UpstreamFault(kind="upstream_unreachable", detail=detail, injected=False)
        return call.captured(502, error=detail, fault=fault)


def _json_or_none(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None


def _error_text(data: Any, content: bytes) -> str:
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error) if error else content[:500].decode(errors="replace") or "no body"


def _response(source: httpx.Response, request: httpx.Request, **body: Any) -> httpx.Response:
    headers = [(k, v) for k, v in source.headers.multi_items() if k.lower() not in _DROPPED_HEADERS]
    return http_library(request).Response(
        source.status_code, headers=headers, request=request, extensions=source.extensions, **body
    )


class CaptureTransport(httpx.BaseTransport):
    """An httpx transport that records completion calls and forwards through `inner`."""

    def __init__(self, capturer: Capturer, inner: httpx.BaseTransport | None = None) -> None:
        self.capturer = capturer
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return capture_sync(self.capturer, request, self.inner.handle_request)

    def close(self) -> None:
        self.inner.close()


def capture_sync(
    capturer: Capturer, request: httpx.Request, send: Callable[[httpx.Request], httpx.Response]
) -> httpx.Response:
    """Send `request` with `send`, recording it when it is a completion call (sent once more
    without `return_token_ids` if the server refuses that field)."""
    call = capturer.begin(request)
    if call is None:
        return send(request)
    for attempt in range(2):
        response = _send_recording_failure(capturer, call, request, send)
        if call.stream and response.status_code == 200:
            return _response(
                response, request, stream=_relay(_SyncRelay, request)(capturer, call, response)
            )
        content = response.read()
        response.close()
        if attempt or not capturer.should_retry(call, response.status_code, content):
            break
    shown, record = capturer.plain_answer(call, response.status_code, content)
    capturer.recorder.submit(record).result()
    return _response(response, request, content=shown)


def _send_recording_failure(
    capturer: Capturer,
    call: _Call,
    request: httpx.Request,
    send: Callable[[httpx.Request], httpx.Response],
) -> httpx.Response:
    try:
        return send(capturer.upstream_request(request, call))
    except http_library(request).TransportError as exc:
        capturer.recorder.submit(capturer.unreachable(call, exc)).result()
        raise


def _relay(relay: type, request: httpx.Request) -> type:
    """The relay class as a byte stream of the request's library (responses check it)."""
    lib = http_library(request)
    base = lib.SyncByteStream if relay is _SyncRelay else lib.AsyncByteStream
    return _stream_class(relay, base)


@functools.cache
def _stream_class(relay: type, base: type) -> type:
    return type(relay.__name__, (relay, base), {})


class _SyncRelay:
    """A streamed answer passed on line by line, recorded (and committed) before `[DONE]`."""

    def __init__(self, capturer: Capturer, call: _Call, response: httpx.Response) -> None:
        self.capturer = capturer
        self.call = call
        self.response = response

    def __iter__(self) -> Iterator[bytes]:
        pending, complete = b"", False
        for raw in self.response.iter_bytes():
            *lines, pending = (pending + raw).split(b"\n")
            shown = self.capturer.stream_lines(self.call, lines) + b"\n"
            if any(line.strip() == _DONE_LINE for line in lines):
                complete = True
                self.capturer.recorder.submit(self._record(True)).result()
            yield shown
        if not complete:
            self.capturer.recorder.submit(self._record(False)).result()
        if pending:
            yield pending

    def _record(self, complete: bool) -> CapturedCall:
        return self.capturer.stream_record(self.call, complete)

    def close(self) -> None:
        self.response.close()


class AsyncCaptureTransport(httpx.AsyncBaseTransport):
    """`CaptureTransport` for async clients (`AsyncOpenAI`, LiteLLM's `acompletion`)."""

    def __init__(self, capturer: Capturer, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.capturer = capturer
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await capture_async(self.capturer, request, self.inner.handle_async_request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def capture_async(capturer: Capturer, request: httpx.Request, send: Any) -> httpx.Response:
    """`capture_sync` for async transports (one retry without `return_token_ids`)."""
    call = capturer.begin(request)
    if call is None:
        return await send(request)
    for attempt in range(2):
        try:
            response = await send(capturer.upstream_request(request, call))
        except http_library(request).TransportError as exc:
            await _committed(capturer, capturer.unreachable(call, exc))
            raise
        if call.stream and response.status_code == 200:
            return _response(
                response, request, stream=_relay(_AsyncRelay, request)(capturer, call, response)
            )
        content = await response.aread()
        await response.aclose()
        if attempt or not capturer.should_retry(call, response.status_code, content):
            break
    shown, record = capturer.plain_answer(call, response.status_code, content)
    await _committed(capturer, record)
    return _response(response, request, content=shown)


async def _committed(capturer: Capturer, record: CapturedCall) -> None:
    await asyncio.wrap_future(capturer.recorder.submit(record))


class _AsyncRelay:
    def __init__(self, capturer: Capturer, call: _Call, response: httpx.Response) -> None:
        self.capturer = capturer
        self.call = call
        self.response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending, complete = b"", False
        async for raw in self.response.aiter_bytes():
            *lines, pending = (pending + raw).split(b"\n")
            shown = self.capturer.stream_lines(self.call, lines) + b"\n"
            if any(line.strip() == _DONE_LINE for line in lines):
                complete = True
                await _committed(self.capturer, self.capturer.stream_record(self.call, True))
            yield shown
        if not complete:
            await _committed(self.capturer, self.capturer.stream_record(self.call, False))
        if pending:
            yield pending

    async def aclose(self) -> None:
        await self.response.aclose()


class InProcessCapture:
    """An open capture: its store, recorder and `Capturer`; `outcome()` ends a run."""

    def __init__(self, store: Store, options: CaptureOptions) -> None:
        self.store = store
        self.recorder = Recorder(store, harness=options.harness)
        self.capturer = Capturer(self.recorder, options)

    @property
    def session(self) -> str:
        return self.capturer.options.session

    def outcome(self, success: bool | None, reward: float | None = None) -> str:
        """Record how the run ended; returns its trajectory id."""
        outcome = Outcome(success=success, reward=reward)
        return self.recorder.set_outcome(self.session, outcome).result()

    def close(self) -> None:
        self.recorder.flush()
        self.recorder.close()


_installed = threading.Lock()
HTTP_LIBRARIES = ("httpx", "httpx2")


def _patch(lib: ModuleType, capturer: Capturer) -> Callable[[], None]:
    """Route every transport of `lib` through `capturer`; returns the undo."""
    sync_send = lib.HTTPTransport.handle_request
    async_send = lib.AsyncHTTPTransport.handle_async_request

    def handle_request(self: Any, request: httpx.Request) -> httpx.Response:
        return capture_sync(capturer, request, lambda r: sync_send(self, r))

    async def handle_async_request(self: Any, request: httpx.Request) -> httpx.Response:
        return await capture_async(capturer, request, lambda r: async_send(self, r))

    lib.HTTPTransport.handle_request = handle_request
    lib.AsyncHTTPTransport.handle_async_request = handle_async_request

    def undo() -> None:
        lib.HTTPTransport.handle_request = sync_send
        lib.AsyncHTTPTransport.handle_async_request = async_send

    return undo


def _installed_libraries() -> list[ModuleType]:
    found = []
    for name in HTTP_LIBRARIES:
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


@contextmanager
def capture_in_process(
    db: str | Path | None = None, session: str = "default", **options: Any
) -> Iterator[InProcessCapture]:
    """Record every completion call sent through httpx (or httpx2) in this process while
    inside. The transports of the whole process, clients made before the block included, go
    through one `Capturer` until the block ends; only one capture can be active at a time.
    `options` are fields of `CaptureOptions`.
    """
    if not _installed.acquire(blocking=False):
        raise RuntimeError("an in-process capture is already active in this process")
    store = Store(db)
    active = InProcessCapture(store, CaptureOptions(session=session, **options))
    undo = [_patch(lib, active.capturer) for lib in _installed_libraries()]
    try:
        yield active
    finally:
        for restore in undo:
            restore()
        active.close()
        store.close()
        _installed.release()
