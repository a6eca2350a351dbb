"""Added latency and throughput of the recording proxy, against direct calls and LiteLLM.

    python bench/proxy_overhead.py [--requests 1200] [--sessions 1,16,64] [--no-litellm] [--json]

Starts the mock upstream (`trajforge mock-server`), the recording proxy (`trajforge proxy`,
writing to a temporary store) and LiteLLM's proxy (from a scratch venv this script creates
on first use under ~/.cache/trajforge-bench, never in the project's venv), all as separate
processes on 127.0.0.1. For 1, 16 and 64 concurrent sessions (each a sequential chain of
chat completions) it measures latency p50/p99 and throughput directly against the mock and
through each proxy, and prints the added latency and each server's CPU time per call. The
goals: at most 1 ms added at p50, and less overhead than LiteLLM's proxy. Cases: plain and
streamed answers to a short prompt, plain answers to a realistic 30 KB prompt, and one long
session (`--long-calls`, history growing by about 1 KB a call) whose added latency over its
first and last 100 calls shows whether recording stays flat. The client is aiohttp (httpx's
own overhead saturates at 16-64 sessions). In-process capture is measured separately
(`inprocess_overhead.py`): an httpx client in this process calling the mock directly, under
capture, and through the proxy. Two more targets run beside the proxy: `tf-no-wait`, the
proxy with `--answer-before-commit` (a call is answered once handed to the writer, and the
session's next answer waits for its commit), `relay`, the floor: the same server stack
forwarding bytes and nothing else (`relay_floor.py`), and `tcp`, the floor under it: bytes
copied between two connections, no HTTP (`relay_floor.py --tcp`). `--json` prints the summary
alone on stdout (the tables go to stderr): `added_p50_ms` keyed by mode (`plain`, `stream`,
`plain_30KB`, `inprocess`) and by session count, the same for `tf-no-wait`
(`no_wait_added_p50_ms`), the relay (`relay_added_p50_ms`) and `tcp` (`tcp_added_p50_ms`),
and `goals` (`goals_no_wait`): each goal at 1 session with its value, limit and `met` (the
30 KB limit is 1 ms + `parse_30KB_ms`, orjson's parse of that body here; the long session
runs direct, proxied and relayed calls in lockstep, and its goal is `last_over_first` <= 1.5,
the median of its last 100 calls' added latency over that of its first 100, each call paired
with the direct call of its step; `long_session_case` says why). `--cases` picks cases (default all:
plain,stream,30KB,inprocess,long). All traffic is loopback; every loop is bounded.

Tried and not kept (2 cores, interleaved rounds of 300 calls at 1 session, added p50): the
store writer in a process of its own (spawned, calls pickled through a pipe, a thread
resolving their futures) was slower, +0.92 -> +1.14 ms with `--answer-before-commit` and
+1.45 -> +1.89 ms without, since the client, the mock, the proxy and the writer then share
two cores and every call crosses one more pipe; answering before building the call's record
(Starlette's background task) +1.13 -> +1.09 ms, within the spread; the interpreter's switch
interval at 0.2 ms or 50 ms instead of 5 ms, no better. With no recording at all the proxy
added +0.87 ms against the relay's +0.52 in the same rounds.

Where the 30 KB case's cost came from (2 cores; calls to each target in lockstep, paired
medians). Until 7638606 the mock hashed all 11,000 pieces of that prompt on every call, about
10 ms of CPU; the direct call took 10-12 ms, and after it the proxy added 2.1-2.6 ms and even
the relay 0.9-1.1. Both ran with cold caches: the recorder's part of a call took 0.09 ms in a
loop of its own and 0.69 ms in the proxy. With the mock keeping the ids it has hashed (direct
call 2.4-3.6 ms), the relay adds 0.6-0.8 ms and the proxy 1.6-2.2 in lockstep; in this
script's rounds, on a noisy machine, the proxy added 1.33, 2.54 and 3.25 ms in three runs. The
`tcp` target adds 0.07-0.2 ms at 30 KB and 0.09-0.16 ms for the short prompt, so most of
the relay's cost is the server and client stack, not the extra hop. With the slow mock,
aiohttp's client alone took 0.14 ms (short) and 0.56 ms (30 KB) longer than writing the
request's bytes to a socket and reading the answer's; with the fast mock, 0.10 and 0.14 ms
(paired, one process), and a session without cookies or compression 0.01-0.03 ms less: a
leaner client would take off at most that.

Where the proxy's own cost goes at 30 KB (timers around each stage of 1,000 calls of one
session, means): waiting for the call's commit 0.68 ms, of which the writer's work is 0.46 ms
(0.15 ms, median, replaying the same calls in a loop of its own: the rest is caches and the
other processes sharing two cores) and the hand-over between threads most of the other 0.2
(a round trip takes 0.05-0.075 ms in a loop of its own); reading the answer 0.13 ms, building
the record 0.06, reading the request 0.05. Tried and not kept (lockstep, paired): the writer's
work on the event loop instead of its thread (0.03-0.05 ms less, within the spread), a lone
call committed without its savepoint (0.005-0.01 ms less in the loop above), and uvicorn
without its proxy-headers middleware (about 0.03 ms less).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import orjson

from inprocess_overhead import inprocess_case, print_inprocess

CACHE = Path(os.environ.get("TRAJFORGE_BENCH_CACHE") or Path.home() / ".cache" / "trajforge-bench")
LITELLM_VENV = CACHE / "litellm-venv"
BENCH_KEY = f"sk-bench-{secrets.token_hex(16)}"  # LiteLLM's master key; sent to every target
Target = tuple[str, int]  # base URL, and the pid of the server process answering there


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server for {url} exited with {process.returncode}")
        try:
            httpx.get(url, timeout=2.0, headers={"Authorization": f"Bearer {BENCH_KEY}"})
            return
        except httpx.TransportError:
            time.sleep(0.25)
    raise SystemExit(f"server at {url} did not come up in {timeout_s:g}s")


def start(command: list[str], ready_url: str, log: Path) -> subprocess.Popen:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until_up(ready_url, process)
    except SystemExit:
        sys.stderr.write(log.read_text(errors="replace")[-3000:])
        raise
    return process


def litellm_executable() -> Path:
    """`litellm` from a scratch venv, installed with `litellm[proxy]` on first use."""
    executable = LITELLM_VENV / "bin" / "litellm"
    if executable.exists():
        return executable
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"installing litellm[proxy] into {LITELLM_VENV} (first run only)...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
    pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "litellm[proxy]"], check=True)
    return executable


def start_litellm(upstream: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: mock\n"
        "    litellm_params:\n"
        "      model: openai/trajforge-mock\n"
        f"      api_base: {upstream}\n"
        "      api_key: sk-bench\n"
        "general_settings:\n"
        f"  master_key: {BENCH_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    quiet = workdir / "litellm-logging.json"  # no access log, like the trajforge proxy
    quiet.write_text(
        '{"version": 1, "disable_existing_loggers": false,'
        ' "loggers": {"uvicorn.access": {"level": "WARNING"}}}'
    )
    command = [str(litellm_executable()), "--config", str(config), "--port", str(port)]
    command += ["--host", "127.0.0.1", "--num_workers", "1", "--log_config", str(quiet)]
    process = start(command, f"http://127.0.0.1:{port}/health/liveliness", workdir / "litellm.log")
    return process, f"http://127.0.0.1:{port}"


PROMPTS = {
    "short": [{"role": "user", "content": "hello there"}],
    "30KB": [
        {"role": "system", "content": "You are a careful software engineer. " * 120},
        {"role": "user", "content": ("Traceback line from a failing test run. " * 640)[:26000]},
    ],
}


def request_body(prompt: str, stream: bool) -> dict:
    return {"model": "mock", "messages": PROMPTS[prompt], "stream": stream}


async def _post(client: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> None:
    """One call; a streamed answer is read to its end."""
    async with client.post(f"{url}/chat/completions", json=body, headers=headers) as answer:
        answer.raise_for_status()
        await answer.read()


async def _chain(
    client: aiohttp.ClientSession, url: str, session: str, calls: int, body: dict
) -> tuple[list[float], int]:
    """Latencies of the calls that succeeded, and how many failed (counted, not fatal)."""
    headers = {"Authorization": f"Bearer {BENCH_KEY}", "X-Trajforge-Session": session}
    latencies, failed = [], 0
    for _ in range(calls):
        started = time.perf_counter()
        try:
            await _post(client, url, body, headers)
        except aiohttp.ClientError:
            failed += 1
            continue
        latencies.append(time.perf_counter() - started)
    return latencies, failed


async def load(
    base_url: str, sessions: int, requests: int, tag: str, body: dict
) -> tuple[list[float], float, int]:
    """`sessions` concurrent chains sharing `requests` calls: latencies, wall time, failures."""
    connector = aiohttp.TCPConnector(limit=sessions)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
        warm = (_chain(client, base_url, f"warm-{i}", 2, body) for i in range(sessions))
        await asyncio.gather(*warm)
        per_session = max(1, requests // sessions)
        started = time.perf_counter()
        chains = [
            _chain(client, base_url, f"{tag}-{i}", per_session, body) for i in range(sessions)
        ]
        finished = await asyncio.gather(*chains)
        latencies = [x for chain, _ in finished for x in chain]
        failed = sum(count for _, count in finished)
        return latencies, time.perf_counter() - started, failed


async def long_session(targets: dict[str, str], calls: int, tag: str) -> dict[str, list[float]]:
    """One session per target whose history grows by an answer and a 1 KB observation per
    call, run in lockstep (call n goes to every target, in turn, before call n + 1), so a
    busy moment of the machine hits all targets at the same point of their sessions."""
    messages = {name: [{"role": "user", "content": "fix the failing test"}] for name in targets}
    latencies: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as client:
        for n in range(calls):
            for name in names[n % len(names) :] + names[: n % len(names)]:
                headers = {"Authorization": f"Bearer {BENCH_KEY}"}
                headers["X-Trajforge-Session"] = f"{tag}-{name}"
                body = {"model": "mock", "messages": messages[name]}
                started = time.perf_counter()
                async with client.post(
                    f"{targets[name]}/chat/completions", json=body, headers=headers
                ) as answer:
                    answer.raise_for_status()
                    reply = (await answer.json())["choices"][0]["message"]
                latencies[name].append(time.perf_counter() - started)
                observation = f"output of step {n}: " + "x" * 1000
                messages[name] = [*messages[name], reply, {"role": "user", "content": observation}]
            if (n + 1) % 100 == 0:
                print(f"long session: {n + 1}/{calls} calls", file=sys.stderr, flush=True)
    return latencies


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    targets: dict[str, Target], sessions: int, requests: int, rounds: int, body: dict
) -> dict:
    """Targets measured in alternating rounds, so a busy moment of the machine hits them all.

    Besides latency, the CPU time the target's own server process spends per call: unlike
    latency it hardly moves when other work shares the machine.
    """
    latencies: dict[str, list[float]] = {name: [] for name in targets}
    walls: dict[str, float] = dict.fromkeys(targets, 0.0)
    cpus: dict[str, float] = dict.fromkeys(targets, 0.0)
    failures: dict[str, int] = dict.fromkeys(targets, 0)
    for round_index in range(rounds):
        for name, (url, pid) in targets.items():
            tag = f"bench-{sessions}-{round_index}"
            cpu_before = cpu_seconds(pid)
            measured, wall, failed = asyncio.run(load(url, sessions, requests // rounds, tag, body))
            failures[name] += failed
            cpus[name] += cpu_seconds(pid) - cpu_before
            latencies[name] += measured
            walls[name] += wall
    results = {}
    for name, values in latencies.items():
        values.sort()
        results[name] = {
            "p50_ms": 1000 * statistics.median(values),
            "p99_ms": 1000 * statistics.quantiles(values, n=100, method="inclusive")[-1],
            "rps": len(values) / walls[name],
            "cpu_ms": 1000 * cpus[name] / len(values),
            "failed": failures[name],
        }
    return results


def report(results: dict[str, dict[int, dict]], sessions: list[int], title: str) -> None:
    print(f"\n== {title}")
    print(
        f"{'target':<12}{'sessions':>9}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}"
        f"{'+p50 ms':>10}{'+p99 ms':>10}{'cpu ms/call':>13}{'failed':>8}"
    )
    for target, by_sessions in results.items():
        for count in sessions:
            row, base = by_sessions[count], results["direct"][count]
            print(
                f"{target:<12}{count:>9}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
                f"{row['rps']:>9.0f}{row['p50_ms'] - base['p50_ms']:>10.2f}"
                f"{row['p99_ms'] - base['p99_ms']:>10.2f}{row['cpu_ms']:>13.2f}{row['failed']:>8}"
            )


def added(results: dict[str, dict[int, dict]], target: str, key: str) -> dict[str, float]:
    """Milliseconds `target` adds to the direct call, by session count."""
    return {
        str(count): round(row[key] - results["direct"][count][key], 3)
        for count, row in results[target].items()
    }


def long_session_case(targets: dict[str, Target], calls: int) -> dict:
    """Direct, proxied and relayed long sessions in lockstep; the added latency over the
    first and the last 100 calls, their ratio, and proxy CPU per call. Added latency is the
    median of each call's difference from the direct call of the same step (`paired`): late
    in the session a direct call takes about 35 ms, and the difference of two such medians
    moved by more than the proxy's whole cost from run to run (1.4-3.6 ms over seven runs,
    paired 1.3-2.6 over ten). The ratio still spreads, since its first window moves too
    (1.1-1.8 ms paired): it was within 1.5 in 7 of 10 runs either way. The difference of the
    medians is kept beside it (`*_unpaired`), and the relay's paired figures show what the
    hop itself adds as the body grows to about 1 MB."""
    names = ("direct", "trajforge", "relay")
    urls = {name: url for name, (url, _) in targets.items() if name in names}
    pid = targets["trajforge"][1]
    before = cpu_seconds(pid)
    latencies = asyncio.run(long_session(urls, calls, "long"))
    cpu = cpu_seconds(pid) - before
    window = min(100, calls // 2)
    first, last = slice(0, window), slice(-window, None)

    def paired(name: str, part: slice) -> float:
        steps = zip(latencies[name][part], latencies["direct"][part], strict=True)
        return 1000 * statistics.median(own - direct for own, direct in steps)

    def unpaired(name: str, part: slice) -> float:
        return 1000 * (
            statistics.median(latencies[name][part]) - statistics.median(latencies["direct"][part])
        )

    def ratio(later: float, earlier: float) -> float | None:
        return round(later / earlier, 2) if earlier > 0 else None

    added_first, added_last = paired("trajforge", first), paired("trajforge", last)
    apart_first, apart_last = unpaired("trajforge", first), unpaired("trajforge", last)
    summary = {
        "calls": calls,
        "direct_p50_ms_first": round(1000 * statistics.median(latencies["direct"][first]), 3),
        "direct_p50_ms_last": round(1000 * statistics.median(latencies["direct"][last]), 3),
        "added_p50_ms_first": round(added_first, 3),
        "added_p50_ms_last": round(added_last, 3),
        "last_over_first": ratio(added_last, added_first),
        "added_p50_ms_first_unpaired": round(apart_first, 3),
        "added_p50_ms_last_unpaired": round(apart_last, 3),
        "last_over_first_unpaired": ratio(apart_last, apart_first),
        "proxy_cpu_ms_per_call": round(1000 * cpu / calls, 3),
    }
    relay_first, relay_last = paired("relay", first), paired("relay", last)
    summary["relay_added_p50_ms_first"] = round(relay_first, 3)
    summary["relay_added_p50_ms_last"] = round(relay_last, 3)
    summary["relay_last_over_first"] = ratio(relay_last, relay_first)
    return summary


def parse_ms(body: dict, repeat: int = 200) -> float:
    """Milliseconds orjson takes to parse `body` as a client sends it (the median of runs)."""
    raw = json.dumps(body).encode()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        orjson.loads(raw)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def goals(summary: dict, added_key: str = "added_p50_ms") -> dict:
    """The proxy's goals at one session, for the cases measured, each with its value and
    whether it is met: added p50 <= 1 ms plain and streamed, <= 1 ms + one parse of the body
    with the 30 KB prompt, and the long session's last calls within 1.5x its first (that
    one for the default proxy only). `added_key` picks the proxy: `added_p50_ms` (answers
    after the commit) or `no_wait_added_p50_ms` (`--answer-before-commit`)."""
    added = summary[added_key]
    checks = {
        "plain": (added.get("plain", {}).get("1"), 1.0),
        "stream": (added.get("stream", {}).get("1"), 1.0),
        "plain_30KB": (added.get("plain_30KB", {}).get("1"), 1.0 + summary["parse_30KB_ms"]),
    }
    if "long_session" in summary and added_key == "added_p50_ms":
        checks["long_last_over_first"] = (summary["long_session"]["last_over_first"], 1.5)
    return {
        name: {
            "value": value,
            "limit": round(limit, 3),
            "met": value is not None and value <= limit,
        }
        for name, (value, limit) in checks.items()
        if name in added or name == "long_last_over_first"
    }


CASES = {"plain": ("short", False), "stream": ("short", True), "30KB": ("30KB", False)}
ALL_CASES = "plain,stream,30KB,inprocess,long"


def run_cases(targets: dict[str, Target], sessions: list[int], args) -> dict:
    summary: dict = {
        "added_p50_ms": {},
        "added_p99_ms": {},
        "relay_added_p50_ms": {},
        "tcp_added_p50_ms": {},
        "no_wait_added_p50_ms": {},
        "p99_over_p50": {},
    }
    chosen = args.cases.split(",")
    for case, (prompt, stream) in CASES.items():
        if case not in chosen:
            continue
        body = request_body(prompt, stream)
        results: dict[str, dict[int, dict]] = {name: {} for name in targets}
        for count in sessions:
            for name, row in measure(targets, count, args.requests, args.rounds, body).items():
                results[name][count] = row
        report(results, sessions, f"{case} ({prompt} prompt, stream={stream})")
        key = case if case in ("plain", "stream") else "plain_30KB"
        summary["added_p50_ms"][key] = added(results, "trajforge", "p50_ms")
        summary["added_p99_ms"][key] = added(results, "trajforge", "p99_ms")
        summary["relay_added_p50_ms"][key] = added(results, "relay", "p50_ms")
        summary["tcp_added_p50_ms"][key] = added(results, "tcp", "p50_ms")
        summary["no_wait_added_p50_ms"][key] = added(results, "tf-no-wait", "p50_ms")
        summary["p99_over_p50"][key] = {
            str(c): round(r["p99_ms"] / r["p50_ms"], 2) for c, r in results["trajforge"].items()
        }
        if "litellm" in results:
            summary.setdefault("litellm_added_p50_ms", {})[key] = added(
                results, "litellm", "p50_ms"
            )
    if "inprocess" in chosen:
        body = request_body("short", False)
        result = inprocess_case(targets, sessions, args.requests, args.rounds, body, cpu_seconds)
        print_inprocess(result)
        summary["inprocess"] = result
        summary["added_p50_ms"]["inprocess"] = {
            count: added["inprocess"] for count, added in result["added_p50_ms"].items()
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1200, help="Calls per measurement.")
    parser.add_argument("--sessions", default="1,16,64", help="Concurrent session counts.")
    parser.add_argument("--rounds", type=int, default=3, help="Alternating rounds per target.")
    parser.add_argument("--long-calls", type=int, default=1000, help="Calls of the long session.")
    parser.add_argument("--no-litellm", action="store_true", help="Skip LiteLLM's proxy.")
    parser.add_argument("--json", action="store_true", help="Print the summary as JSON.")
    parser.add_argument("--cases", default=ALL_CASES, help="Cases to run, comma-separated.")
    args = parser.parse_args()
    sessions = [int(s) for s in args.sessions.split(",")]
    tables = sys.stderr if args.json else sys.stdout  # with --json, stdout is the JSON alone
    with contextlib.redirect_stdout(tables), tempfile.TemporaryDirectory(prefix="proxy-") as tmp:
        processes: list[subprocess.Popen] = []
        try:
            targets = start_targets(Path(tmp), processes, args.no_litellm)
            summary = run_cases(targets, sessions, args)
            if "long" in args.cases.split(","):
                summary["long_session"] = long_session_case(targets, args.long_calls)
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)
        if "long_session" in summary:
            print(f"\nlong session: {summary['long_session']}")
        summary["parse_30KB_ms"] = round(parse_ms(request_body("30KB", False)), 4)
        summary["goals"] = goals(summary)
        summary["goals_no_wait"] = goals(summary, "no_wait_added_p50_ms")
        print(f"\ngoals at 1 session: {summary['goals']}")
        print(f"goals at 1 session, --answer-before-commit: {summary['goals_no_wait']}")
    if args.json:
        print(json.dumps(summary, indent=1))


def start_targets(workdir: Path, processes: list, no_litellm: bool) -> dict[str, Target]:
    """The mock upstream; in front of it the recording proxy (answering after the commit and
    before it), the bare relay and LiteLLM's proxy."""

    def served(name: str, command: list[str]) -> Target:
        port = free_port()
        url = f"http://127.0.0.1:{port}/v1"
        server = start([*command, "--port", str(port)], f"{url}/models", workdir / f"{name}.log")
        processes.append(server)
        return url, server.pid

    trajforge = [sys.executable, "-m", "trajforge"]
    mock = served("mock", [*trajforge, "mock-server"])
    proxy = [*trajforge, "proxy", "--upstream", mock[0]]
    relay = [sys.executable, str(Path(__file__).with_name("relay_floor.py"))]
    targets = {
        "direct": mock,
        "tcp": served("tcp", [*relay, "--upstream", mock[0], "--tcp"]),
        "relay": served("relay", [*relay, "--upstream", mock[0]]),
        "trajforge": served("proxy", [*proxy, "--db", str(workdir / "bench.db")]),
        "tf-no-wait": served(
            "no-wait", [*proxy, "--db", str(workdir / "no-wait.db"), "--answer-before-commit"]
        ),
    }
    if not no_litellm:
        litellm, litellm_url = start_litellm(mock[0], workdir)
        processes.append(litellm)
        targets["litellm"] = (litellm_url, litellm.pid)
    return targets


if __name__ == "__main__":
    main()
