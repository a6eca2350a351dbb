"""Tool definitions and dispatch with tau-bench's output conventions.

A tool is a plain function `fn(db, **arguments) -> str`. It reports a failure by raising
`ToolError("what went wrong")`; the agent then sees `Error: what went wrong`. Any other
exception (wrong argument names or types) is shown the same way, as tau-bench does.
Records and lists are returned as `json.dumps` text (Python's default separators), which
is byte-for-byte what the recorded runs contain.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from trajforge.envs.tau.db import TauDB
from trajforge.errors import ToolError

ToolFn = Callable[..., str]


@dataclass(frozen=True)
class Tool:
    """One tool: its OpenAI schema and implementation."""

    name: str
    description: str
    fn: ToolFn
    properties: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: bool = False
    """True when the tool can change the database (gold write actions, distance)."""
    ends_episode: bool = False

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": self.properties,
                    "required": list(self.properties),
                },
            },
        }


def string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def integer(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def array(description: str, items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "description": description, "items": items}


def dumps(value: Any) -> str:
    """JSON text exactly as tau-bench's tools print it."""
    return json.dumps(value)


@dataclass
class CallOutcome:
    content: str
    error: bool
    tool: Tool | None


def run_tool(tools: dict[str, Tool], db: TauDB, name: str, arguments: str) -> CallOutcome:
    """Execute one call; never raises (errors become `Error: ...` text)."""
    tool = tools.get(name)
    if tool is None:
        return CallOutcome(f"Unknown action {name}", True, None)
    try:
        kwargs = orjson.loads(arguments or "{}")
        if not isinstance(kwargs, dict):
            raise ToolError("arguments must be a JSON object")
        content = tool.fn(db, **kwargs)
    except orjson.JSONDecodeError as exc:
        return CallOutcome(f"Error: invalid JSON arguments: {exc}", True, tool)
    except Exception as exc:  # the agent sees every tool failure, as in tau-bench
        return CallOutcome(f"Error: {exc}", True, tool)
    return CallOutcome(content, content.startswith("Error:"), tool)


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_ALLOWED_CHARS = set("0123456789+-*/(). ")


def calculate(db: TauDB, expression: str) -> str:
    """Arithmetic on numbers with + - * / and parentheses, rounded to 2 decimals."""
    if not all(char in _ALLOWED_CHARS for char in expression):
        raise ToolError("invalid characters in expression")
    tree = ast.parse(expression, mode="eval")
    return str(round(float(_arithmetic(tree.body)), 2))


def _arithmetic(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.operand))
    raise ToolError("invalid expression")


def think(db: TauDB, thought: str) -> str:
    """Noting a thought changes nothing and returns nothing."""
    return ""


def transfer_to_human_agents(db: TauDB, summary: str) -> str:
    return "Transfer successful"


COMMON_TOOLS = [
    Tool(
        "calculate",
        "Evaluate an arithmetic expression (numbers, + - * /, parentheses); the result is "
        "rounded to two decimals.",
        calculate,
        {"expression": string("The expression, e.g. '2 * (3 + 4.5)'.")},
    ),
    Tool(
        "think",
        "Write down a thought or plan. Changes nothing and returns nothing.",
        think,
        {"thought": string("The thought.")},
    ),
    Tool(
        "transfer_to_human_agents",
        "Hand the customer over to a human agent, with a summary of the issue. Only when the "
        "customer explicitly asks for a human, or the request cannot be handled with the "
        "available tools under the policy.",
        transfer_to_human_agents,
        {"summary": string("A summary of the customer's issue.")},
        ends_episode=True,
    ),
]
