"""Request bodies read with the session's previous messages: always equal to `orjson.loads`,
only the new messages parsed when the body extends the previous one, and the bytes sent
upstream are the client's own plus the proxy's fields."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest

from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.request_reader import RequestReader
from trajforge.proxy.shaping import augment, upstream_bytes

Dumps = Callable[[dict], bytes]
WRITERS: dict[str, Dumps] = {
    "json.dumps": lambda body: json.dumps(body).encode(),
    "orjson": orjson.dumps,
    "indented": lambda body: json.dumps(body, indent=2).encode(),
}
LAYOUTS: dict[str, Callable[[list], dict]] = {
    "messages last": lambda messages: {"model": "m", "messages": messages},
    "messages first": lambda messages: {
        "messages": messages,
        "model": "m",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": [1]}}}],
    },
    "messages between": lambda messages: {"model": "m", "messages": messages, "stream": False},
}


def _session(layout: Callable[[list], dict], calls: int = 20) -> Iterator[dict]:
    """Bodies of a growing conversation whose texts look like JSON syntax."""
    messages: list = [{"role": "user", "content": 'fix it ]} "messages", "model": ['}]
    for n in range(calls):
        yield layout(messages)
        reply = {"role": "assistant", "content": f"step {n} ],"}
        messages = [*messages, reply, {"role": "user", "content": "x" * n + '"\\'}]


def _read_all(reader: RequestReader, bodies: list[bytes], session: str = "s") -> list:
    out = []
    for raw in bodies:
        read = reader.read(session, raw)
        reader.keep(session, read)
        out.append(read.body)
    return out


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_growing_session_parses_only_its_new_messages(writer: str, layout: str) -> None:
    bodies = [WRITERS[writer](body) for body in _session(LAYOUTS[layout])]
    reader = RequestReader()
    assert _read_all(reader, bodies) == [orjson.loads(raw) for raw in bodies]
    # the first body's one message, then two new messages per call (the old parse read all)
    assert reader.messages_parsed == 1 + 2 * (len(bodies) - 1)


def test_reused_messages_are_the_previous_objects() -> None:
    reader = RequestReader()
    first, second = (orjson.dumps(body) for body in _session(LAYOUTS["messages last"], 2))
    old = reader.read("s", first)
    reader.keep("s", old)
    new = reader.read("s", second)
    assert new.reused == 1
    assert new.body["messages"][0] is old.body["messages"][0]


@pytest.mark.parametrize(
    "change",
    [
        lambda body: {**body, "messages": [{"role": "user", "content": "rewritten"}]},
        lambda body: {**body, "model": "other"},
        lambda body: {**body, "messages": body["messages"][:-1]},
        lambda body: {**body, "temperature": 0.5},
        lambda body: {"model": "m", "messages": [*body["messages"], 7]},
    ],
)
def test_a_body_that_does_not_extend_the_previous_one_is_parsed_whole(change) -> None:
    bodies = list(_session(LAYOUTS["messages between"], 3))
    raws = [orjson.dumps(body) for body in bodies] + [orjson.dumps(change(bodies[-1]))]
    reader = RequestReader()
    assert _read_all(reader, raws) == [orjson.loads(raw) for raw in raws]


@pytest.mark.parametrize(
    "tail",
    [b",", b", ", b",]", b",{", b",{}]x", b",1,", b"1", b",{}]"],
)
def test_bytes_that_are_not_whole_messages_read_as_orjson_reads_them(tail: bytes) -> None:
    reader = RequestReader()
    first = b'{"model": "m", "messages": [{"role": "user", "content": "a"}]}'
    reader.keep("s", reader.read("s", first))
    raw = first[:-2] + tail + first[-2:]
    try:
        expected = orjson.loads(raw)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            reader.read("s", raw)
        return
    assert reader.read("s", raw).body == expected


def test_a_second_messages_field_is_the_one_read() -> None:
    """orjson keeps the last of two `messages`: the reader must extend that one."""
    reader = RequestReader()
    first = b'{"messages": [{"role": "user", "content": "a"}], "messages": [{"role": "user"}]}'
    second = first[:-2] + b', {"role": "tool"}]}'
    assert _read_all(reader, [first, second]) == [orjson.loads(first), orjson.loads(second)]


def test_sessions_do_not_share_messages() -> None:
    reader = RequestReader()
    first, second = (orjson.dumps(body) for body in _session(LAYOUTS["messages last"], 2))
    reader.keep("a", reader.read("a", first))
    assert reader.read("b", second).reused == 0


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [{"role": "user", "content": "a"}]},
        {"model": "m", "messages": [], "logprobs": False},
        {"model": "m", "messages": [], "stream": True, "stream_options": {"x": 1}},
        {"model": "m", "messages": [], "logprobs": 3, "return_token_ids": True},
    ],
)
def test_the_upstream_bytes_are_the_client_bytes_with_the_proxy_fields(body: dict) -> None:
    raw = json.dumps(body, indent=1).encode() + b"\n"
    config = ProxyConfig(upstream="http://127.0.0.1:1/v1")
    upstream, _ = augment(body, True, config)
    sent = upstream_bytes(raw, body, upstream)
    assert orjson.loads(sent) == upstream
    if all(upstream[key] is value for key, value in body.items()):  # the client's text kept
        assert sent.startswith(raw.rstrip()[:-1])


def test_a_bad_new_message_after_reused_ones_is_refused(tmp_path) -> None:
    """Only the new messages are checked, and a bad one still gets its 400 (naming it)."""
    good = [{"role": "user", "content": "hi"}]
    with (
        MockOpenAIServer(["hello", "again"]) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), tmp_path / "runs.db") as proxy,
    ):
        url = f"{proxy.session_url('s')}/chat/completions"
        first = httpx.post(url, json={"model": "m", "messages": good})
        assert first.status_code == 200
        bad = [*good, first.json()["choices"][0]["message"], {"content": "no role"}]
        refused = httpx.post(url, json={"model": "m", "messages": bad})
        assert refused.status_code == 400
        assert "messages[2].role must be a string" in refused.json()["error"]["message"]
        fixed = [*bad[:2], {"role": "user", "content": "ok"}]
        assert httpx.post(url, json={"model": "m", "messages": fixed}).status_code == 200
