"""`trajforge mock-server` and `trajforge proxy`: serve a mock model, record a harness."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trajforge.cli.common import DbOption, err_console
from trajforge.errors import UserError
from trajforge.store import Store, default_db_path

if TYPE_CHECKING:
    from trajforge.proxy.config import MonitorStopConfig

HostOption = Annotated[str, typer.Option("--host", help="Interface to bind (loopback default).")]


def _serve(app: Callable[..., Any], host: str, port: int, what: str) -> None:
    err_console.print(f"{what} on http://{host}:{port}/v1 (Ctrl-C stops)", highlight=False)
    import uvicorn  # the server stack loads only for the commands that serve

    # What is loaded so far (modules, the app) lives as long as the server: frozen out of
    # the garbage collector, it is not walked again by each full collection, which stops
    # the server while it runs (the proxy's took 30-110 ms, its p99 latency at 16 sessions).
    gc.freeze()
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def mock_server_command(
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8001,
    host: HostOption = "127.0.0.1",
    script: Annotated[
        str | None,
        typer.Option(
            "--script",
            help="Replies: a JSON list file, a JSONL file, or module:attr (a list or a "
            "function of the request body). Default: one fixed reply to every request.",
        ),
    ] = None,
    tiny_model: Annotated[
        bool,
        typer.Option("--tiny-model", help="Score replies with the tiny real causal LM (train)."),
    ] = False,
) -> None:
    """Run the mock OpenAI-compatible server in the foreground."""
    from trajforge.models.mock_script import load_script
    from trajforge.models.mock_server import MockApp

    backend = None
    if tiny_model:
        from trajforge.models.tiny import load_tiny_backend

        backend = load_tiny_backend()
    mock = MockApp(load_script(script) if script else None, backend, request_log=0)
    _serve(mock.app, host, port, "mock OpenAI server")


def _monitor_config(
    model: Path | None, loss: float | None, threshold: float | None
) -> MonitorStopConfig | None:
    from pydantic import ValidationError

    from trajforge.proxy.config import MonitorStopConfig

    if model is None:
        if loss is not None or threshold is not None:
            raise UserError("--monitor-loss and --monitor-threshold need --monitor MODEL_FILE")
        return None
    try:
        return MonitorStopConfig(model=model, loss=loss, threshold=threshold)
    except ValidationError as exc:
        error = exc.errors()[0]
        option = "-".join(["--monitor", *map(str, error["loc"])])
        raise UserError(f"{option}: {error['msg'].removeprefix('Value error, ')}") from None


def proxy_command(
    upstream: Annotated[str, typer.Option("--upstream", help="Upstream base URL (…/v1).")],
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    host: HostOption = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="TRAJFORGE_PROXY_TOKEN", help="Require this bearer token."),
    ] = None,
    upstream_key: Annotated[
        str | None,
        typer.Option(
            "--upstream-key",
            envvar="TRAJFORGE_UPSTREAM_API_KEY",
            help="API key sent upstream (default: forward the client's Authorization).",
        ),
    ] = None,
    faults: Annotated[
        list[str] | None,
        typer.Option(
            "--faults",
            help="Inject upstream faults, KIND:RATE with KIND upstream_timeout, upstream_5xx or "
            "upstream_truncated, e.g. 'upstream_timeout:0.1,upstream_5xx:0.05'; repeatable.",
        ),
    ] = None,
    fault_seed: Annotated[
        int, typer.Option("--fault-seed", help="Seed of the fault draws (same seed, same faults).")
    ] = 0,
    fault_delay: Annotated[
        float,
        typer.Option("--fault-delay", min=0, help="Seconds an injected timeout waits first."),
    ] = 0.0,
    monitor: Annotated[
        Path | None,
        typer.Option(
            "--monitor",
            help="Stop sessions this failure monitor flags (a `trajforge monitor train --out` "
            "file): their requests get HTTP 403 and the run is recorded as stopped by `monitor`.",
        ),
    ] = None,
    monitor_loss: Annotated[
        float | None,
        typer.Option(
            "--monitor-loss",
            help="Use the model's threshold for this share of successful runs stopped "
            "(default: the model's, 0.01).",
        ),
    ] = None,
    monitor_threshold: Annotated[
        float | None,
        typer.Option("--monitor-threshold", help="Stop at this failure risk instead (0-1)."),
    ] = None,
    upstream_timeout: Annotated[
        float,
        typer.Option(
            "--upstream-timeout",
            help="Seconds to wait for the upstream to connect and for each read from it.",
        ),
    ] = 600.0,
    max_body: Annotated[
        int,
        typer.Option("--max-body", help="Largest request body in bytes (larger: HTTP 413)."),
    ] = 32 * 1024 * 1024,
    answer_after_commit: Annotated[
        bool,
        typer.Option(
            "--answer-after-commit/--answer-before-commit",
            help="Answer a call once its row is committed (default), or at once, with its "
            "commit waited for before the session's next answer (faster; a proxy killed then "
            "loses at most each session's last answered call).",
        ),
    ] = True,
    db: DbOption = None,
) -> None:
    """Record every call of an unmodified harness: point its base URL at this proxy."""
    from trajforge.proxy import ProxyConfig, build_proxy_app
    from trajforge.proxy.faults import upstream_faults

    if not upstream.startswith(("http://", "https://")):
        raise UserError(f"--upstream must be an http:// or https:// URL, got '{upstream}'")
    if upstream_timeout <= 0 or max_body <= 0:
        raise UserError("--upstream-timeout and --max-body must be positive")
    config = ProxyConfig(
        upstream=upstream,
        token=token,
        upstream_api_key=upstream_key,
        faults=upstream_faults(faults, fault_seed, fault_delay) if faults else None,
        monitor=_monitor_config(monitor, monitor_loss, monitor_threshold),
        timeout_s=upstream_timeout,
        max_body_bytes=max_body,
        answer_after_commit=answer_after_commit,
    )
    db = db or default_db_path()
    Store(db).close()  # a bad path or a too-new store fails here, on one line
    _serve(build_proxy_app(config, db), host, port, f"trajforge proxy to {upstream}")
