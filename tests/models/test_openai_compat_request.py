"""What the OpenAI-compatible client sends: the sampling seed only when one is set."""

from __future__ import annotations

from trajforge.models.mock_server import MockOpenAIServer
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.schema import Message


def test_the_seed_is_sent_only_when_set() -> None:
    hello = [Message(role="user", content="Hi")]
    with MockOpenAIServer(["a", "b"]) as server:
        for seed in (7, None):
            config = OpenAIModelConfig(base_url=server.base_url, model="m", seed=seed)
            OpenAICompatibleModel(config).complete(hello)
        seeded, plain = server.requests
    assert seeded["seed"] == 7 and "seed" not in plain
