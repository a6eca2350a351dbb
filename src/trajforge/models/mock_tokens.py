"""Token-level backends of the mock server and the chat template they share.

A backend turns text into token ids and scores completion tokens. `HashTokenBackend` is the
deterministic default: words, runs of spaces and single symbols are tokens, each id is a hash
of its text, and each log-probability is a fixed function of (previous id, id). The tiny real
model (`trajforge.models.tiny`) implements the same protocol with a trained BPE tokenizer and
a causal LM.

The chat template renders each message as `<|role|>` + content + tool calls + `<|end|>` and
ends a prompt with `<|assistant|>`. Every segment is tokenized on its own, so the prompt of
turn k+1 starts with the prompt of turn k plus its completion whenever the harness sends the
history back unchanged: that is what the proxy's drift audit checks.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Protocol

SPECIAL_TOKENS: tuple[str, ...] = ("<|pad|>", "<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS += ("<|tool|>", "<|end|>", "<|call|>", "<|args|>")
_PIECE = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
KNOWN_PIECES = 1 << 17
"""Pieces whose ids a backend keeps (it starts over past that): hashing every piece of a 30
KB prompt anew took the mock about 10 ms of CPU a call."""


class TokenBackend(Protocol):
    """Tokenizer plus scorer behind a mock (or tiny real) model server."""

    name: str

    def encode(self, text: str) -> list[int]: ...

    def piece(self, token_id: int) -> str:
        """The text of one token (special tokens included)."""
        ...

    def special(self, token: str) -> int: ...

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Log-probability of each completion token given everything before it."""
        ...


class HashTokenBackend:
    """Deterministic word-level tokens with hashed ids and made-up but stable logprobs."""

    name = "trajforge-mock"
    vocab_size = 50_000

    def __init__(self) -> None:
        self._pieces: dict[int, str] = {i: t for i, t in enumerate(SPECIAL_TOKENS)}
        self._special = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
        self._ids: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        ids = []
        known = self._ids
        for piece in _PIECE.findall(text):
            token_id = known.get(piece)
            if token_id is None:
                token_id = self._hashed_id(piece)
            ids.append(token_id)
        return ids

    def _hashed_id(self, piece: str) -> int:
        digest = hashlib.blake2b(piece.encode(), digest_size=8).digest()
        token_id = 256 + int.from_bytes(digest, "little") % (self.vocab_size - 256)
        self._pieces.setdefault(token_id, piece)
        if len(self._ids) >= KNOWN_PIECES:
            self._ids.clear()
        self._ids[piece] = token_id
        return token_id

    def piece(self, token_id: int) -> str:
        return self._pieces.get(token_id, f"<|{token_id}|>")

    def special(self, token: str) -> int:
        return self._special[token]

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        previous = prompt_ids[-1] if prompt_ids else 0
        logprobs = []
        for token_id in completion_ids:
            spread = ((token_id * 7919 + previous * 104_729) % 997) / 997
            logprobs.append(round(-0.01 - 3.0 * spread, 6))
            previous = token_id
        return logprobs


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def tool_call_ids(backend: TokenBackend, calls: Sequence[dict[str, Any]] | None) -> list[int]:
    """Tokens of an assistant message's tool calls (OpenAI nested form)."""
    ids: list[int] = []
    for call in calls or []:
        function = call.get("function", call)
        arguments = function.get("arguments", "")
        ids.append(backend.special("<|call|>"))
        ids.extend(backend.encode(str(function.get("name", ""))))
        ids.append(backend.special("<|args|>"))
        ids.extend(backend.encode(arguments if isinstance(arguments, str) else str(arguments)))
    return ids


def completion_ids(backend: TokenBackend, message: dict[str, Any]) -> list[int]:
    """Tokens an assistant message costs as a completion: content, tool calls, `<|end|>`."""
    ids = backend.encode(_text(message.get("content")))
    ids.extend(tool_call_ids(backend, message.get("tool_calls")))
    ids.append(backend.special("<|end|>"))
    return ids


def prompt_ids(backend: TokenBackend, messages: Sequence[dict[str, Any]]) -> list[int]:
    """Tokens of a chat prompt, ending with the `<|assistant|>` generation prompt."""
    ids: list[int] = []
    for message in messages:
        role = str(message.get("role", "user"))
        ids.append(
            backend.special(f"<|{role}|>" if f"<|{role}|>" in SPECIAL_TOKENS else "<|user|>")
        )
        if role == "assistant":
            ids.extend(completion_ids(backend, message))
            continue
        ids.extend(backend.encode(_text(message.get("content"))))
        ids.append(backend.special("<|end|>"))
    ids.append(backend.special("<|assistant|>"))
    return ids
