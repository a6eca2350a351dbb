"""The batch runner: environment × tasks × policy × samples × faults, into the store.

Each episode is described by an `EpisodeSpec` (plain data) and identified by its episode
key: a hash of environment, task, policy and options, seed, sample index and fault spec,
kept in `Trajectory.metadata["episode_key"]`. Before running, the runner looks the keys up in
the store and skips finished episodes, so re-running a command resumes it. An episode that
crashed (termination reason `error`) is run again and its record replaced.

`run_episode_spec` is the whole life of one episode; backends (`local`, `ray`) only decide
where it runs. They return each episode as a `FinishedEpisode`: the trajectory serialized
where it ran (`store.encode`) plus the few fields the summary and the progress bar need, so
the process that stores it does not parse and validate the document again. Episodes are
seeded from (batch seed, task id, sample index), so the result does not depend on the
backend or on the order in which episodes finish.
"""

from __future__ import annotations

import hashlib
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

import orjson
from pydantic import BaseModel, Field

from trajforge.envs.base import Environment
from trajforge.envs.faults import parse_fault_spec, with_faults
from trajforge.models.retry import ModelCallFailed, model_failure
from trajforge.rollout.episode import Limits, run_episode, start_trajectory
from trajforge.rollout.factory import (
    AgentSpec,
    PolicyOptions,
    build,
    choose_user,
    make_env,
    needs_user,
    open_conversation,
)
from trajforge.schema import MODEL_ERROR, Outcome, Source, Task, Trajectory
from trajforge.store import EncodedTrajectory, Store, encode

HARNESS = "trajforge"
RUN_AGAIN = ("error", MODEL_ERROR)
"""Termination reasons of stored episodes that a re-run runs again (crashes, failed model
calls) instead of skipping."""


class EpisodeSpec(BaseModel):
    """Everything needed to run one episode anywhere."""

    env: str = Field(description="Environment name (or module:Class).")
    task: Task = Field(description="The task.")
    policy: str = Field(description="Policy name (or module:Class).")
    options: PolicyOptions = Field(default_factory=PolicyOptions, description="Policy options.")
    sample: int = Field(default=0, description="Sample index of this task (0..n-1).")
    seed: int = Field(default=0, description="Batch seed.")
    faults: str = Field(default="", description="Canonical fault spec ('' for none).")
    limits: Limits = Field(default_factory=Limits, description="Step, token and time limits.")
    run: str | None = Field(default=None, description="Run name recorded in Source.run.")

    def key(self) -> str:
        """The episode key: equal keys are the same episode."""
        options = self.options.model_dump(mode="json", exclude={"api_key", "strategies"})
        data = [self.env, self.task.id, self.policy, options, self.seed, self.sample, self.faults]
        if guidance := self.options.strategies.get(self.task.id):
            data.append(guidance)
        return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]

    def episode_seed(self) -> int:
        """The seed of this episode's policy and fault injector."""
        text = f"{self.seed}/{self.task.id}/{self.sample}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:6], "big")


class RolloutConfig(BaseModel):
    """A batch: which episodes to run and how."""

    env: str = Field(description="Environment name.")
    tasks: list[Task] = Field(description="The tasks.")
    policy: str = Field(default="expert", description="Policy name.")
    options: PolicyOptions = Field(default_factory=PolicyOptions, description="Policy options.")
    n: int = Field(default=1, ge=1, description="Samples per task.")
    faults: list[str] = Field(default_factory=list, description="Fault specs (joined).")
    seed: int = Field(default=0, description="Batch seed.")
    limits: Limits = Field(default_factory=Limits, description="Episode limits.")
    run: str | None = Field(default=None, description="Run name.")

    def specs(self) -> list[EpisodeSpec]:
        faults = parse_fault_spec(self.faults).spec()
        return [
            EpisodeSpec(
                env=self.env,
                task=task,
                policy=self.policy,
                options=self.options,
                sample=sample,
                seed=self.seed,
                faults=faults,
                limits=self.limits,
                run=self.run,
            )
            for task in self.tasks
            for sample in range(self.n)
        ]


def run_episode_spec(spec: EpisodeSpec) -> Trajectory:
    """Run one episode; never raises for a crash of the policy or environment."""
    started = time.time()
    seed = spec.episode_seed()
    source = Source(harness=HARNESS, model=spec.policy, run=spec.run)
    env = None
    try:
        env = with_faults(make_env(spec.env), parse_fault_spec(spec.faults or None), seed)
        policy, asked_user = build(AgentSpec(policy=spec.policy, options=spec.options), seed)
        traj = start_trajectory(env, spec.task, source)
        env.bind_conversation(traj.messages)
        user = choose_user(asked_user, traj.messages)
        if user is not None and needs_user(traj.messages):
            first = open_conversation(user, spec.task)
            traj.messages.extend([first] if first else [])
        traj.source.model = policy.name
        traj = run_episode(env, policy, spec.task, user=user, trajectory=traj, limits=spec.limits)
    except Exception as exc:  # a failed setup still leaves a trajectory saying why
        traj = _setup_failure(spec, source, exc, time.time() - started)
    finally:
        _close(env)
    _stamp(traj, spec, seed)
    return traj.with_id()


class FinishedEpisode(NamedTuple):
    """A finished episode as backends return it: the encoded trajectory and its summary."""

    encoded: EncodedTrajectory
    """Row values and JSON document, ready for `Store.add_encoded`."""
    episode_key: str
    """The episode key (`EpisodeSpec.key()`)."""
    success: bool | None
    """Outcome success."""
    termination_reason: str | None
    """Why the episode ended."""
    tokens: int
    """Model tokens used."""
    fault_kinds: tuple[str, ...]
    """Kind of each injected fault, in order."""
    model_failure: str | None = None
    """Why the model could not be reached, when a model error ended the episode."""

    @classmethod
    def of(cls, traj: Trajectory) -> FinishedEpisode:
        """Serialize `traj` once (setting its content id) and keep its summary."""
        return cls(
            encoded=encode(traj),
            episode_key=traj.metadata["episode_key"],
            success=traj.outcome.success,
            termination_reason=traj.outcome.termination_reason,
            tokens=traj.usage.total_tokens or 0,
            fault_kinds=tuple(f.kind for f in traj.faults),
            model_failure=model_failure(traj),
        )

    def trajectory(self) -> Trajectory:
        """The trajectory (validating the document)."""
        return self.encoded.decode()


def run_and_encode(spec: EpisodeSpec) -> FinishedEpisode:
    """`run_episode_spec`, serialized where it ran."""
    return FinishedEpisode.of(run_episode_spec(spec))


def _setup_failure(spec: EpisodeSpec, source: Source, exc: Exception, wall: float) -> Trajectory:
    traj = Trajectory(task=spec.task, source=source)
    if isinstance(exc, ModelCallFailed):  # the user model's opening: not judged
        traj.metadata["model_failure"] = exc.failure
        traj.outcome = Outcome(judged_by="error", termination_reason=MODEL_ERROR)
        traj.usage.wall_time_s = round(wall, 4)
        return traj
    traj.metadata["error"] = "".join(traceback.format_exception_only(exc)).strip()
    traj.metadata["traceback"] = traceback.format_exc(limit=8)
    traj.outcome = Outcome(success=False, reward=0.0, judged_by="error", termination_reason="error")
    traj.usage.wall_time_s = round(wall, 4)
    return traj


def _close(env: Environment | None) -> None:
    if env is not None:
        env.close()


def _stamp(traj: Trajectory, spec: EpisodeSpec, seed: int) -> None:
    traj.task.environment = traj.task.environment or spec.env
    traj.metadata.update(
        episode_key=spec.key(),
        env=spec.env,
        policy=spec.policy,
        sample=spec.sample,
        seed=spec.seed,
        episode_seed=seed,
        faults=spec.faults,
    )


class BatchSummary(BaseModel):
    """What a batch did."""

    episodes: int = Field(description="Episodes in the batch (run now or earlier).")
    ran: int = Field(description="Episodes run by this call.")
    skipped: int = Field(description="Finished episodes found in the store and skipped.")
    successes: int = Field(description="Successful episodes.")
    success_rate: float = Field(
        description="successes / episodes judged (model errors are not judged)."
    )
    errors: int = Field(description="Episodes that ended with an error.")
    model_failures: int = Field(
        default=0,
        description="Episodes ended by an agent or user model call that failed every retry "
        "(status model_error: not judged, not failures; the reason in metadata.model_failure).",
    )
    faults_injected: int = Field(description="Fault events over all episodes.")
    faults_by_kind: dict[str, int] = Field(description="Fault events per kind.")
    tokens: int = Field(description="Model tokens over all episodes.")
    termination: dict[str, int] = Field(description="Episodes per termination reason.")
    wall_s: float = Field(description="Seconds this call took.")


def summarize(
    episodes: Iterable[FinishedEpisode], ran: int, skipped: int, wall: float
) -> BatchSummary:
    episodes = list(episodes)
    kinds = Counter(kind for e in episodes for kind in e.fault_kinds)
    successes = sum(1 for e in episodes if e.success)
    model_failures = sum(1 for e in episodes if e.model_failure is not None)
    judged = len(episodes) - model_failures
    return BatchSummary(
        episodes=len(episodes),
        ran=ran,
        skipped=skipped,
        successes=successes,
        success_rate=round(successes / judged, 4) if judged else 0.0,
        errors=sum(1 for e in episodes if e.termination_reason == "error"),
        model_failures=model_failures,
        faults_injected=sum(kinds.values()),
        faults_by_kind=dict(sorted(kinds.items())),
        tokens=sum(e.tokens for e in episodes),
        termination=dict(Counter(e.termination_reason or "?" for e in episodes)),
        wall_s=round(wall, 3),
    )


def stored_episodes(store: Store, env: str) -> dict[str, tuple[str, str | None]]:
    """Episode key → (trajectory id, termination reason) of this environment's rollouts."""
    return store.episodes(HARNESS, env)


class Progress:
    """Receives the runner's events; the CLI shows them as progress lines."""

    def start(self, total: int, skipped: int) -> None: ...

    def running(self, count: int) -> None: ...

    def done(self, episode: FinishedEpisode) -> None: ...


Backend = Callable[[list[EpisodeSpec], int, Progress], Iterable[FinishedEpisode]]


def run_batch(
    config: RolloutConfig,
    store: Store,
    backend: Backend,
    concurrency: int = 1,
    progress: Progress | None = None,
) -> tuple[BatchSummary, list[Trajectory]]:
    """`run_episodes`, with the batch's trajectories decoded (earlier ones first)."""
    summary, episodes = run_episodes(config, store, backend, concurrency, progress)
    return summary, [e.trajectory() for e in episodes]


def run_episodes(
    config: RolloutConfig,
    store: Store,
    backend: Backend,
    concurrency: int = 1,
    progress: Progress | None = None,
) -> tuple[BatchSummary, list[FinishedEpisode]]:
    """Run the unfinished episodes of `config` on `backend`; store each as it finishes.

    Returns the summary and the batch's episodes, those found in the store first.
    """
    started = time.time()
    progress = progress or Progress()
    specs = config.specs()
    stored = stored_episodes(store, config.env)
    finished = {k: v for k, v in stored.items() if v[1] not in RUN_AGAIN}
    todo = [s for s in specs if s.key() not in finished]
    progress.start(len(specs), len(specs) - len(todo))
    fresh: list[FinishedEpisode] = []
    for episode in backend(todo, concurrency, progress):
        _save(store, episode, stored.get(episode.episode_key))
        fresh.append(episode)
        progress.done(episode)
    earlier = [
        FinishedEpisode.of(store.get(finished[s.key()][0])) for s in specs if s.key() in finished
    ]
    episodes = earlier + fresh
    summary = summarize(episodes, ran=len(fresh), skipped=len(earlier), wall=time.time() - started)
    return summary, episodes


def _save(store: Store, episode: FinishedEpisode, old: tuple[str, str | None] | None) -> None:
    with store.transaction():
        if old is not None and old[0] != episode.encoded.id:
            store.delete(old[0])
        store.add_encoded(episode.encoded)
