"""A key/value cache that appends in place.

transformers' `DynamicLayer` grows by `torch.cat`: every decoded token copies the whole
cache of every layer, which on a CPU is most of a decode step once prompts are a few hundred
tokens long (SmolLM2-135M at batch 16 and 550-token prompts: 58% of the step). `GrowingLayer`
keeps each layer's states in a buffer with spare room and writes new tokens into it; the
states it hands the attention are views of the buffer, so a token costs only its own write.
When the room runs out the buffer grows by a quarter (amortized constant cost per token).

Everything else is `DynamicLayer`'s: code that assigns `layer.keys` (selecting rows, cropping)
gets a buffer without room, which the next append grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers.cache_utils import Cache, DynamicLayer

MIN_ROOM = 64
"""Spare tokens at least, whenever a buffer is (re)allocated."""


class _Buffer:
    """States `[batch, heads, capacity, dim]` of which the first `length` tokens are held."""

    def __init__(self, states: Any, length: int | None = None) -> None:
        self.data = states
        self.length = states.shape[-2] if length is None else length

    @property
    def held(self) -> Any:
        return self.data[..., : self.length, :]

    def append(self, new: Any) -> None:
        needed = self.length + new.shape[-2]
        if needed > self.data.shape[-2]:
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
        dim]`), the rest being room to append into, without copying them."""
        self.lazy_initialization(keys, values)
        self._buffers = {"keys": _Buffer(keys, length), "values": _Buffer(values, length)}

    def batch_select_indices(self, indices: Any) -> None:
        """Keep the rows `indices` (in that order), with the room they had."""
        for kind, buffer in self._buffers.items():
            if buffer is not None:
                self._buffers[kind] = _Buffer(buffer.data[indices], buffer.length)

    def gather_tokens(self, columns: Any) -> None:
        """Hold, for each row, its states at `columns[row]` (`[batch, tokens]`), in that
        order (copied into buffers without room)."""
        for kind, buffer in self._buffers.items():
            if buffer is not None:
                held = buffer.held
                index = columns[:, None, :, None].expand(-1, held.shape[1], -1, held.shape[-1])
                self._buffers[kind] = _Buffer(held.gather(2, index))

    def drop_front(self, tokens: int) -> None:
        """Forget the first `tokens` states of every row (a view: nothing is copied)."""
        for kind, buffer in self._buffers.items():
            if buffer is not None:
                self._buffers[kind] = _Buffer(buffer.data[..., tokens:, :], buffer.length - tokens)

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        for kind, new in (("keys", key_states), ("values", value_states)):
            buffer = self._buffers[kind]
            if buffer is None:
                self._buffers[kind] = _Buffer(new.new_empty((*new.shape[:-2], 0, new.shape[-1])))
            self._buffers[kind].append(new)  # type: ignore[union-attr]
        return self.keys, self.values


def growing_cache(
    layers: int, states: Sequence[tuple[Any, Any]] = (), length: int | None = None
) -> Cache:
    """A cache of `layers` growing layers holding `states` (keys, values per layer): their
    first `length` tokens, the rest of each buffer being room (all of them without
    `length`: then they are copied into buffers of their own)."""
    grown = [GrowingLayer() for _ in range(layers)]
    for layer, (keys, values) in zip(grown, states, strict=False):
        if length is None:
            layer.update(keys, values)
        else:
            layer.adopt(keys, values, length)
    return Cache(layers=list[Any](grown))


def cache_argument(model: Any) -> str:
    """Newer transformers name the key/value cache argument `cache`, older `past_key_values`
    (a PEFT wrapper passes either on to the model it wraps)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
