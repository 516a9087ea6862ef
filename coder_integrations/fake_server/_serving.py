"""What every connection of one served fake shares: the model behind its lock, the wake-up
events of the open WebSockets (indexed by chat, so waking a chat's streams costs only those)
and the ticker, the stop flag, the WebSocket heartbeat settings and the trace."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable

from coder_proto.fake import FakeCoderModel

__all__ = ["Serving", "Trace", "wait_event"]


class Trace:
    """One line per request, upgrade, frame and close, written to ``write``: seconds since
    the server started, the connection number, then what happened. Targets are written with
    any ``coder_session_token`` query value redacted; headers and the token never appear."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._start = time.monotonic()

    def __call__(self, conn_id: int, text: str) -> None:
        self._write(f"{time.monotonic() - self._start:9.3f} #{conn_id} {text}")


class Serving:
    """The state shared by a server's connections (see the module docstring)."""

    def __init__(
        self,
        model: FakeCoderModel,
        *,
        ping_interval: float,
        ping_timeout: float,
        trace: Trace | None,
    ) -> None:
        self.model = model
        self.lock = threading.RLock()
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.trace = trace
        #: The wake-up events of the open streams, by chat id, and of the open watches.
        self._streams: dict[str, set[asyncio.Event]] = {}
        self._watches: set[asyncio.Event] = set()
        #: The ticker's wake-up event (set while serving).
        self.tick_wake: asyncio.Event | None = None
        #: Stopping began: every loop of the server ends at its next wake-up.
        self.stopping = False

    def add_waker(self, event: asyncio.Event, chat_id: str | None) -> None:
        """Register an open WebSocket's wake-up event: a stream of ``chat_id``, or a watch
        (``None``)."""
        if chat_id is None:
            self._watches.add(event)
        else:
            self._streams.setdefault(chat_id, set()).add(event)

    def remove_waker(self, event: asyncio.Event, chat_id: str | None) -> None:
        """Forget a closed WebSocket's wake-up event (registered with the same ``chat_id``)."""
        if chat_id is None:
            self._watches.discard(event)
            return
        events = self._streams[chat_id]
        events.discard(event)
        if not events:
            del self._streams[chat_id]

    def wake_all(self) -> None:
        """Wake the ticker and every WebSocket (on the server's loop): after a change made
        outside a request, and on stopping."""
        if self.tick_wake is not None:
            self.tick_wake.set()
        self._wake(self._watches)
        for events in self._streams.values():
            self._wake(events)

    def wake_request(self, chat_ids: set[str]) -> None:
        """After a REST request: wake the ticker (a request may start or end a run), every
        watch (watch events follow any chat) and the streams of ``chat_ids``, the chats the
        request may have changed. It costs the streams it wakes, not every open one."""
        if self.tick_wake is not None:
            self.tick_wake.set()
        self._wake(self._watches)
        for chat_id in chat_ids:
            self._wake(self._streams.get(chat_id, ()))

    def wake_chats(self, chat_ids: set[str]) -> None:
        """Wake the streams of ``chat_ids`` and every watch (watch events follow any chat)."""
        if not chat_ids:
            return
        self._wake(self._watches)
        for chat_id in chat_ids:
            self._wake(self._streams.get(chat_id, ()))

    @staticmethod
    def _wake(events: Iterable[asyncio.Event]) -> None:
        for event in events:
            event.set()

    def count(self, field: str, delta: int) -> None:
        """Add ``delta`` to one of the model's connection counters."""
        with self.lock:
            counters = self.model.counters
            setattr(counters, field, getattr(counters, field) + delta)

    def note(self, conn_id: int, text: str) -> None:
        if self.trace is not None:
            self.trace(conn_id, text)

    def note_answer(self, conn_id: int) -> None:
        """Trace the request the model answered last (call with the lock held)."""
        if self.trace is not None:
            record = self.model.counters.request_log[-1]
            self.trace(conn_id, f"{record.method} {record.path} {record.status} {record.op}")


async def wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Wait until ``event`` is set or ``timeout`` seconds passed. Unlike ``wait_for`` on
    Python 3.11, a cancellation that arrives as the event is set is never lost."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
