"""``CoderChatClient.watch_chats()`` on asyncio: the ``/watch`` subscription as an async
iterator and async context manager (wire 6; the machine is ``coder_proto._stream.watch``, the
consumer's rules ``coder_proto._shells.watch_feed``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

from coder_io_common.closing import AsyncClosing
from coder_proto import ChatWatchEvent
from coder_proto._shells.watch_feed import WatchShell

if TYPE_CHECKING:
    from ._driver import Run
    from .client import CoderChatClient

__all__ = ["ChatWatch"]


class ChatWatch(WatchShell[Any], AsyncClosing):
    """Chat lifecycle events for every chat the user can see (wire 6)::

        async with client.watch_chats() as watch:
            async for event in watch:
                print(event.kind, event.chat.id, event.chat.status)

    The subscription starts at the first ``__anext__`` (or on entering the ``async with``):
    the prefix preflight runs then, and its error propagates. Dropped connections are redialed
    forever with backoff (1 s doubling to 30 s, reset once an event is delivered); a 4xx
    upgrade rejection raises a terminal ``CoderApiError``. Leaving the ``async with``,
    ``aclose()``, cancelling the task that iterates, or dropping the iterator tears the socket
    down at once, even while a read is pending. Nothing here emits ``ws:*`` events.
    """

    _client: CoderChatClient
    _run: Run[None] | None
    #: The loop that runs the watch (``__del__`` cancels on it).
    _loop: asyncio.AbstractEventLoop | None = None

    def _start(self) -> Run[None]:
        client = self._client
        machine = self._feed.start(
            client.selector,
            base_url=client.base_url,
            token=client.settings.token,
            now=time.monotonic(),
        )
        if machine is not None:
            self._bind()
            self._run = client.driver.start(machine)
        assert self._run is not None
        return self._run

    def __aiter__(self) -> ChatWatch:
        return self

    async def __anext__(self) -> ChatWatchEvent:
        feed = self._feed
        if feed.exhausted:
            raise StopAsyncIteration
        run = self._start()
        while (event := feed.next_event()) is None:
            if feed.exhausted:
                raise StopAsyncIteration
            await run.wait_changed()
        return event

    async def __aenter__(self) -> ChatWatch:
        self._start()
        return self

    async def aclose(self) -> None:
        """Stop watching: the socket is closed (close 1000) at once. Idempotent."""
        self.close()
        if self._owns_client:
            await self._client.aclose()

    def close(self) -> None:
        """``aclose`` without awaiting (the teardown is synchronous)."""
        self._feed.close()
        if self._run is not None:
            self._run.cancel(None)

    def _bind(self) -> None:
        """Remember the loop that runs this watch (``__del__`` cancels on it)."""
        self._loop = asyncio.get_running_loop()

    def __del__(self) -> None:
        # Dropping an unfinished iterator (``break`` out of ``async for``) must not leave the
        # socket open: cancel on the loop that runs it.
        run = self._run
        if run is None or run.done:
            return
        with contextlib.suppress(Exception):
            self._cancel_soon(run)

    def _cancel_soon(self, run: Run[None]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            run.cancel(None)
        else:
            loop.call_soon_threadsafe(run.cancel, None)
