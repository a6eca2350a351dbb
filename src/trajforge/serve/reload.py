"""Hot-reloading a served student: `POST /admin/reload {"checkpoint": DIR}`.

The RL loop writes a checkpoint after every update and asks the running server to swap it in,
so the next rollouts are sampled from the new weights without restarting the server (and the
proxy in front of it keeps its sessions). The new checkpoint is loaded on a worker thread; the
swap is one attribute assignment, so a batch already decoding finishes on the old weights and
every batch after it uses the new ones. The checkpoint must use the same codec: a reload that
would change the token ids of the same text is refused (the recorded tokens would stop meaning
what the trainer reads). A checkpoint that cannot be loaded (no weights, a broken manifest) is
refused with a 400 naming the problem, and the old weights keep serving.

The route swaps the weights being trained, so it needs a token: whoever starts the server
makes one (`new_reload_token`; the RL loop does, for its own server) and sends it as
`Authorization: Bearer TOKEN`; it is compared in constant time. A server started without a
token refuses every reload (403).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from pathlib import Path

import orjson
from fastapi import Request
from fastapi.responses import Response

from trajforge.errors import UserError
from trajforge.serve.app import StudentApp
from trajforge.serve.request import BadRequest, json_object
from trajforge.serve.student import Student, codec_identity

RELOAD_PATH = "/admin/reload"
MIN_TOKEN_CHARS = 16


def new_reload_token() -> str:
    """A fresh random token for one server's reload route."""
    return secrets.token_urlsafe(32)


def reload_headers(token: str) -> dict[str, str]:
    """The headers a reload request carries."""
    return {"Authorization": f"Bearer {token}"}


def _check_token(request: Request, token: str | None) -> None:
    if not token:
        raise BadRequest(403, "reload is off: this server was started without a reload token")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
        raise BadRequest(401, "reload needs the server's token (Authorization: Bearer TOKEN)")


def _checkpoint(body: dict) -> Path:
    path = body.get("checkpoint")
    if not isinstance(path, str) or not path:
        raise BadRequest(400, 'body must be {"checkpoint": "<directory>"}')
    return Path(path)


def add_reload_route(served: StudentApp, token: str | None) -> None:
    """Give `served` the reload endpoint, open to requests carrying `token` (call before the
    server starts). With no token every reload is refused."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"a reload token needs at least {MIN_TOKEN_CHARS} characters")

    async def reload(request: Request) -> Response:
        _check_token(request, token)
        path = _checkpoint(json_object(await served.body(request)))
        try:
            student = await asyncio.to_thread(Student, path, bf16=served.student.bf16)
        except UserError as exc:
            raise BadRequest(400, str(exc)) from None
        if codec_identity(student) != codec_identity(served.student):
            raise BadRequest(409, f"{path}: its tokenizer differs from the served one")
        served.use(student)
        answer = {"checkpoint": str(path), "codec": codec_identity(student)}
        return Response(orjson.dumps(answer), media_type="application/json")

    served.routes.post(RELOAD_PATH)(reload)
