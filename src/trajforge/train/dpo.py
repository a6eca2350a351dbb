"""Preference training (sigmoid DPO) of a trained student on prompt/chosen/rejected pairs.

The student of a checkpoint (`train sft --out`) is trained further on pairs
(`trajforge.train.rows.preference_pairs`: prompt + chosen and prompt + rejected, the prompt's
assistant turns marked `weight: 0`), with the same codec and loss mask as supervised
training: a sequence's log-probability is the sum over the answer's tokens only. The
reference is the starting checkpoint, frozen; its log-probabilities are computed once. Each
step samples `batch_size` pairs (seeded) and minimises

    -log sigmoid(beta * [(log pi(c) - log ref(c)) - (log pi(r) - log ref(r))])

with AdamW (linear warm-up, cosine decay to a tenth of the peak rate, as `train_sft`). The
checkpoint is written as `train_sft` writes one (atomically, model, codec and loss log,
each step's mean margin `beta * [...]` beside its loss), so it serves and evaluates as any
student; its manifest names the base and keeps the base's training tasks, plus the pairs'
(`manifest={"pair_tasks": [...]}`), so a held-out check sees both.
A run is not resumable: a new `out` each time.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from trajforge.errors import UserError
from trajforge.serve.student import Student
from trajforge.train.rows import Chat
from trajforge.train.sft import (
    LOSS_FILE,
    LossLog,
    Progress,
    SFTConfig,
    StepDone,
    check_out,
    checked_rows,
    data_fingerprint,
    encode_rows,
    learning_rate,
    save_checkpoint,
)

Pair = tuple[Chat, Chat]
Encoded = tuple[list[int], list[int]]


class DPOConfig(BaseModel):
    """How to train on preference pairs."""

    steps: int = Field(default=100, ge=1, description="Optimizer steps.")
    batch_size: int = Field(default=8, ge=1, description="Pairs per step.")
    beta: float = Field(default=0.1, gt=0, allow_inf_nan=False, description="DPO temperature.")
    lr: float = Field(default=1e-4, gt=0, allow_inf_nan=False, description="Peak learning rate.")
    warmup: int = Field(default=10, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="AdamW.")
    seed: int = Field(default=0, description="Seed of the data order.")
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads.")


def train_dpo(
    pairs: Sequence[Pair],
    base: Path,
    out: Path,
    config: DPOConfig,
    *,
    manifest: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Train the student of checkpoint `base` on `pairs` into the checkpoint `out`."""
    import torch

    if config.threads:
        torch.set_num_threads(config.threads)
    chosen = checked_rows([c for c, _ in pairs])
    rejected = checked_rows([r for _, r in pairs])
    if not chosen:
        raise UserError("no preference pairs: the dataset is empty")
    check_out(out)
    if Path(base).absolute() == out.absolute():
        raise UserError(f"{out}: is the base checkpoint; write the new one elsewhere")
    student = Student(base)
    model = student.model
    data = encode_pairs(student.codec, chosen, rejected, student.max_context)
    if not data:
        raise UserError("no pair has an answer within the context (every answer truncated)")
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    references = reference_logps(reference, data, student.codec.pad_id)
    del reference
    sft_view = _sft_view(student, config)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    generator = torch.Generator().manual_seed(config.seed)
    info = _info(student, base, chosen, rejected, len(data), config)
    info.update(manifest or {})
    info["train_tasks"] = sorted({*info["train_tasks"], *info.pop("pair_tasks", [])})
    log = LossLog(out / LOSS_FILE, keep_until=0)
    model.train()
    for step in range(1, config.steps + 1):
        rate = learning_rate(sft_view, step)
        for group in optimizer.param_groups:
            group["lr"] = rate
        loss, margin, tokens = _step(
            model, optimizer, data, references, student.codec.pad_id, config, generator
        )
        log.add(step, loss, rate, margin=margin)
        if progress:
            progress(StepDone(step, config.steps, loss, tokens))
    codec = student.codec
    save_checkpoint(out, model, codec, sft_view, optimizer, generator, config.steps, info, log)
    return out


def encode_pairs(
    codec: Any, chosen: Sequence[Chat], rejected: Sequence[Chat], max_context: int
) -> list[tuple[Encoded, Encoded]]:
    """(ids, mask) of both sequences of each pair; a pair with an empty side is dropped."""
    encoded = []
    for good, bad in zip(chosen, rejected, strict=True):
        sides = encode_rows(codec, [good, bad], max_context)
        if len(sides) == 2:
            encoded.append((sides[0], sides[1]))
    return encoded


def sequence_logps(model: Any, batch: Sequence[Encoded], pad_id: int) -> Any:
    """Sum of the log-probabilities of each sequence's masked tokens (a tensor, one per
    sequence): position t's token scored by the logits at t - 1."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.tensor([list(i) + [pad_id] * (width - len(i)) for i, _ in batch])
    attention = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
    mask = torch.tensor([list(m) + [0] * (width - len(m)) for _, m in batch], dtype=torch.bool)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)
    return (picked * mask[:, 1:]).sum(dim=1)


def reference_logps(reference: Any, data: Sequence[tuple[Encoded, Encoded]], pad_id: int) -> Any:
    """(chosen, rejected) log-probabilities of every pair under the frozen reference."""
    import torch

    rows = []
    with torch.inference_mode():
        for start in range(0, len(data), 32):
            chunk = data[start : start + 32]
            both = sequence_logps(reference, [s for pair in chunk for s in pair], pad_id)
            rows.append(both.view(-1, 2))
    return torch.cat(rows)


def dpo_loss(policy: Any, reference: Any, beta: float) -> tuple[Any, Any]:
    """Mean sigmoid DPO loss and the per-pair margins, from (chosen, rejected) columns."""
    import torch.nn.functional as F

    margins = beta * ((policy[:, 0] - reference[:, 0]) - (policy[:, 1] - reference[:, 1]))
    return -F.logsigmoid(margins).mean(), margins


def _step(model, optimizer, data, references, pad_id, config, generator):
    import torch

    picks = torch.randint(len(data), (config.batch_size,), generator=generator)
    batch = [side for i in picks.tolist() for side in data[i]]
    policy = sequence_logps(model, batch, pad_id).view(-1, 2)
    loss, margins = dpo_loss(policy, references[picks], config.beta)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    tokens = sum(len(ids) for ids, _ in batch)
    return float(loss.detach()), float(margins.detach().mean()), tokens


def _sft_view(student: Student, config: DPOConfig) -> SFTConfig:
    """The base's shape with this run's schedule: what the checkpoint writer records."""
    trained = {
        k: v for k, v in (student.manifest.get("config") or {}).items() if k in SFTConfig.SHAPE
    }
    schedule = {"steps": config.steps, "batch_size": config.batch_size, "lr": config.lr,
                "warmup": config.warmup, "seed": config.seed, "save_every": config.steps,
                "max_context": student.max_context}  # fmt: skip
    return SFTConfig(**trained).model_copy(update=schedule)


def _info(student, base, chosen, rejected, trained, config) -> dict[str, Any]:
    return {
        "objective": "dpo",
        "dpo": config.model_dump(),
        "base": str(base),
        "base_step": student.manifest.get("step"),
        "name": student.name,
        "train_tasks": list(student.manifest.get("train_tasks") or []),
        "pairs": len(chosen),
        "trained_pairs": trained,
        "data_sha256": data_fingerprint([*chosen, *rejected]),
    }
