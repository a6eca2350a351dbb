"""Judging a patch as the SWE-bench harness does.

In a fresh worktree of the instance: apply the patch file by file (`git apply`, else
`patch --fuzz=5`; a file whose changes the tree already holds is skipped),
put the test files back to the base commit, apply the test patch, run the instance's test
command on its test files within a time limit, parse the log per test and grade it
(`logs.grade`). Every step runs in the sandbox without network; each way of failing is a
recorded status, not an exception.
"""

from __future__ import annotations

import functools
import shlex
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from trajforge.envs.swe.sandbox import SandboxConfig
from trajforge.envs.swe_bench.backends import run_jobs
from trajforge.envs.swe_bench.build import BuiltEnv, ensure_env
from trajforge.envs.swe_bench.instances import Instance
from trajforge.envs.swe_bench.logs import TestGroup, grade, parse_log
from trajforge.envs.swe_bench.repos import mirror
from trajforge.envs.swe_bench.testbed import SETUP_SANDBOX, Testbed

JudgeStatus = Literal["resolved", "unresolved", "patch_failed", "test_patch_failed", "timeout"]
JUDGE_SANDBOX = SandboxConfig(
    timeout_s=900,
    memory_mb=8192,
    total_memory_mb=6144,
    max_processes=256,
    file_mb=1024,
    max_output=4_000_000,
    max_output_bytes=256 * 1024 * 1024,
)
LOG_KEPT = 4000


class JudgeReport(BaseModel):
    """The verdict on one patch."""

    instance_id: str
    status: JudgeStatus
    resolved: bool
    FAIL_TO_PASS: TestGroup = Field(default_factory=TestGroup)
    PASS_TO_PASS: TestGroup = Field(default_factory=TestGroup)
    seconds: float = Field(description="Wall time of the test command.")
    detail: str = Field(default="", description="Why it failed, or the log's tail.")


def test_command(instance: Instance) -> str:
    files = " ".join(shlex.quote(f) for f in instance.test_files)
    return f"{instance.test_cmd} {files}"


APPLY_EACH = """
for part in /judge/{name}-*.diff; do
  if git apply --check "$part" 2>/dev/null; then git apply --verbose "$part" || exit 1
  elif git apply --reverse --check "$part" 2>/dev/null; then echo "already in the tree: $part"
  else patch --batch --forward --fuzz=5 -p1 -i "$part" || exit 1
  fi
done
"""


def split_by_file(patch: str) -> list[str]:
    """A patch's parts, one per `diff --git` file (the whole patch when it has none)."""
    parts = ("\n" + patch).split("\ndiff --git ")
    if len(parts) == 1:
        return [patch]
    head = parts[0].strip("\n")
    return ([head + "\n"] if head else []) + [
        "diff --git " + p.rstrip("\n") + "\n" for p in parts[1:]
    ]


def _apply(testbed: Testbed, patch: str, name: str) -> str | None:
    """Apply `patch` in the worktree, file by file; None when it applied, else the tool's
    complaint. A file whose changes the tree already holds is left as it is: submissions made
    in the images hold the setup's own uncommitted changes (sphinx's tox.ini), which a fresh
    worktree has too."""
    for number, part in enumerate(split_by_file(patch)):
        (testbed.inputs / f"{name}-{number:04d}.diff").write_text(part)
    result = testbed.run(APPLY_EACH.format(name=name), SETUP_SANDBOX)
    return None if result.exit_code == 0 else result.output.strip()[-600:]


def _reset_tests(testbed: Testbed, instance: Instance) -> None:
    """The test patch's files as at the base commit (a patch may have changed them)."""
    files = " ".join(shlex.quote(f) for f in _patched_files(instance.test_patch))
    if files:
        testbed.run(
            f'for f in {files}; do git checkout -q HEAD -- "$f" 2>/dev/null; done; true',
            SETUP_SANDBOX,
        )


def _patched_files(patch: str) -> list[str]:
    return [
        line[len("diff --git a/") :].split(" b/", 1)[0]
        for line in patch.splitlines()
        if line.startswith("diff --git a/")
    ]


def judge_in(testbed: Testbed, patch: str, config: SandboxConfig = JUDGE_SANDBOX) -> JudgeReport:
    """Judge `patch` in a fresh `testbed` of its instance (the testbed is changed)."""
    instance = testbed.instance
    failed = _apply(testbed, patch, "model") if patch.strip() else None
    if failed is not None:
        return _report(instance, "patch_failed", 0.0, f"the patch does not apply: {failed}")
    _reset_tests(testbed, instance)
    failed = _apply(testbed, instance.test_patch, "test")
    if failed is not None:
        return _report(
            instance, "test_patch_failed", 0.0, f"the test patch does not apply: {failed}"
        )
    started = time.monotonic()
    result = testbed.run(test_command(instance), config)
    seconds = round(time.monotonic() - started, 2)
    if result.timed_out:
        return _report(instance, "timeout", seconds, f"tests killed after {config.timeout_s:g} s")
    graded = grade(
        instance.FAIL_TO_PASS, instance.PASS_TO_PASS, parse_log(instance.repo, result.output)
    )
    return JudgeReport(
        instance_id=instance.instance_id,
        status="resolved" if graded.resolved else "unresolved",
        resolved=graded.resolved,
        FAIL_TO_PASS=graded.FAIL_TO_PASS,
        PASS_TO_PASS=graded.PASS_TO_PASS,
        seconds=seconds,
        detail=result.output[-LOG_KEPT:],
    )


def _report(instance: Instance, status: JudgeStatus, seconds: float, detail: str) -> JudgeReport:
    return JudgeReport(
        instance_id=instance.instance_id,
        status=status,
        resolved=False,
        seconds=seconds,
        detail=detail,
    )


def judge_patch(
    instance: Instance,
    env: BuiltEnv,
    mirror: Path,
    patch: str,
    config: SandboxConfig = JUDGE_SANDBOX,
    workdir: str | None = None,
) -> JudgeReport:
    """Judge `patch` (a unified diff; empty: the base commit) in a new worktree."""
    testbed = Testbed.create(instance, env, mirror, workdir)
    try:
        return judge_in(testbed, patch, config)
    finally:
        testbed.close()


class JudgeJob(BaseModel):
    """A patch to judge on an instance (a job for `backends.run_jobs`)."""

    instance: Instance
    patch: str = Field(description="A unified diff; empty: the base commit.")


def judge_job(
    job: JudgeJob,
    cache: Path,
    data: str | Path | None = None,
    config: SandboxConfig = JUDGE_SANDBOX,
) -> JudgeReport:
    """Build or find the instance's environment, then judge the patch in a new worktree."""
    built = ensure_env(job.instance, cache, data)
    return judge_patch(job.instance, built, mirror(job.instance, cache, data), job.patch, config)


def judge_all(
    jobs: Sequence[JudgeJob],
    cache: Path,
    data: str | Path | None = None,
    backend: str = "local",
    concurrency: int = 1,
    config: SandboxConfig = JUDGE_SANDBOX,
) -> Iterator[tuple[int, JudgeReport]]:
    """Judge each job on `backend`: (index in `jobs`, report) as each finishes."""
    run = functools.partial(judge_job, cache=cache, data=data, config=config)
    return run_jobs(backend, run, jobs, concurrency)
