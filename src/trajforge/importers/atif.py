"""Harbor's Agent Trajectory Interchange Format (ATIF v1.0-v1.7), with Harbor trial verdicts.

A file is one JSON object `{schema_version "ATIF-vX.Y", session_id, agent{name, version,
model_name, tool_definitions, extra}, steps[], notes, final_metrics, continued_trajectory_ref,
extra}`; v1.7 adds `trajectory_id` and embedded `subagent_trajectories` (whole trajectories),
v1.6 lets a message be a list of content parts. A step is `{step_id (from 1), timestamp,
source (system|user|agent), model_name, reasoning_effort, message, reasoning_content,
tool_calls[{tool_call_id, function_name, arguments}], observation{results[{source_call_id,
content, subagent_trajectory_ref}]}, metrics{prompt_tokens, completion_tokens,
cached_tokens, cost_usd, prompt_token_ids, completion_token_ids, logprobs, extra}, extra}`.

Step mapping: each step is one message (system, user, assistant for `agent`) with
`extra["step_id"]`; its observation results follow it, one message each: a result that names
its call (`source_call_id`) is a tool message answering it, one that does not (an action
that is not a tool call, such as a terminal's output, or a system step's result) a user
message; both have `extra["observation_of_step"]` and keep the result's other fields
(`subagent_trajectory_ref`); a step's `extra["speaker"]` (trajforge's ATIF export writes a
multi-agent run's speakers there) is the message's `name`. So message index != step_id - 1
as soon as a step has an observation. The step's timestamp, model, reasoning and extra
are in `extra`; content parts stay a list. An agent step's `metrics` become an `LLMCall`
linked to its message, with the token ids and logprobs (ids are `step-<step_id>`, and
`seg<k>-step-<id>` in a continuation).

A trajectory continued in another file (`continued_trajectory_ref`, a path beside the file,
as context summarization writes it) is read as one run: the continuations' steps follow,
their messages marked `extra["segment"] = k`, their root fields in
`metadata["atif"]["continuations"]`; the continuation files are companions, not runs of
their own. Each embedded subagent trajectory (v1.7) is a run of its own (the same task and
run), linked by `metadata["atif"]["parent"]`; a subagent referenced by path is imported
from its own file. A version newer than 1.7 is read as 1.7 and the import report lists the
fields it does not know (they are kept).

Outcome: Harbor keeps the verdict beside the trajectory, in the trial folder
(`<trial>/agent/trajectory.json`): `<trial>/result.json` (`verifier_result.rewards.reward`,
`exception_info`, `task_name`, `trial_name`) or else `<trial>/verifier/reward.txt`; the reward
is the outcome's (`success` when it is at least 1, judged by `harbor-verifier`). Without one
the outcome is unknown. A run whose agent called `mark_task_complete` (or `finish`,
`submit`) ended `submitted`. The task id is the trial's `task_name`, else the session id;
the instruction is the first user step's message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajforge.errors import InputError
from trajforge.importers.base import first_char, load_json, record_problem, short_repr
from trajforge.importers.fields import (
    json_text,
    mapping,
    newer_version_warning,
    rest,
    sequence,
    unix_time,
    unknown_keys,
)
from trajforge.schema import (
    IMPORT_WARNINGS,
    Outcome,
    Source,
    Task,
    TerminationReason,
    Trajectory,
    Usage,
)

NEWEST = (1, 7)
_VERSION = re.compile(r"^ATIF-v(\d+)\.(\d+)")
_ROLES = {"system": "system", "user": "user", "agent": "assistant"}
_ROOT_KEYS = frozenset(
    [
        "schema_version",
        "session_id",
        "trajectory_id",
        "agent",
        "steps",
        "notes",
        "final_metrics",
        "continued_trajectory_ref",
        "extra",
        "subagent_trajectories",
    ]
)
_STEP_KEYS = frozenset(
    [
        "step_id",
        "timestamp",
        "source",
        "model_name",
        "reasoning_effort",
        "message",
        "reasoning_content",
        "tool_calls",
        "observation",
        "metrics",
        "extra",
    ]
)
_METRIC_IDS = ("prompt_token_ids", "completion_token_ids", "logprobs")
_COMPLETION_CALLS = {"mark_task_complete", "finish", "submit"}


class AtifImporter:
    name = "atif"
    description = "Harbor ATIF trajectory (ATIF-v1.x; continuations, subagents, trial verdict)"

    def detect(self, path: Path, head: bytes) -> bool:
        start = first_char(head) == b"{"
        return start and b'"schema_version"' in head and b'"ATIF-v' in head

    def read(self, path: Path) -> Iterator[Trajectory]:
        chain = _chain(path)
        try:
            yield from _trajectories(chain, _verdict(path))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(str(chain.failing or path), record_problem(exc), "$") from exc

    def sidecars(self, path: Path) -> list[Path]:
        try:
            continuations = _chain(path).files[1:]
        except InputError:
            return []
        trial = _trial_folder(path)
        verdicts = [] if trial is None else [trial / "result.json", trial / "verifier/reward.txt"]
        return continuations + [p for p in verdicts if p.is_file()]


@dataclass
class _Chain:
    """A trajectory file and the files that continue it, parsed."""

    files: list[Path] = field(default_factory=list)
    documents: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failing: Path | None = None


def _chain(path: Path) -> _Chain:
    chain = _Chain()
    current: Path | None = path
    while current is not None:
        data = load_json(current)
        if not isinstance(data, dict):
            raise InputError(str(current), "expected a JSON object (an ATIF trajectory)")
        chain.files.append(current)
        chain.documents.append(data)
        current = _continuation(current, data, chain)
    return chain


def _continuation(path: Path, data: dict[str, Any], chain: _Chain) -> Path | None:
    ref = data.get("continued_trajectory_ref")
    if not isinstance(ref, str) or not ref:
        return None
    following = path.parent / ref
    if following in chain.files:
        chain.warnings.append(f"continued_trajectory_ref {ref} loops back; not followed")
        return None
    if not following.is_file():
        chain.warnings.append(f"continued_trajectory_ref {ref} is not beside the file; not read")
        return None
    return following


def _trial_folder(path: Path) -> Path | None:
    """The Harbor trial folder of `<trial>/agent/<name>.json`, or None."""
    return path.parent.parent if path.parent.name == "agent" else None


@dataclass
class _Verdict:
    reward: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    task: str | None = None
    trial: str | None = None
    failed: bool = False


def _verdict(path: Path) -> _Verdict:
    trial = _trial_folder(path)
    if trial is None:
        return _Verdict()
    result = trial / "result.json"
    if result.is_file():
        return _verdict_of_result(result, load_json(result))
    reward_file = trial / "verifier" / "reward.txt"
    if reward_file.is_file():
        text = reward_file.read_text(errors="replace").strip()
        try:
            return _Verdict(reward=float(text), details={"reward_file": "verifier/reward.txt"})
        except ValueError:
            raise InputError(str(reward_file), f"not a number: {text[:40]!r}") from None
    return _Verdict()


def _verdict_of_result(path: Path, data: Any) -> _Verdict:
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object (a Harbor trial result)")
    verifier = data.get("verifier_result")
    verifier = verifier if isinstance(verifier, dict) else {}
    rewards = verifier.get("rewards")
    rewards = rewards if isinstance(rewards, dict) else verifier
    reward = rewards.get("reward")
    if reward is not None and not isinstance(reward, int | float):
        raise InputError(str(path), f"verifier_result reward is not a number: {reward!r}")
    details = {k: data[k] for k in ("verifier_result", "exception_info") if data.get(k)}
    return _Verdict(
        reward=None if reward is None else float(reward),
        details=details,
        task=_text(data.get("task_name")),
        trial=_text(data.get("trial_name")),
        failed=bool(data.get("exception_info")),
    )


def _trajectories(chain: _Chain, verdict: _Verdict) -> Iterator[Trajectory]:
    root = chain.documents[0]
    built = _Built(warnings=list(chain.warnings))
    for segment, (file, document) in enumerate(zip(chain.files, chain.documents, strict=True)):
        chain.failing = file
        _read_document(document, segment, built)
    chain.failing = chain.files[0]
    head = _root_fields(root)
    if len(chain.documents) > 1:
        head["continuations"] = [
            _root_fields(d) | {"file": f.name, "first_message": first}
            for f, d, first in zip(chain.files[1:], chain.documents[1:], built.firsts, strict=True)
        ]
    main = _trajectory(root, built, head, verdict, chain.files[0])
    yield main
    for index, sub in enumerate(sequence(root.get("subagent_trajectories"), "subagents")):
        yield from _subagent(mapping(sub, f"subagent_trajectories[{index}]"), main, verdict)


def _subagent(sub: dict[str, Any], parent: Trajectory, verdict: _Verdict) -> Iterator[Trajectory]:
    built = _Built(embedded=True)
    _read_document(sub, 0, built)
    head = _root_fields(sub)
    atif = parent.metadata["atif"]
    head["parent"] = {k: atif.get(k) for k in ("session_id", "trajectory_id")}
    source = Path(parent.source.file or "")
    traj = _trajectory(sub, built, head, verdict, source, task=parent.task)
    yield traj
    for index, nested in enumerate(sequence(sub.get("subagent_trajectories"), "subagents")):
        yield from _subagent(mapping(nested, f"subagent_trajectories[{index}]"), traj, verdict)


def _root_fields(document: dict[str, Any]) -> dict[str, Any]:
    return rest(document, "steps", "subagent_trajectories") | {
        "subagent_trajectories": [
            s.get("trajectory_id")
            for s in sequence(document.get("subagent_trajectories"), "subagent_trajectories")
            if isinstance(s, dict)
        ]
    }


@dataclass
class _Built:
    """Messages and calls read so far from the files of one run."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)
    submitted: bool = False
    embedded: bool = False
    """An embedded subagent trajectory, whose version may be left to its parent's."""


def _read_document(document: dict[str, Any], segment: int, built: _Built) -> None:
    if segment or "schema_version" in document or not built.embedded:
        _check_version(document, built.warnings)
    agent = mapping(document.get("agent"), "agent")
    if segment:
        built.firsts.append(len(built.messages))
    for index, step in enumerate(sequence(document.get("steps"), "steps")):
        _read_step(mapping(step, f"steps[{index}]"), f"steps[{index}]", segment, agent, built)


def _check_version(document: dict[str, Any], warnings: list[str]) -> None:
    version = document.get("schema_version")
    match = _VERSION.match(version) if isinstance(version, str) else None
    if not isinstance(version, str) or match is None:
        warnings.append(f"schema_version {version!r} is not ATIF-vX.Y; read as ATIF-v1.7")
        return
    if (int(match[1]), int(match[2])) <= NEWEST:
        return
    skipped = unknown_keys(document, _ROOT_KEYS)
    steps = [s for s in sequence(document.get("steps"), "steps") if isinstance(s, dict)]
    skipped += sorted({f"steps[].{k}" for s in steps for k in unknown_keys(s, _STEP_KEYS)})
    warnings.append(newer_version_warning("ATIF", version, "ATIF-v1.7", skipped))


def _read_step(
    step: dict[str, Any], where: str, segment: int, agent: dict[str, Any], built: _Built
) -> None:
    source = step.get("source")
    if source not in _ROLES:
        raise ValueError(f"{where}.source must be one of {sorted(_ROLES)}, got {source!r}")
    step_id = step.get("step_id")
    extra = {"step_id": step_id} | rest(
        step, "step_id", "source", "message", "tool_calls", "observation", "metrics"
    )
    if segment:
        extra["segment"] = segment
    raw_calls = sequence(step.get("tool_calls"), f"{where}.tool_calls")
    calls = [_tool_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(raw_calls)]
    built.submitted |= any(c["name"] in _COMPLETION_CALLS for c in calls)
    call_extra = [rest(c, "tool_call_id", "function_name", "arguments") for c in raw_calls]
    if any(call_extra):
        extra["tool_call_extra"] = call_extra
    observation = mapping(step.get("observation"), f"{where}.observation")
    if rest(observation, "results"):
        extra["observation_extra"] = rest(observation, "results")
    message_index = len(built.messages)
    content = step.get("message")
    speaker = mapping(step.get("extra"), f"{where}.extra").get("speaker")
    built.messages.append(
        {
            "role": _ROLES[source],
            "content": content,
            "name": speaker if isinstance(speaker, str) else None,
            "tool_calls": calls or None,
            "extra": extra,
        }
    )
    if "metrics" in step:
        metrics = mapping(step["metrics"], f"{where}.metrics")
        built.calls.append(_llm_call(step, metrics, message_index, segment, agent))
    results = sequence(observation.get("results"), f"{where}.observation.results")
    for k, result in enumerate(results):
        result = mapping(result, f"{where}.observation.results[{k}]")
        built.messages.append(_observation_message(result, step_id, segment))


def _tool_call(raw: Any, where: str) -> dict[str, Any]:
    call = mapping(raw, where)
    name = call.get("function_name")
    if not isinstance(name, str):
        raise ValueError(f"{where}: function_name must be a string, got {name!r}")
    call_id = call.get("tool_call_id")
    if not isinstance(call_id, str):
        raise ValueError(f"{where}: tool_call_id must be a string, got {call_id!r}")
    return {"id": call_id, "name": name, "arguments": json_text(call.get("arguments", {}))}


def _observation_message(result: dict[str, Any], step_id: Any, segment: int) -> dict[str, Any]:
    call_id = result.get("source_call_id")
    extra = {"observation_of_step": step_id} | rest(result, "source_call_id", "content")
    if segment:
        extra["segment"] = segment
    return {
        "role": "tool" if call_id is not None else "user",
        "content": result.get("content"),
        "tool_call_id": None if call_id is None else str(call_id),
        "extra": extra,
    }


def _llm_call(
    step: dict[str, Any],
    metrics: dict[str, Any],
    message_index: int,
    segment: int,
    agent: dict[str, Any],
) -> dict[str, Any]:
    where = f"step {step.get('step_id')}"
    _check_counts(metrics, f"{where} metrics")
    model = step.get("model_name") or agent.get("model_name")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"{where}: model_name must be a string, got {short_repr(model)}")
    prompt, completion = metrics.get("prompt_tokens"), metrics.get("completion_tokens")
    total = prompt + completion if isinstance(prompt, int) and isinstance(completion, int) else None
    prefix = f"seg{segment}-" if segment else ""
    used = ("prompt_tokens", "completion_tokens", "cost_usd", *_METRIC_IDS)
    return {
        "id": f"{prefix}step-{step.get('step_id')}",
        "message_index": message_index,
        "model": model,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": total,
            "cost": metrics.get("cost_usd"),
        },
        "started_at": unix_time(step.get("timestamp")),
        "extra": rest(metrics, *used),
    } | {key: metrics[key] for key in _METRIC_IDS if metrics.get(key) is not None}


_COUNTS = {"prompt_tokens": "an integer", "completion_tokens": "an integer"}
_COUNTS |= {"cached_tokens": "an integer", "cost_usd": "a number"}


def _check_counts(metrics: dict[str, Any], where: str) -> None:
    """Token counts and cost of a step's metrics (their lists are checked with the run)."""
    for key, kind in _COUNTS.items():
        value = metrics.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if value is not None and not (number and (kind == "a number" or isinstance(value, int))):
            raise ValueError(f"{where}: {key} must be {kind}, got {short_repr(value)}")


def _trajectory(
    document: dict[str, Any],
    built: _Built,
    head: dict[str, Any],
    verdict: _Verdict,
    path: Path,
    task: Task | None = None,
) -> Trajectory:
    agent = mapping(document.get("agent"), "agent")
    session = document.get("session_id") or document.get("trajectory_id")
    warnings = built.warnings
    metadata: dict[str, Any] = {"atif": head} | ({IMPORT_WARNINGS: warnings} if warnings else {})
    return Trajectory.model_validate(
        dict(
            task=task
            or Task(
                id=verdict.task or str(session or path.stem),
                instruction=_first_user_text(built.messages),
            ),
            source=Source(
                harness=_text(agent.get("name")),
                model=_text(agent.get("model_name")) or _first_model(built.calls),
                run=verdict.trial,
                file=str(path),
                format="atif",
            ),
            messages=built.messages,
            tools=sequence(agent.get("tool_definitions"), "agent.tool_definitions"),
            outcome=_outcome(verdict, built),
            usage=_usage(mapping(document.get("final_metrics"), "final_metrics"), built.calls),
            llm_calls=built.calls,
            metadata=metadata,
        )
    )


def _outcome(verdict: _Verdict, built: _Built) -> Outcome:
    reason: TerminationReason | None = "error" if verdict.failed else None
    if reason is None and built.submitted:
        reason = "submitted"
    reward = verdict.reward
    return Outcome(
        success=None if reward is None else reward >= 1.0,
        reward=reward,
        judged_by=None if reward is None else "harbor-verifier",
        termination_reason=reason,
        details=verdict.details,
    )


def _usage(final: dict[str, Any], calls: list[dict[str, Any]]) -> Usage:
    if "total_prompt_tokens" in final or "total_completion_tokens" in final:
        prompt, completion = final.get("total_prompt_tokens"), final.get("total_completion_tokens")
        total = (prompt or 0) + (completion or 0)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=total,
            cost=final.get("total_cost_usd"),
        )
    counts = [Usage(**{k: v for k, v in c["usage"].items() if k != "cost"}) for c in calls]
    return Usage.summed(counts, cost=final.get("total_cost_usd")) if counts else Usage()


def _first_user_text(messages: list[dict[str, Any]]) -> str | None:
    for message in messages:
        if message["role"] == "user" and "observation_of_step" not in message["extra"]:
            content = message["content"]
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else None
    return None


def _first_model(calls: list[dict[str, Any]]) -> str | None:
    return next((c["model"] for c in calls if isinstance(c.get("model"), str)), None)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
