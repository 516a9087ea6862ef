"""``ChatMessagePart``: one flat wire struct with a ``type`` discriminator (wire 3.5).

Each known type becomes its own frozen class; an unknown type becomes ``UnknownPart`` which
every machine skips. Parsing branches on ``type`` only, never on which keys are present: the
real server serializes zero values (``"text": ""``, ``"url": ""`` ...) on every part.

Fields whose absence differs from ``null`` (a tool call's ``args``, a tool result's
``result``) default to ``MISSING``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeAlias

import attrs

from .fields import (
    MISSING,
    get_bool,
    get_int,
    get_list,
    get_str,
    opt_bool,
    opt_str,
    req_dict,
    slot_setter,
)
from .ids import check_resource_id, tool_call_id

#: The members the server writes on every part, whatever its type, with their zero values
#: (Go fields without ``omitempty``; server behaviour 4.2, wire 3.5), besides ``text``. A part
#: that is not of their type carries them empty, and parsing reads no member its type lacks.
PART_ZERO_VALUES: dict[str, str | int] = {
    "url": "",
    "media_type": "",
    "file_name": "",
    "start_line": 0,
    "end_line": 0,
    "content": "",
    "context_file_path": "",
    "skill_name": "",
}

__all__ = [
    "PART_ZERO_VALUES",
    "ChatMessagePart",
    "ContextFilePart",
    "FilePart",
    "FileReferencePart",
    "HookNoticePart",
    "ReasoningPart",
    "SkillPart",
    "SourcePart",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "UnknownPart",
    "parse_part",
    "parse_parts",
]


@attrs.frozen(init=False, weakref_slot=False)
class TextPart:
    """``{"type": "text", "text": ...}``; in a ``message_part`` event the text is a delta."""

    text: str = ""
    #: The wire type, a class constant (one fewer slot to fill per streamed delta).
    type: ClassVar[str] = "text"

    def __init__(self, text: str = "") -> None:
        _set_text_text(self, text)

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


_set_text_text = slot_setter(TextPart, "text")


class TextPartDraft:
    """The slots of ``TextPart``, writable: the stream parser fills one with a plain store
    and makes it a ``TextPart`` by assigning ``__class__`` (same slots, no ``__weakref__``)."""

    __slots__ = TextPart.__slots__  # type: ignore[attr-defined]

    text: str


@attrs.frozen(init=False, weakref_slot=False)
class ReasoningPart:
    """Model reasoning; deltas like ``TextPart`` in the stream."""

    text: str = ""
    signature: str | None = None
    created_at: str | None = None
    completed_at: str | None = None
    type: ClassVar[str] = "reasoning"

    def __init__(
        self,
        text: str = "",
        signature: str | None = None,
        created_at: str | None = None,
        completed_at: str | None = None,
    ) -> None:
        _set_reasoning_text(self, text)
        _set_reasoning_signature(self, signature)
        _set_reasoning_created_at(self, created_at)
        _set_reasoning_completed_at(self, completed_at)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "reasoning", "text": self.text}
        for key in ("signature", "created_at", "completed_at"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


_set_reasoning_text = slot_setter(ReasoningPart, "text")
_set_reasoning_signature = slot_setter(ReasoningPart, "signature")
_set_reasoning_created_at = slot_setter(ReasoningPart, "created_at")
_set_reasoning_completed_at = slot_setter(ReasoningPart, "completed_at")


class ReasoningPartDraft:
    """The slots of ``ReasoningPart``, writable, for the stream parser: filled with plain
    stores and made a ``ReasoningPart`` by assigning ``__class__`` (as ``TextPartDraft``)."""

    __slots__ = ReasoningPart.__slots__  # type: ignore[attr-defined]

    text: str
    signature: str | None
    created_at: str | None
    completed_at: str | None


def plain_reasoning_part(raw_part: dict[str, Any], text: str) -> ReasoningPart | None:
    """``ReasoningPart(text)`` without the ``__init__`` frame (the stream parser's shortcut)
    when ``raw_part`` sets no signature and no timestamps, else ``None`` (``parse_part``
    keeps them). A part with only its type and text is not looked into further."""
    if len(raw_part) != 2 and (
        raw_part.get("signature") is not None
        or raw_part.get("created_at") is not None
        or raw_part.get("completed_at") is not None
    ):
        return None
    part = ReasoningPartDraft()
    part.text = text
    part.signature = None
    part.created_at = None
    part.completed_at = None
    part.__class__ = ReasoningPart  # type: ignore[assignment]
    return part  # type: ignore[return-value]


@attrs.frozen(kw_only=True)
class ToolCallPart:
    """A tool call. ``args`` is the complete parsed input (``MISSING`` while only
    ``args_delta`` chunks have streamed); ``provider_executed`` marks server-side tools."""

    tool_call_id: str = ""
    tool_name: str = ""
    args: Any = MISSING
    args_delta: str | None = None
    mcp_server_config_id: str | None = None
    provider_executed: bool | None = None
    parsed_commands: Any = None
    hook_rewritten: bool | None = None
    created_at: str | None = None
    type: str = attrs.field(default="tool-call", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "tool-call",
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
        }
        if self.args is not MISSING:
            out["args"] = self.args
        for key in (
            "args_delta",
            "mcp_server_config_id",
            "provider_executed",
            "parsed_commands",
            "hook_rewritten",
            "created_at",
        ):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@attrs.frozen(kw_only=True)
class ToolResultPart:
    """A tool result. ``result`` is ``MISSING`` when the key was absent (D19: such a part is
    not emitted) and ``None`` for a JSON ``null``."""

    tool_call_id: str = ""
    tool_name: str = ""
    result: Any = MISSING
    result_delta: str | None = None
    result_reset: bool | None = None
    is_error: bool = False
    is_media: bool | None = None
    provider_executed: bool | None = None
    mcp_server_config_id: str | None = None
    created_at: str | None = None
    type: str = attrs.field(default="tool-result", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "tool-result",
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
        }
        if self.result is not MISSING:
            out["result"] = self.result
        if self.is_error:
            out["is_error"] = True
        for key in (
            "result_delta",
            "result_reset",
            "is_media",
            "provider_executed",
            "mcp_server_config_id",
            "created_at",
        ):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@attrs.frozen(kw_only=True)
class SourcePart:
    """A cited source. An empty ``url`` means none (A.8); ``title`` is ``None`` when absent
    (an empty string counts as present)."""

    url: str = ""
    source_id: str | None = None
    title: str | None = None
    type: str = attrs.field(default="source", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "source", "url": self.url}
        if self.source_id is not None:
            out["source_id"] = self.source_id
        if self.title is not None:
            out["title"] = self.title
        return out


@attrs.frozen(kw_only=True)
class FilePart:
    """An attached file; ``file_id`` references an upload, ``data`` (base64) appears only
    when there is no id, ``url`` when the producer resolved one."""

    media_type: str = ""
    name: str | None = None
    file_id: str | None = None
    data: str | None = None
    url: str | None = None
    type: str = attrs.field(default="file", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "file", "media_type": self.media_type}
        for key in ("name", "file_id", "data", "url"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@attrs.frozen(kw_only=True)
class FileReferencePart:
    """A code excerpt reference."""

    file_name: str = ""
    start_line: int = 0
    end_line: int = 0
    content: str = ""
    type: str = attrs.field(default="file-reference", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "file-reference",
            "file_name": self.file_name,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "content": self.content,
        }


@attrs.frozen(kw_only=True)
class ContextFilePart:
    """A context file the server attached (server-only type)."""

    context_file_path: str = ""
    context_file_truncated: bool | None = None
    context_file_agent_id: str | None = None
    type: str = attrs.field(default="context-file", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "context-file", "context_file_path": self.context_file_path}
        if self.context_file_truncated is not None:
            out["context_file_truncated"] = self.context_file_truncated
        if self.context_file_agent_id is not None:
            out["context_file_agent_id"] = self.context_file_agent_id
        return out


@attrs.frozen(kw_only=True)
class SkillPart:
    """A skill the agent loaded."""

    skill_name: str = ""
    skill_description: str | None = None
    type: str = attrs.field(default="skill", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "skill", "skill_name": self.skill_name}
        if self.skill_description is not None:
            out["skill_description"] = self.skill_description
        return out


@attrs.frozen(kw_only=True)
class HookNoticePart:
    """A user-facing notice from a lifecycle hook (server-only type)."""

    text: str = ""
    type: str = attrs.field(default="hook-notice", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "hook-notice", "text": self.text}


@attrs.frozen(kw_only=True)
class UnknownPart:
    """A part whose ``type`` this library does not know; kept verbatim and skipped."""

    type: str
    raw: dict[str, Any] = attrs.field(eq=False, repr=False, factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw)


ChatMessagePart: TypeAlias = (
    TextPart
    | ReasoningPart
    | ToolCallPart
    | ToolResultPart
    | SourcePart
    | FilePart
    | FileReferencePart
    | ContextFilePart
    | SkillPart
    | HookNoticePart
    | UnknownPart
)
"""Any part of a chat message as the wire carries it (text, reasoning, tool call and result, file,
source ...).
"""

_W = "message part"


def _text(obj: dict[str, Any]) -> TextPart:
    text = obj.get("text")
    if type(text) is str:
        return TextPart(text)
    return TextPart(get_str(obj, "text", "text part"))


def _reasoning(obj: dict[str, Any]) -> ReasoningPart:
    w = "reasoning part"
    return ReasoningPart(
        get_str(obj, "text", w),
        opt_str(obj, "signature", w),
        opt_str(obj, "created_at", w),
        opt_str(obj, "completed_at", w),
    )


def _tool_call(obj: dict[str, Any]) -> ToolCallPart:
    w = "tool-call part"
    return ToolCallPart(
        tool_call_id=tool_call_id(get_str(obj, "tool_call_id", w), w),
        tool_name=get_str(obj, "tool_name", w),
        args=obj.get("args", MISSING),
        args_delta=opt_str(obj, "args_delta", w),
        mcp_server_config_id=opt_str(obj, "mcp_server_config_id", w),
        provider_executed=opt_bool(obj, "provider_executed", w),
        parsed_commands=obj.get("parsed_commands"),
        hook_rewritten=opt_bool(obj, "hook_rewritten", w),
        created_at=opt_str(obj, "created_at", w),
    )


def _tool_result(obj: dict[str, Any]) -> ToolResultPart:
    w = "tool-result part"
    return ToolResultPart(
        tool_call_id=tool_call_id(get_str(obj, "tool_call_id", w), w),
        tool_name=get_str(obj, "tool_name", w),
        result=obj.get("result", MISSING),
        result_delta=opt_str(obj, "result_delta", w),
        result_reset=opt_bool(obj, "result_reset", w),
        is_error=get_bool(obj, "is_error", w),
        is_media=opt_bool(obj, "is_media", w),
        provider_executed=opt_bool(obj, "provider_executed", w),
        mcp_server_config_id=opt_str(obj, "mcp_server_config_id", w),
        created_at=opt_str(obj, "created_at", w),
    )


def _source(obj: dict[str, Any]) -> SourcePart:
    w = "source part"
    return SourcePart(
        url=get_str(obj, "url", w),
        source_id=opt_str(obj, "source_id", w),
        title=opt_str(obj, "title", w),
    )


def _file(obj: dict[str, Any]) -> FilePart:
    w = "file part"
    file_id = opt_str(obj, "file_id", w)
    if file_id:
        check_resource_id(file_id, w, "file_id")
    return FilePart(
        media_type=get_str(obj, "media_type", w),
        name=opt_str(obj, "name", w),
        file_id=file_id,
        data=opt_str(obj, "data", w),
        url=opt_str(obj, "url", w) or None,
    )


def _file_reference(obj: dict[str, Any]) -> FileReferencePart:
    w = "file-reference part"
    return FileReferencePart(
        file_name=get_str(obj, "file_name", w),
        start_line=get_int(obj, "start_line", w),
        end_line=get_int(obj, "end_line", w),
        content=get_str(obj, "content", w),
    )


def _context_file(obj: dict[str, Any]) -> ContextFilePart:
    w = "context-file part"
    return ContextFilePart(
        context_file_path=get_str(obj, "context_file_path", w),
        context_file_truncated=opt_bool(obj, "context_file_truncated", w),
        context_file_agent_id=opt_str(obj, "context_file_agent_id", w),
    )


def _skill(obj: dict[str, Any]) -> SkillPart:
    w = "skill part"
    return SkillPart(
        skill_name=get_str(obj, "skill_name", w),
        skill_description=opt_str(obj, "skill_description", w),
    )


def _hook_notice(obj: dict[str, Any]) -> HookNoticePart:
    return HookNoticePart(text=get_str(obj, "text", "hook-notice part"))


_PARSERS: dict[str, Callable[[dict[str, Any]], ChatMessagePart]] = {
    "text": _text,
    "reasoning": _reasoning,
    "tool-call": _tool_call,
    "tool-result": _tool_result,
    "source": _source,
    "file": _file,
    "file-reference": _file_reference,
    "context-file": _context_file,
    "skill": _skill,
    "hook-notice": _hook_notice,
}


def parse_part(obj: Any) -> ChatMessagePart:
    """Parse one wire part; an unknown ``type`` gives ``UnknownPart``."""
    obj = req_dict(obj, _W)
    kind = obj.get("type")
    parser = _PARSERS.get(kind) if type(kind) is str else None
    if parser is None:
        return UnknownPart(type=kind if type(kind) is str else "", raw=obj)
    return parser(obj)


def parse_parts(obj: dict[str, Any], key: str, where: str) -> tuple[ChatMessagePart, ...]:
    """Parse the list under ``key`` (absent or ``null`` is empty)."""
    items = get_list(obj, key, where)
    if not items:
        return ()
    return tuple(parse_part(item) for item in items)
