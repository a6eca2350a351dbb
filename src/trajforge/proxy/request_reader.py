"""Reading request bodies whose messages mostly repeat the session's previous request.

An agent resends its whole history on every call: at call 1,000 of a session whose history
grows by 1 KB a call the body is 1.1 MB, and parsing it took orjson 3 ms per call (and
checking its 2,000 messages 0.7 ms more), for messages the proxy had read the call before.
`RequestReader` keeps, per session, the previous body's bytes, its decoded form and where
its last message ends. A body that starts with the previous body's bytes up to that point
and ends with the previous body's bytes from there (the same other fields, more
messages in between) has only its new messages parsed; its messages list is the previous
one's message objects plus those. The objects being the same, the recorder's comparisons
with the previous call are pointer comparisons.

Why the result equals `orjson.loads` of the body: JSON is read left to right, so the bytes
shared with the previous body leave the parser where they left it there, inside the
messages array after its last element. The new bytes in between are accepted only when
they read as `,` and one or more values, and what follows is the previous body's own end,
read from that same place. Where the previous body's last message ends was checked by parsing
that body with a marker element put there (the marker must come out as the last message,
in the array that is the body's `messages`). Anything else (a rewritten
history, changed fields, a body that is not an object with a list of messages) is parsed
whole.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

_MARK = "\x00end of messages"
_MARK_ITEM = b"," + orjson.dumps(_MARK)
_SPACE = b" \t\n\r"
SESSIONS_KEPT = 256
"""Sessions whose previous body is kept (the least recently called are dropped first)."""
_KEY_TRIES = 3
"""How many places that look like the end of `messages` are checked by a marker parse."""
_KEY_LOOKS = 16
"""How many times the next field's name is looked for, from the end."""
_WINDOW = 256


@dataclass
class ReadRequest:
    """A decoded body; `reused`: how many leading messages are the previous request's
    objects (already checked); `close`: where its last message ends in `raw`."""

    raw: bytes
    body: Any
    reused: int = 0
    items_end: int | None = None


@dataclass
class _Previous:
    raw: bytes
    items_end: int
    body: dict[str, Any]


class RequestReader:
    """`read(session, raw)` decodes a body, reusing the session's previous messages; `keep`
    makes an accepted body the session's previous one."""

    def __init__(self) -> None:
        self._previous: OrderedDict[str, _Previous] = OrderedDict()
        self.messages_parsed = 0
        """Messages parsed from text so far (those reused are not counted)."""

    def read(self, session: str, raw: bytes) -> ReadRequest:
        """`orjson.loads(raw)` as a `ReadRequest`; raises `orjson.JSONDecodeError` as it does."""
        previous = self._previous.get(session)
        read = _extended(previous, raw) if previous is not None else None
        if read is None:
            read = ReadRequest(raw, orjson.loads(raw))
            messages = read.body.get("messages") if isinstance(read.body, dict) else None
            self.messages_parsed += len(messages) if isinstance(messages, list) else 0
        else:
            self.messages_parsed += len(read.body["messages"]) - read.reused
        return read

    def keep(self, session: str, read: ReadRequest) -> None:
        """Remember an accepted chat body (its messages checked) for the session's next read."""
        body = read.body
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            self._previous.pop(session, None)
            return
        end = read.items_end if read.items_end is not None else _messages_end(read.raw, body)
        if end is None:
            self._previous.pop(session, None)
            return
        self._previous[session] = _Previous(read.raw, end, body)
        self._previous.move_to_end(session)
        if len(self._previous) > SESSIONS_KEPT:
            self._previous.popitem(last=False)


def _extended(previous: _Previous, raw: bytes) -> ReadRequest | None:
    """`raw` read as the previous body with messages added (or the same), or None."""
    old, start = previous.raw, previous.items_end
    end = len(raw) - (len(old) - start)
    if end < start:
        return None
    view = memoryview(old)  # compared in place, not copied
    if not raw.startswith(view[:start]) or not raw.endswith(view[start:]):
        return None
    between = raw[start:end].lstrip(_SPACE)
    old_messages = previous.body["messages"]
    if not between:
        new: list[Any] = []
    elif between.startswith(b","):
        try:  # an object holding an array: the new messages at the depth they have in `raw`
            new = orjson.loads(b'{"m":[' + between[1:] + b"]}")["m"]
        except orjson.JSONDecodeError:
            return None
        if not new:
            return None
    else:
        return None
    body = dict(previous.body)
    body["messages"] = old_messages + new
    return ReadRequest(raw, body, reused=len(old_messages), items_end=end)


def _messages_end(raw: bytes, body: dict[str, Any]) -> int | None:
    """Where the last element of `body["messages"]` ends in `raw` (checked: a marker put
    there comes out as the last message), or None."""
    for end in _end_candidates(raw, body):
        try:
            marked = orjson.loads(raw[:end] + _MARK_ITEM + raw[end:])
        except orjson.JSONDecodeError:
            continue
        messages = marked.get("messages") if isinstance(marked, dict) else None
        if isinstance(messages, list) and messages and messages[-1] == _MARK:
            return end
    return None


def _end_candidates(raw: bytes, body: dict[str, Any]) -> list[int]:
    """Where the last message may end: before the `]` before the body's final `}` when
    `messages` is its last field, else before the `]` before `, "next field"` (looked for
    from the end)."""
    keys = list(body)
    after = keys.index("messages") + 1
    if after == len(keys):
        tail_start = max(0, len(raw) - _WINDOW)
        tail = raw[tail_start:].rstrip(_SPACE)
        if not tail.endswith(b"}"):
            return []
        bracket = tail[:-1].rstrip(_SPACE)
        if not bracket.endswith(b"]"):
            return []
        return [_after_last_item(raw, tail_start + len(bracket) - 1)]
    key, found, limit = orjson.dumps(keys[after]), [], len(raw)
    for _ in range(_KEY_LOOKS):
        start = raw.rfind(key, 0, limit)
        if start < 0:
            break
        limit = start
        window = max(0, start - _WINDOW)  # spaces past this many bytes: not looked at
        before = raw[window:start].rstrip(_SPACE)
        if before.endswith(b","):
            close = before[:-1].rstrip(_SPACE)
            if close.endswith(b"]"):
                found.append(_after_last_item(raw, window + len(close) - 1))
        if len(found) == _KEY_TRIES:
            break
    return found


def _after_last_item(raw: bytes, bracket: int) -> int:
    """The offset just after what precedes the `]` at `bracket`, spaces left out (a body
    printed with indents puts spaces between the last message and the `]`)."""
    start = max(0, bracket - _WINDOW)
    return start + len(raw[start:bracket].rstrip(_SPACE))
