"""The recording proxy: sits between an unmodified harness and its model server.

Point the harness's base URL at `http://127.0.0.1:PORT/s/SESSION/v1`; every call is recorded
with its token ids and logprobs, and each session becomes one trajectory in the store.
A Python harness can be recorded without the proxy hop, from inside its own process:
`capture_in_process(db, session)` (`trajforge.proxy.inprocess`).

Names load their module on first use: in-process capture runs inside a harness's own
environment, which needs httpx but not the proxy's server stack (FastAPI, uvicorn).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajforge.proxy.app import RecordingProxy, build_proxy_app
    from trajforge.proxy.config import FaultConfig, MonitorStopConfig, ProxyConfig
    from trajforge.proxy.inprocess import CaptureOptions, capture_in_process
    from trajforge.proxy.server import ProxyServer

_MODULE_OF = {
    "RecordingProxy": "trajforge.proxy.app",
    "build_proxy_app": "trajforge.proxy.app",
    "FaultConfig": "trajforge.proxy.config",
    "MonitorStopConfig": "trajforge.proxy.config",
    "ProxyConfig": "trajforge.proxy.config",
    "CaptureOptions": "trajforge.proxy.inprocess",
    "capture_in_process": "trajforge.proxy.inprocess",
    "ProxyServer": "trajforge.proxy.server",
}

__all__ = [
    "CaptureOptions",
    "FaultConfig",
    "MonitorStopConfig",
    "ProxyConfig",
    "ProxyServer",
    "RecordingProxy",
    "build_proxy_app",
    "capture_in_process",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'trajforge.proxy' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
