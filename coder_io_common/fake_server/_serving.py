"""What every connection of one served fake shares: the model behind its lock, the wake-up
events of the open WebSockets and the ticker, the stop flag, the WebSocket heartbeat settings
and the trace."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

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
        #: Each open WebSocket's wake-up event, with its chat id (``None``: a watch).
        self.wakers: dict[asyncio.Event, str | None] = {}
        #: The ticker's wake-up event (set while serving).
        self.tick_wake: asyncio.Event | None = None
        #: Stopping began: every loop of the server ends at its next wake-up.
        self.stopping = False

    def wake_all(self) -> None:
        """Wake the ticker and every WebSocket (on the server's loop)."""
        if self.tick_wake is not None:
            self.tick_wake.set()
        for event in self.wakers:
            event.set()

    def wake_chats(self, chat_ids: set[str]) -> None:
        """Wake the streams of ``chat_ids`` and every watch (watch events follow any chat)."""
        if not chat_ids:
            return
        for event, chat_id in self.wakers.items():
            if chat_id is None or chat_id in chat_ids:
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
