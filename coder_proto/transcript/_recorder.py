"""Recording: ``TranscriptRecorder``, which turns what a ``Connection`` reports to its
``Recorder`` (one call per REST exchange, per chunk of received bytes, per tool run...) into
records. Pure: it reads no clock (times are the ``now`` values the
adapter passes) and opens nothing.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .._actions import OpenConnection, ToolOutcome
from .._agent.prompt import normalize_prompt
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .._recording import Recorder
from .._rest.http import HttpRequest, HttpResponse
from .._stream.websocket import (
    MAX_REJECTION_BODY,
    WsClosed,
    WsEvent,
    WsFailed,
    WsOpen,
    WsRejected,
    WsText,
)
from .._wire.chats import DynamicTool
from ._encoding import jsonable, redact_url
from ._format import TranscriptWriter
from ._outcomes import outcome_summary
from ._records import (
    SESSION_CALLS,
    Cancel,
    Header,
    Record,
    RestExchange,
    SessionCall,
    ToolRunRecord,
    TranscriptSettings,
    TurnEnd,
    TurnStarted,
    WsAccept,
    WsClose,
    WsEnd,
    WsError,
    WsFrame,
    WsOpenRecord,
    WsReject,
)

__all__ = ["Recorder", "TranscriptRecorder"]

logger = logging.getLogger("coder_proto")


class _Conn:
    """The recorder's view of one connection."""

    __slots__ = ("ended", "host", "port", "tls", "url_known")

    def __init__(self, action: OpenConnection) -> None:
        self.host = action.host
        self.port = action.port
        self.tls = action.tls
        self.url_known = False
        self.ended = False

    def url(self, target: str) -> str:
        scheme = "wss" if self.tls else "ws"
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        netloc = host if self.port == default else f"{host}:{self.port}"
        return redact_url(f"{scheme}://{netloc}{target}")


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
    return jsonable(value), None, None


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
            req_json: Any = jsonable(request.json)
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

    def upgrade_sent(self, conn_id: int, target: str, now: float) -> None:
        """The upgrade request went out on ``conn_id``: its target completes the URL (the
        request's headers, the token among them, never reach the recorder)."""
        conn = self._conns.get(conn_id)
        if conn is None or conn.url_known or conn.ended:
            return
        conn.url_known = True
        url = conn.url(target) if target.startswith("/") else None
        self._emit(WsOpenRecord(t=self._t(now), conn=conn_id, url=url))

    def ws_events(self, conn_id: int, events: Sequence[WsEvent], now: float) -> None:
        """What the reader decoded from the bytes ``conn_id`` received, in order."""
        conn = self._conns.get(conn_id)
        if conn is None or conn.ended:
            return
        t = self._t(now)
        for event in events:
            kind = type(event)
            if kind is WsText:
                assert isinstance(event, WsText)
                self._emit(WsFrame(t=t, conn=conn_id, text=event.text))
            elif kind is WsOpen:
                self._emit(WsAccept(t=t, conn=conn_id))
            elif kind is WsClosed:
                assert isinstance(event, WsClosed)
                if event.code is not None:  # an end of stream without a close frame: WsEnd
                    self._emit(
                        WsClose(t=t, conn=conn_id, code=event.code, reason=event.reason or "")
                    )
            elif kind is WsRejected:
                assert isinstance(event, WsRejected)
                # D30: the client keeps no more of a rejection body than this; nor does the
                # transcript.
                raw = event.body[:MAX_REJECTION_BODY]
                try:
                    body: str | None = raw.decode("utf-8")
                    size: int | None = None
                except UnicodeDecodeError:
                    body, size = None, len(raw)
                self._emit(
                    WsReject(t=t, conn=conn_id, status=event.status, body=body, body_bytes=size)
                )
            elif kind is WsFailed:
                assert isinstance(event, WsFailed)
                self._emit(WsError(t=t, conn=conn_id, message=event.message))

    def _end(self, conn_id: int, how: str, message: str | None, now: float) -> None:
        conn = self._conns.pop(conn_id, None)
        if conn is None:
            return
        conn.ended = True
        if not conn.url_known:
            conn.url_known = True
            self._emit(WsOpenRecord(t=self._t(now), conn=conn_id, url=None))
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
            ToolRunRecord(
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
