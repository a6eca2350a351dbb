"""Keep credentials out of the store: request bodies are scrubbed, headers never recorded."""

from __future__ import annotations

from typing import Any

SECRET_FIELDS = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "authorization",
        "access_token",
        "auth_token",
        "bearer_token",
        "secret",
        "client_secret",
        "password",
        "aws_secret_access_key",
        "aws_session_token",
    }
)
REDACTED = "[redacted]"
KEPT_AS_IS = frozenset({"messages", "prompt", "tools", "functions", "response_format"})


def scrub_request(body: dict[str, Any]) -> dict[str, Any]:
    """A request body with every secret-named field (at any depth) replaced by `[redacted]`.

    The conversation and the tool schemas are kept as they are: they are content, and a tool
    parameter called `password` is a schema, not a credential.
    """
    return {
        key: value if key in KEPT_AS_IS else _scrub_field(key, value) for key, value in body.items()
    }


def _scrub_field(key: str, value: Any) -> Any:
    return REDACTED if str(key).lower() in SECRET_FIELDS else scrub(value)


def scrub(value: Any) -> Any:
    """A copy of a JSON value with every secret-named field replaced by `[redacted]`."""
    if isinstance(value, dict):
        return {
            key: REDACTED if str(key).lower() in SECRET_FIELDS else scrub(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [scrub(item) for item in value]
    return value
