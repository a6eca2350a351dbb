"""Requests that must be refused with a clear 4xx/503, never a traceback: cross-origin
posts, posts without the form token or with a body that is not a form, parameters out of
bounds, and searches that run past the time budget (while other pages stay fast)."""

from __future__ import annotations

import string
import threading
import time

import httpx
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from trajforge.cli.ui import allowed_hosts
from trajforge.store import Store, TrajectoryFilter
from trajforge.web import UiConfig, create_app

from .conftest import UiStore, serve_app

SLOW_SEARCH = " OR ".join(f"{letter}*" for letter in string.ascii_lowercase)
"""A prefix per letter: every run matches, each prefix expands to thousands of terms (several
times slower than the eight of `a* OR ... OR h*`, which take 0.7 s here on an idle machine)."""
HUGE = "9" * 5000
"""An integer of more digits than Python's int() reads (4300)."""


@pytest.fixture(scope="module")
def client(ui_store: UiStore) -> TestClient:
    return TestClient(create_app(UiConfig(db=ui_store.db)), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def parent(ui_store: UiStore) -> str:
    """A tau run to fork here (not the one other tests count the forks of)."""
    with Store(ui_store.db) as store:
        rows = store.rows(TrajectoryFilter(environment="tau-airline", forks=False))
    return next(r.id for r in rows if r.id != ui_store.fork_parent)


def _form_token(client: TestClient, parent: str) -> str:
    page = client.get(f"/runs/{parent}/fork", params={"at": 5}).text
    return page.split('name="form_token" value="')[1].split('"')[0]


def _forks(ui_store: UiStore, parent: str) -> int:
    with Store(ui_store.db) as store:
        return sum(1 for row in store.rows() if row.parent_id == parent)


def _post(client: TestClient, path: str, body: str | bytes, **headers: str) -> httpx.Response:
    headers.setdefault("content-type", "application/x-www-form-urlencoded")
    return client.post(path, content=body, headers=headers, follow_redirects=False)


def test_cross_origin_and_tokenless_fork_posts_are_refused(
    client: TestClient, ui_store: UiStore, parent: str
) -> None:
    token = _form_token(client, parent)
    path = f"/runs/{parent}/fork"
    good = f"at=5&policy=expert&form_token={token}"
    before = _forks(ui_store, parent)
    refusals = [
        (_post(client, path, good, origin="http://127.0.0.1:9999"), 403, "origin"),
        (_post(client, path, good, origin="null"), 403, "origin"),
        (_post(client, path, good, **{"sec-fetch-site": "same-site"}), 403, "same-site"),
        (_post(client, path, good, **{"sec-fetch-site": "cross-site"}), 403, "cross-site"),
        (_post(client, path, good, **{"content-type": "text/plain"}), 415, "text/plain"),
        (_post(client, path, '{"at": 5}', **{"content-type": "application/json"}), 415, "form"),
        (_post(client, path, "at=5&policy=expert"), 403, "form token"),
        (_post(client, path, "at=5&policy=expert&form_token=guess"), 403, "form token"),
    ]
    for response, status, words in refusals:
        assert response.status_code == status, response.text
        assert words in response.text and "Traceback" not in response.text
    assert _forks(ui_store, parent) == before  # nothing was forked
    same_origin = {"origin": str(client.base_url), "sec-fetch-site": "same-origin"}
    assert _post(client, path, good, **same_origin).status_code == 303
    assert _forks(ui_store, parent) == before + 1


def test_every_state_changing_route_needs_the_form_token(client: TestClient, parent: str) -> None:
    """Whatever POST routes the app has: without the token, each is refused."""
    posts = [
        r.path
        for r in client.app.routes  # type: ignore[attr-defined]
        if isinstance(r, APIRoute) and r.methods & {"POST", "PUT", "PATCH", "DELETE"}
    ]
    assert posts
    for path in posts:
        concrete = path.replace("{traj_id}", parent)
        response = _post(client, concrete, "at=5")
        assert response.status_code == 403 and "form token" in response.text


def test_a_form_that_is_not_utf8_or_too_big_is_a_4xx(client: TestClient, parent: str) -> None:
    token = _form_token(client, parent)
    path = f"/runs/{parent}/fork"
    raw = _post(client, path, b"at=5&policy=\xff\xfe&form_token=" + token.encode())
    assert raw.status_code == 400 and "not UTF-8" in raw.text
    escaped = _post(client, path, f"at=5&policy=%FF&form_token={token}")
    assert escaped.status_code == 400 and "not UTF-8" in escaped.text
    big = _post(client, path, "x=" + "a" * 100_000)
    assert big.status_code == 413


@pytest.mark.parametrize(
    "path, params, words",
    [
        ("/api/runs", {"page": "9223372036854775807"}, "page must be a whole number from 1"),
        ("/", {"page": "9223372036854775807"}, "page must be a whole number from 1"),
        ("/api/runs", {"per_page": HUGE}, "per_page must be a whole number"),
        ("/api/runs", {"page": "²"}, "page must be a whole number"),
        ("/api/runs", {"per_page": "501"}, "from 1 to 500"),
        ("/api/training/events", {"after": HUGE}, "after must be a whole number"),
        ("/api/diff", {}, "needs two runs"),
    ],
)
def test_parameters_out_of_bounds_are_a_400(
    client: TestClient, path: str, params: dict, words: str
) -> None:
    response = client.get(path, params=params)
    assert response.status_code == 400, response.text
    assert words in response.text and "Traceback" not in response.text
    assert len(response.text) < 5000  # a huge value is not echoed back whole


def test_fork_point_out_of_bounds_is_a_400(client: TestClient, parent: str) -> None:
    page = client.get(f"/runs/{parent}/fork", params={"at": HUGE})
    assert page.status_code == 400 and "at must be a whole number" in page.text
    token = _form_token(client, parent)
    path = f"/runs/{parent}/fork"
    for at in (HUGE, "-1", "5.0"):
        response = _post(client, path, f"at={at}&policy=expert&form_token={token}")
        assert response.status_code == 400 and "at must be a whole number" in response.text


def test_a_search_past_the_time_budget_is_a_503_while_other_pages_answer(
    ui_store: UiStore,
) -> None:
    """Three slow searches at once on a real server: each is stopped and says so, and a page
    and a static file asked for meanwhile answer at once (the searches run off the loop)."""
    budget = 0.25
    with serve_app(create_app(UiConfig(db=ui_store.db, query_seconds=budget))) as base:
        results: list[httpx.Response] = []

        def search() -> None:
            results.append(httpx.get(f"{base}/api/runs", params={"q": SLOW_SEARCH}, timeout=60))

        threads = [threading.Thread(target=search) for _ in range(3)]
        for thread in threads:
            thread.start()
        time.sleep(0.05)
        static = httpx.get(f"{base}/static/style.css", timeout=60)
        document = httpx.get(f"{base}/api/runs/{ui_store.fork_parent}", timeout=60)
        for thread in threads:
            thread.join()
    assert static.status_code == 200 and document.status_code == 200
    assert [r.status_code for r in results] == [503, 503, 503]
    assert "took longer than its budget of 0.25 s" in results[0].json()["error"]
    assert "narrow the search" in results[0].json()["error"]


def test_with_a_token_cookie_a_cross_origin_post_is_still_refused(
    ui_store: UiStore, parent: str
) -> None:
    """Another port of 127.0.0.1 is the same site: the browser sends the `--token` cookie
    along, and the origin check and the form token must refuse the post anyway."""
    client = TestClient(create_app(UiConfig(db=ui_store.db, token="s3cret")))
    assert client.get("/", params={"token": "s3cret"}).status_code == 200  # sets the cookie
    path = f"/runs/{parent}/fork"
    cross = _post(
        client, path, "at=5&policy=expert", origin="http://127.0.0.1:9999",
        **{"sec-fetch-site": "same-site"},
    )  # fmt: skip
    assert cross.status_code == 403
    assert _post(client, path, "at=5&policy=expert").status_code == 403  # no form token


def test_requests_for_another_host_are_refused(ui_store: UiStore) -> None:
    """DNS rebinding: a page whose own name resolves to 127.0.0.1 reads nothing here."""
    hosts = allowed_hosts("127.0.0.1", [])
    client = TestClient(create_app(UiConfig(db=ui_store.db, allowed_hosts=hosts)))
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST."):
        assert client.get("/", headers={"host": host}).status_code == 200, host
    for host in ("rebound.example:8765", "127.0.0.1.rebound.example", ""):
        page = client.get("/", headers={"host": host})
        assert page.status_code == 421, host
        assert "--allow-host" in page.text
    answer = client.get("/api/runs", headers={"host": "rebound.example"})
    assert answer.status_code == 421 and "rebound.example" in answer.json()["error"]


def test_the_ui_answers_to_the_names_it_is_given() -> None:
    assert allowed_hosts("127.0.0.1", []) == {"localhost", "127.0.0.1", "::1"}
    assert "box.lan" in (allowed_hosts("10.0.0.5", ["Box.lan"]) or set())
    assert "10.0.0.5" in (allowed_hosts("10.0.0.5", []) or set())
    assert allowed_hosts("0.0.0.0", []) is None
    assert allowed_hosts("::", ["ui.example"]) == {"localhost", "127.0.0.1", "::1", "ui.example"}
