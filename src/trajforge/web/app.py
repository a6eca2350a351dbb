"""The web app: pages and a JSON API over one store (`create_app(UiConfig(...))`).

Handlers are `async` and read the store on the event loop: every read is one short SQL
query or document, and one connection serves them all without locks. Forking, which runs a
policy, goes to a worker thread with its own connection.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trajforge.diagnose.storage import load_diagnoses
from trajforge.errors import UserError
from trajforge.schema import Trajectory
from trajforge.store import Store
from trajforge.store.runs import child_count, fork_tree, run_document
from trajforge.store.training import TrainingRun, training_run, training_runs
from trajforge.web import compare, datasets, forks, live, run_view, runs, tokens, training
from trajforge.web.forking import fork_form, run_fork
from trajforge.web.html import error_page, page
from trajforge.web.queries import run_query
from trajforge.web.risk import RiskScorer

STATIC = Path(__file__).with_name("static")
TOKEN_COOKIE = "trajforge_token"


class UiConfig(BaseModel):
    """How the UI serves a store."""

    db: Path = Field(description="The SQLite store (must exist).")
    token: str | None = Field(
        default=None,
        description="When set, every page and API call needs it (Bearer header, "
        "or ?token= once, which sets a cookie).",
    )
    monitor: Path | None = Field(
        default=None,
        description="Failure-detector model file for risk curves and stop points "
        "(default: the monitor's rule detector, which has no stop threshold).",
    )


class NotFound(UserError):
    """A run, page or resource that does not exist (HTTP 404)."""


def create_app(config: UiConfig) -> FastAPI:
    if not config.db.exists():
        raise UserError(f"no store at {config.db}; import something first (trajforge import PATH)")
    store = Store(config.db)
    scorer = RiskScorer(config.monitor)
    app = FastAPI(title="trajforge", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store = store
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _install_guards(app, config.token)
    app.add_middleware(ServerTiming)
    _pages(app, store, scorer, config)
    _views(app, store, config)
    _api(app, store)
    _training(app, store)
    app.router.on_shutdown.append(store.close)
    return app


def _install_guards(app: FastAPI, token: str | None) -> None:
    if token is not None:
        _require_token(app, token)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return _error(request, 404, "not found", str(exc))

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> Response:
        return _error(request, 400, "cannot show this", str(exc))

    @app.exception_handler(404)
    async def no_route(request: Request, exc: Exception) -> Response:
        return _error(request, 404, "not found", f"no page at {request.url.path}")

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> Response:
        return _error(request, 500, "internal error", f"{type(exc).__name__}: {exc}")


def _require_token(app: FastAPI, token: str) -> None:
    """Every request needs the token (header, `?token=` which sets a cookie, or the cookie)."""

    @app.middleware("http")
    async def require_token(request: Request, call_next) -> Response:
        given = _given_token(request)
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            return _error(
                request,
                401,
                "token required",
                "this trajforge UI was started with "
                "--token; open it with ?token=TOKEN or send Authorization: Bearer TOKEN",
            )
        response = await call_next(request)
        if request.query_params.get("token"):
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response


class ServerTiming:
    """ASGI middleware: `Server-Timing: app;dur=MS`, the time from the request reaching the
    app to its response starting (a page is rendered whole before it starts)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                elapsed_ms = (time.perf_counter() - start) * 1000
                headers = MutableHeaders(scope=message)
                headers.append("Server-Timing", f"app;dur={elapsed_ms:.3f}")
            await send(message)

        await self.app(scope, receive, timed_send)


def _given_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE)


def _error(request: Request, status: int, title: str, message: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    return HTMLResponse(error_page(title, message), status_code=status)


def _params(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items() if k != "token"}


def _html(title: str, body: str, active: str = "") -> HTMLResponse:
    return HTMLResponse(page(title, body, active))


def _get(store: Store, traj_id: str) -> Trajectory:
    try:
        return store.get(traj_id)
    except UserError as exc:
        raise NotFound(str(exc)) from None


def _pages(app: FastAPI, store: Store, scorer: RiskScorer, config: UiConfig) -> None:
    """The runs page and the pages of one run."""

    @app.get("/", response_class=HTMLResponse)
    async def runs_page(request: Request) -> HTMLResponse:
        params = _params(request)
        return _html("Runs", runs.runs_page(store, params, scorer.from_file), "/")

    @app.get("/runs/{traj_id}", response_class=HTMLResponse)
    async def run_page(request: Request, traj_id: str) -> HTMLResponse:
        traj = _get(store, traj_id)
        diagnoses = load_diagnoses(store, [traj.id])
        body = run_view.run_view(traj, diagnoses, _params(request), child_count(store, traj.id))
        return _html(f"Run {traj.id[:12]}", body)

    @app.get("/api/risk")
    async def api_risk(ids: str = "") -> JSONResponse:
        """{id: failure risk after the run's last step} for up to 100 comma-separated ids."""
        wanted = [i for i in ids.split(",") if i][:100]
        return JSONResponse({i: scorer.latest(_get(store, i)) for i in wanted})

    @app.get("/runs/{traj_id}/risk", response_class=HTMLResponse)
    async def risk_fragment(traj_id: str) -> HTMLResponse:
        note = (
            f"model file {config.monitor.name}"
            if config.monitor is not None
            else "rule detector: start the UI with --monitor MODEL for a learned risk and its "
            "stop threshold"
        )
        return HTMLResponse(run_view.risk_block(scorer.curve(_get(store, traj_id)), note))

    @app.get("/runs/{traj_id}/tree", response_class=HTMLResponse)
    async def tree_page(traj_id: str) -> HTMLResponse:
        full_id = _get(store, traj_id).id
        return _html("Fork tree", forks.tree_view(fork_tree(store, full_id), full_id))

    @app.get("/runs/{traj_id}/tokens", response_class=HTMLResponse)
    async def tokens_page(traj_id: str) -> HTMLResponse:
        return _html("Tokens", tokens.token_view(_get(store, traj_id)))

    @app.get("/runs/{traj_id}/fork", response_class=HTMLResponse)
    async def fork_page(traj_id: str, at: int) -> HTMLResponse:
        return _html("Fork", fork_form(_get(store, traj_id), at, config.db))

    @app.post("/runs/{traj_id}/fork")
    async def fork_run(request: Request, traj_id: str) -> Response:
        # an urlencoded form, read without the multipart parser FastAPI would want
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode()).items()}
        parent = _get(store, traj_id)
        child_id = await run_in_threadpool(run_fork, config.db, parent.id, form)
        return RedirectResponse(f"/runs/{child_id}", status_code=303)


def _views(app: FastAPI, store: Store, config: UiConfig) -> None:
    """Pages over several runs: diff, compare, live, datasets."""

    @app.get("/diff", response_class=HTMLResponse)
    async def diff_page(a: str = "", b: str = "") -> HTMLResponse:
        if not a or not b:
            raise UserError("a diff needs two runs: /diff?a=ID&b=ID")
        return _html("Diff", forks.diff_view(_get(store, a), _get(store, b)))

    @app.get("/compare", response_class=HTMLResponse)
    async def compare_page(request: Request) -> HTMLResponse:
        specs = compare.group_specs(
            store, request.query_params.getlist("g"), request.query_params.get("by")
        )
        specs = [s for s in specs if s]
        return _html("Compare", compare.compare_page(store, specs), "/compare")

    @app.get("/live", response_class=HTMLResponse)
    async def live_page() -> HTMLResponse:
        return _html("Live", live.live_page(store), "/live")

    @app.get("/live/activity", response_class=HTMLResponse)
    async def live_activity() -> HTMLResponse:
        return HTMLResponse(live.activity_block(store))

    @app.get("/datasets", response_class=HTMLResponse)
    async def datasets_page() -> HTMLResponse:
        return _html("Datasets", datasets.datasets_page(store, str(config.db)), "/datasets")


def _api(app: FastAPI, store: Store) -> None:
    @app.get("/api/runs")
    async def api_runs(request: Request) -> JSONResponse:
        return JSONResponse(runs.api_runs(store, _params(request)))

    @app.get("/api/runs/{traj_id}")
    async def api_run(traj_id: str) -> Response:
        try:
            document = run_document(store, traj_id)
        except UserError as exc:
            raise NotFound(str(exc)) from None
        return Response(document, media_type="application/json")

    @app.get("/api/runs/{traj_id}/tree")
    async def api_tree(traj_id: str) -> JSONResponse:
        full_id = _get(store, traj_id).id
        return JSONResponse(fork_tree(store, full_id).model_dump())

    @app.get("/api/diff")
    async def api_diff(a: str, b: str) -> JSONResponse:
        first, second = _get(store, a), _get(store, b)
        rows = forks.alignment(first, second)
        return JSONResponse(
            {
                "a": first.id,
                "b": second.id,
                "first_difference": forks.first_difference(rows),
                "rows": [{"tag": t, "a": i, "b": j} for t, i, j in rows],
            }
        )

    @app.get("/api/events")
    async def api_events(request: Request) -> StreamingResponse:
        params = _params(request)
        run_query(params)  # a bad filter is an error before the stream starts

        def render(traj_id: str, page_params: Mapping[str, str]) -> tuple[str, dict] | None:
            return runs.live_row(store, traj_id, page_params)

        stream = live.run_events(store, request, params, render)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def _training(app: FastAPI, store: Store) -> None:
    """Training runs that record into this store, live (`?run=NAME` narrows to one)."""

    def selected(name: str) -> list[TrainingRun]:
        if not name:
            return training_runs(store)
        run = training_run(store, name)
        if run is None:
            raise NotFound(f"no training run {name!r} in this store")
        return [run]

    @app.get("/training", response_class=HTMLResponse)
    async def training_page(run: str = "") -> HTMLResponse:
        return _html("Training", training.training_page(store, selected(run)), "/training")

    @app.get("/api/training")
    async def api_training(run: str = "") -> JSONResponse:
        return JSONResponse(training.api_training(store, selected(run)))

    @app.get("/api/training/events")
    async def api_training_events(
        request: Request, after: int | None = None, run: str = ""
    ) -> StreamingResponse:
        stream = training.training_events(store, request, after, run)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
