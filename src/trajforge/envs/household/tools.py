"""Tool schemas of the household environment (OpenAI function form)."""

from __future__ import annotations

from typing import Any


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    properties = {key: {"type": "string", "description": text} for key, text in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(params)},
        },
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "go",
        "Walk to a receptacle in the current room, or to an adjacent room.",
        target="A receptacle (e.g. 'countertop 1') or a room (e.g. 'kitchen').",
    ),
    _tool("open", "Open the receptacle you are at.", target="The receptacle, e.g. 'fridge 1'."),
    _tool("close", "Close the receptacle you are at.", target="The receptacle."),
    _tool("take", "Pick up an object at your receptacle (hands must be free).", object="Object."),
    _tool(
        "put",
        "Put the object you hold in or on the receptacle you are at.",
        object="The object you hold.",
        receptacle="The receptacle you are at.",
    ),
    _tool("clean", "Clean the object you hold; you must be at a sinkbasin.", object="Object."),
    _tool("heat", "Heat the object you hold; you must be at a microwave.", object="Object."),
    _tool("cool", "Cool the object you hold; you must be at a fridge.", object="Object."),
    _tool("examine", "Look closely at an object or receptacle here.", target="What to examine."),
    _tool("look", "Describe where you are."),
    _tool("inventory", "Say what you are holding."),
]
TOOL_NAMES = [tool["function"]["name"] for tool in TOOLS]
