"""A trained student checkpoint: load it, generate for many chats at once, act as a chat model.

A checkpoint is a directory written by `trajforge train sft` (a pretrained model's name, GGUF
file or Hugging Face directory is loaded the same way, with its own tokenizer and template):

    trajforge.json   codec (the tiny preset's vocabulary, or "hf"), training manifest
    model/           the causal LM (`save_pretrained` form); an HF codec's tokenizer too
    loss.jsonl       the training log (step, loss, learning rate)
    state.pt         optimizer and step, for resuming

`Student.generate(prompts)` decodes a whole batch in lock-step: prompts are left-padded, one
forward pass per new token over the batch with a key/value cache, rows that have finished
leaving it a quarter of the batch at a time (`_sample_loop`). That single call serves
concurrent HTTP requests (`trajforge serve`) and the batched evaluator alike, so what is
measured is what is served. Given a `PrefixCache`, each row starts from the cached states of
its prompt's longest served prefix and only the rest is fed (`_Batch.reusing`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from trajforge.errors import UserError, one_line
from trajforge.models.smollm import is_pretrained, resolve_model
from trajforge.serve.codec import SPECIALS, Codec, CompactCodec, HFCodec
from trajforge.serve.lean_llama import lean_llama
from trajforge.serve.precision import warn_if_slow_bf16
from trajforge.serve.prefix_cache import Entry, Hit, PrefixCache, common_length

MANIFEST = "trajforge.json"
MODEL_DIR = "model"
BASE_CONTEXT = 2048
"""Longest sequence (tokens) a pretrained model is served with when it is not a checkpoint."""
MAX_ROWS = 512
"""Prompts decoded together at most by one `Student.generate` call (more run in turn)."""
MIN_SHARED = 32
"""Opening tokens a batch's prompts must share for `_Batch.feed` to feed them only once."""
TURN_TOKENS = {"compact": 16, "hf": 48}
"""New tokens an agent turn gets by default, by codec: a tool call is a few words of the tiny
student's vocabulary, and about 30 tokens of a pretrained model's text convention."""
TokenSink = Callable[[int, int, float], None]
"""Called as each token is chosen: (row, token id, logprob)."""


@dataclass
class Generated:
    """One generated answer: its tokens, their logprobs, the prompt and why it stopped."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    cached_tokens: int = 0
    """Prompt tokens whose states were reused (the prefix cache's, or a `DecodeSession`'s)."""


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


def load_codec(model_dir: Path, manifest: dict[str, Any]) -> Codec:
    if manifest["codec"]["kind"] == "compact":
        return CompactCodec(manifest["codec"]["vocab"])
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{model_dir}: cannot load the tokenizer ({one_line(str(exc), 200)})"
        ) from None
    return HFCodec(tokenizer, manifest["codec"].get("tools"))


def locate(spec: Path | str) -> tuple[Path, dict[str, Any], Path]:
    """(path, manifest, model directory) of a checkpoint, or of a pretrained model given by
    name, GGUF file or Hugging Face directory (`trajforge.models.smollm.resolve_model`)."""
    path = Path(spec)
    if (path / MANIFEST).is_file() or (path.exists() and not is_pretrained(str(spec))):
        return path, read_manifest(path), path / MODEL_DIR
    model_dir = resolve_model(str(spec))  # or the error naming what a model can be
    manifest = {"name": path.name, "base": str(spec), "codec": {"kind": "hf"},
                "max_context": BASE_CONTEXT}  # fmt: skip
    return model_dir, manifest, model_dir


class Student:
    """A loaded checkpoint (see module docstring)."""

    def __init__(
        self, path: Path | str, model: Any = None, codec: Codec | None = None, bf16: bool = False
    ) -> None:
        """`bf16`: the weights in bfloat16 (half the memory traffic of a decode step, about
        2.5 times faster prefill on a CPU with bf16 units, far slower without them, which it
        warns of; logprobs are rounded accordingly)."""
        self.path, self.manifest, model_dir = locate(path)
        self.codec = codec or load_codec(model_dir, self.manifest)
        self.model = model if model is not None else _load_model(model_dir)
        self.bf16 = bf16
        if bf16:
            import torch

            warn_if_slow_bf16("bf16 weights")
            self.model = self.model.to(torch.bfloat16)
        self.model.eval()
        self.lean = lean_llama(self.model)
        """The lean forward pass decoding uses, when the model is a Llama it reproduces."""
        self.name = self.manifest.get("name") or self.path.name
        self.max_context = serving_context(self.manifest, self.model)
        self.turn_tokens = TURN_TOKENS["hf" if isinstance(self.codec, HFCodec) else "compact"]
        """New tokens an agent turn gets unless told otherwise (`TURN_TOKENS`)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int = 24,
        temperature: float = 0.0,
        seed: int | Sequence[int] = 0,
        prefix_cache: PrefixCache | None = None,
        on_token: TokenSink | None = None,
    ) -> list[Generated]:
        """Greedy (temperature 0) or sampled completions of every prompt, batched.

        Each prompt samples with a random generator of its own, seeded by its entry of `seed`
        (one per prompt), or `seed` plus its row: a prompt and a seed give the same
        completion whatever else is in the batch. With a `prefix_cache`, each prompt is fed
        from its longest cached prefix on and every served sequence is kept there; the result
        is the same (within float rounding). `on_token(row, token_id, logprob)` is called for
        each token as it is chosen."""
        import torch

        seeds = row_seeds(seed, len(prompts))
        results: list[Generated] = []
        with torch.inference_mode():
            for start in range(0, len(prompts), MAX_ROWS):
                chunk = [self.fit(p, max_new_tokens) for p in prompts[start : start + MAX_ROWS]]
                sink = _shifted(on_token, start)
                draws = _draws(seeds[start : start + MAX_ROWS], temperature, max_new_tokens)
                sampling = _Sampling(max_new_tokens, temperature, draws, sink)
                results += _decode(self, chunk, sampling, prefix_cache)
        return results

    def fit(self, prompt: Sequence[int], room: int) -> list[int]:
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


def codec_identity(student: Student) -> str:
    """A short fingerprint of the student's tokenizer and chat template."""
    blob = orjson.dumps(student.codec.to_json(), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()[:16]


def serving_context(manifest: dict[str, Any], model: Any) -> int:
    """Tokens a prompt plus its completion may hold. A student trained from scratch knows no
    position past its training context; a pretrained one (an `hf` codec) keeps at least
    `BASE_CONTEXT` of its own, however short the rows it was fine-tuned on (an agent's
    episode outgrows its training rows: cutting its start would drop the system prompt)."""
    trained = int(manifest.get("max_context", 1024))
    if manifest.get("codec", {}).get("kind") != "hf":
        return trained
    limit = int(getattr(model.config, "max_position_embeddings", None) or BASE_CONTEXT)
    return max(trained, min(BASE_CONTEXT, limit))


def _shifted(sink: TokenSink | None, offset: int) -> TokenSink | None:
    """`sink` for rows counted from `offset` (a later chunk of a long batch)."""
    if sink is None or not offset:
        return sink
    return lambda row, token, logprob: sink(row + offset, token, logprob)


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


def _layer_count(model: Any) -> int:
    return int(model.config.get_text_config().num_hidden_layers)


class _Batch:
    """The decoding state of a batch: key/value cache, attention mask, each row's last position.

    A row's tokens need not be contiguous: a segment is left-padded, a finished row is fed
    masked tokens, and positions continue from the row's last real token, so a row's states
    are exactly those of its tokens alone (padding is never attended to)."""

    def __init__(self, student: Student, cache: Any, mask: Any, last: Any) -> None:
        from trajforge.serve.kv_cache import cache_argument

        self.student = student
        self.cache, self.mask, self.last = cache, mask, last
        self.cache_arg = cache_argument(student.model)

    @classmethod
    def empty(cls, student: Student, rows: int) -> _Batch:
        import torch

        from trajforge.serve.kv_cache import growing_cache

        mask = torch.zeros(rows, 0, dtype=torch.long)
        cache = growing_cache(_layer_count(student.model))
        return cls(student, cache, mask, torch.full((rows,), -1, dtype=torch.long))

    @classmethod
    def reusing(cls, student: Student, hits: Sequence[Hit], room: int = 0) -> _Batch:
        """A batch whose rows start with the cached states of their hits (left-padded),
        written straight into buffers with `room` more tokens to append before growing."""
        import torch

        from trajforge.serve.kv_cache import growing_cache

        width = max((h.length for h in hits), default=0)
        if width == 0:
            return cls.empty(student, len(hits))
        layers = []
        for layer in range(len(next(h.entry for h in hits if h.entry and h.length).keys)):
            layers.append(
                tuple(_stack(hits, width, room, layer, kind) for kind in ("keys", "values"))
            )
        mask = torch.tensor([[0] * (width - h.length) + [1] * h.length for h in hits])
        last = torch.tensor([h.length - 1 for h in hits])
        return cls(student, growing_cache(len(layers), layers, length=width), mask, last)

    def feed(self, segments: Sequence[Sequence[int]]) -> Any:
        """Feed each row its segment (at least one token each); the next-token logprobs.

        Into an empty batch, the opening all segments share (an agent's system prompt and
        tool list) is fed once and its states copied to every row."""
        import torch

        shared = _shared_length(segments) if self.mask.shape[1] == 0 else 0
        if shared >= MIN_SHARED:
            self._feed_once(segments[0][:shared], len(segments))
            segments = [s[shared:] for s in segments]
        pad = self.student.codec.pad_id
        width = max(len(s) for s in segments)
        ids = torch.tensor([[pad] * (width - len(s)) + list(s) for s in segments])
        seg_mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in segments])
        positions = self.last.unsqueeze(1) + seg_mask.cumsum(1)
        self.last = positions[:, -1].clone()
        return self._forward(ids, seg_mask, positions.clamp(min=0))

    def _feed_once(self, opening: Sequence[int], rows: int) -> None:
        import torch

        single = _Batch.empty(self.student, 1)
        single.feed([opening])
        for layer in single.cache.layers:
            layer.batch_repeat_interleave(rows)
        self.cache = single.cache
        self.mask = torch.ones(rows, len(opening), dtype=torch.long)
        self.last = torch.full((rows,), len(opening) - 1, dtype=torch.long)

    def step(self, chosen: Any, live: Any) -> Any:
        """Feed each live row its chosen token (finished rows get a masked one)."""
        self.last = self.last + live
        return self._forward(chosen.unsqueeze(1), live.unsqueeze(1), self.last.unsqueeze(1))

    def _forward(self, ids: Any, new_mask: Any, positions: Any) -> Any:
        import torch

        self.mask = torch.cat([self.mask, new_mask], dim=1)
        if self.student.lean is not None:
            return self.student.lean(ids, self.mask, positions, self.cache)
        output = self.student.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_arg: self.cache},
        )
        return torch.log_softmax(output.logits[:, -1].float(), dim=-1)

    def select(self, rows: Sequence[int]) -> None:
        """Keep only `rows` (in that order), and no leading column none of them uses."""
        import torch

        index = torch.tensor(list(rows), dtype=torch.long)
        self.cache.batch_select_indices(index)
        self.mask, self.last = self.mask[index], self.last[index]
        unused = int(self.mask.any(0).long().argmax()) if self.mask.shape[1] else 0
        if unused:
            for layer in self.cache.layers:
                layer.drop_front(unused)
            self.mask = self.mask[:, unused:]

    def rewind(self, keep: dict[int, int]) -> None:
        """Forget all but the first `keep[row]` states of each row listed, then move every
        row's states to the right end (left padding), so the forgotten ones take no room."""
        import torch

        for row, count in keep.items():
            held = self.mask[row].nonzero().squeeze(1)
            self.mask[row, held[count:]] = 0
            self.last[row] = count - 1
        width = int(self.mask.sum(1).max())
        # a stable sort puts each row's padding first and its states after, both in order
        columns = torch.sort(self.mask, dim=1, stable=True).indices[:, self.mask.shape[1] - width :]
        for layer in self.cache.layers:
            layer.gather_tokens(columns)
        self.mask = self.mask.gather(1, columns)

    def entry(self, row: int, tokens: list[int]) -> Entry:
        """The states of `row` (its `tokens`, every one fed) as a prefix cache entry."""
        index = self.mask[row].nonzero().squeeze(1)
        assert len(index) == len(tokens), "a row's fed tokens and its states disagree"
        keys = [layer.keys[row].index_select(1, index) for layer in self.cache.layers]
        values = [layer.values[row].index_select(1, index) for layer in self.cache.layers]
        return Entry(tokens, keys, values)


def _shared_length(segments: Sequence[Sequence[int]]) -> int:
    """How many opening tokens all segments share, leaving each at least one of its own."""
    if len(segments) < 2:
        return 0
    limit = min(len(s) for s in segments) - 1
    return min(limit, *(common_length(segments[0], s) for s in segments[1:]))


def _stack(hits: Sequence[Hit], width: int, room: int, layer: int, kind: str) -> Any:
    """One layer's keys (or values) of the hits' entries, left-padded to `width` tokens, in a
    buffer of `width + room` (padding zeroed: masked states must still be finite)."""
    sample = getattr(next(h.entry for h in hits if h.entry and h.length), kind)[layer]
    heads, _, dim = sample.shape
    out = sample.new_empty(len(hits), heads, width + room, dim)
    for row, hit in enumerate(hits):
        start = width - hit.length
        out[row, :, :start] = 0
        if hit.entry is not None and hit.length:
            out[row, :, start:width] = getattr(hit.entry, kind)[layer][:, : hit.length]
    return out


def row_seeds(seed: int | Sequence[int], rows: int) -> list[int]:
    """Each row's sampling seed: its own, or `seed` plus its row (within 64 bits)."""
    if isinstance(seed, int):
        return [(seed + row) % 2**64 for row in range(rows)]
    if len(seed) != rows:
        raise ValueError(f"{len(seed)} seeds for {rows} prompts")
    return list(seed)


def _draws(seeds: Sequence[int], temperature: float, steps: int) -> Any:
    """`[rows, steps]`: each row's uniform draw for each token it may sample, from a random
    generator of its own seed, so a row's draws do not depend on the others (None when
    decoding greedily). Drawn at once: a multinomial call a row and a step took 2.4 ms a step
    at 48 rows, about a quarter of the tiny student's step."""
    import torch

    if temperature <= 0:
        return None
    rows = [torch.rand(steps, generator=torch.Generator().manual_seed(seed)) for seed in seeds]
    return torch.stack(rows).double()


@dataclass
class _Sampling:
    max_new: int
    temperature: float
    draws: Any
    """`_draws`: column k samples the k-th token of every row (None: greedy)."""
    on_token: TokenSink | None = None


RowRetired = Callable[[_Batch, int, int], None]
"""Called as a finished row leaves a batch: (batch, its index in the batch now, its row)."""


def _sample_loop(
    batch: _Batch, logprobs: Any, fed: list[list[int]], sampling: _Sampling,
    retired: RowRetired | None = None,
) -> tuple[list[list[int]], list[list[float]]]:  # fmt: skip
    """Choose up to `max_new` tokens per row from `logprobs` on; the tokens fed back are
    appended to `fed` (a finished row's end token and the last token are not fed).

    With `retired`, finished rows leave the batch once a quarter of it has finished (each
    step then costs only the rows still decoding; a row samples the same either way), and
    every row is handed to `retired` before it leaves, the last ones when decoding ends.
    Without it the batch keeps every row (`DecodeSession` goes on with them)."""
    import torch

    eos = batch.student.codec.eos_id
    tokens: list[list[int]] = [[] for _ in fed]
    scores: list[list[float]] = [[] for _ in fed]
    rows = list(range(len(fed)))  # the row of each index of the batch as it is now
    done = torch.zeros(len(fed), dtype=torch.bool)
    draws = sampling.draws
    for step in range(sampling.max_new):
        chosen = _choose(logprobs, sampling.temperature, None if draws is None else draws[:, step])
        picked = logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1).tolist()
        chosen_ids = chosen.tolist()
        for index in (~done).nonzero().flatten().tolist():
            row, token, score = rows[index], chosen_ids[index], picked[index]
            tokens[row].append(token)
            scores[row].append(score)
            if sampling.on_token is not None:
                sampling.on_token(row, token, score)
        done |= chosen == eos
        if bool(done.all()) or step == sampling.max_new - 1:
            break
        if retired is not None and int(done.sum()) * 4 >= len(rows):
            keep = (~done).nonzero().flatten().tolist()
            for index in done.nonzero().flatten().tolist():
                retired(batch, index, rows[index])
            batch.select(keep)
            rows, done, chosen = [rows[i] for i in keep], done[keep], chosen[keep]
            chosen_ids = [chosen_ids[i] for i in keep]
            draws = None if draws is None else draws[keep]
        live = (~done).long()
        for index in live.nonzero().flatten().tolist():
            fed[rows[index]].append(chosen_ids[index])
        logprobs = batch.step(chosen, live)
    if retired is not None:
        for index, row in enumerate(rows):
            retired(batch, index, row)
    return tokens, scores


def _choose(logprobs: Any, temperature: float, draws: Any) -> Any:
    """Each row's token: the most likely (greedy), or the one whose span of the cumulative
    distribution at `temperature` holds the row's draw (in [0, 1))."""
    import torch

    if draws is None:
        return logprobs.argmax(dim=-1)
    cumulative = torch.softmax(logprobs.double() / temperature, dim=-1).cumsum(dim=-1)
    thresholds = (draws * cumulative[:, -1]).unsqueeze(1)
    picked = torch.searchsorted(cumulative, thresholds, right=True).squeeze(1)
    return picked.clamp_(max=logprobs.shape[-1] - 1)


def _results(
    prompts: Sequence[list[int]], tokens: list[list[int]], scores: list[list[float]],
    eos: int, cached: Sequence[int],
) -> list[Generated]:  # fmt: skip
    return [
        Generated(
            prompt_ids=prompt,
            token_ids=row_tokens,
            logprobs=row_scores,
            finish_reason="stop" if row_tokens and row_tokens[-1] == eos else "length",
            cached_tokens=reused,
        )
        for prompt, row_tokens, row_scores, reused in zip(
            prompts, tokens, scores, cached, strict=True
        )
    ]


def _decode(
    student: Student, prompts: list[list[int]], sampling: _Sampling, cache: PrefixCache | None
) -> list[Generated]:
    """Decode a batch, each prompt fed from its longest cached prefix on; every row's
    sequence (prompt and the generated tokens fed back) is then kept in `cache`."""
    hits = [cache.lookup(p) for p in prompts] if cache is not None else [Hit() for _ in prompts]
    new = max(len(p) - h.length for p, h in zip(prompts, hits, strict=True))
    batch = _Batch.reusing(student, hits, room=new + sampling.max_new)
    logprobs = batch.feed([p[h.length :] for p, h in zip(prompts, hits, strict=True)])
    fed = [list(p) for p in prompts]

    def store(decoding: _Batch, index: int, row: int) -> None:
        if cache is not None:
            cache.store(decoding.entry(index, fed[row]), hits[row].entry)

    tokens, scores = _sample_loop(batch, logprobs, fed, sampling, store)
    eos = student.codec.eos_id
    return _results(prompts, tokens, scores, eos, [h.length for h in hits])


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
    left-padded within the new segment (padding is masked out, positions continue). A row
    whose prompt does not extend what it has been fed (its last answer re-tokenized another
    way, or its start cut to fit the context) keeps the states of the opening the two share
    and is fed the rest; the other rows lose nothing. A call with another number of rows
    starts afresh. The result equals `Student.generate` on the full prompts (the tests
    check it); it is only cheaper.
    """

    def __init__(self, student: Student) -> None:
        self.student = student
        self.batch: _Batch | None = None
        self.fed: list[list[int]] = []

    def keep(self, rows: Sequence[int]) -> None:
        """Drop every row not listed (finished conversations), keeping the order given."""
        if self.batch is None:
            return
        self.batch.select(rows)
        self.fed = [self.fed[i] for i in rows]

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 24,
        temperature: float = 0.0, seed: int = 0,
    ) -> list[Generated]:  # fmt: skip
        import torch

        rows = [self.student.fit(p, max_new_tokens) for p in prompts]
        draws = _draws(row_seeds(seed, len(rows)), temperature, max_new_tokens)
        sampling = _Sampling(max_new_tokens, temperature, draws)
        with torch.inference_mode():
            if self.batch is None or len(rows) != len(self.fed):
                self.batch = _Batch.empty(self.student, len(rows))
                self.fed = [[] for _ in rows]
            else:
                self._rewind(rows)
            segments = [p[len(f) :] for p, f in zip(rows, self.fed, strict=True)]
            logprobs = self.batch.feed(segments)
            self.fed = [list(p) for p in rows]
            tokens, scores = _sample_loop(self.batch, logprobs, self.fed, sampling)
        reused = [len(p) - len(s) for p, s in zip(rows, segments, strict=True)]
        return _results(rows, tokens, scores, self.student.codec.eos_id, reused)

    def _rewind(self, prompts: list[list[int]]) -> None:
        """Cut each row's states back to the opening its prompt shares with what it was fed,
        leaving it at least one token to feed."""
        keep = {}
        for row, (prompt, fed) in enumerate(zip(prompts, self.fed, strict=True)):
            if len(prompt) <= len(fed) or prompt[: len(fed)] != fed:
                keep[row] = min(common_length(prompt, fed), len(prompt) - 1)
                self.fed[row] = fed[: keep[row]]
        if keep and self.batch is not None:
            self.batch.rewind(keep)
