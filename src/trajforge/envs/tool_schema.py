"""Tool schemas in OpenAI function form, for environments whose tools take strings."""

from __future__ import annotations

from typing import Any


def string_tool(name: str, description: str, **params: str) -> dict[str, Any]:
    """A tool whose parameters (`name="description"`) are all required strings."""
    properties = {key: {"type": "string", "description": text} for key, text in params.items()}
    parameters = {"type": "object", "properties": properties, "required": list(params)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def repository_tools(where: str, tests: str) -> list[dict[str, Any]]:
    """The tools of a code repository at `where` (a path, or words such as "the
    repository"): bash, read, edit, and run_tests described by `tests`."""
    return [
        string_tool("bash", f"Run a shell command in {where}.", command="The command."),
        string_tool("read", "Read a file of the repository.", path=f"Path relative to {where}."),
        string_tool(
            "edit",
            "Replace the one occurrence of `old` in a file with `new`.",
            path=f"Path relative to {where}.",
            old="Exact text to replace (must occur once).",
            new="Replacement text.",
        ),
        string_tool("run_tests", tests),
    ]
