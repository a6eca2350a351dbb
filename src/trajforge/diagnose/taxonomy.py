"""The error taxonomy: what kind of mistake the decisive error is.

Each category has a short id (stored in diagnoses and labels) and a one-line definition. The
README of this package gives the full definitions with examples.
"""

from __future__ import annotations

from typing import Literal

Category = Literal[
    "tool_misuse",
    "misread_tool_output",
    "hallucination",
    "policy_violation",
    "wrong_plan",
    "premature_termination",
    "looping",
    "environment_fault",
]

CATEGORIES: dict[str, str] = {
    "tool_misuse": "Invalid invocation: the wrong tool, malformed arguments, or wrong argument "
    "values for the intended action.",
    "misread_tool_output": "The agent acts against what a tool returned: ignores an error, "
    "contradicts the output or picks the wrong item from it.",
    "hallucination": "The agent states or uses information that no message before it supports.",
    "policy_violation": "The agent breaks the domain policy or the instructions (acts before "
    "authenticating the user, writes without explicit confirmation...).",
    "wrong_plan": "The approach cannot reach the goal: a different action than the task needs, "
    "a wrong decomposition, the wrong target.",
    "premature_termination": "The agent ends, gives up or hands off while required work is "
    "missing, or asserts a final answer without verifying it.",
    "looping": "The agent repeats the same action or message without making progress.",
    "environment_fault": "A tool or the environment failed or returned wrong data; not the "
    "agent's mistake.",
}


def taxonomy_text() -> str:
    """The taxonomy as a bullet list, for prompts and dataset cards."""
    return "\n".join(f"- {name}: {text}" for name, text in CATEGORIES.items())
