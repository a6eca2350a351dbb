"""Training: falling loss, checkpoints that resume exactly, masks on the right tokens."""

from __future__ import annotations

import statistics
from pathlib import Path

import orjson
import pytest
from tests.train.conftest import SMALL, teacher_rows

from trajforge.serve.codec import CompactCodec
from trajforge.serve.student import Student
from trajforge.train.sft import train_sft


def _losses(path: Path) -> list[float]:
    return [orjson.loads(line)["loss"] for line in (path / "loss.jsonl").read_bytes().splitlines()]


def test_tiny_student_loss_falls_and_the_log_is_stored(student_dir: Path) -> None:
    losses = _losses(student_dir)
    assert len(losses) == SMALL.steps
    assert statistics.fmean(losses[-20:]) < 0.5 * statistics.fmean(losses[:20])
    manifest = orjson.loads((student_dir / "trajforge.json").read_bytes())
    assert manifest["step"] == SMALL.steps and manifest["train_tasks"]


def test_resume_continues_to_the_same_weights(tmp_path: Path) -> None:
    import torch

    rows = [(r["messages"], r["tools"]) for r in teacher_rows(range(6))]
    short = SMALL.model_copy(update={"steps": 12, "save_every": 6, "hidden": 16, "layers": 1})
    whole = train_sft(rows, tmp_path / "whole", short)
    half = train_sft(rows, tmp_path / "half", short.model_copy(update={"steps": 6}))
    resumed = train_sft(rows, half, short, resume=True)
    a, b = Student(whole).model.state_dict(), Student(resumed).model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert _losses(whole) == pytest.approx(_losses(resumed), abs=1e-4)


def test_compact_codec_masks_only_learned_assistant_turns() -> None:
    messages = [
        {"role": "system", "content": "ignored"},
        {"role": "user", "content": "put a mug in shelf 1."},
        {"role": "assistant", "content": None, "weight": 0,
         "tool_calls": [{"function": {"name": "go", "arguments": {"target": "desk 1"}}}]},
        {"role": "tool", "content": "You arrive at desk 1."},
        {"role": "assistant", "content": None,
         "tool_calls": [{"function": {"name": "go", "arguments": '{"target": "shelf 1"}'}}]},
    ]  # fmt: skip
    tools = [{"type": "function", "function": {"name": "go", "parameters": {
        "type": "object", "properties": {"target": {"type": "string"}}}}}]  # fmt: skip
    codec = CompactCodec.build([(messages, tools)])
    ids, mask = codec.encode(messages, tools)
    learned = [p for p, m in zip(codec.pieces(ids), mask, strict=True) if m]
    assert learned == ["<|call|>", "go", "<|arg|>", "shelf 1", "<|end|>"]
    decoded = codec.decode(codec.encode([messages[-1]], tools)[0][1:], tools)
    assert decoded["tool_calls"] == [{"name": "go", "arguments": {"target": "shelf 1"}}]
