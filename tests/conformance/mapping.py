"""One table from our names and parts to the conformance cases' TypeScript shapes (D25,
FORMAT.md 3), plus the case procedures that drive a ``TurnTranslator`` (FORMAT.md 4.1, 4.3,
4.6, 4.7).

Comparison rules (FORMAT.md 3): ``null`` equals absent (``strip_nulls`` on both sides), key
order is irrelevant, array order matters, and block ids are compared up to a consistent
renaming (``BlockIds``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from coder_proto import ErrorPart, Finish, OutputPart, Usage
from coder_proto._stream.promotion import QueuedSubmission
from coder_proto._stream.translator import TurnTranslator
from coder_proto._wire import StreamEvent, events_from_json

# -- names -----------------------------------------------------------------------------------

#: Our attribute name -> the TypeScript key, per part type. Parts absent from the table map
#: to ``{"type": ...}`` only.
PART_FIELDS: dict[str, dict[str, str]] = {
    "text-start": {"id": "id"},
    "text-delta": {"id": "id", "delta": "delta"},
    "text-end": {"id": "id"},
    "reasoning-start": {"id": "id"},
    "reasoning-delta": {"id": "id", "delta": "delta"},
    "reasoning-end": {"id": "id"},
    "tool-input-start": {
        "tool_call_id": "id",
        "tool_name": "toolName",
        "provider_executed": "providerExecuted",
        "dynamic": "dynamic",
    },
    "tool-input-end": {"tool_call_id": "id"},
    "tool-call": {
        "tool_call_id": "toolCallId",
        "tool_name": "toolName",
        "input": "input",
        "provider_executed": "providerExecuted",
        "dynamic": "dynamic",
    },
    "tool-result": {
        "tool_call_id": "toolCallId",
        "tool_name": "toolName",
        "result": "result",
        "is_error": "isError",
        "dynamic": "dynamic",
    },
    "source": {"source_type": "sourceType", "id": "id", "url": "url", "title": "title"},
}

#: Flags the TypeScript parts carry only when true (client tool calls have neither key).
TRUE_ONLY_FLAGS: frozenset[str] = frozenset({"providerExecuted", "dynamic"})
#: Part types whose flags follow ``TRUE_ONLY_FLAGS`` (a tool result always has ``dynamic``).
FLAGGED_PARTS: frozenset[str] = frozenset({"tool-input-start", "tool-call"})

#: ``Usage`` attribute -> the normalised TypeScript usage key (FORMAT.md 3.3).
USAGE_FIELDS: dict[str, str] = {
    "input_tokens": "inputTokens",
    "no_cache_tokens": "noCacheTokens",
    "cache_read_tokens": "cacheReadTokens",
    "cache_write_tokens": "cacheWriteTokens",
    "output_tokens": "outputTokens",
    "reasoning_tokens": "reasoningTokens",
    "text_tokens": "textTokens",
    "total_tokens": "totalTokens",
    "raw": "raw",
}

#: Case option names -> ``TurnTranslator`` keyword arguments.
OPTION_NAMES: dict[str, str] = {
    "dynamicToolNames": "dynamic_tool_names",
    "turnCursor": "turn_cursor",
    "submittedToolCallIds": "submitted_tool_call_ids",
    "queuedSubmission": "queued_submission",
}

#: ``CoderChatError`` attribute -> the key of the TypeScript error part's ``error``.
ERROR_FIELDS: dict[str, str] = {
    "message": "message",
    "kind": "kind",
    "retryable": "retryable",
    "status_code": "statusCode",
    "provider": "provider",
}

#: The safety valve of the model-loop rule (FORMAT.md 4.7, state machines G.3 step 11).
MODEL_LOOP_VALVE = 200


def usage_to_ts(usage: Usage) -> dict[str, Any]:
    return {ts: getattr(usage, ours) for ours, ts in USAGE_FIELDS.items()}


def finish_reason_to_ts(finish: Finish) -> dict[str, Any]:
    return {"unified": finish.finish_reason, "raw": finish.raw_finish_reason}


def part_to_ts(part: OutputPart) -> dict[str, Any]:
    """Our output part in the TypeScript shape of FORMAT.md 3.2."""
    if isinstance(part, Finish):
        return {
            "type": "finish",
            "finishReason": finish_reason_to_ts(part),
            "usage": usage_to_ts(part.usage),
            "providerMetadata": part.provider_metadata,
        }
    if isinstance(part, ErrorPart):
        exc = part.exception()
        error = {ts: getattr(exc, ours) for ours, ts in ERROR_FIELDS.items()}
        return {"type": "error", "error": {"name": type(exc).__name__, **error}}
    out: dict[str, Any] = {"type": part.type}
    for ours, ts in PART_FIELDS.get(part.type, {}).items():
        value = getattr(part, ours)
        if part.type in FLAGGED_PARTS and ts in TRUE_ONLY_FLAGS and value is False:
            continue
        out[ts] = value
    return out


# -- comparison ------------------------------------------------------------------------------


def strip_nulls(value: Any) -> Any:
    """FORMAT.md 3: ``null`` means absent, so drop null-valued keys recursively."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


class BlockIds:
    """A consistent renaming of block ids: the same case id maps to the same id of ours,
    and distinct case ids to distinct ids (FORMAT.md 3)."""

    def __init__(self) -> None:
        self.forward: dict[str, str] = {}
        self.backward: dict[str, str] = {}

    def rename(self, expected_id: str, actual_id: str) -> str:
        """``expected_id`` as it must read in our output: the actual id when this pairing
        is consistent with every earlier one, else the expected id itself (a mismatch)."""
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


def assert_parts_equal(expected: list[Any], actual: list[OutputPart], ids: BlockIds) -> None:
    got = strip_nulls([part_to_ts(p) for p in actual])
    want = strip_nulls(align_block_ids(expected, got, ids))
    assert got == want


# -- derived views of a part trace (FORMAT.md 4.1) --------------------------------------------


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


def kind_tagged_deltas(parts: Iterable[OutputPart]) -> list[str]:
    out = []
    for p in parts:
        if p.type in ("text-delta", "reasoning-delta"):
            out.append(f"{p.type.removesuffix('-delta')}:{p.delta}")  # type: ignore[union-attr]
    return out


def finish_of(parts: Iterable[OutputPart]) -> Finish:
    finishes = [p for p in parts if isinstance(p, Finish)]
    assert len(finishes) == 1, f"expected exactly one finish part, got {len(finishes)}"
    return finishes[0]


def trace_view(parts: list[OutputPart], key: str) -> Any:
    """The value of a FORMAT.md 4.1 ``expected`` key computed from a full trace, in the
    TypeScript shape; a key this table does not know fails the assertion."""
    views: dict[str, Callable[[], Any]] = {
        "textBlocks": lambda: closed_blocks(parts, "text"),
        "reasoningBlocks": lambda: closed_blocks(parts, "reasoning"),
        "text": lambda: joined(parts, "text"),
        "reasoning": lambda: joined(parts, "reasoning"),
        "toolCallCount": lambda: sum(1 for p in parts if p.type == "tool-call"),
        "toolResultCount": lambda: sum(1 for p in parts if p.type == "tool-result"),
        "toolCallIds": lambda: [p.tool_call_id for p in parts if p.type == "tool-call"],  # type: ignore[union-attr]
        "kindTaggedDeltas": lambda: kind_tagged_deltas(parts),
        "finishReason": lambda: finish_reason_to_ts(finish_of(parts)),
        "usage": lambda: usage_to_ts(finish_of(parts).usage),
        "providerMetadata": lambda: finish_of(parts).provider_metadata,
        "raw": lambda: finish_of(parts).usage.raw,
    }
    view = views.get(key)
    assert view is not None, f"expected key {key!r} has no mapping"
    return view()


# -- driving a translator ---------------------------------------------------------------------


def queued_submission(value: Any) -> QueuedSubmission | None:
    if value is None:
        return None
    return QueuedSubmission(value.get("id"), value.get("content"))


def make_translator(options: dict[str, Any], **overrides: Any) -> TurnTranslator:
    """A translator from a case's ``options`` (names per ``OPTION_NAMES``)."""
    kwargs: dict[str, Any] = {}
    for ts, ours in OPTION_NAMES.items():
        if ts not in options:
            continue
        value = options[ts]
        if ts == "queuedSubmission":
            value = queued_submission(value)
        elif ts in ("dynamicToolNames", "submittedToolCallIds"):
            value = set(value)
        kwargs[ours] = value
    unknown = set(options) - set(OPTION_NAMES)
    assert not unknown, f"unmapped case options: {sorted(unknown)}"
    kwargs.update(overrides)
    return TurnTranslator(**kwargs)


def wire_events(items: Iterable[dict[str, Any]]) -> list[StreamEvent]:
    """Parse a case's wire events; timeline markers (``drop``, ``advanceMs``,
    ``checkpoint``) are documentation at translator level and are skipped (FORMAT.md 3)."""
    events: list[StreamEvent] = []
    for item in items:
        if "type" not in item:
            continue
        events.extend(events_from_json(item))
    return events


def run(translator: TurnTranslator, events: Iterable[StreamEvent]) -> list[OutputPart]:
    """Procedure ``run`` (FORMAT.md 4.1): ingest until a terminal status is recorded, then
    finish."""
    parts: list[OutputPart] = []
    for event in events:
        parts += translator.ingest(event)
        if translator.settled:
            break
    return parts + translator.finish()


def model_loop(translator: TurnTranslator, events: Iterable[StreamEvent]) -> list[OutputPart]:
    """The model-loop rule (FORMAT.md 4.7, G.3): stop at a terminal status, except that at
    ``requires_action`` reading goes on until a client tool call is emitted (at most 200
    more events); a promotion settle also ends the loop (D3). A dead end raises."""
    parts: list[OutputPart] = []
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
