"""The ``/watch`` stream: chat lifecycle events for every chat the user can see (wire 6).

``WatchMachine`` is the sans-I/O machine behind ``CoderChatClient.watch_chats()``. It speaks
the core's I/O vocabulary (``coder_proto._actions``) like the turn stream's reader, with the
watch's own rules, which differ from the per-chat stream's on purpose (wire 6):

==========================================  ===============================================
situation                                   what the machine does
==========================================  ===============================================
the client's prefix is not locked yet       preflight ``GET /api/v2/chats`` (op
                                            ``watch_chats``) through the selector; its error
                                            propagates (wire 1.5)
a frame with one event or an array          the events are queued for the consumer
an unparseable frame                        not terminal: the connection is dropped (close
                                            1000) and redialed
upgrade rejected with any 4xx (408 and 429  terminal ``CoderApiError(status, "GET",
included)                                   "{P}/watch")``
any other ending (close, drop, TCP/TLS      sleep the current backoff, double it (capped at
failure, a 5xx rejection, bad framing)      30 s), dial again; never gives up
the consumer takes an event (``take``)      the backoff returns to 1 s
the consumer stops (``cancel``)             close 1000 and end quietly, at once, even during
                                            the preflight or a backoff sleep
==========================================  ===============================================

No transport events are emitted for the watch socket (wire 6, 11); only the preflight's
``http:*`` events exist, and the adapter's driver emits those.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Generator
from typing import Any, Final

import attrs

from .._actions import CloseConnection, OpenConnection, SendData
from .._constants import WATCH_BACKOFF_CAP, WATCH_INITIAL_BACKOFF
from .._engine import CoreMachine, Wait
from .._errors import CoderApiError, CoderProtocolError
from .._rest.http import HttpRequest, HttpResponse, api_error_from_response
from .._rest.prefix import Completed, PrefixSelector
from .._wire.chats import ChatWatchEvent
from .._wire.events import parse_watch_frame
from .websocket import (
    CLOSE_NORMAL,
    WebSocketClient,
    WsClosed,
    WsEvent,
    WsFailed,
    WsRejected,
    WsText,
    websocket_url,
)

__all__ = ["WATCH_OP", "WatchBackoff", "WatchMachine"]

logger = logging.getLogger("coder_proto")

#: The ``op`` of the preflight and of the request a rejected upgrade is classified with (D24).
WATCH_OP: Final = "watch_chats"


@attrs.frozen(kw_only=True)
class WatchBackoff:
    """The watch's redial schedule (wire 6): ``initial`` seconds, multiplied by
    ``multiplier`` after every sleep up to ``cap``, back to ``initial`` whenever an event is
    delivered. There is no retry limit."""

    initial: float = WATCH_INITIAL_BACKOFF
    multiplier: float = 2.0
    cap: float = WATCH_BACKOFF_CAP

    def next_backoff(self, backoff: float) -> float:
        return min(backoff * self.multiplier, self.cap)


# Connection phases.
_CONNECTING: Final = "connecting"
_HANDSHAKE: Final = "handshake"
_OPEN: Final = "open"
_ENDED: Final = "ended"


class WatchMachine(CoreMachine[None]):
    """The watch subscription (wire 6; see the module docstring).

    Inputs: the ``CoreMachine`` ones plus ``connection_made``, ``connection_failed``,
    ``data_received``, ``connection_lost``. The consumer calls ``take()`` for the events
    delivered so far and ``cancel(now)`` to stop. ``done`` with ``cancelled`` set means the
    consumer stopped it; ``done`` otherwise means a terminal error, raised by ``result()``.
    """

    def __init__(
        self,
        selector: PrefixSelector,
        *,
        base_url: str,
        token: str | None,
        now: float,
        backoff: WatchBackoff | None = None,
    ) -> None:
        super().__init__(selector)
        self._base_url = base_url
        self._token = token
        self.policy = backoff if backoff is not None else WatchBackoff()
        #: Events received and not yet taken, in arrival order.
        self.events: collections.deque[ChatWatchEvent] = collections.deque()
        #: The wait before the next redial, in seconds.
        self.backoff: float = self.policy.initial
        #: The connection number: 1 for the first dial, +1 per redial.
        self.attempt = 0
        #: The watch path actually dialed (``{P}/watch``), once the prefix is known.
        self.path: str | None = None
        self._client: WebSocketClient | None = None
        self._phase = _ENDED
        self._inbox: collections.deque[tuple[str, bytes | str | None]] = collections.deque()
        self._start(now)

    def __repr__(self) -> str:
        return f"<WatchMachine attempt={self.attempt} done={self.done}>"

    @property
    def open(self) -> bool:
        """The watch socket is open: the upgrade of the current connection was accepted and
        it has not ended (wire 6). False while connecting, during the handshake, between a
        drop and the redial, and once the machine is done."""
        return self._phase == _OPEN

    # -- the consumer's side ------------------------------------------------------------------

    def take(self) -> list[ChatWatchEvent]:
        """The events received so far (the consumer now has them): delivering any resets
        the backoff to its initial value (wire 6)."""
        if not self.events:
            return []
        out = list(self.events)
        self.events.clear()
        self.backoff = self.policy.initial
        return out

    # -- connection inputs ----------------------------------------------------------------------

    def connection_made(self, conn_id: int, now: float) -> None:
        self._input(conn_id, "made", None, now)

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        self._input(conn_id, "failed", message, now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self._input(conn_id, "data", data, now)

    def connection_lost(self, conn_id: int, now: float) -> None:
        self._input(conn_id, "lost", None, now)

    def _input(self, conn_id: int, kind: str, payload: bytes | str | None, now: float) -> None:
        # Inputs of an earlier attempt's connection are stale and ignored.
        if conn_id == self.attempt and self._client is not None:
            self._inbox.append((kind, payload))
        self._step(now)

    # -- the subscription ---------------------------------------------------------------------

    def _run(self) -> Generator[None, None, None]:
        selector = self._selector
        if selector.needs_preflight:
            completed = yield from self._await_call(
                self._begin_call(selector.preflight_request(WATCH_OP)), _completed
            )
            prefix = selector.preflight_result(completed)
        else:
            prefix = selector.require_prefix()
        self.path = f"{prefix}/watch"
        url = websocket_url(self._base_url, self.path)
        while True:
            yield from self._connection(url)
            logger.warning(
                "the chat watch connection ended (connection %d); redialing in %.1f s",
                self.attempt,
                self.backoff,
            )
            yield from self._sleep_until(self.now + self.backoff)
            self.backoff = self.policy.next_backoff(self.backoff)

    def _connection(self, url: str) -> Wait[None]:
        """One connection, until it ends. A 4xx rejection raises its ``CoderApiError``; a
        local configuration error (bad URL or token characters) raises ``CoderAgentError``."""
        client = WebSocketClient(url, token=self._token)
        self.attempt += 1
        self._client = client
        self._phase = _CONNECTING
        self._inbox.clear()
        self._emit(
            OpenConnection(
                conn_id=self.attempt,
                host=client.host,
                port=client.port,
                tls=client.tls,
                server_hostname=client.server_hostname,
            )
        )
        try:
            while self._phase != _ENDED:
                while self._inbox and self._phase != _ENDED:
                    kind, payload = self._inbox.popleft()
                    self._handle(client, kind, payload)
                if self._phase != _ENDED:
                    yield from self._wait()
        finally:
            self._release(client)

    def _handle(self, client: WebSocketClient, kind: str, payload: bytes | str | None) -> None:
        if kind == "made":
            if self._phase == _CONNECTING:
                self._phase = _HANDSHAKE
                self._emit(SendData(conn_id=self.attempt, data=client.initiate()))
            return
        if kind == "failed":
            logger.debug("chat watch connection %d failed: %s", self.attempt, payload)
            # A rejection whose body was cut off is still a rejection (its status decides).
            self._on_events(client.receive_data(None))
            self._phase = _ENDED
            return
        data = payload if kind == "data" else None
        assert data is None or isinstance(data, bytes)
        self._on_events(client.receive_data(data))
        if kind == "lost":
            self._phase = _ENDED
        elif self._phase != _ENDED:
            # Pongs and the answer to a server close (D12: pings are always answered).
            pending = client.data_to_send()
            if pending:
                self._emit(SendData(conn_id=self.attempt, data=pending))

    def _on_events(self, ws_events: list[WsEvent]) -> None:
        for ws_event in ws_events:
            if type(ws_event) is WsText:
                try:
                    self.events.extend(parse_watch_frame(ws_event.text))
                except (CoderProtocolError, RecursionError):
                    # Not terminal for the watch (wire 6): drop the connection and redial.
                    logger.debug("unparseable chat watch frame; dropping the connection")
                    self._phase = _ENDED
                    return
            elif type(ws_event) is WsRejected:
                if 400 <= ws_event.status <= 499:
                    raise self._rejection(ws_event)
                self._phase = _ENDED
                return
            elif type(ws_event) is WsClosed or type(ws_event) is WsFailed:
                self._phase = _ENDED
                return
            else:
                self._phase = _OPEN

    def _rejection(self, event: WsRejected) -> CoderApiError:
        request = HttpRequest(op=WATCH_OP, method="GET", path=self.path or "")
        response = HttpResponse(
            status=event.status, body=event.body, headers=event.headers, reason=event.reason
        )
        return api_error_from_response(request, response)

    def _release(self, client: WebSocketClient) -> None:
        """Close the connection: a close frame when it is open, then ``CloseConnection``."""
        if self._client is not client:  # pragma: no cover - one connection at a time
            return
        client.close(CLOSE_NORMAL)
        pending = client.data_to_send()
        if pending:
            self._emit(SendData(conn_id=self.attempt, data=pending))
        self._emit(CloseConnection(conn_id=self.attempt))
        self._client = None
        self._phase = _ENDED
        self._inbox.clear()


def _completed(outcome: Any) -> Completed:
    assert isinstance(outcome, Completed)  # a failed exchange raises instead
    return outcome
