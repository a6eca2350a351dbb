"""Building an instance's environment once: a virtual environment with its pinned packages
and the repository installed, made outside any agent's sandbox and cached.

An environment is named by the hash of what makes it (`EnvSpec`: the repository, the exact
Python, the pinned packages, the pre-install and install commands, the recipe's version),
so instances that share them share one build. It is made in the sandbox with the network
(pip reaches PyPI) but nothing else of the host: a clone of the base commit at `/testbed`,
the new virtual environment at `/venv` (the path it will always be seen at, so its scripts
and the editable install's links hold), pip's download cache, the pyenv Python read-only.
Steps, as the SWE-bench harness's: `python -m venv` (for instances tested with `tox
--current-env`, sphinx's, a copy of the Python installation instead: tox runs the real
interpreter behind the venv's link, which would not see the venv's packages),
pip/setuptools/wheel at the versions of the harness's conda base, the `pip` pins, the
`pip_from_conda` pins (one by one when the batch fails: not all exist on PyPI; skipped ones
are recorded), `pre_install`, `install`.
What the install left in the tree is kept: what git ignores (egg-info, a generated
`_version.py`) as `extras.tar`, unpacked into every worktree of the environment; what it does
not (the `build/` of requests' in-tree `pip install .`) as `unignored.tar`, unpacked into the
agent's worktrees only. The runs' images had that `build/` (their `ls` shows it, their
`git add -A` submissions hold it) but the trees that judged them cannot have: those
submissions copy build/'s CRLF files without their CRs, which apply to no tree holding them,
and the harness resolved them.

Known departures (facts of building without Docker, see the data README): projects
versioned by setuptools_scm see no tags in a bundle and get `SETUPTOOLS_SCM_PRETEND_VERSION`;
xarray's conda list does not map to PyPI one to one (some of its packages would pull newer
numpy, pandas or dask than its `pip` pins), so it is installed from wheels only, under those
pins as constraints, and what cannot be is skipped; `apt-get` steps are not run (recorded as
skipped).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, Field

from trajforge.envs.swe.sandbox import Layout, SandboxConfig, hand_over, run_sandboxed
from trajforge.envs.swe_bench import repos
from trajforge.envs.swe_bench.backends import run_jobs
from trajforge.envs.swe_bench.cache import COMPLETE, build_once, content_key, is_complete
from trajforge.envs.swe_bench.instances import Instance
from trajforge.errors import UserError

RECIPE = 5
"""Bump when the build steps change: every environment is then built anew."""
EXTRAS = "extras.tar"
"""What the install left in the tree that git ignores: in every worktree."""
UNIGNORED_EXTRAS = "unignored.tar"
"""What the install left in the tree that git does not ignore: in the agent's worktrees."""
VENV = "/venv"
TESTBED = "/testbed"
SCM_VERSIONED = frozenset({"pytest-dev/pytest", "pydata/xarray"})
CONDA_LIST_CONSTRAINED = frozenset({"pydata/xarray"})
"""Repositories whose `pip_from_conda` pins may not move their `pip` pins."""
CONSTRAINTS = "/tmp/constraints.txt"
FORWARDED = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "SSL_CERT_FILE",
    "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "http_proxy", "https_proxy", "HTTP_PROXY",
    "HTTPS_PROXY", "no_proxy", "NO_PROXY",
)  # fmt: skip
"""Host variables a build sees: how this machine reaches PyPI (index, certificates, proxy)."""
BUILD_SANDBOX = SandboxConfig(
    timeout_s=1800, memory_mb=8192, total_memory_mb=6144, max_processes=256, file_mb=2048
)


class BuildError(UserError):
    """An environment could not be built; the message ends with the failing step's output."""


class EnvSpec(BaseModel):
    """What makes an environment (its hash names it)."""

    repo: str
    python: str = Field(description="Exact Python version (the pyenv one used).")
    base_packages: list[str] = Field(description="pip, setuptools, wheel pins.")
    packages: list[str] = Field(description="The instance's `pip` pins.")
    optional_packages: list[str] = Field(description="`pip_from_conda` pins (best effort).")
    constrained: bool = Field(
        default=False,
        description="The optional pins from wheels only, never moving a base or `pip` pin.",
    )
    pre_install: list[str]
    install: str
    scm_version: str | None = None
    interpreter: Literal["venv", "copy"] = Field(
        default="venv",
        description="`/venv` a virtual environment, or a copy of the Python installation "
        "(for `tox --current-env`, which runs the real interpreter behind a venv's link).",
    )
    recipe: int = RECIPE

    def key(self) -> str:
        data = self.model_dump()
        if data["interpreter"] == "venv":  # at its default it does not enter the key
            del data["interpreter"]
        if not data["constrained"]:
            del data["constrained"]
        return content_key(orjson.dumps(data, option=orjson.OPT_SORT_KEYS))


def pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def pyenv_python(version: str) -> Path:
    """The installation folder of the newest pyenv Python `version` (X.Y)."""
    folder = pyenv_root() / "versions"
    found = sorted(
        (p for p in folder.glob(f"{version}.*") if p.name.removeprefix(f"{version}.").isdigit()),
        key=lambda p: int(p.name.rsplit(".", 1)[1]),
    )
    if not found:
        raise UserError(
            f"no Python {version} under {folder}: install it with `pyenv install {version}`"
        )
    return found[-1]


def spec_for(instance: Instance) -> EnvSpec:
    base = instance.conda_base
    scm = None
    if instance.repo in SCM_VERSIONED:
        scm = instance.version if instance.version.count(".") > 1 else f"{instance.version}.0"
    return EnvSpec(
        repo=instance.repo,
        python=pyenv_python(instance.python).name,
        base_packages=[
            f"{name}=={base[name]}" for name in ("pip", "setuptools", "wheel") if name in base
        ],
        packages=sorted(instance.pip),
        optional_packages=sorted(instance.pip_from_conda),
        constrained=instance.repo in CONDA_LIST_CONSTRAINED,
        pre_install=list(instance.pre_install),
        install=instance.install,
        scm_version=scm,
        interpreter="copy" if "--current-env" in instance.test_cmd else "venv",
    )


class BuiltEnv(BaseModel):
    """A complete environment in the cache."""

    key: str
    folder: Path
    spec: EnvSpec
    manifest: dict

    @property
    def venv(self) -> Path:
        return self.folder / "venv"

    @property
    def python_prefix(self) -> Path:
        return pyenv_root() / "versions" / self.spec.python


def env_folder(spec: EnvSpec, cache: Path) -> Path:
    return cache / "envs" / spec.key()


def load_built(spec: EnvSpec, cache: Path) -> BuiltEnv | None:
    folder = env_folder(spec, cache)
    if not is_complete(folder):
        return None
    manifest = json.loads((folder / COMPLETE).read_text())
    return BuiltEnv(key=spec.key(), folder=folder, spec=spec, manifest=manifest)


def ensure_env(instance: Instance, cache: Path, data: str | Path | None = None) -> BuiltEnv:
    """The instance's environment, built now if the cache does not hold it."""
    return build_env(instance, cache, data)[0]


def build_env(
    instance: Instance, cache: Path, data: str | Path | None = None
) -> tuple[BuiltEnv, bool]:
    """The instance's environment, and whether this call built it (False: it was in the
    cache, or another process built it while this one waited on the lock)."""
    spec = spec_for(instance)
    mirror = repos.mirror(instance, cache, data)
    (cache / "pip").mkdir(exist_ok=True)
    made = build_once(
        env_folder(spec, cache), lambda tmp: _build(instance, spec, mirror, cache, tmp)
    )
    built = load_built(spec, cache)
    if built is None:
        raise BuildError(
            f"{instance.instance_id}: environment {spec.key()} vanished after its build"
        )
    return built, made


class BuildResult(BaseModel):
    """One instance's environment, as a build job reports it."""

    instance_id: str
    key: str
    folder: Path
    seconds: float = Field(description="Wall time of the call (waiting on a lock included).")
    built_here: bool = Field(description="This call built it (else: found in the cache).")
    process: int = Field(description="The process that ran the job.")


def build_job(instance: Instance, cache: Path, data: str | Path | None = None) -> BuildResult:
    """Build or find one environment (a job for `backends.run_jobs`)."""
    started = time.monotonic()
    built, made = build_env(instance, cache, data)
    return BuildResult(
        instance_id=instance.instance_id,
        key=built.key,
        folder=built.folder,
        seconds=round(time.monotonic() - started, 2),
        built_here=made,
        process=os.getpid(),
    )


def build_all(
    instances: Sequence[Instance],
    cache: Path,
    data: str | Path | None = None,
    backend: str = "local",
    concurrency: int = 1,
) -> Iterator[BuildResult]:
    """Build or find the environments of `instances` on `backend`, results as they finish
    (instances sharing an environment: one builds it, the others wait and reuse it)."""
    job = functools.partial(build_job, cache=cache, data=data)
    for _, result in run_jobs(backend, job, instances, concurrency):
        yield result


def build_layout(spec: EnvSpec, cache: Path, temporary: Path, mirror: Path) -> Layout:
    prefix = pyenv_root() / "versions" / spec.python
    return Layout(
        workspace_at=TESTBED,
        host_python=False,
        read_only=[(str(prefix), str(prefix)), (str(mirror), str(mirror))],
        writable=[(str(temporary / "venv"), VENV), (str(cache / "pip"), "/pip-cache")],
        network=True,
        env=build_environment(spec),
    )


def build_environment(spec: EnvSpec) -> dict[str, str]:
    env = {
        "PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
        "VIRTUAL_ENV": VENV,
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PIP_CACHE_DIR": "/pip-cache",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_PROGRESS_BAR": "off",
    }
    env |= {name: os.environ[name] for name in FORWARDED if name in os.environ}
    if spec.scm_version:
        env["SETUPTOOLS_SCM_PRETEND_VERSION"] = spec.scm_version
    return env


class _Builder:
    """The steps of one build, each a sandboxed command; a failing step raises BuildError."""

    def __init__(self, instance: Instance, layout: Layout, source: Path, log: Path) -> None:
        self.instance = instance
        self.layout = layout
        self.source = source
        self.log = log
        self.skipped: list[str] = []

    def run(self, step: str, script: str, required: bool = True) -> bool:
        started = time.monotonic()
        result = run_sandboxed(["bash", "-c", script], self.source, BUILD_SANDBOX, self.layout)
        with open(self.log, "a") as handle:
            handle.write(
                f"$ {step} ({time.monotonic() - started:.1f} s, exit {result.exit_code})\n"
            )
            handle.write(result.output + "\n")
        if result.exit_code != 0 and required:
            tail = result.output.strip().splitlines()[-3:]
            raise BuildError(
                f"{self.instance.instance_id}: build step '{step}' failed "
                f"(exit {result.exit_code}): {' | '.join(tail)[-400:]}"
            )
        return result.exit_code == 0

    def pip(
        self, packages: list[str], step: str, required: bool = True, constraints: Sequence[str] = ()
    ) -> bool:
        if not packages:
            return True
        quoted = " ".join(shlex.quote(p) for p in packages)
        script = f"python -m pip install -q {quoted}"
        if constraints:
            pins = " ".join(shlex.quote(p) for p in constraints)
            limits = f"--only-binary :all: -c {CONSTRAINTS}"
            script = f"printf '%s\\n' {pins} > {CONSTRAINTS} && {script} {limits}"
        return self.run(step, script, required)

    def optional(self, packages: list[str], constraints: Sequence[str]) -> None:
        """The best-effort pins: in one batch, else one by one (those that fail skipped)."""
        if self.pip(packages, "pip_from_conda", False, constraints):
            return
        for package in packages:
            if not self.pip([package], f"pip_from_conda {package}", False, constraints):
                self.skipped.append(package)


def _build(instance: Instance, spec: EnvSpec, mirror: Path, cache: Path, temporary: Path) -> None:
    started = time.monotonic()
    source = temporary / "src"
    repos.checkout(instance, mirror, source)
    (temporary / "venv").mkdir()
    for folder in (source, temporary / "venv", cache / "pip"):
        hand_over(folder)
    layout = build_layout(spec, cache, temporary, mirror)
    builder = _Builder(instance, layout, source, temporary / "build.log")
    prefix = pyenv_root() / "versions" / spec.python
    if spec.interpreter == "copy":
        shutil.copytree(prefix, temporary / "venv", symlinks=True, dirs_exist_ok=True)
        hand_over(temporary / "venv")
    else:
        builder.run("venv", f"{prefix}/bin/python3 -m venv {VENV}")
    builder.pip(spec.base_packages, "base packages")
    builder.pip(spec.packages, "pip")
    pins = spec.base_packages + spec.packages if spec.constrained else []
    builder.optional(spec.optional_packages, pins)
    skipped_steps = [c for c in spec.pre_install if "apt-get" in c]
    for number, command in enumerate(c for c in spec.pre_install if "apt-get" not in c):
        builder.run(f"pre_install {number}", command)
    if spec.install:
        builder.run("install", spec.install)
    extras = repos.untracked_files(source, ignored=True)
    repos.save_extras(source, extras, temporary / EXTRAS)
    unignored = repos.untracked_files(source, ignored=False)
    repos.save_extras(source, unignored, temporary / UNIGNORED_EXTRAS)
    manifest = {
        "spec": spec.model_dump(),
        "built_from": instance.instance_id,
        "seconds": round(time.monotonic() - started, 1),
        "skipped_packages": builder.skipped,
        "skipped_steps": skipped_steps,
        "extras": len(extras),
        "unignored_extras": len(unignored),
    }
    shutil.rmtree(source)
    (temporary / COMPLETE).write_text(json.dumps(manifest, indent=1))
