"""Run a Python harness unchanged, in this process, with its model calls captured.

`run_captured(["mini", "--task", ...], db, session)` finds the program (a console script
on PATH, such as mini-swe-agent's `mini`, or a `.py` file), installs in-process capture and
runs the program as `__main__` in this interpreter, with `sys.argv` set as if it had been
started on its own. The harness and trajforge must share the environment (install
trajforge next to the harness); a program that is not Python cannot be run this way and
goes through `trajforge proxy` instead.
"""

from __future__ import annotations

import runpy
import shutil
import sys
from pathlib import Path
from typing import Any

from trajforge.errors import UserError
from trajforge.proxy.inprocess import capture_in_process


def python_program(command: str) -> Path:
    """The file of a Python program named by path or found on PATH."""
    found = command if Path(command).is_file() else shutil.which(command)
    if found is None:
        raise UserError(f"no program '{command}' (not a file, not found on PATH)")
    path = Path(found)
    if path.suffix != ".py" and not _python_shebang(path):
        raise UserError(
            f"{path} is not a Python program; record it through the proxy instead "
            "(trajforge proxy --upstream URL, then point its base URL at the proxy)"
        )
    return path


def _python_shebang(path: Path) -> bool:
    with path.open("rb") as handle:
        first = handle.readline(512)
    return first.startswith(b"#!") and b"python" in first


def run_program(path: Path, argv: list[str]) -> int:
    """Run a Python file as `__main__` with `sys.argv = [path, *argv]`; its exit status."""
    saved = sys.argv[:]
    sys.argv = [str(path), *argv]
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        return _exit_status(exc.code)
    finally:
        sys.argv = saved
    return 0


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_captured(command: list[str], db: str | Path, session: str, **options: Any) -> int:
    """Run `command` (program and arguments) in-process under capture; its exit status.
    `options` are fields of `CaptureOptions`."""
    if not command:
        raise UserError("give the program to run (and its arguments) after --")
    program = python_program(command[0])
    with capture_in_process(db, session, **options):
        return run_program(program, command[1:])
