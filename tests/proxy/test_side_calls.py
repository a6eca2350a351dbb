"""Side calls in a proxy session (a title, a summary, a `/completions` probe) are recorded
but do not replace the session's main conversation."""

from __future__ import annotations

from pathlib import Path

import httpx

from trajforge.export.rl import rl_samples
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

MAIN = [{"role": "system", "content": "you fix bugs"}, {"role": "user", "content": "fix foo"}]


def _chat(url: str, messages: list[dict], model: str = "big") -> str:
    body = {"model": model, "messages": messages}
    answer = httpx.post(f"{url}/chat/completions", json=body).json()
    return answer["choices"][0]["message"]["content"]


def _title(url: str) -> None:
    title = [{"role": "system", "content": "write a title"}, {"role": "user", "content": "fix foo"}]
    _chat(url, title, model="small")


def _record(db: Path) -> None:
    """Main turn, title call, main turn, summary call, a text completion."""
    script = ["looking", "a title", "fixed", "a summary", "probe"]
    with (
        MockOpenAIServer(script) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        url = proxy.session_url("s1")
        history = [*MAIN, {"role": "assistant", "content": _chat(url, MAIN)}]
        _title(url)
        history += [{"role": "user", "content": "tests fail"}]
        history += [{"role": "assistant", "content": _chat(url, history)}]
        summary = [{"role": "user", "content": "summarize: " + str(history)}]
        _chat(url, summary, model="small")
        httpx.post(f"{url}/completions", json={"model": "small", "prompt": "ping"})


def test_side_calls_keep_the_main_conversation(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    _record(db)
    traj = Store(db).get(trajectory_id("s1"))
    assert [m.text() for m in traj.messages] == [
        "you fix bugs",
        "fix foo",
        "looking",
        "tests fail",
        "fixed",
    ]
    calls = traj.llm_calls
    assert len(calls) == 5
    assert [bool(c.extra.get("side_call")) for c in calls] == [False, True, False, True, True]
    assert [c.extra["drift"]["status"] for c in calls] == [
        "first",
        "side",
        "extends",
        "side",
        "side",
    ]
    assert [c.message_index for c in calls] == [2, None, 4, None, None]
    assert calls[1].response["choices"][0]["message"]["content"] == "a title"
    assert traj.source.model == "big"
    assert traj.metadata["n_calls"] == 5


def test_side_calls_survive_a_restart_and_stay_out_of_rl_samples(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    _record(db)
    with (
        MockOpenAIServer(["done"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        _title(proxy.session_url("s1"))
    traj = Store(db).get(trajectory_id("s1"))
    assert len(traj.llm_calls) == 6 and traj.messages[-1].text() == "fixed"
    samples = list(rl_samples(traj))
    main = [c.id for c in traj.llm_calls if not c.extra.get("side_call")]
    assert samples[0]["call_ids"] == main
    assert [len(s["call_ids"]) for s in samples[1:]] == [1, 1, 1, 1]


def test_a_longer_conversation_with_another_opening_takes_over(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer(["t", "a", "b"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        url = proxy.session_url("s2")
        _title(url)  # the harness asks for a title before its first turn
        history = [*MAIN, {"role": "assistant", "content": _chat(url, MAIN)}]
        history += [{"role": "user", "content": "again"}]
        _chat(url, history)
    traj = Store(db).get(trajectory_id("s2"))
    assert traj.messages[0].text() == "you fix bugs" and traj.messages[-1].text() == "b"
    assert len(traj.messages) == 5
