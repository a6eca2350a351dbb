"""A key/value cache that appends in place.

transformers' `DynamicLayer` grows by `torch.cat`: every decoded token copies the whole
cache of every layer, which on a CPU is most of a decode step once prompts are a few hundred
tokens long (SmolLM2-135M at batch 16 and 550-token prompts: 58% of the step). `GrowingLayer`
keeps each layer's states in a buffer with spare room and writes new tokens into it; the
states it hands the attention are views of the buffer, so a token costs only its own write.
When the room runs out the buffer grows by a quarter (amortized constant cost per token).

Everything else is `DynamicLayer`'s: code that assigns `layer.keys` (selecting rows, cropping)
gets a buffer without room, which the next append grows.

`BatchStates` holds a decoding batch's states of all layers in one buffer, which the layers
hold as views, so moving a row in or out of the batch is one operation for all layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers.cache_utils import Cache, DynamicLayer

MIN_ROOM = 64
"""Spare tokens at least, whenever a buffer is (re)allocated."""


class _Buffer:
    """States `[batch, heads, capacity, dim]` of which the first `length` tokens are held.
    A `fixed` buffer is a view of a `BatchStates`, which makes room before every forward."""

    def __init__(self, states: Any, length: int | None = None, fixed: bool = False) -> None:
        self.data = states
        self.length = states.shape[-2] if length is None else length
        self.fixed = fixed

    @property
    def held(self) -> Any:
        return self.data[..., : self.length, :]

    def append(self, new: Any) -> None:
        needed = self.length + new.shape[-2]
        if needed > self.data.shape[-2]:
            if self.fixed:
                raise RuntimeError("no room left in a BatchStates view (reserve it first)")
            grown = self.data.new_empty(
                (*self.data.shape[:-2], needed + max(MIN_ROOM, needed // 4), self.data.shape[-1])
            )
            grown[..., : self.length, :] = self.held
            self.data = grown
        self.data[..., self.length : needed, :] = new
        self.length = needed


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose appends write into spare room (module docstring)."""

    def __init__(self) -> None:
        self._buffers: dict[str, _Buffer | None] = {"keys": None, "values": None}
        super().__init__()

    def _get(self, kind: str) -> Any:
        buffer = self._buffers[kind]
        return None if buffer is None else buffer.held

    def _set(self, kind: str, states: Any) -> None:
        empty = states is None or states.dim() < 4
        self._buffers[kind] = None if empty else _Buffer(states)

    keys = property(lambda self: self._get("keys"), lambda self, s: self._set("keys", s))
    values = property(lambda self: self._get("values"), lambda self, s: self._set("values", s))

    def adopt(self, keys: Any, values: Any, length: int) -> None:
        """Hold the first `length` tokens of `keys` and `values` (`[batch, heads, capacity,
        dim]`, views of a `BatchStates`), the rest being room to append into."""
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        self._buffers = {
            "keys": _Buffer(keys, length, fixed=True),
            "values": _Buffer(values, length, fixed=True),
        }

    @property
    def length(self) -> int:
        buffer = self._buffers["keys"]
        return 0 if buffer is None else buffer.length

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        for kind, new in (("keys", key_states), ("values", value_states)):
            buffer = self._buffers[kind]
            if buffer is None:
                self._buffers[kind] = _Buffer(new.new_empty((*new.shape[:-2], 0, new.shape[-1])))
            self._buffers[kind].append(new)  # type: ignore[union-attr]
        return self.keys, self.values


def growing_cache(layers: int, states: Sequence[tuple[Any, Any]] = ()) -> Cache:
    """A cache of `layers` growing layers holding copies of `states` (keys, values each)."""
    grown = [GrowingLayer() for _ in range(layers)]
    for layer, (keys, values) in zip(grown, states, strict=False):
        layer.update(keys, values)
    return Cache(layers=list[Any](grown))


class BatchStates:
    """Every layer's keys and values of a batch in one buffer `[layers, 2, rows, heads,
    capacity, dim]`, held by a cache's growing layers as views. A row's states are copied
    into or out of every layer by one operation (`row`, `select`), not two a layer: for a
    small model, moving rows (a hundred a batch, from the prefix cache and back) cost more in
    operations than in bytes. `reserve` makes room before a forward pass appends."""

    def __init__(self, data: Any, length: int) -> None:
        self.data = data
        self.layers = [GrowingLayer() for _ in range(int(data.shape[0]))]
        self.cache = Cache(layers=list[Any](self.layers))
        self._adopt(length)

    @classmethod
    def gather(cls, cache: Cache, room: int) -> BatchStates:
        """The states a cache's growing layers hold, copied into one buffer with `room`."""
        layers: list[Any] = list(cache.layers)
        first = layers[0].keys
        rows, heads, length, dim = first.shape
        data = first.new_empty(len(layers), 2, rows, heads, length + room, dim)
        for index, layer in enumerate(layers):
            data[index, 0, ..., :length, :] = layer.keys
            data[index, 1, ..., :length, :] = layer.values
        return cls(data, length)

    @property
    def length(self) -> int:
        """Tokens held (every row, every layer; padding and finished rows' slots included)."""
        return self.layers[0].length

    def reserve(self, new: int) -> None:
        """Room for `new` more tokens (growing by a quarter at least, all layers at once)."""
        length, needed = self.length, self.length + new
        if needed <= self.data.shape[-2]:
            return
        shape = (*self.data.shape[:-2], needed + max(MIN_ROOM, needed // 4), self.data.shape[-1])
        grown = self.data.new_empty(shape)
        grown[..., :length, :] = self.data[..., :length, :]
        self.data = grown
        self._adopt(length)

    def select(self, rows: Any) -> None:
        """Keep `rows` (a tensor of row indices, in that order), with their room."""
        self.data = self.data.index_select(2, rows)
        self._adopt(self.length)

    def drop_front(self, tokens: int) -> None:
        """Forget every row's first `tokens` states (a view: nothing is copied)."""
        length = self.length
        self.data = self.data[..., tokens:, :]
        self._adopt(length - tokens)

    def repeat(self, rows: int) -> None:
        """Each row `rows` times over (a batch that starts from one shared opening)."""
        self.data = self.data.repeat_interleave(rows, dim=2)
        self._adopt(self.length)

    def row(self, row: int, tokens: Any) -> Any:
        """`[layers, 2, heads, len(tokens), dim]`: one row's states at the positions `tokens`."""
        return self.data[:, :, row].index_select(-2, tokens)

    def _adopt(self, length: int) -> None:
        for index, layer in enumerate(self.layers):
            layer.adopt(self.data[index, 0], self.data[index, 1], length)


def cache_argument(model: Any) -> str:
    """Newer transformers name the key/value cache argument `cache`, older `past_key_values`
    (a PEFT wrapper passes either on to the model it wraps)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
