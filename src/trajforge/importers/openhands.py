"""OpenHands runs: evaluation `output.jsonl` (one instance per line) and event-list trajectories.

An evaluation line is `{instance_id, instruction, instance, metadata{agent_class,
llm_config, dataset, ...}, history[], metrics{accumulated_cost, accumulated_token_usage,
response_latencies, token_usages, costs}, error, test_result{git_patch, report}}`; a saved
trajectory is the `history` alone, a JSON array of events (or an object with `history`).
Older outputs hold `history` as `[action, observation]` pairs; they are read flattened. An
event is an action (`action`: system, message, run, read, edit, think, finish, recall, ...)
or an observation (`observation`, answering the action whose id is its `cause`), with `id`,
`source` (agent, user, environment), `message`, `args` / `content` / `extras`, and, when a
model call produced it, `tool_call_metadata{function_name, tool_call_id, model_response,
total_calls_in_response}`.

Step mapping (event ids are OpenHands' own; `extra["event_id"]` keeps them): the `system`
action is the system message (its `args.tools` the run's tools); a `message` action is a
user or assistant message by its source; the actions one model response produced (same
`model_response.id`) are one assistant message, with the response's text and every tool
call, and `extra["event_ids"]` listing them; an observation with `tool_call_metadata` is the
tool message answering its call. An agent action no tool call produced (older, text-based
CodeAct histories) is an assistant message with its `thought` (else its `message`), and
the observation it caused a user message. Other events (`recall`, state changes, observations that
answer no call) reached the model only through OpenHands' prompt building, so they are not
messages: they are kept in `metadata["openhands"]["other_events"]`. Each model response is
an `LLMCall` (its usage, latency from `metrics.response_latencies`, the raw response),
linked to its assistant message; OpenHands keeps no token ids. Event fields other than
those mapped stay in the message's `extra` (the response itself only in the call).

A line whose `history` is empty (the instance failed before its first event) is a run of
one user message, its `instruction` (`extra["from_instruction"]`), with its `error`.

Outcome: from the line's `test_result.report.resolved` (SWE-bench evaluation output),
else from a verdict file beside it: `<name>.report.json` or `report.json` with
`resolved_ids` / `unresolved_ids` (the SWE-bench harness summary); otherwise unknown.
`error` ends the run with `max_steps` (the maximum iteration) or `error`; a `finish`
action with `submitted`. The task is the instance (`instance_id`, `instruction`, gold
`patch` or `fix_patch`, the instance in `task.data`), the model `metadata.llm_config.model`
(secrets left out), the patch the agent made is `task.data["git_patch"]`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajforge.errors import InputError
from trajforge.importers.base import (
    WHOLE_FILE,
    LineRange,
    base_name,
    first_char,
    first_line_has_keys,
    iter_jsonl,
    load_json,
    record_problem,
)
from trajforge.importers.fields import json_text, mapping, rest, sequence
from trajforge.schema import Outcome, Source, Task, TerminationReason, Trajectory, Usage

_SECRET_WORDS = ("key", "secret", "token", "password")
_NOT_SPOKEN = {"recall", "change_agent_state", "condensation", "condensation_request", "null"}
"""Agent actions that are OpenHands' own bookkeeping, not something the model said."""
_DATASET_ENVIRONMENTS = {"swe": "swe-bench"}


class OpenHandsImporter:
    name = "openhands"
    description = "OpenHands evaluation output.jsonl or event-list trajectory"

    def detect(self, path: Path, head: bytes) -> bool:
        # cheap byte searches first: detection runs on every file of an import
        if b'"source"' not in head and b'"instance_id"' not in head:
            return False
        start = first_char(head)
        if start == b"{" and _evaluation_line_head(head):
            return True
        if start not in (b"[", b"{") or b'"timestamp"' not in head:
            return False
        compact = head.replace(b'": ', b'":')
        events = b'"source":"' in compact and b'"timestamp":' in compact
        kinds = b'"action":"' in compact or b'"observation":"' in compact
        return events and kinds and (start == b"[" or b'"history":' in compact)

    def read(self, path: Path) -> Iterator[Trajectory]:
        return self.read_lines(path, WHOLE_FILE)

    def read_lines(self, path: Path, lines: LineRange) -> Iterator[Trajectory]:
        """The runs of `lines` of an output.jsonl; an event list is one JSON document, read
        whole with the part that starts the file (the others give nothing)."""
        if not _is_jsonl(path):
            if lines.start == 0:
                yield _event_list(path)
            return
        verdicts = _verdicts(path)
        for number, record in iter_jsonl(path, lines):
            try:
                yield _evaluation_line(mapping(record, "line"), path, verdicts)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise InputError(str(path), record_problem(exc), f"line {number}") from exc

    def sidecars(self, path: Path) -> list[Path]:
        return [p for p in _verdict_files(path) if p.is_file()] if _is_jsonl(path) else []


def _evaluation_line_head(head: bytes) -> bool:
    """Whether `head` opens an output.jsonl line: `instance_id` with `history`, or, when the
    line is longer than the head (a long instance before the history), with `instruction`
    and `metadata`; and `instruction` or `test_result` (a SWE-bench instance list has
    neither)."""
    if not (b'"instruction"' in head or b'"test_result"' in head):
        return False
    return first_line_has_keys(head, "instance_id", "history") or first_line_has_keys(
        head, "instance_id", "instruction", "metadata"
    )


def _is_jsonl(path: Path) -> bool:
    return base_name(path).endswith(".jsonl")


def _verdict_files(path: Path) -> list[Path]:
    stem = base_name(path).removesuffix(".jsonl")
    return [path.parent / f"{stem}.report.json", path.parent / "report.json"]


def _verdicts(path: Path) -> dict[str, bool]:
    """instance id -> resolved, from the first verdict file beside `path`."""
    for candidate in _verdict_files(path):
        if candidate.is_file():
            data = load_json(candidate)
            if not isinstance(data, dict):
                raise InputError(str(candidate), "expected a JSON object (a SWE-bench report)")
            resolved = {str(i): True for i in data.get("resolved_ids") or []}
            return {str(i): False for i in data.get("unresolved_ids") or []} | resolved
    return {}


def _event_list(path: Path) -> Trajectory:
    data = load_json(path)
    try:
        events = data.get("history") if isinstance(data, dict) else data
        run = _Run(_flattened(sequence(events, "history")))
        return _trajectory(run, path, {}, None)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(str(path), record_problem(exc), "$") from exc


def _flattened(events: list[Any]) -> list[dict[str, Any]]:
    """Events in order; older outputs pair each action with its observation."""
    flat = []
    for position, event in enumerate(events):
        parts = event if isinstance(event, list) else [event]
        for part in parts:
            flat.append(mapping(part, f"history[{position}]"))
    return flat


def _evaluation_line(line: dict[str, Any], path: Path, verdicts: dict[str, bool]) -> Trajectory:
    run = _Run(_flattened(sequence(line.get("history"), "history")))
    instruction = line.get("instruction")
    if not run.messages and isinstance(instruction, str):
        # an instance that failed before its first event: the run is the task it was given
        extra = {"from_instruction": True}
        run.messages.append({"role": "user", "content": instruction, "extra": extra})
    instance_id = line.get("instance_id")
    if instance_id is None:
        raise KeyError("instance_id")
    resolved = _resolved(mapping(line.get("test_result"), "test_result"))
    if resolved is None:
        resolved = verdicts.get(str(instance_id))
    return _trajectory(run, path, line, resolved)


def _resolved(test_result: dict[str, Any]) -> bool | None:
    report = test_result.get("report")
    if isinstance(report, dict) and isinstance(report.get("resolved"), bool):
        return report["resolved"]
    value = test_result.get("resolved")
    return value if isinstance(value, bool) else None


@dataclass
class _Run:
    """Events read into messages, calls and the events that are not messages."""

    events: list[dict[str, Any]]
    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    tools: list[Any] = field(default_factory=list)
    finished: bool = False
    _by_response: dict[str, int] = field(default_factory=dict)
    _text_actions: set[Any] = field(default_factory=set)

    def __post_init__(self) -> None:
        for position, event in enumerate(self.events):
            self._read(event, f"history[{position}]")

    def _read(self, event: dict[str, Any], where: str) -> None:
        metadata = event.get("tool_call_metadata")
        action = event.get("action")
        if "observation" in event:
            self._observation(event, metadata)
        elif action == "system":
            self.tools = sequence(mapping(event.get("args"), f"{where}.args").get("tools"), "tools")
            self.messages.append(_plain_message("system", event, "content"))
        elif isinstance(metadata, dict):
            self._model_action(event, metadata, where)
        elif action == "message":
            role = "user" if event.get("source") == "user" else "assistant"
            self.messages.append(_plain_message(role, event, "content"))
        elif event.get("source") == "agent" and action not in _NOT_SPOKEN:
            self._text_actions.add(event.get("id"))
            self.messages.append(_plain_message("assistant", event, "thought"))
        else:
            self.others.append(event)
        self.finished |= action == "finish"

    def _observation(self, event: dict[str, Any], metadata: Any) -> None:
        if isinstance(metadata, dict):
            self._tool_result(event, metadata)
        elif event.get("cause") in self._text_actions and event.get("observation") != "null":
            message = _plain_message("user", event, "content")
            message["content"] = event.get("content")
            self.messages.append(message)
        else:
            self.others.append(event)

    def _model_action(self, event: dict[str, Any], metadata: dict[str, Any], where: str) -> None:
        response = mapping(metadata.get("model_response"), f"{where}.model_response")
        response_id = str(response.get("id") or f"event-{event.get('id')}")
        if response_id in self._by_response:
            message = self.messages[self._by_response[response_id]]
            message["extra"]["event_ids"].append(event.get("id"))
            message["extra"]["events"].append(_event_rest(event))
            _add_call(message, metadata, event)
            return
        choice = _first_choice(response)
        message = {
            "role": "assistant",
            "content": choice.get("content") if "content" in choice else event.get("message"),
            "tool_calls": _response_calls(choice),
            "extra": {"event_ids": [event.get("id")], "events": [_event_rest(event)]},
        }
        if message["tool_calls"] is None:
            message["tool_calls"] = []
            _add_call(message, metadata, event)
        self._by_response[response_id] = len(self.messages)
        self.calls.append(_llm_call(response_id, response, len(self.messages)))
        self.messages.append(message)

    def _tool_result(self, event: dict[str, Any], metadata: dict[str, Any]) -> None:
        extra = {"event_id": event.get("id")} | _event_rest(event)
        call_id = metadata.get("tool_call_id")
        self.messages.append(
            {
                "role": "tool",
                "content": event.get("content"),
                "tool_call_id": None if call_id is None else str(call_id),
                "extra": extra,
            }
        )


def _first_choice(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else {}
    message = first.get("message") if isinstance(first, dict) else None
    return message if isinstance(message, dict) else {}


def _response_calls(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    calls = choice.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    found = []
    for position, call in enumerate(calls):
        function = mapping(mapping(call, "tool_calls").get("function"), "tool_calls.function")
        name = function.get("name")
        if not isinstance(name, str):
            raise ValueError(f"model_response tool_calls[{position}] has no function name")
        found.append(
            {
                "id": str(call.get("id") or f"call_{position}"),
                "name": name,
                "arguments": json_text(function.get("arguments", "{}")),
            }
        )
    return found


def _add_call(message: dict[str, Any], metadata: dict[str, Any], event: dict[str, Any]) -> None:
    """A call named only by the event (its response had no `tool_calls` to read)."""
    call_id = str(metadata.get("tool_call_id") or f"event-{event.get('id')}")
    if any(call["id"] == call_id for call in message["tool_calls"]):
        return
    arguments = rest(mapping(event.get("args"), "args"), "thought")
    name = metadata.get("function_name")
    name = name if isinstance(name, str) else str(event.get("action"))
    message["tool_calls"].append({"id": call_id, "name": name, "arguments": json_text(arguments)})


def _event_rest(event: dict[str, Any]) -> dict[str, Any]:
    """An event's fields, its model response left out (the `LLMCall` keeps it)."""
    kept = rest(event, "tool_call_metadata")
    metadata = event.get("tool_call_metadata")
    if isinstance(metadata, dict):
        kept["tool_call_metadata"] = rest(metadata, "model_response")
    return kept


def _plain_message(role: str, event: dict[str, Any], key: str) -> dict[str, Any]:
    args = mapping(event.get("args"), "args")
    content = args.get(key) or event.get("message")
    extra = {"event_id": event.get("id")} | rest(event, "id")
    if role == "system":
        extra["args"] = rest(args, "tools")
    return {"role": role, "content": content, "extra": extra}


def _llm_call(response_id: str, response: dict[str, Any], index: int) -> dict[str, Any]:
    usage = mapping(response.get("usage"), "model_response.usage")
    return {
        "id": response_id,
        "message_index": index,
        "model": response.get("model") if isinstance(response.get("model"), str) else None,
        "response": response,
        "usage": {
            k: usage.get(k) if isinstance(usage.get(k), int) else None
            for k in ("prompt_tokens", "completion_tokens", "total_tokens")
        },
        "started_at": response.get("created")
        if isinstance(response.get("created"), int | float)
        else None,
    }


def _trajectory(run: _Run, path: Path, line: dict[str, Any], resolved: bool | None) -> Trajectory:
    metadata = mapping(line.get("metadata"), "metadata")
    metrics = mapping(line.get("metrics"), "metrics")
    _add_latencies(run.calls, metrics)
    instance = mapping(line.get("instance"), "instance")
    config = mapping(metadata.get("llm_config"), "metadata.llm_config")
    test_result = mapping(line.get("test_result"), "test_result")
    return Trajectory.model_validate(
        dict(
            task=Task(
                id=str(line.get("instance_id") or base_name(path).split(".")[0]),
                environment=_environment(metadata),
                instruction=line.get("instruction") or _first_user(run.messages),
                gold=instance.get("patch") or instance.get("fix_patch"),
                data=({"instance": instance} if instance else {}) | _git_patch(line, test_result),
            ),
            source=Source(
                harness="openhands",
                model=config.get("model")
                if isinstance(config.get("model"), str)
                else next((c["model"] for c in run.calls if c["model"]), None),
                file=str(path),
                format="openhands",
            ),
            messages=run.messages,
            tools=run.tools,
            outcome=_outcome(line, resolved, run.finished),
            usage=_usage(metrics, run.calls),
            llm_calls=run.calls,
            metadata={
                "openhands": {
                    "metadata": _without_secrets(metadata),
                    "metrics": metrics,
                    "test_result": rest(test_result, "git_patch"),
                    "other_events": run.others,
                }
                | rest(line, *_LINE_FIELDS)
            },
        )
    )


_LINE_FIELDS = (
    "instance_id",
    "instruction",
    "instance",
    "metadata",
    "metrics",
    "history",
    "test_result",
)


def _git_patch(line: dict[str, Any], test_result: dict[str, Any]) -> dict[str, Any]:
    """The patch the agent made: `test_result.git_patch`, or at the top in older outputs."""
    patch = test_result.get("git_patch", line.get("git_patch"))
    return {} if patch is None else {"git_patch": patch}


def _add_latencies(calls: list[dict[str, Any]], metrics: dict[str, Any]) -> None:
    latencies = {
        str(entry.get("response_id")): entry.get("latency")
        for entry in sequence(metrics.get("response_latencies"), "metrics.response_latencies")
        if isinstance(entry, dict)
    }
    for call in calls:
        latency = latencies.get(call["id"])
        if isinstance(latency, int | float):
            call["latency_s"] = float(latency)


def _environment(metadata: dict[str, Any]) -> str | None:
    dataset = metadata.get("dataset")
    if not isinstance(dataset, str):
        return None
    lowered = dataset.lower()
    return next((env for word, env in _DATASET_ENVIRONMENTS.items() if word in lowered), dataset)


def _first_user(messages: list[dict[str, Any]]) -> str | None:
    for message in messages:
        if message["role"] == "user" and isinstance(message["content"], str):
            return message["content"]
    return None


def _outcome(line: dict[str, Any], resolved: bool | None, finished: bool) -> Outcome:
    error = line.get("error")
    reason: TerminationReason | None = None
    if isinstance(error, str) and error:
        reason = "max_steps" if "maximum iteration" in error else "error"
    elif finished:
        reason = "submitted"
    return Outcome(
        success=resolved,
        reward=None if resolved is None else float(resolved),
        judged_by=None if resolved is None else "swe-bench-harness",
        termination_reason=reason,
        details={"error": error} if error else {},
    )


def _usage(metrics: dict[str, Any], calls: list[dict[str, Any]]) -> Usage:
    total = mapping(metrics.get("accumulated_token_usage"), "metrics.accumulated_token_usage")
    cost = metrics.get("accumulated_cost")
    cost = float(cost) if isinstance(cost, int | float) else None
    prompt, completion = total.get("prompt_tokens"), total.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            cost=cost,
        )
    counts = [Usage(**call["usage"]) for call in calls]
    return Usage.summed(counts, cost=cost) if counts else Usage(cost=cost)


def _without_secrets(value: Any) -> Any:
    """Configuration with credential fields (api keys, secrets) left out."""
    if isinstance(value, dict):
        return {
            k: _without_secrets(v)
            for k, v in value.items()
            if not any(word in str(k).lower() for word in _SECRET_WORDS)
        }
    if isinstance(value, list):
        return [_without_secrets(v) for v in value]
    return value
