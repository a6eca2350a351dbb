"""The LLM tool-calling policy: any `ChatModel` (an OpenAI-compatible endpoint by default).

A model call that fails every attempt of the shared retry policy (`models/retry.py`) ends
the episode with termination reason `model_error` and the reason in its metadata."""

from __future__ import annotations

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.spec import ForkPoint, PolicyOptions
from trajforge.models.base import ChatModel
from trajforge.models.openai_compat import OpenAICompatibleModel
from trajforge.models.retry import ModelCallFailed, ask_reply


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
        return PolicyStep(message=asked.value.message, llm_call=asked.value.call)
