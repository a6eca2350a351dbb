"""trajforge: a workbench for learning from LLM-agent failures."""

from trajforge.schema import FORMAT_VERSION, Message, ToolCall, Trajectory

__version__ = "0.1.0"
__all__ = ["FORMAT_VERSION", "Message", "ToolCall", "Trajectory", "__version__"]
