"""Episodes as backends return them: encoded where they ran, stored without re-validation."""

from __future__ import annotations

import pickle

from trajforge.envs.household import HouseholdEnv
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.factory import PolicyOptions
from trajforge.rollout.runner import (
    FinishedEpisode,
    Progress,
    RolloutConfig,
    run_and_encode,
    run_batch,
    run_episode_spec,
    run_episodes,
)
from trajforge.store import Store


def _config() -> RolloutConfig:
    return RolloutConfig(
        env="household",
        tasks=HouseholdEnv().tasks(3),
        policy="noisy-expert",
        options=PolicyOptions(error_rate=0.3),
        faults=["transient:0.3", "silent:0.2"],
        seed=3,
    )


def test_finished_episode_carries_the_trajectory_and_its_summary() -> None:
    spec = _config().specs()[1]
    traj = run_episode_spec(spec)
    episode = pickle.loads(pickle.dumps(run_and_encode(spec)))  # as a Ray worker returns it
    decoded = episode.trajectory()
    assert episode.encoded.id == decoded.id == decoded.model_copy(update={"id": ""}).content_id()
    assert decoded.model_dump(exclude={"id", "usage"}) == traj.model_dump(exclude={"id", "usage"})
    assert episode.episode_key == spec.key()
    assert episode.success == traj.outcome.success
    assert episode.termination_reason == traj.outcome.termination_reason
    assert episode.tokens == (traj.usage.total_tokens or 0)
    assert list(episode.fault_kinds) == [f.kind for f in traj.faults] and episode.fault_kinds


def test_stored_episodes_equal_the_validated_path(tmp_path) -> None:
    config = _config()
    with Store(tmp_path / "encoded.db") as fast, Store(tmp_path / "validated.db") as slow:
        summary, episodes = run_episodes(config, fast, run_local, concurrency=2)
        for episode in episodes:
            slow.add(episode.trajectory())
        for row_fast, row_slow in zip(fast.rows(), slow.rows(), strict=True):
            assert row_fast == row_slow
            assert fast.get(row_fast.id) == slow.get(row_slow.id)
        again, trajs = run_batch(config, fast, run_local)
    assert again.skipped == summary.episodes == len(trajs) == 3
    assert again.model_dump(exclude={"wall_s", "ran", "skipped"}) == summary.model_dump(
        exclude={"wall_s", "ran", "skipped"}
    )
    assert summary.faults_injected == sum(len(t.faults) for t in trajs)


class Recording(Progress):
    def __init__(self) -> None:
        self.seen: list[tuple[bool | None, int]] = []

    def done(self, episode: FinishedEpisode) -> None:
        self.seen.append((episode.success, episode.tokens))


def test_progress_sees_each_finished_episode(store: Store) -> None:
    progress = Recording()
    summary, _ = run_episodes(_config(), store, run_local, progress=progress)
    assert len(progress.seen) == summary.ran == 3
    assert sum(1 for success, _ in progress.seen if success) == summary.successes
