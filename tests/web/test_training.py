"""The training page and its API over a store a training loop writes into."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from trajforge.store import Store
from trajforge.web import UiConfig, create_app

from .conftest import UiStore
from .rl_rows import SETTINGS, add_iteration, register


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "rollouts.db"
    Store(path).close()
    return path


def test_api_lists_each_run_with_its_settings_and_iteration_rows(db: Path) -> None:
    client = TestClient(create_app(UiConfig(db=db)), raise_server_exceptions=False)
    assert client.get("/api/training").json() == {"runs": []}
    assert "No training run" in client.get("/training").text
    register(db, "out/a")
    rows = [add_iteration(db, "out/a", i, 0.1 * i) for i in (1, 2)]
    body = client.get("/api/training").json()
    [run] = body["runs"]
    assert (run["name"], run["kind"], run["settings"]) == ("out/a", "rl", SETTINGS)
    assert run["iterations"] == rows and run["last_written"] >= run["started_at"]
    register(db, "out/b")
    assert [r["name"] for r in client.get("/api/training").json()["runs"]] == ["out/b", "out/a"]
    assert [r["name"] for r in client.get("/api/training?run=out/a").json()["runs"]] == ["out/a"]
    missing = client.get("/api/training", params={"run": "nope"})
    assert missing.status_code == 404 and "no training run 'nope'" in missing.json()["error"]


def test_page_shows_plots_table_and_the_start(db: Path) -> None:
    register(db, "out/a")
    for i in (1, 2):
        add_iteration(db, "out/a", i, 0.25 * i)
    client = TestClient(create_app(UiConfig(db=db)))
    page = client.get("/training").text
    assert '<a href="/training" class="active">Training</a>' in page
    assert page.count("<svg") == 3 and page.count('class="ci series0"') == 2  # start, iteration 2
    assert 'data-plot="correlation"' in page and 'class="threshold"' in page
    for iteration in ("2", "1", "0"):  # newest first, the start last
        assert f'<tr data-iteration="{iteration}">' in page
    assert page.index('data-iteration="2"') < page.index('data-iteration="1"')
    assert "0.155 [0.111, 0.212]" in page and "0.160 [0.115, 0.215]" in page
    assert "2 of 6" in page


def test_event_stream_sends_a_new_iteration_with_its_section(
    ui_url: str, ui_store: UiStore
) -> None:
    register(ui_store.db, "out/stream")
    register(ui_store.db, "out/other")
    page = httpx.get(f"{ui_url}/training?run=out/stream", timeout=20).text
    after = int(page.split('data-after="')[1].split('"')[0])
    add_iteration(ui_store.db, "out/other", 1, 0.5)  # another run: not this page's
    add_iteration(ui_store.db, "out/stream", 1, 0.5)  # written after the page: still sent
    url = f"{ui_url}/api/training/events?after={after}&run=out/stream"
    with httpx.stream("GET", url, timeout=20) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines = reply.iter_lines()
        kind = next(line for line in lines if line.startswith("event:"))
        data = orjson.loads(next(lines).removeprefix("data: "))
    assert kind == "event: iteration"
    assert (data["run"], data["iteration"]) == ("out/stream", 1)
    assert '<tr data-iteration="1" class="live">' in data["html"]
