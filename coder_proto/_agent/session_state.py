"""An agent session's state: one chat, its resume cursor, its cleanup ledger and the streams it
keeps (state machines D.1, H.1, H.2, H.6; D12).

``SessionConfig`` is an agent's settings, validated at construction (H.2). ``SessionState``
is what one agent keeps between turns; construction does no I/O and only validates what it
was given (a ``last_seen_message_id`` must be a positive integer and comes with a
``chat_id``, D.1). Turns, segments and cleanup calls work on it; ``Session`` (in
``coder_proto._agent.session``) adds the methods that start them.

The session owns the turn stream that a client-tool pause keeps open (H.6): while a turn runs,
the turn forwards the stream's connection inputs here; between turns an adapter may keep
feeding them here (``connection_made`` ... ``tick``, ``actions()``, ``next_deadline()``) so
that a paused stream keeps redialing in the background, or leave the socket unread until the
next turn. A driver may instead keep each socket's ``route`` (its stream, the stream's reader
and the reader's id of it) and feed the bytes to that reader itself, then step the running
turn.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Any, Final, Protocol

import attrs

from .._actions import Action
from .._constants import (
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_MAX_STEPS,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
)
from .._engine import CoreMachine
from .._errors import CoderAgentError
from .._rest.prefix import PrefixSelector
from .._stream.reader import BackoffPolicy, StreamReader
from .._stream.session_stream import ReaderLike, SessionStream, new_reader_id
from .._stream.websocket import WsObserver
from .._transport_events import TransportEventSink
from .._wire.chats import DynamicTool

__all__ = [
    "MAX_TIMER",
    "ChatGate",
    "ReaderFactory",
    "SessionConfig",
    "SessionState",
    "sanitize_duration",
]

logger = logging.getLogger("coder_proto")

#: The largest timer JavaScript accepts, in seconds (H.2: +inf and huge values clamp here).
MAX_TIMER: Final = (2**31 - 1) / 1000.0
#: A session's ``submitted_tool_call_ids`` before its first submission.
_NO_IDS: Final[frozenset[str]] = frozenset()


def sanitize_duration(value: object, default: float) -> float:
    """H.2 for a duration in seconds: missing, NaN, negative or non-numeric gives ``default``;
    +inf and anything larger clamp to 2**31-1 ms."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return default
    number = float(value)
    if math.isnan(number) or number < 0:
        return default
    if number == math.inf:
        return MAX_TIMER
    if math.isinf(number):  # pragma: no cover - -inf is negative
        return default
    return min(number, MAX_TIMER)


def _opt_str(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise CoderAgentError(f"{name} must be a string, got {value!r}")
    return value


def _tool_tuple(value: Iterable[DynamicTool]) -> tuple[DynamicTool, ...]:
    return tuple(value)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


class ReaderFactory(Protocol):
    """Builds the reader of a new turn stream (``StreamReader`` by default)."""

    def __call__(
        self,
        *,
        chat_id: str,
        base_url: str,
        prefix: str,
        after_id: int | None,
        token: str | None,
        reader_id: int,
        policy: BackoffPolicy,
        sink: TransportEventSink | None,
        max_message_size: int,
    ) -> ReaderLike: ...


class ChatGate(Protocol):
    """What holds a turn at a fresh chat (``SessionState.chat_gate``, ``Turn.hold_chat``):
    ``hold(chat_id)`` is the store write (a durable store's ``StoreOp``, named loosely here:
    the durable package sits above this one) to finish before anything else happens on the
    chat (``None``: none), performed with ``store`` (the ``ApplyStore`` runner); ``failed`` hears
    the write's error (the turn goes on); ``store_call(call_id, op)`` is the action asking
    the embedder to perform ``op`` (answered by the task's ``store_finished``)."""

    @property
    def store(self) -> Any: ...

    def hold(self, chat_id: str) -> Any: ...

    def store_call(self, call_id: int, op: Any) -> Action: ...

    def failed(self, chat_id: str, error: BaseException) -> None: ...


def _default_reader(**kwargs: Any) -> ReaderLike:
    return StreamReader(**kwargs)


@attrs.frozen(kw_only=True)
class SessionConfig:
    """An agent's settings (H.1, H.2; wire 2.1, 2.2). Durations are seconds.

    ``model`` is a model hint (a config UUID, ``provider:model``, a model id or a display-name
    substring; wire 8), resolved once per session. ``tools`` are the client tools registered
    when the chat is created. ``request_timeout`` bounds each segment (C.3; ``None`` or <= 0
    means no limit). ``max_steps`` bounds the client-tool loop (D7); ``max_retries`` replays a
    turn whose fresh chat lost its stream (C.5).
    """

    base_url: str
    token: str | None = attrs.field(default=None, repr=False)
    organization_id: str | None = None
    model: str | None = None
    instructions: str | None = None
    tools: tuple[DynamicTool, ...] = attrs.field(default=(), converter=_tool_tuple)
    workspace_id: str | None = None
    mcp_server_ids: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    plan_mode: str | None = None
    reasoning_effort: str | None = None
    busy_behavior: str | None = None
    request_timeout: float | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    max_retries: int = 0
    settle_deadline: float = SETTLE_DEADLINE
    settle_retry_delay: float = SETTLE_RETRY_DELAY
    chat_id: str | None = None
    last_seen_message_id: int | None = None
    backoff: BackoffPolicy = attrs.field(factory=BackoffPolicy)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url:
            raise CoderAgentError("base_url must be a non-empty string")
        _opt_str(self.token, "token")
        for name in (
            "organization_id",
            "model",
            "instructions",
            "workspace_id",
            "plan_mode",
            "reasoning_effort",
            "busy_behavior",
        ):
            _opt_str(getattr(self, name), name)
        if self.busy_behavior not in (None, "queue", "interrupt"):
            raise CoderAgentError(
                f'busy_behavior must be "queue" or "interrupt", got {self.busy_behavior!r}'
            )
        if not all(isinstance(t, DynamicTool) for t in self.tools):
            raise CoderAgentError("tools must be DynamicTool values")
        if not all(isinstance(i, str) and i for i in self.mcp_server_ids):
            raise CoderAgentError("mcp_server_ids must be non-empty strings")
        if (
            isinstance(self.max_steps, bool)
            or not isinstance(self.max_steps, int)
            or self.max_steps < 1
        ):
            raise CoderAgentError(f"max_steps must be a positive integer, got {self.max_steps!r}")
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or self.max_retries < 0
        ):
            raise CoderAgentError(
                f"max_retries must be a non-negative integer, got {self.max_retries!r}"
            )
        if self.request_timeout is not None and (
            isinstance(self.request_timeout, bool)
            or not isinstance(self.request_timeout, int | float)
            or math.isnan(self.request_timeout)
        ):
            raise CoderAgentError(
                f"request_timeout must be a number of seconds, got {self.request_timeout!r}"
            )
        object.__setattr__(
            self, "settle_deadline", sanitize_duration(self.settle_deadline, SETTLE_DEADLINE)
        )
        object.__setattr__(
            self,
            "settle_retry_delay",
            sanitize_duration(self.settle_retry_delay, SETTLE_RETRY_DELAY),
        )
        if self.chat_id is not None and (
            not isinstance(self.chat_id, str) or not self.chat_id.strip()
        ):
            raise CoderAgentError(f"chat_id must be a non-empty string, got {self.chat_id!r}")
        cursor = self.last_seen_message_id
        if cursor is not None:
            if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor <= 0:
                raise CoderAgentError(
                    f"last_seen_message_id must be a positive integer, got {cursor!r}"
                )
            if self.chat_id is None:
                raise CoderAgentError("last_seen_message_id needs the chat_id it belongs to")

    @property
    def timeout(self) -> float | None:
        """The per-segment budget, or ``None`` for no limit (C.3)."""
        value = self.request_timeout
        if value is None or value <= 0:
            return None
        return float(value)

    @property
    def dynamic_tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.tools)


class SessionState:
    """One agent's chat session state (H.1): the chat, the resume cursor, the stranded-chat
    ledger, the single turn in flight and the retained streams. ``Session`` adds the machines
    that act on it; see the module docstring."""

    __slots__ = (
        "_chat_id",
        "_conn_ids",
        "_last_seen",
        "_retained",
        "_segments",
        "_stranded",
        "_streams",
        "_ws_observer",
        "chat_gate",
        "config",
        "in_flight",
        "last_known_chat_id",
        "last_status",
        "model_config_id",
        "model_resolved",
        "new_reader_id",
        "on_chat_created",
        "reader_factory",
        "selector",
        "sink",
        "submitted_tool_call_ids",
    )

    def __init__(
        self,
        config: SessionConfig,
        *,
        selector: PrefixSelector | None = None,
        sink: TransportEventSink | None = None,
        reader_factory: ReaderFactory | None = None,
        reader_ids: Callable[[], int] | None = None,
    ) -> None:
        if not isinstance(config, SessionConfig):
            raise CoderAgentError("Session needs a SessionConfig")
        self.config = config
        #: The client's prefix state, shared by every REST call (wire 1.4).
        self.selector = selector if selector is not None else PrefixSelector()
        self.sink = sink if sink is not None else TransportEventSink()
        self.reader_factory: ReaderFactory = reader_factory or _default_reader
        self.new_reader_id: Callable[[], int] = reader_ids or new_reader_id
        self._chat_id: str | None = config.chat_id
        self._last_seen = config.last_seen_message_id or 0
        #: The last chat a turn ran on; survives ``reset_session`` (H.1).
        self.last_known_chat_id: str | None = config.chat_id
        self._stranded: dict[str, None] = {}
        #: Client tool call ids whose results were submitted (a live set, A.7); one empty
        #: set shared by every session until its first submission (an empty set is 216 bytes).
        self.submitted_tool_call_ids: AbstractSet[str] = _NO_IDS
        #: Called with the chat id right after a turn's create call answered, before the
        #: stream opens (durable steps checkpoint the chat then, D28). Must not raise.
        self.on_chat_created: Callable[[str], None] | None = None
        #: Holds a turn between a fresh chat's create call and anything else on that chat
        #: until a store write answers (``Turn.hold_chat``; a durable step's early
        #: checkpoint, D28), or ``None``.
        self.chat_gate: ChatGate | None = None
        #: The last chat status the session observed (for D4's follow-up interrupt).
        self.last_status: str | None = None
        #: The model hint is resolved once per session and cached, even to ``None`` (H.1).
        self.model_resolved = False
        self.model_config_id: str | None = None
        #: The turn running on the session, if any (only one at a time, G.2).
        self.in_flight: CoreMachine[Any] | None = None
        self._segments = 0
        self._conn_ids = itertools.count(1)
        self._retained: SessionStream | None = None
        self._streams: list[SessionStream] = []
        self._ws_observer: WsObserver | None = None

    def __repr__(self) -> str:
        return (
            f"Session(chat_id={self._chat_id!r}, last_seen_message_id={self.last_seen_message_id},"
            f" in_flight={self.in_flight is not None})"
        )

    # -- state (H.1, D.1) --------------------------------------------------------------------

    @property
    def chat_id(self) -> str | None:
        """The session's chat, ``None`` before the first turn created one or after a reset."""
        return self._chat_id

    @chat_id.setter
    def chat_id(self, value: str | None) -> None:
        self._chat_id = value

    @property
    def last_seen_message_id(self) -> int | None:
        """The resume cursor (D.1): the largest message id seen, ``None`` when unknown."""
        return self._last_seen if self._last_seen > 0 else None

    @property
    def cursor(self) -> int:
        """The cursor as an int (0 means none)."""
        return self._last_seen

    @cursor.setter
    def cursor(self, value: int) -> None:
        self._last_seen = value

    def advance_cursor(self, message_id: int) -> None:
        """``L = max(L, message_id)`` (D.1): the cursor never decreases except by a reset."""
        if message_id > self._last_seen:
            self._last_seen = message_id

    @property
    def stranded_chat_ids(self) -> tuple[str, ...]:
        """Chats a failed fresh-chat turn discarded, oldest first (C.5, H.1)."""
        return tuple(self._stranded)

    def add_stranded(self, chat_id: str) -> None:
        self._stranded.setdefault(chat_id, None)

    def note_chat_cleaned_up(self, chat_id: str) -> None:
        """``chat_id`` was archived: drop it from the stranded ledger, and from
        ``last_known_chat_id`` when it is that chat (H.1). ``chat_id`` is never touched."""
        self._stranded.pop(chat_id, None)
        if self.last_known_chat_id == chat_id:
            self.last_known_chat_id = None

    def reset_session(self, now: float) -> list[Action]:
        """Start a fresh chat on the next turn (H.1): forget the chat, the cursor and the
        submitted tool ids, close a paused stream. ``last_known_chat_id`` and the stranded
        ledger are kept. Returns the actions that close the stream (perform them). A stream a
        running segment is reading stays with that segment, which closes it when it ends."""
        self._chat_id = None
        self._last_seen = 0
        submitted = self.submitted_tool_call_ids
        if isinstance(submitted, set):
            submitted.clear()  # in place: a running segment reads the same set
        self.last_status = None
        return self.close_paused_stream(now)

    def next_segment_number(self) -> int:
        """The per-agent segment counter of G.7 (counted only when events are observed)."""
        self._segments += 1
        return self._segments

    # -- streams (H.6) -----------------------------------------------------------------------

    @property
    def retained_stream(self) -> SessionStream | None:
        """The stream kept for a resume (or being read by the current segment)."""
        return self._retained

    def open_stream(
        self, *, chat_id: str, prefix: str, after_id: int | None, now: float
    ) -> SessionStream:
        """A fresh turn stream for ``chat_id`` dialing with ``after_id`` (G.4), retained."""
        reader_id = self.new_reader_id()
        reader = self.reader_factory(
            chat_id=chat_id,
            base_url=self.config.base_url,
            prefix=prefix,
            after_id=after_id,
            token=self.config.token,
            reader_id=reader_id,
            policy=self.config.backoff,
            sink=self.sink if self.sink.enabled else None,
            max_message_size=self.config.max_message_size,
        )
        stream = SessionStream(
            reader,
            chat_id=chat_id,
            reader_id=reader_id,
            after_id=after_id,
            conn_ids=self._next_conn_id,
            observer=self._ws_observer,
        )
        self._streams.append(stream)
        self._retained = stream
        stream.start(now)
        return stream

    def _next_conn_id(self) -> int:
        return next(self._conn_ids)

    @property
    def ws_observer(self) -> WsObserver | None:
        """Hears what the stream connections did, as the readers saw it (the driver's
        transcript recorder), or ``None``: then the readers report nothing."""
        return self._ws_observer

    @ws_observer.setter
    def ws_observer(self, observer: WsObserver | None) -> None:
        self._ws_observer = observer
        for stream in self._streams:
            stream.observe(observer)

    def release_stream(self, stream: SessionStream, now: float) -> None:
        """Close ``stream`` and drop it from the retention slot (G.4)."""
        stream.close(now)
        if self._retained is stream:
            self._retained = None

    def close_retained_stream(self, now: float) -> list[Action]:
        """Close the retained stream, attached or not (disposal). Returns the actions that
        close it. A segment reading it sees its stream end (C.4 ``stream_closed``)."""
        stream = self._retained
        if stream is None:
            return []
        attached = stream.attached
        self.release_stream(stream, now)
        turn = self.in_flight
        if attached and turn is not None:
            turn.tick(now)
        return self.actions()

    def close_paused_stream(self, now: float) -> list[Action]:
        """Close the retained stream only if no segment is reading it (H.3, H.4: an interrupt's
        own settle events must not be consumed by a later resume). Returns the actions."""
        stream = self._retained
        if stream is None or stream.attached:
            return []
        self.release_stream(stream, now)
        return self.actions()

    # The stream's connection inputs, fed here between turns (a turn forwards them here).

    def _stream_for(self, conn_id: int) -> SessionStream | None:
        for stream in self._streams:
            if stream.owns(conn_id):
                return stream
        return None

    def route(self, conn_id: int) -> tuple[SessionStream, ReaderLike, int] | None:
        """Where the bytes of the session's connection ``conn_id`` go: the stream that opened
        it, that stream's reader and the reader's own id of the connection (``None``: no
        stream of the session owns it). A driver that keeps this with the socket feeds the
        reader directly, without asking the session for every chunk."""
        for stream in self._streams:
            local = stream.reader_conn_id(conn_id)
            if local is not None:
                return stream, stream.reader, local
        return None

    def connection_made(self, conn_id: int, now: float) -> None:
        stream = self._stream_for(conn_id)
        if stream is not None:
            stream.connection_made(conn_id, now)

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        stream = self._stream_for(conn_id)
        if stream is not None:
            stream.connection_failed(conn_id, message, now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        stream = self._stream_for(conn_id)
        if stream is not None:
            stream.data_received(conn_id, data, now)

    def connection_lost(self, conn_id: int, now: float) -> None:
        stream = self._stream_for(conn_id)
        if stream is not None:
            stream.connection_lost(conn_id, now)

    def tick(self, now: float) -> None:
        """Time passed: redial backoffs and the D6 pause limit."""
        for stream in list(self._streams):
            stream.tick(now)

    def next_deadline(self) -> float | None:
        """The earliest deadline of the session's streams."""
        due: float | None = None
        for stream in self._streams:
            deadline = stream.next_deadline()
            if deadline is not None and (due is None or deadline < due):
                due = deadline
        return due

    def actions(self) -> list[Action]:
        """Drain the streams' actions (connection ids are session-unique)."""
        out: list[Action] = []
        keep: list[SessionStream] = []
        for stream in self._streams:
            out.extend(stream.actions())
            if not (stream.closed and stream.ended):
                keep.append(stream)
            elif self._retained is stream:  # pragma: no cover - released streams leave the slot
                self._retained = None
        self._streams = keep
        return out
