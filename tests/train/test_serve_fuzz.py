"""Seeded fuzzing of request bodies against a running `trajforge serve` (a real subprocess).

Every body gets an answer (200, or a 4xx in OpenAI's error shape: never a 5xx, never a hang)
and a normal request still answers afterwards. Bodies mix valid and wrong values for every
field, broken messages, truncated, too deeply nested, non-UTF-8 and oversized bodies.
Bounded: 200 bodies per seed, each with a 30 s timeout.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.tools import TOOLS

BODIES = 200
FIELDS = ("messages", "tools", "model", "max_tokens", "max_completion_tokens", "temperature",
          "seed", "stream", "stream_options", "logprobs", "top_logprobs",
          "return_tokens_as_token_ids", "n", "tool_choice")  # fmt: skip
VALID = {"max_tokens": [1, 5, 48, 10_000], "max_completion_tokens": [3, 30],
         "temperature": [0, 0.5, 1.0, 2], "seed": [0, 1, 2**63 - 1, -5], "stream": [True, False],
         "stream_options": [{"include_usage": True}], "logprobs": [True, False],
         "top_logprobs": [0, 5], "return_tokens_as_token_ids": [True], "model": ["m"],
         "n": [1], "tool_choice": ["auto"], "tools": [[], None]}  # fmt: skip
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "weight")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def serve_url(student_dir: Path) -> Iterator[str]:
    port = _free_port()
    command = [sys.executable, "-m", "trajforge", "serve", str(student_dir), "--port", str(port),
               "--max-wait-ms", "2", "--max-body-mb", "1"]  # fmt: skip
    env = {**os.environ, "TRAJFORGE_RELOAD_TOKEN": "t" * 32}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


def _wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited early: {process.stderr and process.stderr.read()}")
        try:
            httpx.get(f"{url}/v1/models", timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"serve at {url} did not come up")


def _opening(seed: int) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in HouseholdEnv().reset(task_for(seed, 1))]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(["none", "bool", "int", "huge", "float", "text", "long", "list", "dict"])
    if depth > 3 and kind in ("list", "dict"):
        kind = "text"
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "dict":
        return {rng.choice(FIELDS + MESSAGE_FIELDS): _value(rng, depth + 1) for _ in range(3)}
    return {
        "none": None,
        "bool": rng.random() < 0.5,
        "int": rng.randrange(-5, 500),
        "huge": rng.choice([2**63, 2**64, -(2**63) - 1, 2**70, 10**40]),
        "float": rng.choice([0.0, 0.5, -1.0, 2.5, 1e-30, 1e30]),
        "text": rng.choice(["", "abc", "hot", "user", "tool", "é✓", "<|call|>"]),
        "long": "word " * rng.randrange(100, 4000),
    }[kind]


def _message(rng: random.Random) -> Any:
    if rng.random() < 0.15:
        return _value(rng)
    message: dict[str, Any] = {"role": rng.choice(["user", "assistant", "tool", "system"])}
    for name in rng.sample(MESSAGE_FIELDS, rng.randrange(len(MESSAGE_FIELDS))):
        message[name] = _value(rng)
    return message


def _body(rng: random.Random, seed: int) -> bytes:
    body: dict[str, Any] = {"messages": _opening(seed), "tools": TOOLS}
    if rng.random() < 0.3:
        body["messages"] = [*body["messages"][:2], *(_message(rng) for _ in range(3))]
    for name in rng.sample(FIELDS, rng.randrange(1, 4)):
        valid = VALID.get(name)
        body[name] = rng.choice(valid) if valid and rng.random() < 0.5 else _value(rng)
    raw = json.dumps(body, ensure_ascii=False).encode()  # big integers too
    shape = rng.random()
    if shape < 0.08:
        return raw[: rng.randrange(len(raw))]  # cut short
    if shape < 0.12:
        return b'{"messages": ' + b"[" * 3000 + b"]" * 3000 + b"}"  # nested too deep
    if shape < 0.15:
        return b'{"messages": "' + bytes([0xFF, 0xFE]) * 50 + b'"}'  # not UTF-8
    if shape < 0.18:
        return orjson.dumps({"messages": [{"role": "user", "content": "x" * 1_100_000}]})
    return raw


def _check(reply: httpx.Response) -> None:
    assert reply.status_code < 500, reply.text[:300]
    if reply.headers["content-type"].startswith("text/event-stream"):
        events = [line for line in reply.text.split("\n\n") if line]
        assert events[-1] == "data: [DONE]" and orjson.loads(events[0][6:])["choices"]
        return
    data = reply.json()
    if reply.status_code == 200:
        assert data["choices"][0]["token_ids"] is not None
    else:
        assert reply.status_code in (400, 413) and data["error"]["message"]


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzzed_bodies_get_an_answer_and_the_server_keeps_serving(
    serve_url: str, seed: int
) -> None:
    rng = random.Random(seed)
    statuses: dict[int, int] = {}
    with httpx.Client(timeout=30) as client:
        for index in range(BODIES):
            raw = _body(rng, 1_000_000 + index)
            reply = client.post(
                f"{serve_url}/v1/chat/completions",
                content=raw,
                headers={"content-type": "application/json"},
            )
            _check(reply)
            statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1
        normal = client.post(
            f"{serve_url}/v1/chat/completions", json={"messages": _opening(7), "tools": TOOLS}
        )
    assert normal.status_code == 200 and normal.json()["choices"][0]["message"]["tool_calls"]
    assert statuses.get(200, 0) > 20 and statuses.get(400, 0) > 20, statuses
