"""Model clients share one connection pool a thread and one TLS context a process: a pool
shared by many threads is walked whole at every request, and loading the certificate store
costs tens of ms, so an RL iteration's episode threads must not each load it."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from trajforge.models import openai_compat
from trajforge.models.openai_compat import OpenAICompatibleModel, OpenAIModelConfig

CONFIG = OpenAIModelConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key="k")


def _pool(model: OpenAICompatibleModel) -> object:
    return model._client._client


def test_clients_of_one_thread_share_its_pool_and_other_threads_have_their_own() -> None:
    first, second = OpenAICompatibleModel(CONFIG), OpenAICompatibleModel(CONFIG)
    with ThreadPoolExecutor(1) as pool:
        elsewhere = pool.submit(OpenAICompatibleModel, CONFIG).result()
    assert _pool(first) is _pool(second)
    assert _pool(elsewhere) is not _pool(first)


def test_the_tls_context_is_made_once_when_many_threads_ask_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    library = sys.modules[openai.DefaultHttpxClient.__mro__[1].__module__.partition(".")[0]]
    made, real = [], library.create_ssl_context

    def slow_context(*args: object, **kwargs: object) -> object:
        made.append(threading.get_ident())
        time.sleep(0.05)  # long enough for every thread to ask while it is being made
        return real(*args, **kwargs)

    monkeypatch.setattr(library, "create_ssl_context", slow_context)
    monkeypatch.setattr(openai_compat, "_SSL_CONTEXT", [])
    with ThreadPoolExecutor(16) as pool:
        contexts = list(pool.map(lambda _: openai_compat.ssl_context(), range(16)))
    assert len(made) == 1 and all(c is contexts[0] for c in contexts)
