"""The LLM tool-calling policy: any `ChatModel` (an OpenAI-compatible endpoint by default).

With retrieved strategies for the episode's task (`PolicyOptions.strategies`), the model sees
them at the end of its system message (one is added when the conversation has none); the
recorded messages stay as the environment and the policy wrote them, while the model call
(and so the proxy's record of it) holds the prompt that was sent.

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

STRATEGIES_HEADER = "## Strategies that worked on similar tasks"


def with_strategies(messages: list[Message], strategies: list[str]) -> list[Message]:
    """The conversation as a guided policy sees it: the strategies as a bulleted block at the
    end of the system message."""
    if not strategies:
        return messages
    block = STRATEGIES_HEADER + "\n" + "\n".join(f"- {text}" for text in strategies)
    if messages and messages[0].role == "system":
        first = messages[0]
        return [first.model_copy(update={"content": f"{first.text()}\n\n{block}"}), *messages[1:]]
    return [Message(role="system", content=block), *messages]


class LLMPolicy:
    """Sends the history and tool schemas to a chat model; its reply is the next message."""

    def __init__(self, model: ChatModel, strategies: dict[str, list[str]] | None = None) -> None:
        self.model = model
        self.strategies = strategies or {}
        self.name = f"llm:{model.name}"

    @classmethod
    def from_spec(cls, options: PolicyOptions, seed: int, parent: ForkPoint | None) -> LLMPolicy:
        """The model behind the options' OpenAI-compatible endpoint, with their strategies."""
        return cls(OpenAICompatibleModel(options.endpoint()), options.strategies)

    def act(self, state: EpisodeState) -> PolicyStep:
        """The model's next message (the shared retry policy; `ModelCallFailed` ends the
        episode when every attempt failed)."""
        view = with_strategies(state.messages, self.strategies.get(state.task.id, []))
        asked = ask_reply(self.model, view, state.tools or None)
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
