"""Keep credentials out of the store: request bodies are scrubbed, headers never recorded.

Scrubbing goes by rule, not by a list of known fields:

- a field whose name says it holds a secret is replaced by `[redacted]`, at any depth: a
  name with a word `secret`, `password`, `passwd`, `authorization`, `auth`, `credential(s)`
  or `apikey`, or whose last word is `key`, `keys` or `token` (`openai_api_key`,
  `X-Api-Key`, `api_keys`, `metadata.token`; not `max_tokens` or `return_token_ids`);
- a string that looks like a bearer credential (`Bearer ...`, `sk-...`, `ghp_...`,
  `AKIA...`, `hf_...`, `xoxb-...`, `AIza...`) is replaced wherever it is.

The conversation and the tool schemas are kept as they are: they are content, and a tool
parameter called `password` is a schema, not a credential.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
KEPT_AS_IS = frozenset({"messages", "prompt", "tools", "functions", "response_format"})
SECRET_WORDS = frozenset(
    {"secret", "secrets", "password", "passwd", "authorization", "auth", "credential"}
    | {"credentials", "apikey", "apikeys", "passphrase", "cookie"}
)
SECRET_LAST_WORDS = frozenset({"key", "keys", "token"})
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_CREDENTIAL = re.compile(
    r"\s*(?:bearer\s+\S{8,}|basic\s+[A-Za-z0-9+/=]{8,}|sk-[\w-]{16,}|sk_(?:live|test)_\w{12,}"
    r"|gh[pousr]_\w{20,}|github_pat_\w{20,}|xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16}"
    r"|AIza[\w-]{30,}|hf_\w{20,})\s*",
    re.IGNORECASE,
)


def secret_name(key: object) -> bool:
    """Whether a field name says its value is a credential."""
    words = [word.lower() for word in _WORD.findall(str(key))]
    if not words:
        return False
    return words[-1] in SECRET_LAST_WORDS or any(word in SECRET_WORDS for word in words)


def looks_like_credential(value: str) -> bool:
    return len(value) < 4096 and _CREDENTIAL.fullmatch(value) is not None


def scrub_request(body: dict[str, Any]) -> dict[str, Any]:
    """A request body with every secret-named field and credential-like value redacted."""
    return {
        key: value if key in KEPT_AS_IS else _scrub_field(key, value) for key, value in body.items()
    }


def _scrub_field(key: object, value: Any, depth: int = 0) -> Any:
    return REDACTED if secret_name(key) else scrub(value, depth)


MAX_DEPTH = 64
TOO_DEEP = "[nested too deeply]"


def scrub(value: Any, depth: int = 0) -> Any:
    """A copy of a JSON value with secret-named fields and credential-like strings redacted
    (values nested more than `MAX_DEPTH` levels are dropped: they cannot be checked)."""
    if depth > MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {key: _scrub_field(key, item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item, depth + 1) for item in value]
    if isinstance(value, str) and looks_like_credential(value):
        return REDACTED
    return value
