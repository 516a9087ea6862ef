"""What a script book can make the fake's model say: text captured from the prompt by a rule's
named groups, fields of a tool result, an attachment's text, and tool arguments chosen from the
prompt, in Python and in the JSON form ``coder-agent fake-server --scripts`` reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coder_proto.fake import (
    CallClientTool,
    CallServerTool,
    FakeConfig,
    Say,
    Script,
    ScriptBook,
    ScriptContext,
    ScriptError,
    Think,
)

from .support import Api, text_of

FORECAST_TOOL = {
    "name": "get_forecast",
    "description": "The weather for the next days.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "metric": {"type": "boolean"},
            "hours": {"type": "array", "items": {"type": "number"}},
        },
        "required": ["city", "days"],
    },
}


def api_with(book: ScriptBook) -> Api:
    return Api(model=None, scripts=book, chunk_delay=0.001)


def answer(api: Api, chat_id: str) -> str:
    api.run_until(chat_id, {"waiting", "error"})
    history = api.messages(chat_id)["messages"]
    return text_of(history[0])


def pending_args(api: Api, chat_id: str) -> list[Any]:
    return [call["args"] for call in api.model.chats[chat_id].pending_tool_calls()]


def answer_tools(api: Api, chat_id: str, *outputs: Any) -> None:
    results = [
        {"tool_call_id": call_id, "output": output}
        for call_id, output in zip(api.pending_ids(chat_id), outputs, strict=True)
    ]
    assert api.results(chat_id, results).status == 204


def upload_text(api: Api, data: bytes, name: str, media_type: str = "text/plain") -> str:
    headers = {"Content-Type": media_type, "Content-Disposition": f'attachment; filename="{name}"'}
    query = f"?organization={api.model.organization_id}"
    response = api.request("POST", f"/files{query}", raw=data, headers=headers)
    assert response.status == 201, response.json()
    return str(response.json()["id"])


def test_named_groups_fill_the_reply() -> None:
    book = ScriptBook()
    book.add(
        r"my name is (?P<name>\w+)(?: and I live in (?P<town>\w+))?",
        Script([Say("Hi {name}, from {town}!")]),
    )
    api = api_with(book)
    assert answer(api, api.create("My name is Ada and I live in London")) == "Hi Ada, from London!"
    assert answer(api, api.create("my name is Grace")) == "Hi Grace, from !", (
        "an unmatched group is empty"
    )


def test_tool_arguments_come_from_the_prompt_with_the_registered_types() -> None:
    book = ScriptBook()
    book.add(
        r"weather in (?P<city>[A-Z]\w+) for (?P<days>\d+) days",
        Script(
            [
                CallClientTool(
                    name="get_forecast",
                    args={
                        "city": "{city}",
                        "days": "{days}",
                        "metric": "true",
                        "note": "{days} days",
                        "hours": ["{days}", "7.5"],
                    },
                ),
                Say("{city}: {tool_result.temp_c} degrees, {tool_result.sky.cover}."),
            ]
        ),
    )
    api = api_with(book)
    chat_id = api.create("Weather in Paris for 3 days?", unsafe_dynamic_tools=[FORECAST_TOOL])
    api.run_until(chat_id, {"requires_action"})
    assert pending_args(api, chat_id) == [
        # "{days}" alone is converted to the integer the schema asks for; text around a
        # placeholder and literal strings stay strings.
        {"city": "Paris", "days": 3, "metric": "true", "note": "3 days", "hours": [3, "7.5"]}
    ]
    answer_tools(api, chat_id, {"temp_c": 21, "sky": {"cover": "clear"}})
    assert answer(api, chat_id) == "Paris: 21 degrees, clear."


def test_arguments_stay_strings_for_a_tool_without_a_schema() -> None:
    book = ScriptBook()
    book.add(r"add (?P<n>\d+)", Script([CallClientTool(name="adder", args={"n": "{n}"})]))
    api = api_with(book)
    chat_id = api.create("add 5", unsafe_dynamic_tools=[{"name": "adder"}])
    api.run_until(chat_id, {"requires_action"})
    assert pending_args(api, chat_id) == [{"n": "5"}]


def test_fields_of_every_result_of_a_pause() -> None:
    script = Script(
        [
            CallClientTool(name="a"),
            CallClientTool(name="b"),
            Say(
                "{tool_results.0.v} and {tool_results[1].items[1]}; last {tool_result}; none {tool_result.nope}"
            ),
        ]
    )
    api = api_with(ScriptBook())
    chat_id = api.create("x", script=script, unsafe_dynamic_tools=[{"name": "a"}, {"name": "b"}])
    api.run_until(chat_id, {"requires_action"})
    answer_tools(api, chat_id, {"v": "first"}, {"items": [1, "two"]})
    assert answer(api, chat_id) == 'first and two; last {"items":[1,"two"]}; none null'


def test_a_tool_result_value_keeps_its_type_in_the_next_call() -> None:
    script = Script(
        [
            CallServerTool(name="lookup", args={"q": "{prompt}"}, result={"id": 42, "tags": ["a"]}),
            Think("Fetching {tool_result.id}."),  # the next model step sees the result
            CallClientTool(
                name="fetch", args={"id": "{tool_result.id}", "tags": "{tool_result.tags}"}
            ),
        ]
    )
    api = api_with(ScriptBook())
    chat_id = api.create("otters", script=script, unsafe_dynamic_tools=[{"name": "fetch"}])
    api.run_until(chat_id, {"requires_action"})
    assert pending_args(api, chat_id) == [{"id": 42, "tags": ["a"]}]
    history = api.messages(chat_id)["messages"]
    calls = [p for m in history for p in m["content"] if p["type"] == "tool-call"]
    assert {"tool_name": "lookup", "args": {"q": "otters"}}.items() <= calls[-1].items()


def test_server_tool_results_are_filled_in_too() -> None:
    book = ScriptBook()
    book.add(
        r"echo (?P<word>\w+)",
        Script(
            [
                CallServerTool(name="echo", result={"said": "{word}", "prompt": "{prompt}"}),
                Say("{tool_result.said}!"),
            ]
        ),
    )
    api = api_with(book)
    chat_id = api.create("echo hello")
    assert answer(api, chat_id) == "hello!"
    results = [
        p["result"]
        for m in api.messages(chat_id)["messages"]
        for p in m["content"]
        if p["type"] == "tool-result"
    ]
    assert results == [{"said": "hello", "prompt": "echo hello"}]


def test_the_text_of_attachments() -> None:
    book = ScriptBook()
    book.add(
        r"summari[sz]e",
        Script(
            [
                Think("Reading {attachments.0.name} ({attachments.0.size} bytes)."),
                Say(
                    "{attachment} | {attachments.1.media_type} {attachments.1.text} | {attachments.2.text}"
                ),
            ]
        ),
    )
    api = api_with(book)
    notes = upload_text(api, b"Revenue rose 5 %.", "q3.txt")
    data = upload_text(api, b'{"a": 1}', "data.json", "application/json")
    png = upload_text(api, b"\x89PNG\r\n\x1a\n" + b"\x00" * 16, "pic.png", "image/png")
    content = [{"type": "text", "text": "Summarize these."}] + [
        {"type": "file", "file_id": f} for f in (notes, data, png)
    ]
    response = api.request(
        "POST", "", {"organization_id": api.model.organization_id, "content": content}
    )
    assert response.status == 201
    chat_id = response.json()["id"]
    assert answer(api, chat_id) == 'Revenue rose 5 %. | application/json {"a": 1} | null'
    reply = api.messages(chat_id)["messages"][0]["content"]
    assert [p["text"] for p in reply if p["type"] == "reasoning"] == ["Reading q3.txt (17 bytes)."]


def test_without_attachments_the_attachment_is_empty() -> None:
    api = api_with(ScriptBook())
    chat_id = api.create("x", script=Script([Say("[{attachment}] {attachments}")]))
    assert answer(api, chat_id) == "[] []"


def test_braces_that_name_nothing_stay_as_written() -> None:
    text = '{"city": "Paris"} {unknown} {tool_result.x y} {}'
    api = api_with(ScriptBook())
    chat_id = api.create("p", script=Script([Say(text)]))
    assert answer(api, chat_id) == text


def test_a_factory_receives_the_captures() -> None:
    seen: list[ScriptContext] = []

    def factory(ctx: ScriptContext) -> Script:
        seen.append(ctx)
        return Script([Say(f"{ctx.captures['n']} on turn {ctx.turn}")])

    book = ScriptBook()
    book.add(r"count (?P<n>\d+)", factory)
    api = api_with(book)
    chat_id = api.create("count 7")
    assert answer(api, chat_id) == "7 on turn 1"
    assert seen[0].captures == {"n": "7"} and seen[0].prompt == "count 7"
    script, ctx = book.choose(ScriptContext(chat_id="c", prompt="count 8"))
    assert ctx.captures == {"n": "8"} and script == Script([Say("8 on turn 1")])
    assert book.choose(ScriptContext(chat_id="c", prompt="none"))[1].captures == {}


@pytest.mark.parametrize(
    "group", ["prompt", "tool_result", "tool_results", "attachment", "attachments"]
)
def test_a_group_may_not_shadow_a_builtin_placeholder(group: str) -> None:
    with pytest.raises(ScriptError, match=f"group name '{group}'"):
        ScriptBook().add(f"(?P<{group}>x)", Script([]))
    with pytest.raises(ScriptError, match="rule 0"):
        ScriptBook.from_json({"rules": [{"match": f"(?P<{group}>x)", "script": []}]})


def test_the_json_form_does_all_of_it() -> None:
    book = ScriptBook.from_json(
        json.loads(
            r"""
            {"rules": [{"match": "forecast for (?P<city>\\w+)",
                        "script": [{"type": "client_tool", "name": "get_forecast",
                                    "args": {"city": "{city}", "days": "2"}},
                                   {"type": "say", "text": "{city}: {tool_result.sky}"}]}],
             "default": [{"type": "say", "text": "You said: {prompt}"}]}
            """
        )
    )
    api = api_with(book)
    chat_id = api.create("forecast for Oslo", unsafe_dynamic_tools=[FORECAST_TOOL])
    api.run_until(chat_id, {"requires_action"})
    assert pending_args(api, chat_id) == [{"city": "Oslo", "days": "2"}], "literals stay as written"
    answer_tools(api, chat_id, {"sky": "snow"})
    assert answer(api, chat_id) == "Oslo: snow"
    assert answer(api, api.create("something")) == "You said: something"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rules": [{"match": "(", "script": []}]}, "invalid regular expression"),
        ({"rules": [{"match": "x", "script": [], "extra": 1}]}, "unknown keys"),
        ({"rules": [{"script": []}]}, "'match' string"),
    ],
)
def test_malformed_books(value: Any, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        ScriptBook.from_json(value)


def test_config_scripts_default_is_a_fresh_book() -> None:
    assert FakeConfig().scripts is not FakeConfig().scripts


@pytest.mark.parametrize(
    ("captured", "schema", "sent"),
    [
        ("3", {"type": "integer"}, 3),
        ("3.0", {"type": "integer"}, 3),
        ("3.5", {"type": "integer"}, "3.5"),
        ("2.5", {"type": "number"}, 2.5),
        ("-4", {"type": "number"}, -4),
        ("1e3", {"type": "number"}, 1000.0),
        ("TRUE", {"type": "boolean"}, True),
        ("no", {"type": "boolean"}, "no"),
        ("many", {"type": "integer"}, "many"),
        ("7", {"type": "string"}, "7"),
        ("7", None, "7"),
    ],
)
def test_filled_in_strings_take_the_schema_type(captured: str, schema: Any, sent: Any) -> None:
    from coder_proto.fake._template import Bindings

    bindings = Bindings.for_step(
        ScriptContext(chat_id="c", prompt="p", captures={"v": captured}), []
    )
    value = bindings.value({"a": "{v}"}, {"type": "object", "properties": {"a": schema}})
    assert value == {"a": sent}
    assert type(value["a"]) is type(sent)
