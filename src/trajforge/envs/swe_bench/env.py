"""The `swe-bench` environment: a real SWE-bench instance at `/testbed`, in the sandbox.

`reset(task)` (the task id is the instance id) builds the instance's environment if the
cache does not hold it yet (`build.ensure_env`; minutes, once) and makes a fresh worktree
of the base commit (about a second). Tools: `bash` (a command in a new shell in `/testbed`,
60 s limit, no network, as mini-swe-agent runs them; its output is shown as mini-swe-agent
shows it, `<returncode>` and `<output>`), and as the toy `swe` environment has them, `read`,
`edit` and `run_tests` (the instance's test files as they are at the base, without the
hidden test patch). A bash command whose output starts with
`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` submits: the rest of its output is the submission
and the episode ends.

Actions also come as text (`TextActions`): an assistant message with exactly one ```bash
block is that command and its answer is a user message, which is how mini-swe-agent runs
record them; replay and fork read recorded runs that way.

`evaluate()` judges the worktree's diff as the SWE-bench harness does (`judge.py`) in a new
worktree. `snapshot()` is that diff; `restore` applies it to a fresh worktree.
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from trajforge.envs.base import EnvironmentBase, StepResult
from trajforge.envs.swe.files import edit_file, read_file
from trajforge.envs.swe.sandbox import SandboxConfig
from trajforge.envs.swe_bench import repos
from trajforge.envs.swe_bench.build import BuiltEnv, ensure_env
from trajforge.envs.swe_bench.cache import cache_dir
from trajforge.envs.swe_bench.instances import Instance, get_instance, load_instances
from trajforge.envs.swe_bench.judge import JUDGE_SANDBOX, JudgeReport, judge_patch, test_command
from trajforge.envs.swe_bench.testbed import Testbed
from trajforge.envs.tool_schema import repository_tools
from trajforge.errors import ToolError
from trajforge.schema import Message, Outcome, Task, ToolCall

NAME = "swe-bench"
SUBMIT_MARK = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SUBMIT_COMMAND = f"echo {SUBMIT_MARK} && git add -A && git diff --cached"
LONG_OUTPUT = 10_000
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.S)
_DURATION = re.compile(r"\b\d+(\.\d+)?\s?(s|sec|seconds|ms)\b")
_WARNING = re.compile(r"<warning>.*?</warning>", re.S)
_PYTHON_PATCH = re.compile(r"\b((?:C?Python|python)[ /]?\d+\.\d+)\.\d+")
_PYENV_PREFIX = re.compile(r"/\S*?/\.pyenv/versions/\d+\.\d+\.\d+/")
_LS_LONG = re.compile(
    r"^[-dlcbps][-rwxsStT]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(\d+)\s+\w{3}\s+\d+\s+[\d:]+\s", re.M
)
_LS_TOTAL = re.compile(r"^total \d+$", re.M)
_BLOB_IDS = re.compile(r"^index [0-9a-f]{7,40}\.\.[0-9a-f]{7,40}", re.M)
RECORDED_VENV = "/opt/miniconda3/envs/testbed"
"""Where the SWE-bench images keep the environment that `/venv` is here."""
SYSTEM_PROMPT = (
    "You fix an issue in the Python repository at /testbed. Answer with a short THOUGHT and "
    "exactly one ```bash block holding one command; each command runs in a new shell in "
    "/testbed. When the fix is done, run: " + SUBMIT_COMMAND
)

TOOLS = repository_tools(
    "/testbed", "Run the instance's test files (as they are in the repository)."
)


class SweBenchConfig(BaseModel):
    """Where the data, the cache and the worktrees are, and the time limits."""

    data: str | None = Field(
        default=None, description="SWE-bench data folder (instances, bundles)."
    )
    cache: str | None = Field(default=None, description="Build cache (default ~/.cache/...).")
    workdir: str | None = Field(default=None, description="Parent of worktrees (default tmp).")
    command: SandboxConfig = Field(
        default_factory=lambda: SandboxConfig(
            timeout_s=60, memory_mb=8192, total_memory_mb=4096, max_processes=128,
            file_mb=512, max_output=200_000,
        ),
        description="Limits of one agent command (mini-swe-agent's 60 s).",
    )  # fmt: skip
    judge: SandboxConfig = Field(default_factory=lambda: JUDGE_SANDBOX.model_copy())


def task_for(instance: Instance) -> Task:
    return Task(
        id=instance.instance_id,
        environment=NAME,
        instruction=instance.problem_statement,
        gold=instance.patch,
        data={"repo": instance.repo, "base_commit": instance.base_commit},
    )


def observation_text(returncode: int, output: str) -> str:
    """A command's result as mini-swe-agent shows it (long outputs: head and tail)."""
    if len(output) < LONG_OUTPUT:
        return f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>"
    elided = len(output) - LONG_OUTPUT
    return (
        f"<returncode>{returncode}</returncode>\n<warning>\nThe output was too long; "
        "use a more selective command.\n</warning>"
        f"<output_head>\n{output[:5000]}\n</output_head>\n<elided_chars>\n{elided} "
        f"characters elided\n</elided_chars>\n<output_tail>\n{output[-5000:]}\n</output_tail>"
    )


_PATCH_END = "TRAJFORGE_GOLD_PATCH"


def apply_command(patch: str) -> str:
    """A bash command that resets the worktree and applies `patch` (in a here-document, or
    base64 when its text could end the bash block or the document early)."""
    reset = "git checkout -q -- . && git clean -fdq && "
    if "```" in patch or _PATCH_END in patch:
        encoded = base64.b64encode(patch.encode()).decode()
        return f"{reset}echo {encoded} | base64 -d | git apply --verbose"
    return f"{reset}git apply --verbose <<'{_PATCH_END}'\n{patch.rstrip(chr(10))}\n{_PATCH_END}"


def bash_message(thought: str, command: str) -> Message:
    """An assistant message as mini-swe-agent writes them: a thought and one bash block."""
    return Message(role="assistant", content=f"THOUGHT: {thought}\n\n```bash\n{command}\n```")


def changed_lines(patch: str) -> list[str]:
    """What a patch changes: its files and added/removed lines (not index lines, hunk
    positions or context, which differ between equal changes made in different ways)."""
    return [
        line
        for line in patch.splitlines()
        if line.startswith("diff --git")
        or (line[:1] in "+-" and line and not line.startswith(("+++ ", "--- ")))
    ]


def bash_call(message: Message) -> ToolCall | None:
    """The command of an assistant message with exactly one ```bash block."""
    if message.role != "assistant" or message.tool_calls:
        return None
    blocks = _BASH_BLOCK.findall(message.text())
    if len(blocks) != 1:
        return None
    arguments = orjson.dumps({"command": blocks[0].strip()}).decode()
    return ToolCall(id="", name="bash", arguments=arguments)


class SweBenchEnv(EnvironmentBase):
    """See module docstring. Implements Environment, TaskLookup, TaskSet, Oracle (the
    gold patch's way), StateHashing (the worktree's diff), TextActions and GoldPatchSource."""

    name = NAME

    def __init__(self, config: SweBenchConfig | None = None, **overrides: Any) -> None:
        self.config = (config or SweBenchConfig()).model_copy(update=overrides)
        self._testbed: Testbed | None = None
        self.submission: str | None = None
        self.done = False
        self._verdicts: dict[str, bool] = {}

    @property
    def testbed(self) -> Testbed:
        if self._testbed is None:
            raise RuntimeError("the swe-bench environment has no worktree: call reset(task)")
        return self._testbed

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def task_by_id(self, task_id: str) -> Task:
        return task_for(get_instance(task_id, self.config.data))

    def cannot_serve(self, task: Task) -> str | None:
        if task.id in load_instances(self.config.data):
            return None
        return f"no SWE-bench instance '{task.id}' in the data folder"

    def prepare(self, instance: Instance) -> tuple[BuiltEnv, Path]:
        """The instance's built environment and repository mirror (built if missing)."""
        cache = cache_dir(self.config.cache)
        return ensure_env(instance, cache, self.config.data), repos.mirror(
            instance, cache, self.config.data
        )

    def reset(self, task: Task) -> list[Message]:
        instance = get_instance(task.id, self.config.data)
        built, mirror = self.prepare(instance)
        self.close()
        self._testbed = Testbed.create(instance, built, mirror, self.config.workdir, for_agent=True)
        self.submission, self.done = None, False
        opening = f"<pr_description>\n{instance.problem_statement}\n</pr_description>"
        return [
            Message(role="system", content=SYSTEM_PROMPT),
            Message(role="user", content=opening),
        ]

    def close(self) -> None:
        if self._testbed is not None:
            self._testbed.close()
            self._testbed = None

    # -- text actions (mini-swe-agent) --------------------------------------------------
    def text_action(self, message: Message) -> ToolCall | None:
        return bash_call(message)

    def observation(self, result: StepResult) -> Message:
        return Message(role="user", content=result.content)

    def comparable(self, output: str) -> str:
        """Durations, the environment's and interpreter's paths, the Python patch level
        (the images' Pythons are newer patch releases), `ls -l`'s modes, owners and dates,
        abbreviated blob ids in diffs (their length depends on the repository's size) and
        the long-output warning normalized."""
        text = _WARNING.sub("<warning/>", output.replace(RECORDED_VENV, "/venv"))
        text = _PYENV_PREFIX.sub("/venv/", text)
        text = _LS_LONG.sub(r"<entry \1> ", _LS_TOTAL.sub("total <blocks>", text))
        text = _DURATION.sub("<duration>", text)
        text = _PYTHON_PATCH.sub(r"\1", text)
        text = _BLOB_IDS.sub("index <blobs>", text)
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    def gold_patch(self) -> str:
        return self.testbed.instance.patch

    # -- oracle and task set ---------------------------------------------------------------
    def tasks(self, count: int | None = None, seed: int = 0) -> list[Task]:
        """The data folder's instances (shuffled by `seed` when it is not 0)."""
        instances = list(load_instances(self.config.data).values())
        if seed:
            random.Random(seed).shuffle(instances)
        return [task_for(i) for i in instances[:count]]

    def _at_gold(self) -> bool:
        return changed_lines(self.diff()) == changed_lines(self.gold_patch())

    def distance(self) -> int | None:
        """After the submission: 0 when the judge resolves it, else None (the episode is
        over). Before: 1 when the worktree holds the gold patch (submit), else 2 (reset and
        apply it, submit)."""
        if self.done:
            return 0 if self._judged_submission() else None
        return 1 if self._at_gold() else 2

    def expert_action(self) -> Message | None:
        if self.done:
            return None
        if self._at_gold():
            return bash_message("The reference patch is applied; submit it.", SUBMIT_COMMAND)
        command = apply_command(self.gold_patch())
        return bash_message("Reset the worktree and apply the reference patch.", command)

    def state_hash(self) -> str:
        """A hash of what the worktree changes (equal changes, equal hashes)."""
        return hashlib.sha256("\n".join(changed_lines(self.diff())).encode()).hexdigest()[:16]

    def changed_records(self) -> list[dict[str, Any]]:
        """Per changed file (table `files`, key its path): lines added and removed, and its
        part of the diff."""
        records: list[dict[str, Any]] = []
        for part in ("\n" + self.diff()).split("\ndiff --git a/")[1:]:
            lines = part.splitlines()
            body = [line for line in lines[1:] if not line.startswith(("+++ ", "--- "))]
            change = {
                "added": sum(line.startswith("+") for line in body),
                "removed": sum(line.startswith("-") for line in body),
                "diff": "diff --git a/" + part.strip("\n"),
            }
            records.append({"table": "files", "key": lines[0].split(" b/", 1)[0], "record": change})
        return records

    def _judged_submission(self) -> bool:
        patch = self.submission or ""
        key = hashlib.sha256(patch.encode()).hexdigest()
        if key not in self._verdicts:
            self._verdicts[key] = self.judge(patch).resolved
        return self._verdicts[key]

    def submission_matches(self, submission: str | None) -> bool | None:
        """Whether the worktree's diff equals a recorded submission (None: none recorded)."""
        if not submission:
            return None
        return self.comparable(self.diff()) == self.comparable(submission)

    # -- tools ---------------------------------------------------------------------------
    def step(self, call: ToolCall) -> StepResult:
        handlers = {"bash": self._bash, "read": self._read, "edit": self._edit}
        try:
            args = orjson.loads(call.arguments or "{}")
            if call.name == "run_tests":
                return self._run_tests()
            if call.name not in handlers:
                raise ToolError(f"unknown tool '{call.name}'")
            return handlers[call.name](args if isinstance(args, dict) else {})
        except ToolError as exc:
            return StepResult(content=f"Error: {exc}", error=True)
        except orjson.JSONDecodeError:
            return StepResult(content="Error: arguments are not valid JSON", error=True)

    def _bash(self, args: dict) -> StepResult:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("missing argument 'command'")
        result = self.testbed.run(command, self.config.command)
        output = result.output
        if output.lstrip().splitlines()[:1] == [SUBMIT_MARK]:
            self.submission = output.lstrip().split("\n", 1)[1] if "\n" in output.lstrip() else ""
            self.done = True
            return StepResult(content=self.submission, done=True)
        if result.timed_out:
            limit = self.config.command.timeout_s
            text = f"The command timed out after {limit:g} s and was killed.\n"
            text += f"<output>\n{output}\n</output>"
            return StepResult(content=text, error=True)
        return StepResult(
            content=observation_text(result.exit_code, output), error=result.exit_code != 0
        )

    def _inside(self, relative: Any) -> Path:
        if not isinstance(relative, str) or not relative:
            raise ToolError("missing argument 'path'")
        root = self.testbed.path
        path = (root / relative.removeprefix("/testbed/")).resolve()
        if not path.is_relative_to(root):
            raise ToolError(f"'{relative}' is outside /testbed")
        return path

    def _read(self, args: dict) -> StepResult:
        return read_file(self._inside(args.get("path")), args)

    def _edit(self, args: dict) -> StepResult:
        return edit_file(self._inside(args.get("path")), args)

    def _run_tests(self) -> StepResult:
        result = self.testbed.run(test_command(self.testbed.instance), self.config.judge)
        return StepResult(content=result.output[-20_000:], error=result.exit_code != 0)

    # -- judging, snapshots --------------------------------------------------------------
    def diff(self) -> str:
        """The worktree's changes (what a submission holds)."""
        return self.testbed.diff()

    def judge(self, patch: str) -> JudgeReport:
        testbed = self.testbed
        return judge_patch(
            testbed.instance,
            testbed.env,
            testbed.mirror,
            patch,
            self.config.judge,
            self.config.workdir,
        )

    def evaluate(self) -> Outcome:
        patch = self.submission if self.submission is not None else self.diff()
        report = self.judge(patch)
        details = report.model_dump(exclude={"detail"}) | {
            "patch": patch,
            "log_tail": report.detail[-1500:],
        }
        return Outcome(
            success=report.resolved,
            reward=float(report.resolved),
            judged_by="swe-bench-judge",
            details=details,
        )

    def snapshot(self) -> Any:
        return (self.testbed.instance.instance_id, self.diff(), self.submission, self.done)

    def restore(self, state: Any) -> None:
        instance_id, patch, submission, done = state
        self.reset(self.task_by_id(instance_id))
        if patch.strip():
            (self.testbed.inputs / "restore.diff").write_text(patch)
            result = self.testbed.run("git apply /judge/restore.diff", self.config.command)
            if result.exit_code != 0:
                raise RuntimeError(
                    f"restoring {instance_id}: the saved diff does not apply: "
                    + result.output[-300:]
                )
        self.submission, self.done = submission, done
