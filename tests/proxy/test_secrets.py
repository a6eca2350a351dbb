"""No credential reaches the store; the optional bearer token guards the proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from trajforge.models.mock_server import MockOpenAIServer
from trajforge.proxy import ProxyConfig, ProxyServer
from trajforge.proxy.redact import scrub_request
from trajforge.store import Store

CLIENT_KEY = "sk-client-0123456789abcdef"
BODY_KEY = "sk-body-fedcba9876543210"
UPSTREAM_KEY = "sk-upstream-5555aaaa"
PROXY_TOKEN = "proxy-token-7777bbbb"


def _store_bytes(db: Path) -> bytes:
    Store(db).close()  # a clean close checkpoints the WAL into the main file
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_no_key_or_authorization_header_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with (
        MockOpenAIServer() as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        client = openai.OpenAI(base_url=proxy.session_url("s"), api_key=CLIENT_KEY)
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"api_key": BODY_KEY, "metadata": {"client_secret": BODY_KEY}},
        )
        list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
        forwarded = upstream.headers[0]["authorization"]
    assert forwarded == f"Bearer {CLIENT_KEY}"  # the upstream still gets the client's key
    stored = _store_bytes(db)
    assert b"proxy" in stored  # the store was written
    for secret in (CLIENT_KEY, BODY_KEY, "Bearer"):
        assert secret.encode() not in stored


def test_token_guards_the_proxy_and_never_reaches_upstream(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with MockOpenAIServer() as upstream:
        config = ProxyConfig(
            upstream=upstream.base_url, token=PROXY_TOKEN, upstream_api_key=UPSTREAM_KEY
        )
        with ProxyServer(config, db) as proxy:
            request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            url = f"{proxy.base_url}/chat/completions"
            refused = httpx.post(url, json=request, headers={"Authorization": "Bearer wrong"})
            missing = httpx.post(url, json=request)
            allowed = httpx.post(
                url, json=request, headers={"Authorization": f"Bearer {PROXY_TOKEN}"}
            )
        headers = list(upstream.headers)
    assert refused.status_code == missing.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    assert allowed.status_code == 200
    assert [h["authorization"] for h in headers] == [f"Bearer {UPSTREAM_KEY}"]
    stored = _store_bytes(db)
    assert PROXY_TOKEN.encode() not in stored and UPSTREAM_KEY.encode() not in stored


def test_cookies_an_upstream_sets_are_not_sent_on_later_calls(tmp_path: Path) -> None:
    upstream = MockOpenAIServer()

    @upstream.mock.app.middleware("http")
    async def set_cookie(request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        response.set_cookie("upstream_session", "of-the-first-client")
        return response

    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with upstream:
        # by name: aiohttp's default jar keeps no cookies of a host given by its address
        config = ProxyConfig(upstream=upstream.base_url.replace("127.0.0.1", "localhost"))
        with ProxyServer(config, tmp_path / "p.db") as proxy:
            for session in ("first", "second"):
                url = f"{proxy.session_url(session)}/chat/completions"
                assert httpx.post(url, json=request).status_code == 200
    assert [h.get("cookie") for h in upstream.headers] == [None, None]


@pytest.mark.parametrize("name", ["api_key", "Authorization", "password", "aws_session_token"])
def test_scrub_request_redacts_secret_fields_at_any_depth(name: str) -> None:
    body = {
        "model": "m",
        name: "s3cret",
        "extra": {"nested": [{name: "s3cret"}]},
        "tools": [{"function": {"parameters": {"properties": {"password": {}}}}}],
    }
    scrubbed = scrub_request(body)
    assert "s3cret" not in str(scrubbed)
    assert scrubbed["tools"] == body["tools"]  # a schema, not a credential


def test_secret_shaped_values_and_names_never_reach_the_store(tmp_path: Path) -> None:
    """Through a real proxy: secret-named fields and secrets inside ordinary strings."""
    from .test_secret_values import JWT, OPENSSH_KEY, SK_KEY

    db = tmp_path / "p.db"
    extra = {
        "api_tokens": ["tok-one-1111"],
        "access_token_value": "tok-two-2222",
        "pwd": "hunter2-3333",
        "private_key_pem": OPENSSH_KEY,
        "metadata": {
            "signature": "sig-4444",
            "dsn": "postgres://u:PASS5555@h/db",
            "note": f"jwt {JWT} and key {SK_KEY}-tail",
        },
    }
    with (
        MockOpenAIServer() as upstream,
        ProxyServer(ProxyConfig(upstream=upstream.base_url), db) as proxy,
    ):
        client = openai.OpenAI(base_url=proxy.session_url("s"), api_key="k")
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_body=extra
        )
    stored = _store_bytes(db)
    assert b"postgres://u:" in stored and b"@h/db" in stored  # the text around is kept
    for secret in ("tok-one-1111", "tok-two-2222", "hunter2-3333", "sig-4444", "PASS5555"):
        assert secret.encode() not in stored
    for secret in (JWT, SK_KEY, "b3BlbnNzaC1rZXkt"):
        assert secret.encode() not in stored
