"""JSON: decoding on both paths (the standard library, and orjson when installed) with the
same values and errors, request bodies, JavaScript-compatible text (D18) and canonical JSON
(E.2, K.8)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import _json
from coder_proto._errors import CoderProtocolError
from coder_proto._json import (
    canonical_json,
    decoders,
    dumps,
    js_number,
    js_stringify,
    loads,
)

Loads = Callable[[str | bytes], Any]

json_stdlib = _json.stdlib_loads


@pytest.fixture(params=["stdlib", "orjson"])
def decode(request: pytest.FixtureRequest) -> Loads:
    """Each decoding path ``loads`` can take (the test extra installs orjson)."""
    return decoders()[request.param]


def test_both_decoding_paths_are_installed() -> None:
    """The comparisons of the two paths below need orjson: without it they would compare the
    standard library with itself, so a missing orjson fails here instead of passing there."""
    assert set(decoders()) == {"stdlib", "orjson"}, "install the test extra: .[test]"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-3.0, "-3"),
        (0.1, "0.1"),
        (2.5, "2.5"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e21, "1.5e+21"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (1.234e-5, "0.00001234"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (9007199254740992.0, "9007199254740992"),
        (math.inf, "null"),
        (-math.inf, "null"),
        (math.nan, "null"),
        (-1e-7, "-1e-7"),
    ],
)
def test_js_number_matches_javascript(value: float, text: str) -> None:
    assert js_number(value) == text


def test_js_stringify_keeps_key_order_and_non_ascii_d18() -> None:
    value = {"b": [1, 2.0, "é\n\u2028"], "a": None, "c": {"z": True, "y": False}}
    assert js_stringify(value) == '{"b":[1,2,"é\\n\u2028"],"a":null,"c":{"z":true,"y":false}}'


def test_canonical_json_sorts_keys_by_utf16_units() -> None:
    # U+FF5E sorts after U+1F600's surrogates in UTF-16 but before it by code point.
    value = {"\U0001f600": 1, "\uff5e": 2, "a": {"d": 1.0, "c": [3, {"f": 1, "e": 2}]}}
    assert canonical_json(value) == '{"a":{"c":[3,{"e":2,"f":1}],"d":1},"\U0001f600":1,"\uff5e":2}'


def test_unserializable_value_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        js_stringify({"x": object()})


def _numbers_as_floats(value: object) -> object:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    assert isinstance(value, dict)
    return {k: _numbers_as_floats(v) for k, v in value.items()}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_js_stringify_round_trips_through_json(value: object) -> None:
    text = js_stringify(value)
    assert _numbers_as_floats(json.loads(text)) == _numbers_as_floats(value)
    assert loads(dumps(value)) == json.loads(json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_js_number_round_trips(value: float) -> None:
    assert float(js_number(value)) == value


# -- request bodies with text that is not valid Unicode -----------------------------------------

# Lone surrogates come from the server as JSON escapes ("\ud800") in ids, arguments and text;
# a body that echoes them back (a tool result for that tool call id) must still be valid UTF-8.
surrogate_text = st.text(st.characters(min_codepoint=0xD700, max_codepoint=0xE0FF), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=3), st.one_of(surrogate_text, st.integers()), max_size=3))
def test_dumps_writes_lone_surrogates_as_escapes_that_decode_to_the_same_value(
    value: dict[str, object],
) -> None:
    body = dumps({"results": [value]})
    text = body.decode("utf-8")  # valid UTF-8, whatever the strings held
    assert loads(text) == {"results": [{k: _as_json_reads_it(v) for k, v in value.items()}]}


def _as_json_reads_it(value: object) -> object:
    """A high surrogate followed by a low one is one character once written as JSON escapes
    (as any JSON decoder, the server's included, reads it); a lone one stays itself."""
    if not isinstance(value, str):
        return value
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def test_dumps_keeps_valid_text_unescaped() -> None:
    assert dumps({"text": "héllo ✓ 😀"}) == '{"text":"héllo ✓ 😀"}'.encode()
    assert dumps({"id": "\ud800x"}) == b'{"id":"\\ud800x"}'


# -- decoding: the same value or the same error on both paths ----------------------------------


def _outcome(decode: Any, data: Any) -> tuple[str, str]:
    """What decoding ``data`` gives, comparable across paths: the value's repr (NaN and -0.0
    compare by it) and its types, or the error's type and message."""
    try:
        value = decode(data)
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))
    return ("ok", repr(value) + " " + _types(value))


def _types(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_types(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{_types(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


def _depth_outcome(decode: Any, data: Any) -> tuple[str, Any]:
    """``_outcome`` for deeply nested documents: the value's depth (its repr would recurse)."""
    try:
        value = decode(data)
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))
    depth = 0
    while isinstance(value, list | dict):
        depth += 1
        value = (
            value[0]
            if isinstance(value, list) and value
            else (value.get("a") if isinstance(value, dict) else None)
        )
    return ("ok", depth)


def _nested(depth: int, kind: str = "[") -> str:
    if kind == "[":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def test_loads_is_the_installed_path() -> None:
    assert loads is list(decoders().values())[-1]
    try:
        import orjson  # noqa: F401
    except ImportError:
        assert list(decoders()) == ["stdlib"]
    else:
        assert list(decoders()) == ["stdlib", "orjson"]


@pytest.mark.parametrize(
    "data",
    [
        # NaN and the infinities, written or by overflow
        "NaN",
        "[Infinity, -Infinity]",
        '{"x": NaN}',
        "1e400",
        "-1e400",
        "[1.7976931348623157e309]",
        # integers beyond 64 bits stay exact
        str(2**64),
        str(2**64 - 1),
        str(-(2**63) - 1),
        "[" + str(10**30) + ", 1]",
        '{"usage": {"input_tokens": 123456789012345678901234567890}}',
        "1" * 5000,  # the interpreter's digit limit: a ValueError on both paths
        # long mantissas, and a digit run inside a string (decoded exactly either way)
        "0.1234567890123456789012345",
        '["12345678901234567890"]',
        # signed zero
        "-0.0",
        "[-0.0, 0.0, -0]",
        "-0",
        # lone surrogates, as escapes and in the text itself
        '"\\ud800"',
        '["\\udc00\\ud800", "\\ud83d\\ude00"]',
        '{"id": "call_\\ud800"}',
        '"\ud800"',
        # duplicate keys: the last value wins, at the first key's position
        '{"a": 1, "b": 2, "a": 3}',
        # whitespace and what JSON does not count as whitespace
        " \t\n\r[] \n",
        "[]\x0c",
        "\ufeff[]",
        # invalid documents: the standard library's errors
        "",
        " ",
        "[1,]",
        "tru",
        '"abc',
        '{"a" 1}',
        "1 2",
        "-",
        '"\t"',
        '"\\x"',
        '["\\u12"]',
        "{1: 2}",
    ],
)
def test_decoding_edge_cases_matches_the_standard_library(decode: Loads, data: str) -> None:
    for form in (data, data.encode("utf-8", "surrogatepass")):
        assert _outcome(decode, form) == _outcome(json.loads, form)


@pytest.mark.parametrize(
    "data",
    [
        b'"\xed\xa0\x80"',  # a UTF-8-encoded surrogate: the standard library passes it
        b'"\xff"',  # not UTF-8
        b"\xef\xbb\xbf[1]",  # a UTF-8 byte order mark
        '["é"]'.encode("utf-16"),
        '["é"]'.encode("utf-16-le"),
        '{"a": [1]}'.encode("utf-32"),
        b"\x00",
    ],
)
def test_decoding_bytes_in_any_encoding_matches_the_standard_library(
    decode: Loads, data: bytes
) -> None:
    assert _outcome(decode, data) == _outcome(json.loads, data)


@pytest.mark.parametrize("data", [None, 1, 1.5, bytearray(b"[1]"), memoryview(b"[1]"), ["[]"]])
def test_decoding_other_types_matches_the_standard_library(decode: Loads, data: Any) -> None:
    assert _outcome(decode, data) == _outcome(json.loads, data)


def test_decoded_values_are_exact(decode: Loads) -> None:
    assert decode(str(2**64 + 1)) == 2**64 + 1 and type(decode(str(2**70))) is int
    assert math.copysign(1.0, decode("-0.0")) == -1.0
    assert decode("-0") == 0 and type(decode("-0")) is int
    assert math.isnan(decode("NaN")) and decode("-Infinity") == -math.inf
    assert decode('"\\ud800x"') == "\ud800x"
    assert list(decode('{"a": 1, "b": 2, "a": 3}').items()) == [("a", 3), ("b", 2)]


def _at_stack_depth(frames: int, run: Callable[[], Any]) -> Any:
    """``run()`` called from ``frames`` more frames down the stack."""
    if frames:
        return _at_stack_depth(frames - 1, run)
    return run()


@pytest.mark.parametrize("kind", ["[", "{"])
@pytest.mark.parametrize("as_bytes", [False, True])
@pytest.mark.parametrize("depth", [300, 900, 990, 1_000, 1_024, 1_025, 5_000, 100_000])
def test_nesting_stops_where_the_standard_library_stops(
    decode: Loads, kind: str, as_bytes: bool, depth: int
) -> None:
    doc = _nested(depth, kind)
    data = doc.encode() if as_bytes else doc
    want = _depth_outcome(json_stdlib, data)
    assert _depth_outcome(decode, data) == want
    if want[0] != "ok":
        assert want == (
            "ValueError",
            "JSON nested too deeply for the interpreter's recursion limit",
        )


@pytest.mark.parametrize("stack", [0, 300, 700])
def test_nesting_limits_agree_from_a_deep_stack(decode: Loads, stack: int) -> None:
    # The standard library's room shrinks with the caller's stack; a document orjson alone
    # would decode is refused on both paths when the standard library has no room for it.
    for depth in (150, 250, 400, 650, 900):
        doc = _nested(depth)
        want = _at_stack_depth(stack, lambda doc=doc: _depth_outcome(json_stdlib, doc))
        assert _at_stack_depth(stack, lambda doc=doc: _depth_outcome(decode, doc)) == want
    # On 3.11 the standard library's room is what the recursion limit leaves under the caller's
    # frames, so 700 frames down a 400-deep document is refused; from 3.12 its decoder counts
    # C recursion only, which Python frames do not take, and the same document decodes.
    deep = _at_stack_depth(700, lambda: _depth_outcome(decode, _nested(400)))[0]
    assert deep == ("ValueError" if sys.version_info < (3, 12) else "ok")


def test_both_paths_stop_at_exactly_the_same_depth() -> None:
    # Every call is made from this function's frame, so each path starts from the same stack.
    # The bound is above every interpreter's limit (about 1,000 on 3.11, 1,500 on 3.12, 8,000
    # or more on 3.13).
    lo, hi = 1, 100_000
    while lo < hi:  # the deepest document the standard library decodes from here
        mid = (lo + hi + 1) // 2
        try:
            json_stdlib(_nested(mid))
        except ValueError:
            hi = mid - 1
        else:
            lo = mid
    deepest = lo
    assert deepest < 100_000
    for decode in decoders().values():
        value = decode(_nested(deepest))
        assert _depth_outcome(lambda _, value=value: value, None) == ("ok", deepest)
        with pytest.raises(ValueError, match="nested too deeply"):
            decode(_nested(deepest + 1))


def test_a_wide_document_is_not_deep(decode: Loads) -> None:
    wide = "[" + ",".join(['{"a": [1]}'] * 2_000) + "]"
    assert decode(wide) == json.loads(wide)


# Values of every JSON kind, with the awkward ones often: integers beyond 64 bits, -0.0,
# NaN and the infinities, lone surrogates, and keys that repeat once written as text.
_awkward_ints = st.integers() | st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**25, -(10**30)])
_awkward_floats = st.floats() | st.sampled_from([-0.0, 0.0, 5e-324, 1.7976931348623157e308])
_awkward_text = st.text() | st.text(st.characters(min_codepoint=0xD700, max_codepoint=0xE0FF))
json_any = st.recursive(
    st.none() | st.booleans() | _awkward_ints | _awkward_floats | _awkward_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(
    value=json_any,
    ensure_ascii=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    duplicate=st.booleans(),
    as_bytes=st.booleans(),
)
def test_both_paths_decode_generated_documents_alike(
    value: Any, ensure_ascii: bool, indent: int | None, duplicate: bool, as_bytes: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    if duplicate and text.startswith("{") and text != "{}":
        text = text[:-1] + "," + text[1:]  # every key twice
    data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    want = _outcome(json.loads, data)
    for decode in decoders().values():
        assert _outcome(decode, data) == want


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='[]{},:"0123456789.eE+-aflnrstu\\ \n\ud800\u00e9', max_size=30))
def test_both_paths_agree_on_arbitrary_text(text: str) -> None:
    for data in (text, text.encode("utf-8", "surrogatepass")):
        want = _outcome(json.loads, data)
        for decode in decoders().values():
            assert _outcome(decode, data) == want


@settings(max_examples=500, deadline=None)
@given(
    st.from_regex(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
)
def test_both_paths_decode_numbers_alike(number: str) -> None:
    want = _outcome(json.loads, number)
    for decode in decoders().values():
        assert _outcome(decode, number) == want
        assert _outcome(decode, f'{{"n": [{number}]}}') == _outcome(
            json.loads, f'{{"n": [{number}]}}'
        )


# -- where the library decodes: a clear library error for every input --------------------------


@pytest.fixture
def installed(decode: Loads, monkeypatch: pytest.MonkeyPatch) -> Loads:
    """Make the modules that decode use ``decode``."""
    from coder_proto._agent import tools
    from coder_proto._rest import http
    from coder_proto._wire import unicode

    patched = 0
    for module in (unicode, http, tools):
        if hasattr(module, "loads"):
            monkeypatch.setattr(module, "loads", decode)
            patched += 1
    assert patched, "no module decodes with loads any more"
    return decode


def test_stream_frames_parse_alike_on_both_paths(installed: Loads) -> None:
    from coder_proto._wire.events import MessagePartEvent, parse_frame

    frame = (
        '[{"type":"message_part","chat_id":"c","message_part":{"role":"assistant",'
        '"part":{"type":"text","text":"\\ud800 \\ud83d\\ude00"},"seq":18446744073709551617}}]\n'
    )
    (event,) = parse_frame(frame)
    assert isinstance(event, MessagePartEvent)
    # D32: the lone surrogate reaches users as U+FFFD; the escaped pair is one code point.
    assert event.part.text == "\ufffd \U0001f600"  # type: ignore[union-attr]
    assert event.seq == 18446744073709551617
    for bad in (_nested(100_000), "[1,", "\ufeff[]"):
        with pytest.raises(CoderProtocolError, match="failed to parse chat stream frame"):
            parse_frame(bad)


def _frame_outcome(data: str, path: str) -> tuple[str, str]:
    """``parse_frame(data)`` with ``path``'s decoder in use: the events' repr (an int and an
    equal float differ there), or the error's type and message."""
    from coder_proto._wire import events, unicode

    saved = unicode.loads
    unicode.loads = decoders()[path]
    try:
        return ("ok", repr(events.parse_frame(data)))
    except CoderProtocolError as exc:
        return ("CoderProtocolError", str(exc))
    finally:
        unicode.loads = saved


_BIG = ["18446744073709551616", "-9223372036854775809", "1" * 40, "12345678901234567890"]
_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from([*_BIG, "1.5", "1e3", "-0", "true", "null", '"7"', "[1]", "{}"]),
)


@st.composite
def _frames(draw: st.DrawFn) -> str:
    """Frames of deltas (what skips the digit-run scan) with numbers where they can hide:
    the coordinates, unknown keys, the part, and other events beside them."""

    def delta() -> str:
        kind = draw(st.sampled_from(["text", "reasoning"]))
        coords = "".join(
            f',"{key}":{draw(_numbers)}'
            for key in ("history_version", "generation_attempt", "seq")
            if draw(st.booleans())
        )
        extra = f',"x":{draw(_numbers)}' if draw(st.booleans()) else ""
        part_extra = (
            f',"{draw(st.sampled_from(["signature", "created_at", "y"]))}":{draw(_numbers)}'
            if draw(st.booleans())
            else ""
        )
        return (
            f'{{"type":"message_part","chat_id":"c"{extra},"message_part":{{"role":'
            f'"assistant","part":{{"type":"{kind}","text":"t"{part_extra}}}{coords}}}}}'
        )

    others = [
        lambda: (
            f'{{"type":"status","chat_id":"c","status":{{"status":"running","n":{draw(_numbers)}}}}}'
        ),
        lambda: (
            f'{{"type":"retry","chat_id":"c","retry":{{"attempt":{draw(_numbers)},"error":"e"}}}}'
        ),
        lambda: f'{{"type":"mystery","n":{draw(_numbers)}}}',
        lambda: draw(_numbers),
    ]
    items = [
        delta() if draw(st.integers(0, 3)) else draw(st.sampled_from(others))()
        for _ in range(draw(st.integers(0, 4)))
    ]
    body = "[" + ",".join(items) + "]"
    return body if draw(st.integers(0, 5)) else (items[0] if items else "{}")


@settings(max_examples=400, deadline=None)
@given(frame=_frames())
def test_stream_frames_with_long_integers_parse_alike_on_both_paths(frame: str) -> None:
    assert _frame_outcome(frame, "orjson") == _frame_outcome(frame, "stdlib")


@pytest.mark.parametrize(
    "frame",
    [
        # A delta whose seq is beyond 64 bits: orjson reads a float, the events must not.
        '[{"type":"message_part","chat_id":"c","message_part":{"role":"assistant",'
        '"part":{"type":"text","text":"t"},"history_version":1,"generation_attempt":1,'
        '"seq":18446744073709551617}}]',
        # ... in a container, in an unknown key, in another event beside a delta.
        '[{"type":"message_part","message_part":{"part":{"type":"text","text":"t"},'
        '"seq":[123456789012345678901]}}]',
        '[{"type":"message_part","n":123456789012345678901,"message_part":{"part":'
        '{"type":"text","text":"t"},"seq":1}}]',
        '[{"type":"retry","chat_id":"c","retry":{"attempt":123456789012345678901}},'
        '{"type":"message_part","message_part":{"part":{"type":"text","text":"t"}}}]',
        '{"type":"mystery","n":-123456789012345678901}',
        # Malformed events: the same error on both paths.
        '[{"type":"message_part","message_part":{"part":7,"seq":123456789012345678901}}]',
        '[{"type":"message_part","message_part":{"part":7,"seq":1}}]',
    ],
)
def test_long_integers_in_stream_frames_parse_alike_on_both_paths(frame: str) -> None:
    assert _frame_outcome(frame, "orjson") == _frame_outcome(frame, "stdlib")


@pytest.mark.parametrize("cost", ["4500", "123456789012345678901"])
@pytest.mark.parametrize("delta", [False, True])
def test_long_frames_parse_alike_on_both_paths(cost: str, delta: bool) -> None:
    """A frame over 16 KiB (a long message's snapshot, with or without a delta beside it)
    goes to the standard library; a long integer in it is read exactly on both paths."""
    text = "word " * 20_000
    snapshot = (
        '{"type":"message","chat_id":"c","message":{"id":2,"role":"assistant",'
        f'"content":[{{"type":"text","text":"{text}"}}],"usage":{{"total_cost_micros":{cost}}}}}}}'
    )
    part = '{"type":"message_part","message_part":{"part":{"type":"text","text":"t"}}}'
    frame = "[" + (part + "," if delta else "") + snapshot + "]"
    assert len(frame) > _json._LONG and "\\" not in frame
    outcome = _frame_outcome(frame, "orjson")
    assert outcome == _frame_outcome(frame, "stdlib")
    assert outcome[0] == "ok" and cost in outcome[1]


def test_a_frame_of_deltas_with_integer_coordinates_is_not_scanned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What makes orjson pay off on the stream: a frame of plain deltas whose coordinates
    are ints (or absent) is used as orjson decoded it; any other frame is scanned."""
    from coder_proto._wire import events, unicode

    scanned: list[str] = []
    monkeypatch.setattr(unicode, "loads", decoders()["orjson"])
    monkeypatch.setattr(
        events, "long_digit_run", lambda data: scanned.append(data) or _json.long_digit_run(data)
    )
    delta = (
        '{"type":"message_part","chat_id":"c","message_part":{"part":{"type":"text",'
        '"text":"t"},"history_version":1,"generation_attempt":2,"seq":%s}}'
    )
    events.parse_frame("[" + ",".join([delta % 3] * 300) + "]\n")
    events.parse_frame("[" + delta.replace(',"seq":%s', "") + "]")
    assert scanned == []
    for other in (
        "[" + delta % "3.0" + "]",
        '[{"type":"status","chat_id":"c","status":{"status":"running"}}]',
        delta % 3,
    ):
        events.parse_frame(other)
    assert len(scanned) == 3


def test_deep_frames_stop_at_the_same_depth_on_both_paths() -> None:
    """A delta carrying a deep unknown value: the frame is refused on both paths exactly
    where the standard library runs out of room (orjson alone would decode it)."""

    def frame(depth: int) -> str:
        return (
            '[{"type":"message_part","chat_id":"c","message_part":{"part":{"type":"text",'
            f'"text":"t"}},"seq":1}},"x":{_nested(depth)}}}]'
        )

    lo, hi = 1, 100_000
    while lo < hi:  # the deepest such frame the standard library's path parses from here
        mid = (lo + hi + 1) // 2
        if _frame_outcome(frame(mid), "stdlib")[0] == "ok":
            lo = mid
        else:
            hi = mid - 1
    assert lo < 100_000
    for depth in (lo - 1, lo, lo + 1, 1_100):
        assert _frame_outcome(frame(depth), "orjson") == _frame_outcome(frame(depth), "stdlib")


def test_response_bodies_parse_alike_on_both_paths(installed: Loads) -> None:
    from coder_proto._rest.http import HttpResponse

    def body(data: bytes) -> Any:
        return HttpResponse(status=200, headers=(), body=data).json()

    assert body(b'{"id": "\\ud800", "n": NaN}')["id"] == "\ufffd"  # D32
    assert body(_nested(100_000).encode()) is None
    assert body(b"[1,") is None


def test_deep_tool_arguments_are_a_tool_input_error(installed: Loads) -> None:
    from coder_proto._agent.tools import ToolInputError, tool

    @tool
    def save(data: Any) -> None:
        return None

    with pytest.raises(ToolInputError, match="arguments are not valid JSON"):
        save.parse_input('{"data": ' + _nested(100_000) + "}")
    assert save.parse_input('{"data": [1e400]}') == {"data": [math.inf]}


def test_std_loads_is_reexported() -> None:
    from coder_proto._speedups import std_loads

    assert _json.std_loads is std_loads


# -- encoding -----------------------------------------------------------------------------------


def test_keys_that_are_not_strings_are_written_as_json_dumps_writes_them() -> None:
    value = {7: "a", True: "b", None: "c", 2.5: "d", "e": {False: 1}}
    assert js_stringify(value) == json.dumps(value, separators=(",", ":"))
    assert dumps(value).decode() == json.dumps(value, separators=(",", ":"))
    assert canonical_json({"b": 1, 1: 2}) == '{"1":2,"b":1}'
    with pytest.raises(TypeError, match="keys must be str"):
        js_stringify({(1, 2): 3})


def test_canonical_json_sorts_keys_that_are_lone_surrogates() -> None:
    low, high = chr(0xDC00), chr(0xD800)
    assert canonical_json({low: 1, high: 2, "a": 3}) == '{"a":3,"' + high + '":2,"' + low + '":1}'


def test_negative_zero_and_non_finite_numbers_in_text() -> None:
    assert js_stringify([-0.0, math.nan, math.inf]) == "[0,null,null]"  # JSON.stringify's
    assert dumps([-0.0]) == b"[-0.0]"


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_request_body_floats_round_trip_on_both_paths(value: float) -> None:
    body = dumps({"x": value})
    for decode in decoders().values():
        got = decode(body)["x"]
        assert got == value and math.copysign(1.0, got) == math.copysign(1.0, value)


# -- the orjson path's shortcuts: each one still gives the standard library's answer -----------


@pytest.mark.parametrize(
    "data", ["1", "[12345678901234567]", '{"a":-123456789012}', "[]", "", "-", "1" * 18]
)
def test_documents_shorter_than_a_long_digit_run_decode_alike(decode: Loads, data: str) -> None:
    for form in (data, data.encode()):
        assert _outcome(decode, form) == _outcome(json.loads, form)


@pytest.mark.parametrize("stack", [0, 700])
@pytest.mark.parametrize("brackets", [1, 128, 129, 300])
def test_long_documents_with_few_or_many_brackets_decode_alike(
    decode: Loads, stack: int, brackets: int
) -> None:
    # Over 256 bytes, so not short; nested as deep as its brackets go, padded with text.
    doc = "[" * brackets + '"' + "x" * 600 + '"' + "]" * brackets
    want = _at_stack_depth(stack, lambda: _depth_outcome(json_stdlib, doc))
    assert _at_stack_depth(stack, lambda: _depth_outcome(decode, doc)) == want
    assert _at_stack_depth(stack, lambda: _depth_outcome(decode, doc.encode())) == want


# -- long documents go to the standard library ------------------------------------------------


def _snapshot(text: str) -> str:
    return (
        '[{"type":"message","chat_id":"c","message":{"id":5,"role":"assistant","content":'
        f'[{{"type":"text","text":"{text}"}}]}}}}]'
    )


@pytest.mark.parametrize("word", ["word ", "w\u00f6rd "])
@pytest.mark.parametrize("kind", ["text", "bytes", "frame"])
def test_a_long_document_is_decoded_in_about_its_own_size(
    word: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's last message snapshot (here 460 KB) decodes, with orjson installed, in a few
    times its size (its value; bytes are decoded to text first): orjson's working memory for
    it was 13 times its size (6.0 MB), the peak of a whole streamed turn. Whatever is
    decoded below 16 KiB still goes to orjson."""
    import tracemalloc

    from coder_proto._wire import events, unicode

    monkeypatch.setattr(unicode, "loads", decoders()["orjson"])
    calls: list[int] = []
    real = _json._orjson_decode

    def counted(data: str | bytes) -> Any:
        calls.append(len(data))
        return real(data)

    monkeypatch.setattr(_json, "_orjson_decode", counted)
    document = _snapshot(word * 92_000)
    decode: Callable[[], Any] = {
        "text": lambda: _json.loads(document),
        "bytes": lambda: _json.loads(document.encode()),
        "frame": lambda: events.parse_frame(document),
    }[kind]
    decode()
    tracemalloc.start()
    try:
        value = decode()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert value
    assert peak < 4 * len(document.encode()), peak
    assert calls == []
    _json.loads(_snapshot("word " * 100))
    assert calls and calls[0] < _json._LONG


@pytest.mark.parametrize("as_bytes", [False, True])
def test_a_long_document_decodes_alike_on_both_paths(as_bytes: bool) -> None:
    """Documents longer than 16 KiB, just over it too: a long integer, non-ASCII text and
    lone surrogates give the standard library's value or error."""
    near = "x" * (_json._LONG - 30)
    body = "x" * (_json._LONG + 1)
    documents = [
        '{"a":"' + body + '","n":12345678901234567890123}',
        '{"a":"' + near + '","n":12345678901234567890123}',
        '{"a":"' + near + '","n":123456789012345678}',
        '{"a":"' + "é…" * _json._LONG + '","n":[1,2.5,-0.0]}',
        '{"a":"' + body + '\\ud800"}',
        '{"a":"' + body + "\ud800" + '"}',
        "[" * 40_000 + "]" * 40_000,
        '{"a":"' + body + '",}',
    ]
    orjson_path = decoders()["orjson"]
    for text in documents:
        data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
        assert len(data) > _json._LONG
        assert _outcome(orjson_path, data) == _outcome(json_stdlib, data), text[-40:]
