"""``CoderChatClient.watch_chats()`` on asyncio: the ``/watch`` subscription as an async
iterator and async context manager (wire 6; the machine is ``coder_proto.watch``)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from types import TracebackType
from typing import TYPE_CHECKING

from coder_proto.errors import CoderAgentError
from coder_proto.watch import WatchBackoff, WatchMachine
from coder_proto.wire.chats import ChatWatchEvent

if TYPE_CHECKING:
    from ._driver import Run, VerifyTypes
    from .client import CoderChatClient

__all__ = ["ChatWatch", "watch_chats"]


class ChatWatch:
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

    def __init__(
        self,
        client: CoderChatClient,
        *,
        backoff: WatchBackoff | None = None,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._backoff = backoff
        self._owns_client = owns_client
        self._run: Run[None] | None = None
        self._buffer: collections.deque[ChatWatchEvent] = collections.deque()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._run is not None else "new"
        return f"<ChatWatch {state}>"

    def _start(self) -> WatchMachine:
        if self._run is None:
            if self._closed:
                raise CoderAgentError("this chat watch is closed")
            client = self._client
            machine = WatchMachine(
                client.selector,
                base_url=client.base_url,
                token=client.settings.token,
                now=time.monotonic(),
                backoff=self._backoff,
            )
            self._bind()
            self._run = client.driver.start(machine)
        machine = self._run.machine
        assert isinstance(machine, WatchMachine)
        return machine

    def __aiter__(self) -> ChatWatch:
        return self

    async def __anext__(self) -> ChatWatchEvent:
        if self._closed and not self._buffer:
            raise StopAsyncIteration
        machine = self._start()
        run = self._run
        assert run is not None
        while not self._buffer:
            self._buffer.extend(machine.take())
            if self._buffer:
                break
            if machine.done:
                self._closed = True
                if not machine.cancelled:
                    await run.result()  # raises the terminal error
                raise StopAsyncIteration
            await run.wait_changed()
        return self._buffer.popleft()

    async def __aenter__(self) -> ChatWatch:
        self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop watching: the socket is closed (close 1000) at once. Idempotent."""
        self.close()
        if self._owns_client:
            await self._client.aclose()

    def close(self) -> None:
        """``aclose`` without awaiting (the teardown is synchronous)."""
        self._closed = True
        self._buffer.clear()
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


def watch_chats(
    base_url: str | None = None,
    token: str | None = None,
    *,
    verify: VerifyTypes = True,
    backoff: WatchBackoff | None = None,
) -> ChatWatch:
    """The standalone watch (the reference's ``watchChatEvents``, wire 1.5, 6): no client of
    your own and no preflight; it dials ``/api/v2/chats/watch`` directly. ``base_url`` and
    ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN``. Use
    ``CoderChatClient.watch_chats()`` for prefix selection on older servers."""
    from coder_proto.constants import V2_PREFIX

    from .client import CoderChatClient

    client = CoderChatClient(base_url, token, verify=verify, prefix=V2_PREFIX)
    return ChatWatch(client, backoff=backoff, owns_client=True)
