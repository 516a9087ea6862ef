"""The queue routes of the fake server: edit, delete and promote a queued message
(server-behaviour 2.2, 2.5, 2.6, 8.6; D35)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._constants import (
    STATUS_ERROR,
    STATUS_INTERRUPTING,
    STATUS_PAUSED,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
    STATUS_WAITING,
)
from . import _validation as check
from ._catalog import ModelCatalog
from ._errors import FakeApiError
from ._http import parse_go_int64
from ._rows import FakeChat
from ._store import CANCEL_BY_PROMOTION, ChatStore
from ._subscriptions import Subscriptions
from ._transitions import transition_refused
from ._worker import Worker

__all__ = ["PAUSED_EDIT_CONFLICT", "Queue"]

#: The 409 for beginning an edit on another entry while the chat is paused at its head
#: (chatstate's refusal; server-behaviour 2.6).
PAUSED_EDIT_CONFLICT: Final = (
    "Chat is paused at a queued message under edit. Finish editing, send, or remove it first."
)


def _position(chat: FakeChat, queued_id: int) -> int:
    index = next((n for n, q in enumerate(chat.queue) if q.id == queued_id), None)
    if index is None:
        raise FakeApiError(404, "Queued message not found.")
    return index


class Queue:
    """Edits, deletes and promotes queued messages."""

    def __init__(
        self,
        store: ChatStore,
        catalog: ModelCatalog,
        worker: Worker,
        subscriptions: Subscriptions,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._worker = worker
        self._subscriptions = subscriptions

    def edit(self, chat: FakeChat, queued_id: str, body: Mapping[str, Any], now: float) -> None:
        """``PATCH /chats/{chat}/queue/{id}`` (server-behaviour 2.6, D35): 204. New content
        (a content-only edit keeps the entry's model and effort), ``editing`` to begin or end
        an edit (beginning one ends any other; only one entry is under edit), and the model
        and effort overrides, accepted only with content. Ending the edit of a paused chat's
        head sends it; beginning one on another entry of a paused chat is a 409."""
        t = self._store.advance_clock(now)
        qid = _queued_id(queued_id)
        if chat.archived:
            raise FakeApiError(400, "Cannot edit queued messages in an archived chat.")
        raw_content = body.get("content")
        editing = body.get("editing")
        raw_model = body.get("model_config_id")
        raw_effort = body.get("reasoning_effort")
        if raw_content is None and editing is None and raw_model is None and raw_effort is None:
            raise FakeApiError(400, "Nothing to edit.")
        if editing is not None and not isinstance(editing, bool):
            raise FakeApiError(
                400, "Request body must be valid JSON.", detail="editing must be a boolean"
            )
        if raw_content is None and (raw_model is not None or raw_effort is not None):
            raise FakeApiError(400, "model_config_id and reasoning_effort require content.")
        content = None
        model_config_id = None
        effort = check.reasoning_effort(raw_effort)
        if raw_content is not None:
            content = check.content_parts(raw_content, self._store.files)
            self._store.check_files_free(chat, content)
            if raw_model is not None:
                model_config_id = self._catalog.resolve(raw_model, chat.last_model_config_id)
        index = next((n for n, q in enumerate(chat.queue) if q.id == qid), None)
        if index is None:
            raise FakeApiError(404, "Queued message not found.")
        paused = chat.status == STATUS_PAUSED
        if paused and editing is True and index != 0:
            raise FakeApiError(409, PAUSED_EDIT_CONFLICT)
        entry = chat.queue[index]
        self._store.begin(chat, t)
        if content is not None:
            self._store.link_files(chat, content)
            entry.content = content
            if model_config_id is not None:
                entry.model_config_id = model_config_id
            if effort is not None:
                entry.reasoning_effort = effort
        if editing is True:
            for other in chat.queue:
                if other is not entry:
                    other.editing_since = None
            if entry.editing_since is None:
                entry.editing_since = self._store.timestamp(t)
        elif editing is False:
            entry.editing_since = None
        self._store.queue_changed(chat)
        if paused and editing is False:
            # P → R0/R1: ending the head's edit sends it.
            self._worker.resume_paused(chat, t)
        self._subscriptions.publish("status_change", chat)

    def delete(self, chat: FakeChat, queued_id: str, now: float) -> None:
        """``DELETE /chats/{chat}/queue/{id}``: 204, 404 (not in a non-empty queue), 409
        (empty queue) (server-behaviour 2.5, 8.6)."""
        t = self._store.advance_clock(now)
        qid = _queued_id(queued_id)
        if chat.archived:
            raise FakeApiError(409, "Chat is not in a state that allows deleting queued messages.")
        if not chat.queue:
            raise transition_refused(
                "Chat has no queued messages to delete.", "DeleteQueuedMessage", chat
            )
        index = _position(chat, qid)
        self._store.begin(chat, t)
        del chat.queue[index]
        self._store.queue_changed(chat)
        if chat.status == STATUS_PAUSED and index == 0:
            # P → W, R0 or R1: without its head the chat goes on (server-behaviour 2.6).
            self._worker.resume_paused(chat, t)
            self._subscriptions.publish("status_change", chat)

    def promote(self, chat: FakeChat, queued_id: str, now: float) -> None:
        """``POST /chats/{chat}/queue/{id}/promote`` (server-behaviour 2.2, 2.6): E1/A1/P
        promote at once (from P, an entry behind the head under edit runs and the head stays
        under edit); R1/I1 move it to the head and interrupt. The promoted entry's own edit
        ends."""
        t = self._store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot promote queued messages in an archived chat.")
        qid = _queued_id(queued_id)
        if not chat.queue:
            raise transition_refused(
                "Chat has no queued messages to promote.", "PromoteQueuedMessage", chat
            )
        index = _position(chat, qid)
        self._store.begin(chat, t)
        target = chat.queue[index]
        if index or target.editing_since is not None:
            # Promoting an entry ends its edit: it is sent as it is now.
            chat.queue.insert(0, chat.queue.pop(index))
            target.editing_since = None
            self._store.queue_changed(chat)
        if chat.status in (STATUS_ERROR, STATUS_REQUIRES_ACTION, STATUS_WAITING, STATUS_PAUSED):
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
