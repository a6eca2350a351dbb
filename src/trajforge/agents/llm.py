"""The LLM tool-calling policy: any `ChatModel` (an OpenAI-compatible endpoint by default)."""

from __future__ import annotations

from trajforge.agents.base import EpisodeState, PolicyStep
from trajforge.agents.spec import ForkPoint, PolicyOptions
from trajforge.models.base import ChatModel
from trajforge.models.openai_compat import OpenAICompatibleModel


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
        reply = self.model.complete(state.messages, state.tools or None)
        return PolicyStep(message=reply.message, llm_call=reply.call)
