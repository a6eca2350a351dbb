"""SWE-bench instances: the records of `instances.jsonl` and where the data lives.

The data folder holds `instances.jsonl` (one SWE-bench instance per line, with what the
harness uses to build and test it) and `repos/<owner>__<name>.bundle` (git bundles whose
tags `base-<sha>` are the base commits). It is `$TRAJFORGE_SWE_BENCH_DATA`, else
`../shared/data/swe-bench-verified` from the current folder.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import orjson
from pydantic import BaseModel, Field, ValidationError

from trajforge.errors import InputError, UserError

DATA_ENV = "TRAJFORGE_SWE_BENCH_DATA"
DEFAULT_DATA = Path("..", "shared", "data", "swe-bench-verified")


def data_dir(explicit: str | Path | None = None) -> Path:
    """The SWE-bench data folder: `explicit`, `$TRAJFORGE_SWE_BENCH_DATA`, else the default."""
    folder = Path(explicit or os.environ.get(DATA_ENV) or DEFAULT_DATA).resolve()
    if not (folder / "instances.jsonl").is_file():
        raise UserError(
            f"no SWE-bench data at {folder} (needs instances.jsonl and repos/*.bundle): "
            f"set {DATA_ENV} or pass the folder"
        )
    return folder


class Instance(BaseModel):
    """One SWE-bench instance, as far as building, running and judging it needs."""

    instance_id: str
    repo: str = Field(description="owner/name on GitHub.")
    version: str = Field(description="The harness's version of the repository.")
    base_commit: str
    problem_statement: str = ""
    patch: str = Field(description="The gold patch (code only).")
    test_patch: str = Field(description="The patch adding the instance's tests.")
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]
    python: str = Field(description="Python X.Y of the environment.")
    pip: list[str] = Field(default_factory=list, description="Pinned pip packages.")
    pip_from_conda: list[str] = Field(
        default_factory=list, description="The conda environment's Python packages, as pins."
    )
    conda_base: dict[str, str] = Field(
        default_factory=dict, description="Versions of pip, setuptools, wheel in the env."
    )
    pre_install: list[str] = Field(default_factory=list, description="Commands before install.")
    install: str = Field(default="", description="The command installing the repository.")
    test_cmd: str = Field(description="The test command; the test files are appended.")
    test_files: list[str] = Field(default_factory=list)

    @property
    def bundle_name(self) -> str:
        return self.repo.replace("/", "__") + ".bundle"


@functools.cache
def _load(path: Path) -> dict[str, Instance]:
    found: dict[str, Instance] = {}
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            instance = Instance.model_validate(orjson.loads(line))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise InputError(str(path), str(exc), record=f"line {number}") from None
        found[instance.instance_id] = instance
    return found


def load_instances(folder: str | Path | None = None) -> dict[str, Instance]:
    """Every instance of the data folder, by id."""
    return _load(data_dir(folder) / "instances.jsonl")


def get_instance(instance_id: str, folder: str | Path | None = None) -> Instance:
    """One instance by id; an unknown id is a `UserError` naming the data file."""
    instances = load_instances(folder)
    if instance_id not in instances:
        raise UserError(
            f"no SWE-bench instance '{instance_id}' in {data_dir(folder) / 'instances.jsonl'} "
            f"({len(instances)} instances of {len({i.repo for i in instances.values()})} "
            "repositories)"
        )
    return instances[instance_id]


def select_instances(
    repos: list[str] | None = None,
    ids: list[str] | None = None,
    folder: str | Path | None = None,
) -> list[Instance]:
    """The instances of the repositories (`owner/name` or `name`) and the ids given, in the
    data file's order; all of them when neither is given."""
    every = list(load_instances(folder).values())
    if not repos and not ids:
        return every
    wanted = {get_instance(i, folder).instance_id for i in ids or []}
    chosen = [
        i for i in every if i.instance_id in wanted or i.repo in (repos or [])
        or i.repo.split("/")[1] in (repos or [])
    ]  # fmt: skip
    if repos and not any(i.repo in repos or i.repo.split("/")[1] in repos for i in chosen):
        known = ", ".join(sorted({i.repo for i in every}))
        raise UserError(f"no instances of {', '.join(repos)} (repositories: {known})")
    return chosen
