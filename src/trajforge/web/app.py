"""The web app: pages and a JSON API over one store (`create_app(UiConfig(...))`).

Handlers run on the event loop but read the store off it (`StoreReads`): each read, and the
page rendered from it, runs in a worker thread on that thread's own connection and is
stopped after `UiConfig.query_seconds`. Forking, which runs a policy, goes to a worker
thread too, with a connection of its own that writes. Every state-changing request passes
the rules of `guards` (same origin, a form body with this process's form token).
"""

from __future__ import annotations

import hmac
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
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
from trajforge.store import QueryTooSlow, Store
from trajforge.store.runs import child_count, fork_tree, run_document
from trajforge.store.training import TrainingRun, training_run, training_runs
from trajforge.strategies.library import latest as latest_strategies
from trajforge.web import (
    compare,
    datasets,
    forks,
    live,
    run_view,
    runs,
    strategies,
    tokens,
    training,
)
from trajforge.web.forking import fork_form, run_fork
from trajforge.web.guards import (
    FormToken,
    NotFound,
    Refused,
    error_response,
    posted_form,
    refuse_cross_site,
    refuse_foreign_hosts,
    refused,
)
from trajforge.web.html import page
from trajforge.web.params import whole
from trajforge.web.queries import run_query
from trajforge.web.reading import StoreReads
from trajforge.web.risk import RiskScorer

STATIC = Path(__file__).with_name("static")
TOKEN_COOKIE = "trajforge_token"
QUERY_SECONDS = 5.0


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
    query_seconds: float | None = Field(
        default=QUERY_SECONDS,
        gt=0,
        description="Time budget of one page's store reads: past it the query is stopped and "
        "the page is a 503 that says so (None: no budget).",
    )
    allowed_hosts: frozenset[str] | None = Field(
        default=None,
        description="Host names (of the Host header, without the port) the UI answers to; "
        "any other is a 421, against DNS rebinding (None: any host).",
    )


def create_app(config: UiConfig) -> FastAPI:
    if not config.db.exists():
        raise UserError(f"no store at {config.db}; import something first (trajforge import PATH)")
    Store(config.db).close()  # migrates an older store once, before the readers open it
    reads = StoreReads(config.db, config.query_seconds)
    scorer = RiskScorer(config.monitor)
    app = FastAPI(title="trajforge", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    refuse_cross_site(app)
    if config.allowed_hosts is not None:
        refuse_foreign_hosts(app, config.allowed_hosts)
    _install_guards(app, config.token)
    app.add_middleware(ServerTiming)
    _pages(app, reads, scorer, config)
    _fork_routes(app, reads, config)
    _views(app, reads, config)
    _api(app, reads)
    _training(app, reads)
    _strategies(app, reads)
    app.router.on_shutdown.append(reads.close)
    return app


def _install_guards(app: FastAPI, token: str | None) -> None:
    if token is not None:
        _require_token(app, token)

    @app.exception_handler(Refused)
    async def refused_request(request: Request, exc: Refused) -> Response:
        return refused(request, exc)

    @app.exception_handler(QueryTooSlow)
    async def too_slow(request: Request, exc: QueryTooSlow) -> Response:
        message = f"{exc}: narrow the search (fewer prefix* terms, more words) or the filters"
        return error_response(request, 503, "too slow", message)

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> Response:
        return error_response(request, 400, "cannot show this", str(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, exc: RequestValidationError) -> Response:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem.get("loc", ()))
        return error_response(request, 400, "cannot show this", f"{where}: {problem['msg']}")

    @app.exception_handler(404)
    async def no_route(request: Request, exc: Exception) -> Response:
        return error_response(request, 404, "not found", f"no page at {request.url.path}")

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> Response:
        return error_response(request, 500, "internal error", f"{type(exc).__name__}: {exc}")


def _require_token(app: FastAPI, token: str) -> None:
    """Every request needs the token (header, `?token=` which sets a cookie, or the cookie)."""

    @app.middleware("http")
    async def require_token(request: Request, call_next) -> Response:
        given = _given_token(request)
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            return error_response(
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


def _params(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items() if k != "token"}


def _html(title: str, body: str, active: str = "") -> HTMLResponse:
    return HTMLResponse(page(title, body, active))


def _get(store: Store, traj_id: str) -> Trajectory:
    try:
        return store.get(traj_id)
    except UserError as exc:
        raise NotFound(str(exc)) from None


def _pages(app: FastAPI, reads: StoreReads, scorer: RiskScorer, config: UiConfig) -> None:
    """The runs page and the pages of one run."""

    @app.get("/", response_class=HTMLResponse)
    async def runs_page(request: Request) -> HTMLResponse:
        params = _params(request)
        body = await reads(lambda store: runs.runs_page(store, params, scorer.from_file))
        return _html("Runs", body, "/")

    @app.get("/runs/{traj_id}", response_class=HTMLResponse)
    async def run_page(request: Request, traj_id: str) -> HTMLResponse:
        params = _params(request)

        def render(store: Store) -> tuple[str, str]:
            traj = _get(store, traj_id)
            diagnoses = load_diagnoses(store, [traj.id])
            count = child_count(store, traj.id)
            return traj.id, run_view.run_view(traj, diagnoses, params, count)

        full_id, body = await reads(render)
        return _html(f"Run {full_id[:12]}", body)

    @app.get("/api/risk")
    async def api_risk(ids: str = "") -> JSONResponse:
        """{id: failure risk after the run's last step} for up to 100 comma-separated ids."""
        wanted = [i for i in ids.split(",") if i][:100]
        risks = await reads(lambda store: {i: scorer.latest(_get(store, i)) for i in wanted})
        return JSONResponse(risks)

    @app.get("/runs/{traj_id}/risk", response_class=HTMLResponse)
    async def risk_fragment(traj_id: str) -> HTMLResponse:
        note = (
            f"model file {config.monitor.name}"
            if config.monitor is not None
            else "rule detector: start the UI with --monitor MODEL for a learned risk and its "
            "stop threshold"
        )
        curve = await reads(lambda store: scorer.curve(_get(store, traj_id)))
        return HTMLResponse(run_view.risk_block(curve, note))

    @app.get("/runs/{traj_id}/tree", response_class=HTMLResponse)
    async def tree_page(traj_id: str) -> HTMLResponse:
        def render(store: Store) -> str:
            full_id = _get(store, traj_id).id
            return forks.tree_view(fork_tree(store, full_id), full_id)

        return _html("Fork tree", await reads(render))

    @app.get("/runs/{traj_id}/tokens", response_class=HTMLResponse)
    async def tokens_page(traj_id: str) -> HTMLResponse:
        body = await reads(lambda store: tokens.token_view(_get(store, traj_id)))
        return _html("Tokens", body)


def _fork_routes(app: FastAPI, reads: StoreReads, config: UiConfig) -> None:
    """ "Fork from here": the form, and the post that runs it (with the form token)."""
    form_token = FormToken()

    @app.get("/runs/{traj_id}/fork", response_class=HTMLResponse)
    async def fork_page(request: Request, traj_id: str) -> HTMLResponse:
        at = whole(request.query_params, "at")
        field = form_token.field()
        body = await reads(lambda store: fork_form(_get(store, traj_id), at, config.db, field))
        return _html("Fork", body)

    @app.post("/runs/{traj_id}/fork")
    async def fork_run(request: Request, traj_id: str) -> Response:
        form = await posted_form(request, form_token)
        parent_id = await reads(lambda store: _get(store, traj_id).id)
        child_id = await run_in_threadpool(run_fork, config.db, parent_id, form)
        return RedirectResponse(f"/runs/{child_id}", status_code=303)


def _views(app: FastAPI, reads: StoreReads, config: UiConfig) -> None:
    """Pages over several runs: diff, compare, live, datasets."""

    @app.get("/diff", response_class=HTMLResponse)
    async def diff_page(a: str = "", b: str = "") -> HTMLResponse:
        if not a or not b:
            raise UserError("a diff needs two runs: /diff?a=ID&b=ID")
        body = await reads(lambda store: forks.diff_view(_get(store, a), _get(store, b)))
        return _html("Diff", body)

    @app.get("/compare", response_class=HTMLResponse)
    async def compare_page(request: Request) -> HTMLResponse:
        wanted, by = request.query_params.getlist("g"), request.query_params.get("by")

        def render(store: Store) -> str:
            specs = [s for s in compare.group_specs(store, wanted, by) if s]
            return compare.compare_page(store, specs)

        return _html("Compare", await reads(render), "/compare")

    @app.get("/live", response_class=HTMLResponse)
    async def live_page() -> HTMLResponse:
        return _html("Live", await reads(live.live_page), "/live")

    @app.get("/live/activity", response_class=HTMLResponse)
    async def live_activity() -> HTMLResponse:
        return HTMLResponse(await reads(live.activity_block))

    @app.get("/datasets", response_class=HTMLResponse)
    async def datasets_page() -> HTMLResponse:
        body = await reads(lambda store: datasets.datasets_page(store, str(config.db)))
        return _html("Datasets", body, "/datasets")


def _strategies(app: FastAPI, reads: StoreReads) -> None:
    """The strategy library and one strategy's versions."""

    @app.get("/strategies", response_class=HTMLResponse)
    async def strategies_page() -> HTMLResponse:
        return _html("Strategies", await reads(strategies.strategies_page), "/strategies")

    @app.get("/strategies/view", response_class=HTMLResponse)
    async def strategy_page(name: str = "") -> HTMLResponse:
        body = await reads(lambda store: strategies.strategy_page(store, name))
        return _html("Strategy", body, "/strategies")

    @app.get("/api/strategies")
    async def api_strategies() -> JSONResponse:
        def listed(store: Store) -> list[dict]:
            return [s.model_dump(mode="json") for s in latest_strategies(store)]

        return JSONResponse(await reads(listed))


def _api(app: FastAPI, reads: StoreReads) -> None:
    @app.get("/api/runs")
    async def api_runs(request: Request) -> JSONResponse:
        params = _params(request)
        return JSONResponse(await reads(lambda store: runs.api_runs(store, params)))

    @app.get("/api/runs/{traj_id}")
    async def api_run(traj_id: str) -> Response:
        def document(store: Store) -> bytes:
            try:
                return run_document(store, traj_id)
            except UserError as exc:
                raise NotFound(str(exc)) from None

        return Response(await reads(document), media_type="application/json")

    @app.get("/api/runs/{traj_id}/tree")
    async def api_tree(traj_id: str) -> JSONResponse:
        def tree(store: Store) -> dict:
            return fork_tree(store, _get(store, traj_id).id).model_dump()

        return JSONResponse(await reads(tree))

    @app.get("/api/diff")
    async def api_diff(a: str = "", b: str = "") -> JSONResponse:
        if not a or not b:
            raise UserError("a diff needs two runs: /api/diff?a=ID&b=ID")
        first, second = await reads(lambda store: (_get(store, a), _get(store, b)))
        return JSONResponse(_diff_json(first, second))

    @app.get("/api/events")
    async def api_events(request: Request) -> StreamingResponse:
        params = _params(request)
        run_query(params)  # a bad filter is an error before the stream starts

        stream = await live.run_events(reads, request, params, runs.live_row)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def _diff_json(first: Trajectory, second: Trajectory) -> dict:
    rows = forks.alignment(first, second)
    return {
        "a": first.id,
        "b": second.id,
        "first_difference": forks.first_difference(rows),
        "rows": [{"tag": t, "a": i, "b": j} for t, i, j in rows],
    }


def _training(app: FastAPI, reads: StoreReads) -> None:
    """Training runs that record into this store, live (`?run=NAME` narrows to one)."""

    def selected(store: Store, name: str) -> list[TrainingRun]:
        if not name:
            return training_runs(store)
        run = training_run(store, name)
        if run is None:
            raise NotFound(f"no training run {name!r} in this store")
        return [run]

    @app.get("/training", response_class=HTMLResponse)
    async def training_page(run: str = "") -> HTMLResponse:
        body = await reads(lambda store: training.training_page(store, selected(store, run)))
        return _html("Training", body, "/training")

    @app.get("/api/training")
    async def api_training(run: str = "") -> JSONResponse:
        body = await reads(lambda store: training.api_training(store, selected(store, run)))
        return JSONResponse(body)

    @app.get("/api/training/events")
    async def api_training_events(request: Request, run: str = "") -> StreamingResponse:
        raw_after = request.query_params.get("after")
        after = None if raw_after in (None, "") else whole(request.query_params, "after")
        stream = await training.training_events(reads, request, after, run)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
