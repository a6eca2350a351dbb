"""Run an ASGI app with uvicorn on a background thread (mock servers, the proxy in tests)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from trajforge.errors import UserError


class BackgroundServer:
    """A real uvicorn server on its own thread; `port` is known once `start()` returns."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout_s: float = 20.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise UserError(f"server could not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
