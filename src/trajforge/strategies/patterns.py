"""Action keys of a run and the check of a precedence rule against it.

A run's actions are its tool calls, each named by an action key: the tool name, or for
environments whose calls aim at a named thing (household: `go` to `cabinet 2`) the tool and the
thing's kind (`go:cabinet`), so that a rule speaks about every world of a family and not one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import orjson

from trajforge.schema import StrategyRule, StrategySupport, ToolCall, Trajectory


def _tool_key(call: ToolCall) -> str:
    return call.name


def _household_key(call: ToolCall) -> str:
    """`go` to `cabinet 2` -> `go:cabinet`; a call without a target is its tool name."""
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        return call.name
    target = args.get("target") if isinstance(args, dict) else None
    if not isinstance(target, str) or not target:
        return call.name
    return f"{call.name}:{target.rsplit(' ', 1)[0] if target[-1:].isdigit() else target}"


ACTION_KEYS: dict[str, Callable[[ToolCall], str]] = {"household": _household_key}
"""Environment -> how its calls are named; any other environment names a call by its tool."""


def action_key_of(environment: str | None) -> Callable[[ToolCall], str]:
    return ACTION_KEYS.get(environment or "", _tool_key)


def first_calls(run: Trajectory) -> dict[str, int]:
    """Action key -> message index of its first call in the run."""
    key_of = action_key_of(run.task.environment)
    first: dict[str, int] = {}
    for index, message in enumerate(run.messages):
        for call in message.tool_calls or []:
            first.setdefault(key_of(call), index)
    return first


class RuleCheck(NamedTuple):
    """How one run stands to a rule: whether it followed it, and the message that shows it."""

    followed: bool
    message_index: int


def check(rule: StrategyRule, first: dict[str, int]) -> RuleCheck | None:
    """None when the run never calls `rule.then` (the rule says nothing about it)."""
    then = first.get(rule.then)
    if then is None:
        return None
    before = first.get(rule.first)
    if before is not None and before < then:
        return RuleCheck(True, before)
    return RuleCheck(False, then)


def support(rule: StrategyRule, runs: Iterable[tuple[dict[str, int], bool]]) -> StrategySupport:
    """Counts of runs (their first calls and success) that followed or broke the rule."""
    counts = StrategySupport()
    for first, success in runs:
        checked = check(rule, first)
        if checked is None:
            continue
        counts.runs += 1
        if checked.followed:
            counts.followed += 1
            counts.followed_successes += success
        else:
            counts.violated += 1
            counts.violated_successes += success
    return counts


_PHRASES = {"go": "go to a {}", "open": "open a {}", "close": "close a {}"}


def _phrase(key: str) -> str:
    verb, _, what = key.partition(":")
    return _PHRASES.get(verb, verb + " a {}").format(what)


def render(rule: StrategyRule) -> str:
    """The rule as guidance: "Call `a` before the first `b`.", or for kinds of thing
    "Before you go to a countertop, go to a cabinet first."
    """
    if ":" in rule.first and ":" in rule.then:
        return f"Before you {_phrase(rule.then)}, {_phrase(rule.first)} first."
    return f"Call `{rule.first}` before the first `{rule.then}`."
