"""SWE-agent `.traj` files (SWE-agent 0.7 and 1.x).

A file holds one run: `{trajectory[{action, observation, response, thought, state,
execution_time, query}], history[{role, content, agent, message_type, tool_calls,
tool_call_ids, is_demo}], info{exit_status, submission, model_stats}, replay_config,
environment}`. `history` is the conversation the model saw; `trajectory` is SWE-agent's
list of steps (one model call, its action and the observation).

Step mapping: messages are `history` one to one (message index = position in `history`).
SWE-agent step k (`trajectory[k]`) is the k-th assistant message of `history` that is not a
demonstration (`is_demo`); that message gets `extra["trajectory_step"] = k` plus the step's
`execution_time` and `state`, and its other fields (the raw `action`, `observation`,
`response`, `thought`) in `extra["step"]`; the observation of step k is the message after
it.
Demonstration messages are kept (the model saw them) and marked by `extra["is_demo"]`.
`query` (the whole prompt again, per step) is not kept; `replay_config` (the run's
configuration, parsed when it is JSON text) is `metadata["replay_config"]`.

SWE-agent 1.x does not add the last step (usually `submit`) to `history` when the run ends
there: a step with no assistant message left is appended as an assistant message (its
`response`, `extra["action"]`, `extra["from_trajectory"]`) and its observation as a user
message (the step names no call id to answer). Each message's `agent` (`main`, or a
reviewer's name) is its speaker, `name`. A retry agent's file holds `attempts[]`, each
with its own `history`, `trajectory` and `info`: their messages follow one another, marked
`extra["attempt"]`, and the outcome and usage are those of the file's `info`.

Tool messages of SWE-agent 1.x name their call in `tool_call_ids` (a list); the first id
becomes `tool_call_id`. The model comes from `replay_config` (`agent.model.name`), the task
id from `replay_config` (`problem_statement.id`) or the file name, the instruction from the
problem statement or the first user message. SWE-agent writes no verdict, so the outcome's
`success` stays unknown; `info.exit_status` is the termination reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from trajforge.importers.base import base_name, read_one_run
from trajforge.openai_wire import message_fields, message_list, text_of
from trajforge.schema import Outcome, Source, Task, Trajectory, Usage

_STEP_FIELDS = ("execution_time", "state")


class SweAgentImporter:
    name = "swe-agent"
    description = "SWE-agent .traj ({trajectory, history, info})"

    def detect(self, path: Path, head: bytes) -> bool:
        if head.lstrip()[:1] != b"{":
            return False
        if base_name(path).endswith(".traj"):
            return True
        return b'"trajectory"' in head and b'"observation"' in head and b'"action"' in head

    def read(self, path: Path) -> Iterator[Trajectory]:
        yield read_one_run(path, _to_trajectory)

    def sidecars(self, path: Path) -> list[Path]:
        return []


def _to_trajectory(data: dict[str, Any], path: Path) -> Trajectory:
    info = data.get("info") or {}
    replay = _replay_config(data.get("replay_config"))
    problem = replay.get("problem_statement") or {}
    messages = _attempt_messages(data)
    stats = info.get("model_stats") or {}
    # the messages are raw fields: pydantic validates them once, with the trajectory
    return Trajectory.model_validate(
        dict(
            task=Task(
                id=str(problem.get("id") or base_name(path).removesuffix(".traj")),
                environment="swe-bench",
                instruction=problem.get("text") or _first_user_text(messages),
                data={"submission": info.get("submission")},
            ),
            source=Source(
                harness="swe-agent",
                model=((replay.get("agent") or {}).get("model") or {}).get("name"),
                run=path.parent.parent.name or None,
                file=str(path),
                format="swe-agent",
            ),
            messages=messages,
            outcome=Outcome(termination_reason=info.get("exit_status")),
            usage=Usage(
                prompt_tokens=stats.get("tokens_sent"),
                completion_tokens=stats.get("tokens_received"),
                total_tokens=_sum(stats.get("tokens_sent"), stats.get("tokens_received")),
                cost=stats.get("instance_cost"),
            ),
            metadata={
                "environment": data.get("environment"),
                "replay_config": replay,
                "api_calls": stats.get("api_calls"),
                "info": {k: v for k, v in info.items() if k not in {"submission", "model_stats"}},
            },
        )
    )


def _attempt_messages(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of the run, or of each attempt of a retry agent's run in turn."""
    if "history" in data or not isinstance(data.get("attempts"), list):
        messages = _messages(data["history"])
        _attach_steps(messages, data.get("trajectory") or [])
        return messages
    messages = []
    for number, attempt in enumerate(data["attempts"]):
        if not isinstance(attempt, dict):
            raise ValueError(f"attempts[{number}]: expected a JSON object")
        part = _messages(attempt.get("history"), f"attempts[{number}].history")
        _attach_steps(part, attempt.get("trajectory") or [])
        for message in part:
            message["extra"]["attempt"] = number
        messages.extend(part)
    return messages


def _replay_config(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ValueError("replay_config: not valid JSON") from None
    return raw if isinstance(raw, dict) else {}


def _messages(history: Any, where: str = "history") -> list[dict[str, Any]]:
    if not isinstance(history, list):
        raise ValueError(f"{where}: expected a list of messages")
    messages = message_list([_with_call_id(raw) for raw in history], where)
    for message in messages:
        agent = message["extra"].get("agent")
        if isinstance(agent, str) and message["name"] is None:
            message["name"] = agent
    return messages


def _with_call_id(raw: Any) -> Any:
    """SWE-agent 1.x tool results name their calls in `tool_call_ids` (a list)."""
    if not isinstance(raw, dict) or raw.get("role") != "tool" or "tool_call_id" in raw:
        return raw
    ids = raw.get("tool_call_ids")
    return raw | {"tool_call_id": ids[0]} if isinstance(ids, list) and ids else raw


def _attach_steps(messages: list[dict[str, Any]], steps: list[Any]) -> None:
    """Mark the assistant message of each trajectory step (see the module docstring); steps
    past the last assistant message are appended as messages."""
    actions = [m for m in messages if m["role"] == "assistant" and not m["extra"].get("is_demo")]
    for number, step in enumerate(steps):
        if not isinstance(step, dict):
            raise ValueError(f"trajectory[{number}]: expected a JSON object")
        if number < len(actions):
            message = actions[number]
        else:
            message = _step_message(step)
            messages.extend([message, _step_observation(step)])
        message["extra"]["trajectory_step"] = number
        message["extra"] |= {k: step[k] for k in _STEP_FIELDS if k in step}
        message["extra"]["step"] = {
            k: v for k, v in step.items() if k not in _STEP_FIELDS and k != "query"
        }


def _step_message(step: dict[str, Any]) -> dict[str, Any]:
    extra = {k: step[k] for k in ("action", "thought") if k in step}
    content = step.get("response")
    return message_fields(
        {"role": "assistant", "content": content if isinstance(content, str) else None}
        | {"extra": extra | {"from_trajectory": True}}
    )


def _step_observation(step: dict[str, Any]) -> dict[str, Any]:
    content = step.get("observation")
    extra = {"message_type": "observation", "from_trajectory": True}
    return message_fields(
        {"role": "user", "content": content if isinstance(content, str) else None, "extra": extra}
    )


def _first_user_text(messages: list[dict[str, Any]]) -> str | None:
    return next((text_of(m) for m in messages if m["role"] == "user"), None)


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b
