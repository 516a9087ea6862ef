"""Prompts: what a caller asks for, and what it becomes on the wire (appendix P).

A prompt is a string, a sequence of user content parts, or a sequence of messages
(``SystemMessage``, ``UserMessage``, ``AssistantMessage``, ``ToolMessage``). ``classify_prompt``
turns the messages into the segment's action (P.1):

* ``NewTurn``: the last message is a user message; only its content is sent (earlier history
  is on the server);
* ``Resume``: the last messages are tool messages; their results are submitted;
* ``Noop``: anything else (the segment refuses it).

``input_parts`` maps user content to wire input parts (P.3): non-empty text, files by id, and
files with bytes that the segment uploads first; ``system_prompt`` joins the instructions and
system messages (P.4); ``tool_output_to_wire`` maps AI-SDK-style tagged tool outputs to the
wire ``output``/``is_error`` pair (P.2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from .._errors import CoderAgentError
from .._wire.chats import FileInput, FileReferenceInput, TextInput, ToolResultInput

__all__ = [
    "AssistantMessage",
    "FileContent",
    "Message",
    "NewTurn",
    "Noop",
    "PendingUpload",
    "PromptAction",
    "Resume",
    "SystemMessage",
    "TextContent",
    "ToolMessage",
    "ToolResultContent",
    "UserContent",
    "UserMessage",
    "classify_prompt",
    "input_parts",
    "normalize_prompt",
    "system_prompt",
    "tool_output_to_wire",
]


@attrs.frozen
class TextContent:
    """Text in a user message; empty text is dropped on the wire (P.3)."""

    text: str


@attrs.frozen(kw_only=True)
class FileContent:
    """A file in a user message (P.3).

    With a non-empty ``file_id`` (an uploaded or pre-uploaded file) nothing is uploaded.
    Otherwise ``data`` is uploaded by the turn (``media_type`` and ``filename`` passed along),
    which makes the turn effectful for retries (C.5).
    """

    data: bytes | None = attrs.field(
        default=None, repr=lambda d: f"<{len(d)} bytes>" if d else "None"
    )
    media_type: str | None = None
    filename: str | None = None
    file_id: str | None = None

    def __attrs_post_init__(self) -> None:
        if not (isinstance(self.file_id, str) and self.file_id) and self.data is None:
            raise CoderAgentError("a file part needs either a file_id or data to upload")
        if self.data is not None and not isinstance(self.data, bytes | bytearray | memoryview):
            raise CoderAgentError("file data must be bytes")


UserContent: TypeAlias = TextContent | FileContent | FileReferenceInput


@attrs.frozen
class SystemMessage:
    """System text; joined with the agent's instructions and sent only at chat creation."""

    content: str


@attrs.frozen
class UserMessage:
    """A user message; only the last one of a prompt is sent (P.1)."""

    content: tuple[UserContent, ...]


@attrs.frozen
class AssistantMessage:
    """An assistant message of the caller's history; never sent (the server has it)."""

    content: tuple[Any, ...] = ()


@attrs.frozen(kw_only=True)
class ToolResultContent:
    """One client tool result: ``output`` is the wire JSON value, ``is_error`` its flag."""

    tool_call_id: str
    output: Any
    is_error: bool = False
    tool_name: str = ""


@attrs.frozen
class ToolMessage:
    """Tool results of the caller's history; trailing ones make the prompt a resume."""

    content: tuple[ToolResultContent, ...]


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage


@attrs.frozen
class NewTurn:
    """Send ``content`` as a new user message (or create the chat with it); with
    ``edit_message_id``, replace that user message of the chat with it instead (wire 2.4)."""

    content: tuple[UserContent, ...]
    edit_message_id: int | None = None


@attrs.frozen
class Resume:
    """Submit client tool ``results`` and keep streaming (the tool-result resume)."""

    results: tuple[ToolResultInput, ...]


@attrs.frozen
class Noop:
    """Nothing to act on: no user message and no tool results."""


PromptAction: TypeAlias = NewTurn | Resume | Noop

_CONTENT_TYPES = (TextContent, FileContent, FileReferenceInput)
_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def normalize_prompt(prompt: object) -> tuple[Message, ...]:
    """Messages from a prompt: a string is one user text message; a sequence of content parts
    (strings allowed) is one user message; a sequence of messages is kept as is. Anything else
    raises ``CoderAgentError``."""
    if isinstance(prompt, str):
        return (UserMessage((TextContent(prompt),)),)
    if isinstance(prompt, _MESSAGE_TYPES):
        return (prompt,)
    if isinstance(prompt, _CONTENT_TYPES):
        return (UserMessage((prompt,)),)
    if isinstance(prompt, Sequence) and not isinstance(prompt, bytes | bytearray):
        items = list(prompt)
        if all(isinstance(item, _MESSAGE_TYPES) for item in items):
            return tuple(items)
        if all(isinstance(item, (*_CONTENT_TYPES, str)) for item in items):
            content = tuple(TextContent(i) if isinstance(i, str) else i for i in items)
            return (UserMessage(content),)
        raise CoderAgentError(
            "a prompt sequence must hold only messages or only user content parts"
        )
    raise CoderAgentError(f"unsupported prompt of type {type(prompt).__name__}")


def classify_prompt(messages: Sequence[Message]) -> PromptAction:
    """P.1: the action a segment takes for ``messages``.

    A resume collects the results of the consecutive trailing tool messages in chronological
    order (messages and the parts within each; the reference reverses parts within one
    message, K.5, which we do not copy since the server checks the set, not the order).
    """
    if not messages:
        return Noop()
    last = messages[-1]
    if isinstance(last, UserMessage):
        return NewTurn(tuple(last.content))
    if isinstance(last, ToolMessage):
        start = len(messages)
        while start > 0 and isinstance(messages[start - 1], ToolMessage):
            start -= 1
        results: list[ToolResultInput] = []
        for message in messages[start:]:
            assert isinstance(message, ToolMessage)
            for part in message.content:
                results.append(
                    ToolResultInput(
                        tool_call_id=part.tool_call_id,
                        output=part.output,
                        is_error=bool(part.is_error),
                    )
                )
        return Resume(tuple(results))
    return Noop()


def system_prompt(instructions: str | None, messages: Sequence[Message] = ()) -> str | None:
    """P.4: the instructions and every system message joined with a blank line and trimmed;
    ``None`` when that is empty. Sent only at chat creation."""
    texts = [instructions] if instructions else []
    texts += [m.content for m in messages if isinstance(m, SystemMessage) and m.content]
    joined = "\n\n".join(texts).strip()
    return joined or None


@attrs.frozen
class PendingUpload:
    """A file of the prompt that must be uploaded before the submission (P.3)."""

    file: FileContent


def input_parts(
    content: Sequence[UserContent],
) -> list[TextInput | FileInput | FileReferenceInput | PendingUpload]:
    """P.3, in order: non-empty text, files by id, file references, and ``PendingUpload``
    placeholders for files with bytes. Empty text is dropped."""
    out: list[TextInput | FileInput | FileReferenceInput | PendingUpload] = []
    for part in content:
        if isinstance(part, TextContent):
            if part.text:
                out.append(TextInput(part.text))
        elif isinstance(part, FileContent):
            if isinstance(part.file_id, str) and part.file_id:
                out.append(FileInput(part.file_id))
            else:
                out.append(PendingUpload(part))
        elif isinstance(part, FileReferenceInput):
            out.append(part)
    return out


def tool_output_to_wire(output: Mapping[str, Any]) -> tuple[Any, bool]:
    """P.2: an AI-SDK-style tagged tool output (``{"type": "json", "value": ...}`` ...) as the
    wire ``(output, is_error)`` pair. An unknown tag keeps the whole object."""
    kind = output.get("type")
    if kind in ("text", "json", "content"):
        return output.get("value"), False
    if kind in ("error-text", "error-json"):
        return output.get("value"), True
    if kind == "execution-denied":
        denied: dict[str, Any] = {"execution_denied": True}
        if "reason" in output:
            denied["reason"] = output.get("reason")
        return denied, True
    return dict(output), False
