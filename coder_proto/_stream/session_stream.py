"""The session's chat stream: one reader kept across ``requires_action`` pauses (state
machines H.6, G.4; wire 5 "stream lifetime"; D6, D12).

A ``SessionStream`` wraps one ``StreamReader`` (state machines B, C) with what the session
needs on top:

* **Session-unique connection ids.** A reader numbers its connections by attempt (1, 2, ...);
  two readers of one session (a paused one being closed while a fresh one dials) would
  collide, so every ``OpenConnection`` gets an id from the session's counter and inputs are
  mapped back to the reader's own id.
* **The attach/pause/close life cycle of H.6.** ``ATTACHED`` while a segment reads it,
  ``PAUSED`` (reusable) between the segments of a client-tool turn, ``CLOSED`` for good. A
  stream whose reader has ended is never re-attached (D12): the resume dials fresh.
* **The memoized read.** Events wait in the reader's ``events`` deque until a segment takes
  them, so an event one segment did not consume is adopted by the next (H.6, J.24): nothing is
  dropped and nothing is delivered twice.
* **D6 limits while paused.** A paused stream that buffers more than 10,000 events, or stays
  paused longer than the requires_action deadline plus 60 s, is closed; a later resume dials
  fresh with the session cursor.

``new_reader_id()`` is the process-wide reader counter of wire 11: every reader creation takes
the next id, observed or not.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from .._actions import Action, CloseConnection, OpenConnection, SendData
from .._constants import PAUSED_STREAM_GRACE, PAUSED_STREAM_MAX_BUFFERED, REQUIRES_ACTION_DEADLINE
from .._errors import CoderAgentError
from .websocket import WsEvent, WsObserver

__all__ = ["ReaderLike", "SessionStream", "new_reader_id"]

logger = logging.getLogger("coder_proto")

_READER_IDS = itertools.count(1)


def new_reader_id() -> int:
    """The next id of the process-wide reader counter (wire 11: ``reader`` on ``ws:*``)."""
    return next(_READER_IDS)


class ReaderLike(Protocol):
    """What a segment needs from a stream reader (``coder_proto._stream.reader.StreamReader``)."""

    events: deque[Any]

    @property
    def done(self) -> bool: ...

    @property
    def error(self) -> CoderAgentError | None: ...

    def start(self, now: float) -> None: ...

    def connection_made(self, conn_id: int, now: float) -> None: ...

    def connection_failed(self, conn_id: int, message: str, now: float) -> None: ...

    def data_received(self, conn_id: int, data: bytes, now: float) -> None: ...

    def connection_lost(self, conn_id: int, now: float) -> None: ...

    def tick(self, now: float) -> None: ...

    def close(self, now: float) -> None: ...

    def actions(self) -> list[Action]: ...

    def next_deadline(self) -> float | None: ...

    # The segment took every event and the stream may stay quiet: the reader may let its
    # queue go (``events`` is read anew after each step).
    def release_events(self) -> None: ...


class SessionStream:
    """One turn stream as the session holds it (H.6)."""

    __slots__ = (
        "_conn_ids",
        "_conns",
        "_max_buffered",
        "_observer",
        "_pause_limit",
        "after_id",
        "attached",
        "chat_id",
        "closed",
        "paused_at",
        "reader",
        "reader_id",
        "reusable",
    )

    def __init__(
        self,
        reader: ReaderLike,
        *,
        chat_id: str,
        reader_id: int,
        after_id: int | None,
        conn_ids: Callable[[], int],
        pause_limit: float = REQUIRES_ACTION_DEADLINE + PAUSED_STREAM_GRACE,
        max_buffered: int = PAUSED_STREAM_MAX_BUFFERED,
        observer: WsObserver | None = None,
    ) -> None:
        self.reader = reader
        self.chat_id = chat_id
        self.reader_id = reader_id
        #: The dial cursor fixed at creation; a resume that attaches inherits it (B.3).
        self.after_id = after_id
        self._conn_ids = conn_ids
        #: The reader's connections in dial order, each its own id then the session's:
        #: ``(local, global, local, global, ...)``. A stream dials once or a few times, and
        #: two dicts would keep about 450 bytes for one connection.
        self._conns: tuple[int, ...] = ()
        self._pause_limit = pause_limit
        self._max_buffered = max_buffered
        self.attached = True
        self.reusable = False
        self.closed = False
        self.paused_at: float | None = None
        self._observer: WsObserver | None = None
        self.observe(observer)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "attached" if self.attached else "paused"
        return f"SessionStream(chat_id={self.chat_id!r}, reader={self.reader_id}, {state})"

    # -- the reader's view ------------------------------------------------------------------

    @property
    def events(self) -> deque[Any]:
        """Forwarded events not yet consumed, in arrival order."""
        return self.reader.events

    @property
    def ended(self) -> bool:
        """The reader finished (closed by us, or failed terminally)."""
        return self.reader.done

    @property
    def failure(self) -> CoderAgentError | None:
        """The reader's terminal error, if it failed."""
        return self.reader.error

    # -- life cycle (H.6) --------------------------------------------------------------------

    def start(self, now: float) -> None:
        self.reader.start(now)

    def can_attach(self, chat_id: str | None) -> bool:
        """Not closed, paused (reusable), for this chat, and its reader still live (D12)."""
        return (
            not self.closed
            and self.reusable
            and not self.attached
            and self.chat_id == chat_id
            and not self.reader.done
        )

    def attach(self) -> None:
        """A resume segment takes over the paused stream (keeping its reader and dial
        cursor)."""
        if not self.can_attach(self.chat_id):
            raise CoderAgentError("this chat stream cannot be attached")
        self.attached = True
        self.reusable = False
        self.paused_at = None

    def pause(self, now: float) -> None:
        """The segment paused at ``requires_action``: keep reading in the background."""
        self.attached = False
        if self.closed:
            return
        self.reusable = True
        self.paused_at = now

    def close(self, now: float) -> None:
        """Close for good (idempotent): the reader sends close 1000 and ends quietly."""
        if self.closed:
            return
        self.closed = True
        self.attached = False
        self.reusable = False
        self.paused_at = None
        self.reader.close(now)

    # -- what the reader's connections did (``WsObserver``) ------------------------------

    def observe(self, observer: WsObserver | None) -> None:
        """What the reader's connections did goes to ``observer`` (the session's, a transcript
        recorder's tap), with session-unique connection ids; with ``None`` the reader reports
        nothing (and no received frame passes through here)."""
        self._observer = observer
        if hasattr(self.reader, "observer"):
            # A ReaderLike may have no observer slot.
            setattr(self.reader, "observer", None if observer is None else self)  # noqa: B010

    def upgrade_sent(self, conn_id: int, target: str, now: float) -> None:
        observer = self._observer
        assert observer is not None  # the reader reports here only while there is one
        observer.upgrade_sent(self._global_id(conn_id), target, now)

    def ws_events(self, conn_id: int, events: Sequence[WsEvent], now: float) -> None:
        observer = self._observer
        assert observer is not None  # the reader reports here only while there is one
        observer.ws_events(self._global_id(conn_id), events, now)

    # -- I/O ---------------------------------------------------------------------------------

    def owns(self, conn_id: int) -> bool:
        return self.reader_conn_id(conn_id) is not None

    def reader_conn_id(self, conn_id: int) -> int | None:
        """The reader's own id of the session's connection ``conn_id`` (``None``: not one of
        this stream's)."""
        conns = self._conns
        for index in range(len(conns) - 1, 0, -2):
            if conns[index] == conn_id:
                return conns[index - 1]
        return None

    def _global_id(self, local: int) -> int:
        """The session's id of the reader's connection ``local`` (-1: not one it opened)."""
        conns = self._conns
        for index in range(len(conns) - 2, -1, -2):
            if conns[index] == local:
                return conns[index + 1]
        return -1

    def connection_made(self, conn_id: int, now: float) -> None:
        local = self.reader_conn_id(conn_id)
        if local is not None:
            self.reader.connection_made(local, now)

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        local = self.reader_conn_id(conn_id)
        if local is not None:
            self.reader.connection_failed(local, message, now)
            self.check_pause_limits(now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        local = self.reader_conn_id(conn_id)
        if local is not None:
            self.reader.data_received(local, data, now)
            self.check_pause_limits(now)

    def connection_lost(self, conn_id: int, now: float) -> None:
        local = self.reader_conn_id(conn_id)
        if local is not None:
            self.reader.connection_lost(local, now)
            self.check_pause_limits(now)

    def tick(self, now: float) -> None:
        self.reader.tick(now)
        self.check_pause_limits(now)

    def next_deadline(self) -> float | None:
        deadline = self.reader.next_deadline()
        if self.paused_at is not None:
            limit = self.paused_at + self._pause_limit
            deadline = limit if deadline is None else min(deadline, limit)
        return deadline

    def actions(self) -> list[Action]:
        """The reader's actions with session-unique connection ids."""
        return self.relay(self.reader.actions())

    def relay(self, actions: list[Action]) -> list[Action]:
        """``actions``, drained from the reader, with session-unique connection ids."""
        out: list[Action] = []
        for action in actions:
            if isinstance(action, OpenConnection):
                conn_id = self._conn_ids()
                self._conns += (action.conn_id, conn_id)
                out.append(attrs.evolve(action, conn_id=conn_id))
            elif isinstance(action, SendData | CloseConnection):
                conn_id = self._global_id(action.conn_id)
                if conn_id >= 0:
                    out.append(attrs.evolve(action, conn_id=conn_id))
            else:  # pragma: no cover - readers only speak connection actions
                out.append(action)
        return out

    def check_pause_limits(self, now: float) -> None:
        """D6 while paused: close the stream once it buffers too many events or stays paused
        too long (nothing happens while a segment reads it)."""
        if self.paused_at is None or self.closed:
            return
        if len(self.reader.events) > self._max_buffered:
            logger.warning(
                "closing the paused stream of chat %s: more than %d events buffered; the resumed turn reconnects",
                self.chat_id,
                self._max_buffered,
            )
            self.close(now)
        elif now >= self.paused_at + self._pause_limit:
            logger.warning(
                "closing the paused stream of chat %s: paused longer than %.0f s; the resumed turn reconnects",
                self.chat_id,
                self._pause_limit,
            )
            self.close(now)
