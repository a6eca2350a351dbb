"""Training: falling loss, checkpoints that resume exactly, masks on the right tokens."""

from __future__ import annotations

import pickle
import statistics
from pathlib import Path

import orjson
import pytest
from tests.train.conftest import SMALL, teacher_rows

from trajforge.errors import UserError
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


def test_compact_prompts_are_the_same_with_messages_encoded_before() -> None:
    """`prompt` keeps each message's ids; a message's ids depend on the tools' schemas (the
    order of a call's values), so the same message under other tools is encoded again."""
    call = {"function": {"name": "put", "arguments": {"object": "mug 1", "receptacle": "shelf 1"}}}
    chat = [{"role": "user", "content": "put a mug in shelf 1."},
            {"role": "assistant", "content": None, "tool_calls": [call]}]  # fmt: skip
    params = {"object": {"type": "string"}, "receptacle": {"type": "string"}}
    tools = [{"name": "put", "parameters": {"properties": params}}]
    turned = [{"name": "put", "parameters": {"properties": dict(reversed(params.items()))}}]
    codec = CompactCodec.build([(chat, tools)])
    fresh = [*codec.encode(chat, tools)[0], codec.vocab["<|assistant|>"]]
    assert codec.prompt(chat, tools) == codec.prompt(chat, tools) == fresh
    values = [p for p in codec.pieces(codec.prompt(chat, turned)) if p.endswith(" 1")]
    assert values == ["shelf 1", "shelf 1", "mug 1"]  # the user's words, then the call's
    chat[0]["content"] = "put a mug in mug 1."
    assert codec.prompt(chat, tools) == [*codec.encode(chat, tools)[0], fresh[-1]] != fresh
    assert pickle.loads(pickle.dumps(codec)).prompt(chat, tools) == codec.prompt(chat, tools)


def test_a_message_too_deep_to_key_is_encoded_each_time() -> None:
    deep: object = "x"
    for _ in range(400):  # orjson reads this depth and does not write it
        deep = [deep]
    chat = [{"role": "user", "content": "put a mug in shelf 1.", "extra": deep}]
    codec = CompactCodec.build([(chat, [])])
    fresh = [*codec.encode(chat, [])[0], codec.vocab["<|assistant|>"]]
    assert codec.prompt(chat, []) == codec.prompt(chat, []) == fresh
    assert len(codec._encoded) == 0


CALL, ARG, END = "<|call|>", "<|arg|>", "<|end|>"


@pytest.mark.parametrize(
    "generated",
    [
        [CALL, "go", ARG, "shelf 1", ARG, "desk 1", END],  # a value past the schema's
        [CALL, "put", ARG, "mug 1", ARG, "shelf 1", ARG, "mug 1", ARG, "desk 1", END],
        [CALL, "put", ARG, "mug 1", END],  # a value short
        [CALL, "go", ARG, "shelf 1", CALL, "go", ARG, "desk 1", END],
        [CALL, "mug 1", "shelf 1", "put", ARG, "desk 1", END],  # a name of several words
    ],
)
def test_a_generated_call_reads_back_as_the_tokens_it_was(generated: list[str]) -> None:
    """The next prompt holds an answer as the codec encodes its decoded message: any
    difference is a retokenization drift point, which cuts the session's RL sequence."""
    tools = [
        {"name": "go", "parameters": {"properties": {"target": {}}}},
        {"name": "put", "parameters": {"properties": {"object": {}, "receptacle": {}}}},
    ]
    codec = CompactCodec.build([([{"role": "user", "content": "mug 1 shelf 1 desk 1"}], tools)])
    ids = [codec.vocab[piece] for piece in generated]
    message = codec.decode(ids, tools)
    assert codec.completion_ids(message, tools) == ids


SAVES = SMALL.model_copy(update={"steps": 4, "save_every": 2, "hidden": 16, "layers": 1})


def _same_weights(a: Path, b: Path) -> bool:
    import torch

    first, second = Student(a).model.state_dict(), Student(b).model.state_dict()
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def _failing_second_save(monkeypatch) -> None:
    """torch.save writes half of the second state it is given, then the disk is full."""
    import io

    import torch

    real, calls = torch.save, []

    def save(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) < 2:
            return real(obj, path, *args, **kwargs)
        buffer = io.BytesIO()
        real(obj, buffer)
        Path(path).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", save)


def test_a_save_that_fails_midway_keeps_the_last_checkpoint(tmp_path: Path, monkeypatch) -> None:
    rows = [(r["messages"], r["tools"]) for r in teacher_rows(range(6))]
    whole = train_sft(rows, tmp_path / "whole", SAVES)
    _failing_second_save(monkeypatch)
    out = tmp_path / "ckpt"
    with pytest.raises(UserError, match="checkpoint of step 4 could not be written"):
        train_sft(rows, out, SAVES)
    monkeypatch.undo()
    assert orjson.loads((out / "trajforge.json").read_bytes())["step"] == 2
    assert len(_losses(out)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "whole"]
    train_sft(rows, out, SAVES, resume=True)
    assert _same_weights(whole, out)
    assert _losses(whole) == _losses(out)


# Trains in a child process that stops inside its second save, before the rename.
KILLED_IN_SAVE = """
import sys, time
from pathlib import Path
import orjson
from trajforge.train import atomic
from trajforge.train.sft import SFTConfig, train_sft

data, out, marker, config = sys.argv[1:5]
sync, calls = atomic._sync_tree, []
def slow_sync(root):
    calls.append(root)
    sync(root)
    if len(calls) == 2:
        Path(marker).touch()
        time.sleep(600)
atomic._sync_tree = slow_sync
rows = [orjson.loads(line) for line in Path(data).read_bytes().splitlines()]
train_sft([(r["messages"], r["tools"]) for r in rows], Path(out),
          SFTConfig.model_validate_json(config))
"""


def test_a_run_killed_while_saving_resumes_bit_identically(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    rows = teacher_rows(range(6))
    data = tmp_path / "rows.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out, marker = tmp_path / "ckpt", tmp_path / "in-second-save"
    args = [sys.executable, "-c", KILLED_IN_SAVE, data, out, marker, SAVES.model_dump_json()]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600  # a guard against a hang, not a speed check
    while not marker.exists():
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert orjson.loads((out / "trajforge.json").read_bytes())["step"] == 2
    assert len(list(tmp_path.glob(".ckpt.*.partial"))) == 1  # the killed save's directory
    pairs = [(r["messages"], r["tools"]) for r in rows]
    train_sft(pairs, out, SAVES, resume=True)
    whole = train_sft(pairs, tmp_path / "whole", SAVES)
    assert _same_weights(whole, out)
    assert _losses(whole) == _losses(out)
    assert not list(tmp_path.glob(".*.partial"))
