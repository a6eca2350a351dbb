"""The rules of an ATIF-v1.5 document (Harbor's RFC 0001), checked field by field.

`atif_errors(document)` lists every violation as `path: problem`: the required fields of
the root, the agent, each step, tool call, observation result and subagent reference; their
types; no field the RFC does not define; `step_id` counting 1, 2, 3...; `source` one of
system, user, agent, and the agent-only fields (`model_name`, `reasoning_effort`,
`reasoning_content`, `tool_calls`, `metrics`) on agent steps only; each observation
result's `source_call_id` naming a tool call of its own step; tool-call ids unique; ISO 8601
timestamps; token ids integers and logprobs numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

VERSION = "ATIF-v1.5"

_Check = Callable[[Any], bool]
_Spec = dict[str, tuple[bool, _Check]]


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _object(value: Any) -> bool:
    return isinstance(value, dict)


def _array(value: Any) -> bool:
    return isinstance(value, list)


def _integers(value: Any) -> bool:
    return isinstance(value, list) and all(_integer(v) for v in value)


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(_number(v) for v in value)


def _effort(value: Any) -> bool:
    return _string(value) or _number(value)


_KIND: dict[_Check, str] = {
    _string: "a string",
    _integer: "an integer",
    _number: "a number",
    _object: "an object",
    _array: "an array",
    _integers: "an array of integers",
    _numbers: "an array of numbers",
    _effort: "a string or a number",
}

# field -> (required, check) for each object of the format
ROOT: _Spec = {
    "schema_version": (True, _string),
    "session_id": (True, _string),
    "agent": (True, _object),
    "steps": (True, _array),
    "notes": (False, _string),
    "final_metrics": (False, _object),
    "continued_trajectory_ref": (False, _string),
    "extra": (False, _object),
}
AGENT: _Spec = {
    "name": (True, _string),
    "version": (True, _string),
    "model_name": (False, _string),
    "tool_definitions": (False, _array),
    "extra": (False, _object),
}
FINAL_METRICS: _Spec = {
    "total_prompt_tokens": (False, _integer),
    "total_completion_tokens": (False, _integer),
    "total_cached_tokens": (False, _integer),
    "total_cost_usd": (False, _number),
    "total_steps": (False, _integer),
    "extra": (False, _object),
}
STEP: _Spec = {
    "step_id": (True, _integer),
    "timestamp": (False, _string),
    "source": (True, _string),
    "model_name": (False, _string),
    "reasoning_effort": (False, _effort),
    "message": (True, _string),
    "reasoning_content": (False, _string),
    "tool_calls": (False, _array),
    "observation": (False, _object),
    "metrics": (False, _object),
    "extra": (False, _object),
}
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")
TOOL_CALL: _Spec = {
    "tool_call_id": (True, _string),
    "function_name": (True, _string),
    "arguments": (True, _object),
}
OBSERVATION: _Spec = {"results": (True, _array)}
RESULT: _Spec = {
    "source_call_id": (False, _string),
    "content": (False, _string),
    "subagent_trajectory_ref": (False, _array),
}
SUBAGENT_REF: _Spec = {
    "session_id": (True, _string),
    "trajectory_path": (False, _string),
    "extra": (False, _object),
}
METRICS: _Spec = {
    "prompt_tokens": (False, _integer),
    "completion_tokens": (False, _integer),
    "cached_tokens": (False, _integer),
    "cost_usd": (False, _number),
    "prompt_token_ids": (False, _integers),
    "completion_token_ids": (False, _integers),
    "logprobs": (False, _numbers),
    "extra": (False, _object),
}
SOURCES = ("system", "user", "agent")
_VERSION = re.compile(r"^ATIF-v\d+\.\d+$")


def atif_errors(document: Any) -> list[str]:
    """Every way `document` breaks the ATIF-v1.5 rules (empty when it is valid)."""
    errors: list[str] = []
    if not _fields(document, ROOT, "$", errors):
        return errors
    if not _VERSION.match(document["schema_version"]):
        errors.append(f"$.schema_version: not ATIF-vX.Y: {document['schema_version']!r}")
    _fields(document["agent"], AGENT, "$.agent", errors)
    if "final_metrics" in document:
        _fields(document["final_metrics"], FINAL_METRICS, "$.final_metrics", errors)
    for index, step in enumerate(document["steps"]):
        _step(step, index, errors)
    return errors


def _fields(
    value: Any, spec: dict[str, tuple[bool, _Check]], where: str, errors: list[str]
) -> bool:
    """Check an object's fields against `spec`; False when it is not an object at all."""
    if not isinstance(value, dict):
        errors.append(f"{where}: must be an object")
        return False
    for name, (required, check) in spec.items():
        if name not in value:
            if required:
                errors.append(f"{where}: missing required field '{name}'")
        elif not check(value[name]):
            errors.append(f"{where}.{name}: must be {_KIND[check]}")
    errors.extend(f"{where}.{name}: not a field of ATIF" for name in value if name not in spec)
    return True


def _step(step: Any, index: int, errors: list[str]) -> None:
    where = f"$.steps[{index}]"
    if not _fields(step, STEP, where, errors):
        return
    if step.get("step_id") != index + 1:
        errors.append(f"{where}.step_id: must be {index + 1} (step ids count from 1)")
    source = step.get("source")
    if source not in SOURCES:
        errors.append(f"{where}.source: must be one of {', '.join(SOURCES)}, got {source!r}")
    elif source != "agent":
        errors.extend(f"{where}.{f}: only agent steps have it" for f in AGENT_ONLY if f in step)
    if "timestamp" in step and not _iso_time(step["timestamp"]):
        errors.append(f"{where}.timestamp: not an ISO 8601 time: {step['timestamp']!r}")
    call_ids = _tool_calls(step.get("tool_calls"), where, errors)
    if "metrics" in step:
        _fields(step["metrics"], METRICS, f"{where}.metrics", errors)
    if "observation" in step:
        _observation(step["observation"], call_ids, f"{where}.observation", errors)


def _tool_calls(calls: Any, where: str, errors: list[str]) -> set[str]:
    ids: set[str] = set()
    for k, call in enumerate(calls if isinstance(calls, list) else []):
        if _fields(call, TOOL_CALL, f"{where}.tool_calls[{k}]", errors):
            call_id = call.get("tool_call_id")
            if call_id in ids:
                errors.append(f"{where}.tool_calls[{k}].tool_call_id: {call_id!r} used twice")
            ids.add(call_id)
    return ids


def _observation(observation: Any, call_ids: set[str], where: str, errors: list[str]) -> None:
    if not _fields(observation, OBSERVATION, where, errors):
        return
    results = observation.get("results")
    for k, result in enumerate(results if isinstance(results, list) else []):
        here = f"{where}.results[{k}]"
        if not _fields(result, RESULT, here, errors):
            continue
        call_id = result.get("source_call_id")
        if call_id is not None and call_id not in call_ids:
            errors.append(f"{here}.source_call_id: {call_id!r} is no tool call of this step")
        refs = result.get("subagent_trajectory_ref")
        for r, ref in enumerate(refs if isinstance(refs, list) else []):
            _fields(ref, SUBAGENT_REF, f"{here}.subagent_trajectory_ref[{r}]", errors)


def _iso_time(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
