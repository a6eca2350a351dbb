"""The recording proxy: sits between an unmodified harness and its model server.

Point the harness's base URL at `http://127.0.0.1:PORT/s/SESSION/v1`; every call is recorded
with its token ids and logprobs, and each session becomes one trajectory in the store.
"""

from trajforge.proxy.app import RecordingProxy, build_proxy_app
from trajforge.proxy.config import FaultConfig, MonitorStopConfig, ProxyConfig
from trajforge.proxy.server import ProxyServer

__all__ = [
    "FaultConfig",
    "MonitorStopConfig",
    "ProxyConfig",
    "ProxyServer",
    "RecordingProxy",
    "build_proxy_app",
]
