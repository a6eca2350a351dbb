"""The failure monitor as a stop in the recording proxy.

A detector is trained on real SWE-bench runs; a held-out failing run is replayed request by
request (its real conversation, the mock upstream answering with the run's own replies)
through a real proxy on loopback, once without the monitor to get the run's offline risk curve,
then with the monitor at a threshold that curve first reaches after `min_step`.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import openai
import orjson
import pytest

from trajforge.errors import UserError
from trajforge.importers import import_paths
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.openai_compat import message_to_openai
from trajforge.monitor import LearnedConfig, LearnedDetector, featurize_runs, save_detector
from trajforge.monitor.detectors import Detector
from trajforge.monitor.scoring import risk_curve
from trajforge.monitor.steps import extract_steps
from trajforge.monitor.stoprule import stop_step
from trajforge.proxy import MonitorStopConfig, ProxyConfig, ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.proxy.stop import run_so_far
from trajforge.schema import Trajectory
from trajforge.store import Store, TrajectoryFilter

SWE_RUNS = "swe-bench-verified/mini-swe-agent_gemini-3-pro/trajs"
TAU_RUNS = "tau-bench/historical_trajectories/gpt-4o-airline.json"
TRAINING_RUNS = 60
HELD_OUT_RUNS = 30


def _import(db: Path, paths: list[Path]) -> list[Trajectory]:
    with Store(db) as store:
        report = import_paths(store, [str(p) for p in paths])
        assert not report.failed, report.failed
        return sorted(store.query(TrajectoryFilter()), key=lambda t: t.task.id)


@pytest.fixture(scope="module")
def swe_trajs(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Trajectory]:
    """SWE-bench runs of the first tasks (by id): 60 to train on, then 30 held out."""
    folders = sorted((shared_data / SWE_RUNS).iterdir())[: TRAINING_RUNS + HELD_OUT_RUNS]
    db = tmp_path_factory.mktemp("monitor-stop") / "swe.db"
    trajs = _import(db, [folder / f"{folder.name}.traj.json" for folder in folders])
    assert [t.task.id for t in trajs] == [folder.name for folder in folders]
    return trajs


@pytest.fixture(scope="module")
def detector(swe_trajs: list[Trajectory]) -> Detector:
    trained = LearnedDetector(LearnedConfig(candidates=("logistic",), inner_folds=3))
    trained.fit(featurize_runs(swe_trajs[:TRAINING_RUNS]))
    return trained


@pytest.fixture(scope="module")
def model_file(detector: Detector, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "swe.model"
    save_detector(detector, path)
    return path


def _conversation(traj: Trajectory) -> list[dict]:
    return [message_to_openai(m) for m in traj.messages]


@dataclass
class Replay:
    """A recorded run's conversation, sent one request per agent step as the harness did."""

    conversation: list[dict]

    @property
    def replies(self) -> list[str]:
        return [m["content"] for m in self.conversation if m["role"] == "assistant"]

    def prompt(self, completed_steps: int) -> list[dict]:
        """The request after `completed_steps` steps: everything before the next reply."""
        assistants = [i for i, m in enumerate(self.conversation) if m["role"] == "assistant"]
        return self.conversation[: assistants[completed_steps]]

    def answer(self, body: dict) -> str:
        """The mock upstream's script: the run's own reply to this prompt."""
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return self.replies[done]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="sk-test", max_retries=2, timeout=60)


def _replay(client: openai.OpenAI, replay: Replay, steps: range) -> None:
    for done in steps:
        client.chat.completions.create(model="gemini", messages=replay.prompt(done))


def _first_new_high(curve: list[float], min_step: int) -> tuple[int, float]:
    """The first step after `min_step` whose risk is above every risk decided before it, and a
    threshold half-way between the two (online risks are summed step by step: they may
    differ from the batch curve in the last bits)."""
    decided = curve[: len(curve) - 1]
    for step in range(min_step + 1, len(decided) + 1):
        below = max(decided[min_step - 1 : step - 1])
        if decided[step - 1] > below + 1e-9:
            return step, (decided[step - 1] + below) / 2
    raise AssertionError("the run's risk never rises after min_step")


@pytest.fixture(scope="module")
def failing_run(swe_trajs: list[Trajectory], detector: Detector) -> Trajectory:
    """A held-out failed run whose risk rises after `min_step` (so the stop is not at it)."""
    min_step = detector.config.min_step
    for traj in swe_trajs[TRAINING_RUNS:]:
        steps = len(traj.assistant_indices())
        if traj.outcome.success is False and min_step + 3 <= steps <= 45:
            curve = [risk for _, risk in risk_curve(traj, detector)]
            decided = curve[min_step - 1 : steps - 1]
            if max(decided) > decided[0] + 1e-9:
                return traj
    raise AssertionError("no held-out failed run fits")


def _proxy_rows(db: Path, session: str) -> list[dict]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT doc FROM proxy_calls WHERE session = ? ORDER BY seq", (session,)
        ).fetchall()
    return [orjson.loads(doc) for (doc,) in rows]


def test_failing_run_is_stopped_where_its_offline_risk_curve_says(
    tmp_path: Path, failing_run: Trajectory, detector: Detector, model_file: Path
) -> None:
    replay = Replay(_conversation(failing_run))
    steps = len(replay.replies)
    with MockOpenAIServer(replay.answer) as upstream:
        # 1. The run through a plain proxy: the trajectory the proxy records, scored offline.
        plain_db = tmp_path / "plain.db"
        with ProxyServer(ProxyConfig(upstream=upstream.base_url), plain_db) as plain:
            _replay(_client(plain.session_url("reference")), replay, range(steps))
        recorded = Store(plain_db).get(trajectory_id("reference"))
        curve = [risk for _, risk in risk_curve(recorded, detector)]
        min_step = detector.config.min_step
        expected, threshold = _first_new_high(curve, min_step)
        assert stop_step(np.array(curve), threshold, min_step) == expected > min_step

        # 2. The same run through a monitoring proxy: stopped at exactly that step.
        config = ProxyConfig(
            upstream=upstream.base_url,
            monitor=MonitorStopConfig(model=model_file, threshold=threshold),
        )
        db = tmp_path / "monitored.db"
        with ProxyServer(config, db) as proxy:
            client = _client(proxy.session_url("doomed"))
            forwarded = len(upstream.requests)
            _replay(client, replay, range(expected))
            assert len(upstream.requests) - forwarded == expected
            with pytest.raises(openai.PermissionDeniedError) as refused:
                _replay(client, replay, range(expected, expected + 1))
            assert refused.value.status_code == 403
            assert refused.value.code == "monitor_stop"
            assert f"threshold {threshold:.3f}" in refused.value.message
            assert refused.value.response.headers["x-trajforge-stop"] == "monitor"

            # Later requests of that session are refused without scoring, streamed ones too.
            later = replay.prompt(expected + 1)
            with pytest.raises(openai.PermissionDeniedError):
                client.chat.completions.create(model="gemini", messages=later, stream=True)
            answer = httpx.post(
                f"{proxy.session_url('doomed')}/chat/completions",
                json={"model": "gemini", "messages": later},
            )
            assert answer.status_code == 403
            assert answer.headers["x-should-retry"] == "false"
            assert len(upstream.requests) - forwarded == expected  # nothing more forwarded

            # Another session is unaffected: the same run's steps before the stop all pass.
            forwarded = len(upstream.requests)
            _replay(_client(proxy.session_url("other")), replay, range(expected))
            assert len(upstream.requests) - forwarded == expected

            outcome = httpx.post(f"{proxy.url}/s/doomed/outcome", json={"success": False})
            assert outcome.status_code == 200

    # Each refused request was recorded once (the SDK did not retry the 403).
    rows = _proxy_rows(db, "doomed")
    assert [row["status"] for row in rows] == [200] * expected + [403] * 3
    assert all(row["monitor_stop"] is not None for row in rows[expected:])

    stored = Store(db).get(trajectory_id("doomed"))
    assert stored.outcome.termination_reason == "monitor"
    assert stored.outcome.success is False
    monitor = stored.metadata["monitor"]
    assert monitor["step"] == expected and monitor["seq"] == expected
    assert monitor["refused_calls"] == 3
    assert monitor["threshold"] == threshold
    assert monitor["risk"] == pytest.approx(curve[expected - 1])
    refused_call = stored.llm_calls[expected]
    assert refused_call.extra["status"] == 403 and refused_call.message_index is None
    assert "failure monitor" in refused_call.error
    other = Store(db).get(trajectory_id("other"))
    assert other.outcome.termination_reason is None and "monitor" not in other.metadata


def _monitoring(upstream: str, model: Path, threshold: float) -> ProxyConfig:
    return ProxyConfig(
        upstream=upstream, monitor=MonitorStopConfig(model=model, threshold=threshold)
    )


def test_a_restarted_proxy_keeps_its_stops_and_the_answers_it_relayed(
    tmp_path: Path, failing_run: Trajectory, model_file: Path
) -> None:
    """The refused call's row carries the stop: a proxy killed before assembling the session
    re-assembles it as stopped, and after a restart the session is still refused (even at a
    threshold that would not stop it) while other sessions keep the usage of their answers."""
    replay = Replay(_conversation(failing_run))
    db = tmp_path / "restarted.db"
    unreachable = "http://127.0.0.1:9/v1"  # a forwarded request would get a 502
    step = len(replay.replies) - 1  # past min_step: the threshold 0 stops there
    with (
        MockOpenAIServer(replay.answer) as upstream,
        ProxyServer(_monitoring(upstream.base_url, model_file, 1.0), db) as first,
    ):
        _replay(_client(first.session_url("kept")), replay, range(4))
        relayed = dict(first.proxy.gate.guards["kept"].answers)
    assert len(relayed) == 4 and all(a.usage.prompt_tokens for a in relayed.values())
    with (
        ProxyServer(_monitoring(unreachable, model_file, 0.0), db) as second,
        pytest.raises(openai.PermissionDeniedError),
    ):
        _replay(_client(second.session_url("s")), replay, range(step, step + 1))
    with sqlite3.connect(db) as connection:  # as if the proxy died before its refresh
        connection.execute("DELETE FROM trajectories")

    with ProxyServer(_monitoring(unreachable, model_file, 1.0), db) as third:
        for session, done, status in (("s", step, 403), ("kept", 4, 502)):
            answer = httpx.post(
                f"{third.session_url(session)}/chat/completions",
                json={"model": "m", "messages": replay.prompt(done)},
            )
            assert answer.status_code == status, answer.text
        assert (
            f"after step {step}:"
            in httpx.post(
                f"{third.session_url('s')}/chat/completions", json={"model": "m", "messages": []}
            ).text
        )
        assert third.proxy.gate.guards["kept"].answers == relayed
    stored = Store(db).get(trajectory_id("s"))
    assert stored.outcome.termination_reason == "monitor"
    assert stored.metadata["monitor"]["step"] == step
    assert stored.metadata["monitor"]["refused_calls"] == 3


def _assert_same_steps(runs: list[Trajectory]) -> set[str]:
    """A run rebuilt from the OpenAI messages a harness sends gives the monitor the steps of
    the imported run; returns the action kinds seen."""
    kinds = set()
    for traj in runs:
        theirs = extract_steps(traj)
        ours = extract_steps(run_so_far("s", _conversation(traj), {}))
        assert [s.index for s in ours] == [s.index for s in theirs]
        assert [[a.kind for a in s.actions] for s in ours] == [
            [a.kind for a in s.actions] for s in theirs
        ]
        assert [s.error for s in ours] == [s.error for s in theirs]
        kinds |= {a.kind for s in ours for a in s.actions}
    return kinds


def test_the_proxy_sees_mini_swe_agent_bash_steps(swe_trajs: list[Trajectory]) -> None:
    kinds = _assert_same_steps(swe_trajs[:5])
    assert {"read", "edit", "test"} <= kinds and "respond" not in kinds


def test_the_proxy_sees_tau_bench_tool_call_steps(shared_data: Path, tmp_path: Path) -> None:
    kinds = _assert_same_steps(_import(tmp_path / "tau.db", [shared_data / TAU_RUNS])[:5])
    assert {"read", "respond"} <= kinds


def test_bad_model_file_is_a_clear_error_at_start_up(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"TRAJFORGE-MONITOR\n{not json\n")
    args = ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--db", str(tmp_path / "p.db")]
    result = cli(*args, "--monitor", str(bad))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {bad}: model file is corrupt (unreadable header)"
    ]


def test_a_loss_the_model_has_no_threshold_for_is_refused_at_start_up(
    tmp_path: Path, model_file: Path
) -> None:
    config = ProxyConfig(
        upstream="http://127.0.0.1:9/v1", monitor=MonitorStopConfig(model=model_file, loss=0.03)
    )
    with pytest.raises(UserError, match=r"no threshold for loss 0\.03 \(it has: 0\.01, "):
        ProxyServer(config, tmp_path / "p.db")


def test_the_proxy_command_stops_a_session_with_its_monitor(
    cli_server, free_port, tmp_path: Path, failing_run: Trajectory, model_file: Path, detector
) -> None:
    replay = Replay(_conversation(failing_run))
    min_step = detector.config.min_step
    with MockOpenAIServer(replay.answer) as upstream:
        port = free_port()
        args = ["proxy", "--upstream", upstream.base_url, "--port", str(port)]
        args += ["--db", str(tmp_path / "cli.db"), "--monitor", str(model_file)]
        cli_server(
            *args, "--monitor-threshold", "0", ready_url=f"http://127.0.0.1:{port}/v1/models"
        )
        url = f"http://127.0.0.1:{port}/s/cli-run/v1/chat/completions"
        early = httpx.post(url, json={"model": "m", "messages": replay.prompt(min_step - 1)})
        assert early.status_code == 200 and len(upstream.requests) == 1
        stopped = httpx.post(url, json={"model": "m", "messages": replay.prompt(min_step)})
        assert stopped.status_code == 403 and len(upstream.requests) == 1
        assert stopped.json()["error"]["code"] == "monitor_stop"
        assert f"after step {min_step}:" in stopped.json()["error"]["message"]


class _FailingDetector:
    """The trained detector, except that scoring raises (e.g. a damaged estimator)."""

    def __init__(self, detector: Detector) -> None:
        self.name, self.config, self.thresholds = detector.name, detector.config, {}

    def risk(self, features: np.ndarray) -> np.ndarray:
        raise ValueError(f"expected {features.shape[1] + 1} features")


def test_a_scoring_failure_forwards_the_request_and_is_logged(
    tmp_path: Path, failing_run: Trajectory, model_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    replay = Replay(_conversation(failing_run))
    step = len(replay.replies) - 1
    with (
        MockOpenAIServer(replay.answer) as upstream,
        ProxyServer(_monitoring(upstream.base_url, model_file, 0.0), tmp_path / "f.db") as proxy,
    ):
        proxy.proxy.gate.detector = _FailingDetector(proxy.proxy.gate.detector)
        _replay(_client(proxy.session_url("s")), replay, range(step, step + 1))
        assert len(upstream.requests) == 1
    assert "monitor could not score session s; forwarding" in caplog.text
    assert "expected" in caplog.text
