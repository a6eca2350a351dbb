"""A trained tiny student served on loopback: tool calls, tokens, logprobs, batching."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import orjson
import pytest
from typer.testing import CliRunner

from trajforge.cli.main import app
from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.envs.household.tools import TOOL_NAMES, TOOLS
from trajforge.models.serve import BackgroundServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.session import trajectory_id
from trajforge.serve.app import ServeConfig, StudentApp
from trajforge.serve.student import Student
from trajforge.store import Store


def _opening(seed: int) -> list[dict]:
    env = HouseholdEnv()
    return [{"role": m.role, "content": m.content} for m in env.reset(task_for(seed, 1))]


def _valid_call(message) -> bool:
    calls = message.tool_calls or []
    return bool(calls) and all(
        c.function.name in TOOL_NAMES and isinstance(json.loads(c.function.arguments), dict)
        for c in calls
    )


def test_batched_generation_equals_one_at_a_time(student_dir: Path) -> None:
    student = Student(student_dir)
    prompts = [student.codec.prompt(_opening(seed), TOOLS) for seed in (1_000_000, 1_000_001)]
    prompts.append(prompts[0][:-9] + prompts[0][-1:])  # a shorter prompt, padded in the batch
    together = student.generate(prompts)
    alone = [student.generate([p])[0] for p in prompts]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    for a, b in zip(together, alone, strict=True):
        assert all(abs(x - y) < 1e-4 for x, y in zip(a.logprobs, b.logprobs, strict=True))


def test_served_student_answers_tool_calls_with_tokens_through_the_proxy(
    student_dir: Path, tmp_path: Path
) -> None:
    served = StudentApp(Student(student_dir), ServeConfig(max_wait_ms=20))
    db = tmp_path / "proxy.db"
    server = BackgroundServer(served.app).start()
    try:
        upstream = f"{server.url}/v1"
        direct = openai.OpenAI(base_url=upstream, api_key="x", max_retries=0)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda seed: direct.chat.completions.create(
                    model="student", messages=_opening(1_000_000 + seed), tools=TOOLS,
                    logprobs=True),
                range(8)))  # fmt: skip
        assert sum(served.batches) == 8
        first = answers[0].model_dump()
        assert first["prompt_token_ids"] and first["choices"][0]["token_ids"]
        assert len(first["choices"][0]["logprobs"]["content"]) == len(
            first["choices"][0]["token_ids"]
        )
        assert all(_valid_call(a.choices[0].message) for a in answers)
        with ProxyServer(ProxyConfig(upstream=upstream), db) as proxy:
            client = openai.OpenAI(base_url=proxy.session_url("s1"), api_key="x", max_retries=0)
            reply = client.chat.completions.create(
                model="student", messages=_opening(1_000_003), tools=TOOLS
            )
    finally:
        server.stop()
    assert _valid_call(reply.choices[0].message)
    (call,) = Store(db).get(trajectory_id("s1")).llm_calls
    assert call.prompt_token_ids and call.completion_token_ids and call.logprobs


def test_rollout_with_the_llm_policy_runs_household_episodes(
    student_dir: Path, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(
        json.dumps([f"household-d1-{seed}" for seed in (1_000_000, 1_000_001, 1_000_002)])
    )
    served = StudentApp(Student(student_dir))
    server = BackgroundServer(served.app).start()
    try:
        args = ["rollout", "--env", "household", "--tasks", str(tasks), "--policy", "llm", "--json",
                "--base-url", f"{server.url}/v1", "--llm-model", "student",
                "--db", str(tmp_path / "r.db"), "--max-steps", "6"]  # fmt: skip
        result = CliRunner().invoke(app, args)
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["episodes"] == 3
    with Store(tmp_path / "r.db") as store:
        runs = list(store.query())
    assert len(runs) == 3
    first_moves = [r.messages[r.assistant_indices()[0]] for r in runs]
    assert all(m.tool_calls and m.tool_calls[0].name in TOOL_NAMES for m in first_moves)
    assert all(len(r.llm_calls) == len(r.assistant_indices()) for r in runs)


def test_lockstep_with_a_reused_cache_equals_full_recomputation(student_dir: Path) -> None:
    from trajforge.train.evaluate import fresh_starts, held_out_tasks, run_lockstep

    student = Student(student_dir)
    tasks = held_out_tasks(HouseholdEnv(), 6, 1)
    cached = run_lockstep(student, fresh_starts(HouseholdEnv, tasks), 8)
    full = run_lockstep(student, fresh_starts(HouseholdEnv, tasks), 8, reuse_cache=False)
    for a, b in zip(cached, full, strict=True):
        assert [m.model_dump() for m in a.messages] == [m.model_dump() for m in b.messages]


def test_a_drifted_row_is_rewound_alone_and_decodes_as_from_scratch(student_dir: Path) -> None:
    """When one row's prompt does not extend what it was fed (its answer re-tokenized
    another way), that row keeps the opening the two share and the others keep everything;
    every row then decodes as `Student.generate` on its full prompt."""
    from trajforge.serve.student import DecodeSession

    student = Student(student_dir)
    openings = [student.codec.prompt(_opening(1_000_000 + n), TOOLS) for n in range(3)]
    session = DecodeSession(student)
    first = session.generate(openings, 12, 2.0, seed=3)
    answers = [g.token_ids[:-1] if g.finish_reason == "stop" else g.token_ids for g in first]
    tool_turn = openings[0][-6:]  # any tokens that extend a conversation
    prompts = [o + a + tool_turn for o, a in zip(openings, answers, strict=True)]
    drift = len(openings[1]) + 2
    prompts[1] = [*prompts[1][:drift], prompts[1][drift] ^ 1, *prompts[1][drift + 1 :]]
    again = session.generate(prompts, 12, 2.0, seed=4)
    fresh = student.generate(prompts, 12, 2.0, seed=4)
    assert [g.token_ids for g in again] == [g.token_ids for g in fresh]
    for a, b in zip(again, fresh, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    fed = [len(o) + len(g.token_ids) - 1 for o, g in zip(openings, first, strict=True)]
    assert [g.cached_tokens for g in again] == [fed[0], drift, fed[2]]


def test_a_request_without_a_limit_gets_the_servers_max_tokens(student_dir: Path) -> None:
    served = StudentApp(Student(student_dir), ServeConfig(max_tokens=3))
    server = BackgroundServer(served.app).start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x")
        ask = {"model": "student", "messages": _opening(1_000_000), "tools": TOOLS}
        unlimited = client.chat.completions.create(**ask)
        capped = client.chat.completions.create(**ask, max_tokens=1000)
    finally:
        server.stop()
    assert unlimited.usage.completion_tokens == 3 and unlimited.choices[0].finish_reason == "length"
    assert 3 < capped.usage.completion_tokens <= 24  # a request's own limit, capped at 8 times


def test_a_fine_tuned_pretrained_student_keeps_more_context_than_its_rows() -> None:
    from types import SimpleNamespace

    from trajforge.serve.student import BASE_CONTEXT, serving_context

    def model(positions: int) -> SimpleNamespace:
        return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=positions))

    pretrained = {"max_context": 1024, "codec": {"kind": "hf"}}
    assert serving_context(pretrained, model(8192)) == BASE_CONTEXT
    assert serving_context(pretrained, model(1536)) == 1536
    assert serving_context({"max_context": 1024, "codec": {"kind": "compact"}}, model(8192)) == 1024


def test_a_seeded_request_samples_the_same_alone_and_inside_a_batch(student_dir: Path) -> None:
    """A request's seed is its own: each row samples with a generator of its own, so the
    batch it lands in (here the last of four, the others unseeded) does not change it."""
    served = StudentApp(Student(student_dir), ServeConfig(max_wait_ms=300))
    server = BackgroundServer(served.app).start()

    def ask(seed: int | None, world: int) -> list[int]:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        extra = {} if seed is None else {"seed": seed}
        answer = client.chat.completions.create(
            model="student", messages=_opening(world), tools=TOOLS, temperature=2.0,
            max_tokens=16, **extra,
        )  # fmt: skip
        return answer.model_dump()["choices"][0]["token_ids"]

    try:
        alone = ask(7, 1_000_000)
        with ThreadPoolExecutor(4) as pool:
            others = [pool.submit(ask, None, 1_000_001 + n) for n in range(3)]
            time.sleep(0.1)  # the seeded request arrives last, in the same batch
            batched = pool.submit(ask, 7, 1_000_000).result()
            for other in others:
                other.result()
    finally:
        server.stop()
    assert served.batches[-1] == 4
    assert batched == alone
    assert Student(student_dir).generate([[1, 2, 3]] * 2, 8, 1.0, seed=[5, 5])[0].token_ids == (
        Student(student_dir).generate([[1, 2, 3]], 8, 1.0, seed=[5])[0].token_ids
    )


def test_finished_rows_leave_the_batch_and_the_others_sample_as_alone(student_dir: Path) -> None:
    """Rows that finish early leave the batch (a quarter at a time) with their states kept for
    the prefix cache; a row decodes the same whether its batch shrank around it or not."""
    from trajforge.serve.prefix_cache import PrefixCache

    student = Student(student_dir)
    prompts = [student.codec.prompt(_opening(1_000_000 + n), TOOLS) for n in range(8)]
    cache = PrefixCache()
    batched = student.generate(prompts, 16, 2.0, seed=list(range(8)), prefix_cache=cache)
    lengths = sorted(len(g.token_ids) for g in batched)
    assert lengths[1] < lengths[-1], "no row finished before the longest: nothing was tested"
    for n, prompt in enumerate(prompts):
        alone = student.generate([prompt], 16, 2.0, seed=[n])[0]
        assert batched[n].token_ids == alone.token_ids
        assert batched[n].logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        fed = prompt + batched[n].token_ids[:-1]  # the last token is never fed
        assert cache.lookup([*fed, 0]).length == len(fed)


def test_sampling_follows_the_distribution_at_its_temperature() -> None:
    import torch

    from trajforge.serve.student import _choose

    probs = torch.tensor([0.5, 0.0, 0.3, 0.2])
    logprobs = probs.log().expand(1000, -1)
    evenly = (torch.arange(1000, dtype=torch.float64) + 0.5) / 1000
    counts = torch.bincount(_choose(logprobs, 1.0, evenly), minlength=4).tolist()
    assert counts == [500, 0, 300, 200]
    sharper = torch.bincount(_choose(logprobs, 0.5, evenly), minlength=4).tolist()
    assert sharper == [658, 0, 237, 105]  # probabilities squared, renormalised: 25:9:4
    assert _choose(logprobs[:2], 1.0, None).tolist() == [0, 0]
