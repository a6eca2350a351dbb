"""`serve` refuses bad requests with a 4xx in OpenAI's error shape and keeps serving."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.tools import TOOLS
from trajforge.models.serve import BackgroundServer
from trajforge.serve.app import ServeConfig, StudentApp
from trajforge.serve.reload import RELOAD_PATH, add_reload_route, new_reload_token, reload_headers
from trajforge.serve.student import MANIFEST, MODEL_DIR, Student

TOKEN = new_reload_token()
BODY_LIMIT = 64 * 1024


def opening(seed: int = 1_000_000) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in HouseholdEnv().reset(task_for(seed, 1))]


@pytest.fixture(scope="module")
def served(student_dir: Path) -> Iterator[tuple[StudentApp, str]]:
    app = StudentApp(Student(student_dir), ServeConfig(max_body_bytes=BODY_LIMIT))
    add_reload_route(app, TOKEN)
    server = BackgroundServer(app.app).start()
    yield app, server.url
    server.stop()


def chat(url: str, body: object, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30, **kwargs)


def answers_normally(url: str) -> dict:
    reply = chat(url, {"messages": opening(), "tools": TOOLS})
    assert reply.status_code == 200, reply.text
    return reply.json()


def error_message(reply: httpx.Response) -> str:
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error["message"]


USER = [{"role": "user", "content": "hello"}]
BAD_BODIES = {
    "max_tokens text": ({"messages": USER, "max_tokens": "abc"}, "max_tokens"),
    "temperature text": ({"messages": USER, "temperature": "hot"}, "temperature"),
    "seed text": ({"messages": USER, "seed": "abc"}, "seed"),
    "seed too big": ({"messages": USER, "seed": 2**70}, "seed"),
    "tools text": ({"messages": USER, "tools": "x"}, "tools"),
    "tools of numbers": ({"messages": USER, "tools": [1]}, "tools.0"),
    "messages of numbers": ({"messages": [1, 2]}, "messages.0"),
    "array body": ([1, 2], "JSON object"),
    "string body": ("hello", "JSON object"),
    "no messages": ({"model": "x"}, "messages"),
    "top_logprobs text": ({"messages": USER, "top_logprobs": "x"}, "top_logprobs"),
    "stream_options text": ({"messages": USER, "stream_options": "x"}, "stream_options"),
    "tool properties list": (
        {
            "messages": USER,
            "tools": [{"function": {"name": "f", "parameters": {"properties": []}}}],
        },
        "properties",
    ),
}


@pytest.mark.parametrize("case", list(BAD_BODIES), ids=list(BAD_BODIES))
def test_a_bad_field_gets_a_400_naming_it_and_the_server_keeps_answering(
    served: tuple[StudentApp, str], case: str
) -> None:
    _, url = served
    body, named = BAD_BODIES[case]
    reply = chat(url, body)
    assert reply.status_code == 400, reply.text
    assert named in error_message(reply)
    answers_normally(url)


def test_a_body_over_the_limit_gets_a_413_declared_or_streamed(
    served: tuple[StudentApp, str],
) -> None:
    _, url = served
    big = orjson.dumps({"messages": [{"role": "user", "content": "x" * BODY_LIMIT}]})
    declared = httpx.post(f"{url}/v1/chat/completions", content=big, timeout=30)
    assert declared.status_code == 413 and str(BODY_LIMIT) in error_message(declared)
    chunked = httpx.post(
        f"{url}/v1/chat/completions", content=iter([big[:1000], big[1000:]]), timeout=30
    )
    assert chunked.status_code == 413, chunked.text
    answers_normally(url)


def test_a_failure_inside_the_batching_loop_fails_that_request_and_is_logged(
    served: tuple[StudentApp, str], caplog: pytest.LogCaptureFixture
) -> None:
    app, url = served
    real = app.student.generate

    def broken_once(*args, **kwargs):
        app.student.generate = real  # type: ignore[method-assign]
        raise RuntimeError("decoder blew up")

    app.student.generate = broken_once  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="trajforge.serve.app"):
        reply = chat(url, {"messages": opening(), "tools": TOOLS})
    assert reply.status_code == 500 and reply.json()["error"]["type"] == "server_error"
    assert any("decoder blew up" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    answers_normally(url)
    assert app._worker is not None and not app._worker.done()


def test_a_chat_without_tools_never_answers_with_a_tool_call(
    served: tuple[StudentApp, str],
) -> None:
    _, url = served
    with_tools = answers_normally(url)["choices"][0]
    assert with_tools["message"]["tool_calls"]  # the same chat with tools: the model calls one
    reply = chat(url, {"messages": opening()})
    choice = reply.json()["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
    assert choice["token_ids"] == with_tools["token_ids"]  # the same tokens, read as text


def reload(url: str, checkpoint: Path, token: str | None = TOKEN) -> httpx.Response:
    headers = reload_headers(token) if token else {}
    body = {"checkpoint": str(checkpoint)}
    return httpx.post(f"{url}{RELOAD_PATH}", json=body, headers=headers, timeout=120)


@pytest.mark.parametrize("broken", ["empty model dir", "manifest is a list"])
def test_a_broken_checkpoint_is_refused_and_the_old_weights_keep_serving(
    served: tuple[StudentApp, str], student_dir: Path, tmp_path: Path, broken: str
) -> None:
    _, url = served
    before = answers_normally(url)["choices"][0]["token_ids"]
    copy = tmp_path / "ckpt"
    shutil.copytree(student_dir, copy)
    if broken == "empty model dir":
        shutil.rmtree(copy / MODEL_DIR)
        (copy / MODEL_DIR).mkdir()
        named = MODEL_DIR
    else:
        (copy / MANIFEST).write_text("[]")
        named = MANIFEST
    reply = reload(url, copy)
    assert reply.status_code == 400, reply.text
    assert named in error_message(reply) and str(copy) in error_message(reply)
    assert answers_normally(url)["choices"][0]["token_ids"] == before


def test_reload_needs_the_servers_token(served: tuple[StudentApp, str], student_dir: Path) -> None:
    _, url = served
    assert reload(url, student_dir, token=None).status_code == 401
    assert reload(url, student_dir, token="x" * 43).status_code == 401
    assert reload(url, student_dir).status_code == 200


def test_a_server_started_without_a_token_refuses_every_reload(student_dir: Path) -> None:
    app = StudentApp(Student(student_dir))
    add_reload_route(app, None)
    server = BackgroundServer(app.app).start()
    try:
        reply = reload(server.url, student_dir)
    finally:
        server.stop()
    assert reply.status_code == 403 and "without a reload token" in error_message(reply)
