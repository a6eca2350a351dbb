"""Building HTML by hand: escaping, links that keep the URL's state, the page frame.

Pages are plain strings assembled from small functions: no template engine, nothing to
build. Every value that comes from the store passes through `h()`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote_plus

from trajforge.schema import OutcomeStatus

NAV = (
    ("/", "Runs"),
    ("/live", "Live"),
    ("/training", "Training"),
    ("/compare", "Compare"),
    ("/datasets", "Datasets"),
    ("/strategies", "Strategies"),
)


_SPECIAL = re.compile(r"[&<>\"']")


def h(value: object) -> str:
    """HTML-escaped text of any value (None is empty)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return html.escape(text, quote=True) if _SPECIAL.search(text) else text


_PLAIN = re.compile(r"[\w.\-]*", re.ASCII)


def url(path: str, params: Mapping[str, object] | None = None) -> str:
    """`path` with the non-empty parameters as a query string (lists repeat the key)."""
    pairs: list[str] = []
    for key, value in (params or {}).items():
        values = value if isinstance(value, list | tuple) else [value]
        pairs.extend(f"{key}={_quoted(str(v))}" for v in values if v not in (None, "", False))
    return f"{path}?{'&'.join(pairs)}" if pairs else path


def _quoted(text: str) -> str:
    return text if _PLAIN.fullmatch(text) else quote_plus(text)


def link(href: str, text: object, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f'<a href="{h(href)}"{attr}>{h(text)}</a>'


def short_id(traj_id: str) -> str:
    return traj_id[:12]


def run_link(traj_id: str, params: Mapping[str, object] | None = None) -> str:
    href = url(f"/runs/{traj_id}", params) if params else f"/runs/{traj_id}"
    return f'<a class="mono" href="{h(href)}">{h(short_id(traj_id))}</a>'


_BADGES: dict[OutcomeStatus, tuple[str, str]] = {
    "success": ("success", "ok"),
    "failure": ("failure", "bad"),
    "model_error": ("model error", "warn"),
    "unjudged": ("unknown", "dim"),
}


def outcome_badge(status: OutcomeStatus) -> str:
    """A run's outcome as a badge; a run the model or endpoint ended is not an agent failure."""
    word, cls = _BADGES[status]
    return f'<span class="badge {cls}">{word}</span>'


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "grid") -> str:
    """A table from already-escaped cell HTML; a row given as one string is a full-width
    cell under the row before it."""
    headers = list(headers)
    head = "".join(f"<th>{cell}</th>" for cell in headers)
    body = "".join(
        f'<tr class="sub"><td colspan="{len(headers)}">{row}</td></tr>'
        if isinstance(row, str)
        else "<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def page(title: str, body: str, active: str = "/", token_note: str = "") -> str:
    """The whole document: header with navigation, then `body` (already HTML)."""
    nav = "".join(
        f'<a href="{href}" class="{"active" if href == active else ""}">{name}</a>'
        for href, name in NAV
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{h(title)} · trajforge</title>"
        '<link rel=stylesheet href="/static/style.css"><script defer src="/static/app.js"></script>'
        f'</head><body><header><a class="brand" href="/">trajforge</a><nav>{nav}</nav>'
        f"{token_note}</header><main>{body}</main></body></html>"
    )


def error_page(title: str, message: str) -> str:
    """A page that says what went wrong, in one sentence, and offers the way back."""
    body = (
        f'<div class="error"><h1>{h(title)}</h1><p id="error-message">{h(message)}</p>'
        '<p><a href="/">back to all runs</a></p></div>'
    )
    return page(title, body)
