"""Rollouts for the RL loop: a served student behind the recording proxy, many episodes at once.

The harness is the project's ordinary one, unchanged: `run_episode` with the `llm` policy,
whose only RL-specific setting is its base URL (the proxy's per-session URL, so each episode
is one recorded session). Concurrent episodes reach `trajforge serve`'s batching through the
proxy; after an episode its outcome is posted to the proxy (`/s/{session}/outcome`), and the
recorded session, with the server's token ids and logprobs, becomes RL samples by the same
`rl_samples` that `trajforge export --format rl` writes.

    episodes (threads) ──HTTP──► proxy (records) ──HTTP──► serve (own process, batched,
                                                               hot-reloaded)

The episodes run as threads of this process (`backend="local"`) or as Ray tasks
(`backend="ray"`: each task runs `RAY_TASK_EPISODES` episodes in threads of a Ray worker, so
the rollout side can leave the trainer's process and machine; the proxy must then be reachable
from the workers). Given a seed, each episode's requests carry a seed of its own, and `serve`
samples each request from its seed and prompt: the same jobs and seed give the same episodes
on either backend, whatever batches the requests land in.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from trajforge.agents.llm import LLMPolicy
from trajforge.envs.household import HouseholdEnv
from trajforge.errors import UserError
from trajforge.export.rl import rl_samples
from trajforge.models.openai_compat import (
    OpenAICompatibleModel,
    OpenAIModelConfig,
    thread_http_client,
)
from trajforge.processes import ray_session, usable_cores
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.config import MonitorStopConfig
from trajforge.proxy.session import trajectory_id
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Task, Trajectory
from trajforge.serve.app import ServeConfig
from trajforge.serve.prefix_cache import DEFAULT_MB
from trajforge.serve.process import ServeProcess
from trajforge.serve.reload import RELOAD_PATH, new_reload_token, reload_headers
from trajforge.store import Store
from trajforge.train.rl.early_stop import stopped


@dataclass
class Episode:
    """One rollout: the harness's trajectory, the proxy's record of it, its RL samples."""

    session: str
    group: str
    run: Trajectory
    recorded: Trajectory | None
    samples: list[dict] = field(default_factory=list)

    @property
    def judged(self) -> bool:
        """False when the server failed the episode (a model error): it has no outcome. An
        episode the proxy's failure monitor stopped ends the same way in the harness, but it
        is judged: a failure (`train/rl/early_stop.py`)."""
        return self.run.outcome.status != "model_error" or stopped(self.recorded)

    @property
    def reward(self) -> float:
        outcome = self.run.outcome
        if outcome.reward is not None:
            return float(outcome.reward)
        return 1.0 if outcome.success else 0.0


@dataclass
class RolloutStats:
    episodes: int
    seconds: float
    model_tokens: int
    drift_cuts: int
    unrecorded: int
    model_errors: int = 0

    def as_row(self) -> dict[str, float]:
        wall = max(self.seconds, 1e-9)
        return {
            "episodes": self.episodes,
            "rollout_s": round(self.seconds, 3),
            "episodes_per_s": round(self.episodes / wall, 3),
            "tokens_per_s": round(self.model_tokens / wall, 1),
            "drift_points_dropped": self.drift_cuts,
            "unrecorded_episodes": self.unrecorded,
            "model_error_episodes": self.model_errors,
        }


Backend = Literal["local", "ray"]
Job = tuple[str, str, Task]
"""(session, group, task) of one episode."""
RAY_TASK_EPISODES = 8
"""Episodes one Ray task runs at once, in threads (their model calls wait on the server)."""


class Rollout(BaseModel):
    """One episode to run: its model endpoint (the proxy session's URL), task and limits."""

    model: OpenAIModelConfig = Field(description="The llm policy's endpoint and sampling.")
    task: Task = Field(description="The household task.")
    limits: Limits = Field(description="Episode limits.")
    outcome_url: str = Field(description="Where the episode's outcome is posted.")
    strategies: list[str] = Field(
        default_factory=list, description="Strategies at the end of the system prompt."
    )


def roll_out(rollout: Rollout) -> Trajectory:
    """Run one episode of the `llm` policy and post its outcome to the proxy."""
    guidance = {rollout.task.id: rollout.strategies} if rollout.strategies else None
    policy = LLMPolicy(OpenAICompatibleModel(rollout.model), guidance)
    run = run_episode(HouseholdEnv(), policy, rollout.task, limits=rollout.limits)
    if run.outcome.status != "model_error":  # a run the server failed is not judged
        outcome = {"success": bool(run.outcome.success), "reward": run.outcome.reward}
        # the model calls' pool: `httpx.post` made a client, and loaded the certificate
        # store, for every outcome (tens of ms an episode)
        posted = thread_http_client().post(rollout.outcome_url, json=outcome, timeout=60)
        posted.raise_for_status()
    return run


def _ray_rollouts(payloads: list[bytes]) -> list[bytes]:
    """A Ray task: its rollouts (JSON) run in threads; their trajectories as JSON."""
    rollouts = [Rollout.model_validate_json(payload) for payload in payloads]
    with ThreadPoolExecutor(max(1, len(rollouts))) as pool:
        return [run.model_dump_json().encode() for run in pool.map(roll_out, rollouts)]


def episode_seed(seed: int, index: int) -> int:
    """The seed of the `index`-th job's requests under a run seed."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{index}".encode()).digest()[:6], "big")


class RolloutService:
    """`trajforge serve` for a checkpoint, in a process of its own (`ServeProcess`: the
    decoding then never waits for the episodes' interpreter lock), and `trajforge proxy` in
    front of it, on loopback. The server's log is kept beside the store (`*.serve.log`);
    `serve_threads` are its torch threads (default: half the usable cores, the other half
    left to the episodes and the proxy)."""

    def __init__(
        self, checkpoint: Path, db: Path, max_batch: int = 64,
        prefix_cache_mb: float = DEFAULT_MB, backend: Backend = "local",
        serve_threads: int | None = None,
    ) -> None:  # fmt: skip
        self.backend = backend
        config = ServeConfig(max_batch=max_batch, max_wait_ms=5.0, prefix_cache_mb=prefix_cache_mb)
        self._reload_token = new_reload_token()
        threads = serve_threads or max(1, usable_cores() // 2)
        log = db.with_name(f"{db.stem}.serve.log")
        self.server = ServeProcess(checkpoint, config, log, threads, self._reload_token)
        self.db = db
        self.proxy: ProxyServer | None = None

    def __enter__(self) -> RolloutService:
        self.server.start()
        try:
            self._start_proxy(None)
        except BaseException:
            self.server.stop()
            raise
        return self

    def _start_proxy(self, monitor: MonitorStopConfig | None) -> None:
        config = ProxyConfig(upstream=f"{self.server.url}/v1", monitor=monitor)
        self.proxy = ProxyServer(config, self.db)
        self.proxy.__enter__()

    def use_monitor(self, model: Path, loss: float) -> None:
        """Restart the proxy with the failure monitor as a stop (same store, new sessions)."""
        assert self.proxy is not None
        self.proxy.__exit__(None, None, None)
        self._start_proxy(MonitorStopConfig(model=model, loss=loss))

    def __exit__(self, *exc: object) -> None:
        if self.proxy is not None:
            self.proxy.__exit__(*exc)
        self.server.stop()

    @property
    def codec(self) -> str:
        """The served student's codec fingerprint (`codec_identity`)."""
        return str(self.server.stats()["codec"])

    def reload(self, checkpoint: Path) -> None:
        """Swap the served weights for `checkpoint`'s, over HTTP."""
        reply = httpx.post(
            f"{self.server.url}{RELOAD_PATH}",
            json={"checkpoint": str(checkpoint)},
            headers=reload_headers(self._reload_token),
            timeout=120,
        )
        if reply.status_code != 200:
            raise UserError(f"reloading {checkpoint} failed: {reply.text}")

    def run(
        self, jobs: Sequence[Job], limits: Limits, model: OpenAIModelConfig, concurrency: int,
        on_episode: Callable[[Trajectory], None] | None = None, seed: int | None = None,
        strategies: Mapping[str, list[str]] | None = None,
    ) -> tuple[list[Episode], RolloutStats]:  # fmt: skip
        """Run each (session, group, task) once; returns episodes in job order.
        `on_episode` is called with each run as it ends (from worker threads, or as its Ray
        task returns). With a `seed`, the `index`-th job's requests carry
        `episode_seed(seed, index)`; `strategies` maps a task id to the strategies its
        episodes' system prompts end with."""
        started = time.perf_counter()
        rollouts = [
            self._rollout(job, index, limits, model, seed, strategies or {})
            for index, job in enumerate(jobs)
        ]
        if self.backend == "ray":
            runs = _on_ray(rollouts, concurrency, on_episode)
        else:
            runs = _in_threads(rollouts, concurrency, on_episode)
        seconds = time.perf_counter() - started
        assert self.proxy is not None
        self.proxy.flush()
        episodes = self._collect(jobs, runs)
        return episodes, _stats(episodes, seconds)

    def _rollout(
        self, job: Job, index: int, limits: Limits, model: OpenAIModelConfig, seed: int | None,
        strategies: Mapping[str, list[str]],
    ) -> Rollout:  # fmt: skip
        session, _, task = job
        assert self.proxy is not None
        update: dict[str, object] = {"base_url": self.proxy.session_url(session)}
        if seed is not None:
            update["seed"] = episode_seed(seed, index)
        outcome_url = f"{self.proxy.url}/s/{session}/outcome"
        return Rollout(
            model=model.model_copy(update=update), task=task, limits=limits,
            outcome_url=outcome_url, strategies=list(strategies.get(task.id, [])),
        )  # fmt: skip

    def _collect(self, jobs, runs: list[Trajectory]) -> list[Episode]:
        episodes = []
        with Store(self.db) as store:
            for (session, group, _), run in zip(jobs, runs, strict=True):
                try:
                    recorded = store.get(trajectory_id(session))
                except UserError:
                    recorded = None
                episode = Episode(session, group, run, recorded)
                if recorded is not None and episode.judged:  # a model error has no signal
                    episode.samples = list(rl_samples(recorded))
                episodes.append(episode)
        return episodes


def _in_threads(
    rollouts: list[Rollout], concurrency: int, on_episode: Callable[[Trajectory], None] | None
) -> list[Trajectory]:
    def episode(rollout: Rollout) -> Trajectory:
        run = roll_out(rollout)
        if on_episode is not None:
            on_episode(run)
        return run

    pool = ThreadPoolExecutor(max(1, min(concurrency, len(rollouts))))
    futures = [pool.submit(episode, rollout) for rollout in rollouts]
    try:
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()  # a failure is raised now, not after the episodes before it
        runs = [future.result() for future in futures]
    except BaseException:  # Ctrl-C or a failed episode: the iteration stops now, not after
        pool.shutdown(wait=False, cancel_futures=True)  # the episodes already running
        raise
    pool.shutdown()
    return runs


def _on_ray(
    rollouts: list[Rollout], concurrency: int, on_episode: Callable[[Trajectory], None] | None
) -> list[Trajectory]:
    """The rollouts run in Ray tasks of `RAY_TASK_EPISODES`, `concurrency` at once; their
    trajectories in the rollouts' order."""
    size = RAY_TASK_EPISODES
    chunks = [rollouts[i : i + size] for i in range(0, len(rollouts), size)]
    in_flight = max(1, concurrency // size)
    ray = ray_session(in_flight)
    remote = ray.remote(num_cpus=0)(_ray_rollouts)
    waiting = list(enumerate(chunks))[::-1]
    running: dict[Any, int] = {}
    done: dict[int, list[Trajectory]] = {}
    while waiting or running:
        while waiting and len(running) < in_flight:
            index, chunk = waiting.pop()
            running[remote.remote([r.model_dump_json().encode() for r in chunk])] = index
        ready, _ = ray.wait(list(running), num_returns=1)
        index = running.pop(ready[0])
        done[index] = [Trajectory.model_validate_json(doc) for doc in ray.get(ready[0])]
        if on_episode is not None:
            for run in done[index]:
                on_episode(run)
    return [run for index in range(len(chunks)) for run in done[index]]


def _stats(episodes: list[Episode], seconds: float) -> RolloutStats:
    tokens = sum(sum(s["loss_mask"]) for e in episodes for s in e.samples)
    cuts = sum(max(0, len(e.samples) - 1) for e in episodes)
    errors = sum(1 for e in episodes if not e.judged)
    missing = sum(1 for e in episodes if not e.samples) - errors
    return RolloutStats(len(episodes), seconds, tokens, cuts, missing, errors)
