"""Per-chat stream events and frame parsing (wire 4.2-4.3; D13, D14).

A WebSocket text frame holds a JSON array of events (the server appends a newline), or one
event object. Each known ``type`` parses into its own frozen class; an unknown ``type``
becomes ``UnknownEvent``, which the machines skip. Structurally wrong input raises
``CoderProtocolError``.

``message_part`` is the hot path (one per streamed text chunk). An array frame of text and
reasoning deltas in the shape servers write, with the message snapshots a backlog carries
among them, is decoded by msgspec in one pass into Structs made from the classes here
(``_typed_deltas``), and its events built from them, with no dict per delta; any other frame
is decoded to dicts and parsed with as little work as the JSON already done allows. Both ways
give the same events and errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeAlias, Union

import attrs
import msgspec

from .._errors import CoderProtocolError
from .._json import REFUSED, long_digit_run, orjson_loads, orjson_unscanned
from . import unicode as _unicode
from .chats import ActionToolCall, ChatWatchEvent
from .fields import get_dict, get_int, get_list, get_str, opt_int, opt_str, req_dict, slot_setter
from .ids import check_resource_id
from .message_parts import (
    PART_ZERO_VALUES,
    ChatMessagePart,
    ReasoningPart,
    ReasoningPartDraft,
    TextPart,
    TextPartDraft,
    parse_part,
    plain_reasoning_part,
)
from .messages import ChatError, ChatMessage, ChatQueuedMessage, parse_queue
from .unicode import decode_json

__all__ = [
    "ActionRequiredEvent",
    "ErrorEvent",
    "HistoryResetEvent",
    "MessageEvent",
    "MessagePartEvent",
    "PreviewResetEvent",
    "QueueUpdateEvent",
    "RetryEvent",
    "RetryInfo",
    "StatusEvent",
    "StreamEvent",
    "UnknownEvent",
    "parse_event",
    "parse_frame",
    "parse_text_frame",
    "parse_watch_frame",
]


@attrs.frozen(init=False, weakref_slot=False)
class MessagePartEvent:
    """A streaming delta (``message_part``). It carries no message id.

    ``history_version``, ``generation_attempt`` and ``seq`` are the episode coordinates of
    newer servers; ``coordinates`` is the triple when all three are ints (D14), else ``None``
    (an untrackable delta, B.2).
    """

    role: str | None
    part: ChatMessagePart
    history_version: Any = None
    generation_attempt: Any = None
    seq: Any = None
    chat_id: str = ""
    #: The wire type, a class constant (one fewer slot to fill per streamed delta).
    type: ClassVar[str] = "message_part"

    def __init__(
        self,
        role: str | None,
        part: ChatMessagePart,
        history_version: Any = None,
        generation_attempt: Any = None,
        seq: Any = None,
        chat_id: str = "",
    ) -> None:
        # One per streamed delta: slot setters cost half the attrs-generated __init__.
        _set_mp_role(self, role)
        _set_mp_part(self, part)
        _set_mp_history_version(self, history_version)
        _set_mp_generation_attempt(self, generation_attempt)
        _set_mp_seq(self, seq)
        _set_mp_chat_id(self, chat_id)

    @property
    def coordinates(self) -> tuple[int, int, int] | None:
        hv, ga, seq = self.history_version, self.generation_attempt, self.seq
        if type(hv) is int and type(ga) is int and type(seq) is int:
            return (hv, ga, seq)
        return None

    def to_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"part": self.part.to_json()}
        if self.role is not None:
            payload["role"] = self.role
        for key in ("history_version", "generation_attempt", "seq"):
            if getattr(self, key) is not None:
                payload[key] = getattr(self, key)
        return {"type": "message_part", "chat_id": self.chat_id, "message_part": payload}


_set_mp_role = slot_setter(MessagePartEvent, "role")
_set_mp_part = slot_setter(MessagePartEvent, "part")
_set_mp_history_version = slot_setter(MessagePartEvent, "history_version")
_set_mp_generation_attempt = slot_setter(MessagePartEvent, "generation_attempt")
_set_mp_seq = slot_setter(MessagePartEvent, "seq")
_set_mp_chat_id = slot_setter(MessagePartEvent, "chat_id")


class _MessagePartDraft:
    """The slots of ``MessagePartEvent``, writable: the stream parser fills one with plain
    attribute stores and then makes it a ``MessagePartEvent`` by assigning ``__class__`` (the
    layouts are the same: same slots, no ``__weakref__``). Six stores and the assignment cost
    half of the six slot setters they replace, once per streamed delta."""

    __slots__ = MessagePartEvent.__slots__  # type: ignore[attr-defined]

    role: str | None
    part: ChatMessagePart
    history_version: Any
    generation_attempt: Any
    seq: Any
    chat_id: str


@attrs.frozen
class MessageEvent:
    """A committed message snapshot (a commit, a replay, or a revision of the same id)."""

    message: ChatMessage
    chat_id: str = ""
    type: str = attrs.field(default="message", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "message", "chat_id": self.chat_id, "message": self.message.to_json()}


@attrs.frozen
class StatusEvent:
    """The chat's status changed (level-triggered; intermediate statuses may be skipped)."""

    status: str
    chat_id: str = ""
    type: str = attrs.field(default="status", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "status", "chat_id": self.chat_id, "status": {"status": self.status}}


@attrs.frozen
class ErrorEvent:
    """The run failed; ``error`` is ``None`` when the event carried no payload."""

    error: ChatError | None
    chat_id: str = ""
    type: str = attrs.field(default="error", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "error", "chat_id": self.chat_id}
        if self.error is not None:
            out["error"] = self.error.to_json()
        return out


@attrs.frozen
class QueueUpdateEvent:
    """The full queue after a change (absent means empty)."""

    queued_messages: tuple[ChatQueuedMessage, ...] = ()
    chat_id: str = ""
    type: str = attrs.field(default="queue_update", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "queue_update", "chat_id": self.chat_id}
        if self.queued_messages:
            out["queued_messages"] = [q.to_json() for q in self.queued_messages]
        return out


@attrs.frozen(kw_only=True)
class RetryInfo:
    """The server is auto-retrying a model call (``retry`` payload)."""

    attempt: int = 0
    delay_ms: int = 0
    error: str = ""
    kind: str | None = None
    provider: str | None = None
    status_code: int | None = None
    retrying_at: str | None = None

    @property
    def delay(self) -> float:
        """The retry delay in seconds."""
        return self.delay_ms / 1000.0

    @classmethod
    def from_json(cls, obj: Any) -> RetryInfo:
        w = "retry event"
        obj = req_dict(obj, w)
        return cls(
            attempt=get_int(obj, "attempt", w),
            delay_ms=get_int(obj, "delay_ms", w),
            error=get_str(obj, "error", w),
            kind=opt_str(obj, "kind", w),
            provider=opt_str(obj, "provider", w),
            status_code=opt_int(obj, "status_code", w),
            retrying_at=opt_str(obj, "retrying_at", w),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attempt": self.attempt,
            "delay_ms": self.delay_ms,
            "error": self.error,
        }
        for key in ("kind", "provider", "status_code", "retrying_at"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@attrs.frozen
class RetryEvent:
    """``retry``: informational; the translator ignores it."""

    retry: RetryInfo
    chat_id: str = ""
    type: str = attrs.field(default="retry", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "retry", "chat_id": self.chat_id, "retry": self.retry.to_json()}


@attrs.frozen
class ActionRequiredEvent:
    """The chat paused for client tool results; ``args`` of each call is JSON text."""

    tool_calls: tuple[ActionToolCall, ...]
    chat_id: str = ""
    type: str = attrs.field(default="action_required", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "action_required",
            "chat_id": self.chat_id,
            "action_required": {"tool_calls": [c.to_json() for c in self.tool_calls]},
        }


@attrs.frozen
class PreviewResetEvent:
    """Discard un-committed preview state; a new episode starts (seq restarts at 1)."""

    chat_id: str = ""
    type: str = attrs.field(default="preview_reset", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "preview_reset", "chat_id": self.chat_id}


@attrs.frozen
class HistoryResetEvent:
    """History was rewritten; the full history follows as ``message`` events (D15: ignored by
    reader and translator, the cursor filter absorbs the replay)."""

    chat_id: str = ""
    type: str = attrs.field(default="history_reset", init=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"type": "history_reset", "chat_id": self.chat_id}


@attrs.frozen
class UnknownEvent:
    """An event whose ``type`` this library does not know; skipped by every machine."""

    type: str
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    chat_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.raw)


StreamEvent: TypeAlias = (
    MessagePartEvent
    | MessageEvent
    | StatusEvent
    | ErrorEvent
    | QueueUpdateEvent
    | RetryEvent
    | ActionRequiredEvent
    | PreviewResetEvent
    | HistoryResetEvent
    | UnknownEvent
)


#: The last chat id an event named that passed the check: the events of a stream name their
#: own chat, so the check runs once per stream rather than once per delta.
_checked_chat_id = [""]


def _check_chat_id(value: str) -> str:
    """``value``, an event's ``chat_id``, when it is empty or an identifier (wire 3.9); an
    invalid one is a ``CoderProtocolError``. The chat it names decides whether the event is
    the stream's own (D31)."""
    if value and value != _checked_chat_id[0]:
        check_resource_id(value, "stream event", "chat_id")
        _checked_chat_id[0] = value
    return value


def _chat_id(obj: dict[str, Any]) -> str:
    value = obj.get("chat_id")
    return _check_chat_id(value) if type(value) is str else ""


def _message_part(obj: dict[str, Any]) -> MessagePartEvent:
    payload = obj.get("message_part")
    if type(payload) is not dict:
        raise CoderProtocolError("malformed message_part event: 'message_part' should be an object")
    raw_part = payload.get("part")
    if type(raw_part) is not dict:
        raise CoderProtocolError("malformed message_part event: 'part' should be an object")
    kind = raw_part.get("type")
    text = raw_part.get("text")
    # Fast path: text and reasoning deltas are nearly every event of a turn. Anything the
    # shortcut does not cover exactly (a reasoning signature, a non-string text) goes
    # through parse_part.
    part: ChatMessagePart
    if type(text) is not str:
        part = parse_part(raw_part)
    elif kind == "text":
        # TextPart(text) without the __init__ frame: the commonest object of a turn.
        draft = TextPartDraft()
        draft.text = text
        draft.__class__ = TextPart  # type: ignore[assignment]
        part = draft  # type: ignore[assignment]
    elif kind == "reasoning" and (plain := plain_reasoning_part(raw_part, text)) is not None:
        part = plain
    else:
        part = parse_part(raw_part)
    role = payload.get("role")
    chat_id = obj.get("chat_id")
    # MessagePartEvent(...) without the __init__ frame: a draft with the same slots, filled
    # and given the class.
    event = _MessagePartDraft()
    event.role = role if type(role) is str else None
    event.part = part
    event.history_version = payload.get("history_version")
    event.generation_attempt = payload.get("generation_attempt")
    event.seq = payload.get("seq")
    event.chat_id = _check_chat_id(chat_id) if type(chat_id) is str else ""
    event.__class__ = MessagePartEvent  # type: ignore[assignment]
    return event  # type: ignore[return-value]


def _message(obj: dict[str, Any]) -> MessageEvent:
    payload = obj.get("message")
    if type(payload) is not dict:
        raise CoderProtocolError("malformed message event: 'message' should be an object")
    return MessageEvent(ChatMessage.from_json(payload), _chat_id(obj))


def _status(obj: dict[str, Any]) -> StatusEvent:
    payload = get_dict(obj, "status", "status event")
    if payload is None:
        raise CoderProtocolError("malformed status event: 'status' is required")
    status = payload.get("status")
    if type(status) is not str:
        raise CoderProtocolError("malformed status event: 'status.status' should be a string")
    return StatusEvent(status, _chat_id(obj))


def _error(obj: dict[str, Any]) -> ErrorEvent:
    payload = get_dict(obj, "error", "error event")
    return ErrorEvent(ChatError.from_json(payload) if payload is not None else None, _chat_id(obj))


def _queue_update(obj: dict[str, Any]) -> QueueUpdateEvent:
    return QueueUpdateEvent(
        parse_queue(obj, "queued_messages", "queue_update event"), _chat_id(obj)
    )


def _retry(obj: dict[str, Any]) -> RetryEvent:
    payload = obj.get("retry")
    return RetryEvent(RetryInfo.from_json(payload if payload is not None else {}), _chat_id(obj))


def _action_required(obj: dict[str, Any]) -> ActionRequiredEvent:
    w = "action_required event"
    payload = get_dict(obj, "action_required", w) or {}
    calls = get_list(payload, "tool_calls", w) or []
    return ActionRequiredEvent(tuple(ActionToolCall.from_json(c) for c in calls), _chat_id(obj))


def _preview_reset(obj: dict[str, Any]) -> PreviewResetEvent:
    return PreviewResetEvent(_chat_id(obj))


def _history_reset(obj: dict[str, Any]) -> HistoryResetEvent:
    return HistoryResetEvent(_chat_id(obj))


_EVENT_PARSERS: dict[str, Callable[[dict[str, Any]], StreamEvent]] = {
    "message_part": _message_part,
    "message": _message,
    "status": _status,
    "error": _error,
    "queue_update": _queue_update,
    "retry": _retry,
    "action_required": _action_required,
    "preview_reset": _preview_reset,
    "history_reset": _history_reset,
}

_ENVELOPE_TYPES = frozenset({"data", "ping", "error"})


def _is_envelope(obj: dict[str, Any]) -> bool:
    """D13: ``{"type": "data"|"ping"|"error", "data": ...}`` without ``chat_id``."""
    kind = obj.get("type")
    return "data" in obj and "chat_id" not in obj and type(kind) is str and kind in _ENVELOPE_TYPES


def parse_event(obj: Any) -> StreamEvent:
    """Parse one event object. Unknown types give ``UnknownEvent``."""
    if type(obj) is not dict:
        raise CoderProtocolError(
            f"malformed stream event: expected a JSON object, got {type(obj).__name__}"
        )
    kind = obj.get("type")
    parser = _EVENT_PARSERS.get(kind) if type(kind) is str else None
    if parser is None:
        return UnknownEvent(kind if type(kind) is str else "", obj, _chat_id(obj))
    return parser(obj)


def _unwrap(obj: dict[str, Any], out: list[StreamEvent]) -> None:
    kind = obj["type"]
    data = obj["data"]
    if kind == "ping":
        return
    if kind == "error":
        if type(data) is dict and type(data.get("message")) is str:
            out.append(ErrorEvent(ChatError.from_json(data)))
            return
        raise CoderProtocolError("malformed legacy error envelope: no message")
    items = data if type(data) is list else [data]
    for item in items:
        if type(item) is dict:
            out.append(parse_event(item))


def events_from_json(value: Any) -> list[StreamEvent]:
    """Events from an already-decoded frame: an array, one object, or (ignored) anything
    else. Array elements that are not objects are skipped; legacy envelopes are unwrapped."""
    out: list[StreamEvent] = []
    _events_into(value, out)
    return out


def _events_into(value: Any, out: list[StreamEvent]) -> bool:
    """``events_from_json`` into ``out``. True when every event came from the hot path (a
    text or plain reasoning delta in an array): then the only numbers the events keep are
    their coordinates, which ``parse_frame`` relies on."""
    plain = True
    if type(value) is list:
        parsers = _EVENT_PARSERS
        append = out.append
        for item in value:
            try:
                kind = item["type"]
            except (KeyError, TypeError):
                # Not an object, or one without a type: the general way below.
                kind = None
            if kind == "message_part":
                # The hot path; never an envelope (D13 envelopes are data/ping/error). A text
                # or plain reasoning delta, nearly every event of a turn, is built here (as
                # _message_part builds it, a text part and the event without a call);
                # anything else, a part that is not an object with a string "text"
                # included, goes to _message_part.
                try:
                    payload = item["message_part"]
                    raw_part = payload["part"]
                    part_type = raw_part["type"]
                    text = raw_part["text"]
                except (KeyError, TypeError):
                    text = part_type = None
                part: ChatMessagePart
                if type(text) is not str:
                    plain = False
                    append(_message_part(item))
                    continue
                if part_type == "text":
                    draft = TextPartDraft()
                    draft.text = text
                    draft.__class__ = TextPart  # type: ignore[assignment]
                    part = draft  # type: ignore[assignment]
                elif (
                    part_type == "reasoning"
                    and (plain_part := plain_reasoning_part(raw_part, text)) is not None
                ):
                    part = plain_part
                else:
                    plain = False
                    append(_message_part(item))
                    continue
                role = payload.get("role")
                chat_id = item.get("chat_id")
                event = _MessagePartDraft()
                event.role = role if type(role) is str else None
                event.part = part
                event.history_version = payload.get("history_version")
                event.generation_attempt = payload.get("generation_attempt")
                event.seq = payload.get("seq")
                if type(chat_id) is not str:
                    chat_id = ""
                elif chat_id != _checked_chat_id[0]:
                    _check_chat_id(chat_id)
                event.chat_id = chat_id
                event.__class__ = MessagePartEvent  # type: ignore[assignment]
                append(event)  # type: ignore[arg-type]
                continue
            if type(item) is not dict:
                continue
            plain = False
            kind = item.get("type")
            parser = parsers.get(kind) if type(kind) is str else None
            if parser is not None and "data" not in item:
                append(parser(item))
            elif _is_envelope(item):
                _unwrap(item, out)
            else:
                append(parse_event(item))
    elif type(value) is dict:
        plain = False
        if _is_envelope(value):
            _unwrap(value, out)
        else:
            out.append(parse_event(value))
    return plain


# -- typed decoding of delta frames ---------------------------------------------------------------
#
# A frame of text and reasoning deltas, nearly every frame of a turn, is decoded by msgspec
# straight into Structs in one pass, with no dict for any event, payload or part (a message
# snapshot among them too, its message kept as text for ``ChatMessage``). The Struct
# types are made from the attrs classes above (their field names, types and defaults), so the
# classes stay the one definition of the wire model; only what a delta's shortcut can take
# exactly is narrowed (see ``_wire_struct``). Every other document fails that decode and goes
# the general way (``_parse_document``), which gives its events or its error.


def _wire_struct(
    cls: type,
    name: str,
    *,
    tag: str | None = None,
    only: tuple[str, ...],
    narrow: dict[str, Any] | None = None,
    absent: dict[str, Any] | None = None,
    nested: tuple[tuple[str, Any], ...] = (),
    zeros: dict[str, Any] | None = None,
) -> Any:
    """A msgspec Struct type decoding the wire object of the attrs class ``cls``: a field for
    each field of ``cls`` named in ``only``, with its type and default, and the ``nested``
    objects. ``narrow`` gives a field a narrower type than the class's (a value outside it
    sends the document the general way); ``absent`` gives the value a field the class
    requires takes when the wire omits it. ``zeros`` names members the class does not read
    that the Struct takes only with the given value, or absent (a part's members of other
    part types, which servers write empty on every part): any other value fails the decode.
    A field without a default is required, and a member the Struct does not know fails the
    decode too (so its numbers and nesting never go unread)."""
    attrs.resolve_types(cls)
    narrow = narrow or {}
    absent = absent or {}
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = list(nested)
    for field in attrs.fields(cls):
        if field.name not in only:
            continue
        kind = narrow.get(field.name, field.type)
        default = absent.get(field.name, field.default)
        if default is attrs.NOTHING:
            fields.append((field.name, kind))
        else:
            fields.append((field.name, kind, default))
    for member, zero in (zeros or {}).items():
        fields.append((member, Literal[zero], zero))
    return msgspec.defstruct(
        name,
        fields,
        tag=tag,
        tag_field="type" if tag is not None else None,
        kw_only=True,
        forbid_unknown_fields=True,
        # Decoded values hold strings and ints only: the collector need not track them.
        gc=False,
        module=__name__,
    )


# A part's text is required here (``parse_part`` decides what a part without one is).
# The members of other part types come empty, as the server writes them on every part.
TextWire = _wire_struct(
    TextPart,
    "TextWire",
    tag=TextPart.type,
    only=("text",),
    absent={"text": attrs.NOTHING},
    zeros=PART_ZERO_VALUES,
)
ReasoningWire = _wire_struct(
    ReasoningPart,
    "ReasoningWire",
    tag=ReasoningPart.type,
    only=("text", "signature", "created_at", "completed_at"),
    absent={"text": attrs.NOTHING},
    zeros=PART_ZERO_VALUES,
)
_DeltaPayloadWire = _wire_struct(
    MessagePartEvent,
    "_DeltaPayloadWire",
    only=("role", "part", "history_version", "generation_attempt", "seq"),
    # Coordinates are ints on the wire (D14); anything else is kept as sent, the general way.
    narrow={
        # A literal decodes to one string object shared by every delta; another role goes
        # the general way.
        "role": Literal["assistant", "tool", "user"] | None,
        "part": Union[TextWire, ReasoningWire],  # noqa: UP007 - a runtime type for msgspec
        "history_version": int | None,
        "generation_attempt": int | None,
        "seq": int | None,
    },
    # ``role`` is left out by servers that send none.
    absent={"role": None},
)
DeltaWire = _wire_struct(
    MessagePartEvent,
    "DeltaWire",
    tag=MessagePartEvent.type,
    only=("chat_id",),
    nested=((MessagePartEvent.type, _DeltaPayloadWire),),
)
# A message's snapshot in a frame of deltas: its event decoded typed, the message itself kept
# as its JSON text and decoded by ``ChatMessage`` as the general way decodes it (its value,
# ``raw`` included, is the one the whole frame's decode gives it).
_SnapshotWire = _wire_struct(
    MessageEvent,
    "_SnapshotWire",
    tag="message",
    only=("message", "chat_id"),
    narrow={"message": msgspec.Raw},
)
_decode_deltas: Callable[[str], list[Any]] = msgspec.json.Decoder(
    list[Union[DeltaWire, _SnapshotWire]]  # type: ignore[valid-type] # noqa: UP007 - made at run time
).decode
#: A snapshot whose text is longer than this many bytes, or that has more opening brackets
#: than this many, sends its frame the general way (see ``_snapshot_event``).
_SNAPSHOT_BYTES = 8192
_SNAPSHOT_BRACKETS = 128
_raw_bytes = bytes


def _snapshot_event(wire: Any) -> MessageEvent | None:
    """The ``message`` event of ``wire``, a ``_SnapshotWire``, as the general way builds it;
    ``None`` when the general way must decide (its error, or a value only the whole frame's
    decode gives exactly).

    A snapshot longer than ``_SNAPSHOT_BYTES`` is decoded where it lies in the frame, without
    the copy of its text that decoding it alone takes. One with more than
    ``_SNAPSHOT_BRACKETS`` opening brackets could nest near the decoder's bound, which is
    counted from the whole frame (two levels deeper) and from the caller's stack: the whole
    frame's decode says whether it is too deep."""
    raw = _raw_bytes(wire.message)
    if len(raw) > _SNAPSHOT_BYTES or raw.count(b"[") + raw.count(b"{") > _SNAPSHOT_BRACKETS:
        return None
    try:
        payload = decode_json(raw)
    except ValueError:
        return None
    if type(payload) is not dict:
        return None
    try:
        message = ChatMessage.from_json(payload)
    except CoderProtocolError:
        return None
    return MessageEvent(message, _check_chat_id(wire.chat_id))


#: How a frame of deltas starts as servers write it.
_DELTAS_START = '[{"type":"message_part"'


def _typed_deltas(data: str) -> list[Any] | None:
    """The events of ``data`` when it is an array frame of text and reasoning deltas in the
    shape servers write, and of message snapshots among them (``_snapshot_event``), decoded
    in one pass; ``None`` for any other document (a frame of one event object too), which
    ``_parse_document`` decodes the general way.

    Each delta is left as the ``DeltaWire`` Struct the decode made (its chat id checked):
    ``delta_event`` builds its ``MessagePartEvent`` when someone needs one, and the stream's
    hot path (``TurnTranslator.ingest_run``) reads the Struct without it. ``parse_frame``
    and ``parse_text_frame`` give every event built (``_built``); the stream reader keeps
    the Structs in its queue (``parse_stream_frame``).

    The events are the general way's: strings and integers are read as the standard
    library reads them (integers of any length within the interpreter's digit limit, which
    msgspec applies as ``int`` does), and whatever the decode does not take exactly fails
    it: JSON the standard library refuses, a lone surrogate, a number where an ``int``
    coordinate goes (a float, a boolean), an unknown event or part type, a member the
    Structs do not know (whose numbers and nesting the general way reads), duplicate type
    members. The chat id is checked as there (wire 3.9), with the same error. A queued delta
    holds its Structs, text and coordinates, and shares its role and chat id with the
    others.

    A document longer than 4 KiB is tried only when it starts as servers start a frame of
    deltas (its first event's ``type`` first, no spaces): any other (a long message's
    snapshot, a status first) would mostly fail the decode, after msgspec had made the
    UTF-8 copy it reads a ``str`` that is not ASCII through, which the ``str`` then keeps
    while it lives. (A shorter one is tried as it is: its copy is small, and the check would
    cost a tenth of its decode.)
    """
    if len(data) > _PIECE and not data.startswith(_DELTAS_START):
        return None
    try:
        value = _decode_deltas(data)
    except (ValueError, RecursionError):
        # msgspec's errors are ValueErrors; so is the encode error of a lone surrogate.
        return None
    return typed_events(value)


def typed_events(value: list[Any]) -> list[Any] | None:
    """The events of ``value``, what ``_decode_deltas`` made of a frame: its deltas with their
    chat ids checked (each keeping the stream's one copy of its id), or the frame with its
    snapshots (``_with_snapshots``); the second half of ``_typed_deltas``, for a caller that
    decoded the frame itself (the stream reader's one-delta frames)."""
    checked = _checked_chat_id
    for wire in value:
        if type(wire) is not DeltaWire:
            return _with_snapshots(value)
        # A queued delta keeps the stream's one copy of its chat id, not the one the decode
        # made for it (its role is one of the decode's literals).
        chat_id = wire.chat_id
        if chat_id:
            if chat_id != checked[0]:
                _check_chat_id(chat_id)
            wire.chat_id = checked[0]
    return value


def _with_snapshots(value: list[Any]) -> list[Any] | None:
    """``_typed_deltas`` of a decoded frame with a message snapshot among its deltas: the
    same checks, in the frame's order, and each snapshot's event in its place (``None``
    when the general way must decide one)."""
    checked = _checked_chat_id
    for index, wire in enumerate(value):
        if type(wire) is DeltaWire:
            chat_id = wire.chat_id
            if chat_id:
                if chat_id != checked[0]:
                    _check_chat_id(chat_id)
                wire.chat_id = checked[0]
        else:
            snapshot = _snapshot_event(wire)
            if snapshot is None:
                return None
            value[index] = snapshot
    return value


def delta_event(wire: Any) -> MessagePartEvent:
    """The ``MessagePartEvent`` of ``wire``, a ``DeltaWire`` from ``_typed_deltas`` (its chat
    id checked, it and the role shared): the event the general way gives for the same
    delta."""
    payload = wire.message_part
    wire_part = payload.part
    part: Any
    if type(wire_part) is TextWire:
        part = TextPartDraft()
        part.text = wire_part.text
        part.__class__ = TextPart
    else:
        part = ReasoningPartDraft()
        part.text = wire_part.text
        part.signature = wire_part.signature
        part.created_at = wire_part.created_at
        part.completed_at = wire_part.completed_at
        part.__class__ = ReasoningPart
    event: Any = _MessagePartDraft()
    event.role = payload.role
    event.part = part
    event.history_version = payload.history_version
    event.generation_attempt = payload.generation_attempt
    event.seq = payload.seq
    event.chat_id = wire.chat_id
    event.__class__ = MessagePartEvent
    return event  # type: ignore[no-any-return]


def _built(events: list[Any]) -> list[StreamEvent]:
    """``events`` from ``_typed_deltas`` with each delta's event built, in place."""
    for index, event in enumerate(events):
        if type(event) is DeltaWire:
            events[index] = delta_event(event)
    return events


#: An array frame longer than this many characters is decoded a piece at a time.
_PIECE = 4096
#: A frame whose pieces would be longer than this is decoded whole (see ``_parse_pieces``).
_LONGEST_PIECE = 2 * _PIECE
#: The text between two events of an array frame as servers write them, where the second is
#: a delta: the end of one event object, the comma, and the start of the next one's ``type``
#: member. A frame of deltas holds it between every two; a message's parts do not (a part's
#: type is never ``message_part``), so a snapshot's frame is not cut inside the snapshot.
_BETWEEN_EVENTS = '},{"type":"message_part"'


def parse_frame(data: str | bytes) -> list[StreamEvent]:
    """Parse one WebSocket text frame into events (wire 4.2).

    Invalid JSON raises ``CoderProtocolError`` (the reader treats it as terminal, C.2.3).

    An array frame of text and reasoning deltas that the typed decode takes
    (``_typed_deltas``) is decoded whole, at once: its Structs are not tracked by the
    cyclic collector, and the 256 deltas a server puts in a frame at most keep 512 tracked
    objects (events and parts), under the young generation's threshold of 700.

    Any other array frame longer than 4 KiB is decoded in pieces of about 4 KiB, each cut
    before a delta, so the decoded objects of the whole frame and the events built from
    them are never all alive at once. On CPython before 3.13 they otherwise outnumber the
    cyclic collector's young-generation threshold on every batched frame, and each
    collection moves the frame's objects to an older generation, whose collections then add
    about half to the core's own work on the frame (the gain is listed in
    ``coder_proto._speedups.HOT_PATHS``). The events and errors are those of the whole
    frame: see ``_parse_pieces``.
    """
    if type(data) is str and len(data) > _PIECE and data[0] == "[":
        typed = _typed_deltas(data)
        if typed is not None:
            return _built(typed)
        cut = data.find(_BETWEEN_EVENTS, _PIECE)
        if cut > 0:
            return _parse_pieces(data, cut)
    return _parse_document(data)


def parse_text_frame(data: str) -> list[StreamEvent]:
    """``parse_frame`` of a text frame as a connection received it (a ``str``): the same
    events or error, with the typed decode tried first and once."""
    return _built(parse_stream_frame(data))


def parse_stream_frame(data: str) -> list[Any]:
    """``parse_text_frame`` for the stream reader's queue: the same events, or the same
    error, except that a delta the typed decode took is its ``DeltaWire`` Struct, whose
    event ``delta_event`` builds when a consumer needs one (the translator's hot path reads
    the Struct itself). No call between the typed decode and the reader: one-event frames
    of deltas are nearly every frame of a streamed turn."""
    typed = _typed_deltas(data)
    if typed is not None:
        return typed
    return parse_untyped_frame(data)


def parse_untyped_frame(data: str) -> list[StreamEvent]:
    """``parse_stream_frame`` of a frame the typed decode did not take: cut into pieces when
    it is long, else decoded the general way."""
    if len(data) > _PIECE and data[0] == "[":
        cut = data.find(_BETWEEN_EVENTS, _PIECE)
        if cut > 0:
            return _parse_pieces(data, cut)
    return _parse_general(data)


def _parse_pieces(data: str, cut: int) -> list[StreamEvent]:
    """``data``, an array frame, parsed as the arrays ``data[:cut + 1] + "]"``, then
    ``"[" + data[cut + 2 : next_cut + 1] + "]"`` and so on, with ``"[" + data[start:]``
    last, each cut the first ``_BETWEEN_EVENTS`` at least ``_PIECE`` characters past the
    previous one (always before a delta); or whole, as one document.

    The text can also occur inside an event or a string. A piece that decodes ends with
    the bracket added after the cut's ``}``, so the decoder read the frame's text up to that
    ``}`` and stood after a whole element of the frame's array: the cut's comma separates
    two of the frame's events, and the pieces decoded so far give exactly its first events.
    When a piece does not decode (a cut inside an event, or a frame that is not valid JSON),
    the whole frame is parsed as one document, which gives its events or its error.

    So is a frame with a piece (or a rest) longer than ``_LONGEST_PIECE``: one long event,
    such as a long message's snapshot, is decoded where it lies, without a copy of its text.
    """
    out: list[StreamEvent] = []
    start = 0
    while cut - start <= _LONGEST_PIECE:
        try:
            if start:
                out += _parse_document("[" + data[start : cut + 1] + "]")
            else:
                out += _parse_document(data[: cut + 1] + "]")
        except CoderProtocolError:
            break  # decoded whole below, with this error and its piece let go
        start = cut + 2
        cut = data.find(_BETWEEN_EVENTS, start + _PIECE)
        if cut < 0:
            if len(data) - start > _LONGEST_PIECE:
                break
            out += _parse_document("[" + data[start:])
            return out
    return _parse_document(data)


def _parse_document(data: str | bytes) -> list[StreamEvent]:
    """``parse_frame`` of one JSON document.

    An array of text and reasoning deltas is decoded typed (``_typed_deltas``); any other
    document the general way (``_parse_general``).
    """
    if type(data) is str:
        typed = _typed_deltas(data)
        if typed is not None:
            return _built(typed)
    return _parse_general(data)


def _parse_general(data: str | bytes) -> list[StreamEvent]:
    """``_parse_document`` of a document the typed decode did not take.

    With orjson decoding, a frame of text and reasoning deltas skips the scan for long
    integers that ``coder_proto._json`` makes before it trusts orjson: such a frame's events
    keep no number but their coordinates, so when all of those are ``int`` no integer was
    read as a float and the events are the ones the standard library's value gives. Any
    other frame is scanned as ``loads`` would scan it, and decoded again when the scan finds
    a long run of digits.
    """
    out: list[StreamEvent] = []
    if type(data) is str and _unicode.loads is orjson_loads and "\\" not in data:
        value = orjson_unscanned(data)
        if value is not REFUSED:
            try:
                plain = _events_into(value, out)
            except CoderProtocolError:
                if not long_digit_run(data):
                    raise  # the value is exact: the standard library's would fail alike
                plain = False
            else:
                if plain:
                    # Only a float or a container can hold an integer orjson misread.
                    for event in out:
                        hv = event.history_version  # type: ignore[union-attr]
                        ga = event.generation_attempt  # type: ignore[union-attr]
                        seq = event.seq  # type: ignore[union-attr]
                        if (
                            (type(hv) is not int and hv is not None)
                            or (type(ga) is not int and ga is not None)
                            or (type(seq) is not int and seq is not None)
                        ):
                            break
                    else:
                        return out
                if not long_digit_run(data):
                    return out
            out = []
    try:
        value = decode_json(data)
    except (ValueError, TypeError, RecursionError) as exc:
        # RecursionError: the standard parser's answer to absurdly deep nesting.
        raise CoderProtocolError("failed to parse chat stream frame") from exc
    _events_into(value, out)
    return out


def parse_watch_frame(data: str | bytes) -> list[ChatWatchEvent]:
    """Parse one ``/watch`` frame: one event object, or an array of them (wire 6)."""
    try:
        value = decode_json(data)
    except (ValueError, TypeError, RecursionError) as exc:
        raise CoderProtocolError("failed to parse chat watch frame") from exc
    if type(value) is dict:
        return [ChatWatchEvent.from_json(value)]
    if type(value) is list:
        return [ChatWatchEvent.from_json(v) for v in value if type(v) is dict]
    return []
