"""Repositories: a bare mirror per bundle (cached), and worktrees at a base commit.

A worktree is a clone sharing the mirror's objects (`--shared`: nothing is copied, so a
sympy checkout takes about 0.3 s) holding only the instance's tag, without the other base
commits and without a remote, as the SWE-bench images hold them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

from trajforge.envs.swe_bench.cache import COMPLETE, build_once
from trajforge.envs.swe_bench.instances import Instance, data_dir
from trajforge.errors import UserError

GIT = ["git", "-c", "safe.directory=*", "-c", "advice.detachedHead=false"]


def git(folder: Path, *args: str, check: bool = True, stdin: str | None = None) -> str:
    """Run git in `folder` on the host (never in a worktree an agent has touched: its
    `.git/config` could name programs to run); returns its standard output."""
    done = subprocess.run(
        [*GIT, "-C", str(folder), *args],
        input=stdin,
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])} in {folder}: {done.stderr.strip()}")
    return done.stdout


@functools.cache
def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def bundle_path(instance: Instance, data: str | Path | None = None) -> Path:
    path = data_dir(data) / "repos" / instance.bundle_name
    if not path.is_file():
        raise UserError(f"no bundle {path} for {instance.instance_id} ({instance.repo})")
    return path


def mirror(instance: Instance, cache: Path, data: str | Path | None = None) -> Path:
    """The bare mirror of the instance's bundle (made once, named by the bundle's hash)."""
    bundle = bundle_path(instance, data)
    final = cache / "repos" / f"{instance.bundle_name.removesuffix('.bundle')}-{_file_hash(bundle)}"

    def make(temporary: Path) -> None:
        subprocess.run(
            [*GIT, "clone", "--quiet", "--bare", str(bundle), str(temporary / "git")],
            check=True,
            capture_output=True,
        )
        (temporary / COMPLETE).write_text(json.dumps({"bundle": str(bundle)}))

    build_once(final, make)
    return final / "git"


def checkout(instance: Instance, mirror_git: Path, target: Path) -> None:
    """A worktree of `instance`'s base commit at `target` (which must not exist)."""
    tag = f"base-{instance.base_commit}"
    done = subprocess.run(
        [*GIT, "clone", "--quiet", "--shared", "--no-tags", "--single-branch", "--branch", tag,
         str(mirror_git), str(target)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise UserError(
            f"{instance.instance_id}: the bundle has no tag {tag} ({done.stderr.strip()})"
        )
    git(target, "checkout", "--quiet", "-B", "main")
    git(target, "remote", "remove", "origin")


def point_alternates(target: Path, mirror_inside: str) -> None:
    """Make the worktree find the shared objects where the sandbox shows the mirror (after
    this, git works on it only inside the sandbox)."""
    (target / ".git/objects/info/alternates").write_text(f"{mirror_inside}/objects\n")


def untracked_files(target: Path, ignored: bool) -> list[str]:
    """Files the install left in the tree, those git ignores (`ignored`: egg-info, generated
    version files) or those it does not (the `build/` of an in-tree `pip install .`), without
    caches of compiled Python."""
    listed = git(target, "ls-files", "--others", "--exclude-standard", "-z",
                 *(["--ignored"] if ignored else []))  # fmt: skip
    return sorted(
        name
        for name in listed.split("\0")
        if name and "__pycache__/" not in name and not name.endswith((".pyc", ".pyo"))
    )


def save_extras(target: Path, names: list[str], archive: Path) -> None:
    with tarfile.open(archive, "w") as tar:
        for name in names:
            tar.add(target / name, arcname=name, recursive=False)


def restore_extras(archive: Path, target: Path, only_ignored: bool = False) -> None:
    """Unpack `archive` into the worktree `target`; `only_ignored`: just the files `target`'s
    own ignore rules ignore. An environment is shared by instances at other commits, whose
    rules may differ (xarray 2905's install leaves `.eggs/`, which 3151's commit does not
    ignore: every diff there would hold it)."""
    if not archive.is_file():
        return
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        if only_ignored:
            names = "\0".join(m.name for m in members)
            kept = set(git(target, "check-ignore", "-z", "--stdin", stdin=names,
                           check=False).split("\0"))  # fmt: skip
            members = [m for m in members if m.name in kept]
        tar.extractall(target, members=members, filter="tar")
