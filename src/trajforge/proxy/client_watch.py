"""Stopping a call's work when its client disconnects, without a task per piece of work.

Once a request's body has been read, the next ASGI message is the client's disconnect. One
watcher task waits for it and cancels the task serving the call; `ClientWatch` turns that
cancellation into `left = True` and leaves any other cancellation (a shutdown) alone. This
is cheaper on every call than running the work as a second task and waiting for the first of
the two, or than Starlette's task group around a streamed answer.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from starlette.types import Receive


class ClientWatch:
    """`async with ClientWatch(receive) as watch:` runs its body until the client leaves;
    then the body is cancelled, the cancellation ends at the `with`, and `watch.left` is
    True."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.left = False
        self._open = False
        self._task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Future[None] | None = None

    async def __aenter__(self) -> ClientWatch:
        self._task = asyncio.current_task()
        self._open = True
        self._watcher = asyncio.ensure_future(self._disconnected())
        self._watcher.add_done_callback(self._on_disconnect)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._open = False
        if self._watcher is not None:
            self._watcher.cancel()
        if kind is not asyncio.CancelledError or not self.left or self._task is None:
            return False
        return self._task.uncancel() == 0  # a cancellation from elsewhere goes on

    async def _disconnected(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass

    def _on_disconnect(self, watcher: asyncio.Future[None]) -> None:
        if watcher.cancelled():
            return
        watcher.exception()  # a broken receive counts as the client leaving
        if self._open and self._task is not None:
            self.left = True
            self._task.cancel()
