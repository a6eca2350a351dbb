"""Errors sorted by who must act on them.

- `UserError`: the person running trajforge must fix something (bad file, bad option,
  unknown name). The CLI prints its message on one line and exits non-zero.
- `InputError`: a `UserError` about a specific input record; names file and record.
- `ToolError`: raised by an environment tool; the *agent* sees the message as the tool
  result and the episode goes on.
- `EpisodeEnd`: ends one episode (limits, monitor stop, user quit) with a termination reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

    from trajforge.schema import TerminationReason


class TrajforgeError(Exception):
    """Base of all trajforge errors."""


class UserError(TrajforgeError):
    """Something the user must fix; the message says what and, where possible, how."""


class InputError(UserError):
    """A malformed input: names the file, the record (index or JSON path) and the problem."""

    MAX_PROBLEM = 300

    def __init__(self, file: str, problem: str, record: str | int | None = None) -> None:
        self.file = file
        self.record = record
        self.problem = problem = one_line(problem, self.MAX_PROBLEM)
        where = f"{file}" if record is None else f"{file} [record {record}]"
        super().__init__(f"{where}: {problem}")


def one_line(text: str, limit: int) -> str:
    """The first non-empty line of `text`, cut to about `limit` characters (a parser's caret
    diagram or a quoted 20 MB value must not reach the terminal)."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... ({len(line)} characters)"


class UnknownFormatError(UserError):
    """No importer recognizes a file."""


class ToolError(TrajforgeError):
    """A tool call failed; the agent sees this message as the tool's result."""


class EpisodeEnd(TrajforgeError):
    """Ends one episode with a termination reason (not an error of the batch)."""

    def __init__(self, reason: TerminationReason, message: str = "") -> None:
        self.reason: TerminationReason = reason
        super().__init__(message or reason)


def first_error(exc: ValidationError) -> str:
    """`field.path: problem` of a validation error's first error, on one line."""
    error = exc.errors()[0]
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
