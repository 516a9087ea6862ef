"""``CoderChatClient.watch_chats()``, blocking: the ``/watch`` subscription as an iterator and
a context manager (wire 6; the machine is ``coder_proto._stream.watch``, the consumer's rules
``coder_proto._shells.watch_feed``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

from coder_io_common.closing import Closing
from coder_proto import ChatWatchEvent
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.settings import ClientSettings
from coder_proto._shells.watch_feed import WatchShell

if TYPE_CHECKING:
    from ._driver import Driver, Run

__all__ = ["ChatWatch"]


class _WatchedClient(Protocol):
    """What a watch needs of the ``CoderChatClient`` it watches through."""

    driver: Driver
    selector: PrefixSelector
    settings: ClientSettings

    @property
    def base_url(self) -> str: ...

    def close(self) -> None: ...


class ChatWatch(WatchShell[Any], Closing):
    """Chat lifecycle events for every chat the user can see (wire 6)::

        with client.watch_chats() as watch:
            for event in watch:
                print(event.kind, event.chat.id, event.chat.status)

    Entering the ``with`` subscribes: the prefix preflight runs and the socket is opened
    before it returns, and a terminal error propagates from it (without a ``with``, the first
    ``next()`` subscribes). Dropped connections are redialed forever
    with backoff (1 s doubling to 30 s, reset once an event is delivered); a 4xx upgrade
    rejection raises a terminal ``CoderApiError``. Leaving the ``with``, ``close()``, a
    ``KeyboardInterrupt`` while waiting for an event, or dropping the iterator (``break`` out
    of a ``for`` over ``client.watch_chats()``) tears the socket down at once. The socket is
    read only while the consumer waits in ``next()``. Nothing here emits ``ws:*`` events.
    """

    _client: _WatchedClient
    _run: Run[None] | None

    def _start(self) -> Run[None]:
        driver = self._client.driver
        run = self._feed.start(lambda backoff: driver.watch(backoff=backoff))
        if run is not None:
            self._run = run
        assert self._run is not None
        return self._run

    def __iter__(self) -> ChatWatch:
        return self

    def __next__(self) -> ChatWatchEvent:
        feed = self._feed
        if feed.exhausted:
            raise StopIteration
        run = self._start()
        machine = feed.machine
        assert machine is not None
        driver = self._client.driver
        while True:
            with driver.locked():
                event = feed.next_event()
            if event is not None:
                return event
            if feed.exhausted:
                raise StopIteration
            run.wait_until(lambda: bool(machine.events))

    def __enter__(self) -> ChatWatch:
        try:
            self._subscribe()
        except BaseException:
            self.close()
            raise
        return self

    def _subscribe(self) -> None:
        """Drive the subscription until its first connection is open (events from then on
        are kept by the socket until ``next()`` reads them), ended, or the watch finished; a
        terminal error (the preflight's, a 4xx rejection) is raised here."""
        run = self._start()
        machine = self._feed.machine
        assert machine is not None
        run.wait_until(lambda: machine.open or bool(machine.events) or machine.attempt > 1)
        if machine.done and not machine.cancelled:
            self._feed.close()
            run.result()

    def close(self) -> None:
        """Stop watching: the socket is closed (close 1000) at once, and the client closed
        when the watch created it (``watch_chats``). Idempotent."""
        self._feed.close()
        if self._run is not None:
            self._run.cancel(None)
        if self._owns_client:
            self._client.close()

    def __del__(self) -> None:
        # Dropping an unfinished iterator (``break`` out of ``for``) must not leave the socket
        # open. The driver's lock is taken only if it is free: a collection that happens
        # inside the driver must not wait for itself.
        run = self._run
        if run is None or self._feed.closed:
            return
        with contextlib.suppress(Exception):
            driver = self._client.driver
            if not driver.try_cancel(run):
                return
            if self._owns_client:
                self._client.close()
