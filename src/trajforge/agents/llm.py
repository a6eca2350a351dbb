"""The LLM tool-calling policy: any `ChatModel` (an OpenAI-compatible endpoint by default).

A model call that fails every attempt of the shared retry policy (`models/retry.py`) ends
the episode with termination reason `model_error` and the reason in its metadata.

A reply without structured tool calls whose text holds `<tool_call>` tags (an endpoint that
returns a template-less model's raw text) is read with `trajforge.models.tool_text`, the
convention `trajforge serve` and training use; its parse errors are kept in the message's
`extra["tool_call_errors"]`, and a reply with no valid call ends the episode as an answer."""

from __future__ import annotations

import orjson

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.spec import ForkPoint, PolicyOptions
from trajforge.models import tool_text
from trajforge.models.base import ChatModel
from trajforge.models.openai_compat import OpenAICompatibleModel
from trajforge.models.retry import ModelCallFailed, ask_reply
from trajforge.schema import Message, ToolCall


class LLMPolicy:
    """Sends the history and tool schemas to a chat model; its reply is the next message."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.name = f"llm:{model.name}"

    @classmethod
    def from_spec(cls, options: PolicyOptions, seed: int, parent: ForkPoint | None) -> LLMPolicy:
        """The model behind the options' OpenAI-compatible endpoint."""
        return cls(OpenAICompatibleModel(options.endpoint()))

    def act(self, state: EpisodeState) -> PolicyStep:
        """The model's next message (the shared retry policy; `ModelCallFailed` ends the
        episode when every attempt failed)."""
        asked = ask_reply(self.model, state.messages, state.tools or None)
        if asked.value is None:
            raise ModelCallFailed(f"agent model: {asked.failure}")
        return PolicyStep(message=read_text_calls(asked.value.message, state.tools),
                          llm_call=asked.value.call)  # fmt: skip


def read_text_calls(message: Message, tools: list[dict] | None) -> Message:
    """`message` with the tool calls written in its text parsed out (see module docstring)."""
    if message.tool_calls or tool_text.CALL_OPEN not in message.text():
        return message
    parsed = tool_text.parse_reply(message.text(), tools or ())
    calls = [
        ToolCall(id=f"call_text_{index}", name=call["name"],
                 arguments=orjson.dumps(call["arguments"]).decode())
        for index, call in enumerate(parsed.calls)
    ]  # fmt: skip
    extra = {**message.extra}
    if parsed.errors:
        extra[tool_text.ERRORS_FIELD] = parsed.errors
    update = {"content": parsed.content, "tool_calls": calls or None, "extra": extra}
    return message.model_copy(update=update)
