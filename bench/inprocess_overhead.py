"""In-process capture against the recording proxy and a direct call (used by proxy_overhead).

The harness here is an httpx client in this process (the openai SDK and LiteLLM send through
httpx or httpx2, which in-process capture covers alike). Three arms, alternated by round:
`direct` (the client calls the mock upstream), `inprocess` (the same client under
`capture_in_process`, recording into a temporary store) and `proxy` (the same client through
the running recording proxy). Added latency is each arm's p50 minus the direct p50; CPU per
call is this process's CPU (the harness, and for `inprocess` the recorder thread too) plus,
for `proxy`, the proxy server's.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from trajforge.proxy import capture_in_process

Target = tuple[str, int]


async def _chain(client: httpx.AsyncClient, url: str, session: str, calls: int, body: dict):
    latencies = []
    headers = {"X-Trajforge-Session": session}
    for _ in range(calls):
        started = time.perf_counter()
        answer = await client.post(f"{url}/chat/completions", json=body, headers=headers)
        answer.raise_for_status()
        latencies.append(time.perf_counter() - started)
    return latencies


async def _load(url: str, sessions: int, requests: int, body: dict) -> list[float]:
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(_chain(client, url, f"warm-{i}", 2, body) for i in range(sessions)))
        per_session = max(1, requests // sessions)
        chains = [_chain(client, url, f"s{i}", per_session, body) for i in range(sessions)]
        return [x for chain in await asyncio.gather(*chains) for x in chain]


def _arm(name: str, url: str, sessions: int, requests: int, body: dict, store: Path):
    """(latencies, this process's CPU seconds) of one arm's round."""
    cpu = time.process_time()
    if name == "inprocess":
        with capture_in_process(store, session="bench"):
            latencies = asyncio.run(_load(url, sessions, requests, body))
    else:
        latencies = asyncio.run(_load(url, sessions, requests, body))
    return latencies, time.process_time() - cpu


def inprocess_case(
    targets: dict[str, Target],
    sessions: list[int],
    requests: int,
    rounds: int,
    body: dict,
    cpu_seconds,
) -> dict:
    """Added p50 latency and CPU per call of in-process capture and of the proxy, by session
    count, against direct calls from the same httpx client."""
    (direct_url, _), (proxy_url, proxy_pid) = targets["direct"], targets["trajforge"]
    urls = {"direct": direct_url, "inprocess": direct_url, "proxy": proxy_url}
    out: dict = {"added_p50_ms": {}, "cpu_ms_per_call": {}}
    with tempfile.TemporaryDirectory(prefix="inprocess-bench-") as tmp:
        for count in sessions:
            latencies: dict[str, list[float]] = {arm: [] for arm in urls}
            cpu = dict.fromkeys(urls, 0.0)
            for round_index in range(rounds):
                for arm, url in urls.items():
                    proxy_before = cpu_seconds(proxy_pid)
                    store = Path(tmp) / f"capture-{count}-{round_index}.db"
                    measured, own = _arm(arm, url, count, requests // rounds, body, store)
                    latencies[arm] += measured
                    cpu[arm] += own + (
                        cpu_seconds(proxy_pid) - proxy_before if arm == "proxy" else 0
                    )
            p50 = {arm: 1000 * statistics.median(values) for arm, values in latencies.items()}
            key = str(count)
            out["added_p50_ms"][key] = {
                arm: round(p50[arm] - p50["direct"], 3) for arm in ("inprocess", "proxy")
            }
            out["cpu_ms_per_call"][key] = {
                arm: round(1000 * cpu[arm] / len(latencies[arm]), 3) for arm in urls
            }
            out.setdefault("direct_p50_ms", {})[key] = round(p50["direct"], 3)
    return out


def print_inprocess(result: dict) -> None:
    print("\n== in-process capture vs proxy (httpx client, short prompt, plain)")
    print(
        f"{'sessions':>9}{'direct p50':>12}{'+inproc':>10}{'+proxy':>10}{'cpu ms/call d/i/p':>22}"
    )
    for count, added in result["added_p50_ms"].items():
        cpu = result["cpu_ms_per_call"][count]
        cpus = f"{cpu['direct']:.2f}/{cpu['inprocess']:.2f}/{cpu['proxy']:.2f}"
        print(
            f"{count:>9}{result['direct_p50_ms'][count]:>12.2f}{added['inprocess']:>10.2f}"
            f"{added['proxy']:>10.2f}{cpus:>22}"
        )
