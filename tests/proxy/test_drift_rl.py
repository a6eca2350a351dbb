"""Drift audit on rewritten histories, and token-level RL export split at drift points."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from trajforge.export.rl import rl_samples
from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.drift import audit, normalize_message
from trajforge.proxy.session import trajectory_id
from trajforge.store import Store


def _chat(url: str, messages: list[dict]) -> str:
    body = {"model": "m", "messages": messages}
    answer = httpx.post(f"{url}/chat/completions", json=body).json()
    return answer["choices"][0]["message"]["content"]


def _record_session(db: Path, rewrite: str) -> None:
    """Three turns; the third sends a history that was rewritten or compacted."""
    script = ["first answer", "second answer", "third answer"]
    with (
        MockOpenAIServer(script) as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        url = proxy.session_url("drifty")
        history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
        history += [{"role": "assistant", "content": _chat(url, history)}]
        history += [{"role": "user", "content": "tool output 1"}]
        history += [{"role": "assistant", "content": _chat(url, history)}]
        history += [{"role": "user", "content": "tool output 2"}]
        if rewrite == "rewritten":
            history[1] = {"role": "user", "content": "task, restated by the harness"}
        elif rewrite == "compacted":
            history = [history[0], {"role": "user", "content": "summary of the work so far"}]
        _chat(url, history)
        httpx.post(f"{proxy.url}/s/drifty/outcome", json={"success": False, "reward": 0.25})


def test_extension_is_not_drift(tmp_path: Path) -> None:
    _record_session(tmp_path / "p.db", rewrite="none")
    calls = Store(tmp_path / "p.db").get(trajectory_id("drifty")).llm_calls
    assert [c.extra["drift"]["status"] for c in calls] == ["first", "extends", "extends"]
    assert all(c.extra["drift"]["by_tokens"] in (None, True) for c in calls)


def test_rewritten_history_is_detected(tmp_path: Path) -> None:
    _record_session(tmp_path / "p.db", rewrite="rewritten")
    traj = Store(tmp_path / "p.db").get(trajectory_id("drifty"))
    drift = traj.llm_calls[2].extra["drift"]
    assert drift["status"] == "rewritten"
    assert drift["common_prefix_messages"] == 1 and drift["by_tokens"] is False
    # the answers themselves are still at their places in the final messages
    assert [c.message_index for c in traj.llm_calls] == [2, 4, 6]


def test_compacted_history_is_detected(tmp_path: Path) -> None:
    _record_session(tmp_path / "p.db", rewrite="compacted")
    traj = Store(tmp_path / "p.db").get(trajectory_id("drifty"))
    assert traj.llm_calls[2].extra["drift"]["status"] == "compacted"
    assert len(traj.messages) == 3
    # the earlier answers were compacted away: no message of the final history is theirs
    assert [c.message_index for c in traj.llm_calls] == [None, None, 2]


def test_retokenized_prompt_is_detected() -> None:
    messages = [normalize_message({"role": "user", "content": "hi"})]
    reply = normalize_message({"role": "assistant", "content": "yo"})
    same_messages = [*messages, reply, normalize_message({"role": "user", "content": "next"})]
    result = audit([*messages, reply], [1, 2, 3, 4], same_messages, [1, 2, 9, 4, 5])
    assert result.status == "retokenized" and result.common_prefix_tokens == 2


def test_rl_export_builds_token_samples_and_splits_at_drift(tmp_path: Path) -> None:
    _record_session(tmp_path / "p.db", rewrite="rewritten")
    traj = Store(tmp_path / "p.db").get(trajectory_id("drifty"))
    first, second = list(rl_samples(traj))
    calls = traj.llm_calls
    assert first["call_ids"] == [calls[0].id, calls[1].id] and second["call_ids"] == [calls[2].id]
    assert first["prompt_ids"] == calls[0].prompt_token_ids
    full = first["prompt_ids"] + first["completion_ids"]
    assert full == calls[1].prompt_token_ids + calls[1].completion_token_ids
    model_tokens = [
        t for t, m in zip(first["completion_ids"], first["loss_mask"], strict=True) if m
    ]
    assert model_tokens == calls[0].completion_token_ids + calls[1].completion_token_ids
    sampled = [lp for lp, m in zip(first["logprobs"], first["loss_mask"], strict=True) if m]
    assert sampled == calls[0].logprobs + calls[1].logprobs
    assert 0 in first["loss_mask"]  # the harness's turn between the two calls
    assert first["reward"] == second["reward"] == 0.25
    assert second["prompt_ids"] == calls[2].prompt_token_ids


def test_cli_export_rl(tmp_path: Path, cli) -> None:
    db = tmp_path / "p.db"
    _record_session(db, rewrite="compacted")
    out = tmp_path / "rl.jsonl"
    result = cli("export", "--db", str(db), "--format", "rl", "--out", str(out))
    assert result.returncode == 0, result.stderr
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(s["call_ids"]) for s in samples] == [2, 1]
    assert all(
        len(s["completion_ids"]) == len(s["loss_mask"]) == len(s["logprobs"]) for s in samples
    )
