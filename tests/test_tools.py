"""Client tools: schemas from type hints, explicit schemas, model inputs, validation and
output encoding (wire 2.1 ``unsafe_dynamic_tools``; D5)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any, Literal, TypedDict

import attrs
import pydantic
import pytest

from coder_proto import CoderAgentError, Tool, ToolContext, ToolInputError, tool
from coder_proto._agent.tools import (
    encode_output,
    json_schema_for,
    tools_by_name,
    validate_json_schema,
)


class Unit(enum.Enum):
    C = "c"
    F = "f"


@attrs.define
class Point:
    x: int
    y: float = 0.0


@dataclasses.dataclass
class Box:
    label: str
    corners: tuple[Point, Point]
    tags: set[str] = dataclasses.field(default_factory=set)


class Movie(TypedDict):
    title: str
    year: int


class Answer(pydantic.BaseModel):
    severity: Literal["critical", "major", "minor"]
    summary: str


def test_schema_from_type_hints() -> None:
    @tool
    async def get_weather(
        city: str, unit: Unit = Unit.C, days: int | None = None
    ) -> dict[str, Any]:
        """Get the weather for a city.

        Longer text that is not part of the description."""
        return {"city": city}

    assert get_weather.name == "get_weather"
    assert get_weather.description == "Get the weather for a city."
    assert get_weather.is_async
    assert get_weather.input_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"enum": ["c", "f"]},
            "days": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "additionalProperties": False,
        "required": ["city"],
    }
    assert get_weather.to_dynamic_tool().to_json()["input_schema"] == get_weather.input_schema


def test_schema_for_containers_and_classes() -> None:
    assert json_schema_for(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert json_schema_for(frozenset[str]) == {
        "type": "array",
        "items": {"type": "string"},
        "uniqueItems": True,
    }
    assert json_schema_for(tuple[int, ...]) == {"type": "array", "items": {"type": "integer"}}
    assert json_schema_for(tuple[int, str])["prefixItems"] == [
        {"type": "integer"},
        {"type": "string"},
    ]
    assert json_schema_for(dict[str, float]) == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    assert json_schema_for(Annotated[str, "the city"]) == {
        "type": "string",
        "description": "the city",
    }
    assert json_schema_for(int | str) == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert json_schema_for(int | str | None)["anyOf"][-1] == {"type": "null"}
    assert json_schema_for(None) == {"type": "null"} and json_schema_for(Any) == {}
    assert json_schema_for(bool) == {"type": "boolean"} and json_schema_for(float) == {
        "type": "number"
    }
    assert json_schema_for(Movie)["required"] == ["title", "year"]
    assert json_schema_for(Box)["required"] == ["label", "corners"]
    assert json_schema_for(Point)["properties"] == {
        "x": {"type": "integer"},
        "y": {"type": "number"},
    }
    assert json_schema_for(Answer)["properties"]["severity"]["enum"] == [
        "critical",
        "major",
        "minor",
    ]
    with pytest.raises(CoderAgentError, match="cannot derive"):
        json_schema_for(complex)


def test_parse_input_converts_to_declared_types() -> None:
    @tool
    def place(
        box: Box, unit: Unit, when: Movie, score: float, extra: dict[str, int] | None = None
    ) -> str:
        return "ok"

    parsed = place.parse_input(
        '{"box": {"label": "a", "corners": [{"x": 1}, {"x": 2, "y": 3}], "tags": ["t"]},'
        ' "unit": "f", "when": {"title": "Up", "year": 2009}, "score": 3, "extra": {"a": 1}}'
    )
    assert parsed["box"] == Box(label="a", corners=(Point(1), Point(2, 3.0)), tags={"t"})
    assert (
        parsed["unit"] is Unit.F and parsed["score"] == 3.0 and isinstance(parsed["score"], float)
    )
    assert parsed["when"] == {"title": "Up", "year": 2009} and parsed["extra"] == {"a": 1}
    args, kwargs = place.call_args(parsed)
    assert args == () and set(kwargs) == {"box", "unit", "when", "score", "extra"}


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ("{", "not valid JSON"),
        ('{"city": 3}', "$.city: expected string"),
        ("{}", "$.city: required"),
        ('{"city": "x", "zip": 1}', "$.zip: unexpected property"),
        ("[]", "expected object"),
    ],
)
def test_invalid_input_raises_tool_input_error(args: str, problem: str) -> None:
    @tool
    def lookup(city: str) -> str:
        return city

    with pytest.raises(ToolInputError, match=problem.replace("$", r"\$").replace(".", r"\.")):
        lookup.parse_input(args)


def test_empty_arguments_mean_an_empty_object() -> None:
    @tool
    def now() -> str:
        return "t"

    assert now.parse_input("") == {} and now.parse_input({}) == {}


def test_model_input_attrs_dataclass_and_pydantic() -> None:
    def file_answer(answer: Answer) -> str:
        """File the answer."""
        return answer.summary

    t = tool(file_answer)
    assert t.input_mode == "model" and t.description == "File the answer."
    parsed = t.parse_input('{"severity": "major", "summary": "s"}')
    assert parsed == Answer(severity="major", summary="s")
    assert t.call_args(parsed) == ((parsed,), {})
    with pytest.raises(ToolInputError):
        t.parse_input('{"severity": "meh", "summary": "s"}')
    pt = Tool.from_model(Point, lambda p: p, name="point")
    assert pt.parse_input('{"x": 1}') == Point(1)
    with pytest.raises(ToolInputError):
        pt.parse_input('{"x": "one"}')
    assert Tool.from_model(Box).name == "Box"
    with pytest.raises(CoderAgentError):
        Tool.from_model(int)


def test_explicit_schema_tools() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "minLength": 2}},
        "required": ["q"],
    }

    @tool(name="search", description="Search.", schema=schema)
    def search(q: str) -> list[str]:
        return [q]

    assert search.input_schema == schema and search.description == "Search."
    assert search.parse_input('{"q": "ab"}') == {"q": "ab"}
    with pytest.raises(ToolInputError, match="shorter than 2"):
        search.parse_input('{"q": "a"}')
    raw = Tool.from_schema("raw", {"type": "array"}, lambda v: v, kwargs=False)
    assert raw.parse_input("[1, 2]") == [1, 2] and raw.call_args([1]) == (([1],), {})
    with pytest.raises(CoderAgentError):
        Tool.from_schema("bad", [], None)  # type: ignore[arg-type]


def test_tool_names_are_validated() -> None:
    with pytest.raises(CoderAgentError, match="invalid tool name"):
        Tool.from_schema("has space", {"type": "object"})


def test_tool_stays_callable() -> None:
    @tool
    def add(a: int, b: int) -> int:
        return a + b

    assert add(1, 2) == 3 and not add.is_async
    with pytest.raises(CoderAgentError):
        Tool.from_schema("x", {})()


def test_tools_by_name_normalises_lists_and_mappings() -> None:
    def ping() -> str:
        return "pong"

    @tool
    def echo(text: str) -> str:
        return text

    assert set(tools_by_name([ping, echo])) == {"ping", "echo"}
    assert tools_by_name({"renamed": echo})["renamed"].name == "renamed"
    assert tools_by_name(None) == {}
    with pytest.raises(CoderAgentError, match="duplicate"):
        tools_by_name([echo, echo])
    with pytest.raises(CoderAgentError, match="not a tool"):
        tools_by_name([42])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("value", "schema", "ok"),
    [
        (5, {"type": "integer", "minimum": 1, "maximum": 5}, True),
        (6, {"type": "integer", "maximum": 5}, False),
        (5, {"exclusiveMaximum": 5}, False),
        (1, {"exclusiveMinimum": 1}, False),
        (0, {"minimum": 1}, False),
        (2.0, {"type": "integer"}, True),
        (True, {"type": "integer"}, False),
        (None, {"type": ["string", "null"]}, True),
        ("x", {"const": "x"}, True),
        ("y", {"const": "x"}, False),
        ("abc", {"pattern": "^a"}, True),
        ("abc", {"pattern": "^b"}, False),
        ("abcdef", {"maxLength": 3}, False),
        ([1, 1], {"uniqueItems": True}, False),
        ([1], {"minItems": 2}, False),
        ([1, 2, 3], {"maxItems": 2}, False),
        ([1, "a"], {"prefixItems": [{"type": "integer"}], "items": {"type": "string"}}, True),
        (1, {"oneOf": [{"type": "integer"}, {"type": "number"}]}, False),
        (1, {"anyOf": [{"type": "string"}]}, False),
        (1, {"allOf": [{"type": "integer"}, {"minimum": 2}]}, False),
        ({"a": 1}, {"additionalProperties": {"type": "string"}}, False),
        (
            {"a": {"b": 1}},
            {
                "$defs": {"B": {"type": "object", "required": ["c"]}},
                "properties": {"a": {"$ref": "#/$defs/B"}},
            },
            False,
        ),
        (1, {"$ref": "#/nowhere"}, True),
        (1, False, False),
        (1, True, True),
    ],
)
def test_validator_keywords(value: Any, schema: Any, ok: bool) -> None:
    assert (validate_json_schema(value, schema) == []) is ok


def test_encode_output() -> None:
    assert encode_output({"a": (1, Unit.C), 2: {3}}) == {"a": [1, "c"], "2": [3]}
    assert encode_output(Point(1)) == {"x": 1, "y": 0.0}
    assert encode_output(Box(label="b", corners=(Point(0), Point(1)))) == {
        "label": "b",
        "corners": [{"x": 0, "y": 0.0}, {"x": 1, "y": 0.0}],
        "tags": [],
    }
    assert encode_output(Answer(severity="minor", summary="s")) == {
        "severity": "minor",
        "summary": "s",
    }
    assert encode_output(float("nan")) is None and encode_output(1.5) == 1.5
    assert encode_output(b"hi") == "hi" and encode_output(complex(1, 2)) == "(1+2j)"
    assert encode_output(None) is None and encode_output("s") == "s"


def test_tool_context_parameter_is_injected_not_in_schema() -> None:
    seen: list[ToolContext] = []

    @tool
    def charge(amount_cents: int, ctx: ToolContext) -> str:
        seen.append(ctx)
        return f"{ctx.chat_id}/{ctx.tool_call_id}:{amount_cents}"

    assert charge.context_param == "ctx"
    assert charge.input_schema["properties"] == {"amount_cents": {"type": "integer"}}
    ctx = ToolContext(chat_id="c1", tool_call_id="call_1", tool_name="charge")
    args, kwargs = charge.call_args(charge.parse_input('{"amount_cents": 5}'), ctx)
    assert charge(*args, **kwargs) == "c1/call_1:5" and seen == [ctx]

    def file_answer(answer: Answer, context: ToolContext) -> str:
        return context.tool_call_id

    model_tool = tool(file_answer)
    assert model_tool.input_mode == "model" and model_tool.context_param == "context"
    args, kwargs = model_tool.call_args(
        model_tool.parse_input('{"severity": "minor", "summary": "s"}'), ctx
    )
    assert model_tool(*args, **kwargs) == "call_1"
