"""Transport events: observability of every REST call, WebSocket connection and segment
(wire 11; D24).

Each event is a small frozen class with the reference's ``type`` string (``http:request``,
``ws:redial``, ``segment:settle`` ...), snake_case fields and durations in float seconds.
``timestamp`` is wall-clock seconds supplied by the adapter (the core reads no clock).

``TransportEventSink`` delivers them to one optional callback. Producers check
``sink.enabled`` before building an event, so nothing is allocated when no callback is set;
exceptions raised by the callback are swallowed. Events never carry headers or tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar, TypeAlias

import attrs

__all__ = [
    "HttpErrorEvent",
    "HttpRequestEvent",
    "HttpResponseEvent",
    "SegmentSettleEvent",
    "SegmentStartEvent",
    "TransportEvent",
    "TransportEventSink",
    "WsCloseEvent",
    "WsDialEvent",
    "WsErrorEvent",
    "WsEventEvent",
    "WsOpenEvent",
    "WsRedialEvent",
]

logger = logging.getLogger("coder_proto")


@attrs.frozen(kw_only=True)
class HttpRequestEvent:
    """Before each REST request (each prefix-fallback attempt separately)."""

    id: int
    op: str
    method: str
    path: str
    timestamp: float = 0.0
    type: ClassVar[str] = "http:request"


@attrs.frozen(kw_only=True)
class HttpResponseEvent:
    """Response headers arrived, non-2xx included. ``duration`` is until headers."""

    id: int
    op: str
    method: str
    path: str
    status: int
    ok: bool
    duration: float
    timestamp: float = 0.0
    type: ClassVar[str] = "http:response"


@attrs.frozen(kw_only=True)
class HttpErrorEvent:
    """The request failed before a response (network error, cancellation)."""

    id: int
    op: str
    method: str
    path: str
    message: str
    duration: float
    timestamp: float = 0.0
    type: ClassVar[str] = "http:error"


@attrs.frozen(kw_only=True)
class WsDialEvent:
    """A stream connection is about to be opened. ``url`` has no credentials."""

    chat_id: str
    reader: int
    attempt: int
    url: str
    timestamp: float = 0.0
    type: ClassVar[str] = "ws:dial"


@attrs.frozen(kw_only=True)
class WsOpenEvent:
    """The WebSocket handshake completed."""

    chat_id: str
    reader: int
    attempt: int
    timestamp: float = 0.0
    type: ClassVar[str] = "ws:open"


@attrs.frozen(kw_only=True)
class WsEventEvent:
    """One decoded stream event at arrival, before the consumer sees it. ``forwarded`` is
    ``False`` for replayed deltas the episode filter suppressed (B.2) and for ignored events;
    ``ignored`` is ``True`` for an event naming another chat than the stream's (D31)."""

    chat_id: str
    reader: int
    attempt: int
    event: Any
    forwarded: bool
    timestamp: float = 0.0
    ignored: bool = False
    type: ClassVar[str] = "ws:event"


@attrs.frozen(kw_only=True)
class WsCloseEvent:
    """Exactly one per dial. ``code``/``reason`` only when the server or network closed it."""

    chat_id: str
    reader: int
    attempt: int
    code: int | None = None
    reason: str | None = None
    timestamp: float = 0.0
    type: ClassVar[str] = "ws:close"


@attrs.frozen(kw_only=True)
class WsErrorEvent:
    """A socket error, a rejected upgrade, or ``"failed to parse chat stream frame"``."""

    chat_id: str
    reader: int
    attempt: int
    message: str
    timestamp: float = 0.0
    type: ClassVar[str] = "ws:error"


@attrs.frozen(kw_only=True)
class WsRedialEvent:
    """Just before the backoff sleep of a redial (C.2.7)."""

    chat_id: str
    reader: int
    attempt: int
    consecutive_failures: int
    max_consecutive_failures: int
    backoff: float
    timestamp: float = 0.0
    type: ClassVar[str] = "ws:redial"


@attrs.frozen(kw_only=True)
class SegmentStartEvent:
    """A model round trip starts (G.7). ``segment`` counts from 1 per agent."""

    segment: int
    chat_id: str | None = None
    timestamp: float = 0.0
    type: ClassVar[str] = "segment:start"


@attrs.frozen(kw_only=True)
class SegmentSettleEvent:
    """The segment ended; exactly once per start (G.7). A clean settle has ``status`` and
    ``finish_reason``; a failure has ``error`` (``{"name", "message"}``) and maybe
    ``status``; a consumer teardown has neither."""

    segment: int
    duration: float
    chat_id: str | None = None
    reader: int | None = None
    status: str | None = None
    finish_reason: str | None = None
    error: dict[str, str] | None = None
    timestamp: float = 0.0
    type: ClassVar[str] = "segment:settle"


TransportEvent: TypeAlias = (
    HttpRequestEvent
    | HttpResponseEvent
    | HttpErrorEvent
    | WsDialEvent
    | WsOpenEvent
    | WsEventEvent
    | WsCloseEvent
    | WsErrorEvent
    | WsRedialEvent
    | SegmentStartEvent
    | SegmentSettleEvent
)
"""Any event an ``on_transport_event`` callback receives: HTTP, WebSocket and segment events."""


def _no_clock() -> float:
    return 0.0


class TransportEventSink:
    """Delivers transport events to one optional callback.

    ``wall_clock`` is supplied by the adapter (a wall-clock function); the core never reads a clock.
    Producers guard construction with ``if sink.enabled:``.
    """

    __slots__ = ("callback", "enabled", "wall_clock")

    def __init__(
        self,
        callback: Callable[[Any], object] | None = None,
        *,
        wall_clock: Callable[[], float] = _no_clock,
    ) -> None:
        self.callback = callback
        self.enabled = callback is not None
        self.wall_clock = wall_clock

    def now(self) -> float:
        return self.wall_clock()

    def emit(self, event: TransportEvent) -> None:
        """Deliver ``event``; exceptions from the callback are swallowed (wire 11). An
        awaitable returned by an async callback is the adapter's to schedule, not ours."""
        callback = self.callback
        if callback is None:
            return
        try:
            callback(event)
        except Exception:
            logger.debug("transport event handler raised; ignored", exc_info=True)
