"""Chats, REST request and response bodies, model configs and watch events
(wire 2.1-2.2, 3.2, 3.6, 6, 8)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from .._errors import CoderProtocolError
from .fields import get_bool, get_dict, get_int, get_list, get_str, opt_str, req_dict, req_str
from .ids import get_resource_id, opt_resource_id, req_resource_id, tool_call_id
from .messages import ChatError, ChatMessage, ChatQueuedMessage, parse_messages, parse_queue

__all__ = [
    "ActionToolCall",
    "Chat",
    "ChatInputPart",
    "ChatMessagesResponse",
    "ChatModelConfig",
    "ChatModelProvider",
    "ChatWatchEvent",
    "CreateChatMessageRequest",
    "CreateChatMessageResponse",
    "CreateChatRequest",
    "DynamicTool",
    "FileInput",
    "FileReferenceInput",
    "ModelCatalog",
    "TextInput",
    "ToolResultInput",
    "input_part_to_json",
    "parse_chat_list",
    "tool_results_body",
]


def _str_tuple(obj: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    items = get_list(obj, key, where)
    if not items:
        return ()
    return tuple(item for item in items if type(item) is str)


@attrs.frozen(kw_only=True)
class Chat:
    """A chat (wire 3.2). ``status`` is an open set of strings (D1). ``labels`` are the
    chat's key/value labels, ``pin_order`` its place among pinned chats (0: not pinned), and
    ``children`` the sub-agent chats of a root chat (always empty for a sub-agent chat).
    ``has_unread`` is true while an answer lies past the owner's read marker (the owner's
    open stream moves the marker; ``update_chat(read=...)`` sets it).
    Fields the server adds beyond these are kept in ``raw``. The ids are checked as
    identifiers (wire 3.9): an invalid one is a ``CoderProtocolError``."""

    id: str
    organization_id: str = ""
    owner_id: str = ""
    owner_username: str | None = None
    workspace_id: str | None = None
    agent_id: str | None = None
    parent_chat_id: str | None = None
    root_chat_id: str | None = None
    last_model_config_id: str | None = None
    last_reasoning_effort: str | None = None
    title: str = ""
    status: str = ""
    plan_mode: str | None = None
    last_error: ChatError | None = None
    created_at: str = ""
    updated_at: str = ""
    archived: bool = False
    mcp_server_ids: tuple[str, ...] = ()
    client_type: str | None = None
    queued_for_capacity: bool = False
    labels: dict[str, str] = attrs.field(factory=dict, hash=False)
    pin_order: int = 0
    has_unread: bool = False
    children: tuple[Chat, ...] = ()
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Any) -> Chat:
        w = "chat"
        obj = req_dict(obj, w)
        last_error = get_dict(obj, "last_error", w)
        labels = get_dict(obj, "labels", w) or {}
        return cls(
            id=req_resource_id(obj, "id", w),
            organization_id=get_resource_id(obj, "organization_id", w),
            owner_id=get_resource_id(obj, "owner_id", w),
            owner_username=opt_str(obj, "owner_username", w),
            workspace_id=opt_resource_id(obj, "workspace_id", w),
            agent_id=opt_resource_id(obj, "agent_id", w),
            parent_chat_id=opt_resource_id(obj, "parent_chat_id", w),
            root_chat_id=opt_resource_id(obj, "root_chat_id", w),
            last_model_config_id=opt_str(obj, "last_model_config_id", w) or None,
            last_reasoning_effort=opt_str(obj, "last_reasoning_effort", w) or None,
            title=get_str(obj, "title", w),
            status=get_str(obj, "status", w),
            plan_mode=opt_str(obj, "plan_mode", w),
            last_error=ChatError.from_json(last_error) if last_error is not None else None,
            created_at=get_str(obj, "created_at", w),
            updated_at=get_str(obj, "updated_at", w),
            archived=get_bool(obj, "archived", w),
            mcp_server_ids=_str_tuple(obj, "mcp_server_ids", w),
            client_type=opt_str(obj, "client_type", w),
            queued_for_capacity=get_bool(obj, "queued_for_capacity", w),
            labels={k: v for k, v in labels.items() if type(v) is str},
            pin_order=get_int(obj, "pin_order", w),
            has_unread=get_bool(obj, "has_unread", w),
            children=tuple(Chat.from_json(c) for c in get_list(obj, "children", w) or ()),
            raw=obj,
        )

    def to_json(self) -> dict[str, Any]:
        if self.raw:
            return dict(self.raw)
        out: dict[str, Any] = {
            "id": self.id,
            "organization_id": self.organization_id,
            "owner_id": self.owner_id,
            "title": self.title,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "archived": self.archived,
            "mcp_server_ids": list(self.mcp_server_ids),
        }
        for key in (
            "owner_username",
            "workspace_id",
            "agent_id",
            "parent_chat_id",
            "root_chat_id",
            "last_model_config_id",
            "last_reasoning_effort",
            "plan_mode",
            "client_type",
        ):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.last_error is not None:
            out["last_error"] = self.last_error.to_json()
        if self.queued_for_capacity:
            out["queued_for_capacity"] = True
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.pin_order:
            out["pin_order"] = self.pin_order
        if self.has_unread:
            out["has_unread"] = True
        if self.children:
            out["children"] = [child.to_json() for child in self.children]
        return out


def parse_chat_list(obj: Any) -> tuple[Chat, ...]:
    """``GET {P}``: a JSON array of chats."""
    if type(obj) is not list:
        raise CoderProtocolError("malformed chat list: expected a JSON array")
    return tuple(Chat.from_json(item) for item in obj)


# -- input parts and requests (client -> server) --------------------------------------------


@attrs.frozen
class TextInput:
    """``{"type": "text", "text": ...}`` in a request."""

    text: str


@attrs.frozen
class FileInput:
    """``{"type": "file", "file_id": ...}``: a reference to an uploaded file."""

    file_id: str


@attrs.frozen(kw_only=True)
class FileReferenceInput:
    """A code excerpt sent as input."""

    file_name: str
    start_line: int
    end_line: int
    content: str


ChatInputPart: TypeAlias = TextInput | FileInput | FileReferenceInput


def input_part_to_json(part: ChatInputPart) -> dict[str, Any]:
    if isinstance(part, TextInput):
        return {"type": "text", "text": part.text}
    if isinstance(part, FileInput):
        return {"type": "file", "file_id": part.file_id}
    return {
        "type": "file-reference",
        "file_name": part.file_name,
        "start_line": part.start_line,
        "end_line": part.end_line,
        "content": part.content,
    }


@attrs.frozen(kw_only=True)
class DynamicTool:
    """A client tool registered at chat creation (``unsafe_dynamic_tools``)."""

    name: str
    input_schema: Mapping[str, Any]
    description: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["input_schema"] = dict(self.input_schema)
        return out


@attrs.frozen(kw_only=True)
class CreateChatRequest:
    """``POST {P}`` (wire 2.1). Optional fields are sent only when set (H.1)."""

    organization_id: str
    content: tuple[ChatInputPart, ...]
    client_type: str = "api"
    system_prompt: str | None = None
    unsafe_dynamic_tools: tuple[DynamicTool, ...] = ()
    model_config_id: str | None = None
    reasoning_effort: str | None = None
    workspace_id: str | None = None
    mcp_server_ids: tuple[str, ...] = ()
    plan_mode: str | None = None
    labels: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "organization_id": self.organization_id,
            "content": [input_part_to_json(p) for p in self.content],
            "client_type": self.client_type,
        }
        if self.system_prompt:
            out["system_prompt"] = self.system_prompt
        if self.unsafe_dynamic_tools:
            out["unsafe_dynamic_tools"] = [t.to_json() for t in self.unsafe_dynamic_tools]
        if self.model_config_id:
            out["model_config_id"] = self.model_config_id
        if self.reasoning_effort:
            out["reasoning_effort"] = self.reasoning_effort
        if self.workspace_id:
            out["workspace_id"] = self.workspace_id
        if self.mcp_server_ids:
            out["mcp_server_ids"] = list(self.mcp_server_ids)
        if self.plan_mode:
            out["plan_mode"] = self.plan_mode
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@attrs.frozen(kw_only=True)
class CreateChatMessageRequest:
    """``POST {P}/{chat}/messages`` (wire 2.2). ``busy_behavior`` is ``"queue"`` or
    ``"interrupt"``; omitted means the server default (queue)."""

    content: tuple[ChatInputPart, ...]
    model_config_id: str | None = None
    reasoning_effort: str | None = None
    busy_behavior: str | None = None
    mcp_server_ids: tuple[str, ...] | None = None
    plan_mode: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"content": [input_part_to_json(p) for p in self.content]}
        if self.model_config_id:
            out["model_config_id"] = self.model_config_id
        if self.reasoning_effort:
            out["reasoning_effort"] = self.reasoning_effort
        if self.busy_behavior:
            out["busy_behavior"] = self.busy_behavior
        if self.mcp_server_ids is not None:
            out["mcp_server_ids"] = list(self.mcp_server_ids)
        if self.plan_mode is not None:
            out["plan_mode"] = self.plan_mode
        return out


@attrs.frozen(kw_only=True)
class ToolResultInput:
    """One client tool result for ``POST {P}/{chat}/tool-results``; ``output`` is any JSON."""

    tool_call_id: str
    output: Any
    is_error: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "output": self.output, "is_error": self.is_error}


def tool_results_body(
    results: tuple[ToolResultInput, ...] | list[ToolResultInput],
) -> dict[str, Any]:
    return {"results": [r.to_json() for r in results]}


# -- responses ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CreateChatMessageResponse:
    """The answer to a send (wire 3.6): ``message`` when committed at once, ``queued_message``
    when queued; ``messages`` lists every user-visible message the send inserted."""

    message: ChatMessage | None = None
    messages: tuple[ChatMessage, ...] = ()
    queued_message: ChatQueuedMessage | None = None
    queued: bool = False
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: Any) -> CreateChatMessageResponse:
        w = "create-message response"
        obj = req_dict(obj, w)
        message = get_dict(obj, "message", w)
        queued_message = get_dict(obj, "queued_message", w)
        return cls(
            message=ChatMessage.from_json(message) if message is not None else None,
            messages=parse_messages(obj, "messages", w),
            queued_message=(
                ChatQueuedMessage.from_json(queued_message) if queued_message is not None else None
            ),
            queued=get_bool(obj, "queued", w),
            warnings=_str_tuple(obj, "warnings", w),
        )


@attrs.frozen(kw_only=True)
class ChatMessagesResponse:
    """``GET {P}/{chat}/messages`` (wire 3.6, server-behaviour 7)."""

    messages: tuple[ChatMessage, ...] = ()
    queued_messages: tuple[ChatQueuedMessage, ...] = ()
    has_more: bool = False

    @classmethod
    def from_json(cls, obj: Any) -> ChatMessagesResponse:
        w = "messages response"
        obj = req_dict(obj, w)
        return cls(
            messages=parse_messages(obj, "messages", w),
            queued_messages=parse_queue(obj, "queued_messages", w),
            has_more=get_bool(obj, "has_more", w),
        )


# -- model configs (wire 8) -----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ChatModelProvider:
    """A provider descriptor from the organization model route."""

    id: str
    type: str | None = None
    display_name: str | None = None
    enabled: bool | None = None
    available: bool | None = None
    unavailable_reason: str | None = None
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Any) -> ChatModelProvider:
        w = "model provider"
        obj = req_dict(obj, w)
        return cls(
            id=get_str(obj, "id", w),
            type=obj["type"] if type(obj.get("type")) is str else None,
            display_name=obj["display_name"] if type(obj.get("display_name")) is str else None,
            enabled=obj["enabled"] if type(obj.get("enabled")) is bool else None,
            available=obj["available"] if type(obj.get("available")) is bool else None,
            unavailable_reason=(
                obj["unavailable_reason"] if type(obj.get("unavailable_reason")) is str else None
            ),
            raw=obj,
        )


def _opt(obj: dict[str, Any], key: str, kind: type) -> Any:
    value = obj.get(key)
    return value if type(value) is kind else None


@attrs.frozen(kw_only=True)
class ChatModelConfig:
    """A model configuration. ``provider`` is the provider's ``type`` joined in from the
    catalog (or the legacy entry's own ``provider`` string); fields that are missing or not of
    the expected type are ``None`` (wire 8)."""

    id: str
    model: str | None = None
    display_name: str | None = None
    provider: str | None = None
    organization_id: str | None = None
    ai_provider_id: str | None = None
    enabled: bool | None = None
    is_default: bool | None = None
    context_limit: int | None = None
    compression_threshold: int | None = None
    reasoning_efforts: tuple[str, ...] = ()
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Any, *, provider: str | None = None) -> ChatModelConfig:
        obj = req_dict(obj, "model config")
        efforts = obj.get("reasoning_efforts")
        return cls(
            id=obj["id"] if type(obj.get("id")) is str else "",
            model=_opt(obj, "model", str),
            display_name=_opt(obj, "display_name", str),
            provider=provider if provider is not None else _opt(obj, "provider", str),
            organization_id=_opt(obj, "organization_id", str),
            ai_provider_id=_opt(obj, "ai_provider_id", str),
            enabled=_opt(obj, "enabled", bool),
            is_default=_opt(obj, "is_default", bool),
            context_limit=_opt(obj, "context_limit", int),
            compression_threshold=_opt(obj, "compression_threshold", int),
            reasoning_efforts=(
                tuple(e for e in efforts if type(e) is str) if type(efforts) is list else ()
            ),
            raw=obj,
        )


@attrs.frozen(kw_only=True)
class ModelCatalog:
    """The organization model route's answer: models joined with their providers."""

    models: tuple[ChatModelConfig, ...] = ()
    providers: tuple[ChatModelProvider, ...] = ()

    @classmethod
    def from_json(cls, obj: Any) -> ModelCatalog:
        """Normalise ``{models, providers}`` (wire 8): non-object entries are dropped and a
        missing or non-array list is empty."""
        if type(obj) is not dict:
            return cls()
        raw_providers = obj.get("providers")
        raw_models = obj.get("models")
        providers = tuple(
            ChatModelProvider.from_json(p)
            for p in (raw_providers if type(raw_providers) is list else [])
            if type(p) is dict
        )
        by_id = {p.id: p.type for p in providers}
        models = tuple(
            ChatModelConfig.from_json(m, provider=by_id.get(str(m.get("ai_provider_id"))))
            for m in (raw_models if type(raw_models) is list else [])
            if type(m) is dict
        )
        return cls(models=models, providers=providers)

    @classmethod
    def from_legacy_json(cls, obj: Any) -> ModelCatalog:
        """``/api/experimental/chats/model-configs``: a JSON array; anything else is empty."""
        if type(obj) is not list:
            return cls()
        return cls(models=tuple(ChatModelConfig.from_json(m) for m in obj if type(m) is dict))


# -- watch events (wire 6) ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ActionToolCall:
    """A pending client tool call; ``args`` is JSON *text* (wire 4.3). ``tool_call_id`` is
    a non-empty tool-call id (wire 3.9)."""

    tool_call_id: str
    tool_name: str
    args: str

    @classmethod
    def from_json(cls, obj: Any) -> ActionToolCall:
        w = "action_required tool call"
        obj = req_dict(obj, w)
        args = obj.get("args")
        if args is None:
            args = "{}"
        elif type(args) is not str:
            # Not what the server sends; keep it usable as JSON text (D18).
            from .._json import js_stringify

            args = js_stringify(args)
        call_id = req_str(obj, "tool_call_id", w)
        if not call_id:
            raise CoderProtocolError(f"malformed {w}: 'tool_call_id' is empty")
        return cls(
            tool_call_id=tool_call_id(call_id, w),
            tool_name=req_str(obj, "tool_name", w),
            args=args,
        )

    def to_json(self) -> dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "tool_name": self.tool_name, "args": self.args}


@attrs.frozen(kw_only=True)
class ChatWatchEvent:
    """One event of the ``/watch`` stream: ``kind`` (an open set), the chat, and the pending
    tool calls for ``action_required``."""

    kind: str
    chat: Chat
    tool_calls: tuple[ActionToolCall, ...] = ()

    @classmethod
    def from_json(cls, obj: Any) -> ChatWatchEvent:
        w = "watch event"
        obj = req_dict(obj, w)
        calls = get_list(obj, "tool_calls", w) or []
        chat = obj.get("chat")
        return cls(
            kind=get_str(obj, "kind", w),
            chat=Chat.from_json(chat),
            tool_calls=tuple(ActionToolCall.from_json(c) for c in calls),
        )
