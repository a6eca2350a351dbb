"""`trajforge ui`: serve the web UI over a store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trajforge.cli.common import DbOption, console, open_store
from trajforge.store import default_db_path

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})


def ui_command(
    db: DbOption = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="TRAJFORGE_UI_TOKEN",
            help="Require this token on every page and API call (open ?token=T once).",
        ),
    ] = None,
    monitor: Annotated[
        Path | None,
        typer.Option("--monitor", help="Failure-detector model file for risk curves and stops."),
    ] = None,
    query_seconds: Annotated[
        float | None,
        typer.Option(
            "--query-seconds",
            min=0.001,
            help="Time budget of one page's store reads (default 5); a slower search is a 503.",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="Another host name the UI is reached by (repeatable); requests naming any "
            "other host are refused (against DNS rebinding).",
        ),
    ] = None,
) -> None:
    """Serve the web UI: runs, search, run view, forks, diffs, tokens, compare, live."""
    import uvicorn

    from trajforge.web import UiConfig, create_app

    path = db or default_db_path()
    open_store(path).close()  # a missing store is one clear error line
    budget = {} if query_seconds is None else {"query_seconds": query_seconds}
    hosts = allowed_hosts(host, allow_host or [])
    config = UiConfig(db=path, token=token, monitor=monitor, allowed_hosts=hosts, **budget)
    app = create_app(config)
    shown = f"http://{host}:{port}/" + (f"?token={token}" if token else "")
    console.print(
        f"trajforge UI on {shown} (store {path}); Ctrl-C stops it", markup=False, soft_wrap=True
    )
    if hosts is None:
        console.print(
            "bound to every interface: requests for any host name are answered "
            "(--allow-host NAME limits them; --token guards the pages)",
            markup=False,
        )
    uvicorn.run(app, host=host, port=port, log_level="warning")


def allowed_hosts(bind: str, extra: list[str]) -> frozenset[str] | None:
    """The host names the UI answers to: the loopback names, the address it binds and the
    names given. Bound to every interface without names given, any host (the token guards)."""
    if bind in WILDCARD_BINDS and not extra:
        return None
    named = {name.strip().lower().strip("[]") for name in (bind, *extra)}
    return LOOPBACK_NAMES | (named - WILDCARD_BINDS)
