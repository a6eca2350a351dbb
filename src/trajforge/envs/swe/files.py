"""The read and edit tools of a code repository, on a path the environment has already
checked is inside it (shared by the toy `swe` and the `swe-bench` environments)."""

from __future__ import annotations

from pathlib import Path

from trajforge.envs.base import StepResult
from trajforge.errors import ToolError


def read_file(path: Path, args: dict) -> StepResult:
    """The file's text (bytes that are not UTF-8 replaced)."""
    if not path.is_file():
        raise ToolError(f"no file '{args.get('path')}'")
    return StepResult(content=path.read_text(errors="replace"))


def edit_file(path: Path, args: dict) -> StepResult:
    """Replace the one occurrence of `args["old"]` with `args["new"]`."""
    old, new = args.get("old"), args.get("new")
    if not isinstance(old, str) or not isinstance(new, str) or not path.is_file():
        raise ToolError("edit needs an existing 'path' and text 'old' and 'new'")
    text = path.read_text()
    if text.count(old) != 1:
        raise ToolError(f"'old' occurs {text.count(old)} times in {args['path']}; need 1")
    path.write_text(text.replace(old, new, 1))
    return StepResult(content=f"Edited {args['path']}.")
