"""The mock OpenAI-compatible server, driven by the openai SDK and as a CLI command."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from trajforge.models import OpenAICompatibleModel, OpenAIModelConfig, mock_tokens
from trajforge.models.mock_script import DEFAULT_REPLY
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.mock_tokens import HashTokenBackend, completion_ids, prompt_ids
from trajforge.schema import Message

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
TOOL_REPLY = {"content": "look", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}


def _client(server: MockOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)


def test_openai_compatible_model_gets_text_tool_calls_and_logprobs() -> None:
    with MockOpenAIServer(["hello there", TOOL_REPLY]) as server:
        model = OpenAICompatibleModel(
            OpenAIModelConfig(base_url=server.base_url, model="m", logprobs=True, max_retries=0)
        )
        first = model.complete([Message(role="user", content="hi")])
        second = model.complete([Message(role="user", content="list")], tools=[BASH_TOOL])
    assert first.message.content == "hello there"
    assert len(first.call.logprobs) == first.call.usage.completion_tokens == 4
    assert all(lp < 0 for lp in first.call.logprobs)
    assert second.message.tool_calls[0].name == "bash"
    assert json.loads(second.message.tool_calls[0].arguments) == {"command": "ls"}
    assert second.call.response["choices"][0]["finish_reason"] == "tool_calls"


def test_answers_are_deterministic_and_carry_token_ids() -> None:
    bodies = []
    for _ in range(2):
        with MockOpenAIServer(["same reply"]) as server:
            request = {
                "model": "m",
                "messages": [{"role": "user", "content": "q"}],
                "logprobs": True,
            }
            bodies.append(httpx.post(f"{server.base_url}/chat/completions", json=request).json())
    first, second = bodies
    assert first["prompt_token_ids"] == second["prompt_token_ids"]
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]
    assert first["choices"][0]["logprobs"] == second["choices"][0]["logprobs"]
    assert first["usage"]["prompt_tokens"] == len(first["prompt_token_ids"])


def test_stream_matches_the_plain_answer() -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "q"}], "logprobs": True}
    with MockOpenAIServer(["one two three", "one two three"]) as server:
        plain = _client(server).chat.completions.create(**request)
        stream = _client(server).chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk.model_dump() for chunk in stream]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    ids = [t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]]
    logprobs = [
        e["logprob"] for c in chunks if c["choices"] for e in c["choices"][0]["logprobs"]["content"]
    ]
    plain_body = plain.model_dump()
    assert text == "one two three"
    assert ids == plain_body["choices"][0]["token_ids"]
    assert logprobs == [e.logprob for e in plain.choices[0].logprobs.content]
    assert chunks[0]["prompt_token_ids"] == plain_body["prompt_token_ids"]
    assert chunks[-1]["usage"]["completion_tokens"] == len(ids)


def test_streamed_tool_call_is_reassembled_by_the_sdk() -> None:
    with MockOpenAIServer([TOOL_REPLY]) as server:
        stream = _client(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], tools=[BASH_TOOL], stream=True
        )
        deltas = [c.choices[0].delta for c in stream if c.choices]
    calls = [call for d in deltas for call in d.tool_calls or []]
    assert calls[0].function.name == "bash"
    assert json.loads(calls[0].function.arguments) == {"command": "ls"}


def test_next_prompt_extends_previous_prompt_and_completion() -> None:
    backend = HashTokenBackend()
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]
    reply = {"role": "assistant", "content": "ok", "tool_calls": None}
    first = prompt_ids(backend, history)
    completion = completion_ids(backend, reply)
    later = prompt_ids(backend, [*history, reply, {"role": "user", "content": "more"}])
    assert later[: len(first) + len(completion)] == first + completion


def test_hashed_ids_are_stable_and_every_backend_knows_their_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second = HashTokenBackend(), HashTokenBackend()
    ids = first.encode("alpha beta, alpha")
    assert ids == [35011, 5172, 39827, 2870, 5172, 35011]  # the ids recorded data carries
    assert first.encode("alpha beta, alpha") == ids  # from the pieces it knows
    assert [second.piece(i) for i in second.encode("alpha beta, alpha")] == [
        "alpha", " ", "beta", ",", " ", "alpha"
    ]  # fmt: skip
    monkeypatch.setattr(mock_tokens, "KNOWN_PIECES", 2)
    assert HashTokenBackend().encode("alpha beta, alpha") == ids  # starting over changes none


def test_without_script_every_request_gets_the_fixed_reply() -> None:
    with MockOpenAIServer() as server:
        client = _client(server)
        replies = [
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": q}])
            for q in ("a", "b", "c")
        ]
    assert {r.choices[0].message.content for r in replies} == {DEFAULT_REPLY}


def test_callable_script_sees_the_request() -> None:
    def echo(body: dict) -> str:
        return "echo: " + body["messages"][-1]["content"]

    with MockOpenAIServer(echo) as server:
        reply = _client(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ping"}]
        )
    assert reply.choices[0].message.content == "echo: ping"


def test_completions_and_models_endpoints() -> None:
    with MockOpenAIServer(["done"]) as server:
        client = _client(server)
        completion = client.completions.create(model="m", prompt="say", logprobs=1)
        models = client.models.list()
    body = completion.model_dump()
    assert completion.choices[0].text == "done"
    assert body["choices"][0]["token_ids"] and body["choices"][0]["prompt_token_ids"]
    assert len(completion.choices[0].logprobs.token_logprobs) == len(
        body["choices"][0]["token_ids"]
    )
    assert models.data[0].id == "trajforge-mock"


def test_error_replies_and_exhausted_script() -> None:
    script = [{"status": 503, "error": "overloaded"}, "last"]
    with MockOpenAIServer(script) as server:
        client = _client(server)
        with pytest.raises(openai.InternalServerError, match="overloaded"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        with pytest.raises(openai.InternalServerError, match="exhausted"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])


def test_cli_mock_server_serves_a_script_file(tmp_path: Path, free_port, cli_server) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["from the file"]))
    url = f"http://127.0.0.1:{free_port()}"
    port = url.rsplit(":", 1)[1]
    cli_server("mock-server", "--port", port, "--script", str(script), ready_url=f"{url}/v1/models")
    request = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    body = httpx.post(f"{url}/v1/chat/completions", json=request).json()
    assert body["choices"][0]["message"]["content"] == "from the file"


def test_cli_mock_server_rejects_a_bad_script(tmp_path: Path, cli) -> None:
    script = tmp_path / "bad.json"
    script.write_text('{"not": "a list"}')
    result = cli("mock-server", "--port", "1", "--script", str(script))
    assert result.returncode == 1
    expected = f"error: {script}: a script file must hold a JSON list of replies"
    assert result.stderr.strip().splitlines() == [expected]


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kilobytes = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))
    return int(kilobytes) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_the_cli_mock_server_keeps_no_request_bodies(free_port, cli_server) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = cli_server("mock-server", "--port", str(port), ready_url=f"{url}/v1/models")
    request = {"model": "m", "messages": [{"role": "user", "content": "x" * 2_000_000}]}
    with httpx.Client(base_url=f"{url}/v1") as client:
        client.post("/chat/completions", json=request).raise_for_status()
        before = _rss_mb(server.pid)
        for _ in range(40):  # 80 MB of bodies, which a request log would hold
            client.post("/chat/completions", json=request).raise_for_status()
    assert _rss_mb(server.pid) - before < 40
