"""The scenario vocabulary, its JSON form, rule selection and the default demo script, plus
the fake's small pure helpers (timestamps, ids, Go-style JSON)."""

from __future__ import annotations

import datetime
import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError
from coder_proto.fake import (
    CallClientTool,
    CallServerTool,
    Cite,
    Fail,
    ReportUsage,
    Retry,
    Say,
    Script,
    ScriptBook,
    ScriptContext,
    ScriptError,
    Think,
    Wait,
    default_script,
)
from coder_proto.fake._context import ScriptContext as _Ctx
from coder_proto.fake._run import chunks
from coder_proto.fake._template import Bindings
from coder_proto.fake._util import UUID_RE, encode_json, new_uuid, rfc3339

from .support import WEATHER_TOOL, Api, text_of

EVERY_ITEM = Script(
    (
        Think("hmm", chunk=2),
        Say("hello {prompt}"),
        Cite(url="https://e.x/", title="E", source_id="s1"),
        CallServerTool(
            name="execute",
            args={"c": "ls"},
            result={"o": 1},
            is_error=True,
            provider_executed=True,
            tool_call_id="t1",
        ),
        CallClientTool(name="get_weather", args={"city": "Paris"}, tool_call_id="t2"),
        Wait(0.5),
        Retry(times=2, error="e", kind="overloaded", status_code=None, provider=None),
        ReportUsage(input_tokens=1, output_tokens=2),
        Fail(
            message="m",
            kind="k",
            retries=1,
            retryable=True,
            detail="d",
            provider="p",
            status_code=500,
        ),
    ),
    chunk_delay=0.25,
)


def ctx(prompt: str, tools: tuple[dict[str, object], ...] = ()) -> ScriptContext:
    return ScriptContext(chat_id="c", prompt=prompt, tools=tools)


def test_steps_split_after_tool_call_groups() -> None:
    script = Script(
        (
            Think("t"),
            CallServerTool(name="a"),
            CallClientTool(name="b"),
            Say("after"),
            CallServerTool(name="c"),
        )
    )
    steps = script.steps()
    assert [[type(i).__name__ for i in s] for s in steps] == [
        ["Think", "CallServerTool", "CallClientTool"],
        ["Say", "CallServerTool"],
        [],
    ], "a script ending with tool calls gets an empty closing step"
    assert Script(()).steps() == [[]]
    assert Script((Say("x"),)).steps() == [[Say("x")]]


def test_script_json_round_trip() -> None:
    data = json.loads(json.dumps(EVERY_ITEM.to_json()))
    assert Script.from_json(data) == EVERY_ITEM
    assert Script.from_json([{"type": "say", "text": "x"}]) == Script((Say("x"),))


@pytest.mark.parametrize(
    "value",
    [
        "nope",
        {"items": "x"},
        {"items": [], "extra": 1},
        {"items": [], "chunk_delay": -1},
        {"items": [], "chunk_delay": True},
        [1],
        [{"type": "dance"}],
        [{"type": "say"}],
        [{"type": "say", "text": 3}],
        [{"type": "say", "text": "x", "chunk": True}],
        [{"type": "say", "text": "x", "chunk": 0}],
        [{"type": "say", "text": "x", "colour": "red"}],
        [{"type": "wait", "seconds": -1}],
        [{"type": "wait", "seconds": "1"}],
        [{"type": "usage", "input_tokens": "1"}],
    ],
)
def test_malformed_scripts_raise_script_error(value: object) -> None:
    with pytest.raises(ScriptError) as info:
        Script.from_json(value)
    assert isinstance(info.value, CoderAgentError)


def test_script_items_are_checked() -> None:
    with pytest.raises(ScriptError):
        Script(("not an item",))  # type: ignore[arg-type]


def test_script_book_selection_order() -> None:
    book = ScriptBook()
    assert book.select(ctx("hello")) == default_script(ctx("hello"))
    book.add(r"weather", Script((Say("sunny"),)))
    book.add(r"w", lambda c: Script((Say(f"dynamic {c.prompt}"),)))
    assert book.select(ctx("The WEATHER?")) == Script((Say("sunny"),)), "case-insensitive"
    assert book.select(ctx("wow")) == Script((Say("dynamic wow"),))
    book.push(Script((Say("once"),)))
    assert book.select(ctx("weather")) == Script((Say("once"),)), "pushed scripts come first"
    assert book.select(ctx("weather")) == Script((Say("sunny"),))
    book.default = Script((Say("default"),))
    assert book.select(ctx("other")) == Script((Say("default"),))
    book.default = lambda c: "oops"  # type: ignore[assignment,return-value]
    with pytest.raises(ScriptError):
        book.select(ctx("other"))
    with pytest.raises(ScriptError, match="invalid regular expression"):
        book.add("(", Script(()))


def test_script_book_from_json() -> None:
    book = ScriptBook.from_json(
        {
            "rules": [{"match": "^hi", "script": [{"type": "say", "text": "hey"}]}],
            "default": [{"type": "say", "text": "d"}],
        }
    )
    assert book.select(ctx("hi there")) == Script((Say("hey"),))
    assert book.select(ctx("x")) == Script((Say("d"),))
    for bad in (
        [],
        {"rules": {}},
        {"rules": [{"script": []}]},
        {"rules": [{"match": "(", "script": []}]},
        {"x": 1},
    ):
        with pytest.raises(ScriptError):
            ScriptBook.from_json(bad)


def test_default_script_calls_a_named_client_tool_with_guessed_args() -> None:
    script = default_script(ctx("What's the weather in New York?", (WEATHER_TOOL,)))
    call = next(i for i in script.items if isinstance(i, CallClientTool))
    assert call.name == "get_weather"
    assert call.args == {"city": "New York"}
    camel = {
        "name": "lookupStockPrice",
        "input_schema": {
            "type": "object",
            "properties": {
                "symbol": {"type": "string"},
                "days": {"type": "integer"},
                "live": {"type": "boolean"},
                "tags": {"type": "array"},
                "opts": {"type": "object"},
                "unit": {"enum": ["usd", "eur"]},
                "ratio": {"type": "number"},
            },
        },
    }
    script = default_script(ctx("lookup the stock price for 3.5 days", (camel,)))
    call = next(i for i in script.items if isinstance(i, CallClientTool))
    assert call.args == {
        "symbol": "lookup the stock price for 3.5 days",
        "days": 3,
        "live": True,
        "tags": [],
        "opts": {},
        "unit": "usd",
        "ratio": 3.5,
    }
    no_schema = {"name": "ping"}
    script = default_script(ctx("please ping", (no_schema,)))
    assert next(i for i in script.items if isinstance(i, CallClientTool)).args == {}
    number = {"name": "roll_dice", "input_schema": {"properties": {"sides": {"type": "integer"}}}}
    script = default_script(ctx("roll dice", (number,)))
    assert next(i for i in script.items if isinstance(i, CallClientTool)).args == {"sides": 1}


def test_default_script_greets_searches_and_echoes() -> None:
    assert isinstance(default_script(ctx("Hello!")).items[0], Say)
    search = default_script(ctx("search for cats"))
    assert any(isinstance(i, CallServerTool) and i.provider_executed for i in search.items)
    echo = default_script(ctx("tell me a story"))
    assert echo.items[-1] == Say("You said: tell me a story")
    assert default_script(ctx("  ")).items == (Say("I received an empty prompt."),)
    assert default_script(ctx("weather?", ({"name": ""},))).items[-1] == Say("You said: weather?")


def test_default_script_demo_turn_end_to_end() -> None:
    api = Api()
    chat_id = api.create("Weather in Paris?", unsafe_dynamic_tools=[WEATHER_TOOL])
    api.run_until(chat_id, {"requires_action"})
    call = api.model.chats[chat_id].pending_tool_calls()[0]
    assert call["args"] == {"city": "Paris"}
    api.results(chat_id, [{"tool_call_id": call["tool_call_id"], "output": {"temp_c": 21}}])
    api.run_until(chat_id, {"waiting"})
    assert text_of(api.messages(chat_id)["messages"][0]) == 'get_weather returned {"temp_c":21}.'


def render(text: str, prompt: str, results: list[object]) -> str:
    return Bindings.for_step(_Ctx(chat_id="c", prompt=prompt), results).text(text)


def test_render_placeholders() -> None:
    assert render("no braces", "p", []) == "no braces"
    assert (
        render("{prompt}: {tool_result} / {tool_results}", "p", [1, {"a": 2}])
        == 'p: {"a":2} / [1,{"a":2}]'
    )
    assert render("{tool_result}", "p", []) == "null"


def test_usage_item_replaces_the_computed_usage() -> None:
    api = Api()
    chat_id = api.create(
        "x", script=Script((Say("hi"), ReportUsage(input_tokens=7, cache_read_tokens=100)))
    )
    api.run_until(chat_id, {"waiting"})
    assert api.messages(chat_id)["messages"][0]["usage"] == {
        "input_tokens": 7,
        "cache_read_tokens": 100,
    }


def test_script_chunk_delay_overrides_the_server_default() -> None:
    api = Api(chunk_delay=10.0)
    chat_id = api.create("x", script=Script((Say("a b c"),), chunk_delay=0.01))
    api.advance(0.2)
    assert api.status(chat_id) == "waiting"


@settings(max_examples=300, deadline=None)
@given(st.text(), st.one_of(st.none(), st.integers(min_value=1, max_value=20)))
def test_chunks_join_back_to_the_text(text: str, size: int | None) -> None:
    pieces = chunks(text, size)
    assert "".join(pieces) == text
    assert all(pieces)
    if size is not None:
        assert all(len(p) <= size for p in pieces)


# -- helpers -------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-62_000_000_000, max_value=250_000_000_000, allow_nan=False))
def test_rfc3339_matches_datetime(seconds: float) -> None:
    text = rfc3339(seconds)
    micros = round(seconds * 1_000_000)
    expected = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=micros
    )
    assert datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) == expected
    assert text.endswith("Z")
    assert not re.search(r"\.\d*0Z$", text), "trailing zeros are trimmed"


def test_rfc3339_examples() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_767_225_600.5) == "2026-01-01T00:00:00.5Z"
    assert rfc3339(951_782_400) == "2000-02-29T00:00:00Z"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_uuids_are_version_4_and_deterministic(seed: int) -> None:
    a = new_uuid(random.Random(seed))
    assert UUID_RE.match(a) and a == a.lower()
    assert a[14] == "4"
    assert a[19] in "89ab"
    assert a == new_uuid(random.Random(seed))


def test_encode_json_escapes_like_go() -> None:
    value = {"t": "<a href='x'>&\u2028\u2029é"}
    escaped = encode_json(value, html_escape=True)
    assert b"<" not in escaped and b">" not in escaped and b"&" not in escaped
    assert "é".encode() in escaped, "non-ASCII stays UTF-8"
    assert json.loads(escaped) == value
    assert (
        encode_json(value, html_escape=False)
        == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    )
