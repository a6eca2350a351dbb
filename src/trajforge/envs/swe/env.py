"""The `swe` environment: fix a seeded bug in a generated Python repository.

Tools: `bash` (a shell command in the sandbox), `read` (a file), `edit` (replace one exact
occurrence of a text in a file), `run_tests` (the visible tests, in the sandbox). Success:
the hidden tests pass, run in the sandbox on a copy of the workspace. Snapshot: a copy of
every file of the workspace. Oracle: the known patch; `distance()` counts files that differ
from the fixed repository (one edit each).
"""

from __future__ import annotations

import random
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.envs.base import EnvironmentBase, StepResult
from trajforge.envs.swe.files import edit_file, read_file
from trajforge.envs.swe.repos import Repo, generate_repo
from trajforge.envs.swe.sandbox import (
    SandboxConfig,
    run_sandboxed,
    special_entries,
    workspace_files,
)
from trajforge.envs.tool_schema import repository_tools
from trajforge.errors import ToolError, UserError
from trajforge.schema import Message, Outcome, Task, ToolCall

NAME = "swe"
SYSTEM_PROMPT = (
    "You are a software engineer fixing a bug in the repository in your working directory. "
    "Use bash, read, edit and run_tests. Reply without a tool call when the bug is fixed."
)
UNITTEST = [sys.executable, "-I", "-S", "-m", "unittest", "discover", "-t", "."]
_TASK_ID = re.compile(r"^swe-(?P<seed>\d+)$")
_TIMING = re.compile(r"(Ran \d+ tests?) in [\d.]+s")


def _untimed(output: str) -> str:
    """Test output without its timing, so equal runs give equal text."""
    return _TIMING.sub(r"\1", output)


TOOLS = repository_tools("the repository", "Run the repository's tests.")


class SweConfig(BaseModel):
    """Where workspaces live and how commands are confined."""

    workdir: str | None = Field(default=None, description="Parent of workspaces (default tmp).")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Sandbox.")


def task_for(seed: int) -> Task:
    repo = generate_repo(seed)
    patch = {"path": repo.bug_path, "old": repo.bug.new, "new": repo.bug.old}
    return Task(
        id=f"swe-{seed}",
        environment=NAME,
        instruction=repo.issue,
        gold=[{"name": "edit", "arguments": patch}, {"name": "run_tests", "arguments": {}}],
        data={"seed": seed, "bug_family": repo.bug.family, "function": repo.function},
    )


class SweEnv(EnvironmentBase):
    """See module docstring. Implements Environment, Oracle and TaskSet."""

    name = NAME

    def __init__(self, config: SweConfig | None = None, **overrides: Any) -> None:
        self.config = (config or SweConfig()).model_copy(update=overrides)
        self._workspace: Path | None = None
        self._repo: Repo | None = None
        self.tested_since_change = False

    @property
    def workspace(self) -> Path:
        """The episode's working copy; only between `reset` and `close`."""
        if self._workspace is None:
            raise RuntimeError("the swe environment has no workspace: call reset(task)")
        return self._workspace

    @property
    def repo(self) -> Repo:
        """The generated repository of the current task; only after `reset`."""
        if self._repo is None:
            raise RuntimeError("the swe environment has no task: call reset(task)")
        return self._repo

    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]:
        return [task_for(seed * 1_000_003 + i) for i in range(count if count is not None else 20)]

    def task_by_id(self, task_id: str) -> Task:
        match = _TASK_ID.match(task_id)
        if not match:
            raise UserError(f"'{task_id}' is not a swe task id; expected swe-<seed>")
        return task_for(int(match.group("seed")))

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def reset(self, task: Task) -> list[Message]:
        seed = task.data["seed"] if "seed" in task.data else self.task_by_id(task.id).data["seed"]
        repo = self._repo = generate_repo(int(seed))
        self.close()
        self._workspace = self._new_workspace()
        self._write(repo.buggy)
        self.tested_since_change = False
        files = "\n".join(sorted(repo.buggy))
        opening = f"{repo.issue}\n\nRepository files:\n{files}"
        return [
            Message(role="system", content=SYSTEM_PROMPT),
            Message(role="user", content=opening),
        ]

    def close(self) -> None:
        if self._workspace is not None:
            shutil.rmtree(self._workspace, ignore_errors=True)
            self._workspace = None

    def _new_workspace(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="swe-", dir=self.config.workdir)).resolve()

    def _write(self, files: dict[str, str]) -> None:
        for relative, text in files.items():
            path = self.workspace / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def _files(self) -> dict[str, str]:
        """The workspace's regular files (links are never followed: an agent's link to
        `/dev/zero` or to a file outside is not read)."""
        return {
            relative: text.decode(errors="replace")
            for relative, text in workspace_files(self.workspace, self.config.sandbox.file_mb)
        }

    # -- tools ---------------------------------------------------------------------------
    def step(self, call: ToolCall) -> StepResult:
        handler = {"bash": self._bash, "read": self._read, "edit": self._edit}.get(call.name)
        try:
            args = orjson.loads(call.arguments or "{}")
            if call.name == "run_tests":
                return self._run_tests()
            if handler is None:
                raise ToolError(f"unknown tool '{call.name}'")
            return handler(args if isinstance(args, dict) else {})
        except ToolError as exc:
            return StepResult(content=f"Error: {exc}", error=True)
        except orjson.JSONDecodeError:
            return StepResult(content="Error: arguments are not valid JSON", error=True)

    def _inside(self, relative: Any) -> Path:
        if not isinstance(relative, str) or not relative:
            raise ToolError("missing argument 'path'")
        workspace = self.workspace
        path = (workspace / relative).resolve()
        if not path.is_relative_to(workspace):
            raise ToolError(f"'{relative}' is outside the repository")
        return path

    def _bash(self, args: dict) -> StepResult:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("missing argument 'command'")
        result = run_sandboxed(["bash", "-c", command], self.workspace, self.config.sandbox)
        self.tested_since_change = False
        text = f"{result.output}\n[exit code {result.exit_code}]"
        return StepResult(content=text, error=result.exit_code != 0)

    def _read(self, args: dict) -> StepResult:
        return read_file(self._inside(args.get("path")), args)

    def _edit(self, args: dict) -> StepResult:
        result = edit_file(self._inside(args.get("path")), args)
        self.tested_since_change = False
        return result

    def _run_tests(self) -> StepResult:
        result = run_sandboxed([*UNITTEST, "-s", "tests"], self.workspace, self.config.sandbox)
        self.tested_since_change = True
        return StepResult(content=_untimed(result.output), error=result.exit_code != 0)

    # -- judging, snapshots, oracle -------------------------------------------------------
    def evaluate(self) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="swe-eval-", dir=self.config.workdir) as tmp:
            judge = Path(tmp).resolve() / "repo"
            # Links are copied as links, FIFOs and devices left out (never opened on the host).
            shutil.copytree(self.workspace, judge, symlinks=True, ignore=special_entries)
            planted = judge / "hidden_tests"  # whatever the agent put there is replaced
            if planted.is_symlink() or not planted.is_dir():
                planted.unlink(missing_ok=True)
            else:
                shutil.rmtree(planted)
            (judge / "hidden_tests").mkdir()
            (judge / "hidden_tests" / "__init__.py").write_text("")
            (judge / "hidden_tests" / "test_hidden.py").write_text(self.repo.hidden_tests)
            result = run_sandboxed([*UNITTEST, "-s", "hidden_tests"], judge, self.config.sandbox)
        success = result.exit_code == 0
        details = {"hidden_tests": _untimed(result.output)[-2000:]}
        return Outcome(
            success=success, reward=float(success), judged_by="hidden-tests", details=details
        )

    def snapshot(self) -> Any:
        return (self.repo, self._files(), self.tested_since_change)

    def restore(self, state: Any) -> None:
        self._repo, files, self.tested_since_change = state
        if self._workspace is None:
            self._workspace = self._new_workspace()
        for child in self._workspace.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        self._write(files)

    def _differing(self) -> list[str]:
        current = self._files()
        return [p for p, text in self.repo.fixed.items() if current.get(p) != text]

    def distance(self) -> int:
        return len(self._differing())

    def expert_action(self) -> ToolCall | None:
        differing = self._differing()
        if not differing:
            return None if self.tested_since_change else ToolCall(id="", name="run_tests")
        path = differing[0]
        current = self._files().get(path, "")
        repo = self.repo
        fixed, bug = repo.fixed[path], repo.bug
        if (
            path == repo.bug_path
            and current.count(bug.new) == 1
            and (current.replace(bug.new, bug.old, 1) == fixed)
        ):
            args = {"path": path, "old": bug.new, "new": bug.old}
        else:
            args = {"path": path, "old": current, "new": fixed}
        return ToolCall(id="", name="edit", arguments=orjson.dumps(args).decode())

    def distractor_action(self, rng: random.Random) -> ToolCall | None:
        """A plausible detour: read another file, or list the repository."""
        repo = self.repo
        others = [p for p in repo.fixed if p != repo.bug_path and p.endswith(".py")]
        if others and rng.random() < 0.7:
            args = {"path": rng.choice(sorted(others))}
            return ToolCall(id="", name="read", arguments=orjson.dumps(args).decode())
        return ToolCall(id="", name="bash", arguments=orjson.dumps({"command": "ls -R"}).decode())
