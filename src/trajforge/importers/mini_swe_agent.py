"""mini-swe-agent `.traj.json` files, with SWE-bench verdicts found beside them.

A file holds one run: `{info{exit_status, submission, model_stats, config}, messages[],
trajectory_format, instance_id}`. Actions are bash blocks in assistant text; observations
are user messages with `<returncode>` / `<output>`.

Step mapping: message index = position in `messages` (0 system, 1 the task prompt, then
assistant/user pairs). mini-swe-agent's "step" k (its k-th model call) is the k-th assistant
message. Each assistant message keeps its raw model response, with token usage, in
`Message.extra["response"]`; each also gets an `LLMCall` with that usage.

mini-swe-agent 2.x (`trajectory_format` `mini-swe-agent-1.1`) uses native tool calls
(`tool_calls` on assistant messages, `tool` results) and ends with a record of role `exit`
whose `extra` holds the exit status and the submission. That record never reached the
model, so it is not a message: its `extra` goes to `metadata["exit"]`, its exit status to
the outcome's termination reason and its submission to the task data (when `info` does not
already give them).

Verdicts: for `.../trajs/<id>/<id>.traj.json` the importer reads `.../logs/<id>/report.json`
(the SWE-bench harness report), else `.../results_summary.json`; both are consumed as
sidecars when importing a folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajforge.importers.base import base_name, load_json, read_one_run
from trajforge.openai_wire import message_list, text_of
from trajforge.schema import Outcome, Source, Task, Trajectory, Usage

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "cost")
_PR = re.compile(r"<pr_description>(.*?)</pr_description>", re.S)


class MiniSweAgentImporter:
    name = "mini-swe-agent"
    description = "mini-swe-agent .traj.json (with SWE-bench report.json beside it)"

    def detect(self, path: Path, head: bytes) -> bool:
        if base_name(path).endswith(".traj.json"):
            return head.lstrip()[:1] == b"{"
        return b'"messages"' in head and b'"mini-swe-agent' in head

    def read(self, path: Path) -> Iterator[Trajectory]:
        yield read_one_run(path, _to_trajectory)

    def sidecars(self, path: Path) -> list[Path]:
        instance = _instance_from_path(path)
        found = [p for p in (_report_path(path, instance), _summary_path(path)) if _exists(p)]
        return found


def _instance_from_path(path: Path) -> str:
    return base_name(path).removesuffix(".traj.json")


def _exists(path: Path) -> bool:
    """Whether a companion file exists (an instance id too long for a file name: no)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _report_path(path: Path, instance: str) -> Path:
    return path.parent.parent.parent / "logs" / instance / "report.json"


def _summary_path(path: Path) -> Path:
    return path.parent.parent.parent / "results_summary.json"


def _to_trajectory(data: dict[str, Any], path: Path) -> Trajectory:
    info = data.get("info") or {}
    if not isinstance(info, dict):
        raise ValueError(f"info: expected an object, got {type(info).__name__}")
    instance = str(data.get("instance_id") or _instance_from_path(path))
    records, exit_record = _split_exit(data["messages"])
    info = {**exit_record, **{k: v for k, v in info.items() if v is not None}}
    messages = message_list(records, "messages")
    calls = _llm_calls(messages)
    raw_config = info.get("config")
    config = raw_config if isinstance(raw_config, dict) else {}
    # the messages are raw fields: pydantic validates them once, with the trajectory
    return Trajectory.model_validate(
        dict(
            task=Task(
                id=instance,
                environment="swe-bench",
                instruction=_instruction(messages),
                data={"submission": info.get("submission")},
            ),
            source=Source(
                harness="mini-swe-agent",
                model=_model_name(config),
                run=path.parent.parent.parent.name if path.parent.parent.name == "trajs" else None,
                file=str(path),
                format="mini-swe-agent",
            ),
            messages=messages,
            outcome=_outcome(path, instance, info),
            usage=_total_usage(calls, info),
            llm_calls=calls,
            metadata={
                "trajectory_format": data.get("trajectory_format"),
                "mini_version": info.get("mini_version"),
            }
            | ({"exit": exit_record} if exit_record else {}),
        )
    )


def _split_exit(records: Any) -> tuple[Any, dict[str, Any]]:
    """(the messages, the `extra` of a final `exit` record, or {}) of a 2.x message list."""
    if not isinstance(records, list) or not records:
        return records, {}
    last = records[-1]
    if not isinstance(last, dict) or last.get("role") != "exit":
        return records, {}
    extra = last.get("extra")
    return records[:-1], dict(extra) if isinstance(extra, dict) else {}


def _model_name(config: dict[str, Any]) -> str | None:
    model = config.get("model")
    name = model.get("model_name") if isinstance(model, dict) else None
    return name if isinstance(name, str) else None


def _instruction(messages: list[dict[str, Any]]) -> str | None:
    for message in messages:
        if message["role"] == "user":
            text = text_of(message)
            match = _PR.search(text)
            return match.group(1).strip() if match else text
    return None


def _llm_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LLM call fields (validated with the trajectory) for each assistant raw response."""
    calls = []
    for index, message in enumerate(messages):
        response = message["extra"].get("response")
        if message["role"] != "assistant" or not isinstance(response, dict):
            continue
        usage = response.get("usage") or {}
        calls.append(
            {
                "id": str(response.get("id") or f"call-{index}"),
                "message_index": index,
                "model": response.get("model"),
                "usage": {key: usage.get(key) for key in _USAGE_KEYS},
                "started_at": response.get("created"),
            }
        )
    return calls


def _total_usage(calls: list[dict[str, Any]], info: dict[str, Any]) -> Usage:
    cost = (info.get("model_stats") or {}).get("instance_cost")
    if not calls:
        return Usage(cost=cost)
    counts = [
        Usage(
            prompt_tokens=_count(c["usage"]["prompt_tokens"]),
            completion_tokens=_count(c["usage"]["completion_tokens"]),
        )
        for c in calls
    ]
    return Usage.summed(counts, cost=cost)


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _outcome(path: Path, instance: str, info: dict[str, Any]) -> Outcome:
    exit_status = info.get("exit_status")
    report = _report_path(path, instance)
    if _exists(report):
        verdict = load_json(report)
        if isinstance(verdict, dict) and instance in verdict:
            verdict = verdict[instance]
        if isinstance(verdict, dict) and "resolved" in verdict:
            return Outcome(
                success=bool(verdict["resolved"]),
                reward=1.0 if verdict["resolved"] else 0.0,
                judged_by="swe-bench-harness",
                termination_reason=exit_status,
                details={"tests_status": verdict.get("tests_status")},
            )
    resolved = _resolved_from_summary(_summary_path(path), instance)
    return Outcome(
        success=resolved,
        reward=None if resolved is None else float(resolved),
        judged_by=None if resolved is None else "swe-bench-harness",
        termination_reason=exit_status,
    )


def _resolved_from_summary(summary: Path, instance: str) -> bool | None:
    if not _exists(summary):
        return None
    data = load_json(summary)
    for entry in data.get("instances", []) if isinstance(data, dict) else []:
        if entry.get("instance_id") == instance:
            return bool(entry.get("resolved"))
    return None
