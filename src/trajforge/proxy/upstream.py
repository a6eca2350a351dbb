"""Talking to the upstream model server, and turning its failures into OpenAI-style errors.

Every failure becomes an `UpstreamError` carrying the status and error body the client gets
and, for failures of the upstream itself (time-out, unreachable, 5xx, malformed answer), the
`UpstreamFault` that is recorded. A 4xx is the client's own mistake: passed through as the
upstream wrote it, recorded as an error but not as a fault.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from trajforge.models.mock_answers import error_body
from trajforge.proxy.config import ProxyConfig
from trajforge.proxy.http11 import Http11Client
from trajforge.proxy.record import UpstreamFault


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


def observed(status: int, kind: str, message: str, injected: bool = False) -> UpstreamError:
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


def transport_error(exc: httpx.HTTPError, timeout_s: float) -> UpstreamError:
    """The error for a time-out or a broken connection."""
    if isinstance(exc, httpx.TimeoutException):
        return observed(504, "upstream_timeout", f"upstream timed out after {timeout_s:g}s")
    return observed(502, "upstream_unreachable", f"upstream connection failed: {exc!r}")


class Upstream:
    """The upstream connection pool: `Http11Client` for http://, httpx for https://."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        base = config.upstream.rstrip("/")
        self.fast = Http11Client(base, config.timeout_s) if base.startswith("http://") else None
        self.client = httpx.AsyncClient(
            base_url=base,
            timeout=config.timeout_s,
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
        )

    def headers(self, client_headers: Any) -> dict[str, str]:
        """Headers for the upstream: JSON, and the key the configuration says to send."""
        headers = {"content-type": "application/json"}
        if self.config.upstream_api_key:
            headers["authorization"] = f"Bearer {self.config.upstream_api_key}"
        elif self.config.token is None and client_headers.get("authorization"):
            headers["authorization"] = client_headers["authorization"]
        return headers

    async def _send(self, method: str, path: str, headers: dict, body: bytes = b""):
        """An open response (status known, body unread), or an `UpstreamError`."""
        try:
            if self.fast is not None:
                return await self.fast.send(method, path, headers, body)
            request = self.client.build_request(method, path, content=body, headers=headers)
            return await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.config.timeout_s) from exc

    async def _read_all(self, response) -> bytes:
        try:
            return await response.aread()
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.config.timeout_s) from exc
        finally:
            await response.aclose()

    async def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict:
        """A non-streamed call: the decoded JSON answer, or an `UpstreamError`."""
        response = await self._send("POST", path, headers, orjson.dumps(body))
        content = await self._read_all(response)
        if response.status_code != 200:
            raise status_error(response.status_code, content)
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            snippet = content[:200].decode(errors="replace")
            raise observed(502, "upstream_malformed", f"upstream answer is not JSON: {snippet!r}")
        return data

    async def open_stream(self, path: str, body: dict[str, Any], headers: dict[str, str]):
        """Start a streamed call; the open response, or an `UpstreamError` before any chunk."""
        response = await self._send("POST", path, headers, orjson.dumps(body))
        if response.status_code != 200:
            raise status_error(response.status_code, await self._read_all(response))
        return response

    async def get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """A GET (e.g. `/models`): status and body."""
        response = await self._send("GET", path, headers)
        return response.status_code, await self._read_all(response)

    async def close(self) -> None:
        await self.client.aclose()
        if self.fast is not None:
            await self.fast.aclose()
