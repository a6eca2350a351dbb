"""A trained student checkpoint: load it, generate for many chats at once, act as a chat model.

A checkpoint is a directory written by `trajforge train sft`:

    trajforge.json   codec (the tiny preset's vocabulary, or "hf"), training manifest
    model/           the causal LM (`save_pretrained` form); an HF codec's tokenizer too
    loss.jsonl       the training log (step, loss, learning rate)
    state.pt         optimizer and step, for resuming

`Student.generate(prompts)` decodes a whole batch in lock-step: prompts are left-padded, one
forward pass per new token over the batch with a key/value cache. That single call serves
concurrent HTTP requests (`trajforge serve`) and the batched evaluator alike, so what is
measured is what is served.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import UserError, one_line
from trajforge.serve.codec import SPECIALS, Codec, CompactCodec, HFCodec

MANIFEST = "trajforge.json"
MODEL_DIR = "model"


@dataclass
class Generated:
    """One generated answer: its tokens, their logprobs, the prompt and why it stopped."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


def read_manifest(path: Path) -> dict[str, Any]:
    manifest = path / MANIFEST
    if not manifest.is_file():
        raise UserError(f"{path}: not a trajforge checkpoint (no {MANIFEST})")
    try:
        data = orjson.loads(manifest.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise UserError(f"{manifest}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{manifest}: must be a JSON object, got {type(data).__name__}")
    codec = data.get("codec")
    if not isinstance(codec, dict) or codec.get("kind") not in ("compact", "hf"):
        raise UserError(f"{manifest}: 'codec' must be an object with kind 'compact' or 'hf'")
    if codec["kind"] == "compact" and not _vocabulary(codec.get("vocab")):
        raise UserError(f"{manifest}: the compact codec's 'vocab' lacks the special tokens")
    return data


def _vocabulary(vocab: Any) -> bool:
    return isinstance(vocab, dict) and all(isinstance(vocab.get(t), int) for t in SPECIALS)


def load_codec(path: Path, manifest: dict[str, Any]) -> Codec:
    if manifest["codec"]["kind"] == "compact":
        return CompactCodec(manifest["codec"]["vocab"])
    from transformers import AutoTokenizer

    try:
        return HFCodec(AutoTokenizer.from_pretrained(path / MODEL_DIR))
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{path / MODEL_DIR}: cannot load the tokenizer ({one_line(str(exc), 200)})"
        ) from None


class Student:
    """A loaded checkpoint (see module docstring)."""

    def __init__(self, path: Path, model: Any = None, codec: Codec | None = None) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.codec = codec or load_codec(self.path, self.manifest)
        self.model = model if model is not None else _load_model(self.path / MODEL_DIR)
        self.model.eval()
        self.name = self.manifest.get("name") or self.path.name
        self.max_context = int(self.manifest.get("max_context", 1024))

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int = 24,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> list[Generated]:
        """Greedy (temperature 0) or sampled completions of every prompt, batched."""
        import torch

        results: list[Generated] = []
        generator = torch.Generator().manual_seed(seed)
        with torch.inference_mode():
            for start in range(0, len(prompts), 512):
                chunk = [self._fit(p, max_new_tokens) for p in prompts[start : start + 512]]
                results += _decode(self, chunk, max_new_tokens, temperature, generator)
        return results

    def _fit(self, prompt: Sequence[int], room: int) -> list[int]:
        """Keep the most recent tokens when a prompt is longer than the context."""
        limit = self.max_context - room
        return list(prompt[-limit:]) if len(prompt) > limit else list(prompt)

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Log-probability of each completion token given everything before it."""
        import torch

        ids = torch.tensor([[*prompt_ids, *completion_ids]])
        with torch.inference_mode():
            logits = self.model(ids).logits[0, len(prompt_ids) - 1 : -1]
            logprobs = torch.log_softmax(logits.float(), dim=-1)
        picked = logprobs.gather(1, torch.tensor(list(completion_ids)).unsqueeze(1))
        return [float(x) for x in picked.squeeze(1)]


def _load_model(path: Path) -> Any:
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise UserError(
            f"serving a student needs the train extra ({exc.name} is missing): "
            "pip install 'trajforge[train]'"
        ) from None
    if not path.is_dir():
        raise UserError(f"{path.parent}: checkpoint has no {MODEL_DIR}/ directory")
    from transformers.utils import logging

    logging.disable_progress_bar()
    try:
        return AutoModelForCausalLM.from_pretrained(path)
    except (OSError, ValueError) as exc:  # no weights, no config.json, an unknown model type
        raise UserError(f"{path}: cannot load the model ({one_line(str(exc), 200)})") from None


def _cache_argument(model: Any) -> str:
    """Newer transformers name the key/value cache argument `cache`, older `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _decode(
    student: Student, prompts: list[list[int]], max_new: int, temperature: float, generator: Any
) -> list[Generated]:
    import torch
    from transformers import DynamicCache

    pad, eos = student.codec.pad_id, student.codec.eos_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    cache = DynamicCache()
    out_tokens: list[list[int]] = [[] for _ in prompts]
    out_logprobs: list[list[float]] = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    step_ids, step_positions = ids, positions
    cache_arg = _cache_argument(student.model)
    for _ in range(max_new):
        output = student.model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=step_positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_arg: cache},
        )
        logprobs = torch.log_softmax(output.logits[:, -1].float(), dim=-1)
        if temperature > 0:
            probs = torch.softmax(logprobs / temperature, dim=-1)
            chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            chosen = logprobs.argmax(dim=-1)
        picked = logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1)
        for row in (~done).nonzero().flatten().tolist():
            out_tokens[row].append(int(chosen[row]))
            out_logprobs[row].append(float(picked[row]))
        done |= chosen == eos
        if bool(done.all()):
            break
        step_ids = chosen.unsqueeze(1)
        step_positions = positions[:, -1:] + 1
        positions = torch.cat([positions, step_positions], dim=1)
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], dim=1)
    return [
        Generated(
            prompt_ids=prompt,
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason="stop" if tokens and tokens[-1] == eos else "length",
        )
        for prompt, tokens, logprobs in zip(prompts, out_tokens, out_logprobs, strict=True)
    ]


def answer_message(
    codec: Codec, generated: Generated, tools: Sequence[dict], answer_id: str
) -> dict[str, Any]:
    """The OpenAI-form assistant message of a generated answer (arguments as JSON strings)."""
    message = codec.decode(generated.token_ids, tools)
    calls = message.pop("tool_calls", None)
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{answer_id.rsplit('-', 1)[-1]}_{position}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": orjson.dumps(call["arguments"]).decode(),
                },
            }
            for position, call in enumerate(calls)
        ]
    return message


def finish_reason(message: dict[str, Any], generated: Generated) -> str:
    if generated.finish_reason == "length":
        return "length"
    return "tool_calls" if message.get("tool_calls") else "stop"


class DecodeSession:
    """Lock-step generation for a fixed set of growing conversations, reusing the cache.

    Each row's key/value cache is kept between calls: a call feeds only the tokens a row's
    prompt adds since the last call (the tool's answer and the next generation prompt),
    left-padded within the new segment (padding is masked out, positions continue). When a
    prompt does not extend what a row has been fed, or would outgrow the context, the whole
    batch is re-encoded from scratch. The result equals `Student.generate` on the full
    prompts (the tests check it); it is only cheaper.
    """

    def __init__(self, student: Student) -> None:
        self.student = student
        self.cache: Any = None
        self.fed: list[list[int]] = []
        self.mask: Any = None
        self.last: Any = None

    def keep(self, rows: Sequence[int]) -> None:
        """Drop every row not listed (finished conversations), keeping the order given."""
        import torch

        if self.cache is None:
            return
        index = torch.tensor(list(rows), dtype=torch.long)
        self.cache.batch_select_indices(index)
        self.mask, self.last = self.mask[index], self.last[index]
        self.fed = [self.fed[i] for i in rows]

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 24,
        temperature: float = 0.0, seed: int = 0,
    ) -> list[Generated]:  # fmt: skip
        import torch

        rows = [list(p) for p in prompts]
        if not self._extends(rows, max_new_tokens):
            self._reset(len(rows))
            rows = [self.student._fit(p, max_new_tokens) for p in rows]
        segments = [p[len(f) :] for p, f in zip(rows, self.fed, strict=True)]
        generator = torch.Generator().manual_seed(seed)
        with torch.inference_mode():
            out = self._run(rows, segments, max_new_tokens, temperature, generator)
        return out

    def _extends(self, prompts: list[list[int]], room: int) -> bool:
        if self.cache is None or len(prompts) != len(self.fed):
            return False
        limit = self.student.max_context - room
        return all(
            len(p) > len(f) and len(p) <= limit and p[: len(f)] == f
            for p, f in zip(prompts, self.fed, strict=True)
        )

    def _reset(self, rows: int) -> None:
        import torch
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.fed = [[] for _ in range(rows)]
        self.mask = torch.zeros(rows, 0, dtype=torch.long)
        self.last = torch.full((rows,), -1, dtype=torch.long)

    def _forward(self, ids: Any, new_mask: Any, positions: Any) -> Any:
        import torch

        self.mask = torch.cat([self.mask, new_mask], dim=1)
        output = self.student.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{_cache_argument(self.student.model): self.cache},
        )
        return torch.log_softmax(output.logits[:, -1].float(), dim=-1)

    def _run(self, prompts, segments, max_new, temperature, generator) -> list[Generated]:
        import torch

        codec = self.student.codec
        width = max(len(s) for s in segments)
        ids = torch.tensor([[codec.pad_id] * (width - len(s)) + s for s in segments])
        seg_mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in segments])
        positions = self.last.unsqueeze(1) + seg_mask.cumsum(1)
        self.last = positions[:, -1].clone()
        logprobs = self._forward(ids, seg_mask, positions.clamp(min=0))
        for row, prompt in enumerate(prompts):
            self.fed[row] = list(prompt)
        tokens: list[list[int]] = [[] for _ in prompts]
        scores: list[list[float]] = [[] for _ in prompts]
        done = torch.zeros(len(prompts), dtype=torch.bool)
        for step in range(max_new):
            if temperature > 0:
                probs = torch.softmax(logprobs / temperature, dim=-1)
                chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            else:
                chosen = logprobs.argmax(dim=-1)
            picked = logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1)
            for row in (~done).nonzero().flatten().tolist():
                tokens[row].append(int(chosen[row]))
                scores[row].append(float(picked[row]))
            done |= chosen == codec.eos_id
            if bool(done.all()) or step == max_new - 1:
                break
            live = (~done).long()
            for row in live.nonzero().flatten().tolist():
                self.fed[row].append(int(chosen[row]))
            self.last = self.last + live
            logprobs = self._forward(chosen.unsqueeze(1), live.unsqueeze(1), self.last.unsqueeze(1))
        return [
            Generated(
                prompt_ids=prompt,
                token_ids=row_tokens,
                logprobs=row_scores,
                finish_reason="stop" if row_tokens and row_tokens[-1] == codec.eos_id else "length",
            )
            for prompt, row_tokens, row_scores in zip(prompts, tokens, scores, strict=True)
        ]
