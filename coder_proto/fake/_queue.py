"""The queue routes of the fake server: delete and promote a queued message
(server-behaviour 2.2, 2.5, 8.6)."""

from __future__ import annotations

from .._constants import (
    STATUS_ERROR,
    STATUS_INTERRUPTING,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
    STATUS_WAITING,
)
from ._errors import FakeApiError
from ._http import parse_go_int64
from ._rows import FakeChat
from ._store import CANCEL_BY_PROMOTION, ChatStore
from ._subscriptions import Subscriptions
from ._worker import Worker

__all__ = ["Queue"]


def _position(chat: FakeChat, queued_id: int) -> int:
    index = next((n for n, q in enumerate(chat.queue) if q.id == queued_id), None)
    if index is None:
        raise FakeApiError(404, "Queued message not found.")
    return index


class Queue:
    """Deletes and promotes queued messages."""

    def __init__(self, store: ChatStore, worker: Worker, subscriptions: Subscriptions) -> None:
        self._store = store
        self._worker = worker
        self._subscriptions = subscriptions

    def delete(self, chat: FakeChat, queued_id: str, now: float) -> None:
        """``DELETE /chats/{chat}/queue/{id}``: 204, 404 (not in a non-empty queue), 409
        (empty queue) (server-behaviour 2.5, 8.6)."""
        t = self._store.advance_clock(now)
        qid = _queued_id(queued_id)
        if chat.archived:
            raise FakeApiError(409, "Chat is not in a state that allows deleting queued messages.")
        if not chat.queue:
            raise FakeApiError(409, "Chat has no queued messages to delete.")
        index = _position(chat, qid)
        self._store.begin(chat, t)
        del chat.queue[index]
        self._store.queue_changed(chat)

    def promote(self, chat: FakeChat, queued_id: str, now: float) -> None:
        """``POST /chats/{chat}/queue/{id}/promote`` (server-behaviour 2.2): E1/A1 promote at
        once; R1/I1 move it to the head and interrupt."""
        t = self._store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot promote queued messages in an archived chat.")
        qid = _queued_id(queued_id)
        if not chat.queue:
            raise FakeApiError(409, "Chat has no queued messages to promote.")
        index = _position(chat, qid)
        self._store.begin(chat, t)
        if index:
            chat.queue.insert(0, chat.queue.pop(index))
            self._store.queue_changed(chat)
        if chat.status in (STATUS_ERROR, STATUS_REQUIRES_ACTION, STATUS_WAITING):
            self._store.cancel_pending(chat, t, CANCEL_BY_PROMOTION)
            promoted = self._store.promote_head(chat, t)
            chat.last_error = None
            chat.status = STATUS_RUNNING
            self._worker.start_run(chat, promoted, t)
        else:
            chat.status = STATUS_INTERRUPTING
            if chat.interrupt_at is None:
                chat.interrupt_at = t + self._store.config.interrupt_delay
        self._subscriptions.publish("status_change", chat)


def _queued_id(text: str) -> int:
    """The queue entry id of the path, read as the server reads it: any int64, zero and
    negative ones included (they name no entry: 404); anything else is a 400 with Go's
    reason."""
    try:
        return parse_go_int64(text)
    except ValueError as exc:
        raise FakeApiError(400, "Invalid queued message ID.", detail=str(exc)) from None
