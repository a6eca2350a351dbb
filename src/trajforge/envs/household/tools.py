"""Tool schemas of the household environment (OpenAI function form)."""

from __future__ import annotations

from typing import Any

from trajforge.envs.tool_schema import string_tool

TOOLS: list[dict[str, Any]] = [
    string_tool(
        "go",
        "Walk to a receptacle in the current room, or to an adjacent room.",
        target="A receptacle (e.g. 'countertop 1') or a room (e.g. 'kitchen').",
    ),
    string_tool(
        "open", "Open the receptacle you are at.", target="The receptacle, e.g. 'fridge 1'."
    ),
    string_tool("close", "Close the receptacle you are at.", target="The receptacle."),
    string_tool(
        "take", "Pick up an object at your receptacle (hands must be free).", object="Object."
    ),
    string_tool(
        "put",
        "Put the object you hold in or on the receptacle you are at.",
        object="The object you hold.",
        receptacle="The receptacle you are at.",
    ),
    string_tool(
        "clean", "Clean the object you hold; you must be at a sinkbasin.", object="Object."
    ),
    string_tool("heat", "Heat the object you hold; you must be at a microwave.", object="Object."),
    string_tool("cool", "Cool the object you hold; you must be at a fridge.", object="Object."),
    string_tool(
        "examine", "Look closely at an object or receptacle here.", target="What to examine."
    ),
    string_tool("look", "Describe where you are."),
    string_tool("inventory", "Say what you are holding."),
]
TOOL_NAMES = [tool["function"]["name"] for tool in TOOLS]
