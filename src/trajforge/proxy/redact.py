"""Keep credentials out of the store: request bodies are scrubbed, headers never recorded.

Scrubbing goes by rule, not by a list of known fields:

- a field whose name says it holds a secret is replaced by `[redacted]`, at any depth: a
  name with a word `secret`, `password`, `passwd`, `pwd`, `authorization`, `auth`,
  `credential(s)`, `apikey`, `signature` or `jwt`; whose last word is `key`, `keys` or
  `token` (`openai_api_key`, `X-Api-Key`, `api_keys`, `metadata.token`); or that pairs a
  credential word (`api`, `access`, `refresh`, `private`, `session`, ...) with `token(s)`
  or `key(s)` anywhere (`api_tokens`, `access_token_value`, `private_key_pem`); not
  `max_tokens`, `completion_tokens` or `return_token_ids`;
- in every other string, each secret-shaped part (a URL's password, a JWT, a private key
  block, a provider key such as `sk-...`, a bearer credential) is replaced where it is,
  the text around it kept (`secret_values`).

The conversation and the tool schemas are kept as they are: they are content, and a tool
parameter called `password` is a schema, not a credential.
"""

from __future__ import annotations

import re
from typing import Any

from trajforge.proxy.secret_values import REDACTED, redact_secrets

KEPT_AS_IS = frozenset({"messages", "prompt", "tools", "functions", "response_format"})
SECRET_WORDS = frozenset(
    {"secret", "secrets", "password", "passwords", "passwd", "pwd", "authorization", "auth"}
    | {"credential", "credentials", "apikey", "apikeys", "passphrase", "cookie", "signature"}
    | {"jwt"}
)
SECRET_LAST_WORDS = frozenset({"key", "keys", "token"})
CREDENTIAL_NOUNS = frozenset({"key", "keys", "token", "tokens"})
CREDENTIAL_QUALIFIERS = frozenset(
    {"api", "access", "refresh", "bearer", "private", "session", "oauth", "personal", "bot"}
    | {"client", "service", "signing", "encryption", "ssh", "github", "slack", "hf"}
)
"""A name with one of these and one of `CREDENTIAL_NOUNS` holds a credential."""
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def secret_name(key: object) -> bool:
    """Whether a field name says its value is a credential."""
    words = [word.lower() for word in _WORD.findall(str(key))]
    if not words:
        return False
    if words[-1] in SECRET_LAST_WORDS or any(word in SECRET_WORDS for word in words):
        return True
    present = set(words)
    return bool(present & CREDENTIAL_NOUNS and present & CREDENTIAL_QUALIFIERS)


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
    """A copy of a JSON value with secret-named fields and secret-shaped text redacted
    (values nested more than `MAX_DEPTH` levels are dropped: they cannot be checked)."""
    if depth > MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {key: _scrub_field(key, item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item, depth + 1) for item in value]
    if isinstance(value, str):
        return redact_secrets(value)
    return value
