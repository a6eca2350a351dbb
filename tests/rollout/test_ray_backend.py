"""The Ray backend gives the same trajectories as the local one (one local Ray session, the
one `ray_session` starts, whose workers run at the driver's priority)."""

from __future__ import annotations

import pytest

from trajforge.envs.household import HouseholdEnv
from trajforge.envs.swe import SweEnv
from trajforge.processes import ray_session
from trajforge.rollout.backends.local import run_local
from trajforge.rollout.backends.ray import chunked, run_ray
from trajforge.rollout.factory import PolicyOptions
from trajforge.rollout.runner import RolloutConfig, run_batch
from trajforge.schema import Trajectory

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def local_ray(monkeypatch_module: pytest.MonkeyPatch):
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch_module.delenv("RAY_worker_niceness", raising=False)
    ray_session(2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_workers_run_at_the_drivers_priority() -> None:
    """Ray's default is nice 15: beside any busy process its tasks would wait (a SWE-bench
    rft ran 3-4 times slower than locally beside a niced training job)."""
    import os

    @ray.remote
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == os.nice(0)


def _comparable(trajs: list[Trajectory]) -> list[dict]:
    rows = []
    for traj in sorted(trajs, key=lambda t: t.metadata["episode_key"]):
        data = traj.model_dump(exclude={"id"})
        data["usage"].pop("wall_time_s")
        rows.append(data)
    return rows


def _both(config: RolloutConfig, tmp_path, name: str) -> tuple[list, list]:
    from trajforge.store import Store

    with Store(tmp_path / f"{name}-local.db") as a, Store(tmp_path / f"{name}-ray.db") as b:
        local_summary, local = run_batch(config, a, run_local)
        ray_summary, remote = run_batch(config, b, run_ray, concurrency=2)
        assert local_summary.model_dump(exclude={"wall_s"}) == ray_summary.model_dump(
            exclude={"wall_s"}
        )
        assert b.count() == len(remote)
    return _comparable(local), _comparable(remote)


def test_ray_equals_local_on_household_with_faults(tmp_path) -> None:
    config = RolloutConfig(
        env="household",
        tasks=HouseholdEnv().tasks(6),
        policy="noisy-expert",
        n=2,
        faults=["transient:0.2", "silent:0.2"],
        options=PolicyOptions(error_rate=0.3),
        seed=5,
    )
    local, remote = _both(config, tmp_path, "household")
    assert local == remote and len(local) == 12


def test_ray_equals_local_on_swe(tmp_path) -> None:
    config = RolloutConfig(env="swe", tasks=SweEnv().tasks(2), policy="expert")
    local, remote = _both(config, tmp_path, "swe")
    assert local == remote and all(row["outcome"]["success"] for row in local)


def test_chunks_cover_every_episode_once() -> None:
    specs = RolloutConfig(env="household", tasks=HouseholdEnv().tasks(7), n=3).specs()
    chunks = chunked(specs, 2)
    assert [s for chunk in chunks for s in chunk] == specs and len(chunks) == 7
