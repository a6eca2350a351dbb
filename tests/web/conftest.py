"""A real store for the UI tests: real runs of ../shared/data, a fork, a proxy session."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
import uvicorn
from fastapi import FastAPI

from trajforge.importers import import_paths
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.rollout.fork import fork
from trajforge.store import Store, TrajectoryFilter
from trajforge.web import UiConfig, create_app

WHO_AND_WHEN = "who-and-when/Algorithm-Generated"
TAU_AIRLINE = "tau-bench/historical_trajectories/gpt-4o-airline.json"
FORK_AT = 3
TOOL_REPLY = {"content": "look", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}


@dataclass
class UiStore:
    db: Path
    data: Path
    fork_parent: str
    fork_child: str
    session: str


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def record_session(db: Path, session: str, turns: int = 2) -> str:
    """Drive a short tool-using conversation through a real proxy into `db`."""
    replies = [TOOL_REPLY, "found a.py", TOOL_REPLY, "done"][:turns]
    with (
        MockOpenAIServer(replies) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        client = openai.OpenAI(base_url=proxy.session_url(session), api_key="k", max_retries=0)
        messages: list[dict] = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "list the files please"},
        ]
        for _ in range(turns):
            reply = client.chat.completions.create(model="m", messages=messages).choices[0]
            message = reply.message
            messages.append(
                message.model_dump(exclude_none=True, exclude={"refusal", "annotations"})
            )
            for call in message.tool_calls or []:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.py"})
    return trajectory_id(session)


@pytest.fixture(scope="session")
def ui_store(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> UiStore:
    db = tmp_path_factory.mktemp("ui") / "ui.db"
    with Store(db) as store:
        import_paths(store, [str(shared_data / WHO_AND_WHEN), str(shared_data / TAU_AIRLINE)])
        flt = TrajectoryFilter(environment="tau-airline", success=False, limit=1)
        parent = store.get(store.rows(flt)[0].id)
        child = fork(parent, FORK_AT, "expert")
        store.add(child)
    session = record_session(db, "ui-test-session")
    return UiStore(db, shared_data, parent.id, child.id, session)


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # serving from a thread
        pass


@contextmanager
def serve_app(app: FastAPI) -> Iterator[str]:
    """A real server for `app` on a loopback port, in a thread; yields its base URL."""
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise AssertionError("UI server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def ui_url(ui_store: UiStore) -> Iterator[str]:
    """A real UI server on a loopback port, in a thread, over the test store."""
    with serve_app(create_app(UiConfig(db=ui_store.db))) as base:
        yield base
