"""A worktree of an instance at `/testbed`, and commands run there in the sandbox.

`Testbed.create` clones the base commit (from the cached mirror), unpacks what the
environment's install left in the tree (for an agent's worktree, also what git does not ignore
there, see `build`) and runs the instance's `pre_install` commands in the
sandbox, leaving their changes uncommitted as the SWE-bench images do (a mini-swe-agent
submission, `git add -A && git diff --cached`, then holds them: sphinx's `-rA` in tox.ini).
Commands then run in bubblewrap with the worktree at `/testbed`, the environment's virtual
environment read-only at `/venv` (first on `PATH`), no network, no host files but the
system's, and a private `/tmp`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from trajforge.envs.swe.sandbox import Layout, SandboxConfig, SandboxResult, run_sandboxed
from trajforge.envs.swe_bench import repos
from trajforge.envs.swe_bench.build import EXTRAS, TESTBED, UNIGNORED_EXTRAS, VENV, BuiltEnv
from trajforge.envs.swe_bench.instances import Instance

AGENT_ENV = {
    "PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
    "VIRTUAL_ENV": VENV,
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PAGER": "cat",
    "MANPAGER": "cat",
    "LESS": "-R",
    "PIP_PROGRESS_BAR": "off",
    "TQDM_DISABLE": "1",
    "USER": "root",
    "LOGNAME": "root",
}
"""What commands see: mini-swe-agent's SWE-bench settings (pagers and progress bars off),
and the user name of the SWE-bench images (the sandbox's user has no passwd entry)."""
MIRROR_AT = "/mirror.git"
"""Where the sandbox sees the repository mirror whose objects the worktree shares (a fixed
path: a host path under /tmp would put root's folders in the sandbox's own /tmp)."""
HOST_CONFIG = ("/etc/fonts",)
"""System configuration the images have and plotting libraries read (fontconfig)."""
SILENT_HOSTS = ("10.255.255.1",)
"""requests' timeout tests expect connecting there to hang (as in the SWE-bench images)."""
SETUP_SANDBOX = SandboxConfig(timeout_s=120, memory_mb=4096, total_memory_mb=4096)
DIFF_SANDBOX = SETUP_SANDBOX.model_copy(update={"max_output": 8_000_000})


class Testbed:
    """One worktree of one instance, with its environment; `close()` removes it."""

    def __init__(
        self, instance: Instance, env: BuiltEnv, mirror: Path, folder: Path, for_agent: bool
    ) -> None:
        self.instance = instance
        self.env = env
        self.mirror = mirror
        self.folder = folder
        self.path = folder / "testbed"
        self.inputs = folder / "inputs"
        self.for_agent = for_agent

    @classmethod
    def create(
        cls,
        instance: Instance,
        env: BuiltEnv,
        mirror: Path,
        workdir: str | None = None,
        for_agent: bool = False,
    ) -> Testbed:
        """A worktree for an agent (`for_agent`: as the runs' images had it) or a judge."""
        folder = Path(tempfile.mkdtemp(prefix="swe-bench-", dir=workdir)).resolve()
        testbed = cls(instance, env, mirror, folder, for_agent)
        try:
            testbed._set_up()
        except BaseException:
            testbed.close()
            raise
        return testbed

    def _set_up(self) -> None:
        self.inputs.mkdir()
        repos.checkout(self.instance, self.mirror, self.path)
        repos.restore_extras(self.env.folder / EXTRAS, self.path, only_ignored=True)
        if self.for_agent:
            repos.restore_extras(self.env.folder / UNIGNORED_EXTRAS, self.path)
        commands = [c for c in self.instance.pre_install if "apt-get" not in c]
        if commands:
            self.run("\n".join(commands), SETUP_SANDBOX, mirror_at_host=True)
        repos.point_alternates(self.path, MIRROR_AT)

    def layout(self, mirror_at_host: bool = False) -> Layout:
        prefix = str(self.env.python_prefix)
        fonts = [(f, f) for f in HOST_CONFIG if Path(f).is_dir()]
        return Layout(
            workspace_at=TESTBED,
            host_python=False,
            read_only=[
                (prefix, prefix),
                (str(self.mirror), str(self.mirror) if mirror_at_host else MIRROR_AT),
                (str(self.env.venv), VENV),
                (str(self.inputs), "/judge"),
                *fonts,
            ],
            env=dict(AGENT_ENV),
            silent_hosts=list(SILENT_HOSTS),
        )

    def run(
        self, command: str, config: SandboxConfig, mirror_at_host: bool = False
    ) -> SandboxResult:
        """`bash -c command` in `/testbed`, confined (`mirror_at_host`: during the setup,
        before the worktree's objects point at the sandbox's mirror path)."""
        layout = self.layout(mirror_at_host)
        return run_sandboxed(["bash", "-c", command], self.path, config, layout)

    def diff(self) -> str:
        """The worktree's changes since the base commit, new files included (what
        mini-swe-agent submits: `git add -A && git diff --cached`), read in the sandbox."""
        result = self.run("git add -A && git diff --cached", DIFF_SANDBOX)
        if result.exit_code != 0:
            raise RuntimeError(f"git diff in the worktree failed: {result.output[-300:]}")
        return result.output

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
