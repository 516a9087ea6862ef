"""Chat messages, their usage, chat errors and queued messages (wire 3.4-3.8)."""

from __future__ import annotations

from typing import Any

import attrs

from .._constants import DEFAULT_CHAT_ERROR_MESSAGE
from .._errors import CoderChatError
from .fields import get_bool, get_list, get_str, opt_int, opt_str, req_dict, req_int
from .ids import get_resource_id, message_id
from .message_parts import ChatMessagePart, parse_parts

__all__ = [
    "USAGE_SUM_FIELDS",
    "ChatError",
    "ChatMessage",
    "ChatMessageUsage",
    "ChatQueuedMessage",
]

#: Usage counters that are summed across a segment's assistant messages (F.1).
USAGE_SUM_FIELDS = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "reasoning_tokens",
        "cache_creation_tokens",
        "cache_read_tokens",
        "total_cost_micros",
        "total_runtime_ms",
    }
)


@attrs.frozen(kw_only=True)
class ChatMessageUsage:
    """Usage of one server-side model step (wire 3.7). ``input_tokens`` counts uncached
    prompt tokens only. ``raw`` is the wire object as received, unknown fields included."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_creation_tokens: int | None = None
    cache_read_tokens: int | None = None
    context_limit: int | None = None
    total_cost_micros: int | None = None
    total_runtime_ms: int | None = None
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Any) -> ChatMessageUsage:
        obj = req_dict(obj, "usage")

        def num(key: str) -> int | None:
            value = obj.get(key)
            if type(value) is int:
                return value
            if type(value) is float and value.is_integer():
                return int(value)
            return None  # non-numeric values stay in ``raw`` (F.1: newest wins)

        return cls(
            input_tokens=num("input_tokens"),
            output_tokens=num("output_tokens"),
            total_tokens=num("total_tokens"),
            reasoning_tokens=num("reasoning_tokens"),
            cache_creation_tokens=num("cache_creation_tokens"),
            cache_read_tokens=num("cache_read_tokens"),
            context_limit=num("context_limit"),
            total_cost_micros=num("total_cost_micros"),
            total_runtime_ms=num("total_runtime_ms"),
            raw=obj,
        )

    def to_json(self) -> dict[str, Any]:
        if self.raw:
            return dict(self.raw)
        return {
            k: getattr(self, k)
            for k in (
                "input_tokens",
                "output_tokens",
                "total_tokens",
                "reasoning_tokens",
                "cache_creation_tokens",
                "cache_read_tokens",
                "context_limit",
                "total_cost_micros",
                "total_runtime_ms",
            )
            if getattr(self, k) is not None
        }


@attrs.frozen(kw_only=True)
class ChatError:
    """The wire ``ChatError`` (``last_error``, the stream ``error`` event; wire 3.8)."""

    message: str = DEFAULT_CHAT_ERROR_MESSAGE
    detail: str | None = None
    kind: str | None = None
    provider: str | None = None
    retryable: bool = False
    status_code: int | None = None

    @classmethod
    def from_json(cls, obj: Any) -> ChatError:
        w = "chat error"
        obj = req_dict(obj, w)
        return cls(
            message=get_str(obj, "message", w) or DEFAULT_CHAT_ERROR_MESSAGE,
            detail=opt_str(obj, "detail", w) or None,
            kind=opt_str(obj, "kind", w) or None,
            provider=opt_str(obj, "provider", w) or None,
            retryable=get_bool(obj, "retryable", w),
            status_code=opt_int(obj, "status_code", w),
        )

    @classmethod
    def default(cls) -> ChatError:
        """What the server reports when no stored error exists (D2)."""
        return cls(message=DEFAULT_CHAT_ERROR_MESSAGE, kind="generic", retryable=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message}
        if self.detail is not None:
            out["detail"] = self.detail
        if self.kind is not None:
            out["kind"] = self.kind
        if self.provider is not None:
            out["provider"] = self.provider
        out["retryable"] = self.retryable
        if self.status_code is not None:
            out["status_code"] = self.status_code
        return out

    def to_exception(self, *, chat_id: str | None = None) -> CoderChatError:
        """The ``CoderChatError`` a user sees for this payload."""
        return CoderChatError(
            self.message,
            detail=self.detail,
            kind=self.kind,
            provider=self.provider,
            retryable=self.retryable,
            status_code=self.status_code,
            chat_id=chat_id,
        )


@attrs.frozen(kw_only=True)
class ChatMessage:
    """A committed chat message (wire 3.4). Message ids are monotonic across the whole
    deployment; a revision re-sends the full snapshot under the same id.

    ``queued_message_id`` names the queue entry this user message was promoted from, on
    servers that stamp promotions (D8). ``raw`` is the wire object as received. ``id`` and
    ``chat_id`` are checked as identifiers (wire 3.9).
    """

    id: int
    role: str
    content: tuple[ChatMessagePart, ...] = ()
    chat_id: str = ""
    created_at: str = ""
    created_by: str | None = None
    model_config_id: str | None = None
    usage: ChatMessageUsage | None = None
    queued_message_id: int | None = None
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Any) -> ChatMessage:
        w = "chat message"
        obj = req_dict(obj, w)
        msg_id = obj.get("id")
        if type(msg_id) is not int:
            msg_id = req_int(obj, "id", w)
        usage = obj.get("usage")
        queued = obj.get("queued_message_id")
        return cls(
            id=message_id(msg_id, w, "id"),
            role=get_str(obj, "role", w),
            content=parse_parts(obj, "content", w),
            chat_id=get_resource_id(obj, "chat_id", w),
            created_at=get_str(obj, "created_at", w),
            created_by=opt_str(obj, "created_by", w),
            model_config_id=opt_str(obj, "model_config_id", w),
            usage=ChatMessageUsage.from_json(usage) if usage is not None else None,
            # D8: an int, or absent; anything else is ignored rather than fatal.
            queued_message_id=queued if type(queued) is int else None,
            raw=obj,
        )

    def to_json(self) -> dict[str, Any]:
        if self.raw:
            return dict(self.raw)
        out: dict[str, Any] = {
            "id": self.id,
            "chat_id": self.chat_id,
            "created_at": self.created_at,
            "role": self.role,
            "content": [p.to_json() for p in self.content],
        }
        if self.created_by is not None:
            out["created_by"] = self.created_by
        if self.model_config_id is not None:
            out["model_config_id"] = self.model_config_id
        if self.usage is not None:
            out["usage"] = self.usage.to_json()
        if self.queued_message_id is not None:
            out["queued_message_id"] = self.queued_message_id
        return out


@attrs.frozen(kw_only=True)
class ChatQueuedMessage:
    """An entry of a chat's queue; ``id`` is in the queue's own id space (wire 3.6).

    ``content`` is ``None`` when the key was absent or ``null`` (match any user message, D8);
    ``raw_content`` keeps the wire list for canonical comparison. ``id`` and ``chat_id`` are
    checked as identifiers (wire 3.9). ``editing_since`` is the
    RFC 3339 time someone began editing the entry, ``None`` when nobody is: a chat whose run
    ends with its queue head under edit stops ``paused`` instead of promoting it (D35).
    ``reasoning_effort`` is the entry's own effort override, when it has one.
    """

    id: int
    chat_id: str = ""
    content: tuple[ChatMessagePart, ...] | None = None
    raw_content: list[Any] | None = attrs.field(default=None, eq=False, repr=False)
    created_at: str = ""
    model_config_id: str | None = None
    reasoning_effort: str | None = None
    editing_since: str | None = None

    @property
    def editing(self) -> bool:
        """Whether the entry is under edit (``editing_since`` is set; D35)."""
        return self.editing_since is not None

    @classmethod
    def from_json(cls, obj: Any) -> ChatQueuedMessage:
        w = "queued message"
        obj = req_dict(obj, w)
        content = get_list(obj, "content", w)
        return cls(
            id=message_id(req_int(obj, "id", w), w, "id"),
            chat_id=get_resource_id(obj, "chat_id", w),
            content=parse_parts(obj, "content", w) if content is not None else None,
            raw_content=content,
            created_at=get_str(obj, "created_at", w),
            model_config_id=opt_str(obj, "model_config_id", w),
            reasoning_effort=opt_str(obj, "reasoning_effort", w),
            editing_since=opt_str(obj, "editing_since", w),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "chat_id": self.chat_id}
        if self.raw_content is not None:
            out["content"] = list(self.raw_content)
        elif self.content is not None:
            out["content"] = [p.to_json() for p in self.content]
        out["created_at"] = self.created_at
        if self.model_config_id is not None:
            out["model_config_id"] = self.model_config_id
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.editing_since is not None:
            out["editing_since"] = self.editing_since
        return out


def parse_queue(obj: dict[str, Any], key: str, where: str) -> tuple[ChatQueuedMessage, ...]:
    items = get_list(obj, key, where)
    if not items:
        return ()
    return tuple(ChatQueuedMessage.from_json(item) for item in items)


def parse_messages(obj: dict[str, Any], key: str, where: str) -> tuple[ChatMessage, ...]:
    items = get_list(obj, key, where)
    if not items:
        return ()
    return tuple(ChatMessage.from_json(item) for item in items)
