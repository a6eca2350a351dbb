"""The recording proxy: an OpenAI-compatible ASGI app in front of an upstream model server.

Routes: `/v1/chat/completions`, `/v1/completions`, `/v1/models`, the same under
`/s/{session}/v1/...`, and `POST /s/{session}/outcome` to record how a session ended. Each
call is committed to the store before the client gets the end of its answer (the last byte
of a plain answer, the `[DONE]` of a stream), so every answered call is on disk; with
`answer_after_commit` off, before the session's next call is answered instead. With a
monitor configured, a session it flags is refused from then on (see `stop.py`).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from trajforge.openai_wire import error_body
from trajforge.proxy.answer_ids import AnswerReader
from trajforge.proxy.capture import CallContext, Tokens, tokens_of
from trajforge.proxy.client_watch import ClientWatch
from trajforge.proxy.config import ProxyConfig
from trajforge.proxy.faults import FaultInjector
from trajforge.proxy.record import Endpoint, MonitorStop, UpstreamFault
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.request_reader import ReadRequest, RequestReader
from trajforge.proxy.shaping import ClientAsked, augment, for_client, upstream_bytes
from trajforge.proxy.stop import STOP_STATUS, MonitorGate, refusal_message, refusal_response
from trajforge.proxy.streaming import relay_stream
from trajforge.proxy.upstream import Upstream, UpstreamError, observed
from trajforge.proxy.validate import request_problem
from trajforge.schema import Outcome
from trajforge.store import Store

log = logging.getLogger("trajforge.proxy")


class _JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


@dataclass
class Running:
    """What the proxy holds while it serves: opened at start-up, closed at shutdown."""

    store: Store
    recorder: Recorder
    upstream: Upstream


class RecordingProxy:
    """The proxy's ASGI app (`.app`) and its state: store, recorder, upstream pool."""

    def __init__(self, config: ProxyConfig, db: str | Path | None = None) -> None:
        self.config = config
        self.db = db
        self.faults = FaultInjector(config.faults) if config.faults else None
        self.gate = MonitorGate(config.monitor) if config.monitor else None
        self.token_ids_rejected = False
        self.answers = AnswerReader()
        self.requests = RequestReader()
        self.uncommitted: dict[str, asyncio.Future] = {}
        """Each session's last call not yet committed (with `answer_after_commit` off)."""
        self._running: Running | None = None
        self.routes = FastAPI(title="trajforge recording proxy", lifespan=self._lifespan)
        self.app = FastPath(self, self.routes)
        for prefix in ("", "/s/{session}"):
            self.routes.post(f"{prefix}/v1/chat/completions")(self.chat_completions)
            self.routes.post(f"{prefix}/v1/completions")(self.completions)
            self.routes.get(f"{prefix}/v1/models")(self.models)
        self.routes.post("/s/{session}/outcome")(self.outcome)

    @property
    def running(self) -> Running:
        """The store, recorder and upstream pool; only while the app is started."""
        if self._running is None:
            raise RuntimeError("the recording proxy is not started (run it under its lifespan)")
        return self._running

    @property
    def recorder(self) -> Recorder:
        return self.running.recorder

    @property
    def upstream(self) -> Upstream:
        return self.running.upstream

    @asynccontextmanager
    async def _lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        store = Store(self.db)
        recorder = Recorder(store, harness=self.config.harness)
        if self.gate is not None:
            self.gate.recorder = recorder
        self._running = Running(store, recorder, Upstream(self.config))
        try:
            yield
        finally:
            await self._running.upstream.close()
            if self.gate is not None:
                self.gate.close()
            recorder.close()
            store.close()

    def _refused(self, request: Request) -> Response | None:
        if self.config.token is None:
            return None
        sent = request.headers.get("authorization", "")
        if hmac.compare_digest(sent.encode(), f"Bearer {self.config.token}".encode()):
            return None
        body = error_body("missing or wrong proxy token", "authentication_error", "invalid_api_key")
        return JSONResponse(body, status_code=401)

    async def chat_completions(self, request: Request, session: str | None = None) -> Response:
        return await self.call_endpoint(request, "chat/completions", session)

    async def completions(self, request: Request, session: str | None = None) -> Response:
        return await self.call_endpoint(request, "completions", session)

    async def models(self, request: Request, session: str | None = None) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            status, content = await self.upstream.get(
                "/models", self.upstream.headers(request.headers)
            )
        except UpstreamError as error:
            return JSONResponse(error.body, status_code=error.status)
        return Response(content, status, media_type="application/json")

    async def outcome(self, request: Request, session: str) -> Response:
        """Record how a session ended: `{"success": bool, "reward": float}`."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            outcome = Outcome.model_validate_json(await request.body())
        except ValueError as exc:
            message = str(exc).splitlines()[0]
            return JSONResponse(error_body(message, "invalid_request_error"), status_code=400)
        trajectory_id = await asyncio.wrap_future(self.recorder.set_outcome(session, outcome))
        return _JSON({"trajectory_id": trajectory_id})

    def _session(self, request: Request, session: str | None) -> str:
        name = session or request.headers.get(self.config.session_header)
        return name or self.config.default_session

    async def call_endpoint(
        self, request: Request, endpoint: Endpoint, session: str | None
    ) -> Response:
        """Handle one completion call: forward, relay, record."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        name = self._session(request, session)
        read = await self._request_body(request, endpoint, name)
        if isinstance(read, Response):
            return read
        body = read.body
        context = CallContext(name, endpoint, body, stream=bool(body.get("stream")))
        if self.gate is not None:
            stop = await self.gate.check(context.session, endpoint, body)
            if stop is not None:
                return await self._refuse(context, stop)
        ask_ids = self.config.ask_token_ids and not self.token_ids_rejected
        upstream_body, asked = augment(body, endpoint == "chat/completions", self.config, ask_ids)
        payload = upstream_bytes(read.raw, body, upstream_body)
        headers = self.upstream.headers(request.headers)
        fault = self.faults.draw(request.headers) if self.faults else None
        try:
            await self._inject_early(fault)
            answer = await until_client_leaves(
                request, self._send_upstream(context, upstream_body, payload, headers, asked)
            )
            if answer is CLIENT_LEFT:
                await self.record(context, 499, error="client left before the answer")
                return Response(status_code=499)
            if context.stream:
                return relay_stream(
                    self, context, answer, asked, truncate=fault == "upstream_truncated"
                )
            data = answer
        except UpstreamError as error:
            await self.record(context, error.status, error=error.message, fault=error.fault)
            return JSONResponse(error.body, status_code=error.status)
        if fault == "upstream_truncated":
            return await self._truncated_plain(context, data, asked)
        await self.record(context, 200, response=data, tokens=tokens_of(data))
        return _JSON(for_client(data, asked))

    async def _request_body(
        self, request: Request, endpoint: Endpoint, session: str
    ) -> ReadRequest | Response:
        """The request's JSON body, or the 400/413 answer to a request that cannot be forwarded
        (such requests are not recorded: they never reached a model). The messages that
        repeat the session's previous request are not parsed again (`self.requests`)."""
        raw = await read_body(request, self.config.max_body_bytes)
        if raw is None:
            message = f"request body is larger than {self.config.max_body_bytes} bytes"
            return JSONResponse(error_body(message, "invalid_request_error"), status_code=413)
        try:
            read = self.requests.read(session, raw)
        except orjson.JSONDecodeError as exc:
            problem: str | None = f"request body is not JSON: {exc}"
        else:
            problem = (
                request_problem(endpoint, read.body, read.reused)
                if isinstance(read.body, dict)
                else "request body must be a JSON object"
            )
        if problem is not None:
            return JSONResponse(error_body(problem, "invalid_request_error"), status_code=400)
        if endpoint == "chat/completions":
            self.requests.keep(session, read)
        return read

    async def _send_upstream(
        self, context: CallContext, body: dict, payload: bytes, headers: dict, asked: ClientAsked
    ) -> Any:
        """Post `payload` (`body` as bytes), or open a stream; retried once without
        `return_token_ids` if it is refused. A plain answer is read by `self.answers` (the
        prompt ids it repeats are not parsed)."""
        send: Callable[[str, bytes, dict], Awaitable[Any]] = self.upstream.open_stream
        if not context.stream:
            send = partial(self.upstream.post, parse=partial(self.answers.read, context.session))
        path = f"/{context.endpoint}"
        try:
            return await send(path, payload, headers)
        except UpstreamError as error:
            added = "return_token_ids" in body and not asked.token_ids
            if error.status != 400 or not added or "return_token_ids" not in error.message:
                raise
        self.token_ids_rejected = True
        log.warning("the upstream refuses return_token_ids; no longer asking for token ids")
        body = {k: v for k, v in body.items() if k != "return_token_ids"}
        return await send(path, orjson.dumps(body), headers)

    async def _refuse(self, context: CallContext, stop: MonitorStop) -> Response:
        """Answer a request of a stopped session without forwarding it; record it as refused."""
        message = refusal_message(context.session, stop)
        await self.record(context, STOP_STATUS, error=message, monitor_stop=stop)
        return refusal_response(message)

    async def _inject_early(self, fault: str | None) -> None:
        if fault == "upstream_timeout" and self.faults is not None:
            await asyncio.sleep(self.faults.config.timeout_delay_s)
            raise observed(504, "upstream_timeout", "upstream timed out", injected=True)
        if fault == "upstream_5xx":
            raise observed(503, "upstream_5xx", "upstream answered 503", injected=True)

    async def _truncated_plain(self, context: CallContext, data: dict, asked: ClientAsked):
        text = orjson.dumps(for_client(data, asked))
        detail = "answer cut after half of its bytes"
        fault = UpstreamFault(kind="upstream_truncated", detail=detail, injected=True)
        await self.record(context, 200, response=data, error=detail, fault=fault)
        return Response(text[: len(text) // 2], 200, media_type="application/json")

    async def record(
        self,
        context: CallContext,
        status: int,
        response: dict | None = None,
        error: str | None = None,
        fault: UpstreamFault | None = None,
        tokens: Tokens | None = None,
        monitor_stop: MonitorStop | None = None,
    ) -> None:
        """Hand the call to the recorder and wait until it is committed (with
        `answer_after_commit` off: until the session's previous call is committed)."""
        call = context.captured(status, response, tokens, error, fault, monitor_stop)
        if self.gate is not None and response is not None and error is None:
            self.gate.observe(context.session, context.body, response)
        committed = asyncio.wrap_future(self.recorder.submit(call))
        if not self.config.answer_after_commit:
            previous = self.uncommitted.get(context.session)
            self.uncommitted[context.session] = committed
            committed.add_done_callback(partial(self._committed_later, context.session))
            if previous is not None:
                await asyncio.wait([previous])
            return
        try:
            await committed
        except Exception:  # the harness still gets its answer; the operator sees why
            log.exception("could not record a call of session %s", context.session)

    def _committed_later(self, session: str, committed: asyncio.Future) -> None:
        if self.uncommitted.get(session) is committed:
            del self.uncommitted[session]
        if not committed.cancelled() and committed.exception() is not None:
            error = committed.exception()
            log.error("could not record a call of session %s", session, exc_info=error)


class FastPath:
    """ASGI entry: the two completion routes go straight to their handlers, the rest to FastAPI.

    FastAPI's middleware stack and router cost about as much per call as the whole forward
    to the upstream; the hot routes skip them (same handlers, same `Request` objects).
    """

    def __init__(self, proxy: RecordingProxy, routes: FastAPI) -> None:
        self.proxy = proxy
        self.routes = routes

    def _match(self, path: str) -> tuple[Endpoint, str | None] | None:
        session = None
        if path.startswith("/s/"):
            session, _, path = path[3:].partition("/")
            path = "/" + path
        if path == "/v1/chat/completions":
            return "chat/completions", session or None
        if path == "/v1/completions":
            return "completions", session or None
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":  # every route, /docs and /openapi.json included
            refused = self.proxy._refused(Request(scope, receive))
            if refused is not None:
                await refused(scope, receive, send)
                return
        route = None
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self._match(scope["path"])
        if route is None:
            await self.routes(scope, receive, send)
            return
        endpoint, session = route
        response = await self.proxy.call_endpoint(Request(scope, receive), endpoint, session)
        await response(scope, receive, send)


CLIENT_LEFT = object()


async def until_client_leaves(request: Request, work: Awaitable[Any]) -> Any:
    """`await work`, or `CLIENT_LEFT` (with `work` cancelled) if the client disconnects first.

    The request body has been read, so the next ASGI message is the disconnect.
    """
    async with ClientWatch(request.receive):
        return await work
    return CLIENT_LEFT


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it is known to be longer than `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def build_proxy_app(config: ProxyConfig, db: str | Path | None = None) -> FastPath:
    """The ASGI app of a recording proxy writing to the store at `db`."""
    return RecordingProxy(config, db).app
