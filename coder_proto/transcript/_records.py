"""Transcripts: what crossed the wire in one agent session, as versioned JSON lines
(DESIGN "Beyond the reference"; rule 6: secrets stay out).

A transcript is UTF-8 text, one JSON object per line. The first line is the header
(``kind: "header"``: format name, format version, library version, creation time supplied by
the caller, the base URL without credentials, and the session settings replay needs); every
other line is one record with a ``kind`` and a time ``t`` in seconds relative to the moment
recording began:

==============  ===============================================================================
kind            what happened
==============  ===============================================================================
``turn``        a turn started (``generate``/``stream``, the prompt, tool overrides)
``rest``        one REST exchange: op, method, path with query, request JSON (or its byte
                length), status, response JSON (or text, or byte length), or a network error,
                or ``cancelled``
``ws_open``     a WebSocket connection was dialled (its URL, without credentials)
``ws_accept``   the upgrade was accepted
``ws_frame``    one received text frame, verbatim
``ws_close``    the server's close frame (code, reason)
``ws_reject``   the upgrade was answered with an HTTP status (and its body)
``ws_error``    the server broke the WebSocket protocol
``ws_end``      the connection ended: ``lost`` (end of stream), ``failed`` (socket error) or
                ``closed`` (by the client)
``tools``       client tools ran: the calls and their outcomes
``cancel``      the caller cancelled the running turn (D22)
``call``        a session call: ``interrupt``, ``archive``, ``dispose``, ``reset_session``
``turn_end``    the live outcome of the turn, for comparison with a replay
==============  ===============================================================================

No record type has a field for headers, and URLs are stored without user info or a
``coder_session_token`` query parameter, so a transcript cannot carry the session token
(``tests/test_transcript.py`` checks both). ``docs/transcripts.md`` documents every field.

``TranscriptRecorder`` turns an adapter's observations (the ``Recorder`` protocol: one call per
REST exchange, per chunk of received bytes, per tool run...) into records; ``parse_transcript``
is the strict reader (``TranscriptError`` with the line number for anything malformed,
``TranscriptVersionError`` for a newer format); ``coder_proto.transcript._replay`` runs a transcript
through the core offline.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final, Protocol, TypeAlias
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import h11
from wsproto.frame_protocol import FrameProtocol, Opcode, ParseFailed

from .._actions import OpenConnection, ToolOutcome
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
from .._errors import CoderAgentError, CoderApiError, CoderChatError, CoderStreamError
from .._outputs import ToolCall, ToolResult, Usage
from .._rest.http import HttpRequest, HttpResponse
from .._version import __version__
from .._wire.chats import DynamicTool, FileReferenceInput

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Cancel",
    "Header",
    "Record",
    "Recorder",
    "RestExchange",
    "SessionCall",
    "ToolRun",
    "Transcript",
    "TranscriptError",
    "TranscriptRecorder",
    "TranscriptSettings",
    "TranscriptVersionError",
    "TranscriptWriter",
    "TurnEnd",
    "TurnStarted",
    "WsAccept",
    "WsClose",
    "WsEnd",
    "WsError",
    "WsFrame",
    "WsOpenRecord",
    "WsReject",
    "outcome_summary",
    "parse_transcript",
    "prompt_from_json",
    "prompt_to_json",
    "redact_url",
]

logger = logging.getLogger("coder_proto")

#: The header's ``format`` value.
FORMAT_NAME: Final = "coder-agents-transcript"
#: The format version this module writes and the newest it reads.
FORMAT_VERSION: Final = 1

#: Query parameters that could carry credentials; dropped from every recorded URL.
_SECRET_QUERY_KEYS: Final = frozenset({"coder_session_token", "token", "access_token"})
#: The recorder's frame decoder accepts messages up to this size, so that a frame the reader
#: refuses as too big is still recorded whole and refused again on replay.
_RECORDER_MAX_MESSAGE: Final = 1 << 30


class TranscriptError(CoderAgentError):
    """A transcript is malformed: not JSON, a missing or mistyped field, an unknown record
    kind. ``line`` is the 1-based line number (``None`` when the problem is not one line)."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        full = f"transcript line {line}: {message}" if line is not None else message
        super().__init__(full)
        self.line = line

    def _message_arg(self) -> str:
        return self.message

    def _state(self) -> dict[str, Any]:
        return {}


class TranscriptVersionError(TranscriptError):
    """The transcript was written by a newer format version than this library reads."""


# -- field helpers -------------------------------------------------------------------------------


class _Fields:
    """Typed access to one record's JSON object; every problem is a ``TranscriptError``."""

    __slots__ = ("data", "kind", "line")

    def __init__(self, data: Mapping[str, Any], kind: str, line: int | None) -> None:
        self.data = data
        self.kind = kind
        self.line = line

    def fail(self, key: str, expected: str) -> TranscriptError:
        return TranscriptError(f"{self.kind} record: {key!r} must be {expected}", line=self.line)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def str_(self, key: str) -> str:
        value = self.data.get(key)
        if type(value) is not str:
            raise self.fail(key, "a string")
        return value

    def opt_str(self, key: str) -> str | None:
        return self.str_(key) if self.has(key) else None

    def int_(self, key: str) -> int:
        value = self.data.get(key)
        if type(value) is not int:
            raise self.fail(key, "an integer")
        return value

    def opt_int(self, key: str) -> int | None:
        return self.int_(key) if self.has(key) else None

    def num(self, key: str) -> float:
        value = self.data.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.fail(key, "a finite number")
        number = float(value)
        if not math.isfinite(number):
            raise self.fail(key, "a finite number")
        return number

    def opt_num(self, key: str) -> float | None:
        return self.num(key) if self.has(key) else None

    def time(self, key: str = "t") -> float:
        value = self.num(key)
        if value < 0:
            raise self.fail(key, "a non-negative number of seconds")
        return value

    def bool_(self, key: str, default: bool = False) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if type(value) is not bool:
            raise self.fail(key, "a boolean")
        return value

    def list_(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if type(value) is not list:
            raise self.fail(key, "a list")
        return value

    def opt_list(self, key: str) -> list[Any] | None:
        return self.list_(key) if self.has(key) else None

    def obj(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        if type(value) is not dict:
            raise self.fail(key, "an object")
        return value

    def str_list(self, key: str) -> tuple[str, ...]:
        items = self.list_(key) if self.has(key) else []
        if not all(type(i) is str for i in items):
            raise self.fail(key, "a list of strings")
        return tuple(items)

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.data.get(key)
        if value not in choices:
            raise self.fail(key, "one of " + ", ".join(repr(c) for c in choices))
        return str(value)

    def conn(self) -> int:
        value = self.int_("conn")
        if value < 1:
            raise self.fail("conn", "a positive integer")
        return value


def _sub(data: Any, kind: str, line: int | None) -> _Fields:
    if type(data) is not dict:
        raise TranscriptError(f"{kind}: expected an object", line=line)
    return _Fields(data, kind, line)


def _drop_none(out: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if v is not None}


# -- URLs ------------------------------------------------------------------------------------------


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


def _base_url(url: str) -> str:
    """The base URL as recorded: no credentials, no query, no fragment."""
    redacted = redact_url(url)
    return redacted.partition("?")[0]


# -- prompts -----------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
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
            content = _jsonable(list(message.content))
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
                            "output": _jsonable(r.output),
                            "is_error": bool(r.is_error),
                        }
                        for r in message.content
                    ],
                }
            )
    return out


def _content_from_json(f: _Fields) -> TextContent | FileContent | FileReferenceInput:
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
        f = _sub(item, "prompt message", line)
        role = f.choice("role", ("system", "user", "assistant", "tool"))
        if role == "system":
            messages.append(SystemMessage(f.str_("content")))
        elif role == "user":
            parts = [
                _content_from_json(_sub(p, "prompt content", line)) for p in f.list_("content")
            ]
            messages.append(UserMessage(tuple(parts)))
        elif role == "assistant":
            content = f.data.get("content")
            messages.append(AssistantMessage(tuple(content) if type(content) is list else ()))
        else:
            results = []
            for raw in f.list_("content"):
                r = _sub(raw, "tool result", line)
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


def _tool_to_json(tool: DynamicTool) -> dict[str, Any]:
    return _drop_none(
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": _jsonable(dict(tool.input_schema)),
        }
    )


def _tool_from_json(raw: Any, line: int | None) -> DynamicTool:
    f = _sub(raw, "tool", line)
    schema = f.obj("input_schema") if f.has("input_schema") else {}
    return DynamicTool(
        name=f.str_("name"), input_schema=schema, description=f.opt_str("description")
    )


# -- the header ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TranscriptSettings:
    """The session settings a replay needs (the ``SessionConfig`` fields that change what the
    core does), never the token. ``tools`` are the client tool definitions registered at chat
    creation."""

    organization_id: str | None = None
    model: str | None = None
    instructions: str | None = None
    tools: tuple[DynamicTool, ...] = ()
    workspace_id: str | None = None
    mcp_server_ids: tuple[str, ...] = ()
    plan_mode: str | None = None
    reasoning_effort: str | None = None
    busy_behavior: str | None = None
    request_timeout: float | None = None
    max_steps: int | None = None
    max_retries: int | None = None
    settle_deadline: float | None = None
    settle_retry_delay: float | None = None
    chat_id: str | None = None
    last_seen_message_id: int | None = None
    max_message_size: int | None = None

    @classmethod
    def from_config(cls, config: Any) -> TranscriptSettings:
        """The settings of a ``SessionConfig`` (``base_url`` and ``token`` are not settings)."""
        timeout = config.request_timeout
        return cls(
            organization_id=config.organization_id,
            model=config.model,
            instructions=config.instructions,
            tools=tuple(config.tools),
            workspace_id=config.workspace_id,
            mcp_server_ids=tuple(config.mcp_server_ids),
            plan_mode=config.plan_mode,
            reasoning_effort=config.reasoning_effort,
            busy_behavior=config.busy_behavior,
            request_timeout=float(timeout)
            if timeout is not None and math.isfinite(timeout)
            else None,
            max_steps=config.max_steps,
            max_retries=config.max_retries,
            settle_deadline=config.settle_deadline,
            settle_retry_delay=config.settle_retry_delay,
            chat_id=config.chat_id,
            last_seen_message_id=config.last_seen_message_id,
            max_message_size=config.max_message_size,
        )

    def config_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``SessionConfig`` (without ``base_url``/``token``); settings
        that were not recorded keep the config's defaults."""
        out: dict[str, Any] = {
            "organization_id": self.organization_id,
            "model": self.model,
            "instructions": self.instructions,
            "tools": self.tools,
            "workspace_id": self.workspace_id,
            "mcp_server_ids": self.mcp_server_ids,
            "plan_mode": self.plan_mode,
            "reasoning_effort": self.reasoning_effort,
            "busy_behavior": self.busy_behavior,
            "request_timeout": self.request_timeout,
            "chat_id": self.chat_id,
            "last_seen_message_id": self.last_seen_message_id,
        }
        for name in (
            "max_steps",
            "max_retries",
            "settle_deadline",
            "settle_retry_delay",
            "max_message_size",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def to_json(self) -> dict[str, Any]:
        out = {
            "organization_id": self.organization_id,
            "model": self.model,
            "instructions": self.instructions,
            "tools": [_tool_to_json(t) for t in self.tools] or None,
            "workspace_id": self.workspace_id,
            "mcp_server_ids": list(self.mcp_server_ids) or None,
            "plan_mode": self.plan_mode,
            "reasoning_effort": self.reasoning_effort,
            "busy_behavior": self.busy_behavior,
            "request_timeout": self.request_timeout,
            "max_steps": self.max_steps,
            "max_retries": self.max_retries,
            "settle_deadline": self.settle_deadline,
            "settle_retry_delay": self.settle_retry_delay,
            "chat_id": self.chat_id,
            "last_seen_message_id": self.last_seen_message_id,
            "max_message_size": self.max_message_size,
        }
        return _drop_none(out)

    @classmethod
    def from_json(cls, data: Any, line: int | None) -> TranscriptSettings:
        f = _sub(data, "settings", line)
        tools = tuple(_tool_from_json(t, line) for t in (f.opt_list("tools") or []))
        return cls(
            organization_id=f.opt_str("organization_id"),
            model=f.opt_str("model"),
            instructions=f.opt_str("instructions"),
            tools=tools,
            workspace_id=f.opt_str("workspace_id"),
            mcp_server_ids=f.str_list("mcp_server_ids"),
            plan_mode=f.opt_str("plan_mode"),
            reasoning_effort=f.opt_str("reasoning_effort"),
            busy_behavior=f.opt_str("busy_behavior"),
            request_timeout=f.opt_num("request_timeout"),
            max_steps=f.opt_int("max_steps"),
            max_retries=f.opt_int("max_retries"),
            settle_deadline=f.opt_num("settle_deadline"),
            settle_retry_delay=f.opt_num("settle_retry_delay"),
            chat_id=f.opt_str("chat_id"),
            last_seen_message_id=f.opt_int("last_seen_message_id"),
            max_message_size=f.opt_int("max_message_size"),
        )


@attrs.frozen(kw_only=True)
class Header:
    """The first line: what wrote the transcript, when, against which deployment."""

    version: int = FORMAT_VERSION
    library_version: str = __version__
    created_at: str = ""
    base_url: str = ""
    settings: TranscriptSettings = attrs.field(factory=TranscriptSettings)
    kind: ClassVar[str] = "header"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "format": FORMAT_NAME,
            "version": self.version,
            "library_version": self.library_version,
            "created_at": self.created_at,
            "base_url": _base_url(self.base_url),
            "settings": self.settings.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any, line: int | None) -> Header:
        if type(data) is not dict or data.get("kind") != "header":
            raise TranscriptError("the first line must be the transcript header", line=line)
        if data.get("format") != FORMAT_NAME:
            raise TranscriptError(f"not a transcript: 'format' must be {FORMAT_NAME!r}", line=line)
        f = _Fields(data, "header", line)
        version = f.int_("version")
        if version < 1:
            raise f.fail("version", "a positive integer")
        if version > FORMAT_VERSION:
            raise TranscriptVersionError(
                f"the transcript format version {version} is newer than this library reads "
                f"(up to {FORMAT_VERSION}); upgrade coder-agents to read it",
                line=line,
            )
        settings = TranscriptSettings.from_json(data.get("settings") or {}, line)
        return cls(
            version=version,
            library_version=f.opt_str("library_version") or "",
            created_at=f.opt_str("created_at") or "",
            base_url=f.opt_str("base_url") or "",
            settings=settings,
        )


# -- records -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TurnStarted:
    """A turn started: ``mode`` is ``generate`` or ``stream``; ``single_segment`` marks one
    model round trip (``Session.segment``); ``tools`` replaces the configured client tools for
    this turn when not ``None``."""

    t: float
    mode: str
    prompt: tuple[Message, ...]
    single_segment: bool = False
    tools: tuple[DynamicTool, ...] | None = None
    warnings: tuple[str, ...] = ()
    kind: ClassVar[str] = "turn"

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "mode": self.mode,
                "single_segment": self.single_segment or None,
                "prompt": prompt_to_json(list(self.prompt)),
                "tools": [_tool_to_json(t) for t in self.tools] if self.tools is not None else None,
                "warnings": list(self.warnings) or None,
            }
        )

    @classmethod
    def from_fields(cls, f: _Fields) -> TurnStarted:
        tools = f.opt_list("tools")
        return cls(
            t=f.time(),
            mode=f.choice("mode", ("generate", "stream")),
            single_segment=f.bool_("single_segment"),
            prompt=prompt_from_json(f.data.get("prompt"), line=f.line),
            tools=tuple(_tool_from_json(t, f.line) for t in tools) if tools is not None else None,
            warnings=f.str_list("warnings"),
        )


@attrs.frozen(kw_only=True)
class RestExchange:
    """One REST request and its outcome. ``sent`` is when it was sent, ``t`` when its outcome
    arrived. The request body is ``request`` (JSON) or ``request_bytes`` (the length of a
    binary body). The outcome is ``status`` with ``response`` (a JSON body),
    ``response_text`` (a non-JSON text body) or ``response_bytes`` (the length of a binary
    body) and the response ``content_type``; or ``error`` (a network failure message); or
    ``cancelled`` (abandoned before an outcome)."""

    t: float
    sent: float
    op: str
    method: str
    path: str
    request: Any = None
    request_bytes: int | None = None
    status: int | None = None
    response: Any = None
    response_text: str | None = None
    response_bytes: int | None = None
    content_type: str | None = None
    error: str | None = None
    cancelled: bool = False
    kind: ClassVar[str] = "rest"

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "sent": self.sent,
                "op": self.op,
                "method": self.method,
                "path": self.path,
                "request": self.request,
                "request_bytes": self.request_bytes,
                "status": self.status,
                "response": self.response,
                "response_text": self.response_text,
                "response_bytes": self.response_bytes,
                "content_type": self.content_type,
                "error": self.error,
                "cancelled": self.cancelled or None,
            }
        )

    @classmethod
    def from_fields(cls, f: _Fields) -> RestExchange:
        record = cls(
            t=f.time(),
            sent=f.time("sent") if f.has("sent") else f.time(),
            op=f.str_("op"),
            method=f.str_("method"),
            path=f.str_("path"),
            request=f.data.get("request"),
            request_bytes=f.opt_int("request_bytes"),
            status=f.opt_int("status"),
            response=f.data.get("response"),
            response_text=f.opt_str("response_text"),
            response_bytes=f.opt_int("response_bytes"),
            content_type=f.opt_str("content_type"),
            error=f.opt_str("error"),
            cancelled=f.bool_("cancelled"),
        )
        outcomes = (record.status is not None) + (record.error is not None) + record.cancelled
        if outcomes != 1:
            raise TranscriptError(
                "rest record: exactly one of 'status', 'error' and 'cancelled' must be set",
                line=f.line,
            )
        if record.status is not None and not 100 <= record.status <= 599:
            raise f.fail("status", "an HTTP status (100-599)")
        return record

    def http_response(self) -> HttpResponse | None:
        """The response to replay (``None`` for a network error or a cancelled request).
        A binary body is replayed as that many zero bytes."""
        if self.status is None:
            return None
        if self.response is not None:
            body = json.dumps(self.response, ensure_ascii=False).encode("utf-8")
        elif self.response_text is not None:
            body = self.response_text.encode("utf-8")
        else:
            body = bytes(self.response_bytes or 0)
        headers: tuple[tuple[str, str], ...] = ()
        if self.content_type is not None:
            headers = (("content-type", self.content_type),)
        return HttpResponse(status=self.status, body=body, headers=headers)


@attrs.frozen(kw_only=True)
class WsOpenRecord:
    """A stream connection was dialled; ``url`` is the dial URL without credentials (``None``
    when the connection failed before the upgrade request was written)."""

    t: float
    conn: int
    url: str | None = None
    kind: ClassVar[str] = "ws_open"

    def to_json(self) -> dict[str, Any]:
        return _drop_none({"kind": self.kind, "t": self.t, "conn": self.conn, "url": self.url})

    @classmethod
    def from_fields(cls, f: _Fields) -> WsOpenRecord:
        return cls(t=f.time(), conn=f.conn(), url=f.opt_str("url"))


@attrs.frozen(kw_only=True)
class WsAccept:
    """The upgrade was accepted (101)."""

    t: float
    conn: int
    kind: ClassVar[str] = "ws_accept"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "t": self.t, "conn": self.conn}

    @classmethod
    def from_fields(cls, f: _Fields) -> WsAccept:
        return cls(t=f.time(), conn=f.conn())


@attrs.frozen(kw_only=True)
class WsFrame:
    """One received text frame, verbatim (wire 4.2: usually a JSON array plus a newline)."""

    t: float
    conn: int
    text: str
    kind: ClassVar[str] = "ws_frame"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "t": self.t, "conn": self.conn, "text": self.text}

    @classmethod
    def from_fields(cls, f: _Fields) -> WsFrame:
        return cls(t=f.time(), conn=f.conn(), text=f.str_("text"))


@attrs.frozen(kw_only=True)
class WsClose:
    """The server's close frame."""

    t: float
    conn: int
    code: int
    reason: str = ""
    kind: ClassVar[str] = "ws_close"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "t": self.t,
            "conn": self.conn,
            "code": self.code,
            "reason": self.reason,
        }

    @classmethod
    def from_fields(cls, f: _Fields) -> WsClose:
        code = f.int_("code")
        if not 1000 <= code <= 4999:
            raise f.fail("code", "a WebSocket close code (1000-4999)")
        return cls(t=f.time(), conn=f.conn(), code=code, reason=f.opt_str("reason") or "")


@attrs.frozen(kw_only=True)
class WsReject:
    """The upgrade was answered with ``status``; ``body`` is the response body when it is
    text, ``body_bytes`` its length otherwise."""

    t: float
    conn: int
    status: int
    body: str | None = None
    body_bytes: int | None = None
    kind: ClassVar[str] = "ws_reject"

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "conn": self.conn,
                "status": self.status,
                "body": self.body,
                "body_bytes": self.body_bytes,
            }
        )

    @classmethod
    def from_fields(cls, f: _Fields) -> WsReject:
        status = f.int_("status")
        if not 200 <= status <= 599 or status == 101:
            raise f.fail("status", "an HTTP status other than 101")
        return cls(
            t=f.time(),
            conn=f.conn(),
            status=status,
            body=f.opt_str("body"),
            body_bytes=f.opt_int("body_bytes"),
        )

    def body_data(self) -> bytes:
        if self.body is not None:
            return self.body.encode("utf-8")
        return bytes(self.body_bytes or 0)


@attrs.frozen(kw_only=True)
class WsError:
    """The server broke the WebSocket protocol (``message`` says how)."""

    t: float
    conn: int
    message: str
    kind: ClassVar[str] = "ws_error"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "t": self.t, "conn": self.conn, "message": self.message}

    @classmethod
    def from_fields(cls, f: _Fields) -> WsError:
        return cls(t=f.time(), conn=f.conn(), message=f.str_("message"))


#: How a connection ended.
WS_END_HOW: Final = ("lost", "failed", "closed")


@attrs.frozen(kw_only=True)
class WsEnd:
    """The connection ended: ``lost`` (end of stream, after a close frame or not), ``failed``
    (a socket error, ``message``) or ``closed`` (the client closed it)."""

    t: float
    conn: int
    how: str
    message: str | None = None
    kind: ClassVar[str] = "ws_end"

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "conn": self.conn,
                "how": self.how,
                "message": self.message,
            }
        )

    @classmethod
    def from_fields(cls, f: _Fields) -> WsEnd:
        return cls(
            t=f.time(), conn=f.conn(), how=f.choice("how", WS_END_HOW), message=f.opt_str("message")
        )


def _call_to_json(call: ToolCall) -> dict[str, Any]:
    return {"tool_call_id": call.tool_call_id, "tool_name": call.tool_name, "input": call.input}


@attrs.frozen(kw_only=True)
class ToolRun:
    """Client tools ran: ``calls`` (what ``RunTools`` asked for, ``input`` as JSON text) and
    the ``outcomes`` reported, from ``sent`` until ``t``."""

    t: float
    sent: float
    calls: tuple[ToolCall, ...]
    outcomes: tuple[ToolOutcome, ...]
    kind: ClassVar[str] = "tools"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "t": self.t,
            "sent": self.sent,
            "calls": [_call_to_json(c) for c in self.calls],
            "outcomes": [
                {
                    "tool_call_id": o.tool_call_id,
                    "output": _jsonable(o.output),
                    "is_error": bool(o.is_error),
                }
                for o in self.outcomes
            ],
        }

    @classmethod
    def from_fields(cls, f: _Fields) -> ToolRun:
        calls = []
        for raw in f.list_("calls"):
            c = _sub(raw, "tool call", f.line)
            calls.append(
                ToolCall(
                    tool_call_id=c.str_("tool_call_id"),
                    tool_name=c.str_("tool_name"),
                    input=c.str_("input"),
                )
            )
        outcomes = []
        for raw in f.list_("outcomes"):
            o = _sub(raw, "tool outcome", f.line)
            outcomes.append(
                ToolOutcome(
                    tool_call_id=o.str_("tool_call_id"),
                    output=o.data.get("output"),
                    is_error=o.bool_("is_error"),
                )
            )
        return cls(
            t=f.time(),
            sent=f.time("sent") if f.has("sent") else f.time(),
            calls=tuple(calls),
            outcomes=tuple(outcomes),
        )


@attrs.frozen(kw_only=True)
class Cancel:
    """The caller cancelled the running turn (D22); ``reason`` names the cancellation."""

    t: float
    reason: str = ""
    kind: ClassVar[str] = "cancel"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "t": self.t, "reason": self.reason}

    @classmethod
    def from_fields(cls, f: _Fields) -> Cancel:
        return cls(t=f.time(), reason=f.opt_str("reason") or "")


#: Session calls a transcript may hold (H.3-H.5, H.1).
SESSION_CALLS: Final = ("interrupt", "archive", "dispose", "reset_session")


@attrs.frozen(kw_only=True)
class SessionCall:
    """A session call: ``interrupt`` (``wait``/``timeout`` as passed), ``archive``,
    ``dispose`` or ``reset_session``."""

    t: float
    name: str
    wait: bool = False
    timeout: float | None = None
    kind: ClassVar[str] = "call"

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "name": self.name,
                "wait": self.wait or None,
                "timeout": self.timeout,
            }
        )

    @classmethod
    def from_fields(cls, f: _Fields) -> SessionCall:
        return cls(
            t=f.time(),
            name=f.choice("name", SESSION_CALLS),
            wait=f.bool_("wait"),
            timeout=f.opt_num("timeout"),
        )


@attrs.frozen(kw_only=True)
class TurnEnd:
    """The live outcome of the turn that started last (``outcome_summary``)."""

    t: float
    outcome: dict[str, Any]
    kind: ClassVar[str] = "turn_end"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "t": self.t, "outcome": _jsonable(self.outcome)}

    @classmethod
    def from_fields(cls, f: _Fields) -> TurnEnd:
        return cls(t=f.time(), outcome=f.obj("outcome"))


Record: TypeAlias = (
    TurnStarted
    | RestExchange
    | WsOpenRecord
    | WsAccept
    | WsFrame
    | WsClose
    | WsReject
    | WsError
    | WsEnd
    | ToolRun
    | Cancel
    | SessionCall
    | TurnEnd
)

_RECORD_TYPES: Final[dict[str, Any]] = {
    cls.kind: cls
    for cls in (
        TurnStarted,
        RestExchange,
        WsOpenRecord,
        WsAccept,
        WsFrame,
        WsClose,
        WsReject,
        WsError,
        WsEnd,
        ToolRun,
        Cancel,
        SessionCall,
        TurnEnd,
    )
}


def record_from_json(data: Any, *, line: int | None = None) -> Record:
    """One record from its JSON object (strict: ``TranscriptError`` when malformed)."""
    if type(data) is not dict:
        raise TranscriptError("a record must be a JSON object", line=line)
    kind = data.get("kind")
    cls = _RECORD_TYPES.get(kind) if type(kind) is str else None
    if cls is None:
        raise TranscriptError(f"unknown record kind {kind!r}", line=line)
    record: Record = cls.from_fields(_Fields(data, str(kind), line))
    return record


# -- whole transcripts ---------------------------------------------------------------------------


def _line(value: dict[str, Any]) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (from user text) cannot be written as UTF-8: escape it.
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


@attrs.frozen(kw_only=True)
class Transcript:
    """A parsed transcript: the header and the records in file order."""

    header: Header
    records: tuple[Record, ...] = ()

    def lines(self) -> list[str]:
        """The JSONL lines (without newlines)."""
        return [_line(self.header.to_json())] + [_line(r.to_json()) for r in self.records]

    def dumps(self) -> str:
        """The transcript as text, one line per record, newline-terminated."""
        return "".join(line + "\n" for line in self.lines())

    def of(self, kind: type[Any]) -> list[Any]:
        """The records of one type, in order."""
        return [r for r in self.records if isinstance(r, kind)]


def parse_transcript(source: str | bytes | Iterable[str]) -> Transcript:
    """Read a transcript strictly: the header first, then one record per line (blank lines
    are allowed). Raises ``TranscriptError`` (with the line number) for a line that is not
    JSON or a record that is malformed, and ``TranscriptVersionError`` for a newer format."""
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TranscriptError(f"not UTF-8 text (byte {exc.start})") from None
    # Only "\n" ends a line: str.splitlines() would also split at U+0085 or U+2028, which
    # JSON text written without ASCII escapes may hold.
    lines: Iterable[str] = source.split("\n") if isinstance(source, str) else source
    header: Header | None = None
    records: list[Record] = []
    for number, raw in enumerate(lines, 1):
        text = raw.strip(" \t\r\n")
        if not text:
            continue
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise TranscriptError(f"not JSON ({exc})", line=number) from None
        if header is None:
            header = Header.from_json(data, number)
        else:
            records.append(record_from_json(data, line=number))
    if header is None:
        raise TranscriptError("empty transcript: no header line")
    return Transcript(header=header, records=tuple(records))


class TranscriptWriter:
    """Writes a transcript line by line through ``write`` (for example a text file's
    ``write``); each call writes one whole line, newline included."""

    def __init__(self, write: Callable[[str], object]) -> None:
        self._write = write
        self.lines_written = 0

    def header(self, header: Header) -> None:
        self._emit(header.to_json())

    def record(self, record: Record) -> None:
        self._emit(record.to_json())

    def _emit(self, value: dict[str, Any]) -> None:
        self._write(_line(value) + "\n")
        self.lines_written += 1


# -- outcomes ------------------------------------------------------------------------------------


def _error_summary(error: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, CoderAgentError):
        out["retryable"] = bool(error.retryable)
    if isinstance(error, CoderChatError | CoderApiError):
        out["kind"] = error.kind
    if isinstance(error, CoderApiError):
        out["status"] = error.status
    if isinstance(error, CoderStreamError):
        out["reason"] = error.reason
    return out


def _usage_summary(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, Usage):
        return None
    out = usage.to_dict()
    out.pop("raw", None)
    return out


def outcome_summary(outcome: object) -> dict[str, Any]:
    """A turn's outcome (a ``TurnResult`` or the error it raised) as JSON: text, reasoning,
    tool calls and results, usage, finish reason, error, chat id and cursor. The recorder
    writes it in ``turn_end``; a replay computes the same summary to compare."""
    if isinstance(outcome, BaseException):
        return {"error": _error_summary(outcome)}
    text = getattr(outcome, "text", None)
    if not isinstance(text, str):
        return {"error": {"type": type(outcome).__name__, "message": "not a turn result"}}
    calls: Sequence[ToolCall] = tuple(getattr(outcome, "tool_calls", ()))
    results: Sequence[ToolResult] = tuple(getattr(outcome, "tool_results", ()))
    steps = tuple(getattr(outcome, "steps", ()))
    error = getattr(outcome, "error", None)
    return {
        "text": text,
        "reasoning": getattr(outcome, "reasoning", ""),
        "finish_reason": getattr(outcome, "finish_reason", None),
        "usage": _usage_summary(getattr(outcome, "usage", None)),
        "steps": len(steps),
        "tool_calls": [_call_to_json(c) for c in calls],
        "step_tool_calls": [[_call_to_json(c) for c in s.tool_calls] for s in steps],
        "tool_results": [
            {
                "tool_call_id": r.tool_call_id,
                "tool_name": r.tool_name,
                "result": _jsonable(r.result),
                "is_error": r.is_error,
            }
            for r in results
        ],
        "settled_by": getattr(outcome, "settled_by", None),
        "chat_id": getattr(outcome, "chat_id", None),
        "last_seen_message_id": getattr(outcome, "last_seen_message_id", None),
        "error": _error_summary(error) if isinstance(error, BaseException) else None,
    }


# -- recording -----------------------------------------------------------------------------------


class Recorder(Protocol):
    """What an adapter tells a recorder (every call carries the ``now`` it fed the machine).

    The adapter calls ``begin`` once before anything else, then one method per observation:
    a turn starting or ending, each REST exchange (once its outcome is known, or when it is
    cancelled), each connection opened, the first bytes written on it (the upgrade request,
    from which only the request target is kept), each chunk of bytes received, its ending,
    each tool run, a cancellation, a session call. A recorder never raises into the adapter.
    """

    def begin(self, *, base_url: str, config: Any, created_at: str, now: float) -> None: ...

    def turn_started(
        self,
        *,
        mode: str,
        prompt: object,
        now: float,
        tools: Sequence[DynamicTool] | None = None,
        warnings: Sequence[str] = (),
        single_segment: bool = False,
    ) -> None: ...

    def turn_finished(self, outcome: object, now: float) -> None: ...

    def rest_exchange(
        self,
        request: HttpRequest,
        response: HttpResponse | None,
        *,
        sent: float,
        now: float,
        error: str | None = None,
    ) -> None: ...

    def connection_opened(self, action: OpenConnection, now: float) -> None: ...

    def data_sent(self, conn_id: int, data: bytes, now: float) -> None: ...

    def data_received(self, conn_id: int, data: bytes, now: float) -> None: ...

    def connection_lost(self, conn_id: int, now: float) -> None: ...

    def connection_failed(self, conn_id: int, message: str, now: float) -> None: ...

    def connection_closed(self, conn_id: int, now: float) -> None: ...

    def tools_run(
        self,
        calls: Sequence[ToolCall],
        outcomes: Sequence[ToolOutcome],
        *,
        sent: float,
        now: float,
    ) -> None: ...

    def cancelled(self, reason: BaseException | None, now: float) -> None: ...

    def session_call(
        self, name: str, now: float, *, wait: bool = False, timeout: float | None = None
    ) -> None: ...


class _Decoded:
    """What the passive decoder saw in one chunk (the recorder's own events)."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any = None) -> None:
        self.kind = kind
        self.value = value


class _PassiveDecoder:
    """Decodes the bytes a client received on one stream connection without taking part in
    it: h11 reads the upgrade answer (a 101, or a rejection with its body), then wsproto's
    frame parser reads the frames. Nothing is ever written, no key is checked (the client
    checks its own), and every violation is reported once and ends the decoding."""

    def __init__(self) -> None:
        self._http: h11.Connection | None = h11.Connection(h11.CLIENT)
        self._http.send(
            h11.Request(
                method="GET",
                target="/",
                headers=[("Host", "recorder"), ("Connection", "Upgrade"), ("Upgrade", "websocket")],
            )
        )
        self._http.send(h11.EndOfMessage())
        self._frames: FrameProtocol | None = None
        self._status: int | None = None
        self._body = bytearray()
        self._text: list[str] = []
        self.done = False

    def feed(self, data: bytes | None) -> list[_Decoded]:
        out: list[_Decoded] = []
        if self.done:
            return out
        try:
            if self._frames is None:
                self._feed_http(data, out)
            elif data is not None:
                self._feed_frames(data, out)
            else:
                self.done = True
        except (h11.ProtocolError, ParseFailed, ValueError, UnicodeError) as exc:
            if data is None and self._frames is None and self._status is None:
                pass  # the peer hung up before answering: an ordinary ending
            elif self._status is not None and self._frames is None:
                out.append(_Decoded("reject", (self._status, bytes(self._body))))
            else:
                out.append(_Decoded("error", f"WebSocket protocol error: {exc}"))
            self.done = True
        return out

    def _feed_http(self, data: bytes | None, out: list[_Decoded]) -> None:
        http = self._http
        assert http is not None
        http.receive_data(b"" if data is None else data)
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                break
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    rest, _closed = http.trailing_data
                    self._http = None
                    self._frames = FrameProtocol(client=True, extensions=[])
                    out.append(_Decoded("accept"))
                    if rest:
                        self._feed_frames(bytes(rest), out)
                    return
            elif isinstance(event, h11.Response):
                self._status = event.status_code
            elif isinstance(event, h11.Data):
                if len(self._body) < _RECORDER_MAX_MESSAGE:
                    self._body += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                if self._status is not None:
                    out.append(_Decoded("reject", (self._status, bytes(self._body))))
                self.done = True
                return
        if data is None:
            if self._status is not None:
                out.append(_Decoded("reject", (self._status, bytes(self._body))))
            self.done = True

    def _feed_frames(self, data: bytes, out: list[_Decoded]) -> None:
        frames = self._frames
        assert frames is not None
        frames.receive_bytes(data)
        for frame in frames.received_frames():
            opcode = frame.opcode
            if opcode is Opcode.TEXT or (opcode is Opcode.CONTINUATION and self._text):
                assert isinstance(frame.payload, str)
                self._text.append(frame.payload)
                if frame.message_finished:
                    out.append(_Decoded("text", "".join(self._text)))
                    self._text = []
            elif opcode is Opcode.CLOSE:
                payload = frame.payload
                assert isinstance(payload, tuple)
                out.append(_Decoded("close", (int(payload[0]), str(payload[1] or ""))))
                self.done = True
                return
            # Pings, pongs and binary messages carry nothing a replay needs.


class _Conn:
    """The recorder's view of one connection."""

    __slots__ = ("decoder", "ended", "host", "port", "tls", "url_known")

    def __init__(self, action: OpenConnection) -> None:
        self.host = action.host
        self.port = action.port
        self.tls = action.tls
        self.url_known = False
        self.ended = False
        self.decoder = _PassiveDecoder()

    def url(self, target: str) -> str:
        scheme = "wss" if self.tls else "ws"
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        netloc = host if self.port == default else f"{host}:{self.port}"
        return redact_url(f"{scheme}://{netloc}{target}")


def _request_target(data: bytes) -> str | None:
    """The target of an HTTP request line (``GET /path?q HTTP/1.1``); the rest of the bytes,
    headers included, is never looked at."""
    line = data.split(b"\r\n", 1)[0]
    pieces = line.split(b" ")
    if len(pieces) != 3 or not pieces[1].startswith(b"/"):
        return None
    try:
        return pieces[1].decode("ascii")
    except UnicodeDecodeError:
        return None


def _body_fields(data: bytes | None) -> tuple[Any, str | None, int | None]:
    """(JSON value, text, byte length) of a body: exactly one is set for a non-empty body."""
    if not data:
        return None, None, None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, None, len(data)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None, text, None
    if value is None:
        return None, text, None
    return _jsonable(value), None, None


class TranscriptRecorder:
    """A ``Recorder`` that writes a transcript through ``write`` (a text file's ``write``, a
    list's ``append``...). Pure: it reads no clock (times are the ``now`` values the adapter
    passes, relative to ``begin``) and opens nothing.

    A failing ``write`` is logged once and ends the recording; the session goes on.
    """

    def __init__(self, write: Callable[[str], object]) -> None:
        self._writer = TranscriptWriter(write)
        self._t0: float | None = None
        self._conns: dict[int, _Conn] = {}
        #: True once a write failed: nothing more is recorded.
        self.failed = False

    @property
    def started(self) -> bool:
        return self._t0 is not None

    def _t(self, now: float) -> float:
        if self._t0 is None:
            self._t0 = now
        return max(now - self._t0, 0.0)

    def _emit(self, record: Record | Header) -> None:
        if self.failed:
            return
        try:
            if isinstance(record, Header):
                self._writer.header(record)
            else:
                self._writer.record(record)
        except Exception as exc:
            self.failed = True
            logger.warning("transcript recording stopped: writing failed (%s)", type(exc).__name__)

    def _ensure_header(self, now: float) -> None:
        if self._t0 is None:
            self.begin(base_url="", config=None, created_at="", now=now)

    # -- the Recorder protocol -------------------------------------------------------------

    def begin(self, *, base_url: str, config: Any, created_at: str, now: float) -> None:
        """Write the header (only the first call does anything)."""
        if self._t0 is not None:
            return
        self._t0 = now
        settings = (
            TranscriptSettings() if config is None else TranscriptSettings.from_config(config)
        )
        self._emit(Header(created_at=created_at, base_url=base_url, settings=settings))

    def turn_started(
        self,
        *,
        mode: str,
        prompt: object,
        now: float,
        tools: Sequence[DynamicTool] | None = None,
        warnings: Sequence[str] = (),
        single_segment: bool = False,
    ) -> None:
        self._ensure_header(now)
        try:
            messages = normalize_prompt(prompt)
        except CoderAgentError:
            return  # the session refuses it too: no turn runs
        self._emit(
            TurnStarted(
                t=self._t(now),
                mode=mode,
                prompt=messages,
                single_segment=single_segment,
                tools=tuple(tools) if tools is not None else None,
                warnings=tuple(warnings),
            )
        )

    def turn_finished(self, outcome: object, now: float) -> None:
        self._ensure_header(now)
        self._emit(TurnEnd(t=self._t(now), outcome=outcome_summary(outcome)))

    def rest_exchange(
        self,
        request: HttpRequest,
        response: HttpResponse | None,
        *,
        sent: float,
        now: float,
        error: str | None = None,
    ) -> None:
        self._ensure_header(now)
        if request.json is not None:
            req_json: Any = _jsonable(request.json)
            req_bytes = None
        else:
            req_json, _, req_bytes = None, None, (len(request.body) if request.body else None)
        record = RestExchange(
            t=self._t(now),
            sent=self._t(sent),
            op=request.op,
            method=request.method,
            path=redact_url(request.path) if "?" in request.path else request.path,
            request=req_json,
            request_bytes=req_bytes,
            cancelled=response is None and error is None,
            error=error if response is None else None,
        )
        if response is not None:
            value, text, size = _body_fields(response.body)
            record = attrs.evolve(
                record,
                status=response.status,
                response=value,
                response_text=text,
                response_bytes=size,
                content_type=response.header("content-type"),
            )
        self._emit(record)

    def connection_opened(self, action: OpenConnection, now: float) -> None:
        self._ensure_header(now)
        self._conns[action.conn_id] = _Conn(action)

    def data_sent(self, conn_id: int, data: bytes, now: float) -> None:
        conn = self._conns.get(conn_id)
        if conn is None or conn.url_known or conn.ended:
            return
        conn.url_known = True
        target = _request_target(data)
        url = conn.url(target) if target is not None else None
        self._emit(WsOpenRecord(t=self._t(now), conn=conn_id, url=url))

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        conn = self._conns.get(conn_id)
        if conn is None or conn.ended:
            return
        self._decode(conn_id, conn, data, now)

    def _decode(self, conn_id: int, conn: _Conn, data: bytes | None, now: float) -> None:
        t = self._t(now)
        for item in conn.decoder.feed(data):
            kind = item.kind
            if kind == "text":
                self._emit(WsFrame(t=t, conn=conn_id, text=item.value))
            elif kind == "accept":
                self._emit(WsAccept(t=t, conn=conn_id))
            elif kind == "close":
                code, reason = item.value
                self._emit(WsClose(t=t, conn=conn_id, code=code, reason=reason))
            elif kind == "reject":
                status, raw = item.value
                try:
                    body: str | None = raw.decode("utf-8")
                    size: int | None = None
                except UnicodeDecodeError:
                    body, size = None, len(raw)
                self._emit(WsReject(t=t, conn=conn_id, status=status, body=body, body_bytes=size))
            else:
                self._emit(WsError(t=t, conn=conn_id, message=item.value))

    def _end(self, conn_id: int, how: str, message: str | None, now: float) -> None:
        conn = self._conns.pop(conn_id, None)
        if conn is None:
            return
        conn.ended = True
        if not conn.url_known:
            conn.url_known = True
            self._emit(WsOpenRecord(t=self._t(now), conn=conn_id, url=None))
        if how == "lost" and not conn.decoder.done:
            # What the end of stream completes (a rejection whose body was cut short).
            self._decode(conn_id, conn, None, now)
        self._emit(WsEnd(t=self._t(now), conn=conn_id, how=how, message=message))

    def connection_lost(self, conn_id: int, now: float) -> None:
        self._end(conn_id, "lost", None, now)

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        self._end(conn_id, "failed", message, now)

    def connection_closed(self, conn_id: int, now: float) -> None:
        self._end(conn_id, "closed", None, now)

    def tools_run(
        self,
        calls: Sequence[ToolCall],
        outcomes: Sequence[ToolOutcome],
        *,
        sent: float,
        now: float,
    ) -> None:
        self._ensure_header(now)
        self._emit(
            ToolRun(
                t=self._t(now),
                sent=self._t(sent),
                calls=tuple(calls),
                outcomes=tuple(o for o in outcomes if isinstance(o, ToolOutcome)),
            )
        )

    def cancelled(self, reason: BaseException | None, now: float) -> None:
        self._ensure_header(now)
        name = type(reason).__name__ if reason is not None else ""
        self._emit(Cancel(t=self._t(now), reason=name))

    def session_call(
        self, name: str, now: float, *, wait: bool = False, timeout: float | None = None
    ) -> None:
        if name not in SESSION_CALLS:
            return
        self._ensure_header(now)
        finite = timeout if timeout is not None and math.isfinite(timeout) else None
        self._emit(SessionCall(t=self._t(now), name=name, wait=bool(wait), timeout=finite))
