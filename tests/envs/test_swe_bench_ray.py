"""Builds and judgements of real SWE-bench instances as Ray tasks give what the local backend
gives, and the cache's build lock holds across Ray workers: psf/requests 5414 and 6028 share
one environment; built at once by two tasks into a fresh cache (from PyPI), one builds it
and the other waits and reuses it. About a minute and a half, most of it the build."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trajforge.envs.swe.sandbox import available_backends
from trajforge.envs.swe_bench import get_instance
from trajforge.envs.swe_bench.backends import run_jobs
from trajforge.envs.swe_bench.build import build_all, pyenv_python
from trajforge.envs.swe_bench.cache import cache_dir
from trajforge.envs.swe_bench.judge import JudgeJob, JudgeReport, judge_all
from trajforge.envs.swe_bench.validate import validate_all
from trajforge.errors import UserError
from trajforge.processes import ray_session

ray = pytest.importorskip("ray")

INSTANCES = ["psf__requests-5414", "psf__requests-6028"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),  # a cold build from PyPI and a Ray start; a guard, not a goal
    pytest.mark.skipif("bwrap" not in available_backends(), reason="needs bubblewrap"),
]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray_session(2)  # a local Ray whose workers run at this process's priority
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pyenv_python("3.9")  # a clear error when the Python is missing
    folder = cache_dir(tmp_path_factory.mktemp("swe-bench-ray-cache"))
    built = list(build_all([get_instance(i) for i in INSTANCES], folder, None, "ray", 2))
    assert sorted(b.instance_id for b in built) == INSTANCES
    builders = [b for b in built if b.built_here]
    assert len(builders) == 1, built  # the other task waited on the lock, then reused it
    assert len({b.key for b in built}) == 1 and len({b.process for b in built}) == 2
    assert os.getpid() not in {b.process for b in built}  # both ran in Ray workers
    return folder


def test_two_ray_tasks_build_one_environment_once(cache: Path) -> None:
    envs = cache / "envs"
    assert len([p for p in envs.iterdir() if not p.name.startswith(".")]) == 1
    assert not list(envs.glob(".tmp-*"))  # nothing half-built is left
    again = list(build_all([get_instance(INSTANCES[0])], cache, None, "ray"))
    assert [b.built_here for b in again] == [False]


def _verdict(report: JudgeReport) -> dict:
    return report.model_dump(exclude={"seconds", "detail"})


def test_judging_on_ray_gives_the_local_verdicts(cache: Path) -> None:
    first, second = (get_instance(i) for i in INSTANCES)
    broken = first.patch.replace("requests/", "requests/gone/")
    jobs = [
        JudgeJob(instance=first, patch=first.patch),
        JudgeJob(instance=first, patch=""),
        JudgeJob(instance=second, patch=second.patch),
        JudgeJob(instance=second, patch=broken),
    ]
    on_ray = dict(judge_all(jobs, cache, None, "ray", 2))
    local = dict(judge_all(jobs, cache, None, "local"))
    assert [_verdict(on_ray[i]) for i in range(4)] == [_verdict(local[i]) for i in range(4)]
    statuses = [local[i].status for i in range(4)]
    assert statuses == ["resolved", "unresolved", "resolved", "patch_failed"]
    assert local[1].FAIL_TO_PASS.failure and not local[0].FAIL_TO_PASS.failure


def test_validation_on_ray_equals_the_local_one(cache: Path) -> None:
    instances = [get_instance(i) for i in INSTANCES]
    seen: list[str] = []
    on_ray = validate_all(instances, cache, None, lambda v: seen.append(v.instance_id), "ray", 2)
    assert sorted(seen) == INSTANCES and [v.instance_id for v in on_ray] == INSTANCES
    for stored in (cache / "validation").iterdir():
        stored.unlink()  # validations are cached: judge again locally
    local = validate_all(instances, cache, None)
    timings = {"base_s", "gold_s", "build_s"}
    assert [v.model_dump(exclude=timings) for v in on_ray] == [
        v.model_dump(exclude=timings) for v in local
    ]
    assert all(v.validated for v in local)


def test_cli_judge_and_build_on_ray(cache: Path) -> None:
    from typer.testing import CliRunner

    from trajforge.cli.main import app

    runner = CliRunner()
    args = ["--cache", str(cache), "--backend", "ray", "--json"]
    judged = runner.invoke(app, ["swe", "judge", INSTANCES[1], *args])
    assert judged.exit_code == 0, judged.output
    assert json.loads(judged.stdout)["status"] == "resolved"
    built = runner.invoke(app, ["swe", "build", "--instance", INSTANCES[0], *args])
    assert built.exit_code == 0, built.output
    assert [r["built_here"] for r in json.loads(built.stdout)] == [False]
    assert "found" in built.stderr
    refused = runner.invoke(app, ["swe", "judge", "psf__requests-0", *args])
    assert refused.exit_code == 1 and refused.output.startswith("error: no SWE-bench instance")


def test_a_user_error_in_a_ray_task_reaches_the_caller_as_itself() -> None:
    with pytest.raises(UserError, match="no SWE-bench instance 'psf__requests-0'"):
        list(run_jobs("ray", get_instance, ["psf__requests-0"]))
