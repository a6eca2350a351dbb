"""Key/value caches of recently served token sequences, reused across requests.

An agent (or an RL rollout) sends its whole conversation again at every turn: the prompt of
turn n+1 is the prompt of turn n, the tokens generated for it, the tool's answer and the next
generation prompt. `PrefixCache` keeps, for each recently served sequence (prompt plus the
generated tokens that were fed back), the model's key/value states, and `lookup` returns the
longest cached prefix of a new prompt, so only the tokens after it are fed to the model.

Entries are found through a chain of block hashes (as vLLM's prefix caching does): every
`BLOCK` tokens of a stored sequence, the hash of everything up to there points at the entry
that holds it (several entries may share a block: the sessions of one task share their
opening). A prompt walks its own chain as long as it is found, then the match is extended
token by token inside the entries of the last block found, checked against their tokens (so
a hash collision can never reuse a wrong state). Any prefix of an entry can be reused,
not only the whole entry: a session whose prompt re-renders its last answer slightly
differently, or the sessions of one task that share their opening, reuse what they share.

The cache is bounded by the memory its states take (`max_bytes`; a token costs two vectors
per layer, 4 KB for the tiny student and 46 KB for SmolLM2-135M in float32, so a budget in
bytes holds as many turns of either as fit): the least recently used entries are dropped
first, and a stored sequence that extends the entry it was decoded from replaces it. Its
states are those of the weights that computed them: a server that swaps its weights starts a
new cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BLOCK = 16
"""Tokens per hashed block of the index."""
DEFAULT_MB = 1024
"""Megabytes of key/value states held at most by default."""


@dataclass(eq=False)
class Entry:
    """A served sequence and the key/value states of each layer (`[heads, tokens, dim]`)."""

    tokens: list[int]
    keys: list[Any]
    values: list[Any]
    hashes: list[int] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(int(s.nbytes) for s in (*self.keys, *self.values))


@dataclass
class Hit:
    """What a prompt reuses: the first `length` tokens' states, taken from `entry`."""

    length: int = 0
    entry: Entry | None = None


@dataclass
class CacheStats:
    """Counters since the cache was made."""

    lookups: int = 0
    hits: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "lookups": self.lookups,
            "hits": self.hits,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
        }


def block_hashes(tokens: Sequence[int]) -> list[int]:
    """The chained hash of each whole block of `tokens`."""
    hashes, previous = [], 0
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        previous = hash((previous, tuple(tokens[start : start + BLOCK])))
        hashes.append(previous)
    return hashes


def common_length(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the common prefix of `a` and `b`, known to be at least `start`."""
    length = start
    for x, y in zip(a[start:], b[start:], strict=False):
        if x != y:
            break
        length += 1
    return length


class PrefixCache:
    """An LRU of served sequences' key/value states, bounded by bytes (module docstring)."""

    def __init__(self, max_bytes: int = DEFAULT_MB * 2**20) -> None:
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._index: dict[int, dict[int, Entry]] = {}
        self.held_tokens = 0
        self.held_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: Sequence[int]) -> Hit:
        """The longest cached prefix of `prompt`, leaving at least its last token to feed."""
        bucket: dict[int, Entry] = {}
        blocks = 0
        for value in block_hashes(prompt):
            holders = self._index.get(value)
            if not holders:
                break
            bucket, blocks = holders, blocks + 1
        hit = Hit()
        start = blocks * BLOCK
        for entry in bucket.values():
            if entry.tokens[:start] != list(prompt[:start]):
                continue  # a hash collision: never reuse a state of other tokens
            length = min(common_length(entry.tokens, prompt, start), len(prompt) - 1)
            if length > hit.length:
                hit = Hit(length, entry)
        if hit.entry is not None:
            self._entries.move_to_end(id(hit.entry))
        self._count(hit, len(prompt))
        return hit

    def _count(self, hit: Hit, prompt_tokens: int) -> None:
        self.stats.lookups += 1
        self.stats.prompt_tokens += prompt_tokens
        if hit.length:
            self.stats.hits += 1
            self.stats.cached_tokens += hit.length

    def store(self, entry: Entry, source: Entry | None = None) -> None:
        """Keep `entry` (the newest); drop `source`, the entry it was decoded from, when
        `entry` extends all of it."""
        size = entry.nbytes
        if not self.max_bytes or size > self.max_bytes:
            return
        if source is not None and self._replaces(entry, source):
            self._drop(source)
        entry.hashes = block_hashes(entry.tokens)
        for value in entry.hashes:
            self._index.setdefault(value, {})[id(entry)] = entry
        self._entries[id(entry)] = entry
        self.held_tokens += len(entry.tokens)
        self.held_bytes += size
        while self.held_bytes > self.max_bytes:
            self._drop(next(iter(self._entries.values())))

    def _replaces(self, entry: Entry, source: Entry) -> bool:
        held = id(source) in self._entries
        return held and entry.tokens[: len(source.tokens)] == source.tokens

    def _drop(self, entry: Entry) -> None:
        del self._entries[id(entry)]
        self.held_tokens -= len(entry.tokens)
        self.held_bytes -= entry.nbytes
        for value in entry.hashes:
            holders = self._index.get(value, {})
            holders.pop(id(entry), None)
            if not holders:
                self._index.pop(value, None)
