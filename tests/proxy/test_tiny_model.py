"""The tiny real model upstream, and the training consistency check in a separate process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.mock_tokens import HashTokenBackend
from trajforge.models.tiny import load_tiny_backend
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

SCRIPT = [
    {"content": "Let me look.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
    {
        "content": "Run the tests.",
        "tool_calls": [{"name": "bash", "arguments": {"command": "pytest"}}],
    },
    "The tests pass; done.",
]


def _record(db: Path) -> None:
    with (
        MockOpenAIServer(SCRIPT, backend=load_tiny_backend()) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        url = f"{proxy.session_url('tiny')}/chat/completions"
        messages = [
            {"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": "The test of add fails."},
        ]
        for turn in range(len(SCRIPT)):
            body = {"model": "tiny", "messages": messages, "stream": turn == 1}
            if turn == 1:
                events = httpx.post(url, json=body).text.split("\n\n")
                chunks = [json.loads(e[6:]) for e in events if e.startswith("data: {")]
                calls = [
                    c for ch in chunks for c in ch["choices"][0]["delta"].get("tool_calls") or []
                ]
                message = {"role": "assistant", "content": "Run the tests.", "tool_calls": calls}
                message["tool_calls"] = [
                    {k: v for k, v in c.items() if k != "index"} for c in calls
                ]
            else:
                message = httpx.post(url, json=body).json()["choices"][0]["message"]
            messages.append(message)
            for call in message.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok\n"})


def test_tiny_model_gives_real_logprobs_and_recomputes_them_consistently(tmp_path: Path) -> None:
    db = tmp_path / "tiny.db"
    _record(db)
    calls = Store(db).get(trajectory_id("tiny")).llm_calls
    assert [c.extra["drift"]["status"] for c in calls] == ["first", "extends", "extends"]
    backend = load_tiny_backend()
    first = calls[0]
    assert first.logprobs == backend.score(first.prompt_token_ids, first.completion_token_ids)
    hashed = HashTokenBackend().score(first.prompt_token_ids, first.completion_token_ids)
    assert first.logprobs != hashed and all(lp < 0 for lp in first.logprobs)
    check = [sys.executable, "-m", "trajforge.export.tiny_check", "--db", str(db)]
    result = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["samples"] == 1
    assert report["tokens"] == sum(len(c.completion_token_ids) for c in calls)
    assert report["pearson"] >= 0.999
    assert report["max_abs_diff"] < 1e-3
