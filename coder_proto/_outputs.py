"""Output parts: what a turn delivers to its consumer (state machines A.2-A.11, G.1).

They keep the reference client's block structure in Python form: text and reasoning arrive as
``*Start`` / ``*Delta`` / ``*End`` with block ids (``text-1``, ``reasoning-2`` ...; one counter
shared by both kinds), tools as ``ToolInputStart`` / ``ToolInputEnd`` / ``ToolCall`` (and
``ToolResult`` for server-executed tools), then ``Source``, ``ErrorPart`` and one ``Finish``
with the segment's usage and finish reason.

Every part has a ``type`` string (the reference's name, e.g. ``"text-delta"``) and
``to_dict()`` for JSON output.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

import attrs

from ._wire.fields import slot_setter
from ._wire.messages import ChatError

__all__ = [
    "ErrorPart",
    "Finish",
    "OutputPart",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "Source",
    "StreamStart",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "ToolCall",
    "ToolInputEnd",
    "ToolInputStart",
    "ToolResult",
    "Usage",
    "part_to_dict",
]


def _asdict(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": obj.type}
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        if isinstance(value, Usage | ChatError):
            value = value.to_dict() if isinstance(value, Usage) else value.to_json()
        out[field.name] = value
    return out


@attrs.frozen
class TextStart:
    """A text block opens."""

    id: str
    type: ClassVar[str] = "text-start"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id}


@attrs.frozen(init=False, weakref_slot=False)
class TextDelta:
    """A chunk of text in the open block ``id``."""

    id: str
    delta: str
    type: ClassVar[str] = "text-delta"

    def __init__(self, id: str, delta: str) -> None:
        # One per streamed delta: slot setters cost half the attrs-generated __init__.
        _text_delta_id(self, id)
        _text_delta_delta(self, delta)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id, "delta": self.delta}


_text_delta_id = slot_setter(TextDelta, "id")
_text_delta_delta = slot_setter(TextDelta, "delta")


class _TextDeltaDraft:
    """The slots of ``TextDelta``, writable: the translator fills one with plain stores and
    makes it a ``TextDelta`` by assigning ``__class__`` (same slots, no ``__weakref__``)."""

    __slots__ = TextDelta.__slots__  # type: ignore[attr-defined]

    id: str
    delta: str


def make_text_delta(id: str, delta: str) -> TextDelta:
    """``TextDelta(id, delta)`` without the ``__init__`` frame, through the draft (the
    translator's hot path does the same inline)."""
    part = _TextDeltaDraft()
    part.id = id
    part.delta = delta
    part.__class__ = TextDelta  # type: ignore[assignment]
    return part  # type: ignore[return-value]


@attrs.frozen
class TextEnd:
    """The text block ``id`` closes."""

    id: str
    type: ClassVar[str] = "text-end"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id}


@attrs.frozen
class ReasoningStart:
    """A reasoning block opens."""

    id: str
    type: ClassVar[str] = "reasoning-start"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id}


@attrs.frozen(init=False, weakref_slot=False)
class ReasoningDelta:
    """A chunk of reasoning in the open block ``id``."""

    id: str
    delta: str
    type: ClassVar[str] = "reasoning-delta"

    def __init__(self, id: str, delta: str) -> None:
        # One per streamed delta: slot setters cost half the attrs-generated __init__.
        _reasoning_delta_id(self, id)
        _reasoning_delta_delta(self, delta)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id, "delta": self.delta}


_reasoning_delta_id = slot_setter(ReasoningDelta, "id")
_reasoning_delta_delta = slot_setter(ReasoningDelta, "delta")


class _ReasoningDeltaDraft:
    """The slots of ``ReasoningDelta``, writable (as ``_TextDeltaDraft``)."""

    __slots__ = ReasoningDelta.__slots__  # type: ignore[attr-defined]

    id: str
    delta: str


def make_reasoning_delta(id: str, delta: str) -> ReasoningDelta:
    """``ReasoningDelta(id, delta)`` without the ``__init__`` frame."""
    part = _ReasoningDeltaDraft()
    part.id = id
    part.delta = delta
    part.__class__ = ReasoningDelta  # type: ignore[assignment]
    return part  # type: ignore[return-value]


@attrs.frozen
class ReasoningEnd:
    """The reasoning block ``id`` closes."""

    id: str
    type: ClassVar[str] = "reasoning-end"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id}


@attrs.frozen(kw_only=True)
class ToolInputStart:
    """A tool call's input begins. Server-executed tools have ``provider_executed`` and
    ``dynamic`` set; client tools have neither (A.7)."""

    tool_call_id: str
    tool_name: str
    provider_executed: bool = False
    dynamic: bool = False
    type: ClassVar[str] = "tool-input-start"

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@attrs.frozen(kw_only=True)
class ToolInputEnd:
    """A tool call's input is complete."""

    tool_call_id: str
    type: ClassVar[str] = "tool-input-end"

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call. ``input`` is JSON text: the raw ``args`` string of ``action_required``
    for client tools, ``JSON.stringify`` of the snapshot's args for server tools (D18)."""

    tool_call_id: str
    tool_name: str
    input: str
    provider_executed: bool = False
    dynamic: bool = False
    type: ClassVar[str] = "tool-call"

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@attrs.frozen(kw_only=True)
class ToolResult:
    """A server-executed tool's result (client tool results are never emitted; A.7).
    A wire ``null`` result becomes ``{}`` (D19)."""

    tool_call_id: str
    tool_name: str
    result: Any
    is_error: bool = False
    dynamic: bool = True
    type: ClassVar[str] = "tool-result"

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@attrs.frozen(kw_only=True)
class Source:
    """A cited URL, once per ``source_id`` (or URL when the id is empty; A.8). ``title`` is
    ``None`` when the wire part had none."""

    id: str
    url: str
    title: str | None = None
    source_type: str = "url"
    type: ClassVar[str] = "source"

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@attrs.frozen(kw_only=True)
class ErrorPart:
    """The run reported an error (A.10). ``error`` is the wire payload; ``exception()``
    builds the ``CoderChatError`` a generate-style consumer raises."""

    error: ChatError
    chat_id: str | None = None
    type: ClassVar[str] = "error"

    def exception(self) -> Exception:
        return self.error.to_exception(chat_id=self.chat_id)

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


@attrs.frozen(kw_only=True)
class StreamStart:
    """The first part of a segment's stream; ``warnings`` lists unsupported settings."""

    warnings: tuple[str, ...] = ()
    type: ClassVar[str] = "stream-start"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "warnings": list(self.warnings)}


def _add(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


@attrs.frozen(kw_only=True)
class Usage:
    """Normalised token usage (F.2, D17).

    ``input_tokens`` is the full prompt: uncached + cache read + cache write (``None`` only
    when all three are unknown). ``no_cache_tokens`` is the wire ``input_tokens``.
    ``total_tokens`` is ``input_tokens + output_tokens`` when both are known. ``raw`` is the
    accumulated wire usage of one segment (``None`` for sums across segments).
    """

    input_tokens: int | None = None
    no_cache_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    text_tokens: int | None = None
    raw: dict[str, Any] | None = attrs.field(default=None, eq=False)

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        """Field-wise sum across steps: none + none = none, otherwise none counts as 0
        (F.5, D17). The sum has no ``raw``."""
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=_add(self.input_tokens, other.input_tokens),
            no_cache_tokens=_add(self.no_cache_tokens, other.no_cache_tokens),
            cache_read_tokens=_add(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=_add(self.cache_write_tokens, other.cache_write_tokens),
            output_tokens=_add(self.output_tokens, other.output_tokens),
            reasoning_tokens=_add(self.reasoning_tokens, other.reasoning_tokens),
            text_tokens=_add(self.text_tokens, other.text_tokens),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "no_cache_tokens": self.no_cache_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "text_tokens": self.text_tokens,
            "total_tokens": self.total_tokens,
            "raw": self.raw,
        }


@attrs.frozen(kw_only=True)
class Finish:
    """The segment ended (A.11, G.1).

    ``finish_reason`` is ``"stop"``, ``"tool-calls"`` or ``"error"``; ``raw_finish_reason``
    the terminal chat status (``None`` when none was seen). ``provider_metadata`` is
    ``{"coder": {...}}`` with the summed cost/runtime when the wire carried them (F.3).
    ``settled_by`` is ``"promotion"`` when the turn settled because another prompt was
    promoted (D3).
    """

    finish_reason: str
    raw_finish_reason: str | None = None
    usage: Usage = attrs.field(factory=Usage)
    provider_metadata: dict[str, Any] | None = None
    settled_by: str | None = None
    type: ClassVar[str] = "finish"

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)


OutputPart: TypeAlias = (
    TextStart
    | TextDelta
    | TextEnd
    | ReasoningStart
    | ReasoningDelta
    | ReasoningEnd
    | ToolInputStart
    | ToolInputEnd
    | ToolCall
    | ToolResult
    | Source
    | ErrorPart
    | StreamStart
    | Finish
)
"""Any output part a stream yields (``TextDelta``, ``ToolCall``, ``Finish`` ...)."""


def part_to_dict(part: OutputPart) -> dict[str, Any]:
    """A JSON-ready dict of any output part."""
    return part.to_dict()
