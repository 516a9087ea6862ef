"""``CoderChatClient.watch_chats()``, blocking: the ``/watch`` subscription as an iterator and
a context manager (wire 6; the machine is ``coder_proto._stream.watch``, the consumer's rules
``coder_proto._shells.watch_feed``)."""

from __future__ import annotations

import contextlib

from ._sync import watch

__all__ = ["ChatWatch"]


class ChatWatch(watch.ChatWatch):
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
