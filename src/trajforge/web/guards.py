"""What a request must be before a route sees it: errors with their HTTP status, and the
rules for requests that change the store (same origin, a form token, a form body).

A browser page on another origin (another port of 127.0.0.1 is the same *site*, so a cookie
set by `--token` goes along) can make the user's browser post a form here. Every POST, PUT,
PATCH or DELETE is therefore refused unless

- `Sec-Fetch-Site`, when the browser sends it, is `same-origin` (or `none`: typed by the
  user), and `Origin`, when sent, is this server's own;
- its body is an urlencoded form (a `text/plain` or JSON body is refused: a cross-site
  page can send those without asking), UTF-8, of at most `MAX_FORM_BYTES`;
- the form carries this process's form token (`FormToken`, new at every start, placed in
  every form the server renders; compared in constant time).

A page on another site can also make its own name resolve to 127.0.0.1 (DNS rebinding) and
then read this UI as if it were its own origin. Every request is therefore refused unless
its `Host` header names one of the hosts the UI was told it is reached by (`refuse_foreign_hosts`;
`trajforge ui` allows the loopback names, the address it binds and `--allow-host` names).
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from trajforge.errors import UserError
from trajforge.web.html import error_page, h

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FORM_BYTES = 64 * 1024
TOKEN_FIELD = "form_token"
_FETCH_SITES_OK = frozenset({"same-origin", "none"})


class Refused(UserError):
    """A request the server refuses, with its HTTP status (400 unless a subclass says)."""

    status = 400
    title = "cannot show this"


class NotFound(Refused):
    """A run, page or resource that does not exist."""

    status = 404
    title = "not found"


class Forbidden(Refused):
    """A state-changing request from another origin, or without the form token."""

    status = 403
    title = "refused"


class UnsupportedBody(Refused):
    """A body that is not an urlencoded form."""

    status = 415
    title = "refused"


class UnknownHost(Refused):
    """A request whose `Host` header names a host this UI is not reached by."""

    status = 421
    title = "refused"


class BodyTooLarge(Refused):
    status = 413
    title = "refused"


class FormToken:
    """This process's form token: in every form the server renders, required in every post."""

    def __init__(self) -> None:
        self.value = secrets.token_urlsafe(32)

    def field(self) -> str:
        """The hidden input that carries the token in a form."""
        return f'<input type="hidden" name="{TOKEN_FIELD}" value="{h(self.value)}">'

    def check(self, form: dict[str, str]) -> None:
        given = form.get(TOKEN_FIELD, "")
        if not hmac.compare_digest(given.encode(), self.value.encode()):
            raise Forbidden(
                "this form has no valid form token: reload the page it came from and submit "
                "it again (tokens change when the UI restarts)"
            )


def error_response(request: Request, status: int, title: str, message: str) -> Response:
    """An error as the caller reads it: JSON `{"error"}` under `/api/`, else a page."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    return HTMLResponse(error_page(title, message), status_code=status)


def refused(request: Request, exc: Refused) -> Response:
    return error_response(request, exc.status, exc.title, str(exc))


def refuse_cross_site(app: FastAPI) -> None:
    """Install the origin and body-type rules for every state-changing request."""

    @app.middleware("http")
    async def same_origin_forms(request: Request, call_next) -> Response:
        if request.method in UNSAFE_METHODS:
            try:
                check_same_origin(request)
                check_form_type(request)
            except Refused as exc:
                return refused(request, exc)
        return await call_next(request)


def refuse_foreign_hosts(app: FastAPI, allowed: frozenset[str]) -> None:
    """Refuse every request whose `Host` (its name, without the port) is not in `allowed`."""

    @app.middleware("http")
    async def known_host(request: Request, call_next) -> Response:
        name = host_name(request.headers.get("host", ""))
        if name not in allowed:
            shown = ", ".join(sorted(allowed))
            exc = UnknownHost(
                f"refused a request for host {name[:100]!r}: this UI answers to {shown} only "
                "(trajforge ui --allow-host NAME adds a name)"
            )
            return refused(request, exc)
        return await call_next(request)


def host_name(header: str) -> str:
    """The host of a `Host` header, lowercased, without its port or a trailing dot
    (`[::1]:8765` → `::1`)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0].rstrip(".") if header.count(":") == 1 else header.rstrip(".")


def check_same_origin(request: Request) -> None:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in _FETCH_SITES_OK:
        raise Forbidden(f"refused a {site} request: forms here are posted from this UI only")
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if origin is not None and origin != own:
        raise Forbidden(
            f"refused a request from origin {origin[:100]!r}: forms here are posted from {own} only"
        )


def check_form_type(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != FORM_TYPE:
        raise UnsupportedBody(
            f"the body must be a form ({FORM_TYPE}), not {media_type or 'untyped'}"
        )


async def posted_form(request: Request, token: FormToken) -> dict[str, str]:
    """The request's form fields (last value of each), after the size, encoding and token
    checks; a `Refused` error says which failed."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BodyTooLarge(f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(f"the form is not UTF-8 (byte {exc.start})") from None
    try:
        form = dict(parse_qsl(text, keep_blank_values=True, errors="strict"))
    except UnicodeDecodeError as exc:
        raise Refused(
            f"the form has a field that is not UTF-8 once decoded: {exc.reason}"
        ) from None
    token.check(form)
    return form
