"""The transcript's header and records: one frozen class per record kind, each with
``to_json()`` and ``from_json()`` (strict: every malformed field is a ``TranscriptError``), and
``record_from_json`` choosing the class by ``kind``. The package docstring lists the kinds;
``docs/transcripts.md`` documents every field.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar, Final, TypeAlias

import attrs

from .._actions import ToolOutcome
from .._agent.prompt import Message
from .._outputs import ToolCall
from .._rest.http import HttpResponse
from .._version import __version__
from .._wire.chats import DynamicTool
from ._encoding import (
    base_url,
    call_to_json,
    jsonable,
    prompt_from_json,
    prompt_to_json,
    tool_from_json,
    tool_to_json,
)
from ._fields import Fields, TranscriptError, TranscriptVersionError, drop_none, sub_fields

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Cancel",
    "Header",
    "Record",
    "RestExchange",
    "SessionCall",
    "ToolRunRecord",
    "TranscriptSettings",
    "TurnEnd",
    "TurnStarted",
    "WsAccept",
    "WsClose",
    "WsEnd",
    "WsError",
    "WsFrame",
    "WsOpenRecord",
    "WsReject",
]


FORMAT_NAME: Final = "coder-agents-transcript"
"""The header's ``format`` value."""
FORMAT_VERSION: Final = 1
"""The format version this module writes and the newest it reads."""


# -- field helpers -------------------------------------------------------------------------------


# -- URLs ------------------------------------------------------------------------------------------


# -- prompts -----------------------------------------------------------------------------------


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
            "tools": [tool_to_json(t) for t in self.tools] or None,
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
        return drop_none(out)

    @classmethod
    def from_json(cls, data: Any, line: int | None) -> TranscriptSettings:
        f = sub_fields(data, "settings", line)
        tools = tuple(tool_from_json(t, line) for t in (f.opt_list("tools") or []))
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
            "base_url": base_url(self.base_url),
            "settings": self.settings.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any, line: int | None) -> Header:
        if type(data) is not dict or data.get("kind") != "header":
            raise TranscriptError("the first line must be the transcript header", line=line)
        if data.get("format") != FORMAT_NAME:
            raise TranscriptError(f"not a transcript: 'format' must be {FORMAT_NAME!r}", line=line)
        f = Fields(data, "header", line)
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
        return drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "mode": self.mode,
                "single_segment": self.single_segment or None,
                "prompt": prompt_to_json(list(self.prompt)),
                "tools": [tool_to_json(t) for t in self.tools] if self.tools is not None else None,
                "warnings": list(self.warnings) or None,
            }
        )

    @classmethod
    def from_fields(cls, f: Fields) -> TurnStarted:
        tools = f.opt_list("tools")
        return cls(
            t=f.time(),
            mode=f.choice("mode", ("generate", "stream")),
            single_segment=f.bool_("single_segment"),
            prompt=prompt_from_json(f.data.get("prompt"), line=f.line),
            tools=tuple(tool_from_json(t, f.line) for t in tools) if tools is not None else None,
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
        return drop_none(
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
    def from_fields(cls, f: Fields) -> RestExchange:
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
        return drop_none({"kind": self.kind, "t": self.t, "conn": self.conn, "url": self.url})

    @classmethod
    def from_fields(cls, f: Fields) -> WsOpenRecord:
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
    def from_fields(cls, f: Fields) -> WsAccept:
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
    def from_fields(cls, f: Fields) -> WsFrame:
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
    def from_fields(cls, f: Fields) -> WsClose:
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
        return drop_none(
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
    def from_fields(cls, f: Fields) -> WsReject:
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
    def from_fields(cls, f: Fields) -> WsError:
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
        return drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "conn": self.conn,
                "how": self.how,
                "message": self.message,
            }
        )

    @classmethod
    def from_fields(cls, f: Fields) -> WsEnd:
        return cls(
            t=f.time(), conn=f.conn(), how=f.choice("how", WS_END_HOW), message=f.opt_str("message")
        )


@attrs.frozen(kw_only=True)
class ToolRunRecord:
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
            "calls": [call_to_json(c) for c in self.calls],
            "outcomes": [
                {
                    "tool_call_id": o.tool_call_id,
                    "output": jsonable(o.output),
                    "is_error": bool(o.is_error),
                }
                for o in self.outcomes
            ],
        }

    @classmethod
    def from_fields(cls, f: Fields) -> ToolRunRecord:
        calls = []
        for raw in f.list_("calls"):
            c = sub_fields(raw, "tool call", f.line)
            calls.append(
                ToolCall(
                    tool_call_id=c.str_("tool_call_id"),
                    tool_name=c.str_("tool_name"),
                    input=c.str_("input"),
                )
            )
        outcomes = []
        for raw in f.list_("outcomes"):
            o = sub_fields(raw, "tool outcome", f.line)
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
    def from_fields(cls, f: Fields) -> Cancel:
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
        return drop_none(
            {
                "kind": self.kind,
                "t": self.t,
                "name": self.name,
                "wait": self.wait or None,
                "timeout": self.timeout,
            }
        )

    @classmethod
    def from_fields(cls, f: Fields) -> SessionCall:
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
        return {"kind": self.kind, "t": self.t, "outcome": jsonable(self.outcome)}

    @classmethod
    def from_fields(cls, f: Fields) -> TurnEnd:
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
    | ToolRunRecord
    | Cancel
    | SessionCall
    | TurnEnd
)
"""Any record of a transcript after its header (one JSON line each)."""

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
        ToolRunRecord,
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
    record: Record = cls.from_fields(Fields(data, str(kind), line))
    return record


# -- whole transcripts ---------------------------------------------------------------------------


# -- outcomes ------------------------------------------------------------------------------------


# -- recording -----------------------------------------------------------------------------------


# Pings, pongs and binary messages carry nothing a replay needs.
