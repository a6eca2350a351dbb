"""`trajforge serve` in a process of its own, started and stopped by the code that uses it.

The RL loop's rollouts are many episode threads, the recording proxy and the model server.
In one process they share one interpreter lock: the decoding thread gives it up at every
torch operation and waits to get it back behind the episodes' Python (a batch's cache
assembly took 20 times longer beside four busy threads than alone). `ServeProcess` runs the
ordinary `serve` command as a child process instead, on loopback, with its own lock and its
own torch threads; everything else reaches it over HTTP as it would any server: requests,
hot reloads (`/admin/reload`, with a token passed in the environment, not on the command
line) and its counters (`/stats`). Its log goes to a file whose tail is shown if it dies.

The child holds the read end of a pipe as its standard input and stops when it closes
(`--exit-with-stdin`): however the parent ends, a `kill -9` included, its server does not
outlive it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from trajforge.errors import UserError
from trajforge.serve.app import ServeConfig

START_TIMEOUT_S = 180.0
"""How long the server may take to load its checkpoint and answer."""
LOG_TAIL = 2000
"""Characters of the server's log shown when it fails."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def stop_when_stdin_closes() -> None:
    """In the child: send this process SIGTERM (uvicorn's graceful stop) once standard input
    reaches its end, which is when the parent holding the pipe's other end is gone."""

    def watch() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


class ServeProcess:
    """A `trajforge serve CHECKPOINT` child process (module docstring)."""

    def __init__(
        self, checkpoint: Path, config: ServeConfig, log: Path, threads: int | None = None,
        reload_token: str | None = None,
    ) -> None:  # fmt: skip
        self.checkpoint, self.config, self.log = checkpoint, config, log
        self.threads, self.reload_token = threads, reload_token
        self.host, self.port = "127.0.0.1", 0
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        config = self.config
        command = [
            sys.executable, "-m", "trajforge", "serve", str(self.checkpoint),
            "--host", self.host, "--port", str(self.port),
            "--max-batch", str(config.max_batch), "--max-wait-ms", str(config.max_wait_ms),
            "--max-tokens", str(config.max_tokens),
            "--max-body-mb", str(config.max_body_bytes / 2**20),
            "--prefix-cache", str(config.prefix_cache_mb), "--exit-with-stdin",
        ]  # fmt: skip
        if self.threads:
            command += ["--threads", str(self.threads)]
        return command

    def start(self) -> ServeProcess:
        self.port = free_port(self.host)
        env = dict(os.environ)
        env.pop("TRAJFORGE_RELOAD_TOKEN", None)
        if self.reload_token:
            env["TRAJFORGE_RELOAD_TOKEN"] = self.reload_token
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                stdin=subprocess.PIPE,
            )  # fmt: skip
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        """Poll `/v1/models` through one client: `httpx.get` makes a client, and loads the
        certificate store, at every call (45 ms of CPU here, taken from the starting server
        every 0.1 s on two cores)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                if not self.running:
                    raise UserError(f"serve {self.checkpoint} exited while starting{self._tail()}")
                try:
                    if client.get(f"{self.url}/v1/models").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise UserError(f"serve {self.checkpoint} did not answer in {START_TIMEOUT_S:.0f} s"
                        f"{self._tail()}")  # fmt: skip

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stats(self) -> dict[str, Any]:
        """The server's `/stats` (its counters, checkpoint and codec)."""
        try:
            reply = httpx.get(f"{self.url}/stats", timeout=30)
        except httpx.TransportError as exc:
            message = f"serve {self.checkpoint} does not answer ({exc}){self._tail()}"
            raise UserError(message) from None
        reply.raise_for_status()
        return dict(reply.json())

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if process.stdin is not None:
            process.stdin.close()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _tail(self) -> str:
        try:
            text = self.log.read_text(errors="replace")[-LOG_TAIL:].strip()
        except OSError:
            return ""
        return f"; its log ({self.log}) ends:\n{text}" if text else f" (log: {self.log})"

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
