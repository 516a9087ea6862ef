"""Properties of the StreamReader (state machines J.16-J.18, B.2, C.2; wire 5).

``ReaderMachine`` plays a chatd server against a real reader over in-memory WebSocket
connections: it streams deltas with episode coordinates, commits and revises snapshots, sends
statuses, drops connections (clean close and abrupt end of stream), rejects upgrades, fails
connects and advances the clock. Every reconnect is followed by the server's replay (a status
snapshot, every committed snapshot so far, then the current episode's deltas from seq 1; wire
4.4). The invariants:

* J.16: the forwarded deltas are exactly the original deltas, in order, without duplicates;
  ``forwarded=False`` exactly on the replayed ones;
* J.17: without progress the waits are 1, 2, 4, 8 s and the 5th ending raises
  ``CoderStreamError``; any progress restarts at the first step;
* J.18: a ``message`` is never suppressed;
* D34: a stream session error (one ``error`` event, then the close) is a failed connection
  like any other, counted in the same schedule, and never forwarded;
* the reader is always in a defined state.

The fuzz properties feed arbitrary bytes and arbitrary JSON: nothing escapes, and a failure
ends the reader with a ``CoderAgentError`` subclass in ``reader.error``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coder_proto import (
    CoderAgentError,
    CoderApiError,
    CoderProtocolError,
    CoderStreamError,
    WsEventEvent,
)
from coder_proto._actions import CloseConnection, OpenConnection, SendData
from coder_proto._stream.reader import BackoffPolicy, StreamReader
from coder_proto._transport_events import TransportEventSink
from coder_proto._wire import ErrorEvent, MessageEvent, MessagePartEvent
from tests.proto.stream.test_reader import CHAT, Net, delta, snapshot, status
from tests.proto.stream.test_websocket import ServerSide

SCHEDULE = BackoffPolicy().schedule()
STATES = {"idle", "connecting", "handshake", "open", "backoff", "done"}


def assert_defined(reader: StreamReader) -> None:
    """The reader is in one of its states, and a failure is a library error."""
    assert reader.state in STATES
    assert reader.done == (reader.state == "done")
    if reader.error is not None:
        assert reader.done
        assert isinstance(reader.error, CoderAgentError)
    if reader.state in ("backoff", "connecting", "handshake"):
        # The backoff's end, or the dial's bound (D29).
        assert reader.next_deadline() is not None
    else:
        assert reader.next_deadline() is None


class ReaderMachine(RuleBasedStateMachine):
    """A scripted chatd server against a real reader (J.16-J.18)."""

    @initialize()
    def dial(self) -> None:
        self.ws_events: list[WsEventEvent] = []
        sink = TransportEventSink(self._observe)
        self.reader = StreamReader(
            chat_id=CHAT,
            base_url="https://coder.example.com",
            prefix="/api/v2/chats",
            after_id=None,
            token="property-token",
            reader_id=1,
            sink=sink,
        )
        self.net = Net(self.reader, now=0.0).start()
        self.net.accept()
        # The server's model.
        self.hv = 1
        self.ga = 1
        self.episode: list[dict[str, Any]] = []
        self.committed: dict[int, dict[str, Any]] = {}
        self.next_id = 1
        self.last_status = "running"
        # What the reader must do.
        self.originals: list[tuple[int, int, int, str]] = []
        self.expected_flags: list[bool] = []
        self.failures = 0
        self.forwarded_count = 0
        self.consumed = 0

    def _observe(self, event: Any) -> None:
        if isinstance(event, WsEventEvent):
            self.ws_events.append(event)
            self.forwarded_count += event.forwarded

    @property
    def is_open(self) -> bool:
        return self.reader.state == "open"

    @property
    def in_backoff(self) -> bool:
        return self.reader.state == "backoff"

    # -- server output ---------------------------------------------------------------------

    @precondition(lambda self: self.is_open)
    @rule(text=st.text(max_size=4))
    def server_delta(self, text: str) -> None:
        seq = len(self.episode) + 1
        event = delta(text, seq, self.hv, self.ga)
        self.episode.append(event)
        self.originals.append((self.hv, self.ga, seq, text))
        self.expected_flags.append(True)
        self.failures = 0
        self.net.frame(event)

    @precondition(lambda self: self.is_open and bool(self.episode))
    @rule()
    def server_commit(self) -> None:
        text = "".join(e["message_part"]["part"]["text"] for e in self.episode)
        message = snapshot(self.next_id, text)
        self.committed[self.next_id] = message
        self.next_id += 1
        self.episode = []
        self.hv += 1  # a commit bumps the history version: the next episode starts at seq 1
        self.failures = 0
        self.net.frame(message)

    @precondition(lambda self: self.is_open and bool(self.committed))
    @rule(data=st.data())
    def server_revision(self, data: st.DataObject) -> None:
        message_id = data.draw(st.sampled_from(sorted(self.committed)), label="revised id")
        text = self.committed[message_id]["message"]["content"][0]["text"] + "+"
        self.committed[message_id] = snapshot(message_id, text)
        self.failures = 0
        self.net.frame(self.committed[message_id])

    @precondition(lambda self: self.is_open)
    @rule(value=st.sampled_from(["running", "pending", "waiting", "requires_action"]))
    def server_status(self, value: str) -> None:
        self.last_status = value
        self.net.frame(status(value))

    @precondition(lambda self: self.is_open)
    @rule(new_attempt=st.booleans())
    def server_new_generation_attempt(self, new_attempt: bool) -> None:
        """The server retries the model call: a new episode, ``seq`` restarts (wire 4.4)."""
        if new_attempt:
            self.ga += 1
            self.episode = []
            self.net.frame({"type": "preview_reset", "chat_id": CHAT})

    # -- connection endings ------------------------------------------------------------------

    @precondition(lambda self: self.is_open)
    @rule(clean=st.booleans())
    def drop(self, clean: bool) -> None:
        if clean:
            self.net.server_close(1000)
        else:
            self.net.drop()
        self._ended()

    @precondition(lambda self: self.in_backoff)
    @rule(status_code=st.sampled_from([408, 425, 429, 500, 502, 503]))
    def transient_rejection(self, status_code: int) -> None:
        self.net.sleep_backoff()
        self.net.reject(status_code)
        self._ended()

    @precondition(lambda self: self.in_backoff)
    @rule()
    def connect_failure(self) -> None:
        self.net.sleep_backoff()
        self.reader.connection_failed(self.net.conn, "connection refused", self.net.now)
        self.net.pump()
        self._ended()

    @precondition(lambda self: self.in_backoff)
    @rule(clean=st.booleans())
    def session_error(self, clean: bool) -> None:
        """D34: the server cannot set up the stream session: the connection's whole snapshot
        is one ``error`` event, then it closes. A failed connection like any other; the
        error is never forwarded."""
        self.net.sleep_backoff()
        self.net.accept()
        self.net.frame(
            {
                "type": "error",
                "chat_id": CHAT,
                "error": {"message": "failed to load initial snapshot", "retryable": False},
            }
        )
        if clean:
            self.net.server_close(1000)
        else:
            self.net.drop()
        self._ended()
        if self.failures >= 5:
            error = self.reader.error
            assert error is not None
            assert error.message.endswith(": failed to load initial snapshot")

    @precondition(lambda self: self.in_backoff)
    @rule(status_code=st.sampled_from([400, 401, 403, 404]))
    def terminal_rejection(self, status_code: int) -> None:
        self.net.sleep_backoff()
        self.net.reject(status_code)
        assert isinstance(self.reader.error, CoderApiError)
        assert self.reader.error.status == status_code

    @precondition(lambda self: self.in_backoff)
    @rule(fraction=st.floats(0.0, 0.99))
    def clock_advance(self, fraction: float) -> None:
        deadline = self.reader.next_deadline()
        assert deadline is not None
        attempt = self.reader.attempt
        step = (deadline - self.net.now) * fraction
        # Float rounding can land ``now + step`` on the deadline itself when the gap is a few
        # ulps; that is a wake-up, not an early one.
        assume(self.net.now + step < deadline)
        self.net.advance(step)
        assert self.reader.attempt == attempt
        assert self.in_backoff

    @precondition(lambda self: self.in_backoff)
    @rule(data=st.data())
    def reconnect(self, data: st.DataObject) -> None:
        self.net.sleep_backoff()
        self.net.accept()
        replay = [status(self.last_status), *self.committed.values(), *self.episode]
        self.expected_flags += [False] * len(self.episode)
        cuts = data.draw(
            st.lists(st.integers(1, max(len(replay) - 1, 1)), max_size=3, unique=True),
            label="frame boundaries",
        )
        start = 0
        for cut in [*sorted(c for c in cuts if c < len(replay)), len(replay)]:
            self.net.frame(*replay[start:cut])
            start = cut

    @precondition(lambda self: self.reader.done)
    @rule()
    def late_input_is_ignored(self) -> None:
        before = (len(self.ws_events), len(self.reader.events))
        self.reader.data_received(self.net.conn, b"\x81\x02[]", self.net.now)
        self.reader.connection_lost(self.net.conn, self.net.now)
        self.reader.tick(self.net.now + 100)
        assert self.reader.actions() == []
        assert (len(self.ws_events), len(self.reader.events)) == before

    @rule(count=st.integers(0, 3))
    def consumer_pops(self, count: int) -> None:
        for _ in range(min(count, len(self.reader.events))):
            self.reader.events.popleft()
            self.consumed += 1

    def _ended(self) -> None:
        """J.17: the wait after the k-th ending without progress is SCHEDULE[k-1]; the 5th
        ending fails the reader."""
        self.failures += 1
        if self.failures >= 5:
            error = self.reader.error
            assert isinstance(error, CoderStreamError)
            assert error.reason == "redial-budget-exhausted"
            assert isinstance(error.__cause__, CoderAgentError)
            return
        assert self.reader.error is None
        deadline = self.reader.next_deadline()
        assert deadline is not None
        assert deadline - self.net.now == SCHEDULE[self.failures - 1]
        assert self.reader.consecutive_failures == self.failures

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def j16_forwarded_deltas_are_the_originals_in_order(self) -> None:
        deltas = [e for e in self.ws_events if isinstance(e.event, MessagePartEvent)]
        assert [e.forwarded for e in deltas] == self.expected_flags
        forwarded = [
            (e.event.history_version, e.event.generation_attempt, e.event.seq, e.event.part.text)
            for e in deltas
            if e.forwarded
        ]
        assert forwarded == self.originals

    @invariant()
    def d34_session_errors_are_never_forwarded(self) -> None:
        assert not [e for e in self.ws_events if isinstance(e.event, ErrorEvent) and e.forwarded]
        assert not [e for e in self.reader.events if isinstance(e, ErrorEvent)]

    @invariant()
    def j18_messages_are_never_suppressed(self) -> None:
        assert all(e.forwarded for e in self.ws_events if isinstance(e.event, MessageEvent))

    @invariant()
    def forwarded_events_reach_the_consumer_in_order(self) -> None:
        assert self.consumed + len(self.reader.events) == self.forwarded_count
        pending = [e.event for e in self.ws_events if e.forwarded][self.consumed :]
        assert list(self.reader.events) == pending

    @invariant()
    def defined_state(self) -> None:
        assert_defined(self.reader)
        if self.reader.done:
            assert self.reader.error is not None  # nothing here closes the reader

    def teardown(self) -> None:
        reader = getattr(self, "reader", None)
        if reader is not None:
            reader.close(self.net.now)
            self.net.pump()
            assert_defined(reader)
            assert reader.done


ReaderMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestReaderMachine = ReaderMachine.TestCase


# -- fuzzing the inputs -------------------------------------------------------------------------


def _drain(reader: StreamReader) -> None:
    for action in reader.actions():
        assert isinstance(action, OpenConnection | SendData | CloseConnection)


def _opened(handshake_done: bool = True) -> tuple[StreamReader, ServerSide]:
    reader = StreamReader(
        chat_id=CHAT,
        base_url="http://127.0.0.1:1",
        prefix="/api/v2/chats",
        after_id=3,
        token="fuzz-token",
        reader_id=2,
    )
    reader.start(0.0)
    reader.connection_made(1, 0.0)
    server = ServerSide()
    for action in reader.actions():
        if isinstance(action, SendData):
            server.receive(action.data)
    if handshake_done:
        reader.data_received(1, server.accept(), 0.0)
        _drain(reader)
    return reader, server


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=300), max_size=10),
    handshake_done=st.booleans(),
    eof=st.booleans(),
)
def test_arbitrary_bytes_never_escape(chunks: list[bytes], handshake_done: bool, eof: bool) -> None:
    reader, _ = _opened(handshake_done)
    for i, chunk in enumerate(chunks):
        reader.data_received(1, chunk, float(i))
        _drain(reader)
        assert_defined(reader)
    if eof:
        reader.connection_lost(1, 50.0)
        _drain(reader)
        assert reader.done or reader.state == "backoff"
    assert_defined(reader)


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=8,
)
_TYPES = [
    "message_part",
    "message",
    "status",
    "error",
    "queue_update",
    "retry",
    "action_required",
    "preview_reset",
    "history_reset",
    "data",
    "ping",
    "mystery",
]
_FIELDS = [
    "chat_id",
    "message_part",
    "message",
    "status",
    "error",
    "queued_messages",
    "retry",
    "action_required",
    "data",
]
_coordinate = st.one_of(st.integers(0, 3), st.booleans(), st.none(), st.text(max_size=2))
_shaped_payloads = st.one_of(
    st.fixed_dictionaries(
        {"part": st.one_of(_json, st.just({"type": "text", "text": "x"}))},
        optional={
            "role": st.sampled_from(["assistant", "tool", "user", 7]),
            "history_version": _coordinate,
            "generation_attempt": _coordinate,
            "seq": _coordinate,
        },
    ),
    st.fixed_dictionaries(
        {"id": st.one_of(st.integers(-5, 50), _json)},
        optional={"role": _json, "content": _json, "usage": _json},
    ),
)
_event_like = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(_TYPES),
    st.dictionaries(st.sampled_from(_FIELDS), st.one_of(_shaped_payloads, _json), max_size=3),
)
_frame_values = st.one_of(_json, _event_like, st.lists(_event_like, max_size=4))


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(_frame_values, max_size=4), drop=st.booleans())
def test_arbitrary_json_never_escapes(frames: list[Any], drop: bool) -> None:
    reader, server = _opened()
    for frame in frames:
        if reader.done:
            break
        reader.data_received(1, server.text(json.dumps(frame)), 1.0)
        _drain(reader)
        assert_defined(reader)
        if reader.error is not None:
            assert isinstance(reader.error, CoderProtocolError)
    if drop and not reader.done:
        reader.connection_lost(1, 2.0)
        _drain(reader)
        assert reader.state == "backoff" or isinstance(reader.error, CoderStreamError)
    assert_defined(reader)


@pytest.mark.parametrize("after_open", [False, True])
def test_garbage_handshake_and_deeply_nested_frames_are_protocol_errors(after_open: bool) -> None:
    reader, server = _opened(after_open)
    data = server.text("[" * 200_000 + "]" * 200_000) if after_open else b"\x00" * 100
    reader.data_received(1, data, 0.0)
    _drain(reader)
    assert reader.done
    assert isinstance(reader.error, CoderProtocolError)
