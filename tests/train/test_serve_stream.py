"""`stream: true` on a real server: each token's chunk reaches the client while the
generation is still running, and the chunks add up to the non-streamed answer."""

from __future__ import annotations

import functools
import itertools
import threading
from pathlib import Path

import httpx
import orjson
import pytest

from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.tools import TOOLS
from trajforge.models.serve import BackgroundServer
from trajforge.serve.app import StudentApp
from trajforge.serve.student import Student

GATED_FORWARD = 2
"""The forward pass that waits until the client has read a token chunk (two tokens are out)."""


def _gate(student: Student) -> tuple[threading.Event, list[bool]]:
    """Make the forward pass number GATED_FORWARD that decoding runs (the lean one, or the
    model's own) wait for `released` (at most a minute, a guard against a hang); `waited`
    records whether it was released."""
    released, waited, calls = threading.Event(), [], itertools.count()
    original = student.lean or student.model.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        if next(calls) == GATED_FORWARD:
            waited.append(released.wait(60))
        return original(*args, **kwargs)

    if student.lean is not None:
        student.lean = forward  # type: ignore[assignment]
    else:
        student.model.forward = forward
    return released, waited


def _chunks(url: str, body: dict, released: threading.Event) -> list[dict]:
    chunks = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunks.append(orjson.loads(line[6:]))
            if chunks[-1]["choices"] and chunks[-1]["choices"][0].get("token_ids"):
                released.set()  # a token arrived: let the generation go on
    return chunks


def test_stream_sends_each_token_while_the_answer_is_generated(student_dir: Path) -> None:
    student = Student(student_dir)
    messages = [{"role": m.role, "content": m.content}
                for m in HouseholdEnv().reset(task_for(1_000_004, 1))]  # fmt: skip
    body = {"model": "s", "messages": messages, "tools": TOOLS, "logprobs": True,
            "max_tokens": 16, "stream_options": {"include_usage": True}}  # fmt: skip
    server = BackgroundServer(StudentApp(student).app).start()
    try:
        whole = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
        released, waited = _gate(student)
        chunks = _chunks(server.url, {**body, "stream": True}, released)
    finally:
        server.stop()
    assert waited == [True], "no token chunk reached the client before the generation ended"
    choice = whole["choices"][0]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    tokens = [c["choices"][0]["token_ids"] for c in chunks if c["choices"]]
    assert [t for t in tokens if t] == [[t] for t in choice["token_ids"]]  # one chunk a token
    logprobs = [c["choices"][0]["logprobs"] for c in chunks if c["choices"]]
    entries = [e for part in logprobs if part for e in part["content"]]
    whole_logprobs = [e["logprob"] for e in choice["logprobs"]["content"]]
    # the same tokens; the logprobs of two decodes may differ in the last float digits (the
    # CPU's kernels need not sum in the same order at every call)
    assert [e["logprob"] for e in entries] == pytest.approx(whole_logprobs, abs=1e-5)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == (choice["message"]["content"] or "")
    (calls,) = [d["tool_calls"] for d in deltas if d.get("tool_calls")]
    assert [c["function"] for c in calls] == [
        c["function"] for c in choice["message"]["tool_calls"]
    ]
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish == [chunks[-2]] and finish[0]["choices"][0]["finish_reason"] == "tool_calls"
    assert finish[0]["usage"] == chunks[-1]["usage"]
    usage, first = finish[0]["usage"], whole["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        first["prompt_tokens"], first["completion_tokens"])  # fmt: skip
    assert usage["prompt_tokens_details"]["cached_tokens"] == first["prompt_tokens"] - 1
