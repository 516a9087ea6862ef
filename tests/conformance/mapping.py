"""Comparing our output with a case's expectations, and the procedures that drive a
``TurnTranslator`` (translate, usage and translator-level promotion cases).

Comparison rules (``README.md``): ``null`` equals absent, key order is irrelevant, array order
matters, and block ids (``text-1``, ``reasoning-2`` ...) are compared up to a consistent renaming
(``BlockIds``). A part reads as its ``to_dict()``; an error part as the exception a generate-style
consumer would raise (class name and attributes), since that is what the case can state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from coder_proto._outputs import ErrorPart, Finish, OutputPart
from coder_proto._stream.promotion import QueuedSubmission
from coder_proto._stream.translator import TurnTranslator
from coder_proto._wire import StreamEvent, events_from_json

#: The safety valve of the model-loop rule: events read after ``requires_action`` without a
#: client tool call before the loop gives up.
MODEL_LOOP_VALVE = 200

#: Exception attributes an error expectation may state.
ERROR_FIELDS = ("message", "kind", "retryable", "status_code", "provider")


# -- views -------------------------------------------------------------------------------------


def strip_nulls(value: Any) -> Any:
    """``null`` means absent: drop null-valued keys recursively."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def error_view(exc: BaseException) -> dict[str, Any]:
    view: dict[str, Any] = {"type": type(exc).__name__}
    for field in ERROR_FIELDS:
        view[field] = getattr(exc, field, None)
    return view


def part_view(part: OutputPart) -> dict[str, Any]:
    """A part as a case states it (nulls dropped)."""
    if isinstance(part, ErrorPart):
        return strip_nulls({"type": "error", "error": error_view(part.exception())})
    return strip_nulls(part.to_dict())


def usage_view(usage: Any) -> dict[str, Any] | None:
    return None if usage is None else usage.to_dict()


# -- comparison ---------------------------------------------------------------------------------


class BlockIds:
    """A consistent renaming of block ids: the same case id maps to the same id of ours, and
    distinct case ids to distinct ids."""

    def __init__(self) -> None:
        self.forward: dict[str, str] = {}
        self.backward: dict[str, str] = {}

    def rename(self, expected_id: str, actual_id: str) -> str:
        """``expected_id`` as it must read in our output: the actual id when this pairing is
        consistent with every earlier one, else the expected id itself (a mismatch)."""
        known = self.forward.get(expected_id)
        if known is None and actual_id not in self.backward:
            self.forward[expected_id] = actual_id
            self.backward[actual_id] = expected_id
            return actual_id
        return known if known is not None else expected_id


_BLOCK_PARTS = frozenset(
    {"text-start", "text-delta", "text-end", "reasoning-start", "reasoning-delta", "reasoning-end"}
)


def align_block_ids(expected: list[Any], actual: list[Any], ids: BlockIds) -> list[Any]:
    """``expected`` with its block ids renamed onto ``actual``'s where consistent."""
    out = []
    for i, part in enumerate(expected):
        other = actual[i] if i < len(actual) else None
        if (
            isinstance(part, dict)
            and part.get("type") in _BLOCK_PARTS
            and isinstance(other, dict)
            and other.get("type") == part["type"]
            and "id" in part
            and "id" in other
        ):
            part = {**part, "id": ids.rename(part["id"], other["id"])}
        out.append(part)
    return out


def assert_parts_equal(expected: list[Any], actual: Iterable[OutputPart], ids: BlockIds) -> None:
    got = [part_view(p) for p in actual]
    want = strip_nulls(align_block_ids(expected, got, ids))
    assert got == want


def assert_parts_match(expected: list[Any], actual: Iterable[OutputPart], ids: BlockIds) -> None:
    """Part by part, as subsets: the same number of parts, each stating only keys that hold
    (block ids up to the renaming). What session-level cases state of parts (their
    ``parts``, ``parts_before_error`` and ``last_part``) is read this way."""
    got = [part_view(p) for p in actual]
    want = align_block_ids(expected, got, ids)
    assert matches(want, got), got


def matches(want: Any, got: Any) -> bool:
    """Subset matching: every key ``want`` states must match (``null`` = absent), lists
    element by element and of the same length."""
    if want is None:
        return got is None
    if isinstance(want, dict):
        return isinstance(got, dict) and all(matches(v, got.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(want) == len(got)
            and all(matches(w, g) for w, g in zip(want, got, strict=True))
        )
    if isinstance(want, bool) or isinstance(got, bool):  # True is not 1
        return isinstance(want, bool) and isinstance(got, bool) and want == got
    return bool(want == got)


# -- derived views of a part trace ---------------------------------------------------------------


def closed_blocks(parts: Iterable[OutputPart], kind: str) -> list[str]:
    """The contents of each closed ``kind`` block (start -> deltas -> end), in closing order."""
    open_blocks: dict[str, list[str]] = {}
    closed: list[str] = []
    for part in parts:
        if part.type == f"{kind}-start":
            open_blocks[part.id] = []  # type: ignore[union-attr]
        elif part.type == f"{kind}-delta":
            open_blocks[part.id].append(part.delta)  # type: ignore[union-attr]
        elif part.type == f"{kind}-end":
            closed.append("".join(open_blocks.pop(part.id)))  # type: ignore[union-attr]
    return closed


def joined(parts: Iterable[OutputPart], kind: str) -> str:
    return "".join(p.delta for p in parts if p.type == f"{kind}-delta")  # type: ignore[union-attr]


def kind_tagged_deltas(parts: Iterable[OutputPart]) -> list[list[str]]:
    return [
        [p.type.removesuffix("-delta"), p.delta]  # type: ignore[union-attr]
        for p in parts
        if p.type in ("text-delta", "reasoning-delta")
    ]


def finish_of(parts: Iterable[OutputPart]) -> Finish:
    finishes = [p for p in parts if isinstance(p, Finish)]
    assert len(finishes) == 1, f"expected exactly one finish part, got {len(finishes)}"
    return finishes[0]


def trace_view(parts: list[OutputPart], key: str) -> Any:
    """The value of an expectation key computed from a part trace; a key this table does not
    know fails the assertion."""
    views: dict[str, Callable[[], Any]] = {
        "text_blocks": lambda: closed_blocks(parts, "text"),
        "reasoning_blocks": lambda: closed_blocks(parts, "reasoning"),
        "text": lambda: joined(parts, "text"),
        "reasoning": lambda: joined(parts, "reasoning"),
        "tool_call_count": lambda: sum(1 for p in parts if p.type == "tool-call"),
        "tool_result_count": lambda: sum(1 for p in parts if p.type == "tool-result"),
        "tool_call_ids": lambda: [p.tool_call_id for p in parts if p.type == "tool-call"],  # type: ignore[union-attr]
        "kind_tagged_deltas": lambda: kind_tagged_deltas(parts),
        "finish_reason": lambda: finish_of(parts).finish_reason,
        "raw_finish_reason": lambda: finish_of(parts).raw_finish_reason,
        "usage": lambda: usage_view(finish_of(parts).usage),
        "provider_metadata": lambda: finish_of(parts).provider_metadata,
        "raw": lambda: finish_of(parts).usage.raw,
    }
    view = views.get(key)
    assert view is not None, f"expected key {key!r} is not part of the trace vocabulary"
    return view()


def check_trace(
    expected: dict[str, Any],
    parts: list[OutputPart],
    *,
    skip: Iterable[str] = (),
    subset: bool = False,
) -> None:
    """Every key of ``expected`` (but ``skip``) against the trace ``parts``; with ``subset``
    the parts of ``parts`` are read as subsets (``assert_parts_match``)."""
    ids = BlockIds()
    skipped = set(skip)
    if "parts" in expected and "parts" not in skipped:
        compare = assert_parts_match if subset else assert_parts_equal
        compare(expected["parts"], parts, ids)
    for key, want in expected.items():
        if key in skipped or key == "parts":
            continue
        assert strip_nulls(trace_view(parts, key)) == strip_nulls(want), key


# -- driving a translator ------------------------------------------------------------------------

#: Translator settings a case may give (``TurnTranslator`` keyword arguments).
TRANSLATOR_OPTIONS = frozenset(
    {"dynamic_tool_names", "turn_cursor", "submitted_tool_call_ids", "queued_submission"}
)


def make_translator(options: dict[str, Any], **overrides: Any) -> TurnTranslator:
    """A translator from a case's ``translator`` settings."""
    unknown = set(options) - TRANSLATOR_OPTIONS
    assert not unknown, f"unknown translator settings: {sorted(unknown)}"
    kwargs: dict[str, Any] = dict(options)
    for key in ("dynamic_tool_names", "submitted_tool_call_ids"):
        if key in kwargs:
            kwargs[key] = set(kwargs[key])
    queued = kwargs.get("queued_submission")
    if queued is not None:
        kwargs["queued_submission"] = QueuedSubmission(queued.get("id"), queued.get("content"))
    kwargs.update(overrides)
    return TurnTranslator(**kwargs)


def wire_events(items: Iterable[dict[str, Any]]) -> list[StreamEvent]:
    """Parse a case's wire events; connection markers (``drop`` / ``close``) only record where
    the stream below redialed, so the translator never sees them."""
    events: list[StreamEvent] = []
    for item in items:
        if "type" not in item:
            assert set(item) <= {"drop", "close"}, f"unknown event list entry {item!r}"
            continue
        events.extend(events_from_json(item))
    return events


def run(translator: TurnTranslator, events: Iterable[StreamEvent]) -> list[OutputPart]:
    """Procedure ``run``: ingest until a terminal status is recorded, then finish."""
    parts: list[OutputPart] = []
    for event in events:
        parts += translator.ingest(event)
        if translator.settled:
            break
    return parts + translator.finish()


def model_loop(
    translator: TurnTranslator,
    events: Iterable[StreamEvent],
    parts: list[OutputPart] | None = None,
) -> list[OutputPart]:
    """Procedure ``model_loop``: stop at a terminal status, except that at ``requires_action``
    reading goes on until a client tool call is emitted (at most ``MODEL_LOOP_VALVE`` more
    events); a promotion settle also ends the loop. A dead end raises; the parts emitted
    before it are then in ``parts`` when the caller passed a list."""
    if parts is None:
        parts = []
    since_requires_action = 0
    for event in events:
        parts += translator.ingest(event)
        if translator.dead_end is not None:
            raise translator.dead_end
        if translator.settled_by_promotion:
            break
        if translator.terminal_status is not None:
            if translator.terminal_status != "requires_action" or translator.client_tool_call_seen:
                break
            since_requires_action += 1
            if since_requires_action > MODEL_LOOP_VALVE:
                break
    return parts + translator.finish()
