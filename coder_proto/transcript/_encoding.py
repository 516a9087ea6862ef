"""The JSON forms of the values records carry: URLs without credentials (docs/architecture.md
rule 6: user info and credential-like query parameters are dropped), prompts, client tools,
tool calls, and any value made JSON-safe.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._agent.prompt import (
    AssistantMessage,
    FileContent,
    Message,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
    normalize_prompt,
)
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .._wire.chats import DynamicTool, FileReferenceInput
from ._fields import Fields, TranscriptError, drop_none, sub_fields

__all__ = [
    "base_url",
    "call_to_json",
    "jsonable",
    "prompt_from_json",
    "prompt_to_json",
    "redact_url",
    "tool_from_json",
    "tool_to_json",
]


#: Query parameters that could carry credentials; dropped from every recorded URL.
_SECRET_QUERY_KEYS: Final = frozenset({"coder_session_token", "token", "access_token"})


def redact_url(url: str) -> str:
    """``url`` without user info, fragment, or query parameters that could carry credentials
    (``coder_session_token``, ``token``, ``access_token``). A URL that cannot be parsed is
    replaced by ``"<unparseable URL>"`` rather than stored as is."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = [
            (k, v)
            for k, v in parse_qsl(query, keep_blank_values=True)
            if k.lower() not in _SECRET_QUERY_KEYS
        ]
        query = urlencode(pairs)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def base_url(url: str) -> str:
    """The base URL as recorded: no credentials, no query, no fragment."""
    redacted = redact_url(url)
    return redacted.partition("?")[0]


def jsonable(value: Any) -> Any:
    """``value`` when it is plain JSON (finite numbers, string keys); otherwise a copy where
    anything else became its ``repr``. Transcripts hold JSON only."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError, RecursionError):
        pass
    return _coerce(value, 0)


def _coerce(value: Any, depth: int) -> Any:
    if depth > 64:
        return "<nested too deeply>"
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): _coerce(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_coerce(v, depth + 1) for v in value]
    return repr(value)


def _content_to_json(part: Any) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return {"type": "text", "text": part.text}
    if isinstance(part, FileContent):
        out: dict[str, Any] = {"type": "file"}
        if part.file_id:
            out["file_id"] = part.file_id
        if part.media_type is not None:
            out["media_type"] = part.media_type
        if part.filename is not None:
            out["filename"] = part.filename
        if part.data is not None:
            out["data_b64"] = base64.b64encode(bytes(part.data)).decode("ascii")
        return out
    assert isinstance(part, FileReferenceInput)
    return {
        "type": "file-reference",
        "file_name": part.file_name,
        "start_line": part.start_line,
        "end_line": part.end_line,
        "content": part.content,
    }


def prompt_to_json(prompt: object) -> list[dict[str, Any]]:
    """A prompt (anything ``Session.generate`` accepts) as JSON messages: ``role`` plus
    ``content``. File bytes are base64 (``data_b64``); assistant history content is kept only
    when it is plain JSON (it is never sent). Raises ``CoderAgentError`` for a prompt the
    session would refuse (appendix P)."""
    out: list[dict[str, Any]] = []
    for message in normalize_prompt(prompt):
        if isinstance(message, SystemMessage):
            out.append({"role": "system", "content": message.content})
        elif isinstance(message, UserMessage):
            out.append({"role": "user", "content": [_content_to_json(c) for c in message.content]})
        elif isinstance(message, AssistantMessage):
            content = jsonable(list(message.content))
            out.append({"role": "assistant", "content": content})
        else:
            assert isinstance(message, ToolMessage)
            out.append(
                {
                    "role": "tool",
                    "content": [
                        {
                            "tool_call_id": r.tool_call_id,
                            "tool_name": r.tool_name,
                            "output": jsonable(r.output),
                            "is_error": bool(r.is_error),
                        }
                        for r in message.content
                    ],
                }
            )
    return out


def _content_from_json(f: Fields) -> TextContent | FileContent | FileReferenceInput:
    kind = f.choice("type", ("text", "file", "file-reference"))
    if kind == "text":
        return TextContent(f.str_("text"))
    if kind == "file":
        data: bytes | None = None
        if f.has("data_b64"):
            try:
                data = base64.b64decode(f.str_("data_b64"), validate=True)
            except (binascii.Error, ValueError):
                raise f.fail("data_b64", "base64 text") from None
        try:
            return FileContent(
                data=data,
                media_type=f.opt_str("media_type"),
                filename=f.opt_str("filename"),
                file_id=f.opt_str("file_id"),
            )
        except CoderAgentError as exc:
            raise TranscriptError(f"prompt file: {exc.message}", line=f.line) from None
    return FileReferenceInput(
        file_name=f.str_("file_name"),
        start_line=f.int_("start_line"),
        end_line=f.int_("end_line"),
        content=f.str_("content"),
    )


def prompt_from_json(value: Any, *, line: int | None = None) -> tuple[Message, ...]:
    """The messages ``prompt_to_json`` wrote. Raises ``TranscriptError`` when malformed."""
    if type(value) is not list:
        raise TranscriptError("turn record: 'prompt' must be a list of messages", line=line)
    messages: list[Message] = []
    for item in value:
        f = sub_fields(item, "prompt message", line)
        role = f.choice("role", ("system", "user", "assistant", "tool"))
        if role == "system":
            messages.append(SystemMessage(f.str_("content")))
        elif role == "user":
            parts = [
                _content_from_json(sub_fields(p, "prompt content", line))
                for p in f.list_("content")
            ]
            messages.append(UserMessage(tuple(parts)))
        elif role == "assistant":
            content = f.data.get("content")
            messages.append(AssistantMessage(tuple(content) if type(content) is list else ()))
        else:
            results = []
            for raw in f.list_("content"):
                r = sub_fields(raw, "tool result", line)
                results.append(
                    ToolResultContent(
                        tool_call_id=r.str_("tool_call_id"),
                        tool_name=r.opt_str("tool_name") or "",
                        output=r.data.get("output"),
                        is_error=r.bool_("is_error"),
                    )
                )
            messages.append(ToolMessage(tuple(results)))
    return tuple(messages)


def tool_to_json(tool: DynamicTool) -> dict[str, Any]:
    return drop_none(
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": jsonable(dict(tool.input_schema)),
        }
    )


def tool_from_json(raw: Any, line: int | None) -> DynamicTool:
    f = sub_fields(raw, "tool", line)
    schema = f.obj("input_schema") if f.has("input_schema") else {}
    return DynamicTool(
        name=f.str_("name"), input_schema=schema, description=f.opt_str("description")
    )


def call_to_json(call: ToolCall) -> dict[str, Any]:
    return {"tool_call_id": call.tool_call_id, "tool_name": call.tool_name, "input": call.input}
