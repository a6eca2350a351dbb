"""Added latency and throughput of the recording proxy, against direct calls and LiteLLM.

    python bench/proxy_overhead.py [--requests 1200] [--sessions 1,16,64] [--no-litellm]

Starts the mock upstream (`trajforge mock-server`), the recording proxy (`trajforge proxy`,
writing to a temporary store) and LiteLLM's proxy (from a scratch venv this script creates
on first use under ~/.cache/trajforge-bench, never in the project's venv), all as separate
processes on 127.0.0.1. For 1, 16 and 64 concurrent sessions (each a sequential chain of
chat completions) it measures latency p50/p99 and throughput directly against the mock and
through each proxy, and prints the added latency and each server's CPU time per call. The
goals: at most 1 ms added at p50, and less overhead than LiteLLM's proxy. All traffic is
loopback; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

CACHE = Path(os.environ.get("TRAJFORGE_BENCH_CACHE") or Path.home() / ".cache" / "trajforge-bench")
LITELLM_VENV = CACHE / "litellm-venv"
REQUEST = {"model": "mock", "messages": [{"role": "user", "content": "hello there"}]}
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


async def _chain(
    client: httpx.AsyncClient, url: str, session: str, calls: int
) -> tuple[list[float], int]:
    """Latencies of the calls that succeeded, and how many failed (counted, not fatal)."""
    headers = {"Authorization": f"Bearer {BENCH_KEY}", "X-Trajforge-Session": session}
    latencies, failed = [], 0
    for _ in range(calls):
        started = time.perf_counter()
        try:
            answer = await client.post(f"{url}/chat/completions", json=REQUEST, headers=headers)
            answer.raise_for_status()
        except httpx.HTTPError:
            failed += 1
            continue
        latencies.append(time.perf_counter() - started)
    return latencies, failed


async def load(
    base_url: str, sessions: int, requests: int, tag: str
) -> tuple[list[float], float, int]:
    """`sessions` concurrent chains sharing `requests` calls: latencies, wall time, failures."""
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(_chain(client, base_url, f"warm-{i}", 2) for i in range(sessions)))
        per_session = max(1, requests // sessions)
        started = time.perf_counter()
        chains = [_chain(client, base_url, f"{tag}-{i}", per_session) for i in range(sessions)]
        finished = await asyncio.gather(*chains)
        latencies = [x for chain, _ in finished for x in chain]
        failed = sum(count for _, count in finished)
        return latencies, time.perf_counter() - started, failed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(targets: dict[str, Target], sessions: int, requests: int, rounds: int) -> dict:
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
            measured, wall, failed = asyncio.run(load(url, sessions, requests // rounds, tag))
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


def report(results: dict[str, dict[int, dict]], sessions: list[int]) -> None:
    print(
        f"\n{'target':<12}{'sessions':>9}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}"
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
    if "litellm" in results:
        for count in sessions:
            ours = results["trajforge"][count]["p50_ms"] - results["direct"][count]["p50_ms"]
            theirs = results["litellm"][count]["p50_ms"] - results["direct"][count]["p50_ms"]
            ratio = theirs / ours if ours > 0 else float("inf")
            print(
                f"{count:>3} sessions: added p50 trajforge {ours:.2f} ms, LiteLLM {theirs:.2f} ms"
                f" (LiteLLM adds {ratio:.1f}x as much)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1200, help="Calls per measurement.")
    parser.add_argument("--sessions", default="1,16,64", help="Concurrent session counts.")
    parser.add_argument("--rounds", type=int, default=3, help="Alternating rounds per target.")
    parser.add_argument("--no-litellm", action="store_true", help="Skip LiteLLM's proxy.")
    args = parser.parse_args()
    sessions = [int(s) for s in args.sessions.split(",")]
    trajforge = [sys.executable, "-m", "trajforge"]
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp:
        workdir = Path(tmp)
        try:
            mock_port, proxy_port = free_port(), free_port()
            mock = f"http://127.0.0.1:{mock_port}/v1"
            mock_server = start(
                [*trajforge, "mock-server", "--port", str(mock_port)],
                f"{mock}/models",
                workdir / "mock.log",
            )
            processes.append(mock_server)
            proxy_args = ["proxy", "--upstream", mock, "--port", str(proxy_port)]
            proxy_args += ["--db", str(workdir / "bench.db")]
            proxy = f"http://127.0.0.1:{proxy_port}/v1"
            proxy_server = start([*trajforge, *proxy_args], f"{proxy}/models", workdir / "p.log")
            processes.append(proxy_server)
            targets = {"direct": (mock, mock_server.pid), "trajforge": (proxy, proxy_server.pid)}
            if not args.no_litellm:
                litellm, litellm_url = start_litellm(mock, workdir)
                processes.append(litellm)
                targets["litellm"] = (litellm_url, litellm.pid)
            results: dict[str, dict[int, dict]] = {name: {} for name in targets}
            for count in sessions:
                for name, row in measure(targets, count, args.requests, args.rounds).items():
                    results[name][count] = row
                print(f"measured {count} sessions", flush=True)
            report(results, sessions)
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
