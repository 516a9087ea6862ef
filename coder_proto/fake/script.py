"""Scripted model behaviour for the fake server: what the "LLM" does with a prompt.

A ``Script`` is a list of items the fake's worker plays back as model steps
(server-behaviour 3.4, 3.5, 5):

* ``Think`` / ``Say`` stream reasoning / text as deltas in chunks, then commit them;
* ``Cite`` adds a source part;
* ``CallServerTool`` calls a server-side tool (its result is committed by the server, as a
  ``tool`` message, or inline when ``provider_executed``) and the model continues;
* ``CallClientTool`` calls a dynamic (client) tool: the step commits and the chat pauses in
  ``requires_action`` until results arrive, then the remaining items run;
* ``Wait`` runs slowly; ``Retry`` emits ``retry`` events then recovers; ``Fail`` emits
  ``retry`` events then fails the turn (``status: error``);
* ``Usage`` overrides the usage stamped on the step's assistant message.

Consecutive tool calls form one step (parallel calls); any other item after a tool call starts
the next model step. Text in ``Say``/``Think`` may use the placeholders ``{prompt}`` (the
user's prompt), ``{tool_result}`` (JSON text of the latest tool result) and
``{tool_results}`` (JSON text of all results of the latest pause, as an array).

Scripts are plain Python objects and load from JSON (``Script.from_json``,
``ScriptBook.from_json``). ``ScriptBook`` selects a script per prompt: one-shot scripts pushed
with ``push`` first, then the first rule whose regular expression matches the prompt, then
the default (``default_script`` unless replaced).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from .._errors import CoderAgentError
from .._json import js_stringify

__all__ = [
    "CallClientTool",
    "CallServerTool",
    "Cite",
    "Fail",
    "Retry",
    "Say",
    "Script",
    "ScriptBook",
    "ScriptContext",
    "ScriptError",
    "ScriptFactory",
    "ScriptItem",
    "ScriptRule",
    "Think",
    "Usage",
    "Wait",
    "default_script",
    "render",
]


class ScriptError(CoderAgentError):
    """A script (or its JSON form) is malformed."""


# -- items ------------------------------------------------------------------------------------


def _positive_or_none(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ScriptError(f"{attr.name} must be a positive integer or None, got {value!r}")


@attrs.frozen
class Say:
    """Stream ``text`` as text deltas: ``chunk`` characters each, or word by word when
    ``None``."""

    text: str
    chunk: int | None = attrs.field(default=None, validator=_positive_or_none)


@attrs.frozen
class Think:
    """Stream ``text`` as reasoning deltas (chunked like ``Say``)."""

    text: str
    chunk: int | None = attrs.field(default=None, validator=_positive_or_none)


@attrs.frozen(kw_only=True)
class Cite:
    """A ``source`` part (``source_id`` defaults to none, so clients key it by url)."""

    url: str
    title: str | None = None
    source_id: str | None = None


@attrs.frozen(kw_only=True)
class CallServerTool:
    """A server-executed tool call. ``args`` streams as ``args_delta`` chunks, then a complete
    ``tool-call`` part; ``result`` is committed as a ``tool`` message (or inline in the
    assistant message when ``provider_executed``)."""

    name: str
    args: Any = attrs.field(factory=dict)
    result: Any = attrs.field(factory=dict)
    is_error: bool = False
    provider_executed: bool = False
    tool_call_id: str | None = None


@attrs.frozen(kw_only=True)
class CallClientTool:
    """A dynamic (client) tool call: the chat pauses in ``requires_action`` (state machine
    EnterRequiresAction) until the client posts its result."""

    name: str
    args: Any = attrs.field(factory=dict)
    tool_call_id: str | None = None


@attrs.frozen
class Wait:
    """Pause the model for ``seconds`` (a slow model, or a long tool)."""

    seconds: float


@attrs.frozen(kw_only=True)
class Retry:
    """A transient provider failure: ``times`` retry attempts (``retry`` events, each a new
    generation attempt with a ``preview_reset``), then the step goes on."""

    times: int = 1
    error: str = "The model provider is overloaded."
    kind: str = "overloaded"
    status_code: int | None = 529
    provider: str | None = "anthropic"


@attrs.frozen(kw_only=True)
class Fail:
    """A failed turn: ``retries`` retry attempts first, then ``status: error`` with this
    ``last_error`` (server-behaviour 8.9)."""

    message: str = "The model provider returned an error."
    kind: str = "generic"
    retries: int = 0
    retryable: bool = False
    detail: str | None = None
    provider: str | None = None
    status_code: int | None = None


@attrs.frozen(kw_only=True)
class Usage:
    """Usage for the current step's assistant message, replacing the computed one."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_creation_tokens: int | None = None
    cache_read_tokens: int | None = None
    context_limit: int | None = None

    def to_json(self) -> dict[str, int]:
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


ScriptItem: TypeAlias = (
    Say | Think | Cite | CallServerTool | CallClientTool | Wait | Retry | Fail | Usage
)

_TOOL_ITEMS = (CallServerTool, CallClientTool)


def _as_items(value: Iterable[ScriptItem]) -> tuple[ScriptItem, ...]:
    items = tuple(value)
    for item in items:
        if not isinstance(
            item, Say | Think | Cite | CallServerTool | CallClientTool | Wait | Retry | Fail | Usage
        ):
            raise ScriptError(f"not a script item: {item!r}")
    return items


@attrs.frozen
class Script:
    """A scripted model turn. ``chunk_delay`` overrides the server's delay between streamed
    parts (seconds) for this script only."""

    items: tuple[ScriptItem, ...] = attrs.field(converter=_as_items)
    chunk_delay: float | None = None

    def steps(self) -> list[list[ScriptItem]]:
        """The items grouped into model steps: a step ends after a run of tool calls. A
        script that ends with tool calls gets an empty final step (the model's closing
        generation after the results)."""
        steps: list[list[ScriptItem]] = [[]]
        for item in self.items:
            current = steps[-1]
            if (
                current
                and isinstance(current[-1], _TOOL_ITEMS)
                and not isinstance(item, _TOOL_ITEMS)
            ):
                steps.append([])
            steps[-1].append(item)
        if steps[-1] and isinstance(steps[-1][-1], _TOOL_ITEMS):
            steps.append([])
        return steps

    # -- JSON ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"items": [_item_to_json(i) for i in self.items]}
        if self.chunk_delay is not None:
            out["chunk_delay"] = self.chunk_delay
        return out

    @classmethod
    def from_json(cls, value: Any) -> Script:
        """A script from JSON: a list of items, or ``{"items": [...], "chunk_delay": s}``.
        Each item is an object with a ``type`` (``say``, ``think``, ``cite``,
        ``server_tool``, ``client_tool``, ``wait``, ``retry``, ``fail``, ``usage``) and
        that item's fields. Raises ``ScriptError`` on anything malformed."""
        chunk_delay: Any = None
        if isinstance(value, Mapping):
            items = value.get("items")
            chunk_delay = value.get("chunk_delay")
            unknown = set(value) - {"items", "chunk_delay"}
            if unknown:
                raise ScriptError(f"unknown script keys: {sorted(unknown)}")
        else:
            items = value
        if not isinstance(items, list):
            raise ScriptError("a script is a list of items or an object with an 'items' list")
        if chunk_delay is not None and not _is_seconds(chunk_delay):
            raise ScriptError("chunk_delay must be a non-negative number of seconds")
        return cls(
            tuple(_item_from_json(i, n) for n, i in enumerate(items)),
            float(chunk_delay) if chunk_delay is not None else None,
        )


def _is_seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


_ITEM_TYPES: dict[str, type[Any]] = {
    "say": Say,
    "think": Think,
    "cite": Cite,
    "server_tool": CallServerTool,
    "client_tool": CallClientTool,
    "wait": Wait,
    "retry": Retry,
    "fail": Fail,
    "usage": Usage,
}
_TYPE_NAMES = {v: k for k, v in _ITEM_TYPES.items()}

#: Expected JSON types of each item field (a tuple means any of them).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "chunk": (int, type(None)),
    "url": (str,),
    "title": (str, type(None)),
    "source_id": (str, type(None)),
    "name": (str,),
    "tool_call_id": (str, type(None)),
    "is_error": (bool,),
    "provider_executed": (bool,),
    "seconds": (int, float),
    "times": (int,),
    "retries": (int,),
    "error": (str,),
    "kind": (str,),
    "message": (str,),
    "detail": (str, type(None)),
    "provider": (str, type(None)),
    "status_code": (int, type(None)),
    "retryable": (bool,),
}


def _item_to_json(item: ScriptItem) -> dict[str, Any]:
    out: dict[str, Any] = {"type": _TYPE_NAMES[type(item)]}
    out.update(attrs.asdict(item, recurse=False))
    return out


def _item_from_json(obj: Any, index: int) -> ScriptItem:
    where = f"script item {index}"
    if not isinstance(obj, Mapping):
        raise ScriptError(f"{where}: expected an object")
    kind = obj.get("type")
    cls = _ITEM_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ScriptError(f"{where}: unknown type {kind!r}")
    fields = {f.name for f in attrs.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "type":
            continue
        if key not in fields:
            raise ScriptError(f"{where}: unknown field {key!r} for {kind!r}")
        expected = _FIELD_TYPES.get(key)
        if expected is None and cls is Usage:
            expected = (int, type(None))
        if expected is not None and (
            not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected)
        ):
            raise ScriptError(f"{where}: field {key!r} has the wrong type")
        kwargs[key] = value
    try:
        item: ScriptItem = cls(**kwargs)
    except TypeError as exc:
        raise ScriptError(f"{where}: {exc}") from None
    if isinstance(item, Wait) and item.seconds < 0:
        raise ScriptError(f"{where}: seconds must be non-negative")
    return item


# -- selection --------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ScriptContext:
    """What a script factory knows about the turn it scripts."""

    chat_id: str
    prompt: str
    #: The chat's dynamic tools as registered (``name``, ``description``, ``input_schema``).
    tools: tuple[Mapping[str, Any], ...] = ()
    #: 1 for the chat's first turn, then counting.
    turn: int = 1


ScriptFactory: TypeAlias = Callable[[ScriptContext], Script]


@attrs.frozen
class ScriptRule:
    """Use ``script`` when ``pattern`` (a regular expression, searched case-insensitively)
    matches the prompt."""

    pattern: str
    script: Script | ScriptFactory

    def matches(self, prompt: str) -> bool:
        return re.search(self.pattern, prompt, re.IGNORECASE | re.DOTALL) is not None


def _resolve(script: Script | ScriptFactory, ctx: ScriptContext) -> Script:
    if isinstance(script, Script):
        return script
    result = script(ctx)
    if not isinstance(result, Script):
        raise ScriptError(f"script factory returned {type(result).__name__}, not a Script")
    return result


@attrs.define
class ScriptBook:
    """Chooses the script for each turn: pushed one-shot scripts (FIFO), then the first
    matching rule, then ``default`` (``default_script`` when ``None``)."""

    rules: list[ScriptRule] = attrs.Factory(list)
    default: Script | ScriptFactory | None = None
    _pending: deque[Script] = attrs.field(factory=deque, alias="pending")

    def push(self, script: Script) -> None:
        """Use ``script`` for the next turn that starts on any chat (once)."""
        self._pending.append(script)

    def add(self, pattern: str, script: Script | ScriptFactory) -> None:
        """Append a rule (rules are tried in order)."""
        re.compile(pattern)
        self.rules.append(ScriptRule(pattern, script))

    def select(self, ctx: ScriptContext) -> Script:
        if self._pending:
            return self._pending.popleft()
        for rule in self.rules:
            if rule.matches(ctx.prompt):
                return _resolve(rule.script, ctx)
        return _resolve(self.default if self.default is not None else default_script, ctx)

    @classmethod
    def from_json(cls, value: Any) -> ScriptBook:
        """``{"rules": [{"match": regex, "script": <script>}], "default": <script>}``."""
        if not isinstance(value, Mapping):
            raise ScriptError("a script book is an object with 'rules' and/or 'default'")
        unknown = set(value) - {"rules", "default"}
        if unknown:
            raise ScriptError(f"unknown script book keys: {sorted(unknown)}")
        rules_json = value.get("rules", [])
        if not isinstance(rules_json, list):
            raise ScriptError("'rules' must be a list")
        book = cls()
        for n, rule in enumerate(rules_json):
            if not isinstance(rule, Mapping) or not isinstance(rule.get("match"), str):
                raise ScriptError(f"rule {n}: expected an object with a 'match' string")
            try:
                book.add(rule["match"], Script.from_json(rule.get("script")))
            except re.error as exc:
                raise ScriptError(f"rule {n}: invalid regular expression: {exc}") from None
        if value.get("default") is not None:
            book.default = Script.from_json(value["default"])
        return book


# -- rendering --------------------------------------------------------------------------------


def render(text: str, prompt: str, tool_results: Sequence[Any]) -> str:
    """Fill the placeholders of a ``Say``/``Think`` text (see the module docstring)."""
    if "{" not in text:
        return text
    last = js_stringify(tool_results[-1]) if tool_results else "null"
    return (
        text.replace("{prompt}", prompt)
        .replace("{tool_results}", js_stringify(list(tool_results)))
        .replace("{tool_result}", last)
    )


# -- the default script -----------------------------------------------------------------------

_GREETING = re.compile(r"^\s*(hi|hello|hey|howdy|good (morning|afternoon|evening))\b", re.I)
_GENERIC_TOKENS = frozenset({"get", "set", "run", "do", "fetch", "tool", "call", "the", "a"})
_CAPITALISED = re.compile(r"\b(?:in|for|at|of|near)\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _tool_tokens(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    tokens = [t.lower() for t in re.split(r"[\s_\-.]+", spaced) if t]
    return [t for t in tokens if t not in _GENERIC_TOKENS] or [name.lower()]


def _mentions(prompt: str, name: str) -> bool:
    low = prompt.lower()
    if name.lower() in low:
        return True
    return all(token in low for token in _tool_tokens(name))


def _guess_value(key: str, schema: Any, prompt: str) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(schema, Mapping) and isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind in ("integer", "number"):
        found = _NUMBER.search(prompt)
        if found is None:
            return 1
        number = float(found.group())
        return int(number) if kind == "integer" or number.is_integer() else number
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    place = _CAPITALISED.search(prompt)
    if place is not None and key.lower() in ("city", "location", "place", "country", "where"):
        return place.group(1).rstrip("?.!,")
    return place.group(1).rstrip("?.!,") if place is not None else prompt.strip()


def _guess_args(tool: Mapping[str, Any], prompt: str) -> dict[str, Any]:
    schema = tool.get("input_schema")
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return {}
    required = schema.get("required") if isinstance(schema, Mapping) else None
    keys = [k for k in required if k in props] if isinstance(required, list) else list(props)
    return {str(k): _guess_value(str(k), props[k], prompt) for k in keys}


def default_script(ctx: ScriptContext) -> Script:
    """The built-in demo model: calls a registered client tool the prompt names (for
    ``get_weather`` a prompt mentioning "weather"), greets a greeting, runs a server tool
    when asked to "search", and otherwise thinks briefly and echoes the prompt."""
    prompt = ctx.prompt.strip()
    for tool in ctx.tools:
        name = tool.get("name")
        if isinstance(name, str) and name and _mentions(prompt, name):
            return Script(
                (
                    Think(f"The user wants me to use {name}."),
                    CallClientTool(name=name, args=_guess_args(tool, prompt)),
                    Say(f"{name} returned {{tool_result}}."),
                )
            )
    if _GREETING.search(prompt):
        return Script(
            (Say("Hello! I am the fake Coder agent. Ask me anything and I will echo it back."),)
        )
    if re.search(r"\bsearch\b", prompt, re.I):
        return Script(
            (
                Think("I should search for that."),
                CallServerTool(
                    name="web_search",
                    args={"query": prompt},
                    result={"results": [{"title": "Example", "url": "https://example.com/"}]},
                    provider_executed=True,
                ),
                Cite(url="https://example.com/", title="Example"),
                Say("I found one result: https://example.com/"),
            )
        )
    if not prompt:
        return Script((Say("I received an empty prompt."),))
    return Script((Think("The user said something; I will echo it."), Say(f"You said: {prompt}")))
