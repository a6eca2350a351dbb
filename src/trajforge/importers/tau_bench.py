"""tau-bench run lists (sierra-research/tau-bench historical trajectories, AgentRx tau-retail).

A file is a JSON array of runs `{task_id, trial, reward, info{task, reward_info, ...}, traj}`;
`traj` is a list of OpenAI chat messages with tool calls.

Step mapping: message index = position in `traj` (0 is the system prompt). AgentRx adds a
1-based `index` to each message; it is kept in `Message.extra["index"]` and equals the
message index + 1.

The environment is read from the system prompt (airline or retail policy), else from the
path. The model is taken from a file name such as `gpt-4o-airline.json` when present.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajforge.errors import InputError
from trajforge.importers.base import base_name, iter_json_array, record_problem
from trajforge.openai_wire import message_list, text_of
from trajforge.schema import Outcome, Source, Task, Trajectory

_MODEL_FROM_NAME = re.compile(r"^(?P<model>.+?)-(airline|retail)\.json$")


class TauBenchImporter:
    name = "tau-bench"
    description = "tau-bench run list (JSON array of {task_id, reward, info, traj})"

    def detect(self, path: Path, head: bytes) -> bool:
        start = head.lstrip()[:1]
        return start == b"[" and b'"traj"' in head and b'"task_id"' in head

    def read(self, path: Path) -> Iterator[Trajectory]:
        for index, record in iter_json_array(path):
            try:
                yield run_to_trajectory(record, path)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise InputError(str(path), record_problem(exc), index) from exc

    def sidecars(self, path: Path) -> list[Path]:
        return []


def run_to_trajectory(record: Any, path: Path) -> Trajectory:
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    info = record.get("info") or {}
    task = info.get("task") or {}
    messages = message_list(record["traj"], "traj")
    reward = record.get("reward")
    # the messages are raw fields: pydantic validates them once, with the trajectory
    return Trajectory.model_validate(
        dict(
            task=Task(
                id=str(record["task_id"]),
                environment=_environment(messages, path),
                instruction=task.get("instruction"),
                gold={"actions": task.get("actions", []), "outputs": task.get("outputs", [])},
                data={"user_id": task.get("user_id")},
            ),
            source=Source(
                harness="tau-bench",
                model=_model(path),
                run=f"trial-{record.get('trial', 0)}",
                file=str(path),
                format="tau-bench",
            ),
            messages=messages,
            outcome=Outcome(
                success=None if reward is None else reward >= 1.0 - 1e-9,
                reward=reward,
                judged_by="tau-bench-reward",
                details=info.get("reward_info") or {},
            ),
            metadata={k: v for k, v in record.items() if k not in {"task_id", "traj", "reward"}}
            | {"info": {k: v for k, v in info.items() if k not in {"task", "reward_info"}}},
        )
    )


def _environment(messages: list[dict[str, Any]], path: Path) -> str:
    first = messages[0] if messages else {}
    system = text_of(first).lower() if first.get("role") == "system" else ""
    for domain in ("airline", "retail"):
        if f"{domain} agent policy" in system:
            return f"tau-{domain}"
    for domain in ("airline", "retail"):
        if domain in str(path).lower():
            return f"tau-{domain}"
    return "tau"


def _model(path: Path) -> str | None:
    match = _MODEL_FROM_NAME.match(base_name(path))
    return match.group("model") if match else None
