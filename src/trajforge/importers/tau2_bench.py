"""tau2-bench simulation files (sierra-research/tau2-bench results, leaderboard submissions).

A file is one object `{timestamp, info, tasks[], simulations[]}`. `info` names the agent
and user-simulator models and the domain (with the agent's policy); each task has a
`user_scenario` (the user simulator's instructions) and `evaluation_criteria` (gold actions,
information to communicate, assertions); each simulation has `task_id`, `trial`,
`termination_reason`, `reward_info` and `messages[{role, content, tool_calls, turn_idx}]`.

Step mapping: message index = position in `messages` = tau2's `turn_idx` (checked on
import; `turn_idx` is also kept in `Message.extra`). tau2 writes no system message: the
conversation opens with the agent's greeting at index 0; the domain policy the agent was
given is kept in `metadata["policy"]`. Tool results carry the call id as `id`; it becomes
`tool_call_id`.

Task ids: a simulation names its task in `task_id`, but its `reward_info` shows the task
it was judged against (the gold actions checked, the assertions, the information to
communicate). When these disagree with the named task's `evaluation_criteria`, the task
whose criteria they match is used and the recorded id is kept in
`metadata["recorded_task_id"]`: the toolorchestra gpt-5 submission numbers its
simulations 0..n-1 whatever task they ran (158 of its 164 simulations). Two tasks with the
same criteria (tau2 has such pairs, differing in the user's scenario) are told apart by the
task id in the checked actions' `action_id` when it names one of them, else by the words
their scenario shares with the conversation's user messages (best effort: both twins are
judged alike, only the user's scenario differs).

The model comes from the file name (`<run>_<domain>_<model>_<n>trial.json`, as on the tau2
leaderboard), else from `info.agent_info.llm` (always kept in `metadata["agent_llm"]`).
A `submission.json` beside the file (leaderboard metadata: model name, organization,
methodology) is consumed as a sidecar into `metadata["submission"]`; it holds no runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajforge.errors import InputError
from trajforge.importers.base import (
    base_name,
    iter_json_array,
    load_json,
    load_json_without,
    record_problem,
    should_stream,
)
from trajforge.openai_wire import message_list
from trajforge.schema import Outcome, Source, Task, Trajectory, Usage

_NAME = re.compile(r"^(?P<run>.+?)_(?P<domain>[a-z]+)_(?P<model>.+?)(_\d+trials?)?\.json$")
SUBMISSION = "submission.json"
_SUBMISSION_FIELDS = (
    "model_name",
    "model_organization",
    "submitting_organization",
    "submission_date",
    "submission_type",
    "methodology",
)
_CHECKS = ("action_checks", "nl_assertions", "communicate_checks")
_SCENARIO_PARTS = ("reason_for_call", "known_info", "unknown_info", "task_instructions")


class Tau2BenchImporter:
    name = "tau2-bench"
    description = "tau2-bench simulations file ({timestamp, info, tasks, simulations})"

    def detect(self, path: Path, head: bytes) -> bool:
        if head.lstrip()[:1] != b"{":
            return False
        if b'"simulations"' in head:
            return True
        return all(key in head for key in (b'"tasks"', b'"agent_info"', b'"user_info"'))

    def read(self, path: Path) -> Iterator[Trajectory]:
        header = _header(path)
        try:
            context = _context(path, header)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(str(path), record_problem(exc), "header") from exc
        for index, record in _simulations(path, header):
            try:
                yield context.trajectory(record)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise InputError(str(path), record_problem(exc), f"simulations[{index}]") from exc

    def sidecars(self, path: Path) -> list[Path]:
        candidate = path.parent / SUBMISSION
        return [candidate] if candidate.exists() else []


def _header(path: Path) -> dict[str, Any]:
    """Everything but the simulations (the whole document for small files)."""
    data = load_json_without(path, "simulations") if should_stream(path) else load_json(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object")
    if "simulations" not in data and not should_stream(path):
        raise InputError(str(path), "missing field 'simulations'")
    return data


def _context(path: Path, header: dict[str, Any]) -> _FileContext:
    """The file's shared context; a header field of the wrong type is a ValueError."""
    info, tasks = header.get("info") or {}, header.get("tasks") or []
    if not isinstance(info, dict):
        raise ValueError(f"info: expected an object, got {type(info).__name__}")
    if not isinstance(tasks, list):
        raise ValueError(f"tasks: expected a list, got {type(tasks).__name__}")
    for key in ("environment_info", "agent_info"):
        if not isinstance(info.get(key) or {}, dict):
            raise ValueError(f"info.{key}: expected an object, got {type(info[key]).__name__}")
    by_id = {str(t.get("id")): t for t in tasks if isinstance(t, dict)}
    return _FileContext(path, info, by_id, _submission(path))


def _simulations(path: Path, header: dict[str, Any]) -> Iterator[tuple[int, object]]:
    if "simulations" in header:
        sims = header["simulations"]
        if not isinstance(sims, list):
            raise InputError(str(path), "'simulations' is not an array")
        return enumerate(sims)
    return iter_json_array(path, "simulations.item")


def _submission(path: Path) -> dict[str, Any] | None:
    candidate = path.parent / SUBMISSION
    if not candidate.exists():
        return None
    data = load_json(candidate)
    if not isinstance(data, dict):
        raise InputError(str(candidate), "expected a JSON object")
    return {k: data[k] for k in _SUBMISSION_FIELDS if k in data}


class _FileContext:
    """What every simulation of one file shares: run info, tasks, model, domain."""

    def __init__(
        self,
        path: Path,
        info: dict[str, Any],
        tasks: dict[str, dict[str, Any]],
        submission: dict[str, Any] | None,
    ) -> None:
        self.path = path
        self.info = info
        self.tasks = tasks
        self.submission = submission
        match = _NAME.match(base_name(path))
        self.run = match.group("run") if match else None
        env_info = info.get("environment_info") or {}
        self.domain = env_info.get("domain_name") or (match.group("domain") if match else None)
        self.agent_llm = (info.get("agent_info") or {}).get("llm")
        self.model = match.group("model") if match else self.agent_llm
        self.policy = env_info.get("policy")

    def trajectory(self, record: Any) -> Trajectory:
        if not isinstance(record, dict):
            raise ValueError("expected a JSON object")
        task_id = str(record["task_id"])
        if task_id not in self.tasks:
            raise ValueError(f"task_id {task_id!r} is not among the file's tasks")
        reward_info = record.get("reward_info") or {}
        reward = reward_info.get("reward")
        task = judged_task(self.tasks, task_id, reward_info, record["messages"])
        metadata = self._metadata(record)
        if str(task["id"]) != task_id:
            metadata["recorded_task_id"] = task_id
        # the messages are raw fields: pydantic validates them once, with the trajectory
        return Trajectory.model_validate(
            dict(
                task=self._task(task),
                source=Source(
                    harness="tau2-bench",
                    model=self.model,
                    run=f"{self.run or 'tau2'}:trial-{record.get('trial', 0)}",
                    file=str(self.path),
                    format="tau2-bench",
                ),
                messages=_messages(record["messages"]),
                outcome=Outcome(
                    success=None if reward is None else reward >= 1.0 - 1e-9,
                    reward=reward,
                    judged_by="tau2-bench-reward",
                    termination_reason=record.get("termination_reason"),
                    details=reward_info,
                ),
                usage=Usage(wall_time_s=record.get("duration")),
                metadata=metadata,
            )
        )

    def _task(self, task: dict[str, Any]) -> Task:
        scenario = task.get("user_scenario") or {}
        return Task(
            id=str(task["id"]),
            environment=f"tau2-{self.domain}" if self.domain else "tau2",
            instruction=scenario_text(scenario),
            gold=task.get("evaluation_criteria"),
            data={k: v for k, v in task.items() if k not in {"id", "evaluation_criteria"}},
        )

    def _metadata(self, record: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in record.items() if k not in {"messages", "reward_info"}}
        extra = {
            "agent_llm": self.agent_llm,
            "user_llm": (self.info.get("user_info") or {}).get("llm"),
            "policy": self.policy,
            "info": {k: v for k, v in self.info.items() if k != "environment_info"},
        }
        if self.submission is not None:
            extra["submission"] = self.submission
        return {"simulation": kept} | extra


def judged_task(
    tasks: dict[str, dict[str, Any]], task_id: str, reward_info: dict[str, Any], messages: Any
) -> dict[str, Any]:
    """The task the simulation was judged against (see the module docstring)."""
    judged = _judged_criteria(reward_info)
    if judged is None or _criteria(tasks[task_id]) == judged:
        return tasks[task_id]
    matching = [task for task in tasks.values() if _criteria(task) == judged]
    if not matching:
        return tasks[task_id]
    if len(matching) > 1:  # twins: the action ids often carry the task id they came from
        named = {
            str(c["action"].get("action_id", "")).rsplit("_", 1)[0]
            for c in reward_info.get("action_checks") or []
        }
        matching = [t for t in matching if str(t["id"]) in named] or matching
    said = _words(
        " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    )
    return max(
        matching,
        key=lambda task: len(said & _words(scenario_text(task.get("user_scenario") or {}) or "")),
    )


def _criteria(task: dict[str, Any]) -> tuple[list, list, list]:
    criteria = task.get("evaluation_criteria") or {}
    return (
        [(a.get("name"), a.get("arguments")) for a in criteria.get("actions") or []],
        sorted(criteria.get("nl_assertions") or []),
        sorted(str(info) for info in criteria.get("communicate_info") or []),
    )


def _judged_criteria(reward_info: dict[str, Any]) -> tuple[list, list, list] | None:
    """The criteria a `reward_info` shows (empty lists: a task without any); None when it
    carries no checks at all."""
    actions = [
        (c["action"].get("name"), c["action"].get("arguments"))
        for c in reward_info.get("action_checks") or []
    ]
    assertions = sorted(a.get("nl_assertion") for a in reward_info.get("nl_assertions") or [])
    infos = sorted(str(c.get("info")) for c in reward_info.get("communicate_checks") or [])
    if not any(key in reward_info for key in _CHECKS):
        return None
    return actions, assertions, infos


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def scenario_text(scenario: dict[str, Any]) -> str | None:
    """The user scenario's instructions as one text (tau2 keeps them in named parts)."""
    instructions = scenario.get("instructions")
    if isinstance(instructions, str) or instructions is None:
        return instructions
    parts = [str(instructions[key]) for key in _SCENARIO_PARTS if instructions.get(key)]
    if scenario.get("persona"):
        parts.insert(0, str(scenario["persona"]))
    return "\n\n".join(parts) or None


def _messages(raw_messages: Any) -> list[dict[str, Any]]:
    if not isinstance(raw_messages, list):
        raise ValueError("messages: expected a list of messages")
    for position, raw in enumerate(raw_messages):
        turn = raw.get("turn_idx", position) if isinstance(raw, dict) else position
        if turn != position:
            raise ValueError(f"messages[{position}]: turn_idx {turn} != {position}")
    return message_list([_with_call_id(raw) for raw in raw_messages], "messages")


def _with_call_id(raw: Any) -> Any:
    """tau2 tool results name their call in `id`; chat messages use `tool_call_id`."""
    if isinstance(raw, dict) and raw.get("role") == "tool" and "tool_call_id" not in raw:
        return {k: v for k, v in raw.items() if k != "id"} | {"tool_call_id": raw.get("id")}
    return raw
