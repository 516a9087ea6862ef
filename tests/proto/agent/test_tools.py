"""Client tools: schemas from type hints, explicit schemas, model inputs, validation and
output encoding (wire 2.1 ``unsafe_dynamic_tools``; D5)."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
from typing import Annotated, Any, Literal, TypedDict

import attrs
import pydantic
import pytest

from coder_proto import CoderAgentError, Tool, ToolContext, ToolInputError, tool
from coder_proto._agent.structured_output import StructuredOutput
from coder_proto._agent.tools import (
    encode_output,
    json_schema_for,
    tools_by_name,
    validate_json_schema,
)
from coder_proto._schema import CHECKED_FORMATS


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



def test_a_type_without_a_schema_names_the_argument_that_gives_one() -> None:
    def spin(angle: complex) -> str:
        return str(angle)

    with pytest.raises(CoderAgentError) as info:
        tool(spin)
    assert "cannot derive a JSON Schema" in str(info.value)
    assert "@tool(schema=...)" in str(info.value)
    with pytest.raises(CoderAgentError) as info:
        StructuredOutput(complex)
    assert "output_type" in str(info.value) and "@tool" not in str(info.value)


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


# -- every keyword of the draft is enforced (the jsonschema library validates) ----------------

_PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "born": {"type": "string", "format": "date"}},
}


@pytest.mark.parametrize(
    ("value", "schema", "problem"),
    [
        # format: checked for the formats in CHECKED_FORMATS
        ("2026-01-01T10:00:00Z", {"format": "date-time"}, None),
        ("2026-01-01t10:00:00.25+05:30", {"format": "date-time"}, None),
        ("2026-01-01T10:00:00", {"format": "date-time"}, "$: not a valid date-time"),
        ("2026-02-30T10:00:00Z", {"format": "date-time"}, "$: not a valid date-time"),
        ("20260101T100000Z", {"format": "date-time"}, "$: not a valid date-time"),
        ("2024-02-29", {"format": "date"}, None),
        ("2023-02-29", {"format": "date"}, "$: not a valid date"),
        ("23:59:60Z", {"format": "time"}, None),
        ("24:00:00Z", {"format": "time"}, "$: not a valid time"),
        ("a@example.com", {"format": "email"}, None),
        ("example.com", {"format": "email"}, "$: not a valid email"),
        ("10.0.0.1", {"format": "ipv4"}, None),
        ("10.0.0.256", {"format": "ipv4"}, "$: not a valid ipv4"),
        ("::1", {"format": "ipv6"}, None),
        ("6d1c6b7e-6a1f-4c57-9d1a-0c8e1e6f7a10", {"format": "uuid"}, None),
        ("6d1c6b7e", {"format": "uuid"}, "$: not a valid uuid"),
        ("[a-", {"format": "regex"}, "$: not a valid regex"),
        (5, {"format": "date-time"}, None),  # formats apply to strings only
        ("anything", {"format": "x-custom"}, None),  # unknown formats are annotations
        # not
        ("x", {"not": {"type": "string"}}, '$: must not match {"type":"string"}'),
        (1, {"not": {"type": "string"}}, None),
        # if / then / else
        (
            {"kind": "card", "number": 4},
            {
                "if": {"properties": {"kind": {"const": "card"}}},
                "then": {"properties": {"number": {"type": "string"}}},
                "else": {"required": ["iban"]},
            },
            "$.number: expected string",
        ),
        (
            {"kind": "bank"},
            {
                "if": {"properties": {"kind": {"const": "card"}}},
                "then": {"properties": {"number": {"type": "string"}}},
                "else": {"required": ["iban"]},
            },
            "$.iban: required",
        ),
        # patternProperties, with additionalProperties false beside it
        (
            {"x_1": 1, "x_2": "two", "y": 3},
            {
                "patternProperties": {"^x_": {"type": "integer"}},
                "additionalProperties": False,
            },
            "$.x_2: expected integer; $.y: unexpected property",
        ),
        # dependentRequired, propertyNames, min/maxProperties
        (
            {"card": "4111"},
            {"dependentRequired": {"card": ["expiry"]}},
            '$.expiry: required when "card" is present',
        ),
        ({"Bad": 1}, {"propertyNames": {"pattern": "^[a-z]+$"}}, '$: property name "Bad"'),
        ({}, {"minProperties": 1}, "$: fewer than 1 property"),
        ({"a": 1, "b": 2}, {"maxProperties": 1}, "$: more than 1 property"),
        # contains / minContains / maxContains, multipleOf
        ([1, 2], {"contains": {"type": "string"}}, "$: no item matches the required shape"),
        (
            ["a", 1],
            {"contains": {"type": "string"}, "minContains": 2},
            "$: fewer than 2 items match the required shape",
        ),
        (
            ["a", "b"],
            {"contains": {"type": "string"}, "maxContains": 1},
            "$: more than 1 item match the required shape",
        ),
        (7, {"multipleOf": 5}, "$: not a multiple of 5"),
        # unevaluatedProperties sees through allOf
        (
            {"a": 1, "b": 2},
            {"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False},
            "$: unevaluated properties are not allowed",
        ),
        # a tuple with no room for more
        ([1, 2], {"prefixItems": [{}], "items": False}, "$: more than 1 item"),
        # $ref to $defs, and recursion through it
        (
            {"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]},
            {
                "$ref": "#/$defs/node",
                "$defs": {
                    "node": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                        },
                    }
                },
            },
            "$.children[0].children[0].name: expected string",
        ),
        # paths to names that are not identifiers are quoted
        ({"a b": 1}, {"properties": {"a b": {"type": "string"}}}, '$["a b"]: expected string'),
        # anyOf names the closest failing branch
        (
            {"born": "yesterday"},
            {"anyOf": [{"type": "string"}, _PERSON]},
            "$: does not match any of the allowed shapes (closest: $.born: not a valid date)",
        ),
        (1, {"oneOf": [{"type": "integer"}, {"minimum": 0}]}, "matches more than one"),
        # enum and const compare JSON values: true is not 1
        (True, {"enum": [1, 2]}, "$: expected one of [1,2]"),
        (1, {"const": True}, "$: expected true"),
    ],
)
def test_every_keyword_is_enforced(value: Any, schema: dict[str, Any], problem: str | None) -> None:
    problems = validate_json_schema(value, schema)
    if problem is None:
        assert problems == []
    else:
        assert problem in "; ".join(problems)


def test_draft_is_taken_from_dollar_schema() -> None:
    # Draft 4: exclusiveMaximum is a boolean beside maximum.
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "maximum": 5,
        "exclusiveMaximum": True,
    }
    assert validate_json_schema(5, draft4) == ["$: not below 5"]
    # Draft 7: items as an array and additionalItems; dependencies.
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "items": [{"type": "integer"}],
        "additionalItems": False,
    }
    assert validate_json_schema([1], draft7) == []
    assert validate_json_schema([1, 2], draft7) == ["$: more than 1 item"]
    deps = {"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"a": ["b"]}}
    assert validate_json_schema({"a": 1}, deps) == ['$.b: required when "a" is present']
    # Without $schema: 2020-12, where an array under "items" is not a schema at all.
    with pytest.raises(CoderAgentError, match="not a valid JSON Schema"):
        validate_json_schema([1], {"items": [{"type": "integer"}]})


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "object", "properties": {"q": {"type": "strnig"}}},
            r"tool 'search': the input schema is not a valid JSON Schema: \$\.properties\.q\.type: ",
        ),
        (
            {"type": "object", "properties": {"q": {"minLength": -1}}},
            r"not a valid JSON Schema: \$\.properties\.q\.minLength: ",
        ),
        (
            {"type": "object", "properties": {"q": {"pattern": "[a-"}}},
            r"not a valid JSON Schema: \$\.properties\.q\.pattern: ",
        ),
        (
            {"type": "object", "required": "q"},
            r"not a valid JSON Schema: \$\.required: ",
        ),
        (
            {"type": "object", "properties": {"q": {"$ref": "#/$defs/missing"}}},
            r"tool 'search': the input schema: \$ref '#/\$defs/missing' does not resolve",
        ),
        (
            {"$ref": "https://example.com/schemas/query.json"},
            r"\$ref 'https://example\.com/schemas/query\.json' does not resolve \(references "
            r"must point inside the schema\)",
        ),
        (
            {"$schema": "https://example.com/my-dialect"},
            r"tool 'search': the input schema: unknown \$schema 'https://example\.com/my-dialect'",
        ),
    ],
)
def test_a_bad_schema_is_an_error_when_the_tool_is_defined(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(CoderAgentError, match=message):
        Tool.from_schema("search", schema)

    def search(q: str) -> str:
        return q

    with pytest.raises(CoderAgentError, match="tool 'search'"):
        tool(schema=schema)(search)


def test_references_resolve_against_nested_ids() -> None:
    schema = {
        "type": "object",
        "properties": {"point": {"$ref": "https://example.com/point"}},
        "$defs": {
            "point": {
                "$id": "https://example.com/point",
                "type": "object",
                "properties": {"x": {"$ref": "#/$defs/coordinate"}},
                "$defs": {"coordinate": {"type": "number"}},
            }
        },
    }
    t = Tool.from_schema("plot", schema)
    assert t.parse_input('{"point": {"x": 1.5}}') == {"point": {"x": 1.5}}
    with pytest.raises(ToolInputError, match=r"\$\.point\.x: expected number"):
        t.parse_input('{"point": {"x": "one"}}')


def test_formats_are_a_fixed_list() -> None:
    assert set(CHECKED_FORMATS) == {
        "date",
        "date-time",
        "email",
        "idn-email",
        "ipv4",
        "ipv6",
        "regex",
        "time",
        "uuid",
    }
    # "uri" is not in the list: an annotation whatever packages are installed.
    assert validate_json_schema("not a uri", {"format": "uri"}) == []


def test_tool_input_errors_name_the_path_and_stop_after_five_problems() -> None:
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    t = Tool.from_schema("log", schema)
    with pytest.raises(ToolInputError) as excinfo:
        t.parse_input('{"when": "noon", "tags": [1, 2, 3, 4, 5, 6]}')
    message = str(excinfo.value)
    assert message.startswith("tool 'log': invalid input: $.when: not a valid date-time; ")
    assert message.count(": expected string") == 4 and "$.tags[3]" in message
    assert "$.tags[4]" not in message


def test_structured_output_schemas_are_validated_the_same_way() -> None:
    from coder_proto._agent.structured_output import StructuredOutput

    output = StructuredOutput(
        {"type": "object", "properties": {"due": {"type": "string", "format": "date"}}}
    )
    with pytest.raises(ToolInputError, match=r"\$\.due: not a valid date"):
        output.tool.parse_input('{"due": "soon"}')
    with pytest.raises(CoderAgentError, match="unknown \\$schema"):
        StructuredOutput({"$schema": "nope"})


def test_jsonschema_is_imported_when_the_first_schema_is_compiled() -> None:
    code = (
        "import sys\n"
        "import coder_proto._agent.tools as t\n"
        "before = 'jsonschema' in sys.modules\n"
        "t.Tool.from_schema('x', {'type': 'object'})\n"
        "print(before, 'jsonschema' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
