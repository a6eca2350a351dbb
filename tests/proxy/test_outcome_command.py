"""`trajforge outcome SESSION success|failure [--reward R]` labels a recorded proxy session."""

from __future__ import annotations

from pathlib import Path

import httpx
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.outcomes import set_session_outcome
from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

TASK = [{"role": "user", "content": "fix foo"}]


def _chat(url: str, messages: list[dict]) -> None:
    httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": messages})


def _record(db: Path, session: str) -> None:
    with (
        MockOpenAIServer(["done"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        _chat(proxy.session_url(session), TASK)


def test_outcome_labels_a_recorded_session(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    _record(db, "run-7")
    before = Store(db).get(trajectory_id("run-7"))
    assert before.outcome.success is None
    args = ["outcome", "run-7", "success", "--reward", "0.5", "--db", str(db)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "run-7: success · reward 0.5" in result.output
    after = Store(db).get(trajectory_id("run-7"))
    assert (after.outcome.success, after.outcome.reward) == (True, 0.5)
    assert after.outcome.judged_by == "manual"
    assert after.llm_calls == before.llm_calls and after.messages == before.messages
    listed = CliRunner().invoke(app, ["ls", "--outcome", "success", "--db", str(db)])
    assert trajectory_id("run-7") in listed.output


def test_unknown_session_is_one_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    _record(db, "run-7")
    result = CliRunner().invoke(app, ["outcome", "run-8", "failure", "--db", str(db)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no proxy session 'run-8'")
    assert Store(db).get(trajectory_id("run-7")).outcome.success is None


def test_a_running_proxy_keeps_an_outcome_set_from_outside(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer(["one", "two"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        url = proxy.session_url("live")
        _chat(url, TASK)
        proxy.flush()
        with Store(db) as other:
            set_session_outcome(other, "live", False, 0.0, "reviewer")
        _chat(url, [*TASK, {"role": "assistant", "content": "one"}, *TASK])
        proxy.flush()
    traj = Store(db).get(trajectory_id("live"))
    assert len(traj.llm_calls) == 2
    assert (traj.outcome.success, traj.outcome.reward, traj.outcome.judged_by) == (
        False,
        0.0,
        "reviewer",
    )
