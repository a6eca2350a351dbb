"""Localization against the task's recorded gold actions (tau-bench logs carry them).

The environment judges a tau task by its final database, so only successful write calls
matter. Walking the run in order, each successful write either consumes a matching gold write
or is the decisive error; when every write matched but gold writes are still missing, the
decisive error is the omission at the agent's last message.
"""

from __future__ import annotations

from typing import Any

import orjson

from trajforge.diagnose.evidence import (
    calls_with_results,
    canonical_arguments,
    excerpt,
    gold_actions,
    is_error_text,
    is_write,
)
from trajforge.diagnose.model import Correction, Diagnosis, Evidence
from trajforge.diagnose.taxonomy import Category
from trajforge.schema import ToolCall, Trajectory

AUTH_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details")
HANDOFF_TOOLS = ("transfer_to_human_agents",)
AUTH_ENVS = {"tau-retail", "tau2-retail"}
"""Domains whose policy requires authenticating the user (by email, or name and zip)."""
TAU_ENVS = {"tau-retail", "tau-airline", "tau", "tau2-retail", "tau2-airline"}


def gold_call(action: dict[str, Any], call_id: str = "correction") -> ToolCall:
    """A gold action `{name, kwargs}` as a tool call."""
    arguments = orjson.dumps(action.get("kwargs") or {}, option=orjson.OPT_SORT_KEYS).decode()
    return ToolCall(id=call_id, name=action["name"], arguments=arguments)


def localize_by_gold(traj: Trajectory) -> Diagnosis | None:
    """The first successful write that no gold write matches, else the omission at the end."""
    gold = gold_actions(traj)
    if gold is None:
        return None
    remaining = [a for a in gold if is_write(a["name"])]
    for index, call, result in calls_with_results(traj):
        if not is_write(call.name) or _failed(traj, result):
            continue
        match = _matching(remaining, call)
        if match is None:
            return _wrong_write(traj, index, call, result, remaining)
        skipped = skipped_before(remaining, match)
        if skipped:
            return _out_of_order(traj, index, call, skipped[0])
        remaining.remove(match)
    if remaining:
        return _omission(traj, remaining)
    return None


TARGET_KEYS = ("order_id", "reservation_id", "user_id")
"""Arguments naming the record a write changes; writes to one record do not commute."""


def _target(action: dict[str, Any]) -> tuple[str, str] | None:
    kwargs = action.get("kwargs") or {}
    return next(((k, str(kwargs[k])) for k in TARGET_KEYS if k in kwargs), None)


def skipped_before(remaining: list[dict[str, Any]], match: dict[str, Any]) -> list[dict]:
    """Gold writes listed before `match`, still undone, that change the same record."""
    target = _target(match)
    earlier = remaining[: remaining.index(match)]
    return [a for a in earlier if target is not None and _target(a) == target]


def _out_of_order(traj: Trajectory, index: int, call: ToolCall, skipped: dict) -> Diagnosis:
    return Diagnosis(
        trajectory_id=traj.id,
        method="heuristic",
        step=index,
        agent=traj.messages[index].name or "assistant",
        category="wrong_plan",
        explanation=out_of_order_text(index, call, skipped),
        evidence=[Evidence(message_index=index, quote=call.name, note="done too early")],
        correction=Correction(tool_call=gold_call(skipped), source="gold"),
        details={"detector": "gold-order"},
    )


def out_of_order_text(index: int, call: ToolCall, skipped: dict) -> str:
    return (
        f"message {index} makes a needed {call.name} call too early: {skipped['name']} on the "
        "same record had to come first, and once this write is done that record can no longer "
        "reach the goal state"
    )


def _failed(traj: Trajectory, result: int | None) -> bool:
    return result is not None and is_error_text(traj.messages[result].text())


def _matching(remaining: list[dict[str, Any]], call: ToolCall) -> dict[str, Any] | None:
    wanted = canonical_arguments(call.arguments)
    for action in remaining:
        same_name = action["name"] == call.name
        if same_name and canonical_arguments(action.get("kwargs") or {}) == wanted:
            return action
    return None


def _wrong_write(
    traj: Trajectory, index: int, call: ToolCall, result: int | None, remaining: list[dict]
) -> Diagnosis:
    same_name = [a for a in remaining if a["name"] == call.name]
    intended = same_name[0] if same_name else (remaining[0] if remaining else None)
    evidence = [Evidence(message_index=index, quote=call.name, note="the write that went wrong")]
    if result is not None:
        evidence.append(
            Evidence(
                message_index=result,
                quote=excerpt(traj.messages[result].text(), 60),
                note="its result: the state changed",
            )
        )
    category, explanation = classify_wrong_write(traj, index, call, intended, same_name)
    evidence.extend(support_for(traj, index, intended))
    return Diagnosis(
        trajectory_id=traj.id,
        method="heuristic",
        step=index,
        agent=traj.messages[index].name or "assistant",
        category=category,
        explanation=explanation,
        evidence=evidence,
        correction=_gold_correction(intended),
        details={"detector": "gold-diff"},
    )


def classify_wrong_write(
    traj: Trajectory, index: int, call: ToolCall, intended: dict | None, same_name: list
) -> tuple[Category, str]:
    """Category and explanation of a wrong write, given the write the goal needed."""
    if call.name in HANDOFF_TOOLS:
        needed = intended["name"] if intended else "no hand-off"
        return "premature_termination", (
            f"message {index} hands the user off to a human agent while the task still "
            f"needs {needed}: the agent gives up on work it could do"
        )
    if traj.task.environment in AUTH_ENVS and not _authenticated_before(traj, index):
        return "policy_violation", (
            f"message {index} calls {call.name} before the user was authenticated; the policy "
            "requires identifying the user first, and the write does not match the task's goal"
        )
    if intended is None:
        return "wrong_plan", (
            f"message {index} calls {call.name}, but the task needs no further write: the "
            "change is unwanted and makes the final state wrong"
        )
    if not same_name:
        return "wrong_plan", (
            f"message {index} calls {call.name} where the task needs {intended['name']}: the "
            "agent took a different action than the goal requires"
        )
    diff = _argument_diff(call, intended)
    return "tool_misuse", (
        f"message {index} calls {call.name} with wrong arguments ({diff}); the write succeeded, "
        "so the final state can no longer match the goal"
    )


def _authenticated_before(traj: Trajectory, index: int) -> bool:
    return any(call.name in AUTH_TOOLS and i < index for i, call, _ in calls_with_results(traj))


def _argument_diff(call: ToolCall, intended: dict) -> str:
    try:
        got = call.parsed_arguments()
    except ValueError:
        return "arguments are not a JSON object"
    wanted = intended.get("kwargs") or {}
    keys = sorted(set(got) | set(wanted))
    parts = [
        f"{k}: got {_short(got.get(k))}, expected {_short(wanted.get(k))}"
        for k in keys
        if canonical_arguments({"v": got.get(k)}) != canonical_arguments({"v": wanted.get(k)})
    ]
    return "; ".join(parts) or "argument formatting differs"


def _short(value: Any) -> str:
    return excerpt(orjson.dumps(value).decode(), 60)


def support_for(traj: Trajectory, index: int, intended: dict | None) -> list[Evidence]:
    """Earlier messages that mention a value the intended write needs (what the agent had)."""
    if intended is None:
        return []
    found: list[Evidence] = []
    for value in _scalar_values(intended.get("kwargs") or {}):
        for i in range(index):
            text = traj.messages[i].text()
            if traj.messages[i].role in ("user", "tool") and value in text:
                found.append(Evidence(message_index=i, quote=value, note="the needed value"))
                break
        if len(found) >= 2:
            break
    return found


def _scalar_values(kwargs: dict[str, Any]) -> list[str]:
    values = []
    for value in kwargs.values():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value)
            if len(text) >= 3:
                values.append(text)
    return values


def _gold_correction(intended: dict | None) -> Correction:
    if intended is None:
        return Correction(
            message="Do not make this change; confirm the remaining request with the user.",
            source="gold",
        )
    return Correction(tool_call=gold_call(intended), source="gold")


def _omission(traj: Trajectory, remaining: list[dict[str, Any]]) -> Diagnosis:
    last = max(traj.assistant_indices(), default=len(traj.messages) - 1)
    missing = ", ".join(a["name"] for a in remaining)
    text = traj.messages[last].text() if last >= 0 else ""
    transfer = any(
        c.name == "transfer_to_human_agents" for c in traj.messages[last].tool_calls or []
    )
    how = "hands the user off" if transfer else "ends the conversation"
    return Diagnosis(
        trajectory_id=traj.id,
        method="heuristic",
        step=last,
        agent=traj.messages[last].name or "assistant",
        category="premature_termination",
        explanation=(
            f"every write the agent made was right, but at message {last} it {how} with "
            f"required actions never done: {missing}"
        ),
        evidence=[Evidence(message_index=last, quote=excerpt(text, 60), note="the last step")],
        correction=Correction(tool_call=gold_call(remaining[0]), source="gold"),
        omission=True,
        details={"detector": "gold-diff", "missing": [a["name"] for a in remaining]},
    )
