"""The proxy records plain and streamed calls, by session, with token ids and logprobs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.mock_tokens import HashTokenBackend, completion_ids, prompt_ids
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.app import RecordingProxy
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

from .conversation import tool_turn

TOOL_REPLY = {"content": "look", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0)


def _conversation(client: openai.OpenAI, stream_second: bool) -> list[dict]:
    _, messages = tool_turn(client)
    if stream_second:
        stream = client.chat.completions.create(model="m", messages=messages, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    else:
        text = client.chat.completions.create(model="m", messages=messages).choices[0].message
        text = text.content
    messages.append({"role": "assistant", "content": text})
    return messages


def test_plain_and_streamed_calls_become_one_trajectory(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    with (
        MockOpenAIServer([TOOL_REPLY, "found a.py"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        messages = _conversation(_client(proxy.session_url("run-1")), stream_second=True)
    traj = Store(db).get(trajectory_id("run-1"))
    assert [m.role for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert traj.messages[-1].content == messages[-1]["content"] == "found a.py"
    assert traj.messages[2].tool_calls[0].name == "bash"
    first, second = traj.llm_calls
    assert (first.message_index, second.message_index) == (2, 4)
    assert (first.extra["stream"], second.extra["stream"]) == (False, True)
    backend = HashTokenBackend()
    assert first.prompt_token_ids == prompt_ids(backend, messages[:2])
    expected_completion = completion_ids(backend, {"role": "assistant", "content": "found a.py"})
    assert second.completion_token_ids == expected_completion
    assert second.logprobs == backend.score(second.prompt_token_ids, expected_completion)
    assert second.usage.completion_tokens == len(expected_completion)
    assert second.extra["drift"]["status"] == "extends"
    assert traj.task.id == "run-1" and traj.source.harness == "proxy"


def test_session_by_header_and_default_session(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with (
        MockOpenAIServer() as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        url = f"{proxy.base_url}/chat/completions"
        httpx.post(url, json=request, headers={"X-Trajforge-Session": "by-header"})
        httpx.post(url, json=request)
    store = Store(db)
    assert len(store.get(trajectory_id("by-header")).llm_calls) == 1
    assert len(store.get(trajectory_id("default")).llm_calls) == 1


def test_client_sees_only_what_it_asked_for(tmp_path: Path) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with (
        MockOpenAIServer() as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), tmp_path / "p.db") as proxy,
    ):
        url = f"{proxy.base_url}/chat/completions"
        plain = httpx.post(url, json=request).json()
        asked = httpx.post(url, json={**request, "logprobs": True}).json()
        forwarded = upstream.requests[0]
    assert forwarded["logprobs"] is True and forwarded["return_token_ids"] is True
    assert plain["choices"][0]["logprobs"] is None
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert len(asked["choices"][0]["logprobs"]["content"]) == asked["usage"]["completion_tokens"]


def test_stream_usage_chunk_only_when_asked(tmp_path: Path) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with (
        MockOpenAIServer() as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), tmp_path / "p.db") as proxy,
    ):
        client = _client(proxy.base_url)
        without = list(client.chat.completions.create(**request))
        options = {"include_usage": True}
        with_usage = list(client.chat.completions.create(**request, stream_options=options))
    assert all(chunk.usage is None for chunk in without)
    assert with_usage[-1].usage is not None and with_usage[-1].choices == []
    store = Store(tmp_path / "p.db")
    calls = store.get(trajectory_id("default")).llm_calls
    assert all(c.usage.completion_tokens == len(c.completion_token_ids) for c in calls)


def test_text_completions_and_models(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer(["four"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        client = _client(proxy.session_url("text"))
        completion = client.completions.create(model="m", prompt="two plus two is")
        models = client.models.list()
    assert completion.choices[0].text == "four"
    assert models.data[0].id == "trajforge-mock"
    call = Store(db).get(trajectory_id("text")).llm_calls[0]
    assert call.extra["endpoint"] == "completions"
    backend = HashTokenBackend()
    assert call.prompt_token_ids == backend.encode("two plus two is")
    assert call.completion_token_ids == backend.encode("four") and len(call.logprobs) == 1


def test_streamed_text_completion_is_captured(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer(["two words"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        stream = _client(proxy.session_url("text")).completions.create(
            model="m", prompt="say", stream=True
        )
        text = "".join(chunk.choices[0].text for chunk in stream)
    call = Store(db).get(trajectory_id("text")).llm_calls[0]
    assert text == "two words" == call.response["choices"][0]["text"]
    assert call.completion_token_ids == HashTokenBackend().encode("two words")
    assert len(call.logprobs) == 3 and call.prompt_token_ids == HashTokenBackend().encode("say")


def test_restarted_proxy_continues_the_session(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    messages = [{"role": "user", "content": "hi"}]
    with MockOpenAIServer() as upstream:
        for _ in range(2):
            with ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy:
                reply = _client(proxy.session_url("long")).chat.completions.create(
                    model="m", messages=messages
                )
            messages += [{"role": "assistant", "content": reply.choices[0].message.content}]
            messages += [{"role": "user", "content": "again"}]
    traj = Store(db).get(trajectory_id("long"))
    assert [c.extra["seq"] for c in traj.llm_calls] == [0, 1]
    assert traj.llm_calls[1].extra["drift"]["status"] == "extends"
    assert [c.message_index for c in traj.llm_calls] == [1, 3]


def test_outcome_endpoint_sets_the_reward(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer() as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        httpx.post(f"{proxy.session_url('graded')}/chat/completions", json=request)
        answer = httpx.post(f"{proxy.url}/s/graded/outcome", json={"success": True, "reward": 1})
        bad = httpx.post(f"{proxy.url}/s/graded/outcome", content=b'{"reward": "high"}')
    assert answer.json() == {"trajectory_id": trajectory_id("graded")}
    assert bad.status_code == 400 and "error" in bad.json()
    outcome = Store(db).get(trajectory_id("graded")).outcome
    assert outcome.success is True and outcome.reward == 1.0


def test_cli_proxy_and_mock_server_as_a_user_runs_them(
    tmp_path: Path, free_port, cli_server, cli
) -> None:
    db = tmp_path / "cli.db"
    upstream, proxy = free_port(), free_port()
    cli_server(
        "mock-server", "--port", str(upstream), ready_url=f"http://127.0.0.1:{upstream}/v1/models"
    )
    cli_server(
        "proxy",
        "--upstream",
        f"http://127.0.0.1:{upstream}/v1",
        "--port",
        str(proxy),
        "--db",
        str(db),
        ready_url=f"http://127.0.0.1:{proxy}/v1/models",
    )
    client = _client(f"http://127.0.0.1:{proxy}/s/demo/v1")
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content
    listed = json.loads(cli("ls", "--db", str(db), "--json").stdout)
    assert [row["task_id"] for row in listed] == ["demo"]
    shown = json.loads(cli("show", listed[0]["id"], "--db", str(db), "--json").stdout)
    (call,) = shown["llm_calls"]
    assert call["prompt_token_ids"] and call["completion_token_ids"]
    assert len(call["logprobs"]) == len(call["completion_token_ids"])
    assert call["message_index"] == 1


def test_cli_proxy_bad_options_fail_on_one_line(tmp_path: Path, cli) -> None:
    bad_url = cli("proxy", "--upstream", "ftp://example")
    assert bad_url.returncode == 1
    assert bad_url.stderr.strip().splitlines() == [
        "error: --upstream must be an http:// or https:// URL, got 'ftp://example'"
    ]
    missing = tmp_path / "missing" / "x.db"
    bad_db = cli("proxy", "--upstream", "http://127.0.0.1:9/v1", "--db", str(missing))
    assert bad_db.returncode == 1 and "store folder does not exist" in bad_db.stderr
    db = ["--db", str(tmp_path / "never.db")]
    bad_faults = cli("proxy", "--upstream", "http://127.0.0.1:9/v1", *db, "--faults", "5xx=2")
    assert bad_faults.returncode == 1 and bad_faults.stderr.startswith("error: --faults")
    assert not (tmp_path / "never.db").exists()


def test_recorder_repairs_a_trajectory_left_behind(tmp_path: Path) -> None:
    """A proxy killed after committing a call but before assembling it loses nothing."""
    from trajforge.proxy.record import CapturedCall
    from trajforge.proxy.recorder import Recorder

    db = tmp_path / "p.db"
    call = CapturedCall(
        session="killed",
        endpoint="chat/completions",
        request={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        response={"id": "r1", "choices": [{"message": {"role": "assistant", "content": "yo"}}]},
        status=200,
        started_at=0.0,
        latency_s=0.01,
    )
    with Store(db) as store:
        recorder = Recorder(store)
        recorder.submit(call).result()
        recorder.flush()
        store.delete(trajectory_id("killed"))  # as if the assembly never happened
        recorder.close()
    with Store(db) as store:
        Recorder(store).close()
        traj = store.get(trajectory_id("killed"))
    assert [m.content for m in traj.messages] == ["hi", "yo"]
    assert traj.llm_calls[0].message_index == 1


@pytest.mark.parametrize(
    ("answer_after_commit", "expected"),
    [
        (True, ["forwarded", "committed", "answered"] * 2),
        (False, ["forwarded", "answered", "forwarded", "committed", "answered", "committed"]),
    ],
)
def test_a_call_is_committed_before_its_answer_or_before_the_sessions_next_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer_after_commit: bool, expected: list
) -> None:
    """By default the answer waits for the call's commit; with `answer_after_commit` off the
    answer comes first, the session's next call is forwarded at once and answered only once
    the call before it is committed. Commits are slowed by 0.3 s so that the order does not
    depend on timing."""
    events: list[str] = []
    send_upstream, commit = RecordingProxy._send_upstream, Recorder._commit

    async def forwarded(self: RecordingProxy, *args: Any) -> Any:
        events.append("forwarded")
        return await send_upstream(self, *args)

    def slow_commit(self: Recorder, batch: list) -> list:
        calls = [job for job in batch if job.call is not None]  # not flushes
        time.sleep(0.3 if calls else 0)
        results = commit(self, batch)
        events.extend("committed" for _ in calls)
        return results

    monkeypatch.setattr(RecordingProxy, "_send_upstream", forwarded)
    monkeypatch.setattr(Recorder, "_commit", slow_commit)
    db = tmp_path / "proxy.db"
    with MockOpenAIServer(["one", "two"]) as upstream:
        config = ProxyConfig(upstream=upstream.base_url, answer_after_commit=answer_after_commit)
        with ProxyServer(config, db) as proxy:
            client = _client(proxy.session_url("run-1"))
            messages = [{"role": "user", "content": "hi"}]
            for _ in range(2):
                answer = client.chat.completions.create(model="m", messages=messages)
                events.append("answered")
                messages += [{"role": "assistant", "content": answer.choices[0].message.content}]
                messages += [{"role": "user", "content": "go on"}]
            proxy.flush()
    assert events == expected
    assert len(Store(db).get(trajectory_id("run-1")).llm_calls) == 2
