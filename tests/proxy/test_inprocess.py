"""In-process capture writes what the proxy writes, for the same calls, without the hop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from trajforge.errors import UserError
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer, capture_in_process
from trajforge.proxy.inprocess import CaptureOptions, Capturer, CaptureTransport
from trajforge.proxy.launch import run_captured
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.session import trajectory_id
from trajforge.schema import Trajectory
from trajforge.store import Store

from .conversation import tool_turn

TOOL_REPLY = {"content": "look", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}
SCRIPT = [TOOL_REPLY, "found a.py", "done"]


def _conversation(client: openai.OpenAI) -> list[Any]:
    """Three calls (plain, streamed, plain); returns what the harness saw of each answer."""
    first, messages = tool_turn(client)
    stream = client.chat.completions.create(model="m", messages=messages, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "ok?"}]
    last = client.chat.completions.create(model="m", messages=messages)
    seen = [first.choices[0].logprobs, [c.choices[0].logprobs for c in chunks if c.choices]]
    return [*seen, text, last.choices[0].message.content, last.usage.total_tokens]


def _comparable(traj: Trajectory) -> tuple:
    calls = [
        (
            c.message_index,
            c.model,
            c.prompt_token_ids,
            c.completion_token_ids,
            c.logprobs,
            c.usage,
            c.error,
            {k: v for k, v in c.extra.items() if k not in ("seq",)},
        )
        for c in traj.llm_calls
    ]
    return traj.messages, calls, traj.task.id, traj.usage.total_tokens


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-client-secret-123456", max_retries=0)


def test_in_process_capture_records_what_the_proxy_records(tmp_path: Path) -> None:
    proxy_db, inprocess_db = tmp_path / "proxy.db", tmp_path / "inprocess.db"
    with (
        MockOpenAIServer(SCRIPT) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), proxy_db) as proxy,
    ):
        through_proxy = _conversation(_client(proxy.session_url("run")))
    with (
        MockOpenAIServer(SCRIPT) as upstream,
        capture_in_process(inprocess_db, session="run") as active,
    ):
        in_process = _conversation(_client(upstream.base_url))
        active.outcome(success=True, reward=1.0)
    assert in_process == through_proxy  # the harness sees the same answers
    assert in_process[0] is None and in_process[1] == [None] * len(in_process[1])
    ours = Store(inprocess_db).get(trajectory_id("run"))
    theirs = Store(proxy_db).get(trajectory_id("run"))
    assert _comparable(ours) == _comparable(theirs)
    assert [c.extra["stream"] for c in ours.llm_calls] == [False, True, False]
    assert all(c.prompt_token_ids and c.logprobs for c in ours.llm_calls)
    assert ours.source.harness == "inprocess" and ours.outcome.reward == 1.0
    assert b"sk-client-secret-123456" not in inprocess_db.read_bytes()


def test_an_async_client_is_captured_and_other_requests_pass_through(tmp_path: Path) -> None:
    db = tmp_path / "s.db"

    async def run(base_url: str) -> str | None:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
        await client.models.list()
        answer = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        return answer.choices[0].message.content

    with MockOpenAIServer(["hello"]) as upstream, capture_in_process(db, session="async"):
        assert asyncio.run(run(upstream.base_url)) == "hello"
    traj = Store(db).get(trajectory_id("async"))
    assert [m.role for m in traj.messages] == ["user", "assistant"]
    (call,) = traj.llm_calls
    assert call.message_index == 1 and call.completion_token_ids and call.logprobs


def test_a_transport_records_one_client_and_capture_cannot_nest(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store, MockOpenAIServer(["one"]) as upstream:
        recorder = Recorder(store, harness="mine")
        transport = CaptureTransport(Capturer(recorder, CaptureOptions(session="mine")))
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        with httpx.Client(transport=transport) as client:
            reply = client.post(f"{upstream.base_url}/chat/completions", json=body).json()
        recorder.flush()
        recorder.close()
        traj = store.get(trajectory_id("mine"))
    assert reply["choices"][0]["message"]["content"] == "one"
    assert reply["choices"][0]["logprobs"] is None and "prompt_token_ids" not in reply
    assert traj.source.harness == "mine" and traj.llm_calls[0].completion_token_ids
    nested = pytest.raises(RuntimeError, match="already active")
    with capture_in_process(tmp_path / "a.db"), nested, capture_in_process(tmp_path / "b.db"):
        pass


def test_an_upstream_error_is_recorded_and_passed_on(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with MockOpenAIServer([]) as upstream, capture_in_process(db, session="err"):
        client = _client(upstream.base_url)
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    (call,) = Store(db).get(trajectory_id("err")).llm_calls
    assert call.error and call.extra["status"] == raised.value.status_code


HARNESS = """
import sys
import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key="k", max_retries=0)
reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
print(reply.choices[0].message.content)
sys.exit(3)
"""


def test_a_python_program_runs_in_process_and_keeps_its_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, db = tmp_path / "harness.py", tmp_path / "s.db"
    script.write_text(HARNESS)
    with MockOpenAIServer(["from the model"]) as upstream:
        status = run_captured([str(script), upstream.base_url], db, "script")
    assert status == 3 and capsys.readouterr().out == "from the model\n"
    (call,) = Store(db).get(trajectory_id("script")).llm_calls
    assert call.completion_token_ids and call.message_index == 1
    with pytest.raises(UserError, match="not a Python program"):
        run_captured(["/bin/sh", "-c", "true"], db, "shell")
