"""Inspect AI evaluation logs: `.eval` (a zip) and the older `.json` log; one run per sample.

An `.eval` file holds `header.json` (`version`, `status`, `eval` (task, model, run ids,
config), `plan`, `results`, `stats`), one `samples/<id>_epoch_<n>.json` per sample and
epoch, `summaries.json`, `reductions.json` and `_journal/` (a log still being written has
`_journal/start.json` but no `header.json`: the header is read from the journal and a
warning says so). A `.json` log is the same header with `samples` and `reductions` inside.
Log format versions 1-3 are read; in version 3 a sample also has a `message_pool` (each
message once) and its model events name their input by `input_refs` (`[start, end)` ranges
of the pool) instead of repeating it. A newer version is read as version 3 and the import
report lists the sample fields it does not know (kept in metadata). Strings
`attachment://<hash>` anywhere in a sample are replaced by the sample's `attachments[hash]`.
Older logs keep a sample's events and attachments in `transcript{events, content}` and a
single `score`: they are read the same way.

Step mapping: message index = position in the sample's `messages` (a sample with none,
one that failed before its first model call, has its `input` as messages). Inspect has no step
numbers: its model events become `llm_calls`, in event order, each linked to the assistant
message whose `id` is its output message's id (`message_index`), with the output (and its
`logprobs`, whose values also go to `LLMCall.logprobs`), usage, time and the request:
`input_refs` in version 3; in version 2 `input`, where a message that is one of the run's
messages is named by its id. Inspect writes no token ids. Messages keep Inspect's own
fields in `extra` (`id`, `source`, `model`, a tool result's `function` and `error`, a tool
call's `view`/`parse_error` in `extra["tool_call_details"]`); content parts (text,
reasoning, images) stay a list. Messages carry no speaker, so `name` is unset.

Outcome: from the sample's `scores`, the scorer the header's `results` lists first (else the
first scored): `C`/`I`/`P`/`N` are 1 / 0 / 0.5 / 0 and numbers and booleans their value;
`success` is reward >= 1 (a score that is a dict or a list gives a reward of None and an
unknown success). All scores and the sample's reductions are in `outcome.details`. A sample
`error` ends the run with `error`, a `limit` with the matching limit reason. No scores:
unknown.

The task is the sample (`id`, `input` as instruction, `target` as gold, its metadata,
epoch, choices, files, setup and sandbox in `task.data`) in the environment named by the
eval's `task`; the model and run id come from `eval`. The header, the sample's other
fields, its non-model events and a version 3 pool (messages of the run named by id) are in
`metadata["inspect"]`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import InputError
from trajforge.importers.base import base_name, first_char, load_json, record_problem
from trajforge.importers.fields import (
    json_text,
    mapping,
    newer_version_warning,
    rest,
    sequence,
    unix_time,
    unknown_keys,
)
from trajforge.schema import IMPORT_WARNINGS, Outcome, Source, Task, Trajectory, Usage

NEWEST_VERSION = 3
ATTACHMENT = "attachment://"
_ROLES = ("system", "user", "assistant", "tool")
_SAMPLE_KEYS = frozenset(
    [
        "id",
        "epoch",
        "input",
        "choices",
        "target",
        "sandbox",
        "files",
        "setup",
        "messages",
        "output",
        "scores",
        "metadata",
        "store",
        "events",
        "model_usage",
        "total_time",
        "working_time",
        "uuid",
        "error",
        "error_retries",
        "attachments",
        "limit",
        "message_pool",
        "started_at",
        "completed_at",
        "invalidation",
        "role_usage",
        "transcript",
        "score",
    ]
)
_TASK_FIELDS = ("epoch", "metadata", "choices", "files", "setup", "sandbox")
_SCORE_WORDS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
_LIMITS = {
    "message": "max_steps",
    "token": "max_tokens",
    "context": "max_tokens",
    "time": "max_wall_time",
    "working": "max_wall_time",
}


class InspectImporter:
    name = "inspect"
    description = "Inspect AI eval log (.eval zip or .json; one run per sample)"

    def detect(self, path: Path, head: bytes) -> bool:
        if head[:4] == b"PK\x03\x04":
            return base_name(path).endswith(".eval") or b"_journal/start.json" in head
        if first_char(head) != b"{":
            return False
        return all(key in head for key in (b'"version"', b'"eval"', b'"run_id"', b'"task_id"'))

    def read(self, path: Path) -> Iterator[Trajectory]:
        if base_name(path).endswith(".json") or path.suffix == ".gz":
            yield from _read_json_log(path)
        else:
            yield from _read_eval_zip(path)

    def sidecars(self, path: Path) -> list[Path]:
        return []


class _Log:
    """The header of one log, shared by its samples."""

    def __init__(self, path: Path, header: dict[str, Any], warnings: list[str]) -> None:
        self.path = path
        self.header = header
        self.warnings = warnings
        version = header.get("version")
        self.version = version if isinstance(version, int) else NEWEST_VERSION
        self.reductions = sequence(header.get("reductions"), "reductions")

    @property
    def spec(self) -> dict[str, Any]:
        return mapping(self.header.get("eval"), "eval")

    def primary_scorer(self) -> str | None:
        results = mapping(self.header.get("results"), "results")
        scores = sequence(results.get("scores"), "results.scores")
        first = scores[0] if scores and isinstance(scores[0], dict) else {}
        name = first.get("name")
        return name if isinstance(name, str) else None


def _read_json_log(path: Path) -> Iterator[Trajectory]:
    data = load_json(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object (an Inspect log)")
    try:
        samples = sequence(data.get("samples"), "samples")
        log = _Log(path, rest(data, "samples"), [])
    except ValueError as exc:
        raise InputError(str(path), str(exc), "$") from exc
    for index, sample in enumerate(samples):
        yield _convert(log, sample, f"samples[{index}]")


def _read_eval_zip(path: Path) -> Iterator[Trajectory]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(str(path), f"not a readable .eval (zip) file: {exc}") from exc
    with archive:
        names = archive.namelist()
        log = _Log(path, _zip_header(archive, path, names), [])
        log.reductions = _zip_member(archive, path, "reductions.json", names) or []
        for name in names:
            if name.startswith("samples/") and name.endswith(".json"):
                yield _convert(log, _zip_member(archive, path, name, names), name)


def _zip_header(archive: zipfile.ZipFile, path: Path, names: list[str]) -> dict[str, Any]:
    header = _zip_member(archive, path, "header.json", names)
    warnings = []
    if header is None:
        header = _zip_member(archive, path, "_journal/start.json", names)
        warnings.append("no header.json (the log was not finished): header from _journal")
    if not isinstance(header, dict):
        raise InputError(str(path), "no header.json or _journal/start.json object in the log")
    header = dict(header)
    header[IMPORT_WARNINGS] = warnings
    return header


def _zip_member(archive: zipfile.ZipFile, path: Path, name: str, names: list[str]) -> Any:
    if name not in names:
        return None
    try:
        return orjson.loads(archive.read(name))
    except orjson.JSONDecodeError as exc:
        raise InputError(str(path), f"malformed JSON: {exc}", name) from exc
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise InputError(str(path), f"cannot read the member: {exc}", name) from exc


def _convert(log: _Log, sample: Any, record: str) -> Trajectory:
    try:
        return _sample_to_trajectory(log, mapping(sample, "sample"))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(str(log.path), record_problem(exc), record) from exc


def _sample_to_trajectory(log: _Log, raw: dict[str, Any]) -> Trajectory:
    warnings = list(log.header.get(IMPORT_WARNINGS) or [])
    if log.version > NEWEST_VERSION:
        skipped = unknown_keys(raw, _SAMPLE_KEYS)
        warnings.append(newer_version_warning("log format", str(log.version), "3", skipped))
    raw = _older_layout(raw)
    sample = _resolved(raw, mapping(raw.get("attachments"), "attachments"), warnings)
    messages = [
        _message(m, f"messages[{i}]")
        for i, m in enumerate(sequence(sample.get("messages"), "messages") or _input(sample))
    ]
    ids = {m["extra"]["id"]: i for i, m in enumerate(messages) if "id" in m["extra"]}
    calls, events, tools = _model_calls(sequence(sample.get("events"), "events"), ids)
    header = rest(log.header, "reductions", IMPORT_WARNINGS)
    spec = log.spec
    inspect: dict[str, Any] = {
        "header": header,
        "sample": rest(sample, *_MAPPED_SAMPLE_KEYS),
        "events": events,
    }
    if "message_pool" in sample:
        pool = sequence(sample["message_pool"], "message_pool")
        inspect["message_pool"] = [_pool_entry(m, ids) for m in pool]
    return Trajectory.model_validate(
        dict(
            task=_task(sample, spec),
            source=Source(
                harness="inspect-ai",
                model=_text(spec.get("model")),
                run=_text(spec.get("run_id")),
                file=str(log.path),
                format="inspect",
            ),
            messages=messages,
            tools=tools,
            outcome=_outcome(sample, log),
            usage=_usage(sample),
            llm_calls=calls,
            metadata={"inspect": inspect} | ({IMPORT_WARNINGS: warnings} if warnings else {}),
        )
    )


_MAPPED_SAMPLE_KEYS = (
    "id",
    "input",
    "target",
    "messages",
    "events",
    "attachments",
    "message_pool",
    "scores",
    *_TASK_FIELDS,
)


def _older_layout(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample of an older log in the current layout: events and attachments in
    `transcript{events, content}`, a single `score` instead of `scores`."""
    transcript = sample.get("transcript")
    if "events" not in sample and isinstance(transcript, dict):
        content = mapping(transcript.get("content"), "transcript.content")
        attachments = mapping(sample.get("attachments"), "attachments")
        moved = {"events": transcript.get("events"), "attachments": content | attachments}
        sample = rest(sample, "transcript") | moved
    if "scores" not in sample and isinstance(sample.get("score"), dict):
        sample = sample | {"scores": {"score": sample["score"]}}
    return sample


def _input(sample: dict[str, Any]) -> list[Any]:
    """The sample's input as messages: the run of a sample that failed before its first
    model call (its `messages` empty) is what it was given."""
    value = sample.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value, "source": "input"}]
    return value if isinstance(value, list) else []


def _resolved(value: Any, attachments: dict[str, Any], warnings: list[str]) -> Any:
    """`value` with every `attachment://<hash>` string replaced by its attachment."""
    if isinstance(value, str):
        if not value.startswith(ATTACHMENT):
            return value
        key = value[len(ATTACHMENT) :]
        if key in attachments:
            return attachments[key]
        note = f"attachment {key} is not in the sample's attachments (kept as a reference)"
        if note not in warnings:
            warnings.append(note)
        return value
    if isinstance(value, dict):
        return {k: _resolved(v, attachments, warnings) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolved(v, attachments, warnings) for v in value]
    return value


def _message(raw: Any, where: str) -> dict[str, Any]:
    record = mapping(raw, where)
    role = record.get("role")
    if role not in _ROLES:
        raise ValueError(f"{where}: role must be one of {list(_ROLES)}, got {role!r}")
    extra = rest(record, "role", "content", "tool_calls", "tool_call_id")
    raw_calls = sequence(record.get("tool_calls"), f"{where}.tool_calls")
    calls = [_tool_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(raw_calls)]
    details = [rest(c, "id", "function", "arguments", "type") for c in raw_calls]
    if any(details):
        extra["tool_call_details"] = details
    return {
        "role": role,
        "content": record.get("content"),
        "tool_calls": calls or None,
        "tool_call_id": record.get("tool_call_id"),
        "extra": extra,
    }


def _tool_call(raw: Any, where: str) -> dict[str, Any]:
    call = mapping(raw, where)
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else function
    if not isinstance(name, str):
        raise ValueError(f"{where}: the call has no function name")
    arguments = function.get("arguments") if isinstance(function, dict) else call.get("arguments")
    return {"id": str(call.get("id") or where), "name": name, "arguments": json_text(arguments)}


def _pool_entry(message: Any, ids: dict[str, int]) -> Any:
    """A pool message: its id when it is one of the run's messages, else the message."""
    if isinstance(message, dict) and message.get("id") in ids:
        return message["id"]
    return message


def _model_calls(
    events: list[Any], ids: dict[str, int]
) -> tuple[list[dict[str, Any]], list[Any], list[dict[str, Any]]]:
    """(llm_calls of the model events, the other events, the first call's tools)."""
    calls: list[dict[str, Any]] = []
    others: list[Any] = []
    tools: list[dict[str, Any]] = []
    for position, event in enumerate(events):
        if not isinstance(event, dict) or event.get("event") != "model":
            others.append(event)
            continue
        if not calls:
            tools = [_openai_tool(t) for t in sequence(event.get("tools"), "tools")]
        calls.append(_model_call(event, ids, f"events[{position}]"))
    return calls, others, tools


def _openai_tool(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict) or "function" in tool:
        return tool if isinstance(tool, dict) else {"tool": tool}
    function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    return {"type": "function", "function": function}


def _model_call(event: dict[str, Any], ids: dict[str, int], where: str) -> dict[str, Any]:
    output = mapping(event.get("output"), f"{where}.output")
    choices = sequence(output.get("choices"), f"{where}.output.choices")
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    request: dict[str, Any] = {
        k: event[k] for k in ("tools", "tool_choice", "config") if k in event
    }
    if "input_refs" in event:
        request["input_refs"] = event["input_refs"]
    if event.get("input") or "input_refs" not in event:
        inputs = sequence(event.get("input"), f"{where}.input")
        request["input"] = [_pool_entry(m, ids) for m in inputs]
    used = ("event", "model", "input", "input_refs", "tools", "tool_choice", "config", "output")
    return {
        "id": str(event.get("uuid") or output.get("id") or where),
        "message_index": ids.get(str(message.get("id"))),
        "model": _text(output.get("model") or event.get("model")),
        "request": request,
        "response": output,
        "logprobs": _logprobs(choice.get("logprobs")),
        "latency_s": output.get("time"),
        "usage": _call_usage(mapping(output.get("usage"), f"{where}.output.usage")),
        "started_at": unix_time(event.get("timestamp")),
        "error": _text(event.get("error")),
        "extra": rest(event, *used, "error"),
    }


def _logprobs(raw: Any) -> list[float] | None:
    content = raw.get("content") if isinstance(raw, dict) else None
    if not isinstance(content, list):
        return None
    return [float(t["logprob"]) for t in content if isinstance(t, dict) and "logprob" in t]


def _call_usage(usage: dict[str, Any]) -> dict[str, Any]:
    output = usage.get("output_tokens")
    total = usage.get("total_tokens")
    prompt = total - output if isinstance(total, int) and isinstance(output, int) else None
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": total}


def _usage(sample: dict[str, Any]) -> Usage:
    """The sample's `model_usage` over all models: prompt tokens are all input tokens, cached
    or not (total - output, as Inspect counts its total)."""
    per_model = mapping(sample.get("model_usage"), "model_usage")
    calls = [Usage(**_call_usage(mapping(u, "model_usage"))) for u in per_model.values()]
    wall = sample.get("total_time")
    wall_time = float(wall) if isinstance(wall, int | float) else None
    if not calls:
        return Usage(wall_time_s=wall_time)
    return Usage.summed(calls, wall_time_s=wall_time)


def _task(sample: dict[str, Any], spec: dict[str, Any]) -> Task:
    if "id" not in sample:
        raise KeyError("id")
    return Task(
        id=str(sample["id"]),
        environment=_text(spec.get("task")),
        instruction=_instruction(sample.get("input")),
        gold=sample.get("target"),
        data={k: sample[k] for k in _TASK_FIELDS if k in sample}
        | ({"input": sample["input"]} if not isinstance(sample.get("input"), str) else {}),
    )


def _instruction(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    texts = []
    for message in value if isinstance(value, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(p.get("text")) for p in content if isinstance(p, dict) and "text" in p)
    return "\n".join(texts) or None


def _outcome(sample: dict[str, Any], log: _Log) -> Outcome:
    scores = mapping(sample.get("scores"), "scores")
    reductions = [_reduction(r, sample.get("id")) for r in log.reductions]
    details: dict[str, Any] = {"scores": scores} if scores else {}
    if any(reductions):
        details["reductions"] = [r for r in reductions if r]
    scorer = log.primary_scorer()
    if scorer not in scores:
        scorer = next(iter(scores), None)
    reward = None
    if scorer is not None:
        score = scores[scorer]
        reward = _score_value(score.get("value") if isinstance(score, dict) else score)
    return Outcome.model_validate(
        {
            "success": None if reward is None else reward >= 1.0,
            "reward": reward,
            "judged_by": None if scorer is None else f"inspect-scorer:{scorer}",
            "termination_reason": _termination(sample),  # a limit's own word kept
            "details": details,
        }
    )


def _reduction(entry: Any, sample_id: Any) -> dict[str, Any] | None:
    if not isinstance(entry, dict):
        return None
    for reduced in entry.get("samples") or []:
        if isinstance(reduced, dict) and str(reduced.get("sample_id")) == str(sample_id):
            return {"scorer": entry.get("scorer"), **reduced}
    return None


def _score_value(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        if value in _SCORE_WORDS:
            return _SCORE_WORDS[value]
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _termination(sample: dict[str, Any]) -> str | None:
    if sample.get("error"):
        return "error"
    limit = sample.get("limit")
    if isinstance(limit, dict) and isinstance(limit.get("type"), str):
        kind = limit["type"]
        return _LIMITS.get(kind, f"{kind}_limit")
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict) and "message" in value:
        return str(value["message"])
    return value if isinstance(value, str) else orjson.dumps(value).decode()
