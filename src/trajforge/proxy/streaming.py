"""Relaying a streamed (SSE) answer chunk by chunk while rebuilding it for the record.

The client gets each chunk as soon as it arrives (minus the proxy's own additions). When the
upstream finishes, the rebuilt answer is committed and only then is `[DONE]` sent. A stream
that breaks, times out, carries bad JSON or ends without `[DONE]` is recorded as a fault and
the client receives an OpenAI-style error event (which the openai SDK raises as an APIError).
An injected truncation forwards half of the chunks and then closes the stream silently.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiohttp
import orjson
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from trajforge.proxy.capture import StreamAssembly, Tokens, tokens_of
from trajforge.proxy.client_watch import ClientWatch
from trajforge.proxy.record import UpstreamFault
from trajforge.proxy.shaping import ClientAsked, for_client
from trajforge.proxy.upstream import TRANSPORT_ERRORS, UpstreamError, observed, transport_error

if TYPE_CHECKING:
    from trajforge.proxy.app import RecordingProxy
    from trajforge.proxy.capture import CallContext

DONE = b"data: [DONE]\n\n"


def _event(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _decode(line: bytes) -> dict | None:
    """One SSE line: a chunk, None for anything that is not data; raises on bad data."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise observed(502, "upstream_malformed", f"bad stream chunk: {data[:200]!r}") from None
    if isinstance(chunk, dict) and "error" in chunk:
        raise observed(502, "upstream_5xx", f"upstream stream error: {chunk['error']}")
    return chunk


async def _chunk_batches(
    response: aiohttp.ClientResponse, timeout_s: float
) -> AsyncIterator[list[dict]]:
    """The decoded chunks of each network read, until `[DONE]`.

    Chunks that arrive together are relayed together (one write to the client instead of
    one per chunk). Raises `UpstreamError` on any kind of broken stream.
    """
    pending = b""
    try:
        async for raw in response.content.iter_any():
            *lines, pending = (pending + raw).split(b"\n")
            batch: list[dict] = []
            for line in lines:
                if line.strip() == b"data: [DONE]":
                    yield batch
                    return
                chunk = _decode(line.strip())
                if chunk is not None:
                    batch.append(chunk)
            if batch:
                yield batch
    except TRANSPORT_ERRORS as exc:
        raise transport_error(exc, timeout_s) from exc
    raise observed(502, "upstream_truncated", "upstream stream ended without [DONE]")


class StreamRelay:
    """One streamed call: forwards chunks, rebuilds the answer, records it."""

    def __init__(
        self,
        proxy: RecordingProxy,
        context: CallContext,
        response: aiohttp.ClientResponse,
        asked: ClientAsked,
        truncate: bool,
    ) -> None:
        self.proxy = proxy
        self.context = context
        self.response = response
        self.asked = asked
        self.truncate = truncate
        self.assembly = StreamAssembly()
        self.finished = False

    async def events(self) -> AsyncIterator[bytes]:
        try:
            async for event in self._forward():
                yield event
        finally:
            if not self.finished:  # the client went away mid-stream
                self.finished = True
                call = self.context.captured(499, *self._answer(), "client left")
                self.proxy.recorder.submit(call)
            self.response.release()  # back to the pool, or closed if unfinished

    async def _forward(self) -> AsyncIterator[bytes]:
        held: list[bytes] = []
        try:
            async for batch in _chunk_batches(self.response, self.proxy.config.timeout_s):
                events = self._shown(batch)
                if self.truncate:
                    held.extend(events)
                elif events:
                    yield b"".join(events)
        except UpstreamError as error:
            await self._record(error.status, error.message, error.fault)
            yield _event(error.body)
            return
        if self.truncate:
            detail = "stream cut after half of its chunks"
            fault = UpstreamFault(kind="upstream_truncated", detail=detail, injected=True)
            await self._record(200, detail, fault)
            yield b"".join(held[: max(1, len(held) // 2)])
            return
        await self._record(200, None, None)
        yield DONE

    def _shown(self, batch: list[dict]) -> list[bytes]:
        events = []
        for chunk in batch:
            self.assembly.add(chunk)
            shown = for_client(chunk, self.asked)
            if shown is not None:
                events.append(_event(shown))
        return events

    def _answer(self) -> tuple[dict | None, Tokens | None]:
        chat = self.context.endpoint == "chat/completions"
        body = self.assembly.body(chat) if self.assembly.base else None
        return body, (tokens_of(body) if body else None)

    async def _record(self, status: int, error: str | None, fault: UpstreamFault | None) -> None:
        self.finished = True
        body, tokens = self._answer()
        await self.proxy.record(
            self.context, status, response=body, error=error, fault=fault, tokens=tokens
        )


class EventStream(StreamingResponse):
    """A streamed answer whose iteration is cancelled when the client leaves (`ClientWatch`),
    instead of Starlette's task group per stream."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with ClientWatch(receive):
            await self.stream_response(send)


def relay_stream(
    proxy: RecordingProxy,
    context: CallContext,
    response: aiohttp.ClientResponse,
    asked: ClientAsked,
    truncate: bool,
) -> StreamingResponse:
    relay = StreamRelay(proxy, context, response, asked, truncate)
    return EventStream(relay.events(), media_type="text/event-stream")
