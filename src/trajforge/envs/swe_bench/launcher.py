"""A worktree's sandbox as mini-swe-agent's `bubblewrap` environment runs it.

mini-swe-agent's bubblewrap environment runs each command as

    EXECUTABLE WRAPPER_ARGS... --bind CWD CWD --chdir CWD [--setenv KEY VALUE]... bash -c COMMAND

Configured (through its own config: `environment.executable`, `environment.wrapper_args`)
with `executable` = a Python that imports trajforge and `wrapper_args` = `launch_args(spec)`,
each command runs here instead: the worktree and its sandbox are read from the spec file
that `write_spec` wrote, `CWD` must be the worktree's path inside (`/testbed`), the
`--setenv` pairs are added to the command's environment, and `bash -c COMMAND` runs through
`run_sandboxed`, with the same limits, binds and network as the environment's own `bash`
tool. The output goes to stdout and the exit status is the command's (128 + N when it was
killed by signal N, as a shell reports it). A call that does not have this shape exits with
126 and one `error:` line, before anything runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel

from trajforge.envs.swe.sandbox import Layout, SandboxConfig, run_sandboxed

REFUSED = 126


class LaunchSpec(BaseModel):
    """What a launched command needs: the worktree on the host, how it is seen, the limits."""

    workspace: str
    layout: Layout
    config: SandboxConfig


class BadCall(ValueError):
    """The harness called the launcher with arguments it does not take."""


def write_spec(path: Path, workspace: Path, layout: Layout, config: SandboxConfig) -> Path:
    spec = LaunchSpec(workspace=str(workspace), layout=layout, config=config)
    path.write_text(spec.model_dump_json())
    return path


def launch_args(spec: Path) -> list[str]:
    """`wrapper_args` for mini-swe-agent: run `main` with `spec` in a Python that can import
    this copy of trajforge (without changing the harness's own `sys.path`)."""
    root = str(Path(__file__).resolve().parents[3])  # the folder holding `trajforge`
    boot = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from trajforge.envs.swe_bench.launcher import main; sys.exit(main(sys.argv[1:]))"
    )
    return ["-I", "-c", boot, str(spec)]


def parse_call(args: list[str], inside: str) -> tuple[dict[str, str], list[str]]:
    """(extra environment, command) of a call's arguments after the spec."""
    if args[:1] != ["--bind"] or len(args) < 5 or args[3] != "--chdir":
        raise BadCall("expected --bind CWD CWD --chdir CWD first (mini-swe-agent's bubblewrap)")
    if not args[1] == args[2] == args[4] == inside:
        raise BadCall(f"the working directory must be {inside}, not {args[1]!r}")
    rest, env = args[5:], {}
    while rest[:1] == ["--setenv"]:
        if len(rest) < 3:
            raise BadCall("--setenv needs a name and a value")
        env[rest[1]] = rest[2]
        rest = rest[3:]
    if not rest:
        raise BadCall("no command after the options")
    return env, rest


def main(argv: list[str]) -> int:
    """Run one call (`argv`: the spec file, then the harness's arguments)."""
    if not argv:
        print("error: usage: launcher SPEC --bind CWD CWD --chdir CWD ... bash -c COMMAND")
        return REFUSED
    spec = LaunchSpec.model_validate_json(Path(argv[0]).read_text())
    try:
        extra, command = parse_call(argv[1:], spec.layout.inside(Path(spec.workspace)))
    except BadCall as exc:
        print(f"error: {exc}")
        return REFUSED
    layout = spec.layout.model_copy(update={"env": {**(spec.layout.env or {}), **extra}})
    result = run_sandboxed(command, Path(spec.workspace), spec.config, layout)
    sys.stdout.write(result.output)
    sys.stdout.flush()
    return result.exit_code if result.exit_code >= 0 else 128 - result.exit_code
