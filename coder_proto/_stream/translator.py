"""The turn translator: chat stream events into output parts, exactly once
(state machines A.1-A.12, D.3, E, F, G.1; D2, D3, D8, D15, D18, D19).

One ``TurnTranslator`` serves one segment. It reconciles three views of the same output:
streamed deltas (``message_part``, no message id), committed snapshots (``message``, re-sent
on every replay and revision) and the chat status, so that every character of text and
reasoning is emitted once, in blocks, whatever mix of deltas, snapshots, revisions and redial
replays arrives. The *ledger* records, per message id, what has been emitted for it; deltas
not yet claimed by a snapshot are *pending*.

The hot path (a text delta while a text block is open) appends the chunk to a list and emits
one ``TextDelta``; the list is joined only when a snapshot needs it, so a message streamed as
100,000 deltas costs linear time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable
from collections.abc import Set as AbstractSet
from typing import Any, Final

from .._constants import STATUS_ERROR, STATUS_REQUIRES_ACTION, TERMINAL_STATUSES
from .._errors import CoderChatError, CoderProtocolError
from .._json import js_stringify
from .._outputs import (
    ErrorPart,
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
    _ReasoningDeltaDraft,
    _TextDeltaDraft,
)
from .._wire.events import (
    ActionRequiredEvent,
    DeltaWire,
    ErrorEvent,
    MessageEvent,
    MessagePartEvent,
    StatusEvent,
    StreamEvent,
    TextWire,
    delta_event,
)
from .._wire.fields import MISSING
from .._wire.message_parts import (
    ChatMessagePart,
    ReasoningPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from .._wire.messages import ChatError, ChatMessage
from .._wire.unicode import valid_json_text
from .promotion import GateAnchored, GateDeadEnd, QueuedGate, QueuedSubmission
from .usage import UsageAccumulator

__all__ = ["DELTA_TYPES", "FINISH_REASONS", "TurnTranslator", "finish_reason"]

_deque_popleft = deque.popleft
_deque_appendleft = deque.appendleft
#: What a ``message_part`` event is in a reader's queue: its event, or the typed decode's
#: Struct waiting for it (``TurnTranslator.ingest_run`` takes both). The Struct, what nearly
#: every delta is, comes first: a membership test meets it without a comparison.
DELTA_TYPES: Final = (DeltaWire, MessagePartEvent)

#: The unified finish reasons (G.1, D24).
FINISH_STOP: Final = "stop"
FINISH_TOOL_CALLS: Final = "tool-calls"
FINISH_ERROR: Final = "error"
FINISH_REASONS: Final = (FINISH_STOP, FINISH_TOOL_CALLS, FINISH_ERROR)

#: ``Finish.settled_by`` when another prompt's promotion settled the turn (D3).
SETTLED_BY_PROMOTION: Final = "promotion"

_DELTA_ROLES: Final = frozenset({"assistant", "tool"})

#: Pending deltas are joined in runs of this many (memory: see ``TurnTranslator.__init__``).
PENDING_RUN: Final = 256


def finish_reason(
    *, error_seen: bool, terminal_status: str | None, client_tool_call_seen: bool
) -> str:
    """The unified finish reason (G.1 table, first match wins; D2).

    ``error`` when an error event was seen or the terminal status is ``error``; else
    ``tool-calls`` when a client tool call was emitted or the status is ``requires_action``;
    else ``stop``.
    """
    if error_seen or terminal_status == STATUS_ERROR:
        return FINISH_ERROR
    if client_tool_call_seen or terminal_status == STATUS_REQUIRES_ACTION:
        return FINISH_TOOL_CALLS
    return FINISH_STOP


_NO_IDS: Final[frozenset[str]] = frozenset()


def _with_id(seen: AbstractSet[str], key: str) -> set[str]:
    """``seen`` with ``key`` added: the shared empty ``_NO_IDS`` becomes a set of its own on
    the first id (an open, idle chat allocates none), a set grows in place."""
    if isinstance(seen, set):
        seen.add(key)
        return seen
    return {key}


class _Record:
    """Ledger entry of one message id: what has been emitted for it (A.1)."""

    __slots__ = ("reasoning", "substantive", "text")

    def __init__(self) -> None:
        self.text = ""
        self.reasoning = ""
        self.substantive = False


def _add_pending(pending: list[str], chunks: list[str], text: str) -> None:
    """Record a pending delta (A.4), joining a full run into one chunk."""
    pending.append(text)
    if len(pending) >= PENDING_RUN:
        chunks.append("".join(pending))
        pending.clear()


def _full_texts(content: Iterable[ChatMessagePart]) -> tuple[str, str]:
    """The concatenated text and reasoning of a snapshot, in wire order (A.4)."""
    text: list[str] = []
    reasoning: list[str] = []
    for part in content:
        if type(part) is TextPart:
            text.append(part.text)
        elif type(part) is ReasoningPart:
            reasoning.append(part.text)
    return "".join(text), "".join(reasoning)


def _substantive(content: Iterable[ChatMessagePart]) -> bool:
    """A9: some text/reasoning part with text, or a part of any other type."""
    for part in content:
        if type(part) is TextPart or type(part) is ReasoningPart:
            if part.text:
                return True
        else:
            return True
    return False


def _tool_input(args: Any) -> str:
    """D18: the JSON text of server tool args (a string passes through)."""
    if type(args) is str:
        return valid_json_text(args)
    try:
        return js_stringify(args)
    except (RecursionError, TypeError, ValueError) as exc:
        raise CoderProtocolError("server tool call args cannot be serialized as JSON") from exc


class TurnTranslator:
    """Snapshot-ledger reconciliation for one segment (state machines A, D.3, E, G.1).

    ``ingest(event)`` returns the output parts an event produces; ``finish()`` closes the
    segment with one ``Finish``. ``turn_cursor`` is the segment's ``after_id`` (0 when none):
    messages at or below it are ignored (D.2). ``submitted_tool_call_ids`` is a live reference
    to the session's set, read at every ``action_required`` (A.7). ``queued_submission``
    puts the E gate up. ``own_prompt_unknown`` is the D3 exemption: the turn did not learn its
    own user message id over REST, so the first user message above the cursor is its own
    (``None`` means ``turn_cursor == 0``). ``chat_id`` labels error parts and errors.
    """

    __slots__ = (
        "_block_seq",
        "_chat_id",
        "_client_tool_call_ids",
        "_client_tool_calls",
        "_current_assistant_id",
        "_dead_end",
        "_deferred",
        "_deltas_since_snapshot",
        "_dynamic_tool_names",
        "_error",
        "_error_seen",
        "_exemption",
        "_finished",
        "_gate",
        "_ledger",
        "_live",
        "_max_message_id",
        "_promoted",
        "_reasoning_block",
        "_reasoning_chunks",
        "_reasoning_pending",
        "_server_tool_calls",
        "_server_tool_results",
        "_sources",
        "_submitted_tool_call_ids",
        "_terminal_status",
        "_text_block",
        "_text_chunks",
        "_text_pending",
        "_turn_cursor",
        "_usage",
    )

    def __init__(
        self,
        *,
        dynamic_tool_names: Collection[str] = (),
        turn_cursor: int = 0,
        submitted_tool_call_ids: AbstractSet[str] = frozenset(),
        queued_submission: QueuedSubmission | None = None,
        own_prompt_unknown: bool | None = None,
        chat_id: str | None = None,
    ) -> None:
        self._dynamic_tool_names = frozenset(dynamic_tool_names)
        self._turn_cursor = turn_cursor
        self._submitted_tool_call_ids = submitted_tool_call_ids
        self._chat_id = chat_id
        self._gate = (
            QueuedGate(queued_submission, turn_cursor=turn_cursor, chat_id=chat_id)
            if queued_submission is not None
            else None
        )
        # D3: the cursor moves at most once per segment, at the queued anchor or here; a
        # queued turn learns its own prompt from the gate instead.
        if own_prompt_unknown is None:
            own_prompt_unknown = turn_cursor == 0
        self._exemption = own_prompt_unknown and self._gate is None

        self._block_seq = 0
        self._text_block: str | None = None
        self._reasoning_block: str | None = None
        # Pending deltas (A.4): the latest ones as received, the earlier ones joined into
        # runs of PENDING_RUN, so a long message waits for its snapshot at about one byte
        # per character instead of one string object per delta.
        self._text_pending: list[str] = []
        self._text_chunks: list[str] = []
        self._reasoning_pending: list[str] = []
        self._reasoning_chunks: list[str] = []
        self._current_assistant_id: int | None = None
        self._deltas_since_snapshot = False
        self._ledger: dict[int, _Record] = {}
        self._deferred: dict[int, tuple[ChatMessagePart, ...]] = {}
        self._usage = UsageAccumulator()
        # The ids seen once: a set each only from the first id on (an idle chat holds none).
        self._server_tool_calls: AbstractSet[str] = _NO_IDS
        self._server_tool_results: AbstractSet[str] = _NO_IDS
        self._client_tool_call_ids: AbstractSet[str] = _NO_IDS
        self._client_tool_calls: list[ToolCall] = []
        self._sources: AbstractSet[str] = _NO_IDS
        self._error: ChatError | None = None
        self._error_seen = False
        self._terminal_status: str | None = None
        self._max_message_id = 0
        self._promoted = False
        self._dead_end: CoderChatError | None = None
        self._finished = False
        # True while events take the normal (ungated, unsettled) path.
        self._live = self._gate is None

    # -- readable state ------------------------------------------------------------------------

    @property
    def terminal_status(self) -> str | None:
        """The last terminal chat status, cleared by any later non-terminal one (A.10, D1)."""
        return self._terminal_status

    @property
    def client_tool_call_seen(self) -> bool:
        """True once a client tool call was emitted (A.7)."""
        return bool(self._client_tool_calls)

    @property
    def client_tool_calls(self) -> tuple[ToolCall, ...]:
        """The emitted client ``ToolCall`` parts, in order (D5 submits results for these)."""
        return tuple(self._client_tool_calls)

    @property
    def max_message_id(self) -> int:
        """The largest message id seen in any ``message`` event, filtered or not (A.4, D.1)."""
        return self._max_message_id

    @property
    def turn_cursor(self) -> int:
        """The effective cursor: the initial one, the queued anchor, or the D3 exemption."""
        return self._turn_cursor

    @property
    def error(self) -> ChatError | None:
        """The latest error payload of an ``error`` event (A.10)."""
        return self._error

    @property
    def error_seen(self) -> bool:
        """True once an ``error`` event was ingested (G.1)."""
        return self._error_seen

    @property
    def dead_end(self) -> CoderChatError | None:
        """``queued_submission_lost`` when the queued prompt can no longer run (E.2); the
        segment raises it after the ingest that set it."""
        return self._dead_end

    @property
    def gated(self) -> bool:
        """True while the queued gate is up: nothing is attributed (E.2)."""
        return self._gate is not None

    @property
    def settled_by_promotion(self) -> bool:
        """True when another prompt's promotion settled the turn (D3, E.4)."""
        return self._promoted

    @property
    def settled(self) -> bool:
        """A terminal status is recorded, or a promotion settled the turn."""
        return self._terminal_status is not None or self._promoted

    @property
    def usage(self) -> UsageAccumulator:
        """The segment's usage accumulator (F)."""
        return self._usage

    def finish_reason(self) -> str:
        """The unified finish reason: ``stop`` after a promotion settle (D3), else the G.1
        table over (error seen, terminal status, client tool call seen)."""
        if self._promoted:
            return FINISH_STOP
        return finish_reason(
            error_seen=self._error_seen,
            terminal_status=self._terminal_status,
            client_tool_call_seen=bool(self._client_tool_calls),
        )

    def error_payload(self) -> ChatError:
        """The error a generate-mode segment raises when it finishes with reason ``error``:
        the last payload, or the server's default when none came (D2)."""
        return self._error if self._error is not None else ChatError.default()

    # -- input ---------------------------------------------------------------------------------

    def ingest(self, event: StreamEvent) -> list[OutputPart]:
        """The parts one stream event produces (A.3-A.10, D.3, E.2, D3).

        Unknown events and part types, ``retry``, ``queue_update`` (outside the gate),
        ``preview_reset`` and ``history_reset`` (D15) produce nothing. After a promotion
        settle, a dead end or ``finish()``, nothing more is ingested.
        """
        if self._live and type(event) is MessagePartEvent:
            part = event.part
            role = event.role
            if role == "assistant" or role == "tool":
                # Hot path: a delta for the open block of its kind.
                if type(part) is TextPart:
                    self._deltas_since_snapshot = True
                    block = self._text_block
                    if block is not None:
                        text = part.text
                        if text:
                            pending = self._text_pending
                            pending.append(text)
                            if len(pending) >= PENDING_RUN:
                                self._text_chunks.append("".join(pending))
                                pending.clear()
                            # A draft given the class (coder_proto._outputs._TextDeltaDraft).
                            delta = _TextDeltaDraft()
                            delta.id = block
                            delta.delta = text
                            delta.__class__ = TextDelta  # type: ignore[assignment]
                            return [delta]  # type: ignore[list-item]
                        return []
                elif type(part) is ReasoningPart:
                    self._deltas_since_snapshot = True
                    block = self._reasoning_block
                    if block is not None:
                        text = part.text
                        if text:
                            pending = self._reasoning_pending
                            pending.append(text)
                            if len(pending) >= PENDING_RUN:
                                self._reasoning_chunks.append("".join(pending))
                                pending.clear()
                            reasoning = _ReasoningDeltaDraft()
                            reasoning.id = block
                            reasoning.delta = text
                            reasoning.__class__ = ReasoningDelta  # type: ignore[assignment]
                            return [reasoning]  # type: ignore[list-item]
                        return []
            out: list[OutputPart] = []
            self._delta(event, out)
            return out
        return self._ingest_slow(event)

    def ingest_run(self, events: deque[StreamEvent]) -> list[OutputPart]:
        """Pop the run of ``message_part`` events at the front of ``events`` and return the
        parts they produce: the parts ``ingest`` gives for each in turn (A.3-A.5).

        A message part cannot settle, pause, fail or gate a live segment, so a reader's
        queue can be translated a run at a time; the run ends at the first event of another
        type, or when ``events`` is empty. When such an event heads the queue (or it is
        empty) the run is empty: nothing is popped and the result is ``[]``, so a consumer
        hands the queue here before looking at its front. Text and plain reasoning deltas for
        an open block of their kind, nearly every event of a turn, are translated here in one
        loop; any other event goes through ``ingest``.

        The reader's queue (``coder_proto._stream.reader.EventQueue``) holds a delta the
        typed decode took as its ``DeltaWire`` Struct: it is read here through the ``deque``
        methods themselves, and its ``MessagePartEvent`` built only when ``ingest`` takes it.
        """
        if len(events) == 1 and self._live:
            # A run of one delta, what a frame of one event leaves in the queue: the loop
            # below for that delta, inline, when it is a text or reasoning delta of the
            # assistant or a tool for an open block of its kind; anything else goes back to
            # the queue for the loop.
            wire: Any = _deque_popleft(events)
            if type(wire) is DeltaWire:
                payload = wire.message_part
                role = payload.role
                if role == "assistant" or role == "tool":
                    part = payload.part
                    if type(part) is TextWire:
                        block = self._text_block
                        if block is not None:
                            self._deltas_since_snapshot = True
                            text = part.text
                            if not text:
                                return []
                            pending = self._text_pending
                            pending.append(text)
                            if len(pending) >= PENDING_RUN:
                                self._text_chunks.append("".join(pending))
                                pending.clear()
                            delta = _TextDeltaDraft()
                            delta.id = block
                            delta.delta = text
                            delta.__class__ = TextDelta  # type: ignore[assignment]
                            return [delta]  # type: ignore[list-item]
                    else:
                        block = self._reasoning_block
                        if block is not None:
                            self._deltas_since_snapshot = True
                            text = part.text
                            if not text:
                                return []
                            pending = self._reasoning_pending
                            pending.append(text)
                            if len(pending) >= PENDING_RUN:
                                self._reasoning_chunks.append("".join(pending))
                                pending.clear()
                            reasoning = _ReasoningDeltaDraft()
                            reasoning.id = block
                            reasoning.delta = text
                            reasoning.__class__ = ReasoningDelta  # type: ignore[assignment]
                            return [reasoning]  # type: ignore[list-item]
            _deque_appendleft(events, wire)
        out: list[OutputPart] = []
        append = out.append
        popleft = _deque_popleft
        text_block = reasoning_block = None
        stale = True  # the locals below must be read again from the translator
        text_kind: bool | None
        while events:
            event: Any = popleft(events)
            kind = type(event)
            if kind is DeltaWire:
                payload = event.message_part
                role = payload.role
                part = payload.part
                text_kind = type(part) is TextWire
            elif kind is MessagePartEvent:
                role = event.role
                part = event.part
                if type(part) is TextPart:
                    text_kind = True
                elif type(part) is ReasoningPart:
                    text_kind = False
                else:
                    text_kind = None
            else:
                events.appendleft(event)
                break
            if stale:
                stale = marked = False
                if self._live:
                    text_block = self._text_block
                    reasoning_block = self._reasoning_block
                    text_pending = self._text_pending
                    reasoning_pending = self._reasoning_pending
                else:
                    text_block = reasoning_block = None
            if text_kind is not None and (role == "assistant" or role == "tool"):
                if text_kind:
                    if text_block is not None:
                        if not marked:
                            self._deltas_since_snapshot = marked = True
                        text = part.text
                        if text:
                            text_pending.append(text)
                            if len(text_pending) >= PENDING_RUN:
                                self._text_chunks.append("".join(text_pending))
                                text_pending.clear()
                            delta = _TextDeltaDraft()
                            delta.id = text_block
                            delta.delta = text
                            delta.__class__ = TextDelta  # type: ignore[assignment]
                            append(delta)  # type: ignore[arg-type]
                        continue
                elif reasoning_block is not None:
                    if not marked:
                        self._deltas_since_snapshot = marked = True
                    text = part.text
                    if text:
                        reasoning_pending.append(text)
                        if len(reasoning_pending) >= PENDING_RUN:
                            self._reasoning_chunks.append("".join(reasoning_pending))
                            reasoning_pending.clear()
                        reasoning = _ReasoningDeltaDraft()
                        reasoning.id = reasoning_block
                        reasoning.delta = text
                        reasoning.__class__ = ReasoningDelta  # type: ignore[assignment]
                        append(reasoning)  # type: ignore[arg-type]
                    continue
            out += self.ingest(event if kind is MessagePartEvent else delta_event(event))
            stale = True
        return out

    def _ingest_slow(self, event: StreamEvent) -> list[OutputPart]:
        out: list[OutputPart] = []
        if not self._live:
            if self._gate is not None and self._dead_end is None and not self._finished:
                if type(event) is MessageEvent:
                    self._see_id(event.message.id)
                self._gated(event, out)
            return out
        if type(event) is MessageEvent:
            self._snapshot(event.message, out)
        elif type(event) is StatusEvent:
            status = event.status
            self._terminal_status = status if status in TERMINAL_STATUSES else None
        elif type(event) is ErrorEvent:
            self._on_error(event.error, out)
        elif type(event) is ActionRequiredEvent:
            self._on_action_required(event, out)
        return out

    def finish(self) -> list[OutputPart]:
        """Close the segment (A.11, G.1, F.2-F.3): flush deferred revisions, close the open
        block, then one ``Finish``. A second call returns nothing."""
        if self._finished:
            return []
        out: list[OutputPart] = []
        self._flush_deferred(out)
        self._close_blocks(out)
        self._finished = True
        self._live = False
        out.append(
            Finish(
                finish_reason=self.finish_reason(),
                raw_finish_reason=None if self._promoted else self._terminal_status,
                usage=self._usage.usage(),
                provider_metadata=self._usage.provider_metadata(),
                settled_by=SETTLED_BY_PROMOTION if self._promoted else None,
            )
        )
        return out

    # -- gate (E.2) ----------------------------------------------------------------------------

    def _gated(self, event: StreamEvent, out: list[OutputPart]) -> None:
        assert self._gate is not None
        outcome = self._gate.feed(event)
        if isinstance(outcome, GateAnchored):
            self._gate = None
            self._live = True
            self._turn_cursor = outcome.anchor_id
            for message in outcome.replay:
                self._snapshot(message, out)
                if not self._live:
                    break
        elif isinstance(outcome, GateDeadEnd):
            self._dead_end = outcome.error

    # -- blocks (A.2) --------------------------------------------------------------------------

    def _open_text(self, out: list[OutputPart]) -> str:
        if self._reasoning_block is not None:
            out.append(ReasoningEnd(self._reasoning_block))
            self._reasoning_block = None
        block = self._text_block
        if block is None:
            self._block_seq += 1
            block = self._text_block = f"text-{self._block_seq}"
            out.append(TextStart(block))
        return block

    def _open_reasoning(self, out: list[OutputPart]) -> str:
        if self._text_block is not None:
            out.append(TextEnd(self._text_block))
            self._text_block = None
        block = self._reasoning_block
        if block is None:
            self._block_seq += 1
            block = self._reasoning_block = f"reasoning-{self._block_seq}"
            out.append(ReasoningStart(block))
        return block

    def _close_blocks(self, out: list[OutputPart]) -> None:
        if self._text_block is not None:
            out.append(TextEnd(self._text_block))
            self._text_block = None
        if self._reasoning_block is not None:
            out.append(ReasoningEnd(self._reasoning_block))
            self._reasoning_block = None

    # -- deltas (A.3) --------------------------------------------------------------------------

    def _delta(self, event: MessagePartEvent, out: list[OutputPart]) -> None:
        if event.role not in _DELTA_ROLES:
            return
        part = event.part
        if type(part) is TextPart:
            # An empty delta still opens the block (A.3.2).
            self._deltas_since_snapshot = True
            block = self._open_text(out)
            if part.text:
                _add_pending(self._text_pending, self._text_chunks, part.text)
                out.append(TextDelta(block, part.text))
        elif type(part) is ReasoningPart:
            self._deltas_since_snapshot = True
            block = self._open_reasoning(out)
            if part.text:
                _add_pending(self._reasoning_pending, self._reasoning_chunks, part.text)
                out.append(ReasoningDelta(block, part.text))
        elif type(part) is ToolCallPart:
            self._close_blocks(out)
            if part.tool_name not in self._dynamic_tool_names:
                self._server_tool_call(part, out)
        else:
            self._tool_result_or_source(part, out)

    # -- snapshots (A.4) -----------------------------------------------------------------------

    def _see_id(self, message_id: int) -> None:
        if message_id > self._max_message_id:
            self._max_message_id = message_id

    def _snapshot(self, message: ChatMessage, out: list[OutputPart]) -> None:
        self._see_id(message.id)
        if message.id <= self._turn_cursor:
            return
        role = message.role
        if role == "assistant":
            if message.usage is not None:
                self._usage.record(message.id, message.usage)
            self._assistant_text(message, out)
            for part in message.content:
                if type(part) is ToolCallPart:
                    if part.tool_name not in self._dynamic_tool_names:
                        self._server_tool_call(part, out)
                else:
                    self._tool_result_or_source(part, out)
        elif role == "tool":
            for part in message.content:
                self._tool_result_or_source(part, out)
        elif role == "user":
            self._user_message(message.id)

    def _user_message(self, message_id: int) -> None:
        """D3 / E.4: a user message above the cursor is the turn's own prompt (exemption, once)
        or someone else's promoted prompt, which settles the turn."""
        if self._exemption:
            self._exemption = False
            self._turn_cursor = message_id
            # F.4: usage counts only above the effective cursor.
            self._usage.forget_through(message_id)
            return
        self._promoted = True
        self._live = False

    def _assistant_text(self, message: ChatMessage, out: list[OutputPart]) -> None:
        known = self._ledger.get(message.id)
        if known is not None and message.id != self._current_assistant_id:
            self._revision(known, message.content, out)  # branch R
        elif known is not None and self._deltas_since_snapshot and known.substantive:
            self._deferred[message.id] = message.content  # branch D: the ownership race
        else:
            self._attribute(message, known, out)  # branch A

    def _attribute(
        self, message: ChatMessage, known: _Record | None, out: list[OutputPart]
    ) -> None:
        """Branch A (A1-A10): this snapshot claims the pending deltas."""
        message_id = message.id
        content = message.content
        if (
            self._current_assistant_id is not None
            and self._current_assistant_id != message_id
            and not self._deltas_since_snapshot
        ):
            self._close_blocks(out)  # A1: a message boundary
        self._current_assistant_id = message_id
        rec = known if known is not None else _Record()
        full_text, full_reasoning = _full_texts(content)
        text_attributed = rec.text + "".join(self._text_chunks) + "".join(self._text_pending)
        reasoning_attributed = (
            rec.reasoning + "".join(self._reasoning_chunks) + "".join(self._reasoning_pending)
        )
        text_ok = full_text.startswith(text_attributed)
        reasoning_ok = full_reasoning.startswith(reasoning_attributed)
        self._emit_walk(
            content,
            len(text_attributed) if text_ok else None,
            len(reasoning_attributed) if reasoning_ok else None,
            out,
        )
        # A7, with K.3 fixed: a kind that failed to reconcile records what was emitted for
        # this message (ledger + the pending deltas it owns), so a later snapshot of the
        # same id never re-emits it (tests/conformance/DEVIATIONS.md).
        rec.text = full_text if text_ok else text_attributed
        rec.reasoning = full_reasoning if reasoning_ok else reasoning_attributed
        self._text_pending.clear()  # A8
        self._text_chunks.clear()
        self._reasoning_pending.clear()
        self._reasoning_chunks.clear()
        if not rec.substantive:
            rec.substantive = _substantive(content)  # A9
        self._ledger[message_id] = rec
        self._deltas_since_snapshot = False
        if self._deferred:  # A10
            for deferred_id in [i for i in self._deferred if i != message_id]:
                deferred = self._deferred.pop(deferred_id)
                self._revision(self._ledger[deferred_id], deferred, out)

    def _emit_walk(
        self,
        content: Iterable[ChatMessagePart],
        text_from: int | None,
        reasoning_from: int | None,
        out: list[OutputPart],
    ) -> None:
        """A6: emit the parts of the snapshot beyond the given offsets, in wire order (a
        kind whose offset is ``None`` is not emitted)."""
        seen_text = 0
        seen_reasoning = 0
        for part in content:
            if type(part) is TextPart:
                text = part.text
                end = seen_text + len(text)
                if text_from is not None and end > text_from:
                    start = max(seen_text, text_from)
                    block = self._open_text(out)
                    out.append(TextDelta(block, text[start - seen_text :]))
                seen_text = end
            elif type(part) is ReasoningPart:
                text = part.text
                end = seen_reasoning + len(text)
                if reasoning_from is not None and end > reasoning_from:
                    start = max(seen_reasoning, reasoning_from)
                    block = self._open_reasoning(out)
                    out.append(ReasoningDelta(block, text[start - seen_reasoning :]))
                seen_reasoning = end

    def _revision(
        self, rec: _Record, content: tuple[ChatMessagePart, ...], out: list[OutputPart]
    ) -> None:
        """A.5: an earlier message's revision emits only a strict extension of its ledger,
        bracketed in its own block(s); a replay or a rewrite emits nothing."""
        full_text, full_reasoning = _full_texts(content)
        text_ok = len(full_text) > len(rec.text) and full_text.startswith(rec.text)
        reasoning_ok = len(full_reasoning) > len(rec.reasoning) and full_reasoning.startswith(
            rec.reasoning
        )
        if not (text_ok or reasoning_ok):
            return
        self._close_blocks(out)
        self._emit_walk(
            content,
            len(rec.text) if text_ok else None,
            len(rec.reasoning) if reasoning_ok else None,
            out,
        )
        if text_ok:
            rec.text = full_text
        if reasoning_ok:
            rec.reasoning = full_reasoning
        self._close_blocks(out)

    def _flush_deferred(self, out: list[OutputPart]) -> None:
        """A.6: settle every deferred revision; pending deltas are attributed to nobody."""
        if not self._deferred:
            return
        deferred, self._deferred = self._deferred, {}
        for message_id, content in deferred.items():
            # Only a known message is ever deferred (A.4 branch D).
            self._revision(self._ledger[message_id], content, out)

    # -- tools and sources (A.7, A.8) ----------------------------------------------------------

    def _tool_result_or_source(self, part: ChatMessagePart, out: list[OutputPart]) -> None:
        if type(part) is ToolResultPart:
            if part.tool_name not in self._dynamic_tool_names:
                self._server_tool_result(part, out)
        elif type(part) is SourcePart:
            self._source(part, out)

    def _server_tool_call(self, part: ToolCallPart, out: list[OutputPart]) -> None:
        """A.7, D19: once per id, from whichever delta or snapshot first carries ``args``."""
        call_id = part.tool_call_id
        name = part.tool_name
        if not call_id or not name or part.args is MISSING or call_id in self._server_tool_calls:
            return
        tool_input = _tool_input(part.args)
        self._server_tool_calls = _with_id(self._server_tool_calls, call_id)
        out.append(
            ToolInputStart(
                tool_call_id=call_id, tool_name=name, provider_executed=True, dynamic=True
            )
        )
        out.append(ToolInputEnd(tool_call_id=call_id))
        out.append(
            ToolCall(
                tool_call_id=call_id,
                tool_name=name,
                input=tool_input,
                provider_executed=True,
                dynamic=True,
            )
        )

    def _server_tool_result(self, part: ToolResultPart, out: list[OutputPart]) -> None:
        """A.7, D19: once per id, only for a call this translator emitted; a part without a
        ``result`` key is skipped and ``null`` becomes ``{}``."""
        call_id = part.tool_call_id
        name = part.tool_name
        if (
            not call_id
            or not name
            or part.result is MISSING
            or call_id not in self._server_tool_calls
            or call_id in self._server_tool_results
        ):
            return
        self._server_tool_results = _with_id(self._server_tool_results, call_id)
        result = {} if part.result is None else part.result
        out.append(
            ToolResult(
                tool_call_id=call_id,
                tool_name=name,
                result=result,
                is_error=part.is_error,
                dynamic=True,
            )
        )

    def _source(self, part: SourcePart, out: list[OutputPart]) -> None:
        """A.8: sources need a URL; the id is ``source_id`` or the URL; once per id."""
        url = part.url
        if not url:
            return
        source_id = part.source_id or url
        if source_id in self._sources:
            return
        self._sources = _with_id(self._sources, source_id)
        out.append(Source(id=source_id, url=url, title=part.title))

    def _on_action_required(self, event: ActionRequiredEvent, out: list[OutputPart]) -> None:
        """A.7: new client calls, skipping emitted ones and those the session already
        answered (a live set: later segments' submissions count too).

        The server sends ``action_required`` only while the chat waits for tool results, and
        its statuses are level-triggered: a resume and a new pause between two syncs show no
        ``status`` at all. A new call therefore pauses the segment as ``requires_action``
        would; an event naming only answered calls (a replay after a redial) settles
        nothing."""
        submitted = self._submitted_tool_call_ids
        for call in event.tool_calls:
            call_id = call.tool_call_id
            if call_id in self._client_tool_call_ids or call_id in submitted:
                continue
            if self._terminal_status is None:
                self._terminal_status = STATUS_REQUIRES_ACTION
            tool_input = valid_json_text(call.args)
            if call_id in self._server_tool_calls:
                # A tool this agent did not register: its snapshot was taken for a server
                # tool's call and delivered as such. The server waits on it, so it is answered
                # (with an error, D5), but the user sees it once.
                self._client_tool_call_ids = _with_id(self._client_tool_call_ids, call_id)
                self._client_tool_calls.append(
                    ToolCall(tool_call_id=call_id, tool_name=call.tool_name, input=tool_input)
                )
                continue
            self._flush_deferred(out)
            self._close_blocks(out)
            self._client_tool_call_ids = _with_id(self._client_tool_call_ids, call_id)
            tool_call = ToolCall(tool_call_id=call_id, tool_name=call.tool_name, input=tool_input)
            self._client_tool_calls.append(tool_call)
            out.append(ToolInputStart(tool_call_id=call_id, tool_name=call.tool_name))
            out.append(ToolInputEnd(tool_call_id=call_id))
            out.append(tool_call)

    # -- errors (A.10) -------------------------------------------------------------------------

    def _on_error(self, error: ChatError | None, out: list[OutputPart]) -> None:
        if error is None:
            return
        self._error = error
        self._error_seen = True
        # A.6: a generate-mode consumer raises at the error part, so settle revisions first.
        self._flush_deferred(out)
        out.append(ErrorPart(error=error, chat_id=self._chat_id))
