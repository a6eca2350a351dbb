"""trajforge: a workbench for learning from LLM-agent failures.

Layers, lowest first; a module imports only from its own layer or lower ones, and
subpackages never import each other in a cycle (tests/test_layers.py checks both):

    schema, errors, registry, stats, jsonfile, openai_wire
    store
    importers, models
    envs
    agents
    rollout
    diagnose, monitor, generate, evaluate, export
    proxy, serve
    train, web
    cli, demo
"""

from trajforge.schema import FORMAT_VERSION, Message, ToolCall, Trajectory

__version__ = "0.1.0"
__all__ = ["FORMAT_VERSION", "Message", "ToolCall", "Trajectory", "__version__"]
