"""Client tools: names, JSON Schemas, input validation and output encoding.

A client ("dynamic") tool is registered with the chat at creation (``unsafe_dynamic_tools``,
wire 2.1) and executed by the caller when the run pauses in ``requires_action``. This module is
the pure part of that, shared by every adapter:

* ``tool`` turns a function into a ``Tool``: its name, its description (the docstring), and a
  JSON Schema derived from its type hints (``str``, ``int``, ``float``, ``bool``, ``None``,
  ``list``/``tuple``/``set``, ``dict``, ``Optional``/unions, ``Literal``, ``Enum``,
  ``TypedDict``, dataclasses, attrs classes, pydantic models when pydantic is installed, and
  ``Annotated[T, "description"]``);
* ``Tool.from_schema`` takes an explicit JSON Schema; ``Tool.from_model`` takes an attrs class,
  a dataclass or a pydantic model whose instance the function receives;
* ``Tool.parse_input`` validates the model's arguments (JSON text, D18) against the schema and
  converts them to the declared Python types, raising ``ToolInputError`` on bad input. The
  ``jsonschema`` library validates, with every keyword of the draft the schema's ``$schema``
  names (2020-12 when it names none); ``coder_proto._schema.CHECKED_FORMATS`` lists the
  ``format`` values that are checked. Each problem names the path to the failing value and what was expected
  (``$.items[2].name: expected string``);
* the schema itself is checked when a tool is defined: an unknown ``$schema``, a schema its
  draft's meta-schema rejects, or a ``$ref`` that does not resolve inside the schema is a
  ``CoderAgentError`` naming the tool (no reference is ever fetched);
* ``encode_output`` turns whatever the tool returned into JSON for the tool-results request.

The tool loop (D5) turns a ``ToolInputError``, an exception raised by the function, or an
unknown tool name into an error result (``is_error: true`` with a string message).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin, get_type_hints

import attrs

from .._errors import CoderAgentError
from .._json import loads
from .._wire.chats import DynamicTool

if typing.TYPE_CHECKING:
    from .._schema import Validator

__all__ = [
    "Tool",
    "ToolContext",
    "ToolInputError",
    "compile_schema",
    "encode_output",
    "json_schema_for",
    "schema_problems",
    "tool",
    "tools_by_name",
    "validate_json_schema",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class ToolInputError(CoderAgentError):
    """The model's arguments for a client tool did not match its schema."""


@attrs.frozen(kw_only=True)
class ToolContext:
    """What a running client tool may want to know about its call.

    A tool function receives it when one of its parameters is annotated ``ToolContext`` (that
    parameter is left out of the input schema). ``tool_call_id`` is assigned by the server and
    unique within the chat, so ``(chat_id, tool_call_id)`` identifies the call durably: the
    basis of idempotency keys for tools with external effects.
    """

    chat_id: str | None
    tool_call_id: str
    tool_name: str


def _pydantic_base() -> type | None:
    try:
        import pydantic
    except ImportError:  # pragma: no cover - pydantic is optional
        return None
    return pydantic.BaseModel


def _is_pydantic_model(tp: Any) -> bool:
    base = _pydantic_base()
    return base is not None and isinstance(tp, type) and issubclass(tp, base)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and typing.is_typeddict(tp)


# -- schema generation ----------------------------------------------------------------------


def json_schema_for(tp: Any) -> dict[str, Any]:
    """A JSON Schema describing values of the Python type ``tp``."""
    return _schema(tp, set())


def _schema(tp: Any, seen: set[Any]) -> dict[str, Any]:
    if tp is Any or tp is object:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is typing.Annotated:
        schema = _schema(args[0], seen)
        for meta in args[1:]:
            if isinstance(meta, str):
                schema = {**schema, "description": meta}
        return schema
    if origin is Literal:
        values = list(args)
        return {"enum": values}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        nullable = len(options) != len(args)
        if len(options) == 1:
            inner = _schema(options[0], seen)
            if nullable:
                return {"anyOf": [inner, {"type": "null"}]}
            return inner
        any_of = [_schema(a, seen) for a in options]
        if nullable:
            any_of.append({"type": "null"})
        return {"anyOf": any_of}
    if origin in (list, set, frozenset, Sequence, Iterable) or tp in (list, set, frozenset):
        item = _schema(args[0], seen) if args else {}
        schema = {"type": "array", "items": item}
        if origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is tuple or tp is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", "items": _schema(args[0], seen) if args else {}}
        return {
            "type": "array",
            "prefixItems": [_schema(a, seen) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin in (dict, Mapping) or tp is dict:
        value = _schema(args[1], seen) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [member.value for member in tp]}
    if tp in seen:
        raise CoderAgentError(f"recursive type {tp!r} cannot be described as a tool schema")
    if _is_pydantic_model(tp):
        schema = dict(tp.model_json_schema())
        schema.setdefault("type", "object")
        return schema
    if _is_typeddict(tp):
        return _object_schema(
            tp, get_type_hints(tp, include_extras=True), set(tp.__required_keys__), seen
        )
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = get_type_hints(tp, include_extras=True)
        fields = {f.name: hints[f.name] for f in dataclasses.fields(tp) if f.init}
        required = {
            f.name
            for f in dataclasses.fields(tp)
            if f.init
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        }
        return _object_schema(tp, fields, required, seen)
    if attrs.has(tp):
        hints = get_type_hints(tp, include_extras=True)
        fields = {a.name: hints.get(a.name, Any) for a in attrs.fields(tp) if a.init}
        required = {a.name for a in attrs.fields(tp) if a.init and a.default is attrs.NOTHING}
        return _object_schema(
            tp,
            {_attrs_init_name(tp, k): v for k, v in fields.items()},
            {_attrs_init_name(tp, k) for k in required},
            seen,
        )
    raise CoderAgentError(f"cannot derive a JSON Schema for {tp!r}")


def _attrs_init_name(cls: Any, name: str) -> str:
    for a in attrs.fields(cls):
        if a.name == name:
            return a.alias or name
    return name  # pragma: no cover - names come from attrs.fields


def _object_schema(
    tp: Any, fields: Mapping[str, Any], required: set[str], seen: set[Any]
) -> dict[str, Any]:
    seen = seen | {tp}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _schema(hint, seen) for name, hint in fields.items()},
        "additionalProperties": False,
    }
    req = [name for name in fields if name in required]
    if req:
        schema["required"] = req
    return schema


# -- validation (by the jsonschema library, in ._schema) ----------------------------------------


def compile_schema(schema: Any, what: str = "schema") -> Validator:
    """A validator for the JSON Schema ``schema``, after checking the schema itself (see the
    module docstring); raises ``CoderAgentError`` beginning with ``what`` when it is not a
    valid schema."""
    from .. import _schema as validation  # imports jsonschema, the first time

    return validation.compile_schema(schema, what)


def schema_problems(validator: Validator, value: Any) -> list[str]:
    """Readable problems of ``value`` under a validator from ``compile_schema``, each starting
    with the path to the failing value; empty when valid."""
    from .. import _schema as validation

    return validation.problems(validator, value)


def validate_json_schema(value: Any, schema: Any) -> list[str]:
    """Check ``value`` against the JSON Schema ``schema``: every keyword of its draft (see
    ``coder_proto._schema.CHECKED_FORMATS`` for ``format``). Returns readable problems
    (``$.items[2].name: expected string``); empty when valid. Raises ``CoderAgentError`` when
    ``schema`` itself is not a valid schema."""
    return schema_problems(compile_schema(schema), value)


# -- conversion of validated JSON to the declared Python types ------------------------------


def _convert(value: Any, tp: Any) -> Any:
    if tp is Any or tp is object or value is None:
        return value
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is typing.Annotated:
        return _convert(value, args[0])
    if tp is float and isinstance(value, int):
        return float(value)
    if tp is int and isinstance(value, float):
        return int(value)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            if option is type(None):
                continue
            if compile_schema(json_schema_for(option)).is_valid(value):
                return _convert(value, option)
        return value
    if origin in (list, Sequence, Iterable) or tp is list:
        return [_convert(v, args[0]) if args else v for v in value]
    if origin in (set, frozenset) or tp in (set, frozenset):
        kind = frozenset if (origin or tp) is frozenset else set
        return kind(_convert(v, args[0]) if args else v for v in value)
    if origin is tuple or tp is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return tuple(_convert(v, args[0]) if args else v for v in value)
        return tuple(_convert(v, a) for v, a in zip(value, args, strict=False))
    if origin in (dict, Mapping) or tp is dict:
        return {k: _convert(v, args[1]) if len(args) == 2 else v for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if _is_pydantic_model(tp):
        return tp.model_validate(value)
    if _is_typeddict(tp):
        hints = get_type_hints(tp)
        return {k: _convert(v, hints.get(k, Any)) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = get_type_hints(tp)
        return tp(**{k: _convert(v, hints.get(k, Any)) for k, v in value.items()})
    if attrs.has(tp):
        hints = get_type_hints(tp)
        by_alias = {(a.alias or a.name): a.name for a in attrs.fields(tp)}
        return tp(**{k: _convert(v, hints.get(by_alias.get(k, k), Any)) for k, v in value.items()})
    return value


# -- output encoding ------------------------------------------------------------------------


def encode_output(value: Any) -> Any:
    """JSON for a tool's return value: JSON values pass through; attrs classes,
    dataclasses, pydantic models, enums, tuples and sets are converted; anything else becomes
    its ``str``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, enum.Enum):
        return encode_output(value.value)
    if isinstance(value, Mapping):
        return {str(k): encode_output(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [encode_output(v) for v in value]
    base = _pydantic_base()
    if base is not None and isinstance(value, base):
        return typing.cast(Any, value).model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_output(dataclasses.asdict(value))
    if attrs.has(type(value)):
        return encode_output(attrs.asdict(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


# -- the Tool object ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Tool:
    """A client tool: what the server learns about it and how its input is checked.

    ``func`` is the user's callable (sync or async; adapters decide how to run it).
    ``input_mode`` says how validated input is passed: ``"kwargs"`` (one keyword argument per
    property), ``"model"`` (one instance of ``input_type``) or ``"raw"`` (the validated JSON
    value as a single argument).
    """

    name: str
    description: str | None
    input_schema: Mapping[str, Any]
    func: Callable[..., Any] | None = attrs.field(default=None, eq=False, repr=False)
    input_mode: str = "kwargs"
    input_type: Any = attrs.field(default=None, eq=False, repr=False)
    hints: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: The name of the parameter that receives the ``ToolContext``, if any.
    context_param: str | None = None
    _validator: Validator = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise CoderAgentError(
                f"invalid tool name {self.name!r}: use 1-128 letters, digits, '_' or '-'"
            )
        validator = compile_schema(self.input_schema, f"tool {self.name!r}: the input schema")
        object.__setattr__(self, "_validator", validator)

    @property
    def is_async(self) -> bool:
        """True when calling ``func`` returns an awaitable."""
        func = self.func
        return func is not None and (
            inspect.iscoroutinefunction(func)
            or inspect.iscoroutinefunction(getattr(func, "__call__", None))  # noqa: B004
        )

    def to_dynamic_tool(self) -> DynamicTool:
        """The ``unsafe_dynamic_tools`` entry sent at chat creation."""
        return DynamicTool(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def parse_input(self, args: str | Any) -> Any:
        """Validate the model's arguments (JSON text, or an already-decoded value) and return
        them in the form ``func`` takes: a dict of keyword arguments, an instance of the input
        model, or the raw value. Raises ``ToolInputError``."""
        if isinstance(args, str | bytes):
            try:
                value = loads(args) if args else {}
            except ValueError as exc:
                raise ToolInputError(f"tool {self.name!r}: arguments are not valid JSON") from exc
        else:
            value = args
        if self.input_mode == "model" and _is_pydantic_model(self.input_type):
            try:
                return self.input_type.model_validate(value)
            except Exception as exc:
                raise ToolInputError(f"tool {self.name!r}: invalid input: {exc}") from exc
        problems = schema_problems(self._validator, value)
        if problems:
            raise ToolInputError(f"tool {self.name!r}: invalid input: " + "; ".join(problems[:5]))
        if self.input_mode == "model":
            try:
                return _convert(value, self.input_type)
            except Exception as exc:
                raise ToolInputError(f"tool {self.name!r}: invalid input: {exc}") from exc
        if self.input_mode == "raw":
            return value
        if not isinstance(value, dict):
            raise ToolInputError(f"tool {self.name!r}: arguments must be a JSON object")
        return {k: _convert(v, self.hints.get(k, Any)) for k, v in value.items()}

    def call_args(
        self, parsed: Any, context: ToolContext | None = None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments for ``func`` from ``parse_input``'s result. A tool
        with a ``ToolContext`` parameter receives ``context`` there (adapters always pass it)."""
        extra: dict[str, Any] = {}
        if self.context_param is not None:
            extra[self.context_param] = context
        if self.input_mode == "kwargs":
            return (), {**dict(parsed), **extra}
        return (parsed,), extra

    @classmethod
    def from_function(
        cls,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """Derive the schema from ``func``'s parameters and type hints (the ``@tool`` path).
        A function whose only parameter is annotated with an attrs class, a dataclass or a
        pydantic model receives an instance of it."""
        sig = inspect.signature(func)
        hints = get_type_hints(func, include_extras=True)
        params = [
            p
            for p in sig.parameters.values()
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        ]
        doc = description if description is not None else _first_paragraph(func)
        tool_name: str = name or str(getattr(func, "__name__", "tool"))
        context_param = next((p.name for p in params if hints.get(p.name) is ToolContext), None)
        params = [p for p in params if p.name != context_param]
        if len(params) == 1:
            hint = hints.get(params[0].name, Any)
            if _is_model_type(hint):
                model_tool = cls.from_model(hint, func, name=tool_name, description=doc)
                return attrs.evolve(model_tool, context_param=context_param)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in params:
            hint = hints.get(param.name, Any)
            try:
                properties[param.name] = json_schema_for(hint)
            except CoderAgentError as exc:
                raise CoderAgentError(
                    f"tool {tool_name!r}, parameter {param.name!r}: {exc}; give the tool an "
                    "explicit input schema with @tool(schema=...)"
                ) from None
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
        schema: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            schema["required"] = required
        return cls(
            name=tool_name,
            description=doc,
            input_schema=schema,
            func=func,
            input_mode="kwargs",
            hints={p.name: hints.get(p.name, Any) for p in params},
            context_param=context_param,
        )

    @classmethod
    def from_schema(
        cls,
        name: str,
        schema: Mapping[str, Any],
        func: Callable[..., Any] | None = None,
        *,
        description: str | None = None,
        kwargs: bool = True,
    ) -> Tool:
        """A tool with an explicit JSON Schema. ``func`` receives the properties as keyword
        arguments (``kwargs=True``) or the whole validated value as one argument."""
        if not isinstance(schema, Mapping):
            raise CoderAgentError(f"tool {name!r}: the input schema must be a JSON object")
        return cls(
            name=name,
            description=description,
            input_schema=dict(schema),
            func=func,
            input_mode="kwargs" if kwargs else "raw",
        )

    @classmethod
    def from_model(
        cls,
        model: Any,
        func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """A tool whose input is an attrs class, a dataclass or a pydantic model; ``func``
        receives one validated instance."""
        if not _is_model_type(model):
            raise CoderAgentError(f"{model!r} is not an attrs class, dataclass or pydantic model")
        doc = description
        if doc is None and func is not None:
            doc = _first_paragraph(func)
        if doc is None:
            doc = _first_paragraph(model)
        return cls(
            name=name or (getattr(func, "__name__", None) if func else None) or model.__name__,
            description=doc,
            input_schema=json_schema_for(model),
            func=func,
            input_mode="model",
            input_type=model,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (the decorator keeps it usable as a function)."""
        if self.func is None:
            raise CoderAgentError(f"tool {self.name!r} has no function to call")
        return self.func(*args, **kwargs)


def _is_model_type(tp: Any) -> bool:
    return isinstance(tp, type) and (
        attrs.has(tp) or dataclasses.is_dataclass(tp) or _is_pydantic_model(tp)
    )


def _first_paragraph(obj: Any) -> str | None:
    doc = inspect.getdoc(obj)
    if not doc:
        return None
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ").strip() or None


@typing.overload
def tool(func: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a client tool: ``@tool`` or ``@tool(name=..., description=..., schema=...)``.

    Without ``schema`` the input schema comes from the function's type hints; with it, the
    function receives the schema's properties as keyword arguments.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        if schema is not None:
            return Tool.from_schema(
                name or f.__name__,
                schema,
                f,
                description=description if description is not None else _first_paragraph(f),
            )
        return Tool.from_function(f, name=name, description=description)

    if func is not None:
        return wrap(func)
    return wrap


def tools_by_name(
    tools: Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | None,
) -> dict[str, Tool]:
    """Normalise what a user passes as ``tools=``: ``Tool`` objects, plain functions (wrapped
    with ``tool``), or a mapping of name to either. Duplicate names are an error."""
    if tools is None:
        return {}
    out: dict[str, Tool] = {}
    items: Iterable[tuple[str | None, Any]]
    if isinstance(tools, Mapping):
        items = tools.items()
    else:
        items = ((None, t) for t in tools)
    for key, item in items:
        if isinstance(item, Tool):
            t = item if key is None or key == item.name else attrs.evolve(item, name=key)
        elif callable(item):
            t = Tool.from_function(item, name=key)
        else:
            raise CoderAgentError(f"not a tool: {item!r}")
        if t.name in out:
            raise CoderAgentError(f"duplicate tool name {t.name!r}")
        out[t.name] = t
    return out
