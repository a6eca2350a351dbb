"""ATIF out: each stored run as an ATIF-v1.5 trajectory (Harbor's RFC 0001, its newest version).

`--out DIR` writes one `<run id>.json` per run; `--out FILE.json` a single run (exactly one
must be selected). Every document is checked against the RFC's rules (`atif_rules`) before
it is written.

Mapping (the reverse of the `atif` importer): each system, user and assistant message is a
step (`system`, `user`, `agent`; step ids 1, 2, ...); tool messages, and user messages that
an ATIF import marked as observations, are the observation results of the step before them
(a tool message names its call by `source_call_id` when that step made the call). An
assistant message's tool calls keep their ids, names and arguments (arguments that are not
a JSON object go to the step's `extra["arguments_text"]`, the call gets `{}`); its
`LLMCall` gives the step's `metrics`: token counts, cost, prompt and completion token ids,
logprobs. Content parts are joined into the step's text and kept in
`extra["content_parts"]`; a message's speaker (`name`) is `extra["speaker"]`. The
timestamp is the one an ATIF import kept, else the call's start. A run imported from ATIF
gets its root fields back (session id, agent version and extra, notes, final metrics,
extra; fields newer than v1.5 in `extra["atif_fields"]`); any other run has its trajforge
id, task, source and outcome in `extra["trajforge"]`, and final metrics from its usage.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import UserError
from trajforge.export.atif_rules import (
    AGENT,
    FINAL_METRICS,
    METRICS,
    ROOT,
    STEP,
    SUBAGENT_REF,
    VERSION,
    atif_errors,
)
from trajforge.outputs import atomic_output
from trajforge.schema import LLMCall, Message, Trajectory
from trajforge.store import Store, TrajectoryFilter

_SOURCES = {"system": "system", "user": "user", "assistant": "agent"}
_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content")


def write_atif(store: Store, flt: TrajectoryFilter, out: Path) -> int:
    """The selected runs as ATIF files (see the module docstring); returns how many."""
    runs = store.query(flt)
    if out.suffix.lower() == ".json":
        selected = list(runs)
        if len(selected) != 1:
            raise UserError(
                f"{out}: an ATIF file holds one run and {len(selected)} are selected; "
                "give a folder to --out, or select one run"
            )
        _write(_document(selected[0]), out)
        return 1
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out}: cannot make the folder: {exc.strerror}") from None
    count = 0
    for traj in runs:
        _write(_document(traj), out / f"{traj.id}.json")
        count += 1
    return count


def _document(traj: Trajectory) -> dict[str, Any]:
    try:
        return to_atif(traj)
    except ValueError as exc:
        raise UserError(f"{exc}; nothing written for it") from None


def _write(document: dict[str, Any], out: Path) -> None:
    with atomic_output(out) as tmp:
        tmp.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """One run as an ATIF-v1.5 document; raises ValueError if it would break the rules."""
    origin = traj.metadata.get("atif")
    origin = origin if isinstance(origin, dict) else {}
    steps = _Steps({c.message_index: c for c in reversed(traj.llm_calls)})
    for message in traj.messages:
        steps.add(message)
    document: dict[str, Any] = {
        "schema_version": VERSION,
        "session_id": str(origin.get("session_id") or traj.id or traj.content_id()),
        "agent": _agent(traj, origin),
        "steps": steps.steps,
    }
    document |= _root_rest(traj, origin)
    errors = atif_errors(document)
    if errors:
        raise ValueError(f"run {traj.id}: not valid ATIF: {errors[0]}")
    return document


def _agent(traj: Trajectory, origin: dict[str, Any]) -> dict[str, Any]:
    recorded = origin.get("agent")
    recorded = recorded if isinstance(recorded, dict) else {}
    agent: dict[str, Any] = {
        "name": str(recorded.get("name") or traj.source.harness or "trajforge"),
        "version": str(recorded.get("version") or "unknown"),
    }
    if traj.source.model:
        agent["model_name"] = traj.source.model
    if traj.tools:
        agent["tool_definitions"] = traj.tools
    if isinstance(recorded.get("extra"), dict):
        agent["extra"] = recorded["extra"]
    others = {k: v for k, v in recorded.items() if k not in AGENT}
    if others:
        agent.setdefault("extra", {})["atif_fields"] = others
    return agent


def _root_rest(traj: Trajectory, origin: dict[str, Any]) -> dict[str, Any]:
    if not origin:
        return {"final_metrics": _final_metrics(traj), "extra": {"trajforge": _identity(traj)}}
    restored = ("notes", "final_metrics", "extra")
    kept: dict[str, Any] = {k: origin[k] for k in restored if ROOT[k][1](origin.get(k))}
    if "final_metrics" in kept:
        kept["final_metrics"] = _known_fields(kept["final_metrics"], FINAL_METRICS)
    newer = {
        k: v
        for k, v in origin.items()
        if k not in kept and k not in _REBUILT and v not in (None, [], {})
    }
    if newer:
        kept["extra"] = {**(kept.get("extra") or {}), "atif_fields": newer}
    return kept


_REBUILT = ("schema_version", "session_id", "agent", "steps", "continuations")
"""Root fields of an imported run that the export writes anew (a chain is one file)."""


def _known_fields(value: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The fields of `value` that `spec` defines with the right type; the others (a newer
    version's) go to its `extra`."""
    known = {k: v for k, v in value.items() if k in spec and spec[k][1](v)}
    others = {k: v for k, v in value.items() if k not in known}
    if others:
        extra = known.get("extra")
        known["extra"] = {**(extra if isinstance(extra, dict) else {}), "atif_fields": others}
    return known


def _final_metrics(traj: Trajectory) -> dict[str, Any]:
    usage = traj.usage
    metrics: dict[str, Any] = {"total_steps": 0}
    if usage.prompt_tokens is not None:
        metrics["total_prompt_tokens"] = usage.prompt_tokens
    if usage.completion_tokens is not None:
        metrics["total_completion_tokens"] = usage.completion_tokens
    if usage.cost is not None:
        metrics["total_cost_usd"] = usage.cost
    metrics["total_steps"] = sum(1 for m in traj.messages if m.role != "tool")
    return metrics


def _identity(traj: Trajectory) -> dict[str, Any]:
    return {
        "id": traj.id,
        "task": traj.task.model_dump(mode="json", exclude_defaults=True),
        "source": traj.source.model_dump(mode="json", exclude_none=True),
        "outcome": traj.outcome.model_dump(mode="json", exclude_defaults=True),
    }


class _Steps:
    """Messages folded into steps, in order."""

    def __init__(self, calls: dict[int | None, LLMCall]) -> None:
        self.calls = calls
        self.steps: list[dict[str, Any]] = []
        self.index = -1

    def add(self, message: Message) -> None:
        self.index += 1
        if message.role == "tool" or "observation_of_step" in message.extra:
            self._observe(message)
            return
        source = _SOURCES[message.role]
        step: dict[str, Any] = {
            "step_id": len(self.steps) + 1,
            "source": source,
            "message": message.text(),
        }
        step |= _recorded_fields(message, source)
        extra = _step_extra(message)
        if message.tool_calls:
            step["tool_calls"] = _unique_ids([_tool_call(c, extra) for c in message.tool_calls])
        call = self.calls.get(self.index)
        if call is not None and source == "agent":
            step["metrics"] = _metrics(call)
            if "timestamp" not in step and call.started_at is not None:
                step["timestamp"] = datetime.fromtimestamp(call.started_at, UTC).isoformat()
        if extra:
            step["extra"] = extra
        self.steps.append(step)

    def _observe(self, message: Message) -> None:
        if not self.steps:
            self.steps.append({"step_id": 1, "source": "system", "message": ""})
        step = self.steps[-1]
        result: dict[str, Any] = {}
        call_ids = {c["tool_call_id"] for c in step.get("tool_calls", [])}
        if message.role == "tool" and message.tool_call_id in call_ids:
            result["source_call_id"] = message.tool_call_id
        if message.content is not None:
            result["content"] = message.text()
        refs = message.extra.get("subagent_trajectory_ref")
        if isinstance(refs, list):
            result["subagent_trajectory_ref"] = [_subagent_ref(r) for r in refs]
        step.setdefault("observation", {"results": []})["results"].append(result)


def _subagent_ref(ref: Any) -> dict[str, Any]:
    """A reference in v1.5 form: a v1.7 reference by `trajectory_id` names it as the session;
    fields v1.5 does not define go to its `extra`."""
    if not isinstance(ref, dict):
        return {"session_id": "unknown", "extra": {"reference": ref}}
    named = ref.get("session_id") or ref.get("trajectory_id") or "unknown"
    return _known_fields({**ref, "session_id": str(named)}, SUBAGENT_REF)


def _recorded_fields(message: Message, source: str) -> dict[str, Any]:
    """The step fields an ATIF import kept in the message's `extra`."""
    fields = {}
    timestamp = message.extra.get("timestamp")
    if isinstance(timestamp, str) and _is_iso(timestamp):
        fields["timestamp"] = timestamp
    for key in _AGENT_ONLY if source == "agent" else ():
        value = message.extra.get(key)
        if value is not None and STEP[key][1](value):
            fields[key] = value
    return fields


def _step_extra(message: Message) -> dict[str, Any]:
    recorded = message.extra.get("extra")
    extra = dict(recorded) if isinstance(recorded, dict) else {}
    if isinstance(message.content, list):
        extra["content_parts"] = message.content
    if message.name:
        extra["speaker"] = message.name
    return extra


def _tool_call(call: Any, extra: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        arguments = {}
        extra.setdefault("arguments_text", {})[call.id] = call.arguments
    return {"tool_call_id": call.id, "function_name": call.name, "arguments": arguments}


def _unique_ids(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls of one step with distinct ids (ATIF links results to calls by id): a repeated
    id gets `#2`, `#3`..."""
    seen: set[str] = set()
    for call in calls:
        base, number = call["tool_call_id"], 1
        while call["tool_call_id"] in seen:
            number += 1
            call["tool_call_id"] = f"{base}#{number}"
        seen.add(call["tool_call_id"])
    return calls


def _metrics(call: LLMCall) -> dict[str, Any]:
    usage = call.usage
    metrics: dict[str, Any] = {}
    if usage is not None:
        for name, value in (
            ("prompt_tokens", usage.prompt_tokens),
            ("completion_tokens", usage.completion_tokens),
            ("cost_usd", usage.cost),
        ):
            if value is not None:
                metrics[name] = value
    for name in ("cached_tokens", "extra"):
        value = call.extra.get(name)
        if value is not None and METRICS[name][1](value):
            metrics[name] = value
    for name in ("prompt_token_ids", "completion_token_ids", "logprobs"):
        value = getattr(call, name)
        if value is not None:
            metrics[name] = value
    return metrics


def _is_iso(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
