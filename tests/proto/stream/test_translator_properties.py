"""Hypothesis properties of the turn translator (state machines J.1-J.15), and the fuzz
contract: arbitrary JSON through ``events_from_json`` into ``ingest`` raises nothing but the
library's own errors."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import (
    CoderAgentError,
    Finish,
    OutputPart,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Source,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputEnd,
    ToolInputStart,
    ToolResult,
)
from coder_proto._constants import TERMINAL_STATUSES
from coder_proto._json import canonical_json
from coder_proto._stream.promotion import QueuedSubmission
from coder_proto._stream.translator import TurnTranslator, finish_reason
from coder_proto._stream.usage import UsageAccumulator
from coder_proto._wire import (
    ActionRequiredEvent,
    ChatMessageUsage,
    MessageEvent,
    MessagePartEvent,
    QueueUpdateEvent,
    StatusEvent,
    StreamEvent,
    events_from_json,
    parse_event,
)

SETTINGS = settings(max_examples=200, deadline=None)
ALPHABET = "ab—é"
CURSOR = 10
BOOKKEEPING = (TextStart, TextEnd, ReasoningStart, ReasoningEnd)

# -- builders ------------------------------------------------------------------------------------


def delta_event(kind: str, text: str, coords: tuple[int, int, int] | None = None) -> StreamEvent:
    payload: dict[str, Any] = {"role": "assistant", "part": {"type": kind, "text": text}}
    if coords is not None:
        payload["history_version"], payload["generation_attempt"], payload["seq"] = coords
    return parse_event({"type": "message_part", "chat_id": "c", "message_part": payload})


def message_event(
    msg_id: int, content: list[dict[str, Any]], role: str = "assistant", **extra: Any
) -> StreamEvent:
    body = {"id": msg_id, "role": role, "content": content, **extra}
    return parse_event({"type": "message", "chat_id": "c", "message": body})


def status_event(value: str) -> StreamEvent:
    return parse_event({"type": "status", "chat_id": "c", "status": {"status": value}})


def feed(tr: TurnTranslator, events: Iterable[StreamEvent]) -> list[OutputPart]:
    out: list[OutputPart] = []
    for event in events:
        out += tr.ingest(event)
    return out


def run(tr: TurnTranslator, events: Iterable[StreamEvent]) -> list[OutputPart]:
    """Ingest until settled, then finish (the conformance ``run`` procedure)."""
    out: list[OutputPart] = []
    for event in events:
        out += tr.ingest(event)
        if tr.settled:
            break
    return out + tr.finish()


def text_of(parts: Iterable[OutputPart]) -> str:
    return "".join(p.delta for p in parts if isinstance(p, TextDelta))


def reasoning_of(parts: Iterable[OutputPart]) -> str:
    return "".join(p.delta for p in parts if isinstance(p, ReasoningDelta))


def content_parts(parts: Iterable[OutputPart]) -> list[OutputPart]:
    """Parts that carry content (J.2): deltas, tools, sources."""
    kinds = (TextDelta, ReasoningDelta, ToolInputStart, ToolInputEnd, ToolCall, ToolResult, Source)
    return [p for p in parts if isinstance(p, kinds)]


def without_bookkeeping(parts: Iterable[OutputPart]) -> list[Any]:
    """J.3: parts minus block start/end, with deltas reduced to (kind, text)."""
    out: list[Any] = []
    for p in parts:
        if isinstance(p, BOOKKEEPING):
            continue
        if isinstance(p, TextDelta | ReasoningDelta):
            out.append((p.type, p.delta))
        else:
            out.append(p)
    return out


# -- one message streamed as deltas and snapshots (J.1, J.3) -------------------------------------


@attrs.frozen
class Plan:
    """How one assistant message reaches the client."""

    reasoning: str
    text: str
    chunks: tuple[tuple[str, str], ...]  # the streamed prefix, as (kind, text) deltas
    announce: bool
    snapshot_cuts: tuple[int, ...]  # growing stream lengths, the last one the full message
    usage: dict[str, int] | None

    def content_at(self, cut: int) -> list[dict[str, Any]]:
        content = []
        if self.reasoning:
            content.append({"type": "reasoning", "text": self.reasoning[:cut]})
        content.append({"type": "text", "text": self.text[: max(0, cut - len(self.reasoning))]})
        return content


@st.composite
def plans(draw: st.DrawFn, substantive: bool = False) -> Plan:
    reasoning = draw(st.text(ALPHABET, max_size=6))
    text = draw(st.text(ALPHABET, min_size=1 if substantive else 0, max_size=8))
    stream = [("reasoning", c) for c in reasoning] + [("text", c) for c in text]
    prefix = draw(st.integers(0, len(stream)))
    cut_points = draw(st.sets(st.integers(1, max(1, prefix)), max_size=4))
    bounds = sorted({0, prefix, *(c for c in cut_points if c < prefix)})
    if 0 < len(reasoning) < prefix:
        bounds = sorted({*bounds, len(reasoning)})  # a delta has one kind
    chunks: list[tuple[str, str]] = []
    if draw(st.booleans()):
        chunks.append((stream[0][0] if stream else "text", ""))  # an empty delta opens a block
    for lo, hi in itertools.pairwise(bounds):
        chunks.append((stream[lo][0], "".join(c for _, c in stream[lo:hi])))
    cuts = [*sorted(draw(st.lists(st.integers(0, len(stream)), max_size=2))), len(stream)]
    usage = draw(
        st.none()
        | st.fixed_dictionaries(
            {"input_tokens": st.integers(0, 50), "output_tokens": st.integers(0, 50)}
        )
    )
    return Plan(reasoning, text, tuple(chunks), draw(st.booleans()), tuple(cuts), usage)


@attrs.frozen
class Step:
    """One event of an original stream, with what a reconnect replay needs to know."""

    event: StreamEvent
    commit_id: int | None = None  # a ``message`` event of this id
    episode_delta: bool = False  # a delta of the in-progress episode


def stream_of(message_plans: Sequence[Plan], *, coordinates: bool = True) -> list[Step]:
    steps: list[Step] = []
    for index, plan in enumerate(message_plans):
        msg_id = CURSOR + 1 + index
        steps.append(Step(status_event("running")))
        if plan.announce:
            steps.append(Step(message_event(msg_id, []), commit_id=msg_id))
        for seq, (kind, text) in enumerate(plan.chunks, start=1):
            coords = (1, index + 1, seq) if coordinates else None
            steps.append(Step(delta_event(kind, text, coords), episode_delta=True))
        for cut in plan.snapshot_cuts:
            extra: dict[str, Any] = {"usage": plan.usage} if plan.usage is not None else {}
            steps.append(
                Step(message_event(msg_id, plan.content_at(cut), **extra), commit_id=msg_id)
            )
    steps.append(Step(status_event("waiting")))
    return steps


# -- J.1 exactly-once text -----------------------------------------------------------------------


@SETTINGS
@given(st.lists(plans(), min_size=1, max_size=4))
def test_j1_exactly_once_text_and_reasoning(message_plans: list[Plan]) -> None:
    parts = run(TurnTranslator(turn_cursor=CURSOR), [s.event for s in stream_of(message_plans)])
    assert text_of(parts) == "".join(p.text for p in message_plans)
    assert reasoning_of(parts) == "".join(p.reasoning for p in message_plans)


@SETTINGS
@given(plans(), st.data())
def test_j4_committed_during_outage_emits_exactly_the_tail(plan: Plan, data: st.DataObject) -> None:
    tr = TurnTranslator(turn_cursor=CURSOR)
    feed(tr, [delta_event(kind, text) for kind, text in plan.chunks])
    parts = tr.ingest(message_event(CURSOR + 1, plan.content_at(len(plan.reasoning + plan.text))))
    streamed_text = "".join(t for k, t in plan.chunks if k == "text")
    streamed_reasoning = "".join(t for k, t in plan.chunks if k == "reasoning")
    assert text_of(parts) == plan.text[len(streamed_text) :]
    assert reasoning_of(parts) == plan.reasoning[len(streamed_reasoning) :]


# -- J.2 replay idempotence ----------------------------------------------------------------------


@SETTINGS
@given(st.lists(plans(), min_size=1, max_size=3), st.data())
def test_j2_replaying_seen_snapshots_emits_nothing_and_keeps_usage(
    message_plans: list[Plan], data: st.DataObject
) -> None:
    steps = stream_of(message_plans)[:-1]
    cut = data.draw(st.integers(0, len(steps)))
    tr = TurnTranslator(turn_cursor=CURSOR)
    feed(tr, [s.event for s in steps[:cut]])
    latest = {s.commit_id: s.event for s in steps[:cut] if s.commit_id is not None}
    usage_before = tr.usage.raw()
    if latest:
        replays = data.draw(st.lists(st.sampled_from(sorted(latest)), max_size=8))
        assert content_parts(feed(tr, [latest[i] for i in replays])) == []
    assert tr.usage.raw() == usage_before


@SETTINGS
@given(st.data())
def test_j2_replayed_tools_and_sources_emit_nothing(data: st.DataObject) -> None:
    ids = data.draw(st.lists(st.sampled_from(["s1", "s2", "s3"]), min_size=1, max_size=4))
    urls = data.draw(st.lists(st.sampled_from(["u1", "u2"]), max_size=3))
    content = [{"type": "tool-call", "tool_call_id": i, "tool_name": "t", "args": {}} for i in ids]
    content += [{"type": "source", "url": u} for u in urls]
    results = [
        {"type": "tool-result", "tool_call_id": i, "tool_name": "t", "result": 1} for i in ids
    ]
    events = [message_event(11, content), message_event(12, results, role="tool")]
    tr = TurnTranslator(turn_cursor=CURSOR)
    first = feed(tr, events)
    assert len([p for p in first if isinstance(p, ToolCall)]) == len(set(ids))
    replays = data.draw(st.lists(st.sampled_from(events), max_size=6))
    assert feed(tr, replays) == []


# -- J.3 redial equivalence ----------------------------------------------------------------------


class ReaderModel:
    """The reader's episode dedup (state machines B.2), inline."""

    def __init__(self) -> None:
        self.last: tuple[int, int, int] | None = None

    def forwarded(self, event: StreamEvent) -> bool:
        if type(event) is not MessagePartEvent or event.coordinates is None:
            return True
        coords = event.coordinates
        if self.last is not None and self.last[:2] == coords[:2] and coords[2] <= self.last[2]:
            return False
        self.last = coords
        return True


def with_reconnects(steps: list[Step], cuts: Iterable[int]) -> list[StreamEvent]:
    """The stream as a client sees it when the socket drops after each cut and the redial
    replays: a status snapshot, every committed snapshot so far (latest version, ascending),
    then the in-progress episode's deltas from seq 1 (B.3, wire 4)."""
    out: list[StreamEvent] = []
    cut_set = set(cuts)
    for index, step in enumerate(steps):
        out.append(step.event)
        if index + 1 not in cut_set:
            continue
        seen = steps[: index + 1]
        latest = {s.commit_id: s.event for s in seen if s.commit_id is not None}
        episode: list[StreamEvent] = []
        for s in seen:
            if s.commit_id is not None:
                episode = []
            elif s.episode_delta:
                episode.append(s.event)
        out.append(status_event("running"))
        out.extend(latest[i] for i in sorted(latest))
        out.extend(episode)
    return out


@SETTINGS
@given(st.lists(plans(substantive=True), min_size=1, max_size=3), st.data())
def test_j3_redial_replays_through_reader_and_translator_change_nothing(
    message_plans: list[Plan], data: st.DataObject
) -> None:
    steps = stream_of(message_plans)
    original = run(TurnTranslator(turn_cursor=CURSOR), [s.event for s in steps])
    cuts = data.draw(st.sets(st.integers(1, len(steps) - 1), max_size=4))
    reader = ReaderModel()
    forwarded = [e for e in with_reconnects(steps, cuts) if reader.forwarded(e)]
    redialed = run(TurnTranslator(turn_cursor=CURSOR), forwarded)
    assert without_bookkeeping(redialed) == without_bookkeeping(original)
    assert text_of(redialed) == "".join(p.text for p in message_plans)


# -- J.5 append revision -------------------------------------------------------------------------


@SETTINGS
@given(
    st.text(ALPHABET, min_size=1, max_size=6),
    st.text(ALPHABET, max_size=4),
    st.text(ALPHABET, min_size=1, max_size=6),
)
def test_j5_revision_emits_exactly_the_extension_in_its_own_block(
    original: str, extension: str, other: str
) -> None:
    tr = TurnTranslator(turn_cursor=CURSOR)
    feed(tr, [message_event(11, [{"type": "text", "text": original}])])
    feed(tr, [message_event(12, [{"type": "text", "text": other}])])
    parts = tr.ingest(message_event(11, [{"type": "text", "text": original + extension}]))
    if not extension:
        assert parts == []
        return
    assert text_of(parts) == extension
    assert isinstance(parts[0], TextEnd)  # the open block of message 12 closes first
    assert isinstance(parts[1], TextStart)
    assert parts[-1] == TextEnd(parts[1].id)


@SETTINGS
@given(st.text(ALPHABET, min_size=1, max_size=6), st.text(ALPHABET, max_size=6))
def test_j5_a_non_extending_revision_emits_nothing_and_keeps_the_ledger(
    original: str, rewrite: str
) -> None:
    tr = TurnTranslator(turn_cursor=CURSOR)
    feed(tr, [message_event(11, [{"type": "text", "text": original}])])
    feed(tr, [message_event(12, [{"type": "text", "text": "x"}])])
    if rewrite.startswith(original):
        rewrite = "!" + rewrite
    assert tr.ingest(message_event(11, [{"type": "text", "text": rewrite}])) == []
    parts = tr.ingest(message_event(11, [{"type": "text", "text": original + "+"}]))
    assert text_of(parts) == "+"


# -- chaos: arbitrary mixes of every event kind (J.6-J.9, J.11, J.12) ---------------------------

TOOL_IDS = ["t1", "t2", "t3"]
CLIENT = "mine"
SUBMITTED = frozenset({"t3"})
STATUSES = ["running", "waiting", "requires_action", "error", "completed", "paused", "weird"]


def _part(kind: str, draw: st.DrawFn) -> dict[str, Any]:
    text = draw(st.text(ALPHABET, max_size=4))
    tool = draw(st.sampled_from(TOOL_IDS))
    name = draw(st.sampled_from(["srv", "srv", "srv", CLIENT]))
    if kind in ("text", "reasoning"):
        return {"type": kind, "text": text}
    part: dict[str, Any] = {"type": kind, "tool_call_id": tool, "tool_name": name}
    present = draw(st.integers(0, 3)) > 0
    if kind == "tool-call":
        if present:
            part["args"] = {"q": text}
        return part
    if kind == "tool-result":
        if present:
            part["result"] = draw(st.sampled_from([None, {"ok": 1}, [text]]))
        return part
    if kind == "source":
        return {"type": kind, "url": draw(st.sampled_from(["", "u1", "u2"])), "source_id": text}
    return {"type": kind}


PART_KINDS = ["text", "reasoning", "tool-call", "tool-result", "source", "file", "mystery"]


@st.composite
def chaos_events(draw: st.DrawFn) -> StreamEvent:
    kind = draw(
        st.sampled_from(
            ["delta"] * 6 + ["message"] * 4 + ["status", "error", "action", "queue", "noise"]
        )
    )
    if kind == "delta":
        part = _part(draw(st.sampled_from(PART_KINDS)), draw)
        role = draw(st.sampled_from(["assistant", "assistant", "tool", "user"]))
        return parse_event({"type": "message_part", "message_part": {"role": role, "part": part}})
    if kind == "message":
        content = [
            _part(draw(st.sampled_from(PART_KINDS)), draw) for _ in range(draw(st.integers(0, 3)))
        ]
        role = draw(st.sampled_from(["assistant"] * 6 + ["tool", "tool", "system", "user"]))
        body: dict[str, Any] = {"id": draw(st.integers(1, 16)), "role": role, "content": content}
        if draw(st.booleans()):
            body["usage"] = {"input_tokens": draw(st.integers(0, 9)), "context_limit": 100}
        return parse_event({"type": "message", "message": body})
    if kind == "status":
        return status_event(draw(st.sampled_from(STATUSES)))
    if kind == "error":
        return parse_event({"type": "error", "error": {"message": "e"}})
    if kind == "action":
        calls = [
            {"tool_call_id": i, "tool_name": CLIENT, "args": "{}"}
            for i in draw(st.lists(st.sampled_from(TOOL_IDS), max_size=3))
        ]
        return parse_event({"type": "action_required", "action_required": {"tool_calls": calls}})
    if kind == "queue":
        return parse_event({"type": "queue_update"})
    return parse_event(
        {"type": draw(st.sampled_from(["retry", "preview_reset", "history_reset", "x"]))}
    )


def check_blocks(parts: Sequence[OutputPart]) -> None:
    """J.6: balanced, at most one open block, deltas in the open block of their kind, ids
    unique and increasing, nothing open at the end."""
    open_block: tuple[str, str] | None = None
    last_number = 0
    for p in parts:
        if isinstance(p, TextStart | ReasoningStart):
            assert open_block is None
            kind = "text" if isinstance(p, TextStart) else "reasoning"
            prefix, number = p.id.rsplit("-", 1)
            assert prefix == kind
            assert int(number) > last_number
            last_number = int(number)
            open_block = (kind, p.id)
        elif isinstance(p, TextDelta | ReasoningDelta):
            kind = "text" if isinstance(p, TextDelta) else "reasoning"
            assert open_block == (kind, p.id)
        elif isinstance(p, TextEnd | ReasoningEnd):
            kind = "text" if isinstance(p, TextEnd) else "reasoning"
            assert open_block == (kind, p.id)
            open_block = None
    assert open_block is None


def check_tools_and_sources(parts: Sequence[OutputPart], submitted: frozenset[str]) -> None:
    """J.7, J.8."""
    server_calls: set[str] = set()
    results: set[str] = set()
    client_calls: set[str] = set()
    sources: set[str] = set()
    for p in parts:
        if isinstance(p, ToolCall):
            if p.provider_executed:
                assert p.tool_call_id not in server_calls
                server_calls.add(p.tool_call_id)
                assert p.tool_name != CLIENT
            else:
                assert p.tool_call_id not in client_calls
                assert p.tool_call_id not in submitted
                client_calls.add(p.tool_call_id)
        elif isinstance(p, ToolResult):
            assert p.tool_call_id in server_calls
            assert p.tool_call_id not in results
            results.add(p.tool_call_id)
        elif isinstance(p, Source):
            assert p.url
            assert p.id not in sources
            sources.add(p.id)


@SETTINGS
@given(st.lists(chaos_events(), min_size=8, max_size=40), st.integers(0, 6))
def test_j6_j7_j8_j11_j12_hold_for_any_mix_of_events(
    events: list[StreamEvent], cursor: int
) -> None:
    tr = TurnTranslator(
        dynamic_tool_names={CLIENT}, turn_cursor=cursor, submitted_tool_call_ids=SUBMITTED
    )
    parts: list[OutputPart] = []
    expected_terminal: str | None = None
    for event in events:
        live = not tr.settled_by_promotion
        calls_before = len(tr.client_tool_calls)
        parts += tr.ingest(event)
        if live and type(event) is StatusEvent:
            # J.12: a non-terminal status clears the terminal one.
            expected_terminal = event.status if event.status in TERMINAL_STATUSES else None
        elif (
            live
            and type(event) is ActionRequiredEvent
            and expected_terminal is None
            and len(tr.client_tool_calls) > calls_before
        ):
            # A new client call means the chat waits for results, status or not.
            expected_terminal = "requires_action"
        assert tr.terminal_status == expected_terminal
        # J.9: max_message_id covers every message observed before a settle.
        if live and type(event) is MessageEvent:
            assert tr.max_message_id >= event.message.id
    reason = tr.finish_reason()
    parts += tr.finish()
    check_blocks(parts)
    check_tools_and_sources(parts, SUBMITTED)
    finish = parts[-1]
    assert isinstance(finish, Finish)
    # J.11: a pure function of (error seen, terminal status, client call seen).
    expected = (
        "stop"
        if tr.settled_by_promotion
        else finish_reason(
            error_seen=tr.error_seen,
            terminal_status=tr.terminal_status,
            client_tool_call_seen=tr.client_tool_call_seen,
        )
    )
    assert finish.finish_reason == reason == expected


@st.composite
def below_cursor_messages(draw: st.DrawFn, cursor: int) -> StreamEvent:
    content = [
        _part(draw(st.sampled_from(PART_KINDS)), draw) for _ in range(draw(st.integers(0, 3)))
    ]
    body: dict[str, Any] = {
        "id": draw(st.integers(1, cursor)),
        "role": draw(st.sampled_from(["assistant", "tool", "user", "system"])),
        "content": content,
        "usage": {"input_tokens": draw(st.integers(1, 9))},
    }
    return parse_event({"type": "message", "message": body})


@SETTINGS
@given(st.lists(chaos_events(), min_size=8, max_size=30), st.integers(1, 6), st.data())
def test_j9_messages_at_or_below_the_cursor_never_contribute(
    events: list[StreamEvent], cursor: int, data: st.DataObject
) -> None:
    def translator() -> TurnTranslator:
        return TurnTranslator(
            dynamic_tool_names={CLIENT}, turn_cursor=cursor, submitted_tool_call_ids=SUBMITTED
        )

    baseline = translator()
    expected = feed(baseline, events) + baseline.finish()
    inserted = list(events)
    for _ in range(data.draw(st.integers(1, 5))):
        position = data.draw(st.integers(0, len(inserted)))
        inserted.insert(position, data.draw(below_cursor_messages(cursor)))
    tr = translator()
    assert feed(tr, inserted) + tr.finish() == expected
    assert tr.usage.raw() == baseline.usage.raw()


# -- J.10 usage algebra --------------------------------------------------------------------------

USAGE_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "input_tokens": st.integers(0, 1000),
        "output_tokens": st.integers(0, 1000),
        "cache_read_tokens": st.integers(0, 1000),
        "cache_creation_tokens": st.integers(0, 1000),
        "reasoning_tokens": st.integers(0, 1000),
        "total_cost_micros": st.integers(0, 1000),
        "context_limit": st.integers(1, 10**6),
        "web_search_requests": st.integers(0, 9),
    },
)


@SETTINGS
@given(st.dictionaries(st.integers(CURSOR + 1, CURSOR + 8), USAGE_FIELDS, max_size=6), st.data())
def test_j10_usage_is_the_sum_of_each_ids_latest_usage_whatever_the_replay_order(
    final: dict[int, dict[str, int]], data: st.DataObject
) -> None:
    ids = sorted(final)
    replays: list[StreamEvent] = []
    if ids:
        stale = data.draw(st.lists(st.tuples(st.sampled_from(ids), USAGE_FIELDS), max_size=8))
        replays += [message_event(i, [], usage=u) for i, u in stale]
        replays += [message_event(i, [], usage=final[i]) for i in data.draw(st.permutations(ids))]
        again = data.draw(st.lists(st.sampled_from(ids), max_size=6))
        replays += [message_event(i, [], usage=final[i]) for i in again]
    tr = TurnTranslator(turn_cursor=CURSOR)
    feed(tr, replays)
    raw = tr.usage.raw()
    if not final:
        assert raw is None
        return
    assert raw is not None
    sums = ["input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"]
    sums += ["reasoning_tokens", "total_cost_micros"]
    for key in sums:
        reported = [u[key] for u in final.values() if key in u]
        assert raw.get(key) == (sum(reported) if reported else None)
    for key in ("context_limit", "web_search_requests"):
        reporting = [i for i in ids if key in final[i]]
        assert raw.get(key) == (final[max(reporting)][key] if reporting else None)
    usage = tr.usage.usage()
    operands = [
        v
        for v in (usage.no_cache_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
        if v is not None
    ]
    assert usage.input_tokens == (sum(operands) if operands else None)
    # The same result straight from the accumulator, in another order.
    acc = UsageAccumulator()
    for i in reversed(ids):
        acc.record(i, ChatMessageUsage.from_json(final[i]))
    assert acc.raw() == raw


# -- J.13-J.15 the queued gate -------------------------------------------------------------------

OURS = [{"type": "text", "text": "hi again"}]
OTHER = [{"type": "text", "text": "something else"}]


@st.composite
def gated_streams(draw: st.DrawFn) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    next_id = 41
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(
            st.sampled_from(
                ["user", "user", "assistant", "assistant", "queue", "other", "old", "error"]
            )
        )
        if kind == "user":
            extra: dict[str, Any] = {}
            stamp = draw(st.sampled_from([None, None, 7, 8]))
            if stamp is not None:
                extra["queued_message_id"] = stamp
            content = draw(st.sampled_from([OURS, OURS, OTHER, []]))
            events.append(message_event(next_id, content, role="user", **extra))
            next_id += 1
        elif kind == "assistant":
            text = draw(st.text(ALPHABET, min_size=1, max_size=4))
            usage = {"output_tokens": draw(st.integers(1, 5))}
            events.append(message_event(next_id, [{"type": "text", "text": text}], usage=usage))
            next_id += 1
        elif kind == "queue":
            queued = [{"id": i, "content": OURS} for i in draw(st.sets(st.sampled_from([7, 8])))]
            events.append(parse_event({"type": "queue_update", "queued_messages": queued}))
        elif kind == "other":
            events.append(
                draw(
                    st.sampled_from(
                        [status_event("running"), status_event("waiting"), delta_event("text", "d")]
                    )
                )
            )
        elif kind == "old":
            # A replay: an id at or below the pre-turn cursor, or an earlier one.
            old_id = draw(st.integers(30, max(40, next_id - 1)))
            events.append(
                message_event(
                    old_id, [{"type": "text", "text": "old"}], usage={"output_tokens": 100}
                )
            )
        elif draw(st.integers(0, 3)) == 0:
            events.append(parse_event({"type": "error", "error": {"message": "down"}}))
    return events


def gate_model(
    events: Sequence[StreamEvent], queued_id: int | None, content: list[Any] | None
) -> tuple[str, int, int, list[StreamEvent]]:
    """E.2 with E.3/D8, as the spec's table reads: ("anchor", event index, anchor id, buffered
    message events), ("dead", index, 0, []) or ("gated", -1, 0, [])."""
    expected = canonical_json(content) if content is not None else None
    candidate: int | None = None
    buffered: list[StreamEvent] = []
    for index, event in enumerate(events):
        if type(event) is MessageEvent:
            m = event.message
            if m.id <= 40:
                continue
            if m.role == "user":
                stamp = m.queued_message_id
                if stamp is not None and queued_id is not None:
                    if stamp == queued_id:
                        return ("anchor", index, m.id, buffered)
                elif expected is None or canonical_json(m.raw["content"]) == expected:
                    if queued_id is None:
                        return ("anchor", index, m.id, [])
                    candidate, buffered = m.id, []
                    continue
            if candidate is not None:
                buffered.append(event)
        elif type(event) is QueueUpdateEvent and queued_id is not None:
            if any(q.id == queued_id for q in event.queued_messages):
                candidate, buffered = None, []
            elif candidate is not None:
                return ("anchor", index, candidate, buffered)
            else:
                return ("dead", index, 0, [])
        elif event.type == "error":
            return ("dead", index, 0, [])
    return ("gated", -1, 0, [])


@SETTINGS
@given(gated_streams(), st.sampled_from([7, None]), st.sampled_from([OURS, None, []]))
def test_j13_j14_j15_the_gate_follows_the_e2_table(
    events: list[StreamEvent], queued_id: int | None, content: list[Any] | None
) -> None:
    tr = TurnTranslator(turn_cursor=40, queued_submission=QueuedSubmission(queued_id, content))
    outcome, at, anchor, buffered = gate_model(events, queued_id, content)
    outputs = [tr.ingest(event) for event in events]
    end = at if outcome != "gated" else len(events)
    # J.13: nothing while gated.
    assert all(out == [] for out in outputs[:end])
    if outcome == "gated":
        assert tr.gated
        assert tr.dead_end is None
        assert tr.usage.raw() is None
        return
    if outcome == "dead":
        # J.15: a dead end, and nothing afterwards.
        assert tr.dead_end is not None
        assert tr.dead_end.kind == "queued_submission_lost"
        assert tr.gated
        assert all(out == [] for out in outputs[at:])
        return
    assert not tr.gated
    assert tr.turn_cursor == anchor

    def fresh(replayed: Iterable[StreamEvent]) -> tuple[list[OutputPart], TurnTranslator]:
        ungated = TurnTranslator(turn_cursor=anchor, own_prompt_unknown=False)
        return feed(ungated, replayed), ungated

    # J.13: the anchoring event emits exactly the buffered messages' ungated parts.
    assert outputs[at] == fresh(buffered)[0]
    # J.14: afterwards no message at or below the anchor contributes, replays included.
    rest = [e for e in events[at + 1 :] if not (type(e) is MessageEvent and e.message.id <= anchor)]
    expected_parts, expected_tr = fresh([*buffered, *rest])
    got = [p for out in outputs[at:] for p in out]
    assert got == expected_parts
    assert tr.usage.raw() == expected_tr.usage.raw()


# -- fuzz: arbitrary JSON never escapes as anything but the library's errors ----------------------

LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=4)
)
JSON = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def mostly(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``strategy`` nine draws in ten, a stray scalar otherwise: enough well-formed events
    reach the translator, and the parsers still see the wrong types."""
    return st.integers(0, 9).flatmap(lambda n: LEAF if n == 0 else strategy)


PART_TYPES = [*PART_KINDS, "file-reference", "context-file", "skill", "hook-notice"]
PART_LIKE = st.fixed_dictionaries(
    {
        "type": st.sampled_from(PART_TYPES),
        "text": mostly(st.text(ALPHABET, max_size=3)),
        "tool_call_id": mostly(st.sampled_from(TOOL_IDS)),
        "tool_name": mostly(st.sampled_from(["srv", CLIENT])),
    },
    optional={
        "args": JSON,
        "result": JSON,
        "is_error": mostly(st.booleans()),
        "url": mostly(st.sampled_from(["u1", ""])),
        "source_id": mostly(st.text(max_size=2)),
        "title": mostly(st.text(max_size=2)),
    },
)
MESSAGE_LIKE = st.fixed_dictionaries(
    {
        "id": mostly(st.integers(-3, 20)),
        "role": mostly(st.sampled_from(["assistant"] * 4 + ["tool", "tool", "user", "system"])),
    },
    optional={
        "content": mostly(st.lists(mostly(PART_LIKE), max_size=3)),
        "usage": mostly(
            st.dictionaries(
                st.sampled_from(["input_tokens", "output_tokens", "context_limit", "x"]), LEAF
            )
        ),
        "queued_message_id": mostly(st.sampled_from([7, 8])),
    },
)


def _event(kind: str, key: str, payload: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"type": st.just(kind), key: mostly(payload)}, optional={"chat_id": LEAF}
    )


EVENT_LIKE = st.one_of(
    _event(
        "message_part",
        "message_part",
        st.fixed_dictionaries(
            {"part": mostly(PART_LIKE), "role": mostly(st.sampled_from(["assistant", "tool"]))},
            optional={"seq": LEAF},
        ),
    ),
    _event("message", "message", MESSAGE_LIKE),
    _event(
        "status", "status", st.fixed_dictionaries({"status": mostly(st.sampled_from(STATUSES))})
    ),
    _event("error", "error", st.fixed_dictionaries({"message": mostly(st.text(max_size=3))})),
    _event(
        "queue_update",
        "queued_messages",
        st.lists(
            st.fixed_dictionaries(
                {"id": mostly(st.sampled_from([7, 8]))}, optional={"content": JSON}
            ),
            max_size=2,
        ),
    ),
    _event(
        "action_required",
        "action_required",
        st.fixed_dictionaries(
            {
                "tool_calls": st.lists(
                    st.fixed_dictionaries(
                        {"tool_call_id": mostly(st.text(max_size=2)), "tool_name": st.just(CLIENT)},
                        optional={"args": JSON},
                    ),
                    max_size=2,
                )
            }
        ),
    ),
    _event("retry", "retry", JSON),
    # Legacy envelopes (D13) and events without payloads.
    st.fixed_dictionaries({"type": st.sampled_from(["data", "ping", "error"]), "data": JSON}),
    st.fixed_dictionaries({"type": st.sampled_from(["preview_reset", "history_reset", "zzz"])}),
)


#: A frame element: a loosely typed event, or a well-formed one from the chaos mix.
FRAME_ITEM = EVENT_LIKE | chaos_events().map(lambda event: event.to_json())


@SETTINGS
@given(
    st.lists(mostly(FRAME_ITEM | st.lists(FRAME_ITEM, max_size=3)), min_size=3, max_size=12),
    st.sampled_from([None, QueuedSubmission(7, OURS), QueuedSubmission(None, None)]),
    st.sampled_from([0, 5]),
)
def test_arbitrary_json_events_raise_only_library_errors(
    frames: list[Any], queued: QueuedSubmission | None, cursor: int
) -> None:
    """A frame is decoded JSON: parsing may reject it with ``CoderProtocolError``; whatever
    parses is ingested, and nothing but the library's errors escapes (docs/architecture.md rule 4)."""
    tr = TurnTranslator(dynamic_tool_names={CLIENT}, queued_submission=queued, turn_cursor=cursor)
    parts: list[OutputPart] = []
    for frame in frames:
        try:
            events = events_from_json(frame)
        except CoderAgentError:
            continue
        for event in events:
            try:
                parts += tr.ingest(event)
            except CoderAgentError:
                continue
    parts += tr.finish()
    assert isinstance(parts[-1], Finish)
    check_blocks(parts)


# -- runs of message parts (the segment's read loop) -----------------------------------------


@st.composite
def delta_runs(draw: st.DrawFn) -> list[StreamEvent]:
    """A run of text or reasoning deltas, the shape nearly every frame has."""
    kind = draw(st.sampled_from(["text", "reasoning"]))
    role = draw(st.sampled_from(["assistant", "assistant", "tool", "user"]))
    texts = draw(st.lists(st.sampled_from(["", "a", "bc"]), min_size=1, max_size=6))
    return [
        parse_event(
            {
                "type": "message_part",
                "message_part": {"role": role, "part": {"type": kind, "text": text}},
            }
        )
        for text in texts
    ]


def _read_in_runs(
    translator: TurnTranslator, events: list[StreamEvent], *, run_first: bool = False
) -> list[OutputPart]:
    """The translator's parts as a segment's read loop takes them: one event, then the run
    of message parts behind it in one ``ingest_run``; or, ``run_first``, the queue handed to
    ``ingest_run`` before its front is looked at (an empty run when another event heads it),
    and that event by itself when the run is empty."""
    queue = collections.deque(events)
    parts: list[OutputPart] = []
    while queue:
        if run_first:
            before = len(queue)
            run = translator.ingest_run(queue)
            if not run and len(queue) == before:
                # Nothing popped: another event heads the queue.
                assert type(queue[0]) is not MessagePartEvent
                parts += translator.ingest(queue.popleft())
            parts += run
            continue
        parts += translator.ingest(queue.popleft())
        if queue and type(queue[0]) is MessagePartEvent:
            parts += translator.ingest_run(queue)
    return parts


@SETTINGS
@given(
    st.lists(
        st.one_of(chaos_events().map(lambda event: [event]), delta_runs()),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 6),
    st.sampled_from([1, 2, 256]),
    st.booleans(),
)
def test_a3_a5_translating_a_run_at_a_time_changes_nothing(
    chunks: list[list[StreamEvent]], cursor: int, pending_run: int, run_first: bool
) -> None:
    """A message part cannot settle, pause, fail or gate a segment, so ``ingest_run`` over a
    run of message parts gives exactly the parts ``ingest`` gives for each in turn, and
    leaves the translator in the same state, whatever the mix around the runs (pending
    deltas joined in any run length), and whether a consumer hands the queue to
    ``ingest_run`` before or after looking at its front."""
    from coder_proto._stream import translator as module

    events = [event for chunk in chunks for event in chunk]

    def translate(in_runs: bool) -> tuple[list[OutputPart], Any]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "PENDING_RUN", pending_run)
            tr = TurnTranslator(
                dynamic_tool_names={CLIENT}, turn_cursor=cursor, submitted_tool_call_ids=SUBMITTED
            )
            if in_runs:
                parts = _read_in_runs(tr, events, run_first=run_first)
            else:
                parts = [part for event in events for part in tr.ingest(event)]
            state = (tr.terminal_status, tr.error_seen, tr.client_tool_call_seen)
            return parts + tr.finish(), state

    assert translate(True) == translate(False)


@SETTINGS
@given(gated_streams(), st.sampled_from([7, None]))
def test_e2_a_gated_translator_takes_runs_as_it_takes_events(
    events: list[StreamEvent], queued_id: int | None
) -> None:
    """While gated (E.2) and after the gate opens or dead-ends, runs of message parts go
    through the gate one by one as ``ingest`` would take them."""

    def translate(in_runs: bool) -> tuple[list[OutputPart], Any]:
        tr = TurnTranslator(turn_cursor=40, queued_submission=QueuedSubmission(queued_id, OURS))
        if in_runs:
            parts = _read_in_runs(tr, events)
        else:
            parts = [part for event in events for part in tr.ingest(event)]
        state = (tr.gated, tr.dead_end is not None, tr.settled_by_promotion)
        return parts + tr.finish(), state

    assert translate(True) == translate(False)
