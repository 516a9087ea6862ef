"""The per-turn stream reader: replay dedup, redials and backoff (state machines B and C;
wire 4.5, 5, 11; D12-D15, D24).

``StreamReader`` owns one turn's chat stream across all its connections. It dials
``{prefix}/{chat_id}/stream`` with the turn's original ``after_id`` (every redial reuses the
same URL, B.3), filters replayed deltas by episode at arrival (B.2), forwards everything else,
and decides at each connection ending whether to give up or to redial after a backoff (C.2).
It speaks the core's I/O vocabulary (``coder_proto._actions``): inputs carry ``now``, outputs are
``OpenConnection`` / ``SendData`` / ``CloseConnection`` actions and a ``next_deadline()``.

The reader never raises on remote input. A terminal failure ends it with ``done`` set and
``error`` holding the typed error the segment surfaces (C.4):

======================================  ====================================================
ending                                  outcome
======================================  ====================================================
closed by the consumer (``close``)      done quietly, ``error`` stays ``None`` (C.2.1)
upgrade rejected with a terminal 4xx    ``CoderApiError`` (C.2.2, D12)
unparseable frame, WebSocket violation  ``CoderProtocolError`` "failed to parse chat stream
                                        frame" (C.2.3)
untrackable deltas outstanding          ``CoderStreamError`` reason ``untrackable-deltas``
                                        (C.2.4, D14)
a held ``error`` event, then the end    a failed connection like any other (D34): counted,
                                        redialed; the server's message is in the final
                                        ``CoderStreamError`` if the budget runs out
5th ending without progress             ``CoderStreamError`` reason
                                        ``redial-budget-exhausted`` (C.2.6)
any other ending                        ``ws:redial``, wait ``backoff``, dial again (C.2.7)
======================================  ====================================================

**Session errors (D34).** The server answers a stream whose first snapshot it cannot load, or
whose chat it cannot subscribe to, with one ``error`` event and then closes; the run goes on.
A run's own error always comes with ``status: error`` (D2). So an ``error`` event is forwarded
only when this connection's last status is ``error``, or when a ``status: error`` follows it
in the same frame (then it goes out just before that status). Any other ``error`` event is
held back: when the connection then ends it was the session's error, and the ending counts as
a failed connection (C.2.5) whose failure carries the server's message. When the connection
goes on instead, the first event of a later frame decides: a ``status: error`` makes the held
event the run's error (forwarded before it); anything else means the session survived, and
the held event is dropped with a warning.
"""

from __future__ import annotations

import collections
import logging
import marshal
from typing import Any, Final
from urllib.parse import quote, urlsplit, urlunsplit

import attrs

from .._actions import Action, CloseConnection, OpenConnection, SendData
from .._constants import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MAX_CONSECUTIVE_FAILURES,
    REDIAL_BACKOFF_CAP,
    REDIAL_BACKOFF_MULTIPLIER,
    REDIAL_INITIAL_BACKOFF,
    STATUS_ERROR,
    TRANSIENT_UPGRADE_STATUSES,
)
from .._errors import CoderAgentError, CoderNetworkError, CoderProtocolError, CoderStreamError
from .._rest.http import HttpRequest, HttpResponse, api_error_from_response, build_path
from .._rest.routes import check_unicode
from .._rest.settings import DIAL_TIMEOUT
from .._transport_events import (
    TransportEventSink,
    WsCloseEvent,
    WsDialEvent,
    WsErrorEvent,
    WsEventEvent,
    WsOpenEvent,
    WsRedialEvent,
)
from .._wire.events import (
    _DELTAS_START,
    _PIECE,
    DeltaWire,
    ErrorEvent,
    MessageEvent,
    MessagePartEvent,
    StatusEvent,
    StreamEvent,
    _checked_chat_id,
    _decode_deltas,
    delta_event,
    parse_text_frame,
    parse_untyped_frame,
    typed_events,
)
from .websocket import (
    CLOSE_NORMAL,
    WebSocketClient,
    WsClosed,
    WsEvent,
    WsFailed,
    WsObserver,
    WsOpen,
    WsRejected,
    WsText,
    websocket_url,
)

__all__ = [
    "PARSE_FAILURE_MESSAGE",
    "BackoffPolicy",
    "StreamReader",
    "budget_exhausted_message",
]

logger = logging.getLogger("coder_proto")

#: The terminal error and ``ws:error`` message for a frame that cannot be decoded (C.2.3).
PARSE_FAILURE_MESSAGE: Final = "failed to parse chat stream frame"
#: wire 5 item 4, verbatim.
UNTRACKABLE_MESSAGE: Final = (
    "chat stream dropped mid-turn and cannot be resumed: this server does not stamp deltas "
    "with history_version/generation_attempt/seq, so a redial would replay them"
)
#: The ``ws:error`` message of a socket error that carried none (wire 5).
DEFAULT_SOCKET_ERROR: Final = "chat stream socket error"
#: The ``op`` of the request value a rejected upgrade is classified with (D24 naming).
STREAM_OP: Final = "stream_events"
#: Network closes report this code on ``ws:close`` (RFC 6455 7.1.5: closed abnormally).
ABNORMAL_CLOSURE: Final = 1006


def budget_exhausted_message(path: str, failures: int, server_message: str | None = None) -> str:
    """wire 5 item 5, verbatim; when the last connection ended on a session error (D34), the
    server's message follows."""
    message = (
        f"Coder chat stream {path} could not be (re-)established after {failures} "
        "consecutive connection failures without progress"
    )
    if server_message is not None:
        message += f"; the last one ended with the server's stream error: {server_message}"
    return message


def session_error_message(event: ErrorEvent) -> str:
    """The server's message of a session error (D34)."""
    error = event.error
    return error.message if error is not None else "an error event without a payload"


@attrs.frozen(kw_only=True)
class BackoffPolicy:
    """The redial schedule as data (state machines C.1; wire 5; D12).

    Without progress the reader sleeps ``initial``, then multiplies by ``multiplier`` up to
    ``cap``, and gives up at the ``max_consecutive_failures``-th connection ending. Upgrade
    rejections with a 4xx status outside ``transient_upgrade_statuses`` are terminal.
    """

    initial: float = REDIAL_INITIAL_BACKOFF
    multiplier: float = REDIAL_BACKOFF_MULTIPLIER
    cap: float = REDIAL_BACKOFF_CAP
    max_consecutive_failures: int = MAX_CONSECUTIVE_FAILURES
    transient_upgrade_statuses: frozenset[int] = TRANSIENT_UPGRADE_STATUSES

    def next_backoff(self, backoff: float) -> float:
        """The wait after ``backoff``: multiplied, capped (C.2.7)."""
        return min(backoff * self.multiplier, self.cap)

    def schedule(self) -> tuple[float, ...]:
        """The sleeps taken before giving up when no connection makes progress (J.17): with
        the defaults ``(1.0, 2.0, 4.0, 8.0)``."""
        sleeps: list[float] = []
        backoff = self.initial
        for _ in range(max(self.max_consecutive_failures - 1, 0)):
            sleeps.append(backoff)
            backoff = self.next_backoff(backoff)
        return tuple(sleeps)

    def is_terminal_rejection(self, status: int) -> bool:
        """True for a 4xx upgrade status outside the transient set (C.2.2, D12)."""
        return 400 <= status <= 499 and status not in self.transient_upgrade_statuses


_DEFAULT_POLICY: Final = BackoffPolicy()


def _without_userinfo(url: str) -> str:
    """``url`` without ``user:password@``: what events and errors may show (wire 11). Such a
    URL is refused at dial time anyway (``WebSocketClient``); an unparseable one is shown as
    is, since no credentials can be found in it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


_deque_popleft = collections.deque.popleft
_deque_pop = collections.deque.pop
_deque_getitem = collections.deque.__getitem__
_deque_setitem = collections.deque.__setitem__
_deque_new = collections.deque.__new__


class EventQueue(collections.deque):  # type: ignore[type-arg]
    """The reader's queue of forwarded events: a ``deque`` of ``StreamEvent``.

    A delta the typed decode took waits in it as its ``DeltaWire`` Struct, and its
    ``MessagePartEvent`` is built when the queue hands it out (``popleft``, ``pop``, an
    index), or in place before anything else reads the queue (iteration, comparison,
    ``repr``, search, copy): whoever reads the queue sees events only, equal to those the
    frame's decode gives. ``TurnTranslator.ingest_run`` reads the Structs through the
    ``deque`` methods themselves, and builds no event for a delta it translates."""

    __slots__ = ("lazy",)

    def __init__(self, iterable: Any = ()) -> None:
        super().__init__(iterable)
        #: True while a Struct may wait in the queue.
        self.lazy = False

    def materialize(self) -> None:
        """Build the event of every Struct waiting in the queue, in place."""
        if not self.lazy:
            return
        self.lazy = False
        for index, item in enumerate(_deque_iter(self)):
            if type(item) is DeltaWire:
                # Replacing an item leaves the deque's iterator valid (its size is kept).
                _deque_setitem(self, index, delta_event(item))

    def popleft(self) -> Any:
        item = _deque_popleft(self)
        return delta_event(item) if type(item) is DeltaWire else item

    def pop(self) -> Any:  # type: ignore[override] # deque.pop takes no index
        item = _deque_pop(self)
        return delta_event(item) if type(item) is DeltaWire else item

    def __getitem__(self, index: Any) -> Any:
        item = _deque_getitem(self, index)
        if type(item) is DeltaWire:
            item = delta_event(item)
            _deque_setitem(self, index, item)
        return item


_deque_iter = collections.deque.__iter__


def _materializing(name: str) -> Any:
    base = getattr(collections.deque, name)

    def method(self: EventQueue, *args: Any) -> Any:
        self.materialize()
        return base(self, *args)

    method.__name__ = name
    return method


for _name in (
    "__iter__",
    "__reversed__",
    "__repr__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__contains__",
    "__copy__",
    "__reduce__",
    "__add__",
    "__mul__",
    "copy",
    "count",
    "index",
    "remove",
):
    setattr(EventQueue, _name, _materializing(_name))
del _name


def _fresh_queue() -> EventQueue:
    """An empty ``EventQueue``, without the Python ``__init__`` (a reader makes one for the
    first event after it let its queue go)."""
    queue: EventQueue = _deque_new(EventQueue)
    queue.lazy = False
    return queue


#: A reader's ``events`` while it holds no queue (``StreamReader.release_events``): one empty
#: queue shared by every reader, never written (the reader makes a fresh one for the next event).
NO_EVENTS: Final = _fresh_queue()


# Reader states. "connecting": OpenConnection issued; "handshake": upgrade request written;
# "open": upgrade accepted; "backoff": waiting for the redial deadline.
IDLE: Final = "idle"
CONNECTING: Final = "connecting"
HANDSHAKE: Final = "handshake"
OPEN: Final = "open"
BACKOFF: Final = "backoff"
DONE: Final = "done"


def _fingerprint(raw: dict[str, Any]) -> int:
    """What the replay filter keeps of a snapshot's raw JSON value: the hash of its marshal
    form (version 2: no shared references, so equal values in the same key order give equal
    bytes; nesting is bounded by the decoder, far below marshal's own limit). An open chat
    keeps an int per message instead of the decoded message (about 1.2 KiB for a prompt)."""
    return hash(marshal.dumps(raw, 2))


class StreamReader:
    """One turn's chat stream across its connections (state machines B, C; wire 4.5, 5, 11).

    Inputs (``now`` is monotonic seconds): ``start``, ``connection_made``,
    ``connection_failed``, ``data_received``, ``connection_lost``, ``tick``, ``close``. Inputs
    for a ``conn_id`` other than the live connection's (an earlier attempt) are ignored.

    Outputs: ``actions()`` (``OpenConnection(conn_id=attempt, ...)``, ``SendData``,
    ``CloseConnection``; every opened connection gets exactly one ``CloseConnection``),
    ``next_deadline()`` (the backoff wake-up), ``events`` (the forwarded stream events, in
    arrival order; the consumer pops them), ``done`` and ``error``.

    Guarantees:

    * ``url`` is fixed for the reader's life: the dial URL with the turn's original
      ``after_id``, reused on every redial, never with credentials (B.3, D12);
    * a delta with full episode coordinates is suppressed exactly when it belongs to the last
      forwarded delta's episode with a ``seq`` not above that delta's (B.2); every other
      event is forwarded, ``message`` snapshots always (J.18);
    * progress (a forwarded coordinate delta, or a snapshot whose raw JSON differs from the
      last one seen for its id) resets ``consecutive_failures`` and ``backoff`` (B.2);
    * every connection ending counts, a clean server close included (C.2.5, D12);
    * transport events (wire 11, D24) are built only when the sink is enabled; exactly one
      ``ws:close`` per dial.
    """

    __slots__ = (
        "_actions",
        "_client",
        "_deadline",
        "_dial_url",
        "_foreign_warned",
        "_held",
        "_last_failure",
        "_last_ga",
        "_last_hv",
        "_last_seq",
        "_max_committed_id",
        "_max_message_size",
        "_run_failed",
        "_sink",
        "_snapshots",
        "_token",
        "_untrackable",
        "after_id",
        "attempt",
        "backoff",
        "chat_id",
        "consecutive_failures",
        "error",
        "events",
        "observer",
        "path",
        "policy",
        "progress_events",
        "reader_id",
        "state",
        "url",
    )

    def __init__(
        self,
        *,
        chat_id: str,
        base_url: str,
        prefix: str,
        after_id: int | None,
        token: str | None,
        reader_id: int,
        policy: BackoffPolicy = _DEFAULT_POLICY,
        sink: TransportEventSink | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        self.chat_id = chat_id
        self.reader_id = reader_id
        self.after_id = after_id
        self.policy = policy
        stream_path = f"{prefix}/{quote(check_unicode(chat_id, 'chat_id'), safe='')}/stream"
        query = {"after_id": after_id}
        self._dial_url = websocket_url(base_url, stream_path, query)
        #: The dial URL (B.3): fixed, reused on every redial; never with credentials.
        self.url: str = _without_userinfo(self._dial_url)
        #: The same, relative to the base URL, for errors and transport events.
        self.path: str = build_path(stream_path, query)
        self._token = token
        self._max_message_size = max_message_size
        self._sink = sink if sink is not None and sink.enabled else None

        #: Forwarded stream events in arrival order; the consumer pops them. Read it anew
        #: after each step: the reader lets an empty queue go (``release_events``) and makes
        #: a fresh one for the next event.
        self.events: collections.deque[StreamEvent] = _fresh_queue()
        self.error: CoderAgentError | None = None
        #: The connection number; 1 for the first dial, +1 per redial.
        self.attempt = 0
        self.consecutive_failures = 0
        #: The next backoff, in seconds.
        self.backoff: float = policy.initial
        #: How many events counted as forward progress (B.2), over the reader's life.
        self.progress_events = 0
        self.state: str = IDLE

        self._client: WebSocketClient | None = None
        self._actions: list[Action] = []
        self._deadline: float | None = None
        self._last_failure: CoderAgentError | None = None
        # Replay dedup memory (B.1).
        self._last_hv: int | None = None
        self._last_ga: int | None = None
        self._last_seq: int | None = None
        # The fingerprint of each snapshot's raw JSON by message id (``_fingerprint``).
        self._snapshots: dict[int, int] = {}
        self._max_committed_id: int = after_id if after_id is not None else 0
        self._untrackable = False
        #: The dial attempt whose foreign event was logged (D31: once per connection).
        self._foreign_warned: int | None = None
        # D34, per connection: whether the last status was ``error`` (error events are then
        # the run's), and the error events held back.
        self._run_failed = False
        self._held: list[ErrorEvent] = []
        #: Hears each upgrade sent and every event the connections decoded (a transcript
        #: recorder), or ``None``.
        self.observer: WsObserver | None = None

    def __repr__(self) -> str:
        return (
            f"<StreamReader reader={self.reader_id} chat_id={self.chat_id!r} "
            f"attempt={self.attempt} state={self.state}>"
        )

    # -- outputs ---------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once the reader ended: closed by the consumer or a terminal failure."""
        return self.state == DONE

    @property
    def untrackable_deltas(self) -> bool:
        """True while a delta without episode coordinates is outstanding (B.1)."""
        return self._untrackable

    def actions(self) -> list[Action]:
        """Drain the actions queued since the last call, in order."""
        out = self._actions
        self._actions = []
        return out

    def next_deadline(self) -> float | None:
        """When ``tick`` must be called (the end of the backoff wait or of the dial's bound),
        or ``None``."""
        return self._deadline

    def release_events(self) -> None:
        """Let the event queue go: ``events`` is ``NO_EVENTS`` until the next event makes a
        fresh queue. The consumer calls it once it took every event and the stream may stay
        quiet for a while: an empty ``deque`` keeps a block of 64 slots (about 0.75 KiB an
        open, idle chat would hold)."""
        self.events = NO_EVENTS

    # -- inputs ----------------------------------------------------------------------------

    def start(self, now: float) -> None:
        """Dial the first connection. Only the first call does anything."""
        if self.state == IDLE:
            self._dial(now)

    def connection_made(self, conn_id: int, now: float) -> None:
        """The TCP/TLS connection is up: write the upgrade request."""
        client = self._client
        if client is None or conn_id != self.attempt or self.state != CONNECTING:
            return
        self.state = HANDSHAKE
        self._actions.append(SendData(conn_id=conn_id, data=client.initiate()))
        if self.observer is not None:
            self.observer.upgrade_sent(conn_id, client.target, now)

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        """The connection failed (TCP, TLS, DNS, or a socket error later on): an ordinary
        connection ending (D12)."""
        client = self._client
        if client is None or conn_id != self.attempt:
            return
        # A rejection whose body was cut off is still a rejection (its status decides).
        events = client.receive_data(None)
        if self.observer is not None and events:
            self.observer.ws_events(conn_id, events, now)
        for event in events:
            if type(event) is WsRejected:
                self._on_rejected(event, now)
                return
        self._fail_dial(message or DEFAULT_SOCKET_ERROR, now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        """Bytes arrived on the connection. Frames are decoded and filtered at arrival, in
        frame order (B.2)."""
        client = self._client
        if client is None or conn_id != self.attempt or self.state not in (HANDSHAKE, OPEN):
            return
        events = client.receive_data(data)
        if self.observer is not None and events:
            self.observer.ws_events(conn_id, events, now)
        self._on_ws_events(events, now)
        if self._client is client:
            pending = client.data_to_send()
            if pending:
                self._actions.append(SendData(conn_id=conn_id, data=pending))

    def connection_lost(self, conn_id: int, now: float) -> None:
        """End of stream or reset on the connection."""
        client = self._client
        if client is None or conn_id != self.attempt:
            return
        if self.state == CONNECTING:
            self.connection_failed(conn_id, "connection closed before it was established", now)
            return
        events = client.receive_data(None)
        if self.observer is not None and events:
            self.observer.ws_events(conn_id, events, now)
        self._on_ws_events(events, now)

    def tick(self, now: float) -> None:
        """Time passed: at the end of the backoff wait, dial again (C.2.7); a dial whose
        upgrade is not answered within ``DIAL_TIMEOUT`` of its start fails like any dial
        (D29: it counts in the redial budget)."""
        deadline = self._deadline
        if deadline is None or now < deadline:
            return
        if self.state == BACKOFF:
            self._deadline = None
            self.backoff = self.policy.next_backoff(self.backoff)
            self._dial(now)
        elif self.state in (CONNECTING, HANDSHAKE):
            self._deadline = None
            self._fail_dial(f"the upgrade was not answered within {DIAL_TIMEOUT:g} s", now)

    def close(self, now: float) -> None:
        """The consumer is done (C.2.1): close an open connection with 1000 and end quietly.
        Idempotent."""
        if self.state == DONE:
            return
        client = self._client
        self.state = DONE
        self._deadline = None
        self._take_held()
        if client is not None:
            client.close(CLOSE_NORMAL)
            self._release()
            self._emit_close(None, None)

    # -- connection handling ---------------------------------------------------------------

    def _dial(self, now: float) -> None:
        self.attempt += 1
        self._run_failed = False
        sink = self._sink
        if sink is not None:
            sink.emit(
                WsDialEvent(
                    chat_id=self.chat_id,
                    reader=self.reader_id,
                    attempt=self.attempt,
                    url=self.url,
                    timestamp=sink.now(),
                )
            )
        try:
            client = WebSocketClient(
                self._dial_url, token=self._token, max_message_size=self._max_message_size
            )
        except CoderAgentError as exc:
            # A local configuration error (bad scheme, bad header): terminal at once (D12).
            self._emit_error(exc.message)
            self._emit_close(None, None)
            exc.chat_id = self.chat_id
            self._fail(exc)
            return
        self._client = client
        self.state = CONNECTING
        self._deadline = now + DIAL_TIMEOUT  # D29: connect to the upgrade's answer
        self._actions.append(
            OpenConnection(
                conn_id=self.attempt,
                host=client.host,
                port=client.port,
                tls=client.tls,
                server_hostname=client.server_hostname,
            )
        )

    def _release(self) -> None:
        """Flush what the connection queued (a close frame), then close it."""
        client = self._client
        if client is None:  # pragma: no cover - callers hold a live client
            return
        pending = client.data_to_send()
        if pending:
            self._actions.append(SendData(conn_id=self.attempt, data=pending))
        self._actions.append(CloseConnection(conn_id=self.attempt))
        self._client = None

    def _on_ws_events(self, ws_events: list[WsEvent], now: float) -> None:
        for ws_event in ws_events:
            if type(ws_event) is WsText:
                if not self._on_frame(ws_event.text, now):
                    return
            elif type(ws_event) is WsOpen:
                self.state = OPEN
                self._deadline = None
                sink = self._sink
                if sink is not None:
                    sink.emit(
                        WsOpenEvent(
                            chat_id=self.chat_id,
                            reader=self.reader_id,
                            attempt=self.attempt,
                            timestamp=sink.now(),
                        )
                    )
                if self._client is None:  # a transport-event handler closed the reader
                    return
            elif type(ws_event) is WsClosed:
                self._on_closed(ws_event, now)
                return
            elif type(ws_event) is WsRejected:
                self._on_rejected(ws_event, now)
                return
            else:
                assert type(ws_event) is WsFailed
                self._take_held()
                self._release()
                self._emit_error(ws_event.message)
                self._emit_close(None, None)
                failure = CoderProtocolError(ws_event.message, chat_id=self.chat_id)
                if ws_event.handshake:
                    # The upgrade's answer is wrong (a bad Sec-WebSocket-Accept ...): say so,
                    # not that a frame failed to parse.
                    self._fail(failure)
                else:
                    self._parse_failure(failure)
                return

    def _on_frame(self, text: str, now: float) -> bool:
        """Decode one frame and run the replay filter on each event (B.2). False when the
        connection ended (terminal parse failure, or the consumer closed it meanwhile).

        A frame of one delta of this chat, what a streamed turn sends nearly every time, is
        filtered here as soon as it is decoded; every other frame goes through the loop
        below, which gives the same result for it."""
        sink = self._sink
        try:
            # A delta waits in the queue as the Struct the typed decode made (``EventQueue``);
            # a transport event needs the event itself, built at arrival.
            if sink is None:
                typed = None
                if len(text) <= _PIECE or text.startswith(_DELTAS_START):
                    try:
                        typed = _decode_deltas(text)
                    except (ValueError, RecursionError):
                        # msgspec's errors (a lone surrogate's too): the general way decides.
                        pass
                    else:
                        if len(typed) == 1 and not self._held:
                            wire = typed[0]
                            own = self.chat_id
                            # This chat's delta, its id the one last checked (wire 3.9).
                            if (
                                type(wire) is DeltaWire
                                and wire.chat_id == own
                                and own == _checked_chat_id[0]
                            ):
                                # The loop below for this one event, inline. The delta
                                # keeps the stream's one copy of the chat id, as
                                # ``typed_events`` gives it.
                                wire.chat_id = own
                                payload = wire.message_part
                                seq = payload.seq
                                hv = payload.history_version
                                ga = payload.generation_attempt
                                if seq is None or hv is None or ga is None:
                                    self._untrackable = True
                                else:
                                    last_seq = self._last_seq
                                    if (
                                        last_seq is not None
                                        and seq <= last_seq
                                        and hv == self._last_hv
                                        and ga == self._last_ga
                                    ):
                                        return True
                                    self._last_hv = hv
                                    self._last_ga = ga
                                    self._last_seq = seq
                                    # _progress, inline: the budget and backoff restart
                                    # (the backoff grows only after a failure counts).
                                    self.progress_events += 1
                                    if self.consecutive_failures:
                                        self.consecutive_failures = 0
                                        self.backoff = self.policy.initial
                                queue: Any = self.events
                                if queue is NO_EVENTS:
                                    queue = self.events = _fresh_queue()
                                queue.append(wire)
                                queue.lazy = True
                                return True
                        typed = typed_events(typed)
                decoded: list[Any] = parse_untyped_frame(text) if typed is None else typed
            else:
                decoded = parse_text_frame(text)
        except (CoderProtocolError, RecursionError) as exc:
            client = self._client
            assert client is not None  # frames only arrive on a live connection
            client.close(CLOSE_NORMAL)
            self._take_held()
            self._release()
            self._emit_error(PARSE_FAILURE_MESSAGE)
            self._emit_close(None, None)
            cause = (
                exc
                if isinstance(exc, CoderProtocolError)
                else CoderProtocolError("stream frame nested too deeply", chat_id=self.chat_id)
            )
            self._parse_failure(cause)
            return False
        queue = self.events
        if queue is NO_EVENTS:
            queue = self.events = _fresh_queue()
        append = queue.append
        # The episode high-water mark and the progress count live in locals for the loop:
        # a frame carries up to 256 deltas (wire 4.2) and this is the per-delta cost.
        last_hv, last_ga, last_seq = self._last_hv, self._last_ga, self._last_seq
        progress = 0
        lazy = False
        own = self.chat_id
        if self._held:
            self._resolve_held(decoded)
        for event in decoded:
            foreign = event.chat_id
            if type(event) is DeltaWire and (not foreign or foreign == own):
                # This chat's delta, as the typed decode took it: its coordinates are ints or
                # absent, and no transport event is made (a reader with a sink builds every
                # event). Another chat's goes the general way below.
                payload = event.message_part
                seq = payload.seq
                if seq is not None and payload.history_version is not None:
                    hv = payload.history_version
                    ga = payload.generation_attempt
                    if ga is None:
                        self._untrackable = True
                    elif (
                        last_seq is not None and seq <= last_seq and hv == last_hv and ga == last_ga
                    ):
                        continue
                    else:
                        last_hv, last_ga, last_seq = hv, ga, seq
                        progress += 1
                else:
                    self._untrackable = True
                append(event)
                lazy = True
                continue
            forwarded = True
            ignored = False
            if foreign and foreign != own:
                # D31: another chat's event is not this stream's; it is seen, never used.
                forwarded = False
                ignored = True
                if self._foreign_warned != self.attempt:
                    self._foreign_warned = self.attempt
                    logger.warning(
                        "chat %s: the stream sent an event for another chat; ignoring such "
                        "events on this connection",
                        own,
                    )
            elif type(event) is MessagePartEvent:
                hv = event.history_version
                ga = event.generation_attempt
                seq = event.seq
                # D14: coordinates count only when all three are ints (bools are not).
                if type(hv) is int and type(ga) is int and type(seq) is int:
                    if last_seq is not None and seq <= last_seq and hv == last_hv and ga == last_ga:
                        forwarded = False
                    else:
                        last_hv, last_ga, last_seq = hv, ga, seq
                        progress += 1
                else:
                    self._untrackable = True
            elif type(event) is MessageEvent:
                message = event.message
                message_id = message.id
                fingerprint = _fingerprint(message.raw)
                if self._snapshots.get(message_id) != fingerprint:
                    self._snapshots[message_id] = fingerprint
                    progress += 1
                if message_id > self._max_committed_id:
                    # The commit finalised the outstanding deltas into snapshots (B.2).
                    self._max_committed_id = message_id
                    self._untrackable = False
            elif type(event) is StatusEvent:
                self._run_failed = event.status == STATUS_ERROR
                if self._run_failed and self._held:
                    # D34: a status error after held errors: they were the run's (D2 peek).
                    self._release_held()
            elif type(event) is ErrorEvent and not self._run_failed:
                # D34: no status error before it; held until its frame or connection tells.
                self._held.append(event)
                continue
            if sink is not None:
                if progress:
                    # A handler observes the reader as of this event.
                    self._progress(progress)
                    progress = 0
                sink.emit(
                    WsEventEvent(
                        chat_id=self.chat_id,
                        reader=self.reader_id,
                        attempt=self.attempt,
                        event=event,
                        forwarded=forwarded,
                        ignored=ignored,
                        timestamp=sink.now(),
                    )
                )
            if forwarded:
                append(event)
        self._last_hv, self._last_ga, self._last_seq = last_hv, last_ga, last_seq
        if lazy:
            queue.lazy = True
        if progress:
            # _progress, inline: once per frame, and frames often carry one event.
            self.progress_events += progress
            self.consecutive_failures = 0
            self.backoff = self.policy.initial
        return self._client is not None

    # -- session errors (D34) --------------------------------------------------------------

    def _resolve_held(self, decoded: list[StreamEvent]) -> None:
        """A later frame arrived while error events are held: its first event of this chat
        decides. A status ``error`` makes them the run's errors (the status branch releases
        them); anything else means the session went on, and they are dropped."""
        own = self.chat_id
        for event in decoded:
            if event.chat_id and event.chat_id != own:
                continue
            if not (type(event) is StatusEvent and event.status == STATUS_ERROR):
                self._drop_held()
            return

    def _release_held(self) -> None:
        """Forward the held error events, just before the status error that makes them the
        run's."""
        held = self._held
        self._held = []
        for event in held:
            self._emit_event(event, forwarded=True)
            self.events.append(event)

    def _drop_held(self) -> None:
        """The connection went on after the held error events without failing the run: they
        were neither the session's error nor the run's. Dropped, with a warning."""
        held = self._held
        self._held = []
        for event in held:
            self._emit_event(event, forwarded=False)
        logger.warning(
            "chat %s: the stream sent an error event (%s) and went on without a run error; "
            "ignoring it",
            self.chat_id,
            session_error_message(held[-1]),
        )

    def _take_held(self) -> str | None:
        """The connection ended: the held error event was the session's error (D34). Returns
        the server's message (of the last one held), or ``None`` when nothing was held."""
        held = self._held
        if not held:
            return None
        self._held = []
        for event in held:
            self._emit_event(event, forwarded=False)
        return session_error_message(held[-1])

    def _progress(self, count: int) -> None:
        """Forward progress (B.2): ``count`` more events; the budget and backoff restart."""
        self.progress_events += count
        self.consecutive_failures = 0
        self.backoff = self.policy.initial

    def _on_closed(self, event: WsClosed, now: float) -> None:
        server_message = self._take_held()
        self._release()
        code = event.code
        if code is None:
            self._emit_close(ABNORMAL_CLOSURE, None)
            description = "chat stream connection lost (no close frame)"
        else:
            self._emit_close(code, event.reason or None)
            description = f"chat stream closed by the server (code {code})"
            if event.reason:
                description += f": {event.reason}"
        if server_message is not None:
            description += f" after a stream session error: {server_message}"
        self._ended(
            CoderNetworkError(description, method="GET", path=self.path, chat_id=self.chat_id),
            now,
            server_message,
        )

    def _fail_dial(self, message: str, now: float) -> None:
        """The dial failed (the connection, or its upgrade in time), or an open connection
        failed: release the socket, report the error and the abnormal close, and end the
        attempt with a network error."""
        server_message = self._take_held()
        self._release()
        self._emit_error(message)
        self._emit_close(ABNORMAL_CLOSURE, None)
        description = f"chat stream connection failed: {message}"
        if server_message is not None:
            description += f" after a stream session error: {server_message}"
        self._ended(
            CoderNetworkError(description, method="GET", path=self.path, chat_id=self.chat_id),
            now,
            server_message,
        )

    def _on_rejected(self, event: WsRejected, now: float) -> None:
        self._release()
        self._emit_error(f"Unexpected server response: {event.status}")
        self._emit_close(ABNORMAL_CLOSURE, None)
        request = HttpRequest(op=STREAM_OP, method="GET", path=self.path)
        response = HttpResponse(
            status=event.status, body=event.body, headers=event.headers, reason=event.reason
        )
        error = api_error_from_response(request, response, chat_id=self.chat_id)
        if self.policy.is_terminal_rejection(event.status):
            self._fail(error)
        else:
            self._ended(error, now)

    def _parse_failure(self, cause: CoderProtocolError) -> None:
        error = CoderProtocolError(PARSE_FAILURE_MESSAGE, chat_id=self.chat_id)
        error.__cause__ = cause
        self._fail(error)

    def _ended(
        self, failure: CoderAgentError, now: float, server_message: str | None = None
    ) -> None:
        """C.2 steps 4-7 for a connection that ended without a terminal verdict of its own;
        ``server_message`` is the server's message when it ended on a session error (D34)."""
        if self.state == DONE:  # the consumer closed the reader meanwhile (C.2.1)
            return
        if self._untrackable:
            logger.warning(
                "chat %s: the stream connection ended (%s) and cannot be redialed: this "
                "server does not stamp deltas; giving up",
                self.chat_id,
                failure.message,
            )
            error = CoderStreamError(
                UNTRACKABLE_MESSAGE, url=self.url, chat_id=self.chat_id, reason="untrackable-deltas"
            )
            error.__cause__ = failure
            self._fail(error)
            return
        self._last_failure = failure
        self.consecutive_failures += 1
        limit = self.policy.max_consecutive_failures
        if self.consecutive_failures >= limit:
            logger.warning(
                "chat %s: the stream connection ended (%s); giving up after %d/%d failures "
                "in a row without progress",
                self.chat_id,
                failure.message,
                self.consecutive_failures,
                limit,
            )
            error = CoderStreamError(
                budget_exhausted_message(self.path, self.consecutive_failures, server_message),
                url=self.url,
                chat_id=self.chat_id,
                reason="redial-budget-exhausted",
            )
            error.__cause__ = failure
            self._fail(error)
            return
        sink = self._sink
        if sink is not None:
            sink.emit(
                WsRedialEvent(
                    chat_id=self.chat_id,
                    reader=self.reader_id,
                    attempt=self.attempt,
                    consecutive_failures=self.consecutive_failures,
                    max_consecutive_failures=limit,
                    backoff=self.backoff,
                    timestamp=sink.now(),
                )
            )
        logger.warning(
            "chat %s: the stream connection ended (%s); redialing in %.1f s "
            "(%d/%d failures in a row)",
            self.chat_id,
            failure.message,
            self.backoff,
            self.consecutive_failures,
            limit,
        )
        self.state = BACKOFF
        self._deadline = now + self.backoff

    def _fail(self, error: CoderAgentError) -> None:
        if self.state == DONE:  # the consumer closed the reader meanwhile (C.2.1)
            return
        self.state = DONE
        self._deadline = None
        self.error = error

    # -- transport events --------------------------------------------------------------------

    def _emit_error(self, message: str) -> None:
        sink = self._sink
        if sink is not None:
            sink.emit(
                WsErrorEvent(
                    chat_id=self.chat_id,
                    reader=self.reader_id,
                    attempt=self.attempt,
                    message=message,
                    timestamp=sink.now(),
                )
            )

    def _emit_event(self, event: StreamEvent, *, forwarded: bool) -> None:
        sink = self._sink
        if sink is not None:
            sink.emit(
                WsEventEvent(
                    chat_id=self.chat_id,
                    reader=self.reader_id,
                    attempt=self.attempt,
                    event=event,
                    forwarded=forwarded,
                    ignored=False,
                    timestamp=sink.now(),
                )
            )

    def _emit_close(self, code: int | None, reason: str | None) -> None:
        sink = self._sink
        if sink is not None:
            sink.emit(
                WsCloseEvent(
                    chat_id=self.chat_id,
                    reader=self.reader_id,
                    attempt=self.attempt,
                    code=code,
                    reason=reason,
                    timestamp=sink.now(),
                )
            )
