"""A small HTTP/1.1 keep-alive client for plain-HTTP upstreams (vLLM, SGLang, the mock).

The proxy's added latency is mostly client overhead: a general client (httpx) spends about
ten times the CPU per call that writing one request and reading one response on a pooled
asyncio stream does. This client does only that: one write per request, `Content-Length`
or chunked bodies, connection reuse, one retry on a stale pooled connection. HTTPS
upstreams keep using httpx. Failures are raised as the matching httpx exceptions, so callers
handle both clients the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx

_STALE = (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError)


class RawResponse:
    """A response whose body is read on demand (`aread`, or `aiter_bytes` for streams)."""

    def __init__(self, client: Http11Client, connection: _Connection, status: int, headers: dict):
        self._client = client
        self._connection = connection
        self.status_code = status
        self.headers = headers
        self._done = False

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        reader = self._connection.reader
        timeout = self._client.timeout_s
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                async for piece in _chunked(reader, timeout):
                    yield piece
            elif "content-length" in self.headers:
                size = int(self.headers["content-length"])
                if size:
                    yield await _read(reader.readexactly(size), timeout)
            else:
                while piece := await _read(reader.read(65536), timeout):
                    yield piece
                self._connection.reusable = False
            self._done = True
        except asyncio.IncompleteReadError as exc:
            self._connection.reusable = False
            raise httpx.RemoteProtocolError("upstream closed the connection mid-answer") from exc

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self.aiter_bytes()])

    async def aclose(self) -> None:
        self._client.release(self._connection, reusable=self._done)


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = True

    def close(self) -> None:
        self.writer.close()


async def _read(awaitable, timeout_s: float):
    try:
        async with asyncio.timeout(timeout_s):
            return await awaitable
    except TimeoutError:
        raise httpx.ReadTimeout(f"no data from upstream for {timeout_s:g}s") from None


async def _chunked(reader: asyncio.StreamReader, timeout_s: float) -> AsyncIterator[bytes]:
    while True:
        line = await _read(reader.readuntil(b"\r\n"), timeout_s)
        size = int(line.split(b";")[0].strip(), 16)
        if size == 0:
            while (await _read(reader.readuntil(b"\r\n"), timeout_s)) != b"\r\n":
                pass
            return
        data = await _read(reader.readexactly(size + 2), timeout_s)
        yield data[:-2]


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


class Http11Client:
    """A keep-alive connection pool to one `http://host:port/prefix` base URL."""

    def __init__(self, base_url: str, timeout_s: float, max_idle: int = 256) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.max_idle = max_idle
        self._idle: list[_Connection] = []

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {self.host}:{self.port}") from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return _Connection(reader, writer)

    def release(self, connection: _Connection, reusable: bool) -> None:
        if reusable and connection.reusable and len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            connection.close()

    def _encode(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"host: {self.host}:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"content-length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def _exchange(self, connection: _Connection, request: bytes) -> RawResponse:
        connection.writer.write(request)
        await connection.writer.drain()
        head = await _read(connection.reader.readuntil(b"\r\n\r\n"), self.timeout_s)
        status, headers = _parse_head(head[:-4])
        if headers.get("connection", "").lower() == "close":
            connection.reusable = False
        return RawResponse(self, connection, status, headers)

    async def send(self, method: str, path: str, headers: dict[str, str], body: bytes = b""):
        """Send a request; the open response (read its body, then `aclose()` it)."""
        request = self._encode(method, path, headers, body)
        while self._idle:
            connection = self._idle.pop()
            try:
                return await self._exchange(connection, request)
            except _STALE:  # the upstream closed an idle connection: try another
                connection.close()
            except BaseException:
                connection.close()
                raise
        connection = await self._connect()
        try:
            return await self._exchange(connection, request)
        except (*_STALE, OSError) as exc:
            connection.close()
            raise httpx.RemoteProtocolError(f"upstream dropped the connection: {exc!r}") from exc
        except BaseException:
            connection.close()
            raise

    async def aclose(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()
