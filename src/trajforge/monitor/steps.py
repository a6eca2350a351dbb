"""A harness-agnostic view of a run as agent steps: what was done, what came back, what it cost.

A *step* is one assistant message, its actions, and the observations that answer it (tool
messages, or the user message that follows). The prefix "after step k" is
`messages[: steps[k-1].end]`: everything up to and including step k's observations.

Two action extractors cover the common formats:

- `bash`: mini-swe-agent style, one ```bash block in the assistant text; the observation is the
  next user message with `<returncode>` / `<output>`.
- `tools`: OpenAI tool calls (tau-bench style); observations are the `tool` messages; a tool
  output that starts with "Error" counts as an error. An assistant message without tool calls
  is a reply to the user (action kind `respond`).
"""

from __future__ import annotations

from dataclasses import dataclass

from trajforge.errors import UserError
from trajforge.monitor.actions import Action
from trajforge.monitor.bash import parse_bash_actions
from trajforge.monitor.toolcalls import parse_tool_actions, respond_action
from trajforge.schema import LLMCall, Message, Trajectory


@dataclass
class Step:
    """One assistant message with its actions and observations."""

    index: int
    """Message index of the assistant message."""
    end: int
    """Message index just past this step's observations (exclusive)."""
    text: str
    """The assistant's visible text."""
    reasoning: str
    """The model's reasoning text, when the raw response kept it (else empty)."""
    actions: list[Action]
    observation: str
    """Observation text (tool outputs or the following user message)."""
    error: bool
    """The observation reports a failure (nonzero return code, error output)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    user_turn: bool = False
    """The observations include a reply from a (simulated) user."""
    estimated_tokens: bool = False
    """No usage was recorded: tokens are estimated from text length."""


def action_format(traj: Trajectory) -> str:
    """`bash` when assistant messages carry ```bash blocks, else `tools`."""
    return "bash" if any(shows_bash(m) for m in traj.messages) else "tools"


def shows_bash(message: Message) -> bool:
    """An assistant text message with a ```bash block: one makes the whole run `bash`."""
    return message.role == "assistant" and not message.tool_calls and "```bash" in message.text()


def extract_steps(traj: Trajectory) -> list[Step]:
    """The steps of `traj`, with the extractor chosen from its message format."""
    return steps_from(traj, 0, action_format(traj), recorded_calls(traj))


def steps_from(
    traj: Trajectory,
    start: int,
    fmt: str,
    calls: dict[int, LLMCall],
    completed_only: bool = False,
) -> list[Step]:
    """The steps whose assistant message is at index `start` or later, extracted as `fmt`
    (`action_format` of the whole run) with the usage in `calls` (`recorded_calls`);
    `completed_only` leaves out (without extracting it) a last assistant message that
    nothing follows yet.

    A step's span ends at the next assistant message or at the end of the run, so a step is
    only final once the next assistant message exists; `extract_steps(traj)` is
    `steps_from(traj, 0, ...)`.
    """
    messages = traj.messages
    indices = [i for i in range(start, len(messages)) if messages[i].role == "assistant"]
    ends = [*indices[1:], len(messages)][: len(indices)]
    if completed_only and indices and ends[-1] == indices[-1] + 1:
        indices, ends = indices[:-1], ends[:-1]
    tools = fmt == "tools"
    steps = [_step(messages, i, end, tools) for i, end in zip(indices, ends, strict=True)]
    for step in steps:
        _set_usage(step, calls.get(step.index), messages)
    return steps


def recorded_calls(traj: Trajectory) -> dict[int, LLMCall]:
    """The model call of each message index (the last one recorded for it)."""
    return {c.message_index: c for c in traj.llm_calls if c.message_index is not None}


def recorded_usage(call: LLMCall | None) -> tuple[int, int] | None:
    """(prompt, completion) tokens a step takes from its call, or None (then estimated)."""
    if call is None or call.usage is None or call.usage.prompt_tokens is None:
        return None
    return call.usage.prompt_tokens, call.usage.completion_tokens or 0


def message_key(message: Message) -> tuple:
    """Everything step extraction reads from a message: messages with equal keys give equal
    steps. Extend it whenever `_step`, `_set_usage` or an extractor reads another field."""
    if message.role != "assistant":
        return (message.role, message.text())
    calls = tuple((c.name, c.arguments) for c in message.tool_calls or ())
    return (message.role, message.text(), calls, _reasoning(message))


def require_steps(traj: Trajectory) -> list[Step]:
    """Like `extract_steps`, but a run without any agent step is a `UserError`."""
    steps = extract_steps(traj)
    if not steps:
        raise UserError(f"trajectory {traj.id or '(no id)'} has no agent steps to score")
    return steps


def _step(messages: list[Message], index: int, stop: int, tools: bool) -> Step:
    message = messages[index]
    replies = messages[index + 1 : stop]
    observation = "\n".join(m.text() for m in replies)
    if message.tool_calls:
        actions, error = parse_tool_actions(message, replies)
    elif tools:
        actions, error = [respond_action(message)], False
    else:
        actions, error = parse_bash_actions(message.text(), observation)
    return Step(
        index=index,
        end=stop,
        text=message.text(),
        reasoning=_reasoning(message),
        actions=actions,
        observation=observation,
        error=error,
        user_turn=any(m.role == "user" for m in replies),
    )


def _set_usage(step: Step, call: LLMCall | None, messages: list[Message]) -> None:
    """Recorded usage of the step's call; else an estimate of 4 characters per token."""
    usage = recorded_usage(call)
    if usage is not None:
        step.prompt_tokens, step.completion_tokens = usage
        return
    step.prompt_tokens = sum(len(m.text()) for m in messages[: step.index]) // 4
    step.completion_tokens = max(1, len(step.text) // 4)
    step.estimated_tokens = True


def _reasoning(message: Message) -> str:
    response = message.extra.get("response")
    if not isinstance(response, dict):
        return ""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    reasoning = (choices[0].get("message") or {}).get("reasoning")
    return reasoning if isinstance(reasoning, str) else ""


def step_tokens(step: Step) -> int:
    """Prompt plus completion tokens of the step's model call."""
    return step.prompt_tokens + step.completion_tokens
