"""One ``/chats/watch`` connection of the fake server (server-behaviour 6): one JSON event
object per frame, only events published while it is open (no snapshot, no replay)."""

from __future__ import annotations

from typing import Any

from ._delivery import Delivery, Source
from ._util import encode_json

__all__ = ["WatchSubscription"]


class WatchSubscription(Delivery):
    """One ``/chats/watch`` connection: one event object per frame (server-behaviour 6)."""

    route = "watch"

    def __init__(self, source: Source) -> None:
        super().__init__(source, None)
        self._pending: list[dict[str, Any]] = []
        if self._drop is not None and self._drop.after_frames == 0:
            self._schedule_drop(self._drop.close_code)

    def push(self, event: dict[str, Any]) -> None:
        """Queue an event (the model publishes; delivery is best effort)."""
        if not self.closed and not self._drop_pending:
            self._pending.append(event)

    def pull(self, now: float) -> list[bytes]:
        """Advance the model to ``now`` and return the frames due now."""
        if self.closed:
            return []
        self._source.advance(now)
        if self._pending:
            pending, self._pending = self._pending, []
            escape = self._source.store.config.html_escape
            self._enqueue([encode_json(e, html_escape=escape) + b"\n" for e in pending], now)
        return self._release(now)
