"""``CoderChatClient.watch_chats()`` of the event-loop adapters: the ``/watch`` subscription as
an async iterator and async context manager (wire 6; the machine is ``coder_proto._stream.watch``, the
consumer's rules ``coder_proto._shells.watch_feed``)."""

from __future__ import annotations

import contextlib  # async only
from typing import Protocol

from coder_io_common.closing import AsyncClosing
from coder_proto import ChatWatchEvent
from coder_proto.adapter import ClientSettings, PrefixSelector, WatchShell

from .driver import Driver, TaskHandle
from .runtime import LoopToken  # async only

__all__ = ["ChatWatch", "WatchedClient"]


class WatchedClient(Protocol):
    """What a watch needs of its client (a ``CoderChatClient``)."""

    settings: ClientSettings
    selector: PrefixSelector
    driver: Driver

    @property
    def base_url(self) -> str: ...

    async def aclose(self) -> None: ...


class ChatWatch(WatchShell[WatchedClient], AsyncClosing):
    """Chat lifecycle events for every chat the user can see (wire 6)::

        async with client.watch_chats() as watch:
            async for event in watch:
                print(event.kind, event.chat.id, event.chat.status)

    The subscription starts at the first ``__anext__`` (or on entering the ``async with``):
    the prefix preflight runs then, and its error propagates. Dropped connections are redialed
    forever with backoff (1 s doubling to 30 s, reset once an event is delivered); a 4xx
    upgrade rejection raises a terminal ``CoderApiError``. Leaving the ``async with``,
    ``aclose()``, cancelling the task or scope that iterates, or dropping the iterator tears
    the socket down at once, even while a read is pending. Nothing here emits ``ws:*``
    events.
    """

    _run: TaskHandle[None] | None
    # async only: begin
    #: The loop that runs the watch (``__del__`` cancels on it).
    _loop: LoopToken | None = None
    # async only: end

    def _start(self) -> TaskHandle[None]:
        driver = self._client.driver
        run = self._feed.start(lambda backoff: driver.watch(backoff=backoff))
        if run is not None:
            self._loop = driver.runtime.loop_token()  # async only
            self._run = run
        assert self._run is not None
        return self._run

    def __aiter__(self) -> ChatWatch:
        return self

    async def __anext__(self) -> ChatWatchEvent:
        feed = self._feed
        if feed.exhausted:
            raise StopAsyncIteration
        run = self._start()
        driver = self._client.driver
        while True:
            with driver.locked():
                event = feed.next_event()
            if event is not None:
                return event
            if feed.exhausted:
                raise StopAsyncIteration
            await run.wait_changed()

    # async only: begin
    # The blocking watch subscribes on entering (coder_io_sync.watch).
    async def __aenter__(self) -> ChatWatch:
        self._start()
        return self

    # async only: end

    async def aclose(self) -> None:
        """Stop watching: the socket is closed (close 1000) at once, and the client closed
        when the watch created it (``watch_chats``). Idempotent."""
        self._stop()
        if self._owns_client:
            await self._client.aclose()

    def close(self) -> None:  # async only
        """``aclose`` without awaiting (the teardown is synchronous)."""  # async only
        self._stop()  # async only

    def _stop(self) -> None:
        self._feed.close()
        if self._run is not None:
            self._run.cancel(None)

    # async only: begin
    def __del__(self) -> None:
        # Dropping an unfinished iterator (``break`` out of ``async for``) must not leave the
        # socket open: cancel on the loop that runs it.
        run = self._run
        loop = self._loop
        if run is None or run.done or loop is None:
            return
        with contextlib.suppress(Exception):
            loop.run_soon(run.cancel, None)

    # async only: end
