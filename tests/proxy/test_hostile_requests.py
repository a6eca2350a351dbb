"""Bad requests get a clear 400 and never cost another call its record; secrets by rule."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.serve import BackgroundServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.record import CapturedCall
from trajforge.proxy.recorder import Recorder
from trajforge.proxy.redact import REDACTED, scrub_request
from trajforge.store import Store

GOOD = 120
POISON = [
    {"model": "m", "messages": "hello"},
    {"model": "m", "messages": [1, 2]},
    {"model": "m", "messages": [{"content": "no role"}]},
    {"model": "m"},
    {"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": "x"}]},
    ["not", "an", "object"],
]


async def _fire(base: str) -> tuple[list[int], list[httpx.Response]]:
    async with httpx.AsyncClient(timeout=60) as client:

        async def good(i: int) -> int:
            body = {"model": "m", "messages": [{"role": "user", "content": f"good-{i}"}]}
            return (
                await client.post(f"{base}/s/g{i % 7}/v1/chat/completions", json=body)
            ).status_code

        async def bad(body: object) -> httpx.Response:
            return await client.post(f"{base}/s/g0/v1/chat/completions", json=body)

        tasks = [good(i) for i in range(GOOD)]
        poison = [bad(body) for body in POISON]
        results = await asyncio.gather(*tasks, *poison)
    return list(results[:GOOD]), list(results[GOOD:])


def test_poison_requests_are_refused_and_cost_no_other_record(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with MockOpenAIServer() as upstream:
        with ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy:
            statuses, refused = asyncio.run(_fire(proxy.url))
            proxy.flush()
        forwarded = len(upstream.requests)
    assert statuses == [200] * GOOD
    assert [r.status_code for r in refused] == [400] * len(POISON)
    for answer in refused:
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and len(error["message"]) < 200
    assert forwarded == GOOD  # a bad request never reaches the upstream
    with Store(db) as store:
        docs = [orjson.loads(d) for (d,) in store.db.execute("SELECT doc FROM proxy_calls")]
    contents = sorted(d["request"]["messages"][0]["content"] for d in docs)
    assert contents == sorted(f"good-{i}" for i in range(GOOD))


def _call(session: str, messages: object) -> CapturedCall:
    return CapturedCall.model_construct(
        session=session,
        endpoint="chat/completions",
        request={"model": "m", "messages": messages},
        response=None,
        status=200,
        error=None,
        stream=False,
        started_at=time.time(),
        latency_s=0.01,
        prompt_token_ids=None,
        completion_token_ids=None,
        logprobs=None,
        fault=None,
        monitor_stop=None,
    )


def test_a_call_that_cannot_be_recorded_is_rolled_back_alone(tmp_path: Path) -> None:
    """Past validation (a bug, a new shape): the recorder's batch keeps every other call."""
    with Store(tmp_path / "r.db") as store:
        recorder = Recorder(store)
        futures = []
        for i in range(60):
            messages = "hello" if i % 20 == 7 else [{"role": "user", "content": f"c{i}"}]
            futures.append((i, recorder.submit(_call(f"s{i % 3}", messages))))
        recorder.flush()
        failed = [i for i, f in futures if f.exception(timeout=30) is not None]
        recorder.close()
        (rows,) = store.db.execute("SELECT count(*) FROM proxy_calls").fetchone()
        seqs = store.db.execute(
            "SELECT session, group_concat(seq) FROM proxy_calls GROUP BY session ORDER BY session"
        ).fetchall()
    assert failed == [7, 27, 47]
    assert rows == 57
    for _, joined in seqs:  # no gap where a failed call was
        numbers = [int(n) for n in joined.split(",")]
        assert sorted(numbers) == list(range(len(numbers)))


@pytest.mark.parametrize(
    "body",
    [
        {"openai_api_key": "s3cret-value"},
        {"x_api_key": "s3cret-value"},
        {"api_keys": ["s3cret-value"]},
        {"metadata": {"token": "s3cret-value"}},
        {"headers": {"X-Api-Key": "s3cret-value"}},
        {"extra": {"deep": [{"clientSecret": "s3cret-value"}]}},
        {"user": "Bearer abcdefgh12345678"},
        {"metadata": {"note": "sk-proj-abcdefghijklmnop1234"}},
        {"metadata": {"keys": ["ghp_abcdefghijklmnopqrstuvwx"]}},
    ],
)
def test_secrets_are_scrubbed_by_rule(body: dict) -> None:
    scrubbed = scrub_request({"model": "m", "messages": [], **body})
    text = orjson.dumps(scrubbed).decode()
    assert "s3cret" not in text and "abcdefgh" not in text and REDACTED in text


def test_ordinary_fields_are_kept() -> None:
    body = {"model": "m", "max_tokens": 5, "return_token_ids": True, "top_logprobs": 2}
    assert scrub_request(body) == body


def test_token_guards_docs_and_schema(tmp_path: Path) -> None:
    with MockOpenAIServer() as upstream:
        config = ProxyConfig(upstream=upstream.base_url, token="tok-123456")
        with ProxyServer(config, tmp_path / "p.db") as proxy:
            for path in ("/docs", "/openapi.json", "/redoc", "/v1/models", "/nowhere"):
                assert httpx.get(proxy.url + path).status_code == 401, path
            allowed = httpx.get(
                proxy.url + "/openapi.json", headers={"Authorization": "Bearer tok-123456"}
            )
    assert allowed.status_code == 200


def test_body_over_the_limit_is_413_and_not_read(tmp_path: Path) -> None:
    with MockOpenAIServer() as upstream:
        config = ProxyConfig(upstream=upstream.base_url, max_body_bytes=10_000)
        with ProxyServer(config, tmp_path / "p.db") as proxy:
            big = {"model": "m", "messages": [{"role": "user", "content": "x" * 20_000}]}
            answer = httpx.post(f"{proxy.base_url}/chat/completions", json=big)
            small = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
            fine = httpx.post(f"{proxy.base_url}/chat/completions", json=small)
        forwarded = len(upstream.requests)
    assert answer.status_code == 413 and "10000 bytes" in answer.json()["error"]["message"]
    assert fine.status_code == 200 and forwarded == 1


def test_client_that_gave_up_is_not_recorded_as_200(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with MockOpenAIServer([{"content": "late", "delay_s": 3.0}]) as upstream:
        config = ProxyConfig(upstream=upstream.base_url, timeout_s=30)
        with ProxyServer(config, db) as proxy:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=0.5)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                proxy.flush()
                with Store(db) as store:
                    rows = store.db.execute("SELECT status, error FROM proxy_calls").fetchall()
                if rows:
                    break
                time.sleep(0.1)
    assert rows == [(499, "client left before the answer")]


async def _one_chunk_then_stall(scope: dict, receive: Any, send: Any) -> None:
    """An upstream that streams one chunk of an answer, then says nothing for 30 s."""
    if scope["type"] != "http":
        return
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "he"}}],
    }
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    body = b"data: " + orjson.dumps(chunk) + b"\n\n"
    await send({"type": "http.response.body", "body": body, "more_body": True})
    await asyncio.sleep(30)


def test_client_that_leaves_mid_stream_is_recorded_at_once(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    upstream = BackgroundServer(_one_chunk_then_stall).start()
    try:
        config = ProxyConfig(upstream=f"{upstream.url}/v1", timeout_s=60)
        with ProxyServer(config, db) as proxy:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            url = f"{proxy.base_url}/chat/completions"
            with httpx.stream("POST", url, json=body, timeout=10) as answer:
                first = next(answer.iter_bytes())
            left_at, rows = time.monotonic(), []
            while not rows and time.monotonic() - left_at < 10:  # the upstream stalls for 30 s
                proxy.flush()
                with Store(db) as store:
                    rows = store.db.execute("SELECT status, error FROM proxy_calls").fetchall()
                time.sleep(0.05)
    finally:
        upstream.stop()
    assert b'"he"' in first
    assert rows == [(499, "client left")]
