"""One model round trip: the segment driver (state machines C.3-C.5, D, E.5, G.2-G.7;
wire 2.3, 5; D2-D7, D9, D12, D21, D22, D24).

A segment submits something (a new user message, or client tool results), reads the chat
stream until the run settles or pauses for client tools, and ends with a ``Finish`` part or a
typed error. It runs inside a ``Turn`` (its host machine), which owns the I/O vocabulary; the
phases follow G.2::

    segment:start -> stream-start -> seed the cursor (D.1) -> model hint + uploads
      -> REST phase (D.2: create chat | post message | submit fresh tool results)
      -> translator -> acquire the stream (attach a paused one, or dial) -> READ LOOP (G.3)
      -> pause or close the stream (G.4) -> finish()
    always: advance the cursor, interrupt or withdraw an unsettled turn (E.5), discard a
      fresh chat whose stream failed (C.5), segment:settle (G.7)

The read loop races the stream against the segment's ``request_timeout`` (checked first), the
2 s grace for a lost ``action_required`` and its one-shot REST recovery (G.5); it peeks past an
``error`` event (D2) and gives up waiting for tool calls after 200 events (the valve).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._actions import RunInBackground
from .._constants import (
    ACTION_REQUIRED_GRACE,
    BACKGROUND_TASK_BOUND,
    RECOVERY_PAGE_SIZE,
    REQUIRES_ACTION_SAFETY_VALVE,
    STATUS_ERROR,
    STATUS_REQUIRES_ACTION,
)
from .._engine import Cancelled, CoreMachine, TimedOut, Wait, _Call
from .._errors import CoderAgentError, CoderApiError, CoderChatError, CoderStreamError
from .._jobs.organization import default_organization
from .._jobs.stopping import InterruptJob, WithdrawJob, withdraw_queued
from .._json import js_stringify
from .._outputs import (
    ErrorPart,
    Finish,
    OutputPart,
    ReasoningDelta,
    Source,
    StreamStart,
    TextDelta,
    ToolCall,
    ToolResult,
)
from .._rest.prefix import Completed, Failed
from .._rest.routes import (
    build_create_chat,
    build_create_chat_message,
    build_get_messages,
    build_submit_tool_results,
    parse_create_chat,
    parse_create_chat_message,
    parse_get_messages,
    parse_submit_tool_results,
)
from .._rest.uploads import build_upload_chat_file, parse_upload_chat_file
from .._stream.promotion import QueuedSubmission, teardown_action
from .._stream.translator import DELTA_TYPES, PENDING_RUN, TurnTranslator
from .._transport_events import SegmentSettleEvent, SegmentStartEvent
from .._wire.chats import (
    ActionToolCall,
    ChatInputPart,
    CreateChatMessageRequest,
    CreateChatRequest,
    DynamicTool,
    FileInput,
    ToolResultInput,
)
from .._wire.events import (
    ActionRequiredEvent,
    ErrorEvent,
    MessageEvent,
    StatusEvent,
    StreamEvent,
)
from .._wire.fields import MISSING
from .._wire.message_parts import ToolCallPart, ToolResultPart
from .._wire.messages import ChatMessage, ChatQueuedMessage
from .prompt import Message, NewTurn, PendingUpload, Resume, input_parts, system_prompt

if TYPE_CHECKING:
    from .._stream.session_stream import SessionStream
    from .session_state import SessionState

__all__ = [
    "NO_PARTS",
    "STREAM_CLOSED_MESSAGE",
    "Segment",
    "StepResult",
    "recover_pending_calls",
    "timeout_message",
]

logger = logging.getLogger("coder_proto")

#: C.4, wire 10: the stream ended without a terminal status and without an error event.
STREAM_CLOSED_MESSAGE: Final = (
    "Coder chat stream ended before the turn settled (connection closed or the server ended "
    "the stream without a terminal status)."
)
#: C.4, wire 10: a bare agent error from the reader (an unparseable frame).
STREAM_FAILED_PREFIX: Final = "Coder chat stream failed mid-turn: "
#: G.2, wire 10.
NO_CHAT_FOR_RESUME: Final = "cannot submit tool results before a chat exists"
NO_CHAT_TO_EDIT: Final = "cannot edit a message before the session has a chat"
NOOP_PROMPT: Final = "CoderAgent received a prompt with no user message or tool results to act on."
EMPTY_CONTENT: Final = "the prompt has no content to send: give it some text or a file"
#: The client tool names of a segment without client tools: one empty set for all of them
#: (an empty ``frozenset`` is a new object of 216 bytes each time it is made).
_NO_TOOL_NAMES: Final[frozenset[str]] = frozenset()
#: A turn's ``parts`` while it holds none (``Turn.parts``): one empty deque shared by every
#: turn, never written (the turn makes a fresh one for the next part).
NO_PARTS: Final[deque[Any]] = deque()

_EFFECTFUL_REASON: Final = (
    "the turn has server-side effects a replay would repeat (a workspace, MCP servers or "
    "uploaded attachments)"
)
_PRIOR_STATE_REASON: Final = (
    "the chat has prior state, so a replay would resubmit the prompt as a new user turn"
)

_GRACE_TIMER: Final = "action-required-grace"


def timeout_message(timeout: float) -> str:
    """C.3 in seconds: the ``request_timeout`` expiry message."""
    return f"Coder Agent turn exceeded its {timeout:g}s request_timeout budget."


def recover_pending_calls(
    messages: Iterable[ChatMessage],
    *,
    turn_cursor: int,
    dynamic_tool_names: Collection[str],
    submitted_tool_call_ids: AbstractSet[str],
    chat_id: str = "",
) -> list[StreamEvent]:
    """G.5: synthetic events recovering a lost ``action_required`` from a history page.

    Keeps the messages above ``turn_cursor`` in ascending order; the pending calls are the
    last assistant message's client tool calls (not provider-executed, id and name present,
    name registered) with no result in a later message and not submitted yet. Their ``args``
    are JSON text (D18; missing args give ``"{}"``). Returns one ``message`` event per kept
    message followed by one ``action_required``, or ``[]`` when nothing is pending.
    """
    kept = sorted((m for m in messages if m.id > turn_cursor), key=lambda m: m.id)
    last = next((m for m in reversed(kept) if m.role == "assistant"), None)
    if last is None:
        return []
    handled = {
        part.tool_call_id
        for m in kept
        if m.id > last.id
        for part in m.content
        if type(part) is ToolResultPart
    }
    pending: list[ActionToolCall] = []
    for part in last.content:
        if type(part) is not ToolCallPart or part.provider_executed is True:
            continue
        call_id, name = part.tool_call_id, part.tool_name
        if not call_id or not name or name not in dynamic_tool_names:
            continue
        if call_id in handled or call_id in submitted_tool_call_ids:
            continue
        args = "{}" if part.args is MISSING else js_stringify(part.args)
        pending.append(ActionToolCall(tool_call_id=call_id, tool_name=name, args=args))
    if not pending:
        return []
    events: list[StreamEvent] = [MessageEvent(m, chat_id) for m in kept]
    events.append(ActionRequiredEvent(tuple(pending), chat_id))
    return events


@attrs.frozen(kw_only=True)
class StepResult:
    """One segment as the turn reports it (a "step"; F.5, G.1).

    ``tool_calls`` are every tool call of the segment (server tools with ``provider_executed``,
    client tools without); ``tool_results`` the server tools' results and, once the turn ran
    them, the client tools' outcomes (``dynamic=False``). ``usage`` is the segment's usage with
    its wire ``raw``; ``error`` the run's error when the step finished with reason ``error``.
    """

    finish_reason: str
    raw_finish_reason: str | None = None
    usage: Any = None
    provider_metadata: dict[str, Any] | None = None
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    sources: tuple[Source, ...] = ()
    settled_by: str | None = None
    error: CoderChatError | None = attrs.field(default=None, eq=False)
    chat_id: str | None = None


def _grown(items: Any, item: Any) -> list[Any]:
    """``items`` with ``item`` appended: the list itself, or a new one for the shared empty
    tuple a ``_StepBuilder`` starts its rarer kinds of parts with."""
    if items:
        items.append(item)
        return items  # type: ignore[no-any-return]
    return [item]


class _StepBuilder:
    """Accumulates one segment's parts into a ``StepResult`` (G.6 generate buffering).

    Text and reasoning deltas are kept as the translator keeps its pending ones: the latest
    as received, the earlier ones joined into runs of ``PENDING_RUN``, so a long segment costs
    about one byte per character rather than one string object per delta. The joined result
    is the same string either way. The rarer parts (runs, tool calls and results, sources,
    errors) are kept in a list from the first one on: an open, idle chat holds no empty list
    for them (56 bytes each)."""

    __slots__ = (
        "errors",
        "finish",
        "reasoning",
        "reasoning_runs",
        "sources",
        "text",
        "text_runs",
        "tool_calls",
        "tool_results",
    )

    def __init__(self) -> None:
        self.text: list[str] = []
        self.text_runs: Sequence[str] = ()
        self.reasoning: list[str] = []
        self.reasoning_runs: Sequence[str] = ()
        self.tool_calls: Sequence[ToolCall] = ()
        self.tool_results: Sequence[ToolResult] = ()
        self.sources: Sequence[Source] = ()
        self.errors: Sequence[ErrorPart] = ()
        self.finish: Finish | None = None

    def add_all(self, parts: list[OutputPart], *, stop_at_error: bool) -> ErrorPart | None:
        """Record ``parts`` in order; return the first error part among them (``None`` when
        there is none). With ``stop_at_error`` the parts after it are not recorded (generate
        mode raises it, G.6)."""
        first_error: ErrorPart | None = None
        text = self.text
        reasoning = self.reasoning
        run = PENDING_RUN
        for part in parts:
            kind = type(part)
            if kind is TextDelta:
                text.append(part.delta)  # type: ignore[union-attr]
                if len(text) >= run:
                    self.text_runs = _grown(self.text_runs, "".join(text))
                    text.clear()
            elif kind is ReasoningDelta:
                reasoning.append(part.delta)  # type: ignore[union-attr]
                if len(reasoning) >= run:
                    self.reasoning_runs = _grown(self.reasoning_runs, "".join(reasoning))
                    reasoning.clear()
            elif kind is ToolCall:
                self.tool_calls = _grown(self.tool_calls, part)
            elif kind is ToolResult:
                self.tool_results = _grown(self.tool_results, part)
            elif kind is Source:
                self.sources = _grown(self.sources, part)
            elif kind is ErrorPart:
                self.errors = _grown(self.errors, part)
                if first_error is None:
                    first_error = part  # type: ignore[assignment]
                    if stop_at_error:
                        return first_error
            elif kind is Finish:
                self.finish = part  # type: ignore[assignment]
        return first_error

    def build(self, chat_id: str | None) -> StepResult:
        finish = self.finish
        assert finish is not None
        error: CoderChatError | None = None
        if self.errors:
            error = self.errors[-1].error.to_exception(chat_id=chat_id)
        return StepResult(
            finish_reason=finish.finish_reason,
            raw_finish_reason=finish.raw_finish_reason,
            usage=finish.usage,
            provider_metadata=finish.provider_metadata,
            text="".join(self.text_runs) + "".join(self.text),
            reasoning="".join(self.reasoning_runs) + "".join(self.reasoning),
            tool_calls=tuple(self.tool_calls),
            tool_results=tuple(self.tool_results),
            sources=tuple(self.sources),
            settled_by=finish.settled_by,
            error=error,
            chat_id=chat_id,
        )


@attrs.frozen(kw_only=True)
class SegmentOutcome:
    """How a segment ended cleanly: its step, the client calls it left pending (the pause's
    calls, in ``action_required`` order, D5) and whether the stream was kept (G.4)."""

    step: StepResult
    pending_calls: tuple[ToolCall, ...] = ()
    paused: bool = False
    terminal_status: str | None = None
    chat_id: str | None = None


class Segment:
    """One segment run by ``turn``, the machine it runs in (see the module docstring): it
    works on ``session`` in ``mode`` (``"generate"`` or ``"stream"``) and hands its output
    parts to ``deliver`` (``None``: straight into the turn's ``parts``)."""

    __slots__ = (
        "_hand_on",
        "acquired",
        "action",
        "builder",
        "chat_id",
        "created",
        "discard",
        "dynamic_tool_names",
        "effectful",
        "generate",
        "messages",
        "number",
        "owns_run",
        "queued_entry",
        "queued_turn",
        "session",
        "settle_error",
        "started_at",
        "stream",
        "teardown_fired",
        "tools",
        "translator",
        "turn",
        "uploaded",
        "warnings",
        "withdrawn",
    )

    def __init__(
        self,
        turn: CoreMachine[Any],
        action: NewTurn | Resume,
        *,
        session: SessionState,
        mode: str,
        deliver: Callable[[list[OutputPart]], None] | None,
        messages: Sequence[Message] = (),
        tools: Sequence[DynamicTool] = (),
        warnings: Sequence[str] = (),
    ) -> None:
        self.turn = turn
        self.session = session
        self._hand_on = deliver
        self.action = action
        self.messages = tuple(messages)
        self.tools = tuple(tools)
        self.dynamic_tool_names = (
            frozenset(t.name for t in self.tools) if self.tools else _NO_TOOL_NAMES
        )
        self.warnings = tuple(warnings)
        self.generate = mode == "generate"
        self.translator: TurnTranslator | None = None
        self.stream: SessionStream | None = None
        self.chat_id: str | None = None
        self.created = False
        self.effectful = bool(self.session.config.workspace_id) or bool(
            self.session.config.mcp_server_ids
        )
        self.uploaded = False
        self.queued_turn = False
        self.queued_entry: ChatQueuedMessage | None = None
        #: True when the run on the chat may be ours: a submission was sent and not refused
        #: with a 4xx (D4), or this is a resume of our own pause.
        self.owns_run = isinstance(action, Resume)
        self.discard = False
        self.teardown_fired = False
        self.withdrawn: bool | None = None
        self.acquired = False
        self.settle_error: BaseException | None = None
        self.builder = _StepBuilder()
        self.number: int | None = None
        self.started_at = turn.now

    # -- entry point -----------------------------------------------------------------------

    def run(self) -> Wait[SegmentOutcome]:
        """Run the segment; return its outcome or raise its typed error."""
        turn = self.turn
        session = self.session
        sink = session.sink
        if sink.enabled:
            self.number = session.next_segment_number()
            sink.emit(
                SegmentStartEvent(
                    segment=self.number, chat_id=session.chat_id, timestamp=sink.now()
                )
            )
        timeout = session.config.timeout
        turn._arm_abort_deadline(self.started_at + timeout if timeout is not None else None)
        failure: BaseException | None = None
        outcome: SegmentOutcome | None = None
        try:
            try:
                # The phases in turn, with no generator of their own held between them: an
                # open, idle chat keeps the turn's, this one's and the read loop's frames.
                translator, stream = yield from self._open()
                yield from self._read_loop(translator, stream)
                outcome = self._close(translator, stream)
                # E.5: final cleanup interrupts a run that ended without a terminal status
                # (an error event and then the end of the stream).
                self._teardown_in_background(abort=False)
                return outcome
            except Cancelled as exc:
                failure = exc.reason
                self._teardown_in_background(abort=True)
                raise
            except TimedOut:
                assert timeout is not None
                error = CoderChatError(
                    timeout_message(timeout), kind="timeout", retryable=True, chat_id=self._target()
                )
                failure = error
                yield from self._teardown(abort=True)
                error.withdrawn = self.withdrawn
                raise error from None
            except CoderAgentError as exc:
                error_ = self._classify(exc)
                failure = error_
                # The teardown has its own bound (D22); the segment's budget no longer applies.
                turn._arm_abort_deadline(None)
                yield from self._teardown(abort=False)
                if isinstance(error_, CoderChatError) and error_.withdrawn is None:
                    error_.withdrawn = self.withdrawn
                if error_ is exc:
                    raise
                raise error_
        finally:
            turn._arm_abort_deadline(None)
            self._final_cleanup(failure, outcome)

    # -- phases ----------------------------------------------------------------------------

    def _open(self) -> Wait[tuple[TurnTranslator, SessionStream]]:
        """Submit the segment's prompt or results and open its stream: the translator and
        the stream the read loop reads."""
        turn = self.turn
        session = self.session
        self._deliver([StreamStart(warnings=self.warnings)])
        action = self.action
        if isinstance(action, Resume) and session.chat_id is None:
            raise CoderChatError(NO_CHAT_FOR_RESUME, retryable=False)
        if session.chat_id is not None:
            self.chat_id = session.chat_id
        # D.1 seeding: a known chat without a cursor learns its newest message id.
        if session.chat_id is not None and session.cursor == 0:
            page = yield from turn._rest(
                build_get_messages(session.chat_id, limit=1), parse_get_messages
            )
            session.cursor = page.messages[0].id if page.messages else 0

        queued: QueuedSubmission | None = None
        own_prompt_unknown = False
        if isinstance(action, NewTurn):
            after_id, queued, own_prompt_unknown = yield from self._submit_prompt(action)
        else:
            yield from self._submit_results(action)
            after_id = session.cursor or None
        chat_id = self.chat_id
        assert chat_id is not None
        session.last_known_chat_id = chat_id

        translator = TurnTranslator(
            dynamic_tool_names=self.dynamic_tool_names,
            turn_cursor=after_id or 0,
            submitted_tool_call_ids=session.submitted_tool_call_ids,
            queued_submission=queued,
            own_prompt_unknown=own_prompt_unknown,
            chat_id=chat_id,
        )
        self.translator = translator
        stream = yield from self._acquire_stream(chat_id, after_id)
        return translator, stream

    def _close(self, translator: TurnTranslator, stream: SessionStream) -> SegmentOutcome:
        """After the read loop: G.3 post-loop, G.4: keep a healthy pause, close everything
        else; the segment's outcome, or its typed error."""
        turn = self.turn
        session = self.session
        chat_id = self.chat_id
        assert chat_id is not None
        retain = (
            translator.terminal_status == STATUS_REQUIRES_ACTION
            and translator.client_tool_call_seen
            and not translator.error_seen
            and not stream.ended
        )
        if retain:
            stream.pause(turn.now)
        else:
            session.release_stream(stream, turn.now)
        turn._check_interruptions()
        if (
            translator.terminal_status is None
            and not translator.error_seen
            and not translator.settled_by_promotion
        ):
            raise CoderChatError(
                STREAM_CLOSED_MESSAGE, kind="stream_closed", retryable=True, chat_id=chat_id
            )
        if translator.finish_reason() == "error" and not translator.error_seen:
            # D2: a status error without an error event fails with the server's default
            # payload: raised in generate mode, an error part before the finish in stream mode.
            if self.generate:
                raise translator.error_payload().to_exception(chat_id=chat_id)
            parts = translator.finish()
            parts.insert(
                len(parts) - 1, ErrorPart(error=translator.error_payload(), chat_id=chat_id)
            )
        else:
            parts = translator.finish()
        self._deliver(parts)
        finish = self.builder.finish
        assert finish is not None
        paused_for_tools = (
            translator.terminal_status == STATUS_REQUIRES_ACTION
            and translator.client_tool_call_seen
            and not translator.error_seen
        )
        return SegmentOutcome(
            step=self.builder.build(chat_id),
            pending_calls=translator.client_tool_calls if paused_for_tools else (),
            paused=retain,
            terminal_status=translator.terminal_status,
            chat_id=chat_id,
        )

    def _submit_prompt(
        self, action: NewTurn
    ) -> Wait[tuple[int | None, QueuedSubmission | None, bool]]:
        """D.2 for a new turn: create the chat, or post the message, or replace an earlier
        user message (an edit). Returns the dial cursor, the queued submission (E.1) and the
        D3 exemption flag."""
        turn = self.turn
        session = self.session
        config = session.config
        planned = input_parts(action.content)
        if not planned:
            raise CoderAgentError(EMPTY_CONTENT)
        if action.edit_message_id is not None and session.chat_id is None:
            raise CoderAgentError(NO_CHAT_TO_EDIT)
        model_config_id = yield from self._resolve_model()
        content = yield from self._upload(planned)
        if action.edit_message_id is not None:
            from .._rest.chat_extras import build_edit_chat_message, parse_edit_chat_message

            assert session.chat_id is not None
            # The edit runs the chat again from the replacement, whose id is new: the turn's
            # events are those past it (the edited message and what followed it are gone).
            request = build_edit_chat_message(
                session.chat_id,
                action.edit_message_id,
                content,
                model_config_id=model_config_id,
                reasoning_effort=config.reasoning_effort,
            )
            self.owns_run = True
            edited = yield from self._submission(turn._rest(request, parse_edit_chat_message))
            return edited.message.id, None, False
        if session.chat_id is None:
            organization_id = yield from self._organization()
            body = CreateChatRequest(
                organization_id=organization_id,
                content=content,
                client_type="api",
                system_prompt=system_prompt(config.instructions, self.messages),
                unsafe_dynamic_tools=self.tools,
                model_config_id=model_config_id,
                reasoning_effort=config.reasoning_effort,
                workspace_id=config.workspace_id,
                mcp_server_ids=config.mcp_server_ids,
                plan_mode=config.plan_mode,
            )
            request = build_create_chat(body)
            self.owns_run = True
            chat = yield from self._submission(turn._rest(request, parse_create_chat))
            self.created = True
            self.chat_id = chat.id
            session.chat_id = chat.id
            if session.on_chat_created is not None:
                session.on_chat_created(chat.id)
            if session.chat_gate is not None:
                # Only a ``Turn`` runs a segment; a gate's session is a turn's (``Turn`` is
                # above this module, so it is not named here).
                held: Any = turn
                yield from held.hold_chat(session.chat_gate, chat.id)
            if chat.status:
                session.last_status = chat.status
            if chat.workspace_id or chat.mcp_server_ids:
                self.effectful = True
            after = session.cursor
            # D3: a created chat's own prompt is the first user message past the cursor.
            return (after if after > 0 else None), None, True
        chat_id = session.chat_id
        request = build_create_chat_message(
            chat_id,
            CreateChatMessageRequest(
                content=content,
                model_config_id=model_config_id,
                reasoning_effort=config.reasoning_effort,
                busy_behavior=config.busy_behavior,
            ),
        )
        self.owns_run = True
        response = yield from self._submission(turn._rest(request, parse_create_chat_message))
        if response.message is not None:
            return response.message.id, None, False
        if response.queued:
            # E.1: dial from the pre-turn cursor, gated until our prompt materialises.
            self.queued_turn = True
            self.queued_entry = response.queued_message
            return (
                session.cursor or None,
                QueuedSubmission.from_entry(response.queued_message),
                False,
            )
        # K.13: neither message nor queued; the first user message past the cursor is ours.
        return session.cursor or None, None, True

    def _submit_results(self, action: Resume) -> Wait[None]:
        """H.1: post only the results not submitted yet (deduplicated by id), then record
        their ids; an empty fresh set posts nothing and the segment still streams."""
        session = self.session
        submitted = session.submitted_tool_call_ids
        fresh: dict[str, ToolResultInput] = {}
        for result in action.results:
            if result.tool_call_id not in submitted and result.tool_call_id not in fresh:
                fresh[result.tool_call_id] = result
        if not fresh:
            return
        chat_id = session.chat_id
        assert chat_id is not None
        request = build_submit_tool_results(chat_id, list(fresh.values()))
        yield from self._submission(self.turn._rest(request, parse_submit_tool_results))
        submitted = session.submitted_tool_call_ids
        if isinstance(submitted, set):
            submitted.update(fresh)
        else:  # the session's first submission
            session.submitted_tool_call_ids = set(fresh)

    def _submission(self, call: Wait[Any]) -> Wait[Any]:
        """Run a submission request; a 4xx answer means it was not applied (D4), so the run
        on the chat is not ours to interrupt."""
        try:
            return (yield from call)
        except CoderApiError as exc:
            if 400 <= exc.status <= 499:
                self.owns_run = False
            raise

    def _organization(self) -> Wait[str]:
        """The organization new chats, uploads and model listings use: the agent's own, else
        the client's default, asked of the deployment once (D33)."""
        given = self.session.config.organization_id
        if given is not None:
            return given
        return (yield from default_organization(self.turn))

    def _resolve_model(self) -> Wait[str | None]:
        """Wire 8, H.1: resolve the model hint once per session (cached even when nothing
        matches, in which case the server's default model is used)."""
        session = self.session
        if session.model_resolved:
            return session.model_config_id
        from .._rest.model_hints import (
            ModelConfigs,
            ModelConfigsExchange,
            is_model_config_uuid,
            resolve_model_hint,
        )

        hint = session.config.model
        value: str | None
        if hint is None:
            value = None
        elif is_model_config_uuid(hint):
            value = hint
        else:
            organization_id = yield from self._organization()
            exchange = ModelConfigsExchange(organization_id, op="resolve_model_config_id")
            call = self.turn._begin_exchange(exchange)

            def configs(outcome: Any) -> Any:
                assert isinstance(outcome, ModelConfigs)
                return outcome.configs

            listing = yield from self.turn._await_call(call, configs)
            value = resolve_model_hint(hint, listing)
            if value is None:
                logger.warning("model hint %r matched no model config; using the default", hint)
        session.model_resolved = True
        session.model_config_id = value
        return value

    def _upload(self, planned: list[Any]) -> Wait[tuple[ChatInputPart, ...]]:
        """P.3: upload every file with bytes, concurrently, and splice the returned ids in.
        Every upload request is validated before any is sent (wire 7)."""
        turn = self.turn
        uploads = [item for item in planned if isinstance(item, PendingUpload)]
        if not uploads:
            return tuple(planned)
        organization_id = yield from self._organization()
        requests = [
            build_upload_chat_file(
                organization_id,
                item.file.data or b"",
                media_type=item.file.media_type or "",
                filename=item.file.filename,
            )
            for item in uploads
        ]
        calls = [turn._begin_call(r) for r in requests]
        file_ids: list[str] = []
        try:
            for call in calls:
                file_id = yield from turn._await_call(call, turn._completed(parse_upload_chat_file))
                self.uploaded = True
                self.effectful = True
                file_ids.append(file_id)
        finally:
            for call in calls:
                turn._abandon(call)
        ids = iter(file_ids)
        return tuple(
            FileInput(next(ids)) if isinstance(item, PendingUpload) else item for item in planned
        )

    def _acquire_stream(self, chat_id: str, after_id: int | None) -> Wait[SessionStream]:
        """G.4: a resume attaches the paused stream of its chat (keeping its reader and dial
        cursor); anything else closes a retained stream and dials fresh, preflighting the
        prefix first when it is still unknown (wire 1.5)."""
        turn = self.turn
        session = self.session
        retained = session.retained_stream
        if (
            isinstance(self.action, Resume)
            and retained is not None
            and retained.can_attach(chat_id)
        ):
            retained.attach()
            self.stream = retained
            self.acquired = True
            return retained
        if retained is not None:
            session.release_stream(retained, turn.now)
        selector = session.selector
        prefix = selector.prefix
        if prefix is None:
            call = turn._begin_call(selector.preflight_request("stream_events"))
            prefix = yield from turn._await_call(call, selector.preflight_result)
        stream = session.open_stream(
            chat_id=chat_id, prefix=prefix, after_id=after_id, now=turn.now
        )
        self.stream = stream
        self.acquired = True
        return stream

    # -- the read loop (G.3) -----------------------------------------------------------------

    def _read_loop(self, translator: TurnTranslator, stream: SessionStream) -> Wait[None]:
        # Only a ``Turn`` runs a segment, and its read loop marks it ``quiet`` (``Turn`` is
        # above this module, so it is not named here).
        turn: Any = self.turn
        events = stream.events
        # ``stream.ended`` without the stream in between: its reader is fixed for its life.
        reader = stream.reader
        peek = deque.__getitem__
        ingest_run = translator.ingest_run
        since_requires_action = 0
        grace_at: float | None = None
        recovery: _Call | None = None
        recovery_attempted = False
        # Since the last wait, nothing but runs of live deltas was taken (``Turn.quiet``).
        quiet = False
        try:
            while True:
                awaiting = (
                    translator.terminal_status == STATUS_REQUIRES_ACTION
                    and not translator.client_tool_call_seen
                )
                if not awaiting and (grace_at is not None or recovery_attempted):
                    # The requires_action was stale (a non-terminal status cleared it): re-arm.
                    quiet = False
                    grace_at = None
                    turn._set_timer(_GRACE_TIMER, None)
                    if recovery is not None:
                        turn._abandon(recovery)
                        recovery = None
                    recovery_attempted = False
                    since_requires_action = 0
                if awaiting and not recovery_attempted and grace_at is None:
                    quiet = False
                    grace_at = turn.now + ACTION_REQUIRED_GRACE
                    turn._set_timer(_GRACE_TIMER, grace_at)
                if events:
                    if translator.terminal_status is None and not translator.gated:
                        # The hot path: a run of live deltas. A message part cannot settle,
                        # pause, fail or gate a live segment (A.3-A.8), so the run at the
                        # front of the queue is translated in one go and delivered at once
                        # (read where it waits in the reader's queue: no event built for a
                        # delta translated). No run when another event heads the queue:
                        # that event takes the way below, as does one a run stopped at.
                        run = ingest_run(events)
                        if run or not events or type(peek(events, 0)) in DELTA_TYPES:
                            self._deliver(run)
                            continue
                    quiet = False
                    event = events.popleft()
                elif reader.done:
                    failure = stream.failure
                    if failure is not None:
                        raise failure
                    return  # closed underneath (H.6): the post-loop decides
                elif awaiting and grace_at is not None and turn.now >= grace_at:
                    quiet = False
                    grace_at = None
                    turn._set_timer(_GRACE_TIMER, None)
                    recovery_attempted = True
                    recovery = turn._begin_call(
                        build_get_messages(self.chat_id or "", limit=RECOVERY_PAGE_SIZE)
                    )
                    continue
                elif awaiting and recovery is not None and recovery.outcome is not None:
                    quiet = False
                    recovered = self._recovered(recovery, translator)
                    recovery = None
                    parts: list[OutputPart] = []
                    for item in recovered:
                        parts += translator.ingest(item)
                        if translator.dead_end is not None:  # pragma: no cover - never gated here
                            raise translator.dead_end
                    self._deliver(parts)
                    if translator.client_tool_call_seen:
                        return
                    continue
                else:
                    # ``turn._wait()`` inline: an open, idle chat waits here, and a generator
                    # of its own would stay suspended (and allocated) the whole time. Nor
                    # does it keep empty queues (an empty deque keeps a block of 64 slots):
                    # the turn's parts once its consumer took them all, and the reader's
                    # events once something else than live deltas came (the stream may stay
                    # quiet now; in full flow, the reader keeps its queue). The next part or
                    # event makes a fresh one.
                    if not turn.parts:
                        turn.parts = NO_PARTS
                    if not quiet:
                        reader.release_events()
                        events = reader.events  # the queue let go is not held here either
                    turn.quiet = quiet
                    yield
                    turn.quiet = False
                    quiet = True
                    events = reader.events
                    turn._check_interruptions()
                    continue

                parts = self._ingest(translator, event)
                if type(event) is ErrorEvent and translator.error_seen:
                    # The error peek (G.3.9, D2): a status batched behind the error counts.
                    while events and translator.terminal_status is None:
                        parts += self._ingest(translator, events.popleft())
                elif (
                    type(event) is StatusEvent
                    and translator.terminal_status == STATUS_ERROR
                    and not translator.error_seen
                ):
                    # D2: the error event follows its status in the same batch.
                    while events and not translator.error_seen:
                        parts += self._ingest(translator, events.popleft())
                self._deliver(parts)
                if translator.settled_by_promotion:
                    return
                status = translator.terminal_status
                if status is not None:
                    if status != STATUS_REQUIRES_ACTION or translator.client_tool_call_seen:
                        return
                    since_requires_action += 1
                    if since_requires_action > REQUIRES_ACTION_SAFETY_VALVE:
                        logger.warning(
                            "chat %s paused for client tools but no tool calls arrived within "
                            "%d events; giving up waiting",
                            self.chat_id,
                            REQUIRES_ACTION_SAFETY_VALVE,
                        )
                        return
        finally:
            turn._set_timer(_GRACE_TIMER, None)
            if recovery is not None:
                turn._abandon(recovery)

    def _ingest(self, translator: TurnTranslator, event: StreamEvent) -> list[OutputPart]:
        if type(event) is StatusEvent:
            self.session.last_status = event.status
        parts = translator.ingest(event)
        if translator.dead_end is not None:
            raise translator.dead_end
        return parts

    def _recovered(self, call: _Call, translator: TurnTranslator) -> list[StreamEvent]:
        """G.5: the recovery's synthetic events; a failed fetch recovers nothing."""
        outcome = call.outcome
        try:
            if isinstance(outcome, Failed):
                raise outcome.error
            assert isinstance(outcome, Completed)
            page = parse_get_messages(outcome.request, outcome.response)
            return recover_pending_calls(
                page.messages,
                turn_cursor=translator.turn_cursor,
                dynamic_tool_names=self.dynamic_tool_names,
                submitted_tool_call_ids=self.session.submitted_tool_call_ids,
                chat_id=self.chat_id or "",
            )
        except (CoderAgentError, RecursionError, TypeError, ValueError) as exc:
            logger.info(
                "recovering the pending tool calls of chat %s failed: %s", self.chat_id, exc
            )
            return []

    def _deliver(self, parts: list[OutputPart]) -> None:
        """Record parts in the step, hand them to a stream consumer, and raise the first
        error part in generate mode (G.6)."""
        if not parts:
            return
        error = self.builder.add_all(parts, stop_at_error=self.generate)
        if error is not None:
            if self.generate:
                raise error.exception()
            if self.settle_error is None:
                self.settle_error = error.exception()
        hand_on = self._hand_on
        if hand_on is None:
            # Straight into the turn's ``parts``, with no call of its own per delivery; a
            # fresh deque when the turn holds none (the read loop let an empty one go).
            turn: Any = self.turn
            queue = turn.parts
            if queue is NO_PARTS:
                turn.parts = deque(parts)
            else:
                queue.extend(parts)
        else:
            hand_on(parts)

    # -- errors and teardown -----------------------------------------------------------------

    def _target(self) -> str | None:
        """G.6: the turn's chat id once known, else the session's."""
        return self.chat_id or self.session.chat_id

    def _classify(self, exc: CoderAgentError) -> CoderAgentError:
        """C.4/C.5: how a reader failure surfaces; every other error passes through."""
        stream = self.stream
        if stream is None or exc is not stream.failure:
            return exc
        if isinstance(exc, CoderStreamError):
            return self._stream_error(exc)
        if not isinstance(exc, CoderApiError):
            # An unparseable frame, or any other bare agent error from the reader (C.4).
            error = CoderChatError(
                STREAM_FAILED_PREFIX + exc.message,
                kind="stream_closed",
                retryable=True,
                chat_id=self._target(),
            )
            error.__cause__ = exc
            return error
        return exc  # a terminal upgrade rejection passes through (C.4)

    def _stream_error(self, error: CoderStreamError) -> CoderStreamError:
        """C.5: stamp the chat id; a fresh chat is stranded and discarded; only a fresh chat
        without external effects stays retryable."""
        if not error.chat_id:
            error.chat_id = self.chat_id
        if self.created and self.chat_id is not None:
            self.session.add_stranded(self.chat_id)
            self.discard = True
        if self.created and not self.effectful:
            return error
        reason = _EFFECTFUL_REASON if self.created else _PRIOR_STATE_REASON
        downgraded = CoderStreamError(
            f"{error.message}; automatic retry is disabled because {reason}",
            url=error.url,
            chat_id=error.chat_id,
            retryable=False,
            reason=error.reason,
        )
        downgraded.__cause__ = error
        return downgraded

    def _teardown_plan(self, *, abort: bool) -> tuple[str, str | None]:
        """E.5 with D3, D4, D9: what an ending segment does to the server. ``run`` asks once
        per segment, on exactly one of its exits (J.20)."""
        translator = self.translator
        if not abort and translator is not None and translator.settled:
            return "none", None
        target = self._target()
        plan = teardown_action(
            queued_turn=self.queued_turn,
            gate_up=translator.gated if translator is not None else None,
            queued_entry_id=self.queued_entry.id if self.queued_entry is not None else None,
            chat_id=target,
        )
        if plan == "interrupt" and not self.owns_run:
            # Nothing of ours runs: no submission was sent, or it was refused with a 4xx.
            return "none", None
        return plan, target

    def _teardown(self, *, abort: bool) -> Wait[None]:
        """Interrupt (fire-and-forget) or withdraw (awaited, so the error can record the D9
        outcome, bounded at 10 s)."""
        plan, target = self._teardown_plan(abort=abort)
        if plan == "none" or target is None:
            return
        self.teardown_fired = True
        if plan == "interrupt":
            self._fire_interrupt(target)
            return
        assert self.queued_entry is not None
        turn = self.turn
        self.withdrawn = yield from withdraw_queued(
            turn, target, self.queued_entry.id, deadline=turn.now + BACKGROUND_TASK_BOUND
        )

    def _teardown_in_background(self, *, abort: bool) -> None:
        """Cancellation (D22) and clean endings: both the interrupt and the withdrawal run in
        the background."""
        plan, target = self._teardown_plan(abort=abort)
        if plan == "none" or target is None:
            return
        self.teardown_fired = True
        if plan == "interrupt":
            self._fire_interrupt(target)
            return
        assert self.queued_entry is not None
        job = WithdrawJob(self.session.selector, target, self.queued_entry.id, now=self.turn.now)
        self.turn._emit(RunInBackground(job=job))

    def _fire_interrupt(self, target: str) -> None:
        job = InterruptJob(
            self.session.selector, target, now=self.turn.now, last_status=self.session.last_status
        )
        self.turn._emit(RunInBackground(job=job))

    def _final_cleanup(self, failure: BaseException | None, outcome: SegmentOutcome | None) -> None:
        """G.2 "final cleanup (always)": advance the cursor, close an undecided stream, close
        a predecessor's paused stream when none was acquired, discard a stranded fresh chat,
        and emit ``segment:settle``."""
        session = self.session
        now = self.turn.now
        translator = self.translator
        if translator is not None:
            session.advance_cursor(translator.max_message_id)
        stream = self.stream
        if stream is not None and outcome is None:
            session.release_stream(stream, now)
        if not self.acquired:
            retained = session.retained_stream
            if retained is not None and not retained.attached:
                session.release_stream(retained, now)
        if self.discard:
            self.turn._emit_all(session.reset_session(now))
        self._emit_settle(failure, outcome)

    def _emit_settle(self, failure: BaseException | None, outcome: SegmentOutcome | None) -> None:
        sink = self.session.sink
        if not sink.enabled or self.number is None:
            return
        finish = self.builder.finish
        failed = self.settle_error if self.settle_error is not None else failure
        status: str | None = None
        finish_reason: str | None = None
        if finish is not None:
            status = finish.raw_finish_reason
            if failed is None:
                finish_reason = finish.finish_reason
        elif self.translator is not None and failed is not None:
            status = self.translator.terminal_status
        # A consumer teardown (cancelled without a reason) settles with neither (wire 11).
        error = None
        if failed is not None:
            error = {"name": type(failed).__name__, "message": str(failed)}
        sink.emit(
            SegmentSettleEvent(
                segment=self.number,
                duration=max(self.turn.now - self.started_at, 0.0),
                chat_id=self.chat_id or self.session.chat_id,
                reader=self.stream.reader_id if self.stream is not None else None,
                status=status,
                finish_reason=finish_reason,
                error=error,
                timestamp=sink.now(),
            )
        )
