"""Frame delivery to one stream or watch connection of the fake server, with the connection
faults it was opened under.

A ``Delivery`` holds the frames a subscription produced until they are due: a ``FrameDelay``
holds every frame back, a ``FrameStall`` holds them all after some frames (for a while or for
good), a ``StreamDrop`` ends the connection after some frames or just before an event, and a
random drop may end it after any frame. ``closed`` turns true once the last frame before a
drop is released; the adapter then closes with ``close_code`` (``None``: drop the TCP
connection without a close frame).

``Source`` is what a subscription needs of the server, so the subscriptions know nothing of
the model that opens them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import attrs

from ._faults import Faults, FrameDelay, FrameStall, StreamDrop
from ._store import ChatStore

__all__ = ["Delivery", "Source"]


@attrs.frozen(kw_only=True)
class Source:
    """What a subscription needs of the server: its rows, its faults, a way to run the
    workers up to a time (``advance``) and a way to say the subscription ended
    (``release``, called once)."""

    store: ChatStore
    faults: Faults
    advance: Callable[[float], None]
    release: Callable[[Delivery], None]


class Delivery:
    """One connection's outbox: frame release with its drops, delays and stalls."""

    route = "stream"

    def __init__(self, source: Source, chat_id: str | None) -> None:
        self._source = source
        drop, delay, stall = source.faults.claim_connection_faults(self.route, chat_id)
        self._drop: StreamDrop | None = drop
        self._delay: FrameDelay | None = delay
        self._stall: FrameStall | None = stall
        self._stall_until: float | None = None
        self._outbox: deque[tuple[float, bytes]] = deque()
        self._queued_frames = 0
        self._drop_pending = False
        self._close_code: int | None = None
        #: Frames released to the adapter so far.
        self.frames_sent = 0
        #: True once the server ends this connection (after its last frame).
        self.closed = False
        self._unregistered = False
        self._maybe_start_stall(source.store.now)

    def _maybe_start_stall(self, now: float) -> None:
        """The stall starts once ``after_frames`` frames have been produced."""
        stall = self._stall
        if (
            stall is not None
            and self._stall_until is None
            and self._queued_frames >= stall.after_frames
        ):
            self._stall_until = math.inf if stall.seconds is None else now + stall.seconds

    @property
    def close_code(self) -> int | None:
        """The WebSocket close code to end with, or ``None`` for an abrupt TCP close."""
        return self._close_code

    def _schedule_drop(self, close_code: int | None) -> None:
        if not self._drop_pending:
            self._drop_pending = True
            self._close_code = close_code

    def _enqueue(self, frames: list[bytes], now: float) -> None:
        drop = self._drop
        for frame in frames:
            if self._drop_pending:
                return
            if (
                drop is not None
                and drop.after_frames is not None
                and self._queued_frames >= drop.after_frames
            ):
                self._schedule_drop(drop.close_code)
                return
            release = now
            if self._delay is not None:
                release += self._delay.seconds
            if self._stall_until is not None:
                release = max(release, self._stall_until)
            if self._outbox:
                release = max(release, self._outbox[-1][0])
            self._outbox.append((release, frame))
            self._queued_frames += 1
            self._maybe_start_stall(now)
            faults = self._source.faults
            if faults.random_drop_probability > 0 and (
                faults.rng.random() < faults.random_drop_probability
            ):
                self._schedule_drop(None)
        if (
            drop is not None
            and drop.after_frames is not None
            and self._queued_frames >= drop.after_frames
        ):
            self._schedule_drop(drop.close_code)

    def _release(self, now: float) -> list[bytes]:
        out: list[bytes] = []
        while self._outbox and self._outbox[0][0] <= now:
            out.append(self._outbox.popleft()[1])
        self.frames_sent += len(out)
        if self._drop_pending and not self._outbox:
            self.closed = True
        return out

    def next_deadline(self) -> float | None:
        """When a held-back frame becomes due (``None``: nothing scheduled)."""
        if self.closed:
            return None
        if self._outbox and math.isfinite(self._outbox[0][0]):
            return self._outbox[0][0]
        return None

    def close(self) -> None:
        """The connection ended (either side): stop counting it as open. Idempotent."""
        if not self._unregistered:
            self._unregistered = True
            self.closed = True
            self._source.release(self)
