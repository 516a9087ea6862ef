"""The session's chat stream (state machines H.6, G.4; D6, D12; J.24): session-unique
connection ids, the attach/pause/close life cycle, buffered events adopted by the next
segment, and the D6 limits of a paused stream."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

import pytest

from coder_proto import CoderAgentError
from coder_proto._actions import CloseConnection, OpenConnection, SendData
from coder_proto._stream.session_stream import SessionStream, new_reader_id


class FakeReader:
    """A reader that records its inputs and emits scripted actions (conn ids = attempts)."""

    def __init__(self) -> None:
        self.events: deque[Any] = deque()
        self.done = False
        self.error: CoderAgentError | None = None
        self.inputs: list[tuple[str, int]] = []
        self.pending: list[Any] = []
        self.deadline: float | None = None
        self.ticks: list[float] = []

    def start(self, now: float) -> None:
        self.pending.append(OpenConnection(conn_id=1, host="h", port=443, tls=True))

    def connection_made(self, conn_id: int, now: float) -> None:
        self.inputs.append(("made", conn_id))
        self.pending.append(SendData(conn_id=conn_id, data=b"GET"))

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        self.inputs.append(("failed", conn_id))

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self.inputs.append(("data", conn_id))
        self.events.extend(data.decode().split(","))

    def connection_lost(self, conn_id: int, now: float) -> None:
        self.inputs.append(("lost", conn_id))

    def tick(self, now: float) -> None:
        self.ticks.append(now)

    def close(self, now: float) -> None:
        if not self.done:
            self.done = True
            self.pending.append(CloseConnection(conn_id=1))

    def actions(self) -> list[Any]:
        out, self.pending = self.pending, []
        return out

    def next_deadline(self) -> float | None:
        return self.deadline


def make(*, counter: Any = None, **kwargs: Any) -> tuple[SessionStream, FakeReader]:
    reader = FakeReader()
    ids = counter if counter is not None else itertools.count(100)
    stream = SessionStream(
        reader, chat_id="chat-1", reader_id=7, after_id=40, conn_ids=lambda: next(ids), **kwargs
    )
    stream.start(0.0)
    return stream, reader


def test_connection_ids_are_session_unique_across_readers() -> None:
    counter = itertools.count(1)
    first, _ = make(counter=counter)
    second, _ = make(counter=counter)
    (open_a,) = first.actions()
    (open_b,) = second.actions()
    assert isinstance(open_a, OpenConnection) and isinstance(open_b, OpenConnection)
    assert (open_a.conn_id, open_b.conn_id) == (1, 2)
    assert first.owns(1) and not first.owns(2) and second.owns(2)


def test_inputs_are_mapped_back_to_the_readers_own_ids_and_strangers_ignored() -> None:
    stream, reader = make()
    (opened,) = stream.actions()
    conn = opened.conn_id
    stream.connection_made(conn, 0.1)
    assert stream.actions() == [SendData(conn_id=conn, data=b"GET")]
    stream.data_received(conn, b"a,b", 0.2)
    stream.connection_failed(conn, "x", 0.3)
    stream.connection_lost(conn, 0.4)
    for method in ("connection_made", "connection_lost"):
        getattr(stream, method)(conn + 1, 0.5)
    stream.data_received(conn + 1, b"zz", 0.5)
    stream.connection_failed(conn + 1, "x", 0.5)
    assert reader.inputs == [("made", 1), ("data", 1), ("failed", 1), ("lost", 1)]
    assert list(stream.events) == ["a", "b"]
    # A driver feeding the reader directly asks for the reader's own id once.
    assert stream.reader_conn_id(conn) == 1 and stream.reader_conn_id(conn + 1) is None


def test_the_life_cycle_attach_pause_close() -> None:
    """H.6: new -> ATTACHED; pause -> PAUSED (reusable); attach; close is final."""
    stream, reader = make()
    assert stream.attached and not stream.can_attach("chat-1")
    with pytest.raises(CoderAgentError):
        stream.attach()
    stream.pause(5.0)
    assert not stream.attached and stream.reusable and stream.paused_at == 5.0
    assert stream.can_attach("chat-1") and not stream.can_attach("chat-2")
    stream.attach()
    assert stream.attached and not stream.reusable and stream.paused_at is None
    stream.close(6.0)
    stream.close(7.0)  # idempotent
    assert stream.closed and not stream.can_attach("chat-1") and reader.done
    stream.pause(8.0)  # a closed stream stays closed
    assert not stream.reusable
    assert "closed" in repr(stream) and "reader=7" in repr(stream)


def test_a_stream_whose_reader_ended_is_never_reattached() -> None:
    """D12: a resume dials fresh instead."""
    stream, reader = make()
    stream.pause(1.0)
    reader.done = True
    assert stream.ended and not stream.can_attach("chat-1")


def test_events_not_consumed_wait_for_the_next_segment() -> None:
    """J.24 / H.6: a read one segment did not consume is adopted by the next; nothing is
    dropped or delivered twice."""
    stream, _ = make()
    (opened,) = stream.actions()
    stream.data_received(opened.conn_id, b"1,2,3", 0.0)
    assert stream.events.popleft() == "1"
    stream.pause(1.0)
    stream.data_received(opened.conn_id, b"4", 2.0)
    stream.attach()
    assert list(stream.events) == ["2", "3", "4"]


def test_a_paused_stream_buffering_too_many_events_is_closed() -> None:
    """D6: more than 10,000 buffered events while paused closes it."""
    stream, reader = make(max_buffered=3)
    (opened,) = stream.actions()
    stream.data_received(opened.conn_id, b"a,b,c,d", 0.0)
    assert not stream.closed  # attached: a segment is reading
    stream.pause(1.0)
    stream.data_received(opened.conn_id, b"e", 1.5)
    assert stream.closed and reader.done


def test_a_stream_paused_too_long_is_closed_at_its_deadline() -> None:
    """D6: paused longer than the requires_action deadline plus 60 s."""
    stream, reader = make(pause_limit=360.0)
    reader.deadline = 2.0
    assert stream.next_deadline() == 2.0
    stream.pause(10.0)
    assert stream.next_deadline() == 2.0
    reader.deadline = None
    assert stream.next_deadline() == 370.0
    stream.tick(369.0)
    assert not stream.closed
    stream.tick(370.0)
    assert stream.closed and reader.ticks == [369.0, 370.0]
    assert stream.next_deadline() is None


def test_reader_ids_come_from_one_increasing_counter() -> None:
    first, second = new_reader_id(), new_reader_id()
    assert second > first >= 1


def test_actions_for_a_connection_the_stream_never_opened_are_dropped() -> None:
    stream, reader = make()
    stream.actions()
    reader.pending.append(SendData(conn_id=5, data=b"x"))
    assert stream.actions() == []


class ObservedReader(FakeReader):
    """A reader with the ``observer`` slot a real reader reports its connections' doings to."""

    def __init__(self) -> None:
        super().__init__()
        self.observer: Any = None


class Heard:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def upgrade_sent(self, conn_id: int, target: str, now: float) -> None:
        self.calls.append(("upgrade", conn_id, target))

    def ws_events(self, conn_id: int, events: Any, now: float) -> None:
        self.calls.append(("events", conn_id, list(events)))


def test_the_reader_reports_through_the_stream_only_while_it_has_an_observer() -> None:
    reader = ObservedReader()
    stream = SessionStream(
        reader, chat_id="chat-1", reader_id=7, after_id=None, conn_ids=lambda: 30
    )
    assert reader.observer is None  # nothing to report to: a frame never passes the stream
    stream.start(0.0)
    stream.actions()  # the reader's connection 1 is the session's 30
    heard = Heard()
    stream.observe(heard)
    assert reader.observer is stream
    reader.observer.upgrade_sent(1, "/stream", 0.0)
    reader.observer.ws_events(1, ["frame"], 0.0)
    assert heard.calls == [("upgrade", 30, "/stream"), ("events", 30, ["frame"])]
    stream.observe(None)
    assert reader.observer is None


def test_a_stream_created_with_an_observer_has_its_reader_report_at_once() -> None:
    reader = ObservedReader()
    heard = Heard()
    stream = SessionStream(
        reader, chat_id="chat-1", reader_id=7, after_id=None, conn_ids=lambda: 1, observer=heard
    )
    assert reader.observer is stream
