"""A long array frame that the typed decode of deltas does not take is parsed a piece at a
time (``coder_proto._wire.events.parse_frame``): the events, and the error for a frame that
is not valid JSON, are those of parsing the whole frame as one document, on both decoding
paths, wherever the cuts fall."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderProtocolError
from coder_proto._json import orjson_loads, std_loads
from coder_proto._wire import events, unicode
from coder_proto._wire.events import MessagePartEvent, parse_frame

BETWEEN = '},{"type":"'

DELTA = (
    '{"type":"message_part","chat_id":"c0ffee00-1234-4abc-8def-0123456789ab",'
    '"message_part":{"role":"assistant","part":{"type":"text","text":"a few words of text"},'
    '"history_version":1,"generation_attempt":1,"seq":%d}}'
)


def _batch(count: int, first_seq: int = 1) -> str:
    """An array frame of ``count`` text deltas as the server writes it."""
    return "[" + ",".join(DELTA % (first_seq + i) for i in range(count)) + "]\n"


@pytest.fixture(params=["stdlib", "orjson"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The frame decoder in use: the standard library's, or orjson's (the test extra)."""
    monkeypatch.setattr(unicode, "loads", std_loads if request.param == "stdlib" else orjson_loads)
    return str(request.param)


def _outcome(data: str) -> tuple[str, str]:
    """``parse_frame(data)``: the events' repr (an int and an equal float differ there), or
    the error's type and message."""
    try:
        return ("ok", repr(parse_frame(data)))
    except CoderProtocolError as exc:
        return ("CoderProtocolError", str(exc))


def _outcomes(data: str, piece: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """``data`` parsed whole and in pieces of at least ``piece`` characters."""
    monkeypatch.setattr(events, "_PIECE", 10**9)
    whole = _outcome(data)
    _pieces_of(piece, monkeypatch)
    return whole, _outcome(data)


def _pieces_of(piece: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of at least ``piece`` characters, a frame with a longer one than twice that
    decoded whole (as with the default 4 KiB)."""
    monkeypatch.setattr(events, "_PIECE", piece)
    monkeypatch.setattr(events, "_LONGEST_PIECE", 2 * piece)


def _documents(data: str, piece: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The documents ``parse_frame(data)`` decodes, in pieces of ``piece`` characters."""
    seen: list[str] = []
    real = events._parse_document

    def spy(document: str | bytes) -> Any:
        seen.append(document)  # type: ignore[arg-type]
        return real(document)

    _pieces_of(piece, monkeypatch)
    monkeypatch.setattr(events, "_parse_document", spy)
    try:
        parse_frame(data)
    except CoderProtocolError:
        pass
    monkeypatch.setattr(events, "_parse_document", real)
    return seen


def test_a_batch_is_decoded_in_pieces_cut_between_events(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch the typed decode does not take (here its roles are not strings) goes the
    general way, a piece at a time."""
    frame = _batch(256).replace('"role":"assistant"', '"role":1')
    assert events._typed_deltas(frame) is None
    documents = _documents(frame, 4096, monkeypatch)
    assert len(documents) == len(frame) // 4096 + 1 or len(documents) == len(frame) // 4096
    assert all(len(d) < 4096 + len(DELTA) + 4 for d in documents)
    assert documents[0].startswith("[{") and documents[-1].endswith("}]\n")
    assert all(
        d.startswith('[{"type":"message_part"') and d.endswith("}]") for d in documents[1:-1]
    )
    whole, pieces = _outcomes(frame, 4096, monkeypatch)
    assert pieces == whole
    parsed = parse_frame(frame)
    assert [e.seq for e in parsed] == list(range(1, 257))  # type: ignore[union-attr]
    assert all(type(e) is MessagePartEvent for e in parsed)


def test_a_server_batch_of_deltas_is_decoded_typed_and_whole(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of text deltas as servers write it is decoded by the typed decode at once,
    without pieces (its Structs are not tracked by the collector), to the same events."""
    frame = _batch(256)
    assert _documents(frame, 4096, monkeypatch) == []
    whole, pieces = _outcomes(frame, 4096, monkeypatch)
    assert pieces == whole and whole[0] == "ok"
    with monkeypatch.context() as patch:
        patch.setattr(events, "_typed_deltas", lambda data: None)
        assert _outcome(frame) == whole
    assert [e.seq for e in parse_frame(frame)] == list(range(1, 257))  # type: ignore[union-attr]


def test_a_snapshot_frame_is_decoded_whole_at_once(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message's parts are never typed ``message_part``: a frame holding a snapshot with
    many parts is not cut inside it and is decoded once."""
    frame = "[" + _snapshot(600) + "]\n"
    assert len(frame) > 4 * 4096
    assert _documents(frame, 4096, monkeypatch) == [frame]


def test_short_frames_and_frames_that_are_not_arrays_are_decoded_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    long_object = json.dumps({"type": "status", "chat_id": "c", "pad": "x" * 9000})
    for data in (
        _batch(3),
        " " + _batch(256),
        long_object,
        _batch(256).replace(BETWEEN, '},{"kind":"'),
        "[" + "1," * 5000 + "1]",
    ):
        assert len(_documents(data, 4096, monkeypatch)) == 1


def _snapshot(parts: int) -> str:
    return json.dumps(
        {
            "type": "message",
            "chat_id": "c",
            "message": {
                "id": 7,
                "role": "assistant",
                "content": [{"type": "text", "text": f"p{i}"} for i in range(parts)],
            },
        },
        separators=(",", ":"),
    )


def test_a_cut_inside_an_event_decodes_the_whole_frame(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event can hold the text between events too (here a list of objects typed
    ``message_part`` inside an event of a type the client does not know): a piece cut there
    does not decode, and the whole frame is decoded as one document."""
    odd = json.dumps(
        {"type": "later", "list": [{"type": "message_part", "n": i} for i in range(30)]},
        separators=(",", ":"),
    )
    frame = "[" + ",".join([DELTA % 1, DELTA % 2, odd, DELTA % 3]) + "]"
    assert frame.count(BETWEEN) > 30
    documents = _documents(frame, 150, monkeypatch)
    assert len(documents) == 3 and documents[-1] == frame
    assert documents[0] == "[" + DELTA % 1 + "]"  # the first piece decoded
    assert documents[1].startswith("[" + DELTA % 2 + "," + odd[:30])  # cut inside the event
    whole, pieces = _outcomes(frame, 150, monkeypatch)
    assert pieces == whole and whole[0] == "ok"


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_frame_with_a_long_event_is_decoded_whole_without_a_copy(
    where: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long event (a long message's snapshot beside a few deltas) ends the pieces: the
    frame is decoded whole, and no piece copies the long event's text."""
    deltas = [DELTA % i for i in range(1, 60)]
    at = {"first": 0, "middle": 30, "last": 59}[where]
    snapshot = _snapshot(1).replace('"p0"', '"' + "word " * 4_000 + '"')
    frame = "[" + ",".join([*deltas[:at], snapshot, *deltas[at:]]) + "]"
    documents = _documents(frame, 4096, monkeypatch)
    assert documents[-1] == frame
    assert sum(len(d) for d in documents[:-1]) < 2 * 4096 * 2
    whole, pieces = _outcomes(frame, 4096, monkeypatch)
    assert pieces == whole and whole[0] == "ok"


def test_a_frame_that_is_not_valid_json_fails_as_a_whole_frame_does(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = _batch(64)
    for bad in (
        frame[:-5],
        frame.replace(BETWEEN, '},,{"type":"', 1),
        frame + "x",
        frame[:-2] + ",]",
    ):
        whole, pieces = _outcomes(bad, 50, monkeypatch)
        assert whole == pieces == ("CoderProtocolError", "failed to parse chat stream frame")


def test_a_batch_of_deltas_starts_no_garbage_collection() -> None:
    """Parsing a 256-delta frame keeps fewer new container objects alive than the cyclic
    collector's young-generation threshold (700 on CPython 3.11 and 3.12), so no collection
    starts and moves the frame's objects to an older generation. Whole, the frame's decoded
    objects and its events are about 1,200."""
    frame = _batch(256)
    started: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    parse_frame(frame)
    if not gc.isenabled():  # pragma: no cover - the suite runs with the collector on
        pytest.fail("the cyclic garbage collector is disabled")
    threshold = gc.get_threshold()
    gc.set_threshold(700, *threshold[1:])
    gc.collect()
    gc.callbacks.append(callback)
    try:
        for _ in range(8):
            parsed = parse_frame(frame)
            del parsed
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    assert started == []


_text = st.lists(
    st.sampled_from(['"', "\\", "}", "{", ",", "[", "]", "a", "\u00e9", "\u2028", BETWEEN]),
    max_size=6,
).map("".join)

_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "reasoning", "message_part"]), "text": _text}
)

_event = st.one_of(
    st.builds(
        lambda part, seq: {
            "type": "message_part",
            "chat_id": "c",
            "message_part": {"role": "assistant", "part": part, "seq": seq},
        },
        _part,
        st.one_of(st.integers(0, 2**70), st.floats(allow_nan=False, allow_infinity=False)),
    ),
    st.builds(
        lambda parts, i: {
            "type": "message",
            "chat_id": "c",
            "message": {"id": i, "role": "assistant", "content": parts},
        },
        st.lists(_part, max_size=4),
        st.integers(1, 99),
    ),
    st.just({"type": "status", "chat_id": "c", "status": {"status": "running"}}),
    st.just({"type": "no-such-event", "x": [{"type": "message_part"}, {"type": "b"}]}),
    st.integers(),
    st.lists(st.just({"type": "q"}), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(
    frame=st.lists(_event, max_size=12),
    ensure_ascii=st.booleans(),
    piece=st.integers(1, 120),
    longest=st.integers(1, 400),
    damage=st.one_of(
        st.none(), st.tuples(st.integers(0, 10**6), st.sampled_from(["", "x", ",", "]", "}", '"']))
    ),
)
def test_any_frame_parses_in_pieces_as_it_does_whole(
    frame: list[Any],
    ensure_ascii: bool,
    piece: int,
    longest: int,
    damage: tuple[int, str] | None,
) -> None:
    """Any frame, valid or damaged (a character replaced or removed at any place), gives the
    same events or the same error whole and in pieces cut anywhere (whatever the length that
    sends a frame to one decode), on both decoding paths."""
    data = json.dumps(frame, separators=(",", ":"), ensure_ascii=ensure_ascii)
    if damage is not None:
        at = damage[0] % (len(data) + 1)
        data = data[:at] + damage[1] + data[at + 1 :]
    saved = (events._PIECE, events._LONGEST_PIECE, unicode.loads)
    try:
        for loads in (std_loads, orjson_loads):
            unicode.loads = loads
            events._PIECE = 10**9
            whole = _outcome(data)
            events._PIECE = piece
            events._LONGEST_PIECE = longest
            assert _outcome(data) == whole
    finally:
        events._PIECE, events._LONGEST_PIECE, unicode.loads = saved


def test_a_connections_text_frame_parses_as_parse_frame_parses_it(path: str) -> None:
    """The reader's entry (``parse_text_frame``, the typed decode tried first and once) gives
    what ``parse_frame`` gives: frames the typed decode takes, long frames it does not
    (decoded in pieces, or whole when no cut is found), short ones, and errors."""
    snapshot = _snapshot(3)
    untyped = _batch(256).replace('"role":"assistant"', '"role":1')
    frames = [
        _batch(3),
        _batch(256),
        untyped,
        "[" + snapshot + "," + _batch(200)[1:],
        "[" + "1," * 5000 + "1]",
        json.dumps({"type": "status", "chat_id": "c", "status": {"status": "running"}}),
        untyped[:-9],
        "[",
    ]
    assert events._typed_deltas(untyped) is None
    for frame in frames:
        try:
            want: Any = parse_frame(frame)
        except CoderProtocolError as exc:
            want = str(exc)
        try:
            got: Any = events.parse_text_frame(frame)
        except CoderProtocolError as exc:
            got = str(exc)
        assert repr(got) == repr(want)


@settings(max_examples=200, deadline=None)
@given(
    frame=st.lists(_event, max_size=12),
    ensure_ascii=st.booleans(),
    piece=st.integers(1, 120),
    damage=st.one_of(
        st.none(), st.tuples(st.integers(0, 10**6), st.sampled_from(["", "x", ",", "]", "}", '"']))
    ),
)
def test_any_text_frame_parses_as_parse_frame_parses_it(
    frame: list[Any], ensure_ascii: bool, piece: int, damage: tuple[int, str] | None
) -> None:
    data = json.dumps(frame, separators=(",", ":"), ensure_ascii=ensure_ascii)
    if damage is not None:
        at = damage[0] % (len(data) + 1)
        data = data[:at] + damage[1] + data[at + 1 :]
    saved = (events._PIECE, events._LONGEST_PIECE, unicode.loads)
    try:
        for loads in (std_loads, orjson_loads):
            unicode.loads = loads
            events._PIECE = piece
            events._LONGEST_PIECE = 2 * piece
            try:
                want = ("ok", repr(parse_frame(data)))
            except CoderProtocolError as exc:
                want = ("CoderProtocolError", str(exc))
            try:
                got = ("ok", repr(events.parse_text_frame(data)))
            except CoderProtocolError as exc:
                got = ("CoderProtocolError", str(exc))
            assert got == want
    finally:
        events._PIECE, events._LONGEST_PIECE, unicode.loads = saved
