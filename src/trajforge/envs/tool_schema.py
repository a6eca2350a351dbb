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
