"""The fake server's rows: chats, messages, queued messages, files and model configs, and
their JSON as the real server writes it (server-behaviour 0, 4; wire 3).

Rows are mutable records kept by the model's ``ChatStore``; read them freely in tests, change
them only through requests to the model. Each chat carries the version counters the real
``chats`` row has (server-behaviour 0): ``snapshot_version`` (+1 per transition),
``history_version`` (set to the snapshot version when history changes), ``queue_version``,
``retry_state_version`` and ``generation_attempt`` (reset to 0 when history changes, +1 before
each model call).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .._json import js_stringify
from .._wire.message_parts import PART_ZERO_VALUES

__all__ = [
    "PART_KEY_ORDER",
    "ZERO_VALUE_KEYS",
    "Episode",
    "FakeChat",
    "FakeFile",
    "FakeMessage",
    "FakeModelSpec",
    "FakeQueuedMessage",
    "part_json",
]

#: Go's ``ChatMessagePart`` field order, used to lay out part JSON like the server does.
PART_KEY_ORDER: Final = (
    "type",
    "text",
    "signature",
    "tool_call_id",
    "tool_name",
    "mcp_server_config_id",
    "args",
    "args_delta",
    "parsed_commands",
    "result",
    "result_delta",
    "result_reset",
    "is_error",
    "is_media",
    "provider_executed",
    "hook_rewritten",
    "created_at",
    "completed_at",
    "source_id",
    "url",
    "title",
    "media_type",
    "name",
    "file_id",
    "data",
    "file_name",
    "start_line",
    "end_line",
    "content",
    "context_file_path",
    "context_file_truncated",
    "context_file_agent_id",
    "skill_name",
    "skill_description",
)

#: Fields without ``omitempty`` in Go: present on every part, whatever its type
#: (server-behaviour 4.2, wire 3.5).
ZERO_VALUE_KEYS: Final[Mapping[str, Any]] = {"text": "", **PART_ZERO_VALUES}

_ORDER_INDEX: Final = {key: n for n, key in enumerate(PART_KEY_ORDER)}


def part_json(part: Mapping[str, Any], *, zero_value_keys: bool) -> dict[str, Any]:
    """A part as the server serialises it: Go field order, and with ``zero_value_keys`` the
    keys Go never omits (``"text": ""``, ``"url": ""`` ...)."""
    merged: dict[str, Any] = dict(ZERO_VALUE_KEYS) if zero_value_keys else {}
    merged.update(part)
    return dict(sorted(merged.items(), key=lambda kv: _ORDER_INDEX.get(kv[0], len(_ORDER_INDEX))))


@attrs.define(kw_only=True)
class FakeMessage:
    """A ``chat_messages`` row. ``changed_at`` is the history version of its last insert,
    revision or soft delete; ``deleted`` rows are invisible but make the stream send
    ``history_reset`` (server-behaviour 3.3)."""

    id: int
    chat_id: str
    role: str
    content: list[dict[str, Any]]
    created_at: str
    created_by: str | None = None
    model_config_id: str | None = None
    usage: dict[str, int] | None = None
    queued_message_id: int | None = None
    changed_at: int = 0
    deleted: bool = False

    def to_json(self, *, zero_value_keys: bool, stamp: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "chat_id": self.chat_id}
        if self.created_by is not None:
            out["created_by"] = self.created_by
        if self.model_config_id is not None:
            out["model_config_id"] = self.model_config_id
        out["created_at"] = self.created_at
        out["role"] = self.role
        out["content"] = [part_json(p, zero_value_keys=zero_value_keys) for p in self.content]
        if self.usage:
            out["usage"] = dict(self.usage)
        if stamp and self.queued_message_id is not None:
            out["queued_message_id"] = self.queued_message_id
        return out


@attrs.define(kw_only=True)
class FakeQueuedMessage:
    """A ``chat_queued_messages`` row; ``id`` is from the queue's own sequence."""

    id: int
    chat_id: str
    content: list[dict[str, Any]]
    created_at: str
    created_by: str | None = None
    model_config_id: str | None = None
    reasoning_effort: str | None = None
    #: When the owner began editing the entry (RFC 3339), ``None`` when nobody is: a run that
    #: ends with the head under edit pauses the chat (server-behaviour 2.6, D35).
    editing_since: str | None = None

    def to_json(self, *, zero_value_keys: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "chat_id": self.chat_id}
        if self.model_config_id is not None:
            out["model_config_id"] = self.model_config_id
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        out["content"] = [part_json(p, zero_value_keys=zero_value_keys) for p in self.content]
        out["created_at"] = self.created_at
        if self.editing_since is not None:
            out["editing_since"] = self.editing_since
        return out


@attrs.define(kw_only=True)
class FakeFile:
    """An uploaded chat file."""

    id: str
    organization_id: str
    owner_id: str
    name: str
    media_type: str
    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    created_at: str

    def metadata_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner_id": self.owner_id,
            "organization_id": self.organization_id,
            "name": self.name,
            "mime_type": self.media_type,
            "size_bytes": len(self.data),
            "created_at": self.created_at,
        }


@attrs.frozen(kw_only=True)
class FakeModelSpec:
    """A model configuration the fake serves (``ChatModel``, wire 8)."""

    model: str
    display_name: str
    provider: str = "anthropic"
    enabled: bool = True
    is_default: bool = False
    context_limit: int = 200_000
    compression_threshold: int = 70
    reasoning_efforts: tuple[str, ...] = ("low", "medium", "high")


@attrs.define(kw_only=True)
class Episode:
    """The message-part buffer of one ``(history_version, generation_attempt)`` episode;
    parts are numbered from ``seq`` 1 (server-behaviour 3.3)."""

    history_version: int
    generation_attempt: int
    parts: list[tuple[str, dict[str, Any]]] = attrs.Factory(list)
    size: int = 0
    closed: bool = False


@attrs.define(kw_only=True)
class FakeChat:
    """A ``chats`` row plus its messages, queue and execution state (server-behaviour 2)."""

    id: str
    organization_id: str
    owner_id: str
    owner_username: str
    title: str
    status: str
    created_at: str
    updated_at: str
    last_model_config_id: str
    # who set the title ("fallback": taken from the first prompt; "user": named by the
    # user) and when; ``None`` keeps the creation time
    title_source: str = "fallback"
    title_updated_at: str | None = None
    last_reasoning_effort: str | None = None
    archived: bool = False
    workspace_id: str | None = None
    mcp_server_ids: list[str] = attrs.Factory(list)
    labels: dict[str, str] = attrs.Factory(dict)
    plan_mode: str | None = None
    client_type: str = "api"
    system_prompt: str | None = attrs.field(default=None, repr=False)
    dynamic_tools: list[dict[str, Any]] = attrs.Factory(list)
    last_error: dict[str, Any] | None = None
    pin_order: int = 0
    # the owner's read marker: assistant messages above it are unread (``has_unread``)
    last_read_message_id: int = 0
    parent_chat_id: str | None = None
    file_ids: list[str] = attrs.Factory(list)
    # the model context (compact and clear): the last message before it, and the summary
    # that stands in for what it replaces (model-only, never returned)
    context_floor: int = 0
    context_summary: str | None = attrs.field(default=None, repr=False)
    messages: list[FakeMessage] = attrs.Factory(list)
    queue: list[FakeQueuedMessage] = attrs.Factory(list)
    # versions (server-behaviour 0)
    snapshot_version: int = 0
    history_version: int = 0
    queue_version: int = 0
    retry_state_version: int = 0
    generation_attempt: int = 0
    retry_state: dict[str, Any] | None = None
    # execution
    edited: bool = False
    queued_for_capacity: bool = False
    requires_action_deadline: float | None = None
    interrupt_at: float | None = None
    worker_active: bool = False
    turns: int = 0
    episodes: dict[tuple[int, int], Episode] = attrs.Factory(dict)

    def visible_messages(self) -> list[FakeMessage]:
        return [m for m in self.messages if not m.deleted]

    def mark_read(self) -> None:
        """Move the owner's read marker to the latest assistant message, as the server does
        when the owner opens or leaves the chat's stream or marks the chat read."""
        self.last_read_message_id = max(
            (m.id for m in self.visible_messages() if m.role == "assistant"), default=0
        )

    def has_unread(self) -> bool:
        """Whether an assistant message came after the owner's read marker."""
        return any(
            m.role == "assistant" and m.id > self.last_read_message_id
            for m in self.visible_messages()
        )

    def current_episode(self) -> Episode | None:
        """The live episode a (re)connecting socket replays, if a worker is generating."""
        if not self.worker_active or self.generation_attempt <= 0:
            return None
        return self.episodes.get((self.history_version, self.generation_attempt))

    def pending_tool_calls(self) -> list[dict[str, Any]]:
        """Tool calls in history without a result, in history order: the pending dynamic
        calls of a ``requires_action`` pause (server-behaviour 3.3 item 5)."""
        answered: set[str] = set()
        calls: list[dict[str, Any]] = []
        for message in self.visible_messages():
            for part in message.content:
                if part.get("type") == "tool-result":
                    answered.add(str(part.get("tool_call_id")))
                elif part.get("type") == "tool-call" and not part.get("provider_executed"):
                    calls.append(part)
        return [c for c in calls if str(c.get("tool_call_id")) not in answered]

    def action_calls(self) -> list[dict[str, str]]:
        """The pending calls as ``action_required`` lists them, ``args`` as JSON text."""
        return [
            {
                "tool_call_id": str(c.get("tool_call_id", "")),
                "tool_name": str(c.get("tool_name", "")),
                "args": js_stringify(c.get("args", {})),
            }
            for c in self.pending_tool_calls()
        ]

    def to_json(
        self, *, files: list[FakeFile] | None = None, light: bool = False
    ) -> dict[str, Any]:
        """The ``Chat`` object (server-behaviour 4.4). ``light`` is the watch stream's
        variant, without ``files`` (server-behaviour 6)."""
        out: dict[str, Any] = {
            "id": self.id,
            "organization_id": self.organization_id,
            "owner_id": self.owner_id,
            "owner_username": self.owner_username,
            "owner_name": self.owner_username,
        }
        if self.workspace_id is not None:
            out["workspace_id"] = self.workspace_id
        # A root chat is its own root (codersdk's conversion); a sub-agent chat's root is its
        # parent, the only depth the fake spawns.
        if self.parent_chat_id is not None:
            out["parent_chat_id"] = self.parent_chat_id
            out["root_chat_id"] = self.parent_chat_id
        else:
            out["root_chat_id"] = self.id
        out["last_model_config_id"] = self.last_model_config_id
        if self.last_reasoning_effort is not None:
            out["last_reasoning_effort"] = self.last_reasoning_effort
        out["title"] = self.title
        out["title_source"] = self.title_source
        out["title_updated_at"] = self.title_updated_at or self.created_at
        out["status"] = self.status
        if self.plan_mode:
            out["plan_mode"] = self.plan_mode
        if self.last_error is not None:
            out["last_error"] = dict(self.last_error)
        out["last_turn_summary"] = None
        out["summary"] = None
        out["created_at"] = self.created_at
        out["updated_at"] = self.updated_at
        out["archived"] = self.archived
        out["shared"] = False
        out["pin_order"] = self.pin_order
        out["mcp_server_ids"] = list(self.mcp_server_ids)
        out["labels"] = dict(self.labels)
        if not light:
            out["files"] = [f.metadata_json() for f in files or []]
        out["has_unread"] = self.has_unread()
        if self.queued_for_capacity:
            out["queued_for_capacity"] = True
        out["client_type"] = self.client_type
        out["children"] = []
        return out
