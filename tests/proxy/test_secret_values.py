"""Secret-shaped values: each case of the pattern set found and redacted where it is, the
text around it kept, and ordinary text, code, hashes and token ids left alone."""

from __future__ import annotations

import pytest

from trajforge.proxy.redact import scrub_request, secret_name
from trajforge.proxy.secret_values import REDACTED, redact_secrets, secret_spans

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
OPENSSH_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDm1yQx5Gg7nT2b7b1p9sKz0c6QeT3k1p9sKz0c6QeT3gAAAJi2n0Zttp9G\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
SK_KEY = "sk-proj-Abc123Def456Ghi789Jkl012"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("connect to postgres://u:PASS@h/db now", f"connect to postgres://u:{REDACTED}@h/db now"),
        (
            "mysql://admin:s3cr%40t@db.example.com:3306",
            f"mysql://admin:{REDACTED}@db.example.com:3306",
        ),
        (f"the token is {JWT} ok", f"the token is {REDACTED} ok"),
        (f"key:\n{OPENSSH_KEY}\nthanks", f"key:\n{REDACTED}\nthanks"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow", REDACTED),  # cut short: to the end
        (f"use OPENAI_API_KEY={SK_KEY} here", f"use OPENAI_API_KEY={REDACTED} here"),
        (f"({SK_KEY})", f"({REDACTED})"),
        ("header Bearer abcdef0123456789abcdef", f"header {REDACTED}"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", f"Authorization: {REDACTED}"),
        ("aws AKIAIOSFODNN7EXAMPLE in env", f"aws {REDACTED} in env"),
        ("gh token ghp_16C7e42F292c6912E7710c838347Ae178B4a!", f"gh token {REDACTED}!"),
        ("slack xoxb-123456789012-abcdefghij", f"slack {REDACTED}"),
    ],
)
def test_secret_shapes_are_redacted_where_they_are(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Please book the cheapest flight from JFK to SFO on May 3rd.",
        "Bearer tokens are described in RFC 6750; basic authentication in RFC 7617.",
        "def risk(task_id: str) -> float:\n    return model.predict(x)[0]  # sk-learn style\n",
        "password = getpass.getpass('Password: ')\nif not password:\n    raise SystemExit(1)",
        "commit 3f2a9c8d1e7b6a5f4c3d2e1f0a9b8c7d6e5f4a3b fixes the task-0123456789abcdefgh bug",
        "request 123e4567-e89b-12d3-a456-426614174000 at https://api.example.com/v1/chat",
        "git clone https://github.com/org/repo.git and ssh://git@host/repo (no password)",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUb\n-----END CERTIFICATE-----",
        "max_tokens=512 top_p=0.9 eyJ is how base64 of '{\"' starts",
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    ],
)
def test_ordinary_text_and_code_are_kept(text: str) -> None:
    assert secret_spans(text) == []
    assert redact_secrets(text) == text


@pytest.mark.parametrize(
    "name",
    [
        *("api_tokens", "access_token_value", "pwd", "private_key_pem", "signature"),
        *("accessToken", "refresh_tokens", "session_key", "db_password", "client_secret"),
        "x-api-key",
    ],
)
def test_secret_field_names(name: str) -> None:
    assert secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        *("max_tokens", "max_completion_tokens", "completion_tokens", "return_token_ids"),
        *("prompt_token_ids", "top_logprobs", "skip_special_tokens", "model", "user", "seed"),
    ],
)
def test_ordinary_field_names_are_kept(name: str) -> None:
    assert not secret_name(name)


def test_scrub_request_covers_names_and_values_at_any_depth() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "logit_bias": {"50256": -100},
        "api_tokens": ["t1", "t2"],
        "access_token_value": "opaque-value-1",
        "pwd": "hunter2",
        "private_key_pem": "not even pem shaped",
        "metadata": {
            "signature": "abc123",
            "dsn": "postgres://u:PASS@h:5432/app",
            "note": f"call with {JWT}",
            "ssh": OPENSSH_KEY,
            "env": f"KEY={SK_KEY};MODE=fast",
            "prompt_token_ids": [1, 2, 3],
            "commit": "3f2a9c8d1e7b6a5f4c3d2e1f0a9b8c7d6e5f4a3b",
        },
    }
    scrubbed = scrub_request(body)
    text = repr(scrubbed)
    for secret in ("t1", "opaque-value-1", "hunter2", "not even pem", "abc123", "PASS", JWT):
        assert secret not in text
    assert "b3BlbnNzaC1rZXkt" not in text and SK_KEY not in text
    meta = scrubbed["metadata"]
    assert meta["dsn"] == f"postgres://u:{REDACTED}@h:5432/app"
    assert meta["env"] == f"KEY={REDACTED};MODE=fast"
    assert meta["note"] == f"call with {REDACTED}"
    assert meta["prompt_token_ids"] == [1, 2, 3]  # token ids are not secrets
    assert meta["commit"] == body["metadata"]["commit"]
    kept = ("model", "messages", "max_tokens", "logit_bias")
    assert {k: scrubbed[k] for k in kept} == {k: body[k] for k in kept}


def test_many_begin_lines_without_an_end_stay_linear() -> None:
    """An adversarial string (many BEGIN lines, no END) is one redaction, read once."""
    text = "x " + "-----BEGIN PRIVATE KEY-----\nAAAA\n" * 20_000
    assert redact_secrets(text) == "x " + REDACTED
