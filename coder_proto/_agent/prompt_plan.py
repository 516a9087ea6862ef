"""What a caller passes to ``generate`` / ``stream`` as prompt messages (appendix P; docs/agents.md "Files"): a string, content parts, messages as classes or role dicts, ``Attachment`` files
given as bytes, a path or a file object, and ``AttachedFile`` references.

``prepare_prompt`` returns a ``PromptPlan``: the files the adapter must read, then the
prompt's messages once their bytes are in. Bytes are size-checked at once and uploaded by
the turn itself (P.3); ``prepare_attachment`` is ``attach()``'s checks before any I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._errors import CoderAgentError
from .._rest.uploads import UploadPlan, check_attachment_size, check_media_type, plan_upload
from .._wire.chats import FileReferenceInput
from .prompt import (
    AssistantMessage,
    FileContent,
    Message,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserContent,
    UserMessage,
    normalize_prompt,
)

__all__ = ["AttachedFile", "Attachment", "PromptPlan", "prepare_attachment", "prepare_prompt"]


def _is_bytes(value: object) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)


@attrs.frozen(kw_only=True)
class Attachment:
    """A file to attach to a user message (docs/agents.md "Files"): uploaded by the turn that
    sends it (which makes that turn effectful for retries, C.5).

    ``content`` is bytes, a path (``str`` or ``os.PathLike``; text must be encoded first) or a
    binary file object. ``media_type`` defaults from the file name's extension, ``filename``
    from the path or the file object's name (``coder_proto._rest.uploads.plan_upload``). The content
    kind and the media-type allowlist are checked at construction, the 10 MiB cap as soon as
    the bytes are known: before anything is sent (wire 7).
    """

    content: Any = attrs.field(repr=False)
    media_type: str | None = None
    filename: str | None = None

    def __attrs_post_init__(self) -> None:
        self.plan()

    def plan(self) -> UploadPlan:
        """The upload plan with its media type checked against the allowlist (wire 7): the
        bytes in ``data``, or the ``path`` / ``stream`` the adapter reads."""
        plan = plan_upload(self.content, media_type=self.media_type, filename=self.filename)
        return attrs.evolve(
            plan, media_type=check_media_type(plan.media_type, filename=plan.filename)
        )


@attrs.frozen(kw_only=True)
class AttachedFile:
    """A file uploaded once with ``attach()`` and referenced by id in later prompts (no
    re-upload). Usable directly as a content part, or through ``to_file_part()``."""

    file_id: str
    media_type: str
    filename: str | None = None

    def to_file_part(self) -> FileContent:
        """The prompt part referencing this upload (P.3: a file by id)."""
        return FileContent(file_id=self.file_id, media_type=self.media_type, filename=self.filename)


@attrs.frozen(kw_only=True)
class _PendingRead:
    """A placeholder for an attachment whose bytes the adapter is reading."""

    index: int
    media_type: str
    filename: str | None


def _file_data(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CoderAgentError(
            f"Unsupported file content: the file object returned {type(data).__name__}, "
            "expected bytes (open the file in binary mode)."
        )
    body = bytes(data)
    check_attachment_size(len(body))
    return body


@attrs.frozen(kw_only=True)
class PromptPlan:
    """A prompt waiting for its files: ``reads`` are the upload plans whose ``path`` or
    ``stream`` the adapter reads (as the client's ``upload_chat_file`` does), in order;
    ``build`` takes their bytes and returns the prompt messages."""

    reads: tuple[UploadPlan, ...]
    _template: tuple[Any, ...] = attrs.field(alias="template", repr=False)

    def build(self, contents: Sequence[object]) -> tuple[Message, ...]:
        """The prompt's messages with the read bytes in place (type- and size-checked,
        wire 7)."""
        if len(contents) != len(self.reads):
            raise CoderAgentError(
                f"expected the contents of {len(self.reads)} files, got {len(contents)}"
            )
        out: list[Message] = []
        for message in self._template:
            if isinstance(message, UserMessage):
                parts = tuple(
                    FileContent(
                        data=_file_data(contents[p.index]),
                        media_type=p.media_type,
                        filename=p.filename,
                    )
                    if isinstance(p, _PendingRead)
                    else p
                    for p in message.content
                )
                message = UserMessage(parts)
            out.append(message)
        return tuple(out)


class _PromptBuilder:
    def __init__(self) -> None:
        self.reads: list[UploadPlan] = []

    def attachment(self, item: Attachment) -> UserContent | _PendingRead:
        plan = item.plan()
        media_type = plan.media_type
        assert media_type is not None
        if plan.data is not None:
            return FileContent(
                data=_file_data(plan.data), media_type=media_type, filename=plan.filename
            )
        self.reads.append(plan)
        return _PendingRead(
            index=len(self.reads) - 1, media_type=media_type, filename=plan.filename
        )

    def part(self, item: object) -> UserContent | _PendingRead:
        if isinstance(item, str):
            return TextContent(item)
        if isinstance(item, TextContent | FileContent | FileReferenceInput):
            return item
        if isinstance(item, Attachment):
            return self.attachment(item)
        if isinstance(item, AttachedFile):
            return item.to_file_part()
        if isinstance(item, Mapping):
            return self.part_dict(item)
        raise CoderAgentError(f"unsupported content part of type {type(item).__name__}")

    def part_dict(self, item: Mapping[str, Any]) -> UserContent | _PendingRead:
        kind = item.get("type")
        if kind == "text":
            text = item.get("text")
            if not isinstance(text, str):
                raise CoderAgentError('a "text" part needs a string "text"')
            return TextContent(text)
        if kind == "file":
            file_id = item.get("file_id")
            if isinstance(file_id, str) and file_id:
                return FileContent(
                    file_id=file_id,
                    media_type=item.get("media_type"),
                    filename=item.get("filename"),
                )
            if "data" not in item:
                raise CoderAgentError('a "file" part needs "data" (bytes or a path) or "file_id"')
            return self.attachment(
                Attachment(
                    content=item["data"],
                    media_type=item.get("media_type"),
                    filename=item.get("filename"),
                )
            )
        raise CoderAgentError(f'unsupported content part type {kind!r} (use "text" or "file")')

    def content(self, value: object) -> tuple[UserContent | _PendingRead, ...]:
        if isinstance(value, str):
            return (TextContent(value),)
        if isinstance(value, Sequence) and not _is_bytes(value):
            return tuple(self.part(item) for item in value)
        return (self.part(value),)

    def message(self, item: Mapping[str, Any]) -> Any:
        role = item.get("role")
        content = item.get("content")
        if role == "user":
            return UserMessage(self.content(content if content is not None else ()))  # type: ignore[arg-type]
        if role == "system":
            if not isinstance(content, str):
                raise CoderAgentError("a system message's content must be a string")
            return SystemMessage(content)
        if role == "assistant":
            return AssistantMessage()
        if role == "tool":
            return ToolMessage(tuple(self.tool_result(r) for r in _as_list(content, "tool")))
        raise CoderAgentError(
            f"unsupported message role {role!r} (use system, user, assistant or tool)"
        )

    @staticmethod
    def tool_result(item: object) -> ToolResultContent:
        if not isinstance(item, Mapping) or not isinstance(item.get("tool_call_id"), str):
            raise CoderAgentError('a tool message holds results with a "tool_call_id" string')
        from .tools import encode_output

        name = item.get("tool_name")
        return ToolResultContent(
            tool_call_id=item["tool_call_id"],
            output=encode_output(item.get("output")),
            is_error=item.get("is_error") is True,
            tool_name=name if isinstance(name, str) else "",
        )


def _as_list(value: object, role: str) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise CoderAgentError(f"a {role} message's content must be a list")


_MESSAGE_CLASSES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def _is_message(item: object) -> bool:
    return isinstance(item, _MESSAGE_CLASSES) or (isinstance(item, Mapping) and "role" in item)


def prepare_prompt(prompt: object = None, messages: object = None) -> PromptPlan:
    """What a caller passed to ``generate`` / ``stream`` as a ``PromptPlan`` (appendix P).

    Exactly one of ``prompt`` and ``messages`` is given. A prompt is a string, one content part
    or a sequence of them (strings, ``TextContent``, ``FileContent``, ``Attachment``,
    ``AttachedFile``, ``{"type": "text" | "file", ...}`` dicts), or a sequence of messages.
    Messages are ``SystemMessage`` / ``UserMessage`` / ``AssistantMessage`` / ``ToolMessage``
    or dicts with a ``role`` (``system``, ``user``, ``assistant``, ``tool``) and ``content``.
    Attachments given as bytes are size-checked now; paths and file objects become ``reads``.
    Raises ``CoderAgentError`` on anything else."""
    if (prompt is None) == (messages is None):
        raise CoderAgentError("pass either a prompt or messages (exactly one of them)")
    builder = _PromptBuilder()
    items: list[Any]
    if messages is not None:
        if _is_message(messages):
            items = [messages]
        elif isinstance(messages, Sequence) and not isinstance(messages, str | bytes):
            items = list(messages)
        else:
            items = [None]
        if not all(_is_message(i) for i in items):
            raise CoderAgentError("messages must hold only messages (classes or role dicts)")
    elif isinstance(prompt, str):
        return PromptPlan(reads=(), template=normalize_prompt(prompt))
    elif _is_message(prompt):
        items = [prompt]
    elif isinstance(prompt, Sequence) and not _is_bytes(prompt):
        items = list(prompt)
    else:
        items = [prompt]
    template: tuple[Any, ...]
    if messages is not None or (items and all(_is_message(i) for i in items)):
        template = tuple(builder.message(i) if isinstance(i, Mapping) else i for i in items)
    elif any(_is_message(i) for i in items):
        raise CoderAgentError("a prompt sequence must hold only messages or only content parts")
    else:
        parts = tuple(builder.part(i) for i in items)
        template = (UserMessage(parts),)  # type: ignore[arg-type]
    return PromptPlan(reads=tuple(builder.reads), template=template)


def prepare_attachment(
    content: object, *, media_type: str | None = None, filename: str | None = None
) -> UploadPlan:
    """``attach()``'s checks before any I/O (wire 7): the upload plan with its media type
    resolved and allowlisted, and bytes content size-checked."""
    plan = Attachment(content=content, media_type=media_type, filename=filename).plan()
    if plan.data is not None:
        check_attachment_size(len(plan.data))
    return plan
