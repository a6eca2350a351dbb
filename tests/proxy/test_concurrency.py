"""1,000 concurrent calls over loopback: every one of them is in the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import orjson
import pytest

from trajforge.proxy.session import trajectory_id
from trajforge.store import Store

CALLS = 1000
SESSIONS = 20


async def _fire(base: str) -> list[int]:
    limits = httpx.Limits(max_connections=CALLS, max_keepalive_connections=CALLS)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def one(i: int) -> int:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": f"request-{i}"}],
                "stream": i % 2 == 0,
            }
            url = f"{base}/s/load-{i % SESSIONS}/v1/chat/completions"
            answer = await client.post(url, json=body)
            return answer.status_code

        return await asyncio.gather(*(one(i) for i in range(CALLS)))


@pytest.mark.slow
def test_thousand_concurrent_calls_none_missing(tmp_path: Path, free_port, cli_server) -> None:
    """Mock upstream and proxy run as separate processes, as a user would run them."""
    db = tmp_path / "load.db"
    upstream, proxy = free_port(), free_port()
    up_url, proxy_url = f"http://127.0.0.1:{upstream}", f"http://127.0.0.1:{proxy}"
    cli_server("mock-server", "--port", str(upstream), ready_url=f"{up_url}/v1/models")
    args = ["--upstream", f"{up_url}/v1", "--port", str(proxy), "--db", str(db)]
    server = cli_server("proxy", *args, ready_url=f"{proxy_url}/v1/models")
    statuses = asyncio.run(_fire(proxy_url))
    server.terminate()  # a clean stop assembles the last trajectories
    server.wait(timeout=60)
    assert statuses == [200] * CALLS
    store = Store(db)
    docs = [orjson.loads(d) for (d,) in store.db.execute("SELECT doc FROM proxy_calls")]
    seen = sorted(int(d["request"]["messages"][0]["content"].split("-")[1]) for d in docs)
    assert seen == list(range(CALLS))
    for session in range(SESSIONS):
        calls = store.get(trajectory_id(f"load-{session}")).llm_calls
        assert [c.extra["seq"] for c in calls] == list(range(CALLS // SESSIONS))
        assert all(c.completion_token_ids and c.logprobs for c in calls)
