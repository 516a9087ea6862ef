"""``CoderChatClient.watch_chats()``, blocking: the ``/watch`` subscription as an iterator and
a context manager (wire 6; the machine is ``coder_proto.watch``)."""

from __future__ import annotations

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

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._run is not None else "new"
        return f"<ChatWatch {state}>"

    def _start(self) -> WatchMachine:
        if self._run is None:
            if self._closed:
                raise CoderAgentError("this chat watch is closed")
            client = self._client
            driver = client.driver
            with driver.locked():
                machine = WatchMachine(
                    client.selector,
                    base_url=client.base_url,
                    token=client.settings.token,
                    now=time.monotonic(),
                    backoff=self._backoff,
                )
            self._run = driver.start(machine)
        machine = self._run.machine
        assert isinstance(machine, WatchMachine)
        return machine

    def __iter__(self) -> ChatWatch:
        return self

    def __next__(self) -> ChatWatchEvent:
        if self._closed and not self._buffer:
            raise StopIteration
        machine = self._start()
        run = self._run
        assert run is not None
        driver = self._client.driver
        while not self._buffer:
            with driver.locked():
                self._buffer.extend(machine.take())
                done = machine.done
            if self._buffer:
                break
            if done:
                self._closed = True
                if not machine.cancelled:
                    run.result()  # raises the terminal error
                raise StopIteration
            run.wait_until(lambda: bool(machine.events))
        return self._buffer.popleft()

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
        machine = self._start()
        run = self._run
        assert run is not None
        run.wait_until(lambda: _opened(machine) or bool(machine.events) or machine.attempt > 1)
        if machine.done and not machine.cancelled:
            self._closed = True
            run.result()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop watching: the socket is closed (close 1000) at once, and the client closed
        when the watch created it (``watch_chats``). Idempotent."""
        self._closed = True
        self._buffer.clear()
        if self._run is not None:
            self._run.cancel(None)
        if self._owns_client:
            self._client.close()

    def __del__(self) -> None:
        # Dropping an unfinished iterator (``break`` out of ``for``) must not leave the socket
        # open. The driver's lock is taken only if it is free: a collection that happens
        # inside the driver must not wait for itself.
        run = self._run
        if run is None or self._closed:
            return
        with contextlib.suppress(Exception):
            driver = self._client.driver
            if not driver.try_cancel(run):
                return
            if self._owns_client:
                self._client.close()


def _opened(machine: WatchMachine) -> bool:
    # The machine's connection phase has no public accessor; "open" means the upgrade was
    # accepted (wire 6).
    return getattr(machine, "_phase", None) == "open"


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
