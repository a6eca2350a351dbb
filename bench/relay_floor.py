"""The floor under the recording proxy: the same server stack forwarding bytes and nothing else.

    python bench/relay_floor.py --upstream http://127.0.0.1:8001/v1 --port 8002 [--tcp]

An ASGI app on uvicorn (uvloop, httptools, no access log: as `trajforge proxy` runs) that
reads a request's body, posts the bytes to the upstream with one shared aiohttp session (the
proxy's client) and sends the answer back, streamed answers chunk by chunk. It parses no
JSON, records nothing and checks nothing, so its added latency is what one extra Python hop
on this stack costs on this machine; `proxy_overhead.py` runs it beside the proxy as the
target `relay` and reports the proxy's cost over it.

With `--tcp`, the floor under that: each client connection gets a connection of its own to
the upstream and the bytes are copied both ways on uvloop's streams, with no HTTP at all (the
target `tcp`). What `relay` adds over `tcp` is the cost of the server and client stack.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import uvicorn
import uvloop

HOP_HEADERS = {b"host", b"content-length", b"connection", b"transfer-encoding"}


class Relay:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.client: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        body = await _read_body(receive)
        path = scope["path"].removeprefix("/v1")
        headers = {
            key.decode(): value.decode()
            for key, value in scope["headers"]
            if key.lower() not in HOP_HEADERS
        }
        assert self.client is not None
        method = self.client.post if scope["method"] == "POST" else self.client.get
        async with method(f"{self.upstream}{path}", data=body, headers=headers) as answer:
            content_type = answer.headers.get("Content-Type", "application/json").encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": answer.status,
                    "headers": [(b"content-type", content_type)],
                }
            )
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.client is not None:
                    await self.client.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _read_body(receive: Any) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 18):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def tcp_relay(upstream: str, port: int) -> None:
    """Copy bytes between each client connection and an upstream connection of its own."""
    where = urlsplit(upstream)

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(where.hostname, where.port)
        except OSError:  # the upstream is down: the client sees its connection closed
            writer.close()
            return
        await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))

    server = await asyncio.start_server(connected, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="Upstream base URL, ending in /v1.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tcp", action="store_true", help="Copy bytes, no HTTP (see above).")
    args = parser.parse_args()
    if args.tcp:
        uvloop.run(tcp_relay(args.upstream, args.port))
        return
    uvicorn.run(
        Relay(args.upstream),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
