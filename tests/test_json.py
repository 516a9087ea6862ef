"""JavaScript-compatible JSON text (D18) and canonical JSON (E.2, K.8)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto._json import canonical_json, dumps, js_number, js_stringify, loads


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
