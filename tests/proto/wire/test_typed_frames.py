"""An array frame of text and reasoning deltas is decoded in one pass into typed Structs made
from the wire model (``coder_proto._wire.events._typed_deltas``). Whatever it holds, a frame
gives the events, or the error, that the general way (decoded to dicts, then parsed) gives:
long integers, lone surrogates, deep or unknown members, unknown types, malformed text and
invalid ids included."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderProtocolError
from coder_proto._json import orjson_loads, std_loads
from coder_proto._wire import events, unicode
from coder_proto._wire.events import MessagePartEvent, parse_frame
from coder_proto._wire.message_parts import ReasoningPart, TextPart

CHAT = "c0ffee00-1234-4abc-8def-0123456789ab"


def _delta(part: str, *, seq: str = "1", extra: str = "", chat: str = CHAT) -> str:
    return (
        f'{{"type":"message_part","chat_id":"{chat}","message_part":{{"role":"assistant",'
        f'"part":{part},"history_version":1,"generation_attempt":1,"seq":{seq}{extra}}}}}'
    )


TEXT = '{"type":"text","text":"a few words"}'


def _outcome(data: str) -> tuple[str, str]:
    """``parse_frame(data)``: the events' repr (an int and an equal float differ there), or
    the error's type and message."""
    try:
        return ("ok", repr(parse_frame(data)))
    except CoderProtocolError as exc:
        return ("CoderProtocolError", str(exc))


def _both(data: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """``data`` parsed as it is, and with the typed decode turned off (the general way)."""
    typed = _outcome(data)
    with monkeypatch.context() as patch:
        patch.setattr(events, "_typed_deltas", lambda data: None)
        general = _outcome(data)
    return typed, general


@pytest.fixture(params=["stdlib", "orjson"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The decoder of the general way: the standard library's, or orjson's."""
    monkeypatch.setattr(unicode, "loads", std_loads if request.param == "stdlib" else orjson_loads)
    return str(request.param)


def test_a_server_frame_of_deltas_is_decoded_typed() -> None:
    reasoning = '{"type":"reasoning","text":"hm","signature":"sig"}'
    frame = "[" + _delta(TEXT) + "," + _delta(reasoning, seq="2") + "]\n"
    wires = events._typed_deltas(frame)
    assert wires is not None
    # The deltas wait as the decode's Structs; their events are built from them.
    assert [type(w) for w in wires] == [events.DeltaWire, events.DeltaWire]
    got = events._built(wires)
    assert got == [
        MessagePartEvent("assistant", TextPart("a few words"), 1, 1, 1, CHAT),
        MessagePartEvent("assistant", ReasoningPart("hm", "sig"), 1, 1, 2, CHAT),
    ]
    assert [type(e.part) for e in got] == [TextPart, ReasoningPart]  # type: ignore[union-attr]
    assert got == parse_frame(frame)


#: A text and a reasoning part as the server writes them: every member of every part type,
#: empty where the part's type does not use it (wire 3.5).
ZEROS = ',"url":"","media_type":"","file_name":"","start_line":0,"end_line":0,"content":"","context_file_path":"","skill_name":""'
SERVER_TEXT = '{"type":"text","text":"a few words"' + ZEROS + "}"
SERVER_REASONING = '{"type":"reasoning","text":"hm"' + ZEROS + ',"signature":"sig"}'


def test_a_frame_of_deltas_with_the_servers_empty_members_is_decoded_typed(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server writes the members of every part type on every part, empty where unused:
    such a frame takes the typed decode, with the events the general way gives."""
    frame = "[" + _delta(SERVER_TEXT) + "," + _delta(SERVER_REASONING, seq="2") + "]\n"
    wires = events._typed_deltas(frame)
    assert wires is not None
    assert events._built(wires) == [
        MessagePartEvent("assistant", TextPart("a few words"), 1, 1, 1, CHAT),
        MessagePartEvent("assistant", ReasoningPart("hm", "sig"), 1, 1, 2, CHAT),
    ]
    typed, general = _both(frame, monkeypatch)
    assert typed == general


@pytest.mark.parametrize(
    "member",
    [
        '"url":"https://example.com"',
        '"start_line":3',
        '"start_line":false',
        '"start_line":0.0',
        '"content":null',
        '"skill_name":["x"]',
        '"end_line":' + "9" * 5000,
    ],
)
def test_a_part_member_of_another_type_with_a_value_goes_the_general_way(
    member: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the empty value is taken typed: any other value of another type's member (or an
    integer past the digit limit) is left to the general way, which answers the same."""
    frame = "[" + _delta('{"type":"text","text":"t",' + member + "}") + "]"
    assert events._typed_deltas(frame) is None
    typed, general = _both(frame, monkeypatch)
    assert typed == general


@pytest.mark.parametrize(
    "frame",
    [
        # Not an array of deltas, or not in the shape the Structs take exactly.
        _delta(TEXT),
        "[" + _delta(TEXT) + ',{"type":"status","chat_id":"c","status":{"status":"running"}}]',
        "[" + _delta(TEXT, seq="1.0") + "]",
        "[" + _delta(TEXT, seq="true") + "]",
        "[" + _delta(TEXT, extra=',"added_by_a_newer_server":1') + "]",
        "[" + _delta('{"type":"text","text":"x","provider_metadata":{}}') + "]",
        "[" + _delta('{"type":"tool-call","tool_call_id":"t","tool_name":"n"}') + "]",
        "[" + _delta('{"type":"text"}') + "]",
        "[" + _delta('{"type":"text","text":"\\ud800"}') + "]",
        "[" + _delta(TEXT) + ",1]",
        "[" + _delta(TEXT) + "",
        '[{"type":"message_part","type":"status","message_part":{"part":' + TEXT + "}}]",
        ("[" + _delta(TEXT) + "]").replace(f'"chat_id":"{CHAT}"', '"chat_id":null'),
    ],
)
def test_other_documents_go_the_general_way(frame: str) -> None:
    assert events._typed_deltas(frame) is None


@pytest.mark.parametrize(
    ("frame", "want"),
    [
        # Coordinates beyond 64 bits stay exact integers.
        ("[" + _delta(TEXT, seq=str(2**70)) + "]", ("ok", str(2**70))),
        ("[" + _delta(TEXT, seq=str(-(2**64))) + "]", ("ok", str(-(2**64)))),
        # A float coordinate stays a float (an untrackable delta, D14).
        ("[" + _delta(TEXT, seq="3.0") + "]", ("ok", "seq=3.0")),
        # A lone surrogate becomes U+FFFD (D32); a valid pair is one code point.
        ("[" + _delta('{"type":"text","text":"a\\ud800b"}') + "]", ("ok", "a\ufffdb")),
        ("[" + _delta('{"type":"text","text":"\\ud83d\\ude00"}') + "]", ("ok", "\U0001f600")),
        # Integers longer than the interpreter's digit limit, where the Structs read them and
        # where they skip nothing: refused as the standard library refuses them.
        ("[" + _delta(TEXT, seq="9" * 5000) + "]", ("CoderProtocolError", "failed to parse")),
        (
            "[" + _delta(TEXT, extra=',"x":' + "9" * 5000) + "]",
            ("CoderProtocolError", "failed to parse"),
        ),
        # An unknown member nested deeper than the standard library has room for.
        (
            "[" + _delta(TEXT, extra=',"x":' + "[" * 100_000 + "]" * 100_000) + "]",
            ("CoderProtocolError", "failed to parse"),
        ),
        # An invalid chat id is the same error on both ways (wire 3.9).
        ("[" + _delta(TEXT, chat="not an id") + "]", ("CoderProtocolError", "chat_id")),
    ],
)
def test_hostile_deltas_give_the_general_ways_answer(
    frame: str, want: tuple[str, str], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    typed, general = _both(frame, monkeypatch)
    assert typed == general
    assert typed[0] == want[0] and want[1] in typed[1]


_texts = st.lists(
    st.sampled_from(
        ["a", "é", "\u2028", '"', "\\", "}", ",", "\ud83d\ude00", "\ud800", "\x7f", " "]
    ),
    max_size=5,
).map("".join)

_numbers = st.one_of(
    st.none(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.just("1"),
    st.just([[1]]),
)

_parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _texts}),
    st.fixed_dictionaries(
        {"type": st.just("reasoning"), "text": _texts},
        optional={
            "signature": st.one_of(st.none(), _texts, st.integers()),
            "created_at": st.one_of(st.none(), _texts),
            "completed_at": st.none(),
        },
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["text", "reasoning", "source", "x"])}),
    st.fixed_dictionaries({"type": st.just("text"), "text": _texts, "extra": _numbers}),
    # The server's members of other part types: mostly empty, sometimes not.
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "reasoning"]), "text": _texts},
        optional={
            "url": st.one_of(st.just(""), _texts),
            "start_line": st.one_of(st.just(0), _numbers),
            "content": st.one_of(st.just(""), _numbers),
            "skill_name": st.just(""),
        },
    ),
)

_deltas = st.fixed_dictionaries(
    {
        "type": st.just("message_part"),
        "message_part": st.fixed_dictionaries(
            {"part": _parts},
            optional={
                "role": st.one_of(
                    st.none(), st.sampled_from(["assistant", "tool", ""]), st.just(1)
                ),
                "history_version": _numbers,
                "generation_attempt": _numbers,
                "seq": _numbers,
            },
        ),
    },
    optional={
        "chat_id": st.one_of(st.just(CHAT), st.just(""), st.none(), st.just("bad id")),
        "added": _numbers,
    },
)

_items = st.one_of(
    _deltas,
    st.just({"type": "status", "chat_id": CHAT, "status": {"status": "running"}}),
    st.just({"type": "no-such-event"}),
    st.integers(),
)


@settings(max_examples=300, deadline=None)
@given(
    frame=st.lists(_items, max_size=6),
    ensure_ascii=st.booleans(),
    damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.sampled_from(["", "]", '"']))),
)
def test_any_frame_gives_the_general_ways_events_or_error(
    frame: list[Any], ensure_ascii: bool, damage: tuple[int, str] | None
) -> None:
    """Generated frames of deltas in every shape (and some damaged): the events' repr or the
    error is the general way's, on both of its decoders."""
    data = json.dumps(frame, separators=(",", ":"), ensure_ascii=ensure_ascii)
    if damage is not None:
        at = damage[0] % (len(data) + 1)
        data = data[:at] + damage[1] + data[at + 1 :]
    saved = (events._typed_deltas, unicode.loads)
    try:
        for loads in (std_loads, orjson_loads):
            unicode.loads = loads
            events._typed_deltas = saved[0]
            typed = _outcome(data)
            events._typed_deltas = lambda data: None
            assert typed == _outcome(data)
    finally:
        events._typed_deltas, unicode.loads = saved


def test_queued_deltas_share_their_role_and_chat_id() -> None:
    """A backlog of deltas holds one string for the chat id and one per role, not a copy in
    every event (the events are equal either way)."""
    frame = "[" + ",".join(_delta(TEXT, seq=str(i)) for i in range(1, 40)) + "]"
    parsed = parse_frame(frame)
    assert len(parsed) == 39
    assert len({id(e.chat_id) for e in parsed}) == 1
    assert len({id(e.role) for e in parsed}) == 1  # type: ignore[union-attr]
    odd = parse_frame("[" + _delta(TEXT).replace('"assistant"', '"narrator"') + "]")
    assert odd[0].role == "narrator"  # type: ignore[union-attr]


def test_a_long_frame_of_other_events_keeps_no_utf8_copy() -> None:
    """A long frame that does not start as a frame of deltas (a message's snapshot, text not
    ASCII) is not handed to the typed decode, which would have left a UTF-8 copy of the
    whole frame in its ``str``; short frames, and long ones of deltas, are decoded typed."""
    snapshot = json.dumps(
        {
            "type": "message",
            "chat_id": CHAT,
            "message": {
                "id": 7,
                "role": "assistant",
                "content": [{"type": "text", "text": "é" * 9000}],
            },
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    frame = "[" + snapshot + "]"
    size = sys.getsizeof(frame)
    assert events._typed_deltas(frame) is None
    assert sys.getsizeof(frame) == size
    assert parse_frame(frame)[0].type == "message"
    long_deltas = "[" + ",".join([_delta('{"type":"text","text":"é"}')] * 40) + "]"
    assert len(long_deltas) > events._PIECE and events._typed_deltas(long_deltas) is not None
    assert events._typed_deltas("[" + _delta(TEXT) + "]") is not None


# -- message snapshots in a frame of deltas ---------------------------------------------------


def _snapshot(message: str, *, chat: str = CHAT) -> str:
    return f'{{"type":"message","chat_id":"{chat}","message":{message}}}'


MESSAGE = (
    '{"id":7,"chat_id":"' + CHAT + '","role":"assistant","created_at":"2025-01-01T00:00:01Z",'
    '"content":[{"type":"reasoning","text":"hm"},{"type":"text","text":"a few words"}],'
    '"usage":{"input_tokens":3,"output_tokens":2}}'
)


def test_a_frame_of_deltas_with_a_snapshot_is_decoded_typed_in_one_pass(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message's snapshot among deltas (a commit in a backlog) is decoded with them, its
    message as the general way decodes it: the same events, the same raw value (the replay
    filter's fingerprint of it is the same)."""
    from coder_proto._stream.reader import _fingerprint
    from coder_proto._wire.events import MessageEvent

    frame = "[" + _delta(TEXT) + "," + _snapshot(MESSAGE) + "," + _delta(TEXT, seq="2") + "]\n"
    wires = events._typed_deltas(frame)
    assert wires is not None
    typed = events._built(wires)
    assert [type(e) for e in typed] == [MessagePartEvent, MessageEvent, MessagePartEvent]
    with monkeypatch.context() as patch:
        patch.setattr(events, "_typed_deltas", lambda data: None)
        general = parse_frame(frame)
    assert typed == general and repr(typed) == repr(general)
    snapshot, other = typed[1], general[1]
    assert type(snapshot) is MessageEvent and type(other) is MessageEvent
    assert snapshot.message.raw == other.message.raw == json.loads(MESSAGE)
    assert list(snapshot.message.raw) == list(other.message.raw)
    assert _fingerprint(snapshot.message.raw) == _fingerprint(other.message.raw)
    assert snapshot.chat_id == CHAT
    # A frame of one snapshot, and a snapshot whose event names no chat.
    alone = "[" + _snapshot(MESSAGE).replace(f',"chat_id":"{CHAT}"', "", 1) + "]"
    only = events._typed_deltas(alone)
    assert only is not None and only[0].chat_id == ""
    assert _both(alone, monkeypatch)[0] == _both(alone, monkeypatch)[1]


_DEEP = "[" * 200 + "]" * 200


@pytest.mark.parametrize(
    ("message", "typed_decodes", "want"),
    [
        # Numbers and text the snapshot's own decode reads as the whole frame's does.
        (MESSAGE.replace('"output_tokens":2', '"output_tokens":' + str(2**70)), True, "ok"),
        # A lone surrogate: msgspec refuses it, the general way replaces it (D32).
        (MESSAGE.replace('"a few words"', '"a\\ud800b"'), False, "a\ufffdb"),
        (MESSAGE.replace('"a few words"', '"\\ud83d\\ude00"'), True, "\U0001f600"),
        (MESSAGE.replace('"usage"', '"added_by_a_newer_server":{"n":[1,2.5]},"usage"'), True, "ok"),
        # Beyond the digit limit: refused as the standard library refuses it.
        (MESSAGE.replace('"output_tokens":2', '"output_tokens":' + "9" * 5000), False, "failed"),
        # Not a message: the general way's error.
        ("null", False, "'message' should be an object"),
        ('{"id":"seven","role":"assistant","content":[]}', False, "malformed"),
        # Long, or with many brackets: decoded where it lies in the whole frame.
        (MESSAGE.replace('"a few words"', '"' + "word " * 2000 + '"'), False, "ok"),
        (MESSAGE.replace('"usage"', '"x":[' + "[1]," * 200 + '1],"usage"'), False, "ok"),
        (MESSAGE.replace('"usage"', '"x":' + _DEEP + ',"usage"'), False, "ok"),
    ],
)
def test_hostile_snapshots_give_the_general_ways_answer(
    message: str,
    typed_decodes: bool,
    want: str,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frame = "[" + _delta(TEXT) + "," + _snapshot(message) + "]"
    try:
        decoded = events._typed_deltas(frame) is not None
    except CoderProtocolError:
        decoded = False
    assert decoded is typed_decodes
    typed, general = _both(frame, monkeypatch)
    assert typed == general
    assert want in typed[1] or typed[0] == want


def test_a_snapshot_nested_too_deeply_fails_as_the_whole_frame_does(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = MESSAGE.replace('"usage"', '"x":' + "[" * 100_000 + "]" * 100_000 + ',"usage"')
    frame = "[" + _delta(TEXT) + "," + _snapshot(deep) + "]"
    typed, general = _both(frame, monkeypatch)
    assert typed == general == ("CoderProtocolError", "failed to parse chat stream frame")


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        # The snapshot's chat id is checked as the general way checks it (wire 3.9) ...
        ("[" + _delta(TEXT) + "," + _snapshot(MESSAGE, chat="not an id") + "]", "chat_id"),
        # ... after its message: a malformed message is that event's error.
        (
            "[" + _snapshot('{"id":"seven","role":"assistant"}', chat="not an id") + "]",
            "malformed",
        ),
    ],
)
def test_a_snapshots_errors_come_in_the_general_ways_order(
    frame: str, error: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    typed, general = _both(frame, monkeypatch)
    assert typed == general and typed[0] == "CoderProtocolError" and error in typed[1]


@pytest.mark.parametrize(
    "frame",
    [
        # Duplicate type members, and a chat id that is not a string: the general way.
        "[" + _snapshot(MESSAGE).replace('"type":"message"', '"type":"message","type":"x"') + "]",
        "[" + _snapshot(MESSAGE).replace('"type":"message"', '"type":"x","type":"message"') + "]",
        "[" + _snapshot(MESSAGE).replace(f'"chat_id":"{CHAT}"', '"chat_id":null', 1) + "]",
        # A member the event's Struct does not know.
        "[" + _snapshot(MESSAGE)[:-1] + ',"added":1}]',
        # A snapshot without its message.
        '[{"type":"message","chat_id":"' + CHAT + '"}]',
    ],
)
def test_other_snapshot_events_go_the_general_way(
    frame: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert events._typed_deltas(frame) is None
    typed, general = _both(frame, monkeypatch)
    assert typed == general


_messages = st.fixed_dictionaries(
    {"id": st.one_of(st.integers(-3, 2**70), st.just("7"), st.none())},
    optional={
        "role": st.one_of(st.sampled_from(["assistant", "user", "tool"]), st.integers()),
        "content": st.one_of(st.lists(_parts, max_size=3), st.just({})),
        "usage": st.one_of(st.none(), st.fixed_dictionaries({"output_tokens": _numbers})),
        "created_at": _texts,
        "added": _numbers,
    },
)

_snapshots = st.fixed_dictionaries(
    {"type": st.just("message"), "message": st.one_of(_messages, _numbers)},
    optional={"chat_id": st.one_of(st.just(CHAT), st.just(""), st.none(), st.just("bad id"))},
)


@settings(max_examples=300, deadline=None)
@given(
    frame=st.lists(st.one_of(_deltas, _snapshots), max_size=6),
    ensure_ascii=st.booleans(),
    damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.sampled_from(["", "]", '"']))),
)
def test_any_frame_with_snapshots_gives_the_general_ways_events_or_error(
    frame: list[Any], ensure_ascii: bool, damage: tuple[int, str] | None
) -> None:
    """Generated frames of deltas and snapshots (some damaged): the events' repr or the
    error is the general way's, on both of its decoders."""
    data = json.dumps(frame, separators=(",", ":"), ensure_ascii=ensure_ascii)
    if damage is not None:
        at = damage[0] % (len(data) + 1)
        data = data[:at] + damage[1] + data[at + 1 :]
    saved = (events._typed_deltas, unicode.loads)
    try:
        for loads in (std_loads, orjson_loads):
            unicode.loads = loads
            events._typed_deltas = saved[0]
            typed = _outcome(data)
            events._typed_deltas = lambda data: None
            assert typed == _outcome(data)
    finally:
        events._typed_deltas, unicode.loads = saved


@pytest.mark.parametrize("bad", [False, True])
def test_a_snapshot_ahead_of_deltas_keeps_the_frame_s_order_for_every_check(
    bad: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame of deltas with a snapshot first: each delta's chat id is checked (a new chat,
    no chat, an invalid one) after the snapshot, as the general way checks them, and the
    queued deltas share the checked chat id."""
    other = "c0ffee00-1234-4abc-8def-0123456789ac"
    assert parse_frame("[" + _delta(TEXT, chat=other) + "]")[0].chat_id == other
    last = _delta(TEXT, seq="3", chat="not an id" if bad else CHAT)
    frame = "[" + ",".join([_snapshot(MESSAGE), _delta(TEXT), _delta(TEXT, chat=""), last]) + "]"
    typed, general = _both(frame, monkeypatch)
    assert typed == general
    assert (typed[0] == "CoderProtocolError") is bad
    if not bad:
        wires = events._typed_deltas(frame)
        assert wires is not None
        assert wires[1].chat_id is wires[3].chat_id == CHAT
        assert wires[2].chat_id == ""
