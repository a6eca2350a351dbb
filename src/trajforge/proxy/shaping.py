"""What the proxy adds to a request (to get tokens and logprobs) and removes from the answer.

The proxy asks the upstream for logprobs, token ids and streamed usage even when the client
did not; the client then receives the answer without those additions, as it would have
without the proxy. Answers are copied, never edited in place: the recorder keeps the
original.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import orjson


class AskOptions(Protocol):
    """What to ask the upstream for (`ProxyConfig`, in-process `CaptureOptions`)."""

    ask_logprobs: bool
    ask_token_ids: bool


_TOKEN_FIELDS = ("prompt_token_ids", "token_ids")


@dataclass(frozen=True)
class ClientAsked:
    """Which of the proxy's additions the client asked for itself."""

    logprobs: bool
    token_ids: bool
    usage: bool

    @property
    def everything(self) -> bool:
        return self.logprobs and self.token_ids and self.usage


def augment(
    body: dict[str, Any], chat: bool, config: AskOptions, ask_token_ids: bool | None = None
) -> tuple[dict, ClientAsked]:
    """The upstream request body and what the client asked for itself."""
    ask_ids = config.ask_token_ids if ask_token_ids is None else ask_token_ids
    stream_options = body.get("stream_options") or {}
    asked = ClientAsked(
        logprobs=body.get("logprobs") not in (None, False) or not config.ask_logprobs,
        token_ids=bool(body.get("return_token_ids")) or not ask_ids,
        usage=not body.get("stream") or bool(stream_options.get("include_usage")),
    )
    upstream = dict(body)
    if not asked.logprobs:
        upstream["logprobs"] = True if chat else 0
    if not asked.token_ids:
        upstream["return_token_ids"] = True
    if not asked.usage:
        upstream["stream_options"] = {**stream_options, "include_usage": True}
    return upstream, asked


def upstream_bytes(raw: bytes, body: dict[str, Any], upstream: dict[str, Any]) -> bytes:
    """`upstream` (from `augment(body)`) as bytes: the client's own bytes `raw` (the JSON
    object `body` was read from) with the proxy's fields added before its closing `}`, when
    the proxy only added fields; serialized anew when it changed one the client sent."""
    added = {key: value for key, value in upstream.items() if key not in body}
    if not body or len(added) + len(body) != len(upstream):
        return orjson.dumps(upstream)
    if any(upstream[key] is not value for key, value in body.items()):
        return orjson.dumps(upstream)
    if not added:
        return raw
    closing = len(raw.rstrip(b" \t\n\r")) - 1
    return b"".join((memoryview(raw)[:closing], b",", orjson.dumps(added)[1:]))


def _choice_for_client(choice: dict[str, Any], asked: ClientAsked) -> dict[str, Any]:
    out = dict(choice)
    if not asked.logprobs and "logprobs" in out:
        out["logprobs"] = None
    if not asked.token_ids:
        for name in _TOKEN_FIELDS:
            out.pop(name, None)
    return out


def for_client(body: dict[str, Any], asked: ClientAsked) -> dict[str, Any] | None:
    """The answer (or stream chunk) as the client would have got it; None drops a chunk."""
    if asked.everything:
        return body
    out = dict(body)
    if not asked.token_ids:
        out.pop("prompt_token_ids", None)
    if "choices" in out:
        out["choices"] = [_choice_for_client(c, asked) for c in out["choices"] or []]
    if not asked.usage and "usage" in out:
        if not out.get("choices"):
            return None
        out.pop("usage")
    return out
