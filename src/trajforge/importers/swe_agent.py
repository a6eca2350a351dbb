"""SWE-agent `.traj` files (SWE-agent 0.7 and 1.x).

A file holds one run: `{trajectory[{action, observation, response, thought, state,
execution_time, query}], history[{role, content, agent, message_type, tool_calls,
tool_call_ids, is_demo}], info{exit_status, submission, model_stats}, replay_config,
environment}`. `history` is the conversation the model saw; `trajectory` is SWE-agent's
list of steps (one model call, its action and the observation).

Step mapping: messages are `history` one to one (message index = position in `history`).
SWE-agent step k (`trajectory[k]`) is the k-th assistant message of `history` that is not a
demonstration (`is_demo`); that message gets `extra["trajectory_step"] = k` plus the step's
`execution_time` and `state`, and the observation of step k is the message after it.
Demonstration messages are kept (the model saw them) and marked by `extra["is_demo"]`.
SWE-agent 1.x may end the run on `submit` without writing that last step to `history`:
a final step with no assistant message is kept as `metadata["final_step"]` (its action,
observation and thought); two or more steps missing is an error.
`query` (the whole prompt again, per step) is not kept.

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
from trajforge.openai_wire import message_list, text_of
from trajforge.schema import Outcome, Source, Task, Trajectory, Usage

_STEP_FIELDS = ("execution_time", "state")
_FINAL_STEP_FIELDS = ("action", "observation", "thought")


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
    messages = _messages(data["history"])
    final_step = _attach_steps(messages, data.get("trajectory") or [])
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
                "api_calls": stats.get("api_calls"),
                "info": {k: v for k, v in info.items() if k not in {"submission", "model_stats"}},
                **({} if final_step is None else {"final_step": final_step}),
            },
        )
    )


def _replay_config(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ValueError("replay_config: not valid JSON") from None
    return raw if isinstance(raw, dict) else {}


def _messages(history: Any) -> list[dict[str, Any]]:
    if not isinstance(history, list):
        raise ValueError("history: expected a list of messages")
    return message_list([_with_call_id(raw) for raw in history], "history")


def _with_call_id(raw: Any) -> Any:
    """SWE-agent 1.x tool results name their calls in `tool_call_ids` (a list)."""
    if not isinstance(raw, dict) or raw.get("role") != "tool" or "tool_call_id" in raw:
        return raw
    ids = raw.get("tool_call_ids")
    return raw | {"tool_call_id": ids[0]} if isinstance(ids, list) and ids else raw


def _attach_steps(messages: list[dict[str, Any]], steps: list[Any]) -> dict[str, Any] | None:
    """Mark the assistant message of each trajectory step (see the module docstring); the
    final step when `history` ends before it (SWE-agent 1.x stops on `submit` without
    writing that step to `history`), as `{action, observation, thought}`, else None."""
    actions = [m for m in messages if m["role"] == "assistant" and not m["extra"].get("is_demo")]
    if len(actions) + 1 < len(steps):
        raise ValueError(
            f"trajectory has {len(steps)} steps but history only {len(actions)} assistant messages"
        )
    final = steps[len(actions)] if len(actions) < len(steps) else None
    if final is not None and not isinstance(final, dict):
        raise ValueError(f"trajectory[{len(actions)}]: expected a JSON object")
    for number, (message, step) in enumerate(zip(actions, steps, strict=False)):
        if not isinstance(step, dict):
            raise ValueError(f"trajectory[{number}]: expected a JSON object")
        message["extra"]["trajectory_step"] = number
        message["extra"] |= {k: step[k] for k in _STEP_FIELDS if k in step}
    return None if final is None else {k: final.get(k) for k in _FINAL_STEP_FIELDS}


def _first_user_text(messages: list[dict[str, Any]]) -> str | None:
    return next((text_of(m) for m in messages if m["role"] == "user"), None)


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b
