"""Upstream failures reach the client as OpenAI-style errors and are recorded as faults."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from trajforge.errors import UserError
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import FaultConfig, ProxyConfig, ProxyServer
from trajforge.proxy.faults import INJECTED, FaultInjector, upstream_faults
from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _only_call(db: Path, session: str = "default"):
    traj = Store(db).get(trajectory_id(session))
    (call,) = traj.llm_calls
    return traj, call


def _run_one(tmp_path: Path, reply: dict, stream: bool = False, timeout_s: float = 5.0):
    db = tmp_path / "p.db"
    with MockOpenAIServer([reply]) as upstream:
        config = ProxyConfig(upstream=upstream.base_url, timeout_s=timeout_s)
        with ProxyServer(config, db) as proxy:
            answer = httpx.post(
                f"{proxy.base_url}/chat/completions", json={**REQUEST, "stream": stream}
            )
    return answer, *_only_call(db)


def test_upstream_timeout_is_a_504_and_recorded(tmp_path: Path) -> None:
    answer, traj, call = _run_one(tmp_path, {"content": "late", "delay_s": 2.0}, timeout_s=0.3)
    assert answer.status_code == 504
    assert "timed out" in answer.json()["error"]["message"]
    assert call.error and call.extra["status"] == 504
    assert traj.faults[0].kind == "upstream_timeout"
    assert traj.faults[0].detail.startswith("observed: ")


def test_upstream_5xx_is_passed_through_and_recorded(tmp_path: Path) -> None:
    answer, traj, call = _run_one(tmp_path, {"status": 503, "error": "overloaded"})
    assert answer.status_code == 503
    assert answer.json()["error"]["message"] == "overloaded"
    assert "overloaded" in call.error
    assert traj.faults[0].kind == "upstream_5xx"


def test_upstream_malformed_json_is_a_502_and_recorded(tmp_path: Path) -> None:
    answer, traj, call = _run_one(tmp_path, {"raw": '{"choices": [ oops'})
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "upstream_malformed"
    assert "not JSON" in call.error
    assert traj.faults[0].kind == "upstream_malformed"


def test_upstream_malformed_json_in_a_stream_is_surfaced(tmp_path: Path) -> None:
    answer, traj, call = _run_one(tmp_path, {"raw": "data: {not json\n\n"}, stream=True)
    assert answer.status_code == 200  # the stream had started
    assert '"code":"upstream_malformed"' in answer.text
    assert traj.faults[0].kind == "upstream_malformed"
    assert "bad stream chunk" in call.error


def test_truncated_upstream_stream_raises_in_the_sdk_and_is_recorded(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    reply = {"content": "a long answer cut short", "truncate": True}
    with (
        MockOpenAIServer([reply]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.APIError, match="without \\[DONE\\]"):
            list(client.chat.completions.create(**REQUEST, stream=True))
    traj, call = _only_call(db)
    assert traj.faults[0].kind == "upstream_truncated"
    assert call.response["choices"][0]["message"]["content"]  # the part that did arrive


def test_unreachable_upstream_is_a_502(tmp_path: Path, free_port) -> None:
    db = tmp_path / "p.db"
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ProxyServer(ProxyConfig(upstream=dead), db) as proxy:
        answer = httpx.post(f"{proxy.base_url}/chat/completions", json=REQUEST)
    assert answer.status_code == 502
    assert Store(db).get(trajectory_id("default")).faults[0].kind == "upstream_unreachable"


def test_client_4xx_is_passed_through_without_a_fault(tmp_path: Path) -> None:
    answer, traj, call = _run_one(tmp_path, {"status": 400, "error": "bad model"})
    assert answer.status_code == 400
    assert call.error == "bad model" and traj.faults == []


@pytest.mark.parametrize(
    ("fault", "status", "kind"),
    [("upstream_timeout", 504, "upstream_timeout"), ("upstream_5xx", 503, "upstream_5xx")],
)
def test_injected_faults_by_header(tmp_path: Path, fault: str, status: int, kind: str) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer() as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url, faults=FaultConfig()), db) as proxy,
    ):
        headers = {"X-Trajforge-Fault": fault}
        answer = httpx.post(f"{proxy.base_url}/chat/completions", json=REQUEST, headers=headers)
        assert len(upstream.requests) == 0
    assert answer.status_code == status
    traj, _ = _only_call(db)
    assert traj.faults[0].kind == kind and traj.faults[0].detail.startswith("injected: ")


def test_injected_truncation_cuts_a_stream(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer(["one two three four five six"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url, faults=FaultConfig()), db) as proxy,
    ):
        headers = {"X-Trajforge-Fault": "upstream_truncated"}
        body = {**REQUEST, "stream": True}
        answer = httpx.post(f"{proxy.base_url}/chat/completions", json=body, headers=headers)
    assert "[DONE]" not in answer.text
    assert 0 < answer.text.count("data:") < 8
    traj, call = _only_call(db)
    assert traj.faults[0].kind == "upstream_truncated" and call.message_index is None


def test_fault_draws_are_seeded() -> None:
    config = upstream_faults("upstream_timeout:0.2,upstream_5xx:0.2,upstream_truncated:0.2", 3)
    draws, again = FaultInjector(config), FaultInjector(config)
    sequence = [draws.draw({}) for _ in range(200)]
    assert sequence == [again.draw({}) for _ in range(200)]
    shares = {kind: sequence.count(kind) / 200 for kind in (*INJECTED, None)}
    assert all(0.1 < shares[k] < 0.3 for k in INJECTED)


def test_bad_fault_spec_is_a_user_error() -> None:
    with pytest.raises(UserError, match="--faults: unknown fault kind 'slow'"):
        upstream_faults("slow:0.1")
    with pytest.raises(UserError, match="bad rate 'often'"):
        upstream_faults("upstream_timeout:often")
    with pytest.raises(UserError, match="fault kind 'transient' does not apply to the proxy"):
        upstream_faults("transient:0.1")
    with pytest.raises(UserError, match="takes a rate and no @TOOL"):
        upstream_faults("upstream_5xx")


def test_upstream_that_refuses_token_ids_is_asked_without_them(tmp_path: Path) -> None:
    def strict_upstream(body: dict) -> str | dict:
        if "return_token_ids" in body:
            return {"status": 400, "error": "Unrecognized request argument: return_token_ids"}
        return "fine"

    db = tmp_path / "p.db"
    with (
        MockOpenAIServer(strict_upstream) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        url = f"{proxy.base_url}/chat/completions"
        answers = [httpx.post(url, json=REQUEST) for _ in range(2)]
        sent = list(upstream.requests)
    assert [a.status_code for a in answers] == [200, 200]
    assert ["return_token_ids" in body for body in sent] == [True, False, False]
    calls = Store(db).get(trajectory_id("default")).llm_calls
    assert [c.error for c in calls] == [None, None]
    assert all(c.logprobs for c in calls)


def test_restarted_upstream_is_reached_on_a_fresh_connection(tmp_path: Path, free_port) -> None:
    port = free_port()
    first = MockOpenAIServer(["before"], port=port).start()
    with ProxyServer(ProxyConfig(upstream=first.base_url), tmp_path / "p.db") as proxy:
        url = f"{proxy.base_url}/chat/completions"
        before = httpx.post(url, json=REQUEST)
        first.stop()  # closes the proxy's pooled keep-alive connection
        with MockOpenAIServer(["after"], port=port):
            after = httpx.post(url, json=REQUEST)
    assert before.json()["choices"][0]["message"]["content"] == "before"
    assert after.status_code == 200
    assert after.json()["choices"][0]["message"]["content"] == "after"
