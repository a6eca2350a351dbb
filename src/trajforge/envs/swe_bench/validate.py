"""Validating instances: FAIL_TO_PASS tests fail at the base commit, and every FAIL_TO_PASS
and PASS_TO_PASS test passes with the gold patch, in this machine's rebuilt environment.

An instance that does not validate is listed with its reason (the build failed, a patch
does not apply, the tests time out, which tests pass at the base or fail with the gold
patch) and is excluded by name wherever verdicts are compared. Results are kept in the
cache (`validation/<instance>-<environment>.json`), so a later run reuses them.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from trajforge.envs.swe.sandbox import SandboxConfig
from trajforge.envs.swe_bench import repos
from trajforge.envs.swe_bench.backends import run_jobs
from trajforge.envs.swe_bench.build import BuildError, build_env, spec_for
from trajforge.envs.swe_bench.instances import Instance
from trajforge.envs.swe_bench.judge import JUDGE_SANDBOX, JudgeReport, judge_patch

SHOWN = 3


class Validation(BaseModel):
    """Whether one instance validates here, and why not."""

    instance_id: str
    repo: str
    validated: bool
    reason: str | None = None
    env_key: str | None = None
    build_s: float | None = Field(default=None, description="Cold build time (None: cached).")
    base_s: float | None = None
    gold_s: float | None = None


def _names(tests: list[str]) -> str:
    shown = ", ".join(tests[:SHOWN])
    return shown + (f" and {len(tests) - SHOWN} more" if len(tests) > SHOWN else "")


def reason_for(base: JudgeReport, gold: JudgeReport) -> str | None:
    """Why an instance does not validate, or None when it does."""
    if base.status in ("test_patch_failed", "timeout"):
        return f"at the base commit: {base.detail[:300]}"
    if gold.status != "resolved" and gold.status != "unresolved":
        return f"with the gold patch: {gold.detail[:300]}"
    problems = []
    if base.FAIL_TO_PASS.success:
        problems.append(f"FAIL_TO_PASS passing at the base: {_names(base.FAIL_TO_PASS.success)}")
    failing = gold.FAIL_TO_PASS.failure + gold.PASS_TO_PASS.failure
    if failing:
        problems.append(f"failing with the gold patch: {_names(failing)}")
    return "; ".join(problems) or None


JUDGE_RECIPE = 2
"""Bump when the judge or the sandbox it runs in changes: cached validations are redone
(2: the sandbox's private /dev/shm)."""


def _result_path(cache: Path, instance: Instance, key: str) -> Path:
    return cache / "validation" / f"{instance.instance_id}-{key}-j{JUDGE_RECIPE}.json"


def cached_validation(instance: Instance, cache: Path) -> Validation | None:
    path = _result_path(cache, instance, spec_for(instance).key())
    return Validation.model_validate_json(path.read_text()) if path.is_file() else None


def validate_instance(
    instance: Instance,
    cache: Path,
    data: str | Path | None = None,
    config: SandboxConfig = JUDGE_SANDBOX,
) -> Validation:
    """Build (if needed), judge the base and the gold patch; the result is cached."""
    key = spec_for(instance).key()
    cached = cached_validation(instance, cache)
    if cached is not None:
        return cached
    started = time.monotonic()
    try:
        built, made = build_env(instance, cache, data)
    except BuildError as exc:  # recorded, not cached: the next run tries the build again
        return Validation(
            instance_id=instance.instance_id, repo=instance.repo, validated=False,
            reason=f"build failed: {exc}", env_key=key,
        )  # fmt: skip
    build_s = round(time.monotonic() - started, 1) if made else None
    mirror = repos.mirror(instance, cache, data)
    base = judge_patch(instance, built, mirror, "", config)
    gold = judge_patch(instance, built, mirror, instance.patch, config)
    reason = reason_for(base, gold)
    result = Validation(
        instance_id=instance.instance_id, repo=instance.repo, validated=reason is None,
        reason=reason, env_key=key, build_s=build_s, base_s=base.seconds, gold_s=gold.seconds,
    )  # fmt: skip
    path = _result_path(cache, instance, key)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(result.model_dump(), indent=1))
    return result


def validate_all(
    instances: Sequence[Instance],
    cache: Path,
    data: str | Path | None = None,
    progress: Callable[[Validation], None] | None = None,
    backend: str = "local",
    concurrency: int = 1,
) -> list[Validation]:
    """Validate each instance on `backend` (`progress` sees each result as it finishes);
    the results in the order of `instances`."""
    job = functools.partial(validate_instance, cache=cache, data=data)
    results: dict[int, Validation] = {}
    for index, result in run_jobs(backend, job, instances, concurrency):
        results[index] = result
        if progress is not None:
            progress(result)
    return [results[index] for index in range(len(instances))]


def by_repository(results: list[Validation]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for result in results:
        row = table.setdefault(result.repo, {"instances": 0, "validated": 0})
        row["instances"] += 1
        row["validated"] += result.validated
    return table
