"""Scripts of the mock OpenAI-compatible server: which reply answers which request.

A script is a list of replies served in order, or a callable `(request_body) -> reply`. A reply
is a string (the assistant's text) or a dict:

- `content`: the assistant's text (may be absent or None for a pure tool call);
- `tool_calls`: a list of `{"name": ..., "arguments": dict or JSON text}` (or OpenAI form);
- `finish_reason`: defaults to `tool_calls` when there are tool calls, else `stop`;
- `delay_s`: wait this long before answering (to test timeouts);
- `status` with `error`: answer with that HTTP status and an OpenAI-style error body;
- `raw`: answer 200 with this body text verbatim (to test malformed JSON);
- `truncate`: stop a streamed answer half-way, without `[DONE]`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trajforge.errors import InputError, UserError
from trajforge.jsonfile import load_json_records

DEFAULT_REPLY = "Hello from the trajforge mock server."

ScriptReply = str | dict[str, Any]
Script = Sequence[ScriptReply] | Callable[[dict[str, Any]], ScriptReply]


class MockReply(BaseModel):
    """One normalized scripted reply."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = Field(default=None, description="The assistant's text.")
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list, description="Tool calls as {name, arguments}."
    )
    finish_reason: str | None = Field(default=None, description="Overrides the finish reason.")
    delay_s: float = Field(default=0.0, description="Seconds to wait before answering.")
    status: int | None = Field(default=None, description="HTTP status of an error answer.")
    error: str | None = Field(default=None, description="Error message of an error answer.")
    raw: str | None = Field(default=None, description="Verbatim body text (status 200).")
    truncate: bool = Field(default=False, description="Cut a streamed answer half-way.")


def normalize_reply(reply: ScriptReply) -> MockReply:
    """A `MockReply` from a script entry; ValueError on an entry of the wrong shape."""
    if isinstance(reply, str):
        return MockReply(content=reply)
    if isinstance(reply, dict):
        return MockReply.model_validate(reply)
    raise ValueError(f"a scripted reply must be a string or an object, got {type(reply).__name__}")


class ScriptCursor:
    """Hands out replies in order (thread-safe); a callable script is called per request."""

    def __init__(self, script: Script | None) -> None:
        self._function = script if callable(script) else None
        self._replies: Iterator[ScriptReply] = iter(())
        self._length = 0
        if script is None:
            self._replies = itertools.repeat(DEFAULT_REPLY)
        elif not callable(script):
            self._replies, self._length = iter(script), len(script)
        self._lock = threading.Lock()

    def next(self, request: dict[str, Any]) -> MockReply:
        """The reply for this request; `MockReply(status=500)` once a list script runs out."""
        if self._function is not None:
            return normalize_reply(self._function(request))
        with self._lock:
            entry = next(self._replies, None)
        if entry is None:
            return MockReply(
                status=500, error=f"mock script exhausted: it has {self._length} replies"
            )
        return normalize_reply(entry)


def load_script(spec: str) -> Script:
    """A script from a JSON file (a list), a JSONL file (one reply per line) or `module:attr`."""
    path = Path(spec)
    if path.exists():
        return _read_script_file(path)
    if ":" in spec:
        from trajforge.registry import Registry

        return Registry[Script]("mock script").get(spec)
    raise UserError(f"--script: no file '{spec}' and not a module:attribute path")


def _read_script_file(path: Path) -> list[ScriptReply]:
    data = load_json_records(path)
    if not isinstance(data, list):
        raise InputError(str(path), "a script file must hold a JSON list of replies")
    for index, entry in enumerate(data):
        try:
            normalize_reply(entry)
        except ValueError as exc:
            raise InputError(str(path), str(exc).splitlines()[0], record=index) from None
    return data
