"""The items of a scripted model turn, and their JSON form.

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
* ``ReportUsage`` overrides the usage stamped on the step's assistant message.

Consecutive tool calls form one step (parallel calls); any other item after a tool call starts
the next model step. Texts, tool arguments and server tool results may hold placeholders
(``{prompt}``, ``{tool_result.city}``, a group the rule captured ...), filled in when the step
runs (``_template``).

Scripts are plain Python objects and load from JSON (``Script.from_json``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import attrs

from ._errors import ScriptError

__all__ = [
    "CallClientTool",
    "CallServerTool",
    "Cite",
    "Fail",
    "ReportUsage",
    "Retry",
    "Say",
    "Script",
    "ScriptItem",
    "Think",
    "Wait",
]


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
class ReportUsage:
    """Report this usage for the current step's assistant message, replacing the computed one."""

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
    Say | Think | Cite | CallServerTool | CallClientTool | Wait | Retry | Fail | ReportUsage
)
"""One item of a ``Script``: what the simulated model does next."""

_TOOL_ITEMS = (CallServerTool, CallClientTool)


def _as_items(value: Iterable[ScriptItem]) -> tuple[ScriptItem, ...]:
    items = tuple(value)
    for item in items:
        if not isinstance(item, ScriptItem):
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
    "usage": ReportUsage,
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
        if expected is None and cls is ReportUsage:
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
