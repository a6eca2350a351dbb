"""Talking to the upstream model server, and turning its failures into OpenAI-style errors.

Every failure becomes an `UpstreamError` carrying the status and error body the client gets
and, for failures of the upstream itself (time-out, unreachable, 5xx, malformed answer), the
`UpstreamFault` that is recorded. A 4xx is the client's own mistake: passed through as the
upstream wrote it, recorded as an error but not as a fault.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
from yarl import URL

from trajforge.openai_wire import error_body
from trajforge.proxy.config import ProxyConfig
from trajforge.proxy.record import UpstreamFault
from trajforge.schema import UpstreamFaultKind

TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
"""What aiohttp raises for a time-out, a refused or broken connection or a bad HTTP answer."""


class UpstreamError(Exception):
    """A call that failed; `body` is the OpenAI-style error the client receives."""

    def __init__(
        self, status: int, message: str, kind: str, fault: UpstreamFault | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body: dict[str, Any] = error_body(message, kind, code=fault.kind if fault else None)
        self.fault = fault


def observed(
    status: int, kind: UpstreamFaultKind, message: str, injected: bool = False
) -> UpstreamError:
    """An upstream failure that is also recorded as a fault."""
    fault = UpstreamFault(kind=kind, detail=message, injected=injected)
    return UpstreamError(status, message, "upstream_error", fault)


def _error_message(body: Any, text: str) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or body["error"])
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    return text[:500] or "no body"


def status_error(status: int, content: bytes) -> UpstreamError:
    """The error for an upstream answer with a non-200 status (its body kept when OpenAI-like)."""
    text = content.decode(errors="replace")
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        body = None
    message = _error_message(body, text)
    if status >= 500:
        error = observed(status, "upstream_5xx", f"upstream answered {status}: {message}")
    else:
        error = UpstreamError(status, message, "invalid_request_error")
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error.body = body
    return error


def transport_error(exc: BaseException, timeout_s: float) -> UpstreamError:
    """The error for a time-out or a broken connection (one of `TRANSPORT_ERRORS`)."""
    if isinstance(exc, TimeoutError):
        return observed(504, "upstream_timeout", f"upstream timed out after {timeout_s:g}s")
    return observed(502, "upstream_unreachable", f"upstream connection failed: {exc!r}")


class Upstream:
    """The upstream connection pool: one aiohttp session with keep-alive connections.

    Cookies an upstream sets are not kept: they would be sent on every client's calls.

    `timeout_s` bounds connecting and each read (a stream may run longer as long as data keeps
    coming). Must be created inside the running event loop.
    """

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.base = config.upstream.rstrip("/")
        self._urls: dict[str, URL] = {}
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.timeout_s, sock_read=config.timeout_s
        )
        connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            skip_auto_headers=("User-Agent",),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    def headers(self, client_headers: Any) -> dict[str, str]:
        """Headers for the upstream: JSON, and the key the configuration says to send."""
        headers = {"content-type": "application/json"}
        if self.config.upstream_api_key:
            headers["authorization"] = f"Bearer {self.config.upstream_api_key}"
        elif self.config.token is None and client_headers.get("authorization"):
            headers["authorization"] = client_headers["authorization"]
        return headers

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.base + path)
        return url

    async def _send(
        self, method: str, path: str, headers: dict, body: bytes = b""
    ) -> aiohttp.ClientResponse:
        """An open response (status known, body unread), or an `UpstreamError`."""
        try:
            return await self.session.request(
                method, self._url(path), data=body or None, headers=headers
            )
        except TRANSPORT_ERRORS as exc:
            raise transport_error(exc, self.config.timeout_s) from exc

    async def _read_all(self, response: aiohttp.ClientResponse) -> bytes:
        try:
            return await response.read()
        except TRANSPORT_ERRORS as exc:
            raise transport_error(exc, self.config.timeout_s) from exc
        finally:
            response.release()

    async def post(
        self,
        path: str,
        body: bytes,
        headers: dict[str, str],
        parse: Callable[[bytes], Any] = orjson.loads,
    ) -> dict:
        """A non-streamed call of the JSON `body`: the answer decoded by `parse`, or an
        `UpstreamError`."""
        response = await self._send("POST", path, headers, body)
        content = await self._read_all(response)
        if response.status != 200:
            raise status_error(response.status, content)
        try:
            data = parse(content)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            snippet = content[:200].decode(errors="replace")
            raise observed(502, "upstream_malformed", f"upstream answer is not JSON: {snippet!r}")
        return data

    async def open_stream(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> aiohttp.ClientResponse:
        """Start a streamed call of the JSON `body`; the open response, or an `UpstreamError`
        before any chunk."""
        response = await self._send("POST", path, headers, body)
        if response.status != 200:
            raise status_error(response.status, await self._read_all(response))
        return response

    async def get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """A GET (e.g. `/models`): status and body."""
        response = await self._send("GET", path, headers)
        return response.status, await self._read_all(response)

    async def close(self) -> None:
        await self.session.close()
