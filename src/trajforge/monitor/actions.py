"""What an agent did in one step, whatever the harness: the `Action` record."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Action:
    """One thing the agent did in a step."""

    kind: str
    """read, search, edit, test, run, diff, revert, submit, respond, write, other, ..."""
    name: str
    """The command or tool name (`sed`, `pytest`, `get_user_details`)."""
    text: str
    """The normalized action text (command line, or tool name plus sorted arguments)."""
    paths: tuple[str, ...] = ()
    """Files (or records) the action touches."""
    region: tuple[str, int, int] | None = None
    """(file, first line, last line) for a ranged read."""
    lines_written: int = 0
    """Lines of new content an edit writes (heredoc body, replacement text)."""
    on_test_file: bool = False
    """The action edits a test file."""
