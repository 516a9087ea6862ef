"""The per-delta classes and the ``message_part`` shortcut behave exactly like the general
wire model (wire 3.5, 4.2-4.3; D14).

The streaming hot path builds ``MessagePartEvent``, ``TextPart``/``ReasoningPart`` and
``TextDelta``/``ReasoningDelta`` once per delta with hand-written ``__init__`` methods, and
parses ``message_part`` events without the generic part dispatch when it can. These tests pin
that the shortcut is invisible: same values, same errors, same attrs semantics.
"""

from __future__ import annotations

import collections
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderProtocolError, ReasoningDelta, ReasoningPart, TextDelta, TextPart
from coder_proto._outputs import make_reasoning_delta, make_text_delta
from coder_proto._wire.events import MessagePartEvent, events_from_json, parse_frame
from coder_proto._wire.message_parts import parse_part
from coder_proto._wire.unicode import _may_hold_surrogates

CLASSES: list[tuple[type[Any], dict[str, Any]]] = [
    (TextPart, {"text": "hi"}),
    (ReasoningPart, {"text": "r", "signature": "s", "created_at": "t0", "completed_at": "t1"}),
    (
        MessagePartEvent,
        {
            "role": "assistant",
            "part": TextPart("x"),
            "history_version": 1,
            "generation_attempt": 2,
            "seq": 3,
            "chat_id": "c",
        },
    ),
    (TextDelta, {"id": "text-1", "delta": "d"}),
    (ReasoningDelta, {"id": "reasoning-2", "delta": "d"}),
]


@pytest.mark.parametrize(("cls", "kwargs"), CLASSES, ids=lambda v: getattr(v, "__name__", ""))
def test_per_delta_classes_keep_their_attrs_semantics(
    cls: type[Any], kwargs: dict[str, Any]
) -> None:
    """Frozen, compared and hashed by value, evolvable, picklable, positional in field
    order: what the attrs-generated ``__init__`` gave."""
    obj = cls(**kwargs)
    assert obj == cls(*kwargs.values())
    assert hash(obj) == hash(cls(**kwargs))
    for name, value in kwargs.items():
        assert getattr(obj, name) == value
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(obj, next(iter(kwargs)), "other")
    assert pickle.loads(pickle.dumps(obj)) == obj
    first = next(iter(kwargs))
    changed = attrs.evolve(obj, **{first: kwargs[first] if first == "part" else "changed"})
    assert type(changed) is cls
    assert [f.name for f in attrs.fields(cls) if f.init] == list(kwargs)
    assert cls.__match_args__ == tuple(kwargs)
    assert repr(obj).startswith(cls.__name__ + "(")


def test_defaults_and_wire_type_are_set() -> None:
    assert TextPart() == TextPart("") and TextPart().type == "text"
    assert ReasoningPart("r") == ReasoningPart("r", None, None, None)
    assert ReasoningPart().type == "reasoning"
    event = MessagePartEvent(None, TextPart("a"))
    assert (event.history_version, event.generation_attempt, event.seq, event.chat_id) == (
        None,
        None,
        None,
        "",
    )
    assert event.type == "message_part" and event.coordinates is None
    assert TextDelta("text-1", "x").type == "text-delta"
    assert ReasoningDelta("reasoning-1", "x").type == "reasoning-delta"


def test_the_translators_constructors_build_the_same_frozen_values() -> None:
    """``make_text_delta``/``make_reasoning_delta`` skip the ``__init__`` frame and nothing
    else: equal, hashed alike, frozen, every slot filled."""
    for make, cls in ((make_text_delta, TextDelta), (make_reasoning_delta, ReasoningDelta)):
        built = make("block-1", "chunk")
        assert type(built) is cls
        assert built == cls("block-1", "chunk") and hash(built) == hash(cls("block-1", "chunk"))
        assert (built.id, built.delta) == ("block-1", "chunk")
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            built.delta = "other"  # type: ignore[misc]
    # The wire type is a class constant on the per-delta classes, not a field.
    for wire_cls in (TextPart, ReasoningPart, MessagePartEvent):
        assert "type" not in {f.name for f in attrs.fields(wire_cls)}


# -- the message_part shortcut against the general part parser ---------------------------------

texts = st.one_of(
    st.text(max_size=8), st.none(), st.integers(), st.lists(st.integers(), max_size=1)
)
optional_strings = st.one_of(st.none(), st.text(max_size=4), st.integers())
kinds = st.sampled_from(["text", "reasoning", "tool-call", "source", "mystery", None, 7])


@st.composite
def raw_parts(draw: st.DrawFn) -> dict[str, Any]:
    part: dict[str, Any] = {}
    kind = draw(kinds)
    if kind is not None:
        part["type"] = kind
    if draw(st.booleans()):
        part["text"] = draw(texts)
    for key in ("signature", "created_at", "completed_at"):
        if draw(st.integers(0, 3)) == 0:
            part[key] = draw(optional_strings)
    # The Go server's zero-value keys appear on every part (wire 3.5).
    if draw(st.booleans()):
        part.update({"url": "", "media_type": "", "start_line": 0})
    return part


coordinates = st.one_of(st.none(), st.integers(-2, 5), st.booleans(), st.text(max_size=2))


@settings(max_examples=300, deadline=None)
@given(
    part=raw_parts(),
    role=st.one_of(st.none(), st.sampled_from(["assistant", "tool", "user"]), st.integers()),
    hv=coordinates,
    ga=coordinates,
    seq=coordinates,
    chat_id=st.one_of(
        st.none(),
        st.just(""),
        st.from_regex(r"[a-z0-9][a-z0-9_-]{0,2}", fullmatch=True),
        st.integers(),
    ),
)
def test_message_part_matches_the_general_parser(
    part: dict[str, Any], role: Any, hv: Any, ga: Any, seq: Any, chat_id: Any
) -> None:
    """wire 4.3: a ``message_part`` event's part is exactly what ``parse_part`` makes of the
    wire part (or the same ``CoderProtocolError``); role, coordinates and chat id are carried
    as received (a non-string role is ``None``, a non-string chat id ``""``; D14 decides
    later whether coordinates count). Chat ids that are not identifiers are refused on both
    ways alike (``test_an_invalid_chat_id_is_refused_on_every_way_an_event_is_parsed``)."""
    payload: dict[str, Any] = {"part": part}
    for key, value in (
        ("role", role),
        ("history_version", hv),
        ("generation_attempt", ga),
        ("seq", seq),
    ):
        if value is not None:
            payload[key] = value
    event: dict[str, Any] = {"type": "message_part", "message_part": payload}
    if chat_id is not None:
        event["chat_id"] = chat_id
    try:
        expected_part = parse_part(part)
    except CoderProtocolError:
        with pytest.raises(CoderProtocolError):
            events_from_json([event])
        return
    [parsed] = events_from_json([event])
    assert parsed == MessagePartEvent(
        role if type(role) is str else None,
        expected_part,
        hv,
        ga,
        seq,
        chat_id if type(chat_id) is str else "",
    )
    assert type(parsed.part) is type(expected_part)
    # The single-object frame form takes the same path.
    assert events_from_json(event) == [parsed]


def test_parsed_deltas_are_the_classes_themselves() -> None:
    """The parser builds each delta's event in a draft with the same slots and then gives it
    the class: what comes out is a ``MessagePartEvent`` in every respect (type, equality,
    hash, frozen, pickling, evolve)."""
    frame = (
        '[{"type":"message_part","chat_id":"c","message_part":{"role":"assistant",'
        '"part":{"type":"text","text":"hi"},"history_version":1,"generation_attempt":2,'
        '"seq":3}},{"type":"message_part","chat_id":"c","message_part":{"role":"assistant",'
        '"part":{"type":"reasoning","text":"hm"}}}]\n'
    )
    text, reasoning = parse_frame(frame)
    for event, expected in (
        (text, MessagePartEvent("assistant", TextPart("hi"), 1, 2, 3, "c")),
        (reasoning, MessagePartEvent("assistant", ReasoningPart("hm"), chat_id="c")),
    ):
        assert type(event) is MessagePartEvent and type(event.part) is type(expected.part)
        assert event == expected and hash(event) == hash(expected)
        assert repr(event) == repr(expected)
        assert pickle.loads(pickle.dumps(event)) == expected
        assert attrs.evolve(event, seq=9).seq == 9
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            event.seq = 4  # type: ignore[misc]
        # The part is built in a draft too (TextPartDraft, ReasoningPartDraft).
        part, expected_part = event.part, expected.part
        assert part == expected_part and hash(part) == hash(expected_part)
        assert repr(part) == repr(expected_part)
        assert pickle.loads(pickle.dumps(part)) == expected_part
        assert attrs.evolve(part, text="x").text == "x"
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            part.text = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"signature": None},
        {"signature": None, "created_at": None, "completed_at": None},
        {"signature": "s"},
        {"created_at": "t0"},
        {"completed_at": "t1", "signature": None},
    ],
)
def test_reasoning_deltas_keep_what_the_general_parser_keeps(extra: dict[str, Any]) -> None:
    """A reasoning delta with only its type and text, or with its other fields null, takes
    the shortcut; one with any of them set keeps it (both parsers agree either way)."""
    part = {"type": "reasoning", "text": "hm", **extra}
    event = {"type": "message_part", "message_part": {"role": "assistant", "part": part}}
    want = MessagePartEvent("assistant", parse_part(part))
    assert events_from_json([event]) == [want]
    assert events_from_json(event) == [want]
    assert type(want.part) is ReasoningPart


def test_translated_deltas_are_the_classes_themselves() -> None:
    """The translator's hot path builds its deltas in drafts given the class: each is a
    ``TextDelta``/``ReasoningDelta`` in every respect."""
    from coder_proto._stream.translator import TurnTranslator

    events = [
        _delta_event(kind, text)
        for kind, text in (("reasoning", "r1"), ("reasoning", "r2"), ("text", "t1"), ("text", "t2"))
    ]
    translator = TurnTranslator(turn_cursor=1)
    out: list[Any] = []
    for event in events:
        out += translator.ingest(event)
    reasoning, text = out[2], out[6]
    # The same from a run (TurnTranslator.ingest_run, the segment's read loop).
    translator = TurnTranslator(turn_cursor=1)
    run = translator.ingest(events[0]) + translator.ingest_run(collections.deque(events[1:]))
    assert run == out
    for got, expected in (
        (run[2], ReasoningDelta("reasoning-1", "r2")),
        (run[6], TextDelta("text-2", "t2")),
        (reasoning, ReasoningDelta("reasoning-1", "r2")),
        (text, TextDelta("text-2", "t2")),
    ):
        assert type(got) is type(expected)
        assert got == expected and hash(got) == hash(expected) and repr(got) == repr(expected)
        assert pickle.loads(pickle.dumps(got)) == expected
        assert attrs.evolve(got, delta="x").delta == "x"
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            got.delta = "other"


def test_elements_that_are_not_typed_objects_take_the_general_way() -> None:
    """wire 4.2: array elements that are not objects are skipped, an object without a type
    (or a non-string one) is an unknown event, whatever the order around a delta."""
    from coder_proto._wire.events import UnknownEvent

    delta = {
        "type": "message_part",
        "message_part": {"role": "assistant", "part": {"type": "text", "text": "x"}},
    }
    frame = [1, "message_part", None, ["type"], {"no": "type"}, delta, {"type": 7}, True]
    assert events_from_json(frame) == [
        UnknownEvent("", {"no": "type"}),
        MessagePartEvent("assistant", TextPart("x")),
        UnknownEvent("", {"type": 7}),
    ]


def test_reasoning_delta_with_signature_keeps_it() -> None:
    frame = (
        '[{"type":"message_part","chat_id":"c","message_part":{"role":"assistant",'
        '"part":{"type":"reasoning","text":"hm","signature":"sig"},"seq":1}}]\n'
    )
    [event] = parse_frame(frame)
    assert isinstance(event, MessagePartEvent)
    assert event.part == ReasoningPart("hm", "sig")


def test_envelope_shaped_message_part_is_still_a_message_part() -> None:
    """D13: only ``data``/``ping``/``error`` envelopes are unwrapped; a ``message_part`` that
    happens to carry a ``data`` key is an ordinary event."""
    event = {
        "type": "message_part",
        "data": 1,
        "message_part": {"role": "assistant", "part": {"type": "text", "text": "x"}},
    }
    assert events_from_json([event]) == [MessagePartEvent("assistant", TextPart("x"))]


# -- the standard-library decoder shortcut ------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
whitespace = st.text(alphabet=" \t\n\r\x0b\x0c\u00a0\ufeff", max_size=2)


def _outcome(loads: Any, text: str | bytes) -> tuple[str, Any]:
    try:
        return ("ok", loads(text))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


@settings(max_examples=400, deadline=None)
@given(
    value=json_values,
    before=whitespace,
    after=whitespace,
    junk=st.text(alphabet='[]{},:"0a\\ ', max_size=3),
    cut=st.integers(0, 3),
    as_bytes=st.booleans(),
)
def test_std_loads_is_json_loads(
    value: Any, before: str, after: str, junk: str, cut: int, as_bytes: bool
) -> None:
    """``std_loads`` returns what ``json.loads`` returns and raises what it raises, for valid
    documents with any surrounding whitespace, truncated ones and trailing junk."""
    import json

    from coder_proto._json import std_loads

    body = json.dumps(value, ensure_ascii=False)
    for text in (
        before + body + after,
        body[: max(len(body) - cut, 0)],
        body + junk,
        junk + body,
    ):
        data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
        got = _outcome(std_loads, data)
        want = _outcome(json.loads, data)
        assert got == want or (got[0] == want[0] == "ok" and repr(got) == repr(want))


# -- pending deltas joined in runs (translator memory) -------------------------------------------


def _delta_event(kind: str, text: str) -> MessagePartEvent:
    part = TextPart(text) if kind == "text" else ReasoningPart(text)
    return MessagePartEvent("assistant", part)


@st.composite
def turns(draw: st.DrawFn) -> list[Any]:
    """Deltas and snapshots of a few assistant messages, snapshots sometimes disagreeing
    with the deltas (A.4-A.7)."""
    from coder_proto import ChatMessage
    from coder_proto._wire.events import MessageEvent, StatusEvent

    events: list[Any] = [StatusEvent("running")]
    streamed = {"text": "", "reasoning": ""}
    message_id = 2
    for _ in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(0, 12))):
            kind = draw(st.sampled_from(["text", "reasoning"]))
            text = draw(st.text(alphabet="ab", min_size=1, max_size=3))
            streamed[kind] += text
            events.append(_delta_event(kind, text))
        shape = draw(st.sampled_from(["exact", "longer", "different"]))
        text, reasoning = streamed["text"], streamed["reasoning"]
        if shape == "longer":
            text += "+more"
        elif shape == "different":
            text = "x" + text
        content = (ReasoningPart(reasoning), TextPart(text))
        events.append(MessageEvent(ChatMessage(id=message_id, role="assistant", content=content)))
        if draw(st.booleans()):  # a replayed snapshot
            events.append(events[-1])
        streamed = {"text": "", "reasoning": ""}
        message_id += 1
    events.append(StatusEvent("waiting"))
    return events


@settings(max_examples=300, deadline=None)
@given(events=turns())
def test_pending_runs_do_not_change_the_output(events: list[Any]) -> None:
    """A.4-A.8: joining pending deltas in runs (any run length) is invisible: the parts are
    those of a translator that keeps every delta apart."""
    from coder_proto._stream import translator as module

    def translate(run: int) -> list[Any]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "PENDING_RUN", run)
            t = module.TurnTranslator(turn_cursor=1)
            out: list[Any] = []
            for event in events:
                out += t.ingest(event)
            return out + t.finish()

    assert translate(2) == translate(10**9)


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(["\\", "u", "U", "d", "D", "8", "é", "✓", "a", '"']), max_size=16
    ),
    st.booleans(),
)
def test_the_surrogate_escape_scan_agrees_with_substring_search(text: str, as_bytes: bool) -> None:
    """The one-search scan before decoding (``_may_hold_surrogates``) answers what the two
    substring searches it replaced answer, for text and bytes."""
    expected = "\\ud" in text or "\\uD" in text
    data: str | bytes = text.encode("utf-8") if as_bytes else text
    assert _may_hold_surrogates(data) is expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["\\", "\\n", '\\"', "\\ud83d", "\\uDC00", "\\u00e9", "u", "d", "é", "ab" * 40]
        ),
        max_size=120,
    ),
    st.integers(0, 300),
)
def test_the_surrogate_escape_scan_agrees_on_long_text(pieces: list[str], pad: int) -> None:
    """Long frames: the scan steps from backslash to backslash, then hands the rest to the
    regular expression once backslashes are many; either way it answers what substring
    search answers, wherever the first surrogate escape is."""
    text = "x" * pad + "".join(pieces)
    expected = "\\ud" in text or "\\uD" in text
    assert _may_hold_surrogates(text) is expected
    assert _may_hold_surrogates(text.encode("utf-8")) is expected
