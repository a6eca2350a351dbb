"""Fixtures of the proxy tests: free loopback ports and CLI servers run as real subprocesses."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def free_port() -> Callable[[], int]:
    return _free_port


def _wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited early: {process.stderr.read()}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"server at {url} did not come up")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_cli(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """Run `trajforge ARGS` to completion, as a user would."""
    command = [sys.executable, "-m", "trajforge", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture
def cli_server() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start `trajforge ARGS` in the background, wait for `ready_url`; stopped at teardown."""
    started: list[subprocess.Popen] = []

    def start(*args: str, ready_url: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "trajforge", *args]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        started.append(process)
        _wait_until_up(ready_url, process)
        return process

    yield start
    for process in started:
        _stop(process)


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess]:
    return run_cli
