"""`ProxyServer`: the recording proxy on a background thread (tests, benchmarks, scripts)."""

from __future__ import annotations

from pathlib import Path

from trajforge.models.serve import BackgroundServer
from trajforge.proxy.app import RecordingProxy
from trajforge.proxy.config import ProxyConfig


class ProxyServer:
    """A real proxy on loopback; `base_url` ends in `/v1`, `session_url(name)` too."""

    def __init__(
        self, config: ProxyConfig, db: str | Path, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.proxy = RecordingProxy(config, db)
        self._server = BackgroundServer(self.proxy.app, host, port)

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def session_url(self, session: str) -> str:
        return f"{self.url}/s/{session}/v1"

    def flush(self) -> None:
        """Wait until every call handed to the recorder is committed."""
        self.proxy.recorder.flush()

    def __enter__(self) -> ProxyServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
