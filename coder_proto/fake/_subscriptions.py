"""The fake server's open stream and watch subscriptions, and the watch events it publishes
(server-behaviour 6: to every open watch, best effort, no replay)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._counters import FakeCounters
from ._delivery import Delivery, Source
from ._faults import Faults
from ._rows import FakeChat
from ._store import ChatStore
from ._stream import StreamSubscription
from ._watch import WatchSubscription

__all__ = ["Subscriptions"]


class Subscriptions:
    """Opens subscriptions, counts them while they are open and publishes watch events.
    ``advance`` runs the server's workers up to a time (a subscription does so before every
    pull)."""

    def __init__(
        self,
        store: ChatStore,
        faults: Faults,
        counters: FakeCounters,
        advance: Callable[[float], None],
    ) -> None:
        self._store = store
        self._counters = counters
        self._source = Source(store=store, faults=faults, advance=advance, release=self._release)
        self.streams: list[StreamSubscription] = []
        self.watches: list[WatchSubscription] = []

    def open_stream(self, chat: FakeChat, after_id: int) -> StreamSubscription:
        chat.mark_read()
        sub = StreamSubscription(self._source, chat, after_id)
        self.streams.append(sub)
        self._counters.streams_accepted[chat.id] += 1
        self._counters.open_streams += 1
        return sub

    def open_watch(self) -> WatchSubscription:
        sub = WatchSubscription(self._source)
        self.watches.append(sub)
        self._counters.open_watches += 1
        return sub

    def _release(self, sub: Delivery) -> None:
        if isinstance(sub, StreamSubscription):
            # The owner's read marker moves again when the stream closes.
            self._store.chats[sub.chat_id].mark_read()
            self.streams.remove(sub)
            self._counters.open_streams -= 1
        else:
            assert isinstance(sub, WatchSubscription)
            self.watches.remove(sub)
            self._counters.open_watches -= 1

    def publish(
        self, kind: str, chat: FakeChat, tool_calls: list[dict[str, Any]] | None = None
    ) -> None:
        """A watch event (``created``, ``status_change``, ``title_change``,
        ``action_required`` with its ``tool_calls``) to every open watch."""
        if not self.watches:
            return
        event: dict[str, Any] = {"kind": kind, "chat": self._store.chat_json(chat, light=True)}
        if tool_calls is not None:
            event["tool_calls"] = tool_calls
        for watch in self.watches:
            watch.push(event)
