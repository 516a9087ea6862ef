"""A whole agent turn: segments and the client-tool loop (state machines F.5, G;
D5, D6, D7, D17, D22; wire 5 "stream lifetime").

A ``Turn`` is the machine an adapter drives for one ``generate()`` or ``stream()`` call. It
runs a segment (``coder_proto._agent.segment``); when the run pauses for client tools it asks the
adapter to run them (``RunTools``), submits their results (D5) and resumes on the same stream,
until the run settles, the step limit is reached (D7) or something fails. Usage is summed over
the segments (F.5, D17).

The adapter's loop, whatever the runtime::

    turn = session.generate(prompt, now=clock())        # or session.stream(...)
    while not turn.done:
        for action in turn.actions():
            perform(action)         # SendRequest, Open/Send/CloseConnection, RunTools,
                                    # RunInBackground, CancelRequest
        deliver(turn.parts)         # stream mode: output parts, live
        wait for an outcome or until turn.next_deadline(), then feed it:
            turn.response_received(...) / request_failed / connection_made / data_received /
            connection_lost / connection_failed / tool_results / tick
    perform(turn.actions()); deliver(turn.parts)
    return turn.result()            # the TurnResult, or raises the typed error

On its own cancellation the adapter calls ``turn.cancel(now, reason)``, performs the actions
that follow (a background interrupt or withdrawal, closing the socket) and re-raises its native
cancellation (D22).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._actions import Action, RunInBackground, RunTools, ToolOutcome
from .._constants import BACKGROUND_TASK_BOUND, REQUIRES_ACTION_DEADLINE, STATUS_REQUIRES_ACTION
from .._engine import Cancelled, CoreMachine, Wait
from .._errors import CoderAgentError, CoderChatError, CoderStreamError
from .._jobs.stopping import InterruptJob, interrupt_chat
from .._json import dumps
from .._outputs import OutputPart, Source, ToolCall, ToolResult, Usage
from .._rest.routes import check_positive_id
from .._stream.usage import sum_usage
from .._wire.chats import DynamicTool, ToolResultInput
from .prompt import Message, NewTurn, Noop, Resume, classify_prompt, normalize_prompt
from .segment import NO_PARTS, NOOP_PROMPT, Segment, StepResult
from .session_state import ChatGate

if TYPE_CHECKING:
    from .session_state import SessionState

__all__ = [
    "MISSING_RESULT_MESSAGE",
    "StepResult",
    "Turn",
    "TurnResult",
    "normalize_outcomes",
]

logger = logging.getLogger("coder_proto")

#: The error result submitted for a pending call the adapter reported no outcome for (D5).
MISSING_RESULT_MESSAGE: Final = "the client reported no result for this tool call"
EDIT_NEEDS_USER_MESSAGE: Final = "an edit replaces a user message: its prompt must end with one"
_TOOL_WARN_TIMER: Final = "tool-deadline-warning"


def _drop_parts(parts: list[OutputPart]) -> None:
    """A generate turn's hand-off: its parts live in its steps only."""


@attrs.frozen(kw_only=True)
class TurnResult:
    """What a turn produced.

    ``text``, ``reasoning``, ``tool_calls``, ``tool_results``, ``finish_reason`` and
    ``provider_metadata`` describe the final step (as the AI SDK reports them); ``steps`` holds
    every step (one per segment); ``usage`` is the whole turn's usage, summed over the steps
    (F.5, D17); ``sources`` are every step's sources. ``unexecuted_tool_calls`` lists the
    client calls left unexecuted when the step limit stopped the loop (D7). ``settled_by`` is
    ``"promotion"`` when another prompt's promotion settled the turn (D3). ``chat_id`` is the
    chat the turn ran on; ``last_seen_message_id`` the session's cursor after it. ``error``
    is the run's error when the final step finished with reason ``error`` (stream mode; in
    generate mode that error is raised instead).
    """

    text: str
    reasoning: str = ""
    steps: tuple[StepResult, ...] = ()
    usage: Usage = attrs.field(factory=Usage)
    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    unexecuted_tool_calls: tuple[ToolCall, ...] = ()
    sources: tuple[Source, ...] = ()
    settled_by: str | None = None
    provider_metadata: dict[str, Any] | None = None
    chat_id: str | None = None
    last_seen_message_id: int | None = None
    error: CoderChatError | None = attrs.field(default=None, eq=False)


def _json_ready(output: Any) -> bool:
    try:
        dumps(output)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def normalize_outcomes(
    calls: Sequence[ToolCall], outcomes: Sequence[ToolOutcome]
) -> tuple[ToolOutcome, ...]:
    """D5: exactly one outcome per call, in the calls' order, deduplicated by id (the first
    reported outcome wins; outcomes for other ids are ignored). A call without an outcome, or
    whose output is not JSON, gets an error result with a string message."""
    by_id: dict[str, ToolOutcome] = {}
    for item in outcomes:
        if isinstance(item, ToolOutcome) and item.tool_call_id not in by_id:
            by_id[item.tool_call_id] = item
    out: list[ToolOutcome] = []
    seen: set[str] = set()
    for call in calls:
        if call.tool_call_id in seen:
            continue
        seen.add(call.tool_call_id)
        reported = by_id.get(call.tool_call_id)
        if reported is None:
            outcome = ToolOutcome(
                tool_call_id=call.tool_call_id, output=MISSING_RESULT_MESSAGE, is_error=True
            )
        elif not _json_ready(reported.output):
            outcome = ToolOutcome(
                tool_call_id=call.tool_call_id,
                output=f"the output of tool {call.tool_name!r} is not JSON-serializable",
                is_error=True,
            )
        else:
            outcome = attrs.evolve(reported, is_error=reported.is_error is True)
        out.append(outcome)
    return tuple(out)


class Turn(CoreMachine[TurnResult]):
    """One ``generate()`` / ``stream()`` call (or, with ``single_segment``, one model round
    trip). Create it through ``Session.generate`` / ``stream`` / ``segment``."""

    __slots__ = (
        "_edit_message_id",
        "_held",
        "_held_error",
        "_messages",
        "_outcomes",
        "_pending_tools",
        "mode",
        "parts",
        "quiet",
        "segment",
        "session",
        "single_segment",
        "steps",
        "tools",
        "warnings",
    )

    def __init__(
        self,
        session: SessionState,
        prompt: object,
        *,
        now: float,
        mode: str = "generate",
        tools: Sequence[DynamicTool] | None = None,
        single_segment: bool = False,
        warnings: Sequence[str] = (),
        edit_message_id: int | None = None,
    ) -> None:
        if mode not in ("generate", "stream"):
            raise CoderAgentError(f'mode must be "generate" or "stream", got {mode!r}')
        messages = normalize_prompt(prompt)
        if edit_message_id is not None:
            check_positive_id(edit_message_id, "edit_message_id")
        self._edit_message_id = edit_message_id
        super().__init__(session.selector)
        self.session = session
        self.mode = mode
        self.single_segment = single_segment
        self.tools: tuple[DynamicTool, ...] = (
            tuple(tools) if tools is not None else session.config.tools
        )
        self.warnings = tuple(warnings)
        #: Output parts for a stream consumer, in order (stream mode only); drain them live,
        #: reading ``parts`` anew after each step: an idle turn lets an empty deque go
        #: (``NO_PARTS``, shared, stands for it) and makes a fresh one for the next part.
        self.parts: deque[OutputPart] = NO_PARTS
        #: The turn waits in a segment's read loop and its last step only delivered parts
        #: of live deltas: it has no new action or deadline (``Connection.socket_data``).
        self.quiet = False
        self.steps: list[StepResult] = []
        #: The segment running now, or the last one (for observability and tests).
        self.segment: Segment | None = None
        self._messages: tuple[Message, ...] = messages
        self._pending_tools: tuple[ToolCall, ...] | None = None
        self._outcomes: tuple[ToolOutcome, ...] | None = None
        #: The chat gate's store call the turn waits for (``hold_chat``), and its error.
        self._held: int | None = None
        self._held_error: BaseException | None = None
        session.in_flight = self
        self._start(now)

    def __repr__(self) -> str:
        state = "done" if self.done else "running"
        return f"Turn(mode={self.mode!r}, steps={len(self.steps)}, {state})"

    # -- inputs beyond the engine's ------------------------------------------------------------

    @property
    def awaiting_tools(self) -> tuple[ToolCall, ...] | None:
        """The calls of the outstanding ``RunTools`` action, if any."""
        return self._pending_tools

    def tool_results(self, outcomes: Sequence[ToolOutcome], now: float) -> None:
        """The outcomes of the calls of the outstanding ``RunTools`` (D5: one per call; a
        missing one becomes an error result). Ignored when no tools are being run."""
        if self._pending_tools is not None and self._outcomes is None:
            if isinstance(outcomes, ToolOutcome):
                outcomes = (outcomes,)
            self._outcomes = normalize_outcomes(self._pending_tools, list(outcomes))
        self._step(now)

    @property
    def store(self) -> Any:
        """The performer of the chat gate's store call (``ApplyStore``'s runner)."""
        gate = self.session.chat_gate
        assert gate is not None  # only a turn held by a gate makes a store call
        return gate.store

    def store_result(self, call_id: int, value: Any, now: float) -> None:
        """The chat gate's store call ``call_id`` answered (``hold_chat``)."""
        self._store_answered(call_id, None, now)

    def store_failed(self, call_id: int, error: BaseException, now: float) -> None:
        """The chat gate's store call ``call_id`` raised ``error`` (the gate hears it; the
        turn goes on)."""
        self._store_answered(call_id, error, now)

    def connection_made(self, conn_id: int, now: float) -> None:
        self.session.connection_made(conn_id, now)
        self._step(now)

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        self.session.connection_failed(conn_id, message, now)
        self._step(now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self.session.data_received(conn_id, data, now)
        self._step(now)

    def connection_lost(self, conn_id: int, now: float) -> None:
        self.session.connection_lost(conn_id, now)
        self._step(now)

    def tick(self, now: float) -> None:
        self.session.tick(now)
        self._step(now)

    def actions(self) -> list[Action]:
        out = super().actions()
        out.extend(self.session.actions())
        return out

    def next_deadline(self) -> float | None:
        if self._finished:
            return None
        own = super().next_deadline()
        streams = self.session.next_deadline()
        if own is None:
            return streams
        return own if streams is None else min(own, streams)

    # -- the turn ---------------------------------------------------------------------------

    def hold_chat(self, gate: ChatGate, chat_id: str) -> Wait[None]:
        """D28: the fresh chat ``chat_id`` was created; nothing else happens on it (no
        message, no stream, not even a cancellation's interrupt) until the gate's store
        write answered. The wait is not interruptible: a cancellation or the turn's abort
        deadline (its timer set aside meanwhile) is taken once the write answered, so the
        write never lands after the turn ended."""
        op = gate.hold(chat_id)
        if op is None:
            return
        call_id = self._held = next(self._request_ids)
        self._held_error = None
        abort, self._abort_deadline = self._abort_deadline, None
        # The gate's store call extends the action vocabulary for its write only.
        outbox: list[Any] = self._outbox
        outbox.append(gate.store_call(call_id, op))
        while self._held is not None:
            yield
        self._abort_deadline = abort
        if self._held_error is not None:
            gate.failed(chat_id, self._held_error)
            self._held_error = None
        self._check_interruptions()

    def _store_answered(self, call_id: int, error: BaseException | None, now: float) -> None:
        # A turn makes one store call at a time and waits for it: this is the held one.
        self._held = None
        self._held_error = error
        self._step(now)

    def _hand_off(self) -> Callable[[list[OutputPart]], None] | None:
        """Where the turn's parts go as they are produced: ``None`` for a stream turn, whose
        segment puts them straight into ``parts``, the deque a stream consumer drains, with
        no step or call of the turn's own in between; a generate turn keeps them only in its
        steps."""
        if self.mode == "stream":
            return None
        return _drop_parts

    def _put_parts(self, parts: list[OutputPart]) -> None:
        """Into ``parts`` (as a segment puts them), a fresh deque when the turn holds none."""
        queue = self.parts
        if queue is NO_PARTS:
            self.parts = deque(parts)
        else:
            queue.extend(parts)

    def _deliver(self, parts: list[OutputPart]) -> None:
        (self._hand_off() or self._put_parts)(parts)

    def _run(self) -> Generator[None, None, TurnResult]:
        """The turn: its loop as it is, or wrapped in the retry of ``_retrying`` when a
        failure may be retried (a generate turn with ``max_retries``). Every open turn keeps
        the frames of its generators while it waits, so a turn that cannot retry (every
        stream turn, every turn by default) runs its loop without the wrapper's frame."""
        if self.mode == "generate" and self.session.config.max_retries:
            return self._retrying()
        return self._loop()

    def _retrying(self) -> Generator[None, None, TurnResult]:
        """The turn, retried on C.5: a retryable ``CoderStreamError`` (a fresh chat without
        external effects lost its stream; the session was discarded) is retried on a fresh
        chat, up to ``max_retries`` times, in generate mode only (a stream consumer already saw
        parts)."""
        attempt = 0
        while True:
            try:
                return (yield from self._loop())
            except CoderStreamError as exc:
                retries = self.session.config.max_retries
                if not exc.retryable or attempt >= retries:
                    raise
                attempt += 1
                logger.warning(
                    "retrying the turn on a fresh chat after a stream failure (%d/%d): %s",
                    attempt,
                    retries,
                    exc,
                )
                self.steps = []

    def _finish(self, *, value: Any = None, error: BaseException | None) -> None:
        # The session takes another turn once this one is over, however it ended.
        if self.session.in_flight is self:
            self.session.in_flight = None
        super()._finish(value=value, error=error)

    def _loop(self) -> Wait[TurnResult]:
        action = classify_prompt(self._messages)
        if isinstance(action, Noop):
            raise CoderAgentError(NOOP_PROMPT)
        if self._edit_message_id is not None:
            if not isinstance(action, NewTurn):
                raise CoderAgentError(EDIT_NEEDS_USER_MESSAGE)
            action = attrs.evolve(action, edit_message_id=self._edit_message_id)
        session = self.session
        max_steps = session.config.max_steps
        first = True
        while True:
            segment = Segment(
                self,
                action,
                session=self.session,
                mode=self.mode,
                deliver=self._hand_off(),
                messages=self._messages,
                tools=self.tools,
                warnings=self.warnings if first else (),
            )
            first = False
            self.segment = segment
            outcome = yield from segment.run()
            self.steps.append(outcome.step)
            if self.single_segment:
                return self._result()
            calls = outcome.pending_calls
            if not calls:
                if (
                    outcome.terminal_status == STATUS_REQUIRES_ACTION
                    and outcome.step.finish_reason == "tool-calls"
                    and outcome.chat_id is not None
                ):
                    # The pause's calls never arrived (the valve): do not strand the chat (D7).
                    yield from self._stop_paused_chat(outcome.chat_id)
                return self._result()
            assert outcome.chat_id is not None
            if len(self.steps) >= max_steps:
                # D7: the limit is checked before running a new pause's tools.
                yield from self._stop_paused_chat(outcome.chat_id)
                return self._result(unexecuted=calls)
            try:
                outcomes = yield from self._run_tools(calls)
            except Cancelled:
                self._abandon_pause(outcome.chat_id)
                raise
            self._record_outcomes(calls, outcomes)
            action = Resume(
                tuple(
                    ToolResultInput(
                        tool_call_id=o.tool_call_id, output=o.output, is_error=o.is_error
                    )
                    for o in outcomes
                )
            )

    def _run_tools(self, calls: tuple[ToolCall, ...]) -> Wait[tuple[ToolOutcome, ...]]:
        """Ask the adapter to run the pause's client calls; warn when they run past the
        server's requires_action deadline (D6)."""
        self._pending_tools = calls
        self._outcomes = None
        self._emit(RunTools(calls=calls))
        warn_at = self.now + REQUIRES_ACTION_DEADLINE
        self._set_timer(_TOOL_WARN_TIMER, warn_at)
        try:
            while self._outcomes is None:
                if self.now >= warn_at and _TOOL_WARN_TIMER in self._timers:
                    self._set_timer(_TOOL_WARN_TIMER, None)
                    logger.warning(
                        "client tools have run for more than %.0f s: the server cancels pending "
                        "tool calls after that, and the late results will be refused",
                        REQUIRES_ACTION_DEADLINE,
                    )
                yield from self._wait()
            return self._outcomes
        finally:
            self._set_timer(_TOOL_WARN_TIMER, None)
            self._pending_tools = None

    def _record_outcomes(
        self, calls: tuple[ToolCall, ...], outcomes: tuple[ToolOutcome, ...]
    ) -> None:
        names = {c.tool_call_id: c.tool_name for c in calls}
        results = tuple(
            ToolResult(
                tool_call_id=o.tool_call_id,
                tool_name=names.get(o.tool_call_id, ""),
                result=o.output,
                is_error=o.is_error,
                dynamic=False,
            )
            for o in outcomes
        )
        last = self.steps[-1]
        self.steps[-1] = attrs.evolve(last, tool_results=last.tool_results + results)
        # A stream consumer sees each client tool's outcome right after the calls it answers,
        # before the next segment's parts (as the AI SDK's tool loop streams them).
        self._deliver(list(results))

    def _stop_paused_chat(self, chat_id: str) -> Wait[None]:
        """D7: close the paused stream and interrupt the chat (with D4's follow-up), bounded at
        10 s; a failure is logged, never raised (the turn still returns its result)."""
        session = self.session
        retained = session.retained_stream
        if retained is not None and not retained.attached:
            session.release_stream(retained, self.now)
        try:
            chat = yield from interrupt_chat(
                self,
                chat_id,
                last_status=STATUS_REQUIRES_ACTION,
                deadline=self.now + BACKGROUND_TASK_BOUND,
            )
            session.last_status = chat.status
        except (CoderAgentError, TimeoutError) as exc:
            logger.warning("could not interrupt the paused chat %s: %s", chat_id, exc)
        except Cancelled:
            # Never wait on the caller's cancellation, but never strand the chat either.
            self._abandon_pause(chat_id)
            raise

    def _abandon_pause(self, chat_id: str) -> None:
        """Cancelled while client tools ran: close the paused stream and interrupt the chat in
        the background (D4's follow-up included), never waiting (D22)."""
        session = self.session
        retained = session.retained_stream
        if retained is not None and not retained.attached:
            session.release_stream(retained, self.now)
        job = InterruptJob(
            session.selector, chat_id, now=self.now, last_status=STATUS_REQUIRES_ACTION
        )
        self._emit(RunInBackground(job=job))

    def _result(self, *, unexecuted: tuple[ToolCall, ...] = ()) -> TurnResult:
        steps = tuple(self.steps)
        last = steps[-1]
        sources: dict[str, Source] = {}
        for step in steps:
            for source in step.sources:
                sources.setdefault(source.id, source)
        return TurnResult(
            text=last.text,
            reasoning=last.reasoning,
            steps=steps,
            usage=sum_usage(step.usage for step in steps),
            finish_reason=last.finish_reason,
            raw_finish_reason=last.raw_finish_reason,
            tool_calls=last.tool_calls,
            tool_results=last.tool_results,
            unexecuted_tool_calls=unexecuted,
            sources=tuple(sources.values()),
            settled_by=last.settled_by,
            provider_metadata=last.provider_metadata,
            chat_id=last.chat_id,
            last_seen_message_id=self.session.last_seen_message_id,
            error=last.error,
        )
