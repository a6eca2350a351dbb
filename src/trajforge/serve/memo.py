"""Values computed once per JSON key, for the parts an agent re-sends at every turn.

An agent sends its whole conversation (and its tools) with every request, so `serve` meets
the same messages again and again: `CheckedParts` keeps each one's check and
`CompactCodec.prompt` its ids. `JsonMemo` holds such values by the bytes of their JSON key
and forgets them all at once when the keys pass `max_bytes` (a key longer than that is never
kept), so its memory is bounded whatever the conversations' sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

Value = TypeVar("Value")


class JsonMemo(Generic[Value]):
    """`get(key, compute)`: `compute()` the first time `key` is met, the kept value after."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._values: dict[bytes, Value] = {}
        self.held_bytes = 0
        """Bytes of the keys held."""

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: bytes, compute: Callable[[], Value]) -> Value:
        value = self._values.get(key)
        if value is None:
            value = compute()
            self._keep(key, value)
        return value

    def _keep(self, key: bytes, value: Value) -> None:
        if len(key) > self.max_bytes:
            return
        if self.held_bytes + len(key) > self.max_bytes:
            self._values.clear()
            self.held_bytes = 0
        self._values[key] = value
        self.held_bytes += len(key)
