"""Reading and rewriting a chat's history: the messages route's pages (server-behaviour 7)
and in-place revisions, as a lifecycle hook makes them (3.3)."""

from __future__ import annotations

import re
from typing import Any

from .._constants import MESSAGES_LIMIT_DEFAULT, MESSAGES_LIMIT_MAX
from ._errors import FakeApiError
from ._http import Query, parse_positive_int
from ._rows import FakeChat, FakeMessage
from ._store import ChatStore

__all__ = ["History"]


class History:
    """Pages and revisions of chat histories."""

    def __init__(self, store: ChatStore) -> None:
        self._store = store

    def page(self, chat: FakeChat, query: Query) -> dict[str, Any]:
        """``GET /chats/{chat}/messages`` (server-behaviour 7)."""
        validations = []
        cursors: dict[str, int | None] = {}
        for key in ("before_id", "after_id"):
            raw = query.get(key)
            cursors[key] = None
            if raw is not None:
                value = parse_positive_int(raw)
                if value is None:
                    validations.append({"field": key, "detail": "must be a positive integer"})
                cursors[key] = value
        if validations:
            raise FakeApiError(
                400, "Query parameters have invalid values.", validations=validations
            )
        raw_limit = query.get("limit")
        limit = MESSAGES_LIMIT_DEFAULT
        if raw_limit is not None:
            if not re.fullmatch(r"-?\d{1,10}", raw_limit.strip()):
                raise FakeApiError(
                    400,
                    "Query parameters have invalid values.",
                    validations=[{"field": "limit", "detail": "must be an integer"}],
                )
            limit = int(raw_limit)
            if not 1 <= limit <= MESSAGES_LIMIT_MAX:
                raise FakeApiError(400, "Invalid limit parameter (1-200).")
        before, after = cursors["before_id"], cursors["after_id"]
        if before is not None and after is not None and after >= before:
            raise FakeApiError(400, "after_id must be less than before_id.")
        visible = chat.visible_messages()
        if after is not None and before is None:
            rows = [m for m in visible if m.id > after]
        else:
            rows = [
                m
                for m in reversed(visible)
                if (before is None or m.id < before) and (after is None or m.id > after)
            ]
        page = rows[: limit + 1]
        queued = chat.queue if before is None and after is None else []
        return {
            "messages": [self._store.message_json(m) for m in page[:limit]],
            "queued_messages": [self._store.queued_json(q) for q in queued],
            "has_more": len(page) > limit,
        }

    def revise(
        self, chat: FakeChat, message_id: int, content: list[dict[str, Any]], now: float
    ) -> FakeMessage:
        """Rewrite a committed message in place, as a lifecycle hook rewriting tool-call
        input does: a new revision under the same id, which every stream re-sends as a
        ``message`` event whatever its ``after_id`` (server-behaviour 3.3). Best used while no
        step is streaming: a history change starts a new episode. ``KeyError`` when no
        visible message has that id."""
        t = self._store.advance_clock(now)
        found = next((m for m in chat.visible_messages() if m.id == message_id), None)
        if found is None:
            raise KeyError(message_id)
        self._store.begin(chat, t)
        self._store.history_changed(chat)
        found.content = [dict(p) for p in content]
        found.changed_at = chat.history_version
        return found
