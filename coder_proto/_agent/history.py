"""Chat history as UI messages (state machines I).

``to_ui_messages`` turns stored chat messages (``GET {P}/{chat}/messages``) into the AI SDK's
``UIMessage`` shape, for rendering a transcript or seeding a chat UI: one UI message per
non-tool message, tool results folded into the parts of their calls. Each UI part is a small
frozen class; ``to_json()`` gives the AI SDK's JSON (camelCase keys) for a JavaScript front end.
``HistoryJob`` fetches every message of a chat, walking the newest-first pages back.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from .._engine import CoreMachine
from .._json import js_stringify
from .._rest.prefix import PrefixSelector
from .._rest.routes import build_get_messages, check_chat_id, parse_get_messages
from .._wire.fields import MISSING
from .._wire.message_parts import (
    FilePart,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from .._wire.messages import ChatMessage

__all__ = [
    "DynamicToolState",
    "FileUrlResolver",
    "HistoryJob",
    "UIDynamicToolPart",
    "UIFilePart",
    "UIMessage",
    "UIPart",
    "UIReasoningPart",
    "UISourceUrlPart",
    "UITextPart",
    "to_ui_messages",
]

DynamicToolState = Literal["input-available", "output-error", "output-available"]
FileUrlResolver: TypeAlias = Callable[[FilePart], "str | None"]

_DEFAULT_MEDIA_TYPE = "application/octet-stream"


@attrs.frozen
class UITextPart:
    """``{type: "text", text, state: "done"}``; empty texts are kept."""

    text: str
    state: str = "done"
    type: ClassVar[str] = "text"

    def to_json(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text, "state": self.state}


@attrs.frozen
class UIReasoningPart:
    """``{type: "reasoning", text, state: "done"}``."""

    text: str
    state: str = "done"
    type: ClassVar[str] = "reasoning"

    def to_json(self) -> dict[str, Any]:
        return {"type": "reasoning", "text": self.text, "state": self.state}


@attrs.frozen(kw_only=True)
class UIDynamicToolPart:
    """A tool call with its folded result (state machines I). ``state`` is
    ``input-available`` (no result yet), ``output-error`` (the result is an error;
    ``error_text`` set) or ``output-available`` (``output`` set). ``input`` is the call's
    ``args`` (``None`` when absent). ``provider_executed`` is ``None`` when neither the call nor
    its result says."""

    tool_name: str
    tool_call_id: str
    state: DynamicToolState
    input: Any = None
    output: Any = None
    error_text: str | None = None
    provider_executed: bool | None = None
    type: ClassVar[str] = "dynamic-tool"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "dynamic-tool",
            "toolName": self.tool_name,
            "toolCallId": self.tool_call_id,
        }
        if self.provider_executed is not None:
            out["providerExecuted"] = self.provider_executed
        out["state"] = self.state
        out["input"] = self.input
        if self.state == "output-available":
            out["output"] = self.output
        elif self.state == "output-error":
            out["errorText"] = self.error_text
        return out


@attrs.frozen(kw_only=True)
class UISourceUrlPart:
    """``{type: "source-url", sourceId, url, title?}``; ``source_id`` falls back to the url."""

    source_id: str
    url: str
    title: str | None = None
    type: ClassVar[str] = "source-url"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "source-url", "sourceId": self.source_id, "url": self.url}
        if self.title is not None:
            out["title"] = self.title
        return out


@attrs.frozen(kw_only=True)
class UIFilePart:
    """``{type: "file", mediaType, filename?, url}``."""

    media_type: str
    url: str
    filename: str | None = None
    type: ClassVar[str] = "file"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "file", "mediaType": self.media_type}
        if self.filename is not None:
            out["filename"] = self.filename
        out["url"] = self.url
        return out


UIPart: TypeAlias = UITextPart | UIReasoningPart | UIDynamicToolPart | UISourceUrlPart | UIFilePart


@attrs.frozen(kw_only=True)
class UIMessage:
    """``{id: str(message id), role, parts}``."""

    id: str
    role: str
    parts: tuple[UIPart, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "parts": [p.to_json() for p in self.parts]}


def _error_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if result is None or result is MISSING:
        return ""
    return js_stringify(result)


def _tool_part(call: ToolCallPart, result: ToolResultPart | None) -> UIDynamicToolPart:
    provider_executed = call.provider_executed
    if provider_executed is None and result is not None:
        provider_executed = result.provider_executed
    args = None if call.args is MISSING else call.args
    if result is None:
        return UIDynamicToolPart(
            tool_name=call.tool_name,
            tool_call_id=call.tool_call_id,
            state="input-available",
            input=args,
            provider_executed=provider_executed,
        )
    if result.is_error:
        return UIDynamicToolPart(
            tool_name=call.tool_name,
            tool_call_id=call.tool_call_id,
            state="output-error",
            input=args,
            error_text=_error_text(result.result),
            provider_executed=provider_executed,
        )
    return UIDynamicToolPart(
        tool_name=call.tool_name,
        tool_call_id=call.tool_call_id,
        state="output-available",
        input=args,
        output=None if result.result is MISSING else result.result,
        provider_executed=provider_executed,
    )


def _file_part(part: FilePart, file_url: FileUrlResolver | None) -> UIFilePart | None:
    url = file_url(part) if file_url is not None else None
    if url is None:
        url = part.url
    if not url:
        return None
    return UIFilePart(
        media_type=part.media_type or _DEFAULT_MEDIA_TYPE, url=url, filename=part.name or None
    )


def to_ui_messages(
    messages: Iterable[ChatMessage], *, file_url: FileUrlResolver | None = None
) -> list[UIMessage]:
    """Convert chat history to UI messages, exactly per state machines I.

    Messages are ordered by id. The first ``tool-result`` for each tool call id, from any
    message (tool-role or inlined in an assistant message), is folded into its call; later
    results for the same id are ignored. Tool-role messages produce no UI message; system,
    user and assistant messages do, with their parts mapped in content order:

    * ``text`` / ``reasoning`` -> ``UITextPart`` / ``UIReasoningPart`` (state ``done``);
    * ``tool-call`` with an id and a name -> ``UIDynamicToolPart``; ``provider_executed`` is
      the call's when set, else the result's; ``error_text`` is the result itself when it is a
      string, ``""`` when it is null or absent, its JSON text otherwise;
    * ``source`` with a url -> ``UISourceUrlPart`` (``source_id`` or the url; ``title`` only
      when non-empty);
    * ``file`` -> ``UIFilePart`` when ``file_url(part)`` or the part's own ``url`` gives one
      (media type defaulting to ``application/octet-stream``), skipped otherwise;
    * everything else (tool results themselves, file references, context files, skills,
      unknown kinds) is skipped.
    """
    ordered = sorted(messages, key=lambda m: m.id)
    results: dict[str, ToolResultPart] = {}
    for message in ordered:
        for part in message.content:
            if isinstance(part, ToolResultPart) and part.tool_call_id:
                results.setdefault(part.tool_call_id, part)
    out: list[UIMessage] = []
    for message in ordered:
        if message.role == "tool":
            continue
        parts: list[UIPart] = []
        for part in message.content:
            if isinstance(part, TextPart):
                parts.append(UITextPart(part.text))
            elif isinstance(part, ReasoningPart):
                parts.append(UIReasoningPart(part.text))
            elif isinstance(part, ToolCallPart):
                if part.tool_call_id and part.tool_name:
                    parts.append(_tool_part(part, results.get(part.tool_call_id)))
            elif isinstance(part, SourcePart):
                if part.url:
                    parts.append(
                        UISourceUrlPart(
                            source_id=part.source_id or part.url,
                            url=part.url,
                            title=part.title or None,
                        )
                    )
            elif isinstance(part, FilePart):
                file_part = _file_part(part, file_url)
                if file_part is not None:
                    parts.append(file_part)
        out.append(UIMessage(id=str(message.id), role=message.role, parts=tuple(parts)))
    return out


# -- fetching -----------------------------------------------------------------------------------


class HistoryJob(CoreMachine[tuple[ChatMessage, ...]]):
    """Every message of a chat, oldest first: newest-first pages of ``page_size`` walked back
    with ``before_id`` until the server says there is no more (wire 2)."""

    def __init__(
        self, selector: PrefixSelector, chat_id: str, *, now: float, page_size: int = 200
    ) -> None:
        super().__init__(selector)
        self.chat_id = check_chat_id(chat_id)
        self.page_size = page_size
        self._start(now)

    def _run(self) -> Generator[None, None, tuple[ChatMessage, ...]]:
        by_id: dict[int, ChatMessage] = {}
        before: int | None = None
        while True:
            page = yield from self._rest(
                build_get_messages(self.chat_id, before_id=before, limit=self.page_size),
                parse_get_messages,
            )
            fresh = [m for m in page.messages if m.id not in by_id]
            for message in fresh:
                by_id[message.id] = message
            if not page.has_more or not fresh:
                break
            before = min(m.id for m in fresh)
        return tuple(by_id[k] for k in sorted(by_id))
