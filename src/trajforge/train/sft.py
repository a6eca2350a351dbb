"""Supervised fine-tuning on chat rows, loss only on the assistant turns meant to be learned.

A compact training loop of our own rather than TRL's `SFTTrainer`: the data are small and the
model tiny, and the loop has to be exactly reproducible from a seed, resumable, and cheap on
CPU. Each step samples `batch_size` rows (seeded), pads them on the right, and takes the mean
cross-entropy over target tokens (the mask of `Codec.encode`); AdamW with a linear warm-up
and a cosine decay to a tenth of the peak rate. Every `save_every` steps and at the end the
checkpoint is written (model, optimizer and step in `state.pt`, the loss log in
`loss.jsonl`); `resume=True` continues from it with the same data order as an unbroken run.

Rows are checked by `trajforge.train.rows` before anything is built; a resumed run must keep
the model's shape (`SFTConfig.SHAPE`) and its data (a fingerprint in the manifest). Each
checkpoint replaces `out` as a whole, atomically (`trajforge.train.atomic`): a failed or
killed save leaves the previous checkpoint in place, so `out` must be new, empty or a
checkpoint.

`model="tiny"` builds a Llama-style model from scratch (hidden 128, 4 layers, 4 heads by
default) with a word-level vocabulary built from the rows; any other `model` is a pretrained
causal LM (a known name such as `smollm2-135m`, a GGUF file or a Hugging Face directory),
trained with its own tokenizer and chat template, fully or with LoRA (`lora_rank`;
`train/hf_student.py`). `accumulate` sums the gradients of several batches per step;
`bf16` runs forward and backward under bfloat16 autocast (fp32 master weights), on CPU too;
on a CPU without bf16 units it warns that it is far slower there (`serve/precision.py`).
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import orjson
from pydantic import BaseModel, Field, model_validator

from trajforge.errors import UserError
from trajforge.serve.codec import Codec, CompactCodec
from trajforge.serve.precision import warn_if_slow_bf16
from trajforge.serve.student import MANIFEST, MODEL_DIR, read_manifest
from trajforge.train import hf_student
from trajforge.train.atomic import restore_previous, write_directory
from trajforge.train.loss import learned_loss
from trajforge.train.rows import chat_row

STATE_FILE = "state.pt"
LOSS_FILE = "loss.jsonl"
Row = tuple[list[dict], list[dict]]


class SFTConfig(BaseModel):
    """What to train and how."""

    SHAPE: ClassVar[tuple[str, ...]] = (
        "model", "hidden", "layers", "heads", "max_context", "lora_rank",
    )  # fmt: skip
    """Settings a resumed run must keep: they fix the model's weights or its vocabulary."""

    model: str = Field(
        default="tiny",
        description="'tiny', a known pretrained name (smollm2-135m), a GGUF file or a Hugging "
        "Face model directory.",
    )
    steps: int = Field(default=1200, ge=1, description="Optimizer steps.")
    batch_size: int = Field(default=16, ge=1, description="Rows per step.")
    lr: float = Field(default=1e-3, gt=0, allow_inf_nan=False, description="Peak learning rate.")
    warmup: int = Field(default=50, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(
        default=0.01, ge=0, allow_inf_nan=False, description="AdamW weight decay."
    )
    seed: int = Field(default=0, description="Seed of initialisation and data order.")
    max_context: int = Field(default=1024, ge=16, description="Longest sequence (tokens).")
    save_every: int = Field(default=200, ge=1, description="Checkpoint every this many steps.")
    hidden: int = Field(default=128, ge=2, description="tiny: width (a multiple of 2 x heads).")
    layers: int = Field(default=4, ge=1, description="tiny: transformer layers.")
    heads: int = Field(default=4, ge=1, description="tiny: attention heads.")
    threads: int | None = Field(
        default=None, ge=1, description="torch CPU threads (default: torch's)."
    )
    accumulate: int = Field(default=1, ge=1, description="Batches of gradient per optimizer step.")
    bf16: bool = Field(default=False, description="bfloat16 autocast (on CPU too).")
    lora_rank: int = Field(default=0, ge=0, description="Pretrained models: LoRA rank (0: full).")
    lora_alpha: float = Field(default=32.0, gt=0, description="LoRA scale numerator.")

    @model_validator(mode="after")
    def _heads_divide_the_width(self) -> SFTConfig:
        if self.model == "tiny" and self.hidden % (2 * self.heads):
            raise ValueError(
                f"hidden {self.hidden} must be a multiple of {2 * self.heads} (2 x heads "
                f"{self.heads}): each attention head needs a width that is even"
            )
        return self


class StepDone(NamedTuple):
    """One optimizer step, for a progress display."""

    step: int
    steps: int
    loss: float
    tokens: int


Progress = Callable[[StepDone], None]


def checked_rows(rows: Sequence[Row]) -> list[Row]:
    """Each (messages, tools) row checked by `chat_row` (`tools` as a list); the first bad
    row is a `UserError` naming its index and field."""
    checked = []
    for index, (messages, tools) in enumerate(rows):
        try:
            row = chat_row({"messages": messages, "tools": tools})
        except ValueError as exc:
            raise UserError(f"training row {index}: {exc}") from None
        checked.append((row["messages"], row["tools"]))
    return checked


def data_fingerprint(rows: Sequence[Row]) -> str:
    """SHA-256 of the rows in order (what a resumed run must train on again)."""
    digest = hashlib.sha256()
    for messages, tools in rows:
        digest.update(orjson.dumps([messages, tools], option=orjson.OPT_SORT_KEYS, default=str))
    return digest.hexdigest()


def encode_rows(codec: Codec, rows: Sequence[Row], max_context: int) -> list[tuple]:
    """(ids, mask) per row, left-truncated to `max_context`; rows with no target are dropped."""
    encoded = []
    for messages, tools in rows:
        ids, mask = codec.encode(messages, tools)
        ids, mask = ids[-max_context:], mask[-max_context:]
        if any(mask):
            encoded.append((ids, mask))
    return encoded


def train_sft(
    rows: Sequence[Row],
    out: Path,
    config: SFTConfig,
    *,
    resume: bool = False,
    manifest: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Train on `rows` and write the checkpoint directory `out`; returns `out`."""
    import torch

    if config.threads:
        torch.set_num_threads(config.threads)
    if config.bf16:
        warn_if_slow_bf16("bf16 autocast")
    rows = checked_rows(rows)
    if not rows:
        raise UserError("no training rows: the dataset is empty")
    check_out(out)
    fingerprint = data_fingerprint(rows)
    state = _resume_state(out, config, fingerprint) if resume else None
    model, codec = _start(rows, out, config, state is not None)
    data = encode_rows(codec, rows, config.max_context)
    if not data:
        raise UserError("no row has a turn to learn (every assistant turn has weight 0)")
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    first = 1
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        first = state["step"] + 1
    info = {"rows": len(rows), "trained_rows": len(data), "data_sha256": fingerprint}
    info.update(manifest or {})
    log = LossLog(out / LOSS_FILE, keep_until=first - 1)
    model.train()
    for step in range(first, config.steps + 1):
        rate = learning_rate(config, step)
        for group in optimizer.param_groups:
            group["lr"] = rate
        loss, tokens = _step(model, optimizer, data, codec.pad_id, config, generator)
        log.add(step, loss, rate)
        if progress:
            progress(StepDone(step, config.steps, loss, tokens))
        if step % config.save_every == 0 or step == config.steps:
            save_checkpoint(out, model, codec, config, optimizer, generator, step, info, log)
    return out


def check_out(out: Path) -> None:
    """Refuse an output path that training could not write, or would wipe, before training."""
    restore_previous(out.absolute())
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: is a file; give a directory for the checkpoint")
    if out.is_dir() and not (out / MANIFEST).is_file() and any(out.iterdir()):
        raise UserError(
            f"{out}: holds files but no checkpoint; give a new or empty directory "
            "(each save replaces the checkpoint directory as a whole)"
        )
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out}: cannot create a checkpoint here ({exc})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{out}: cannot create a checkpoint here ({parent} is not writable)")


def _step(model, optimizer, data, pad_id, config: SFTConfig, generator) -> tuple[float, int]:
    """One optimizer step over `accumulate` batches: the mean of their losses, and the tokens
    they held."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    total, tokens = 0.0, 0
    for _ in range(config.accumulate):
        picks = torch.randint(len(data), (config.batch_size,), generator=generator).tolist()
        ids, attention, labels = _batch([data[i] for i in picks], pad_id)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.bf16):
            loss = learned_loss(model, ids, attention, labels)
        (loss / config.accumulate).backward()
        total += float(loss.detach())
        tokens += int(attention.sum())
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    return total / config.accumulate, tokens


def _batch(batch: list[tuple], pad_id: int) -> tuple[Any, Any, Any]:
    """Right-padded ids, attention mask and labels (-100 off the loss mask)."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.tensor([list(i) + [pad_id] * (width - len(i)) for i, _ in batch])
    attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
    mask = torch.tensor([list(m) + [0] * (width - len(m)) for _, m in batch], dtype=torch.bool)
    return ids, attention, ids.masked_fill(~mask, -100)


def learning_rate(config: SFTConfig, step: int) -> float:
    if step <= config.warmup:
        return config.lr * step / max(1, config.warmup)
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _start(rows: Sequence[Row], out: Path, config: SFTConfig, resuming: bool) -> tuple[Any, Codec]:
    import torch

    torch.manual_seed(config.seed)
    if resuming and config.lora_rank and config.model != "tiny":
        return hf_student.resume_lora(config, out / MODEL_DIR)
    if resuming:
        from trajforge.serve.student import Student

        student = Student(out)
        return student.model, student.codec
    if config.model == "tiny":
        codec = CompactCodec.build(rows)
        return _tiny_model(config, len(codec.vocab)), codec
    return hf_student.load_base(config)


def _tiny_model(config: SFTConfig, vocab_size: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden,
        intermediate_size=config.hidden * 2,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=config.max_context,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(shape)


def _resume_state(out: Path, config: SFTConfig, fingerprint: str) -> dict[str, Any]:
    """The optimizer state to continue from, once the run is known to be the same run."""
    path = out / STATE_FILE
    if not path.is_file():
        raise UserError(f"{out}: nothing to resume (no {STATE_FILE})")
    manifest = read_manifest(out)
    _check_same_run(out, manifest, config, fingerprint)
    state = _load_state(path)
    if state["step"] >= config.steps:
        raise UserError(
            f"{out}: already trained for {state['step']} steps; to continue, give more steps "
            f"than that (not {config.steps})"
        )
    return state


def _check_same_run(out: Path, manifest: dict, config: SFTConfig, fingerprint: str) -> None:
    trained = manifest.get("config") or {}
    for name in SFTConfig.SHAPE:
        if name in trained and trained[name] != getattr(config, name):
            raise UserError(
                f"{out}: cannot resume with {name} {getattr(config, name)}: the checkpoint "
                f"was trained with {name} {trained[name]} (train a new one into another --out)"
            )
    if manifest.get("data_sha256", fingerprint) != fingerprint:
        raise UserError(
            f"{out}: cannot resume on other data: the checkpoint was trained on "
            f"{manifest.get('rows')} rows with fingerprint {manifest['data_sha256'][:12]}, "
            f"these are different ({fingerprint[:12]}); train a new one into another --out"
        )


def _load_state(path: Path) -> dict[str, Any]:
    import torch

    try:
        state = torch.load(path, weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as exc:
        raise UserError(f"{path}: cannot be read ({exc}); the resume state is damaged") from None
    if not isinstance(state, dict) or not {"optimizer", "generator", "step"} <= set(state):
        raise UserError(f"{path}: not a trajforge resume state (optimizer, generator, step)")
    return state


class LossLog:
    """The loss curve, appended each step and written with every checkpoint."""

    def __init__(self, path: Path, keep_until: int) -> None:
        self.path = path
        self.rows: list[dict[str, float]] = []
        if keep_until and path.is_file():
            lines = path.read_bytes().splitlines()
            self.rows = [r for r in map(orjson.loads, lines) if r["step"] <= keep_until]

    def add(self, step: int, loss: float, rate: float, **figures: float) -> None:
        extra = {name: round(value, 5) for name, value in figures.items()}
        self.rows.append({"step": step, "loss": round(loss, 5), "lr": rate, **extra})

    def write(self, path: Path) -> None:
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in self.rows))


def save_checkpoint(out, model, codec, config, optimizer, generator, step, info, log) -> None:
    """Write the checkpoint of `step` into a new directory, then swap it in for `out`."""
    import torch
    from transformers.utils import logging

    logging.disable_progress_bar()

    def fill(staging: Path) -> None:
        hf_student.save_weights(model, codec, staging / MODEL_DIR)
        state = {"optimizer": optimizer.state_dict(), "generator": generator.get_state(),
                 "step": step}  # fmt: skip
        torch.save(state, staging / STATE_FILE)
        log.write(staging / LOSS_FILE)
        manifest = {
            "codec": codec.to_json(),
            "config": config.model_dump(),
            "step": step,
            "max_context": config.max_context,
            "parameters": sum(p.numel() for p in model.parameters()),
            "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            **info,
        }
        (staging / MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))

    try:
        write_directory(out, fill)
    except OSError as exc:
        raise UserError(
            f"{out}: the checkpoint of step {step} could not be written ({exc}); "
            "what the directory held before is unchanged"
        ) from None
