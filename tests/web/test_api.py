"""The JSON API and bad input, against a real store of real runs (no browser)."""

from __future__ import annotations

import html
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from trajforge.store import Store
from trajforge.web import UiConfig, create_app

from .conftest import WHO_AND_WHEN, UiStore, free_port

PHRASE = "Twelve animals of the Chinese zodiac"


@pytest.fixture(scope="module")
def client(ui_store: UiStore) -> TestClient:
    return TestClient(create_app(UiConfig(db=ui_store.db)), raise_server_exceptions=False)


def _source_id(ui_store: UiStore, name: str) -> str:
    with Store(ui_store.db) as store:
        return next(r.id for r in store.rows() if (r.source_file or "").endswith(name))


def test_api_runs_lists_every_run_with_its_fields(client: TestClient, ui_store: UiStore) -> None:
    with Store(ui_store.db) as store:
        total = store.count()
    body = client.get("/api/runs", params={"per_page": 5}).json()
    assert body["total"] == total >= 126 + 200 + 2  # later tests add forks and sessions
    assert len(body["runs"]) == 5
    assert {"id", "source", "model", "environment", "task_id", "success"} <= set(body["runs"][0])


def test_api_search_finds_a_phrase_in_its_run(client: TestClient, ui_store: UiStore) -> None:
    body = client.get("/api/runs", params={"q": f'"{PHRASE}"'}).json()
    ids = [run["id"] for run in body["runs"]]
    assert _source_id(ui_store, f"{WHO_AND_WHEN}/13.json") in ids
    assert body["total"] == len(ids) >= 1
    for traj_id in ids:  # every hit really holds the phrase
        assert PHRASE.lower() in client.get(f"/api/runs/{traj_id}").text.lower()
    assert all("[" in run["snippet"] for run in body["runs"])


def test_search_combines_with_filters(client: TestClient) -> None:
    both = client.get("/api/runs", params={"q": "reservation", "env": "tau-airline"}).json()
    none = client.get("/api/runs", params={"q": "reservation", "harness": "nobody"}).json()
    assert both["total"] > 0 and none == {"total": 0, "runs": []}
    assert all(run["environment"] == "tau-airline" for run in both["runs"])


def test_api_run_is_the_stored_document(client: TestClient, ui_store: UiStore) -> None:
    doc = client.get(f"/api/runs/{ui_store.fork_child[:10]}").json()
    assert doc["id"] == ui_store.fork_child
    assert doc["parent"]["trajectory_id"] == ui_store.fork_parent


@pytest.mark.parametrize("query", ['"unclosed', "a AND", "(x", "NEAR("])
def test_malformed_search_is_a_clear_error(client: TestClient, query: str) -> None:
    api = client.get("/api/runs", params={"q": query})
    assert api.status_code == 400
    assert "is not valid" in api.json()["error"] and "quoted phrases" in api.json()["error"]
    page = client.get("/", params={"q": query})
    assert page.status_code == 400 and "Traceback" not in page.text
    assert "is not valid" in page.text


def test_unknown_run_and_bad_parameters(client: TestClient) -> None:
    assert client.get("/api/runs/0000nothere").status_code == 404
    page = client.get("/runs/0000nothere")
    assert page.status_code == 404 and "no trajectory with id" in page.text
    for params in ({"page": "x"}, {"outcome": "maybe"}, {"sort": "shoe_size"}):
        response = client.get("/api/runs", params=params)
        assert response.status_code == 400 and response.json()["error"]
    assert client.get("/diff", params={"a": "0000nothere", "b": "x"}).status_code == 404
    assert client.get("/no/such/page").status_code == 404


def test_token_guards_every_page_and_api(ui_store: UiStore) -> None:
    app = create_app(UiConfig(db=ui_store.db, token="s3cret"))
    client = TestClient(app)
    for path in ("/", "/api/runs", f"/runs/{ui_store.fork_child}", "/live", "/static/app.js"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/", params={"token": "s3cret"}).status_code == 200
    assert client.get("/api/runs").status_code == 200  # the cookie set by ?token=


def test_fork_tree_and_diff_api(client: TestClient, ui_store: UiStore) -> None:
    tree = client.get(f"/api/runs/{ui_store.fork_child}/tree").json()
    assert tree["id"] == ui_store.fork_parent
    assert [c["id"] for c in tree["children"]] == [ui_store.fork_child]
    diff = client.get("/api/diff", params={"a": ui_store.fork_parent, "b": ui_store.fork_child})
    body = diff.json()
    first = body["rows"][body["first_difference"]]
    assert first["a"] == first["b"] == 3
    assert all(row["tag"] == "equal" for row in body["rows"][:3])


def test_pages_render_for_real_runs(client: TestClient, ui_store: UiStore) -> None:
    for path in (
        "/",
        "/?sort=steps&dir=asc&page=2",
        f"/runs/{ui_store.fork_parent}",
        f"/runs/{ui_store.session}/tokens",
        f"/runs/{ui_store.fork_parent}/fork?at=3",
        "/compare?by=env",
        "/compare?g=model:gpt-4o&g=env:tau-airline",
        "/live",
        "/datasets",
    ):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[-300:])


def test_fork_from_the_ui_stores_and_opens_the_child(client: TestClient, ui_store: UiStore) -> None:
    form = client.get(f"/runs/{ui_store.fork_parent}/fork", params={"at": 5}).text
    assert f"trajforge fork {ui_store.fork_parent} --at 5 --policy expert" in form
    token = form.split('name="form_token" value="')[1].split('"')[0]
    response = client.post(
        f"/runs/{ui_store.fork_parent}/fork",
        data={"at": "5", "policy": "expert", "form_token": token},
        follow_redirects=False,
    )
    assert response.status_code == 303
    child_id = response.headers["location"].rsplit("/", 1)[-1]
    doc = client.get(f"/api/runs/{child_id}").json()
    assert doc["parent"] == {"trajectory_id": ui_store.fork_parent, "message_index": 5}


def test_search_index_follows_inserts_rewrites_and_deletes(
    client: TestClient, ui_store: UiStore
) -> None:
    with Store(ui_store.db) as store:
        traj = store.get(ui_store.session)
        traj.messages[1].content = "zanzibarquux marker"
        store.put(traj)
        found = client.get("/api/runs", params={"q": "zanzibarquux"}).json()
        assert [r["id"] for r in found["runs"]] == [ui_store.session]
        traj.messages[1].content = "list the files please"
        store.put(traj)
        assert client.get("/api/runs", params={"q": "zanzibarquux"}).json()["total"] == 0


def _listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses (hex, as the kernel lists them) listening on `port`."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(address)
    return found


def test_cli_ui_binds_loopback_and_refuses_a_missing_store(ui_store: UiStore, tmp_path) -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "trajforge", "ui", "--db", str(tmp_path / "none.db")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: no store at") and "Traceback" not in missing.stderr
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "trajforge", "ui", "--db", str(ui_store.db), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/api/runs?per_page=1").json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
        assert body["total"] >= 328
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert json.dumps(body)


def test_compare_groups_success_interval_and_pass_k(client: TestClient) -> None:
    page = client.get(
        "/compare", params=[("g", "model:gpt-4o,env:tau-airline"), ("g", "source:captain-agent")]
    ).text
    assert 'id="compare-table"' in page
    airline, captain = page.split("<tr>")[2:4]  # header row first
    cells = [c.split("</td>")[0] for c in airline.split("<td>")[1:]]
    assert cells[1:4] == ["200", "200", "0.420"]  # 84 of 200 runs got reward 1
    assert cells[4] == "[0.354, 0.489]"  # Wilson 95%
    assert cells[5] == "0.420"  # pass^1 with 4 trials of every task is the success rate
    assert "0.000" in captain  # Who&When runs all failed


def test_wilson_interval() -> None:
    from trajforge.web.compare import wilson

    low, high = wilson(84, 200)
    assert (round(low, 3), round(high, 3)) == (0.354, 0.489)
    assert wilson(0, 0) is None


@pytest.fixture(scope="module")
def monitored(ui_store: UiStore, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    """The UI with a model file: the rule detector with thresholds fit on the tau runs."""
    from trajforge.monitor import RuleDetector, featurize_runs, save_detector
    from trajforge.store import TrajectoryFilter

    with Store(ui_store.db) as store:
        runs = featurize_runs(store.query(TrajectoryFilter(environment="tau-airline")))
    detector = RuleDetector()
    detector.fit(runs)
    model = tmp_path_factory.mktemp("monitor") / "rule.model"
    save_detector(detector, model)
    return TestClient(create_app(UiConfig(db=ui_store.db, monitor=model)))


def test_risk_column_and_curve_use_the_monitor_model(
    monitored: TestClient, ui_store: UiStore
) -> None:
    from trajforge.monitor import RuleDetector, risk_curve

    page = monitored.get("/", params={"env": "tau-airline", "per_page": 5}).text
    ids = [part.split('"')[0] for part in page.split('data-risk="')[1:]]
    assert len(ids) == 5
    risks = monitored.get("/api/risk", params={"ids": ",".join(ids)}).json()
    with Store(ui_store.db) as store:
        for traj_id in ids:  # the monitor's own scoring, last step
            assert risks[traj_id] == risk_curve(store.get(traj_id), RuleDetector())[-1][1]
    fragment = monitored.get(f"/runs/{ids[0]}/risk").text
    assert "threshold" in fragment and "svg" in fragment
    assert monitored.get("/api/risk", params={"ids": "0000nothere"}).status_code == 404


def test_stop_point_is_where_the_stop_rule_fires(monitored: TestClient, ui_store: UiStore) -> None:
    import numpy as np

    from trajforge.monitor import RuleDetector, featurize_runs, risk_curve
    from trajforge.monitor.stoprule import stop_step
    from trajforge.store import TrajectoryFilter

    with Store(ui_store.db) as store:
        trajs = list(store.query(TrajectoryFilter(environment="tau-airline")))
    detector = RuleDetector()
    detector.fit(featurize_runs(trajs))
    threshold = detector.thresholds[str(detector.config.default_loss)]
    stopped = 0
    for traj in trajs[:60]:
        curve = risk_curve(traj, detector)
        risks = np.asarray([risk for _, risk in curve])
        stop = stop_step(risks, threshold, detector.config.min_step)
        fragment = monitored.get(f"/runs/{traj.id}/risk").text
        assert ('id="stop-point"' in fragment) == (stop is not None)
        if stop is not None:
            stopped += 1
            assert f'data-stop-message="{curve[stop - 1][0]}"' in fragment
            assert f"stops at step {stop} " in fragment
    assert stopped >= 1


def test_stop_note_is_markup_and_the_model_name_stays_text(
    ui_store: UiStore, tmp_path: Path
) -> None:
    """The fragment's caption names the model file as text (escaped), and the stop note
    app.js puts on the stop message is markup, not text shown to the reader."""
    from trajforge.monitor import RuleDetector, featurize_runs, save_detector
    from trajforge.store import TrajectoryFilter

    with Store(ui_store.db) as store:
        trajs = list(store.query(TrajectoryFilter(environment="tau-airline")))
    detector = RuleDetector()
    detector.fit(featurize_runs(trajs))
    model = tmp_path / "rule<i>.model"
    save_detector(detector, model)
    monitored = TestClient(create_app(UiConfig(db=ui_store.db, monitor=model)))
    for traj in trajs[:60]:
        fragment = monitored.get(f"/runs/{traj.id}/risk").text
        if "data-stop-message" in fragment:
            break
    else:
        raise AssertionError("no run of the sample stops")
    caption = fragment.split('<p class="dim">')[1].split("</p>")[0]
    assert "model file rule&lt;i&gt;.model" in caption
    assert "note stop" not in caption
    note = fragment.split('data-note="')[1].split('"')[0]
    assert html.unescape(note).startswith('<div class="note stop">monitor would stop here')
