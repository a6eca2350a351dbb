"""Hot-reloading a served student: `POST /admin/reload {"checkpoint": DIR}`.

The RL loop writes a checkpoint after every update and asks the running server to swap it in,
so the next rollouts are sampled from the new weights without restarting the server (and the
proxy in front of it keeps its sessions). The new checkpoint is loaded on a worker thread; the
swap is one attribute assignment, so a batch already decoding finishes on the old weights and
every batch after it uses the new ones. The checkpoint must use the same codec: a reload that
would change the token ids of the same text is refused (the recorded tokens would stop meaning
what the trainer reads).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
from fastapi import HTTPException, Request
from fastapi.responses import Response

from trajforge.errors import UserError
from trajforge.serve.app import StudentApp
from trajforge.serve.student import Student

RELOAD_PATH = "/admin/reload"


def codec_identity(student: Student) -> str:
    """A short fingerprint of the student's tokenizer and chat template."""
    import hashlib

    blob = orjson.dumps(student.codec.to_json(), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()[:16]


def add_reload_route(served: StudentApp) -> None:
    """Give `served` the reload endpoint (call before the server starts)."""

    async def reload(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
            path = Path(body["checkpoint"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise HTTPException(400, 'body must be {"checkpoint": "<directory>"}') from None
        try:
            student = await asyncio.to_thread(Student, path)
        except UserError as exc:
            raise HTTPException(400, str(exc)) from None
        if codec_identity(student) != codec_identity(served.student):
            raise HTTPException(409, f"{path}: its tokenizer differs from the served one")
        served.student = student
        answer = {"checkpoint": str(path), "codec": codec_identity(student)}
        return Response(orjson.dumps(answer), media_type="application/json")

    served.app.post(RELOAD_PATH)(reload)
