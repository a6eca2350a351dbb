"""Values computed once per JSON key, for the parts an agent re-sends at every turn.

An agent sends its whole conversation (and its tools) with every request, so `serve` meets
the same messages again and again: `CheckedParts` keeps each one's check and
`CompactCodec.prompt` its ids. `JsonMemo` holds such values by the bytes of the part's JSON
and forgets them all at once when the keys pass `max_bytes` (a key longer than that is never
kept), so its memory is bounded whatever the conversations' sizes. A part orjson cannot write
(nested deeper than it writes, though it reads it) has its value computed each time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

Value = TypeVar("Value")


class JsonMemo(Generic[Value]):
    """`get(part, compute)`: `compute()` the first time `part` is met, the kept value after."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._values: dict[bytes, Value] = {}
        self.held_bytes = 0
        """Bytes of the keys held."""

    def __len__(self) -> int:
        return len(self._values)

    def get(self, part: Any, compute: Callable[[], Value], context: bytes = b"") -> Value:
        """`part`'s value, kept by its JSON followed by `context`: what else the value
        depends on, starting with a newline (orjson writes none, so keys never run together)."""
        try:
            key = orjson.dumps(part) + context
        except orjson.JSONEncodeError:
            return compute()
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
