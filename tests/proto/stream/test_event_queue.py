"""The reader's queue keeps the deltas the typed decode took as its Structs, and builds
their events when someone reads them (``coder_proto._stream.reader.EventQueue``).

Whoever reads the queue sees the events a frame's decode gives, whichever way it is read;
the replay filter decides the same on the Structs as on the events (B.2, D14); and the
translator's run over the queue gives the parts ``ingest`` gives for each event in turn.
"""

from __future__ import annotations

import collections
import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from coder_proto import CoderProtocolError, ReasoningDelta, TextDelta
from coder_proto._stream.reader import EventQueue
from coder_proto._stream.translator import DELTA_TYPES, TurnTranslator
from coder_proto._wire import MessagePartEvent, StatusEvent
from coder_proto._wire.events import DeltaWire, parse_frame, parse_stream_frame
from tests.proto.stream.test_reader import (
    CHAT,
    Net,
    delta,
    make_reader,
    observed,
    snapshot,
    status,
    untracked,
)

#: A frame the typed decode takes: deltas, and a snapshot among them.
FRAME = [
    delta("Hel", 1),
    delta("lo", 2),
    delta("hm", 3, kind="reasoning"),
    snapshot(5, "Hello"),
    delta("!", 4),
]


def _frame_text(events: list[dict[str, Any]]) -> str:
    import json

    return json.dumps(events, separators=(",", ":")) + "\n"


def _queue() -> tuple[EventQueue, list[Any]]:
    """A queue holding a frame's events as the reader leaves them (Structs for the deltas),
    and the events the frame's decode gives."""
    text = _frame_text(FRAME)
    queue = EventQueue()
    queue.extend(parse_stream_frame(text))
    queue.lazy = True
    assert [type(e) for e in collections.deque.__iter__(queue)].count(DeltaWire) == 4
    return queue, parse_frame(text)


def test_a_reader_without_transport_events_queues_the_frame_s_events() -> None:
    reader = make_reader()
    net = Net(reader).start()
    net.accept()
    net.frame(status("running"))
    net.frame(*FRAME)
    assert type(reader.events) is EventQueue
    assert reader.events.lazy
    # The queued Structs share one chat id and one role string (not a copy per delta).
    wires = [e for e in collections.deque.__iter__(reader.events) if type(e) is DeltaWire]
    assert len(wires) == 4
    assert len({id(w.chat_id) for w in wires}) == 1
    assert len({id(w.message_part.role) for w in wires}) == 1
    got = net.popped()[1:]
    assert got == parse_frame(_frame_text(FRAME))
    assert [type(e) for e in got] == [type(e) for e in parse_frame(_frame_text(FRAME))]
    assert not reader.events.lazy


def test_a_reader_with_transport_events_queues_built_events() -> None:
    reader, net, recorder = observed()
    net.accept()
    net.frame(*FRAME)
    assert all(type(e) is not DeltaWire for e in collections.deque.__iter__(reader.events))
    assert [e.event for e in recorder.events if hasattr(e, "event")] == parse_frame(
        _frame_text(FRAME)
    )


def _accepted(sink: bool) -> tuple[Any, Net]:
    """A reader whose connection is accepted: one with a transport-event sink (which takes
    the path that builds every event) or a plain one."""
    if sink:
        reader, net, _ = observed()
    else:
        reader = make_reader()
        net = Net(reader).start()
    net.accept()
    return reader, net


def test_the_replay_filter_decides_alike_on_the_decode_s_structs_b2() -> None:
    def run(sink: bool) -> tuple[list[Any], int, bool]:
        reader, net = _accepted(sink)
        net.frame(delta("Hel", 1), delta("lo", 2))
        net.drop()
        net.sleep_backoff()
        net.accept()
        net.frame(delta("Hel", 1), delta("lo", 2), delta(" you", 3))
        return net.popped(), reader.progress_events, reader.untrackable_deltas

    lazy, eager = run(False), run(True)
    assert lazy == eager
    texts = [e.part.text for e in lazy[0] if type(e) is MessagePartEvent]  # type: ignore[union-attr]
    assert texts == ["Hel", "lo", " you"]


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "with another"])
@pytest.mark.parametrize(
    "event",
    [untracked("x"), delta("x", 1, hv=None), delta("x", 1, ga=None), delta("x", None)],
)
def test_a_delta_without_all_three_coordinates_is_untrackable_d14(
    event: dict[str, Any], alone: bool
) -> None:
    """Alone in its frame or not (a frame of one delta is filtered apart from the loop over
    a frame's events)."""
    reader = make_reader()
    net = Net(reader).start()
    net.accept()
    net.frame(event) if alone else net.frame(event, event)
    assert type(collections.deque.__getitem__(reader.events, 0)) is DeltaWire
    assert len(reader.events) == (1 if alone else 2)
    assert reader.untrackable_deltas
    assert reader.progress_events == 0


#: A turn streamed one event per frame, as the server sends it live, with a redial in the
#: middle (``None``) after which the server replays the episode from its start.
ONE_PER_FRAME: list[dict[str, Any] | None] = [
    status("running"),
    delta("Hel", 1),
    delta("lo", 2),
    delta("lo", 2),  # the same delta again on the same connection
    delta("hm", 3, kind="reasoning"),
    {**delta("theirs", 4), "chat_id": "2b1c3d4e-0000-4000-8000-000000000002"},
    None,
    delta("Hel", 1),
    delta("lo", 2),
    delta("hm", 3, kind="reasoning"),
    delta(" you", 4),
    delta("new", 1, hv=2),  # a new episode starts over at seq 1
    delta("attempt", 1, hv=2, ga=2),
    snapshot(5, "Hello you"),
    delta("!", 2, hv=2, ga=2),
    untracked("?"),
    snapshot(6, "long " * 1000),  # a long frame that does not start as deltas do
    status("waiting"),
]


def test_frames_of_one_event_are_filtered_as_a_reader_with_transport_events_filters_them_b2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Replays within a connection and after a redial, another chat's delta, an untrackable
    one, new episodes: the events forwarded, the progress counted and the budget restarted
    are those of the reader that builds every event."""

    def run(sink: bool) -> tuple[Any, ...]:
        reader, net = _accepted(sink)
        popped: list[Any] = []
        budgets = []
        for event in ONE_PER_FRAME:
            if event is None:
                net.drop()
                net.sleep_backoff()
                budgets.append((reader.consecutive_failures, reader.backoff))
                net.accept()
            else:
                net.frame(event)
                budgets.append((reader.consecutive_failures, reader.backoff))
            popped += net.popped()
        return popped, reader.progress_events, reader.untrackable_deltas, budgets

    lazy, eager = run(False), run(True)
    assert lazy == eager
    assert [type(e) for e in lazy[0]] == [type(e) for e in eager[0]]
    texts = [e.part.text for e in lazy[0] if type(e) is MessagePartEvent]
    assert texts == ["Hel", "lo", "hm", " you", "new", "attempt", "!", "?"]
    assert lazy[1] == 9  # seven coordinate deltas forwarded, and the two snapshots
    assert not lazy[2]  # the last snapshot committed the untrackable delta
    assert "an event for another chat" in caplog.text


def test_a_delta_alone_in_its_frame_with_an_invalid_chat_id_fails_the_stream() -> None:
    """The chat id of a delta alone in its frame is checked as any event's (wire 3.9)."""
    reader = make_reader()
    net = Net(reader).start()
    net.accept()
    net.frame(delta("ok", 1))
    net.frame({**delta("bad", 2), "chat_id": "not an id"})
    assert reader.done
    assert isinstance(reader.error, CoderProtocolError)


READS: dict[str, Callable[[EventQueue], Any]] = {
    "iter": list,
    "reversed": lambda q: list(reversed(q))[::-1],
    "index": lambda q: [q[i] for i in range(len(q))],
    "negative index": lambda q: [q[i - len(q)] for i in range(len(q))],
    "popleft": lambda q: [q.popleft() for _ in range(len(q))],
    "pop": lambda q: [q.pop() for _ in range(len(q))][::-1],
    "copy": lambda q: list(q.copy()),
    "copy.copy": lambda q: list(copy.copy(q)),
    "add": lambda q: list(q + collections.deque()),  # type: ignore[operator]
    "mul": lambda q: list(q * 1),
    "pickle": lambda q: list(pickle.loads(pickle.dumps(q))),
}


@pytest.mark.parametrize("read", READS.values(), ids=list(READS))
def test_every_read_of_the_queue_gives_the_frame_s_events(
    read: Callable[[EventQueue], Any],
) -> None:
    queue, want = _queue()
    got = read(queue)
    assert got == want
    assert [type(e) for e in got] == [type(e) for e in want]
    assert repr(got) == repr(want)


def test_comparisons_searches_and_repr_see_the_events() -> None:
    queue, want = _queue()
    assert repr(queue) == f"EventQueue({want!r})"
    queue, want = _queue()
    assert queue == collections.deque(want)
    queue, want = _queue()
    assert not queue != collections.deque(want)  # noqa: SIM202 - the operator itself
    queue, want = _queue()
    assert queue <= collections.deque(want) and queue >= collections.deque(want)
    queue, want = _queue()
    assert not queue < collections.deque(want) and not queue > collections.deque(want)
    queue, want = _queue()
    assert want[1] in queue
    queue, want = _queue()
    assert queue.count(want[1]) == 1 and queue.count(want[0]) == 1
    queue, want = _queue()
    assert queue.index(want[2]) == 2
    queue, want = _queue()
    queue.remove(want[1])
    assert list(queue) == want[:1] + want[2:]
    # Once built, an event stays the same object.
    queue, _ = _queue()
    first = queue[1]
    assert queue[1] is first and list(queue)[1] is first
    queue.materialize()  # nothing left to build
    assert list(queue)[1] is first


def _parts(parts: list[Any]) -> list[tuple[str, str, str]]:
    return [(type(p).__name__, getattr(p, "id", ""), getattr(p, "delta", "")) for p in parts]


@pytest.mark.parametrize("open_blocks", [False, True])
def test_a_run_over_the_queue_gives_what_ingest_gives_event_by_event(open_blocks: bool) -> None:
    """Structs and built events mixed, blocks open or not, roles that take no delta, a
    reasoning delta behind text: the same parts either way, and the run stops at the
    status."""
    events = [
        delta("a", 1),
        delta("b", 2),
        delta("", 3),
        delta("r", 4, kind="reasoning"),
        delta("s", 5, kind="reasoning"),
        {**delta("u", 6), "message_part": {**delta("u", 6)["message_part"], "role": "user"}},
        delta("c", 7),
        status("completed"),
        delta("d", 8),
    ]
    texts = [_frame_text(events[:7]), _frame_text(events[7:])]
    built = parse_frame(texts[0]) + parse_frame(texts[1])

    def translator() -> TurnTranslator:
        t = TurnTranslator(turn_cursor=1, chat_id=CHAT)
        if open_blocks:
            t.ingest(built[0])
        return t

    want_translator = translator()
    want: list[Any] = []
    for event in built[:7]:
        want += want_translator.ingest(event)

    queue = EventQueue()
    for text in texts:
        queue.extend(parse_stream_frame(text))
    queue.lazy = True
    assert type(collections.deque.__getitem__(queue, 0)) is DeltaWire
    queue[1]  # one delta built in place: the run takes both kinds
    got_translator = translator()
    got = got_translator.ingest_run(queue)
    assert _parts(got) == _parts(want)
    assert [type(p) for p in got] == [type(p) for p in want]
    assert {TextDelta, ReasoningDelta} <= {type(p) for p in got}
    assert list(queue) == built[7:]
    assert type(queue[0]) is StatusEvent
    assert _parts(got_translator.finish()) == _parts(want_translator.finish())


def test_runs_of_one_delta_give_what_ingest_gives_event_by_event() -> None:
    """A queue holding one delta at a time, as frames of one event leave it: text and
    reasoning deltas, empty ones, roles that take no delta, blocks opening and changing
    kind, more deltas of a kind than the translator keeps pending, an event built before
    the run, and a delta after the segment finished: the same parts as ``ingest`` gives."""
    events = [delta("a", 1)]
    events += [delta("b", seq) for seq in range(2, 300)]
    events += [delta("", 300), delta("r", 301, kind="reasoning"), delta("", 302, kind="reasoning")]
    events += [delta("s", seq, kind="reasoning") for seq in range(303, 600)]
    user = delta("u", 600)
    user["message_part"]["role"] = "user"
    tool = delta("t", 601, kind="reasoning")
    tool["message_part"]["role"] = "tool"
    events += [user, tool, delta("c", 602), delta("d", 603), snapshot(2, "x")]
    texts = [_frame_text([event]) for event in events]

    want_translator = TurnTranslator(turn_cursor=1, chat_id=CHAT)
    got_translator = TurnTranslator(turn_cursor=1, chat_id=CHAT)
    want: list[Any] = []
    got: list[Any] = []
    queue = EventQueue()
    for index, text in enumerate(texts):
        for event in parse_frame(text):
            want += want_translator.ingest(event)
        queue.extend(parse_stream_frame(text))
        queue.lazy = True
        if index == len(texts) - 3:
            queue[0]  # built in place: the run takes the event
        # As the segment's read loop: the queue goes to the run first, and an event that
        # heads it instead (no run taken) by itself.
        front = type(collections.deque.__getitem__(queue, 0))
        got += got_translator.ingest_run(queue)
        assert bool(queue) is (front not in DELTA_TYPES)
        if queue:
            got += got_translator.ingest(queue.popleft())
        assert not queue
    assert _parts(got) == _parts(want)
    assert [type(p) for p in got] == [type(p) for p in want]
    assert _parts(got_translator.finish()) == _parts(want_translator.finish())
    # Finished: a delta alone in the queue gives nothing, as ``ingest`` gives.
    queue.extend(parse_stream_frame(texts[1]))
    assert (
        got_translator.ingest_run(queue) == [] == want_translator.ingest(parse_frame(texts[1])[0])
    )
    assert not queue


def test_another_chat_s_delta_is_ignored_d31(caplog: pytest.LogCaptureFixture) -> None:
    other = "2b1c3d4e-0000-4000-8000-000000000002"
    reader = make_reader()
    net = Net(reader).start()
    net.accept()
    net.frame(delta("mine", 1), {**delta("theirs", 2), "chat_id": other}, delta("too", 2))
    got = net.popped()
    assert [e.part.text for e in got] == ["mine", "too"]
    assert reader.progress_events == 2
    assert "an event for another chat" in caplog.text
