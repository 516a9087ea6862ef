"""The fake server's database: its rows, id sequences and clock, and the transactions every
transition is made of (server-behaviour 0).

Each transition is one "transaction" that bumps the chat's ``snapshot_version``
(``begin``), and the ``history_version`` / ``queue_version`` when history or the queue changes;
that is all a stream needs to compute its level-triggered batches (3.3, 3.4). The store also
writes its rows' JSON the way the configured profile says (zero-value keys, promotion stamps).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .._constants import MAX_ATTACHMENTS_PER_CHAT
from ._config import FakeConfig
from ._errors import FakeApiError
from ._rows import FakeChat, FakeFile, FakeMessage, FakeQueuedMessage
from ._util import new_uuid, rfc3339

__all__ = [
    "CANCEL_BY_EDIT",
    "CANCEL_BY_PROMOTION",
    "CANCEL_BY_TIMEOUT",
    "CANCEL_BY_USER",
    "CANCEL_BY_USER_MESSAGE",
    "ChatStore",
    "content_text",
]

#: The results of tool calls cancelled by a transition (server-behaviour 4.2).
CANCEL_BY_USER: Final = "Tool execution interrupted by user"
"""The result of a client tool call cancelled by an interrupt (server-behaviour 4.2)."""
CANCEL_BY_USER_MESSAGE: Final = "Tool execution interrupted by user message"
"""The result of a client tool call cancelled by a new user message."""
CANCEL_BY_PROMOTION: Final = "Tool execution interrupted by queued message promotion"
"""The result of a client tool call cancelled by a queued message's promotion."""
CANCEL_BY_EDIT: Final = "Tool execution interrupted by message edit"
"""The result of a client tool call cancelled by a message edit."""
CANCEL_BY_TIMEOUT: Final = "Tool execution timed out waiting for client tool results"
"""The requires_action deadline's reason; the server's exact text was not read (server-behaviour
Q2).
"""


def content_text(content: Iterable[Mapping[str, Any]]) -> str:
    """The text parts of a message, one per line."""
    return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


class ChatStore:
    """Chats (``chats``), uploaded files (``files``), the id sequences and the model's clock.

    ``rng`` is the model's seeded generator: every id is drawn from it, so a seeded model is
    repeatable.
    """

    def __init__(
        self, config: FakeConfig, rng: random.Random, *, organization_id: str, user_id: str
    ) -> None:
        self.config = config
        self.rng = rng
        self.organization_id = organization_id
        self.user_id = user_id
        self.chats: dict[str, FakeChat] = {}
        self.files: dict[str, FakeFile] = {}
        #: The latest time the model was advanced to (monotonic seconds; never goes back).
        self.now = 0.0
        self._message_id = 0
        self._queued_id = 0
        self._call_id = 0
        self._touched: set[str] = set()

    # -- clock and ids ------------------------------------------------------------------------

    def advance_clock(self, now: float) -> float:
        """Move the clock to ``now`` unless it is already later; the clock's time."""
        if now > self.now:
            self.now = now
        return self.now

    def timestamp(self, now: float) -> str:
        """RFC 3339 wall-clock text for monotonic ``now``."""
        return rfc3339(now + self.config.wall_clock_offset)

    def new_uuid(self) -> str:
        return new_uuid(self.rng)

    def next_message_id(self) -> int:
        """Message ids are global: with ``message_id_gaps`` other chats' rows leave gaps."""
        step = self.rng.randint(1, 3) if self.config.message_id_gaps else 1
        self._message_id += step
        return self._message_id

    def next_queued_id(self) -> int:
        self._queued_id += 1
        return self._queued_id

    def new_call_id(self) -> str:
        self._call_id += 1
        return f"call_{self._call_id:04d}_{self.rng.getrandbits(48):012x}"

    # -- transactions -------------------------------------------------------------------------

    def begin(self, chat: FakeChat, t: float) -> None:
        """Start a transaction on ``chat``: a new snapshot version."""
        chat.snapshot_version += 1
        chat.updated_at = self.timestamp(t)
        self._touched.add(chat.id)

    def touch_family(self, chat: FakeChat) -> None:
        """Count ``chat``, its root chat and its sub-agent chats as changed, whether or not a
        transaction follows (a request that may change any of them)."""
        self._touched.add(chat.id)
        if chat.parent_chat_id is not None:
            self._touched.add(chat.parent_chat_id)
        self._touched.update(c.id for c in self.children(chat))

    def drain_touched(self) -> set[str]:
        """The ids of the chats changed (or counted as changed) since the last call."""
        touched, self._touched = self._touched, set()
        return touched

    def history_changed(self, chat: FakeChat) -> None:
        """History changes in this transaction: a new history version and episode."""
        if chat.history_version != chat.snapshot_version:
            chat.history_version = chat.snapshot_version
            self.close_episode(chat)
            chat.generation_attempt = 0

    def queue_changed(self, chat: FakeChat) -> None:
        chat.queue_version = chat.snapshot_version

    def close_episode(self, chat: FakeChat) -> None:
        episode = chat.episodes.get((chat.history_version, chat.generation_attempt))
        if episode is not None:
            episode.closed = True
        # Closed episodes stay relayable for sockets still draining them; keep a few.
        while len(chat.episodes) > 4:
            del chat.episodes[next(iter(chat.episodes))]

    def insert(
        self, chat: FakeChat, t: float, role: str, content: list[dict[str, Any]], **fields: Any
    ) -> FakeMessage:
        """Append a message to history (in the current transaction)."""
        self.history_changed(chat)
        message = FakeMessage(
            id=self.next_message_id(),
            chat_id=chat.id,
            role=role,
            content=content,
            created_at=self.timestamp(t),
            changed_at=chat.history_version,
            **fields,
        )
        chat.messages.append(message)
        return message

    def cancel_pending(self, chat: FakeChat, t: float, reason: str) -> list[FakeMessage]:
        """Close every outstanding tool call with a synthetic cancellation result (the rule of
        server-behaviour 2.2: before any user message, and on interrupt or deadline)."""
        out = []
        for call in chat.pending_tool_calls():
            result = {
                "type": "tool-result",
                "tool_call_id": call.get("tool_call_id", ""),
                "tool_name": call.get("tool_name", ""),
                "result": reason,
                "is_error": True,
                "created_at": self.timestamp(t),
            }
            out.append(self.insert(chat, t, "tool", [result]))
        chat.requires_action_deadline = None
        return out

    def promote_head(self, chat: FakeChat, t: float) -> FakeMessage:
        """Move the queue head into history as a brand-new user message (server-behaviour
        2.5), stamped with its queued id (D8; omitted on the wire when ``stamp_promotions`` is
        off)."""
        head = chat.queue.pop(0)
        self.queue_changed(chat)
        # The chat's model and effort become those the message was queued with.
        chat.last_model_config_id = head.model_config_id or chat.last_model_config_id
        chat.last_reasoning_effort = head.reasoning_effort or chat.last_reasoning_effort
        return self.insert(
            chat,
            t,
            "user",
            [dict(p) for p in head.content],
            created_by=head.created_by,
            model_config_id=head.model_config_id,
            queued_message_id=head.id,
        )

    def check_files_free(self, chat: FakeChat | None, content: list[dict[str, Any]]) -> None:
        """A file belongs to one chat: a message of another chat that references it gets the
        400 of an unavailable attachment, before anything changes (server-behaviour 1.2)."""
        for part in content:
            if part["type"] != "file":
                continue
            if any(
                part["file_id"] in other.file_ids
                for other in self.chats.values()
                if other is not chat
            ):
                raise FakeApiError(
                    400,
                    "Chat attachment unavailable.",
                    detail="An attachment is no longer available. Upload it again and retry.",
                )

    def link_files(self, chat: FakeChat, content: list[dict[str, Any]]) -> None:
        """Attach the files a message references to the chat; a chat keeps the most recent
        ``MAX_ATTACHMENTS_PER_CHAT`` (server-behaviour 1.2)."""
        for part in content:
            if part["type"] == "file" and part["file_id"] not in chat.file_ids:
                chat.file_ids.append(part["file_id"])
        del chat.file_ids[: max(0, len(chat.file_ids) - MAX_ATTACHMENTS_PER_CHAT)]

    # -- JSON ---------------------------------------------------------------------------------

    def message_json(self, message: FakeMessage) -> dict[str, Any]:
        return message.to_json(
            zero_value_keys=self.config.zero_value_keys, stamp=self.config.stamp_promotions
        )

    def queued_json(self, queued: FakeQueuedMessage) -> dict[str, Any]:
        return queued.to_json(zero_value_keys=self.config.zero_value_keys)

    def chat_json(self, chat: FakeChat, *, light: bool = False) -> dict[str, Any]:
        """The ``Chat`` object, a root chat's sub-agent chats in its ``children``."""
        files = [self.files[f] for f in chat.file_ids if f in self.files]
        out = chat.to_json(files=files, light=light)
        out["children"] = [self.chat_json(c, light=light) for c in self.children(chat)]
        return out

    def children(self, chat: FakeChat) -> list[FakeChat]:
        """The sub-agent chats of ``chat``, newest first as the server lists them (none for a
        sub-agent chat)."""
        return [c for c in reversed(self.chats.values()) if c.parent_chat_id == chat.id]
