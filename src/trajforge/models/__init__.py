"""Chat models: an OpenAI-compatible client and deterministic scripted/replay models."""

from trajforge.models.base import ChatModel, ModelReply
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.models.scripted import ReplayModel, ScriptedModel, ScriptExhausted

__all__ = [
    "ChatModel",
    "ModelReply",
    "OpenAICompatibleModel",
    "OpenAIModelConfig",
    "ReplayModel",
    "ScriptExhausted",
    "ScriptedModel",
]
