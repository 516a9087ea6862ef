"""Recovery before resubmitting: the settle-wait, ledger reconciliation and result recovery
(docs/durable-workflows.md: "Recover after a crash", "Make client tools crash-safe", "Recover the
result before resubmitting"; D1, D4, D26).

``Recovery`` runs on a checkpointed chat before a step sends its prompt, and answers one
question: did an earlier attempt of this step already finish (return its result), or must the
step resubmit (and is the chat settled so that it may)? Branch by branch, as the guide:

1. Probe the chat's status, the journal entry and the step's committed attempts (history
   newest-first). The entry applies only while its marker and attempt count still match.
2. ``requires_action``: a client tool crashed mid-execution; the pause is the only record of
   its effects. Reconcile it, never interrupt it away (``reconcile`` below). Otherwise a
   journaled ``resumed`` lets the revived run finish; a journaled ``cut-short`` re-drives its
   interrupt (a 409 means it already settled). Anything else is interrupted: a 409 means
   nothing was running, and "never cut short" holds only if the probe did not see
   ``interrupting``.
3. A matching ``submitting`` entry means the crashed attempt's send may still land: sleep out
   what remains of its commit window (wall clock: the window is anchored at the entry's
   write time), recount, and pin ``cut_short`` when an unlanded send sits over an existing
   attempt.
4. Poll the chat on the turn scale until it is settled (D1); a ``requires_action`` seen while
   not cut short is a stable pause (the revived run called a new client tool): reconcile
   again.
5. Read history again: the step finished when its prompt is the chat's newest user message,
   nothing cut it short and the chat is ``waiting`` or ``completed``. Then the result is
   recovered (the final step's text after the last configured client tool, or the newest
   valid structured-output filing); otherwise the step resubmits.

``reconcile`` (D26): the pending calls come from committed history; the ledger holds the
verdict on each: ``done`` submits the recorded output, ``committing`` re-drives the tool with
the same idempotency key (a ``RunTools`` action: the adapter runs the tool the live loop would
run), no entry gets the error result ``NOT_EXECUTED_MESSAGE``. One batch verdict is journaled
first (``cut-short`` when any call was unstarted, else ``resumed``), then one complete result
set is submitted (unless every call was unstarted), then, if a call was unstarted, the chat is
interrupted with D4's follow-up.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Generator
from typing import Any, Final, Protocol

import attrs

from .._actions import ToolOutcome
from .._constants import (
    INTERRUPT_POLL_INTERVAL,
    INTERRUPT_WAIT_TIMEOUT,
    RECOVERY_PAGE_SIZE,
    SETTLED_STATUSES,
    STATUS_COMPLETED,
    STATUS_ERROR,
    STATUS_INTERRUPTING,
    STATUS_PAUSED,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
    STATUS_WAITING,
)
from .._engine import Wait
from .._errors import CoderAgentError, CoderApiError
from .._jobs.stopping import interrupt_chat
from .._outputs import ToolCall
from .._rest.prefix import PrefixSelector
from .._rest.routes import (
    build_get_chat,
    build_get_messages,
    build_submit_tool_results,
    parse_get_chat,
    parse_get_messages,
    parse_submit_tool_results,
)
from .._wire.chats import Chat, ToolResultInput
from .._wire.messages import ChatError
from ._errors import RecoveryError
from ._records import CUT_SHORT, RESUMED, SUBMITTING, JournalEntry, LedgerEntry, check_key_part
from ._scan import HistoryScan, pending_client_calls, recover_structured, recover_text
from ._store_engine import DurableMachine

__all__ = [
    "DEFAULT_COMMIT_WINDOW",
    "DEFAULT_SETTLE_TIMEOUT",
    "NOT_EXECUTED_MESSAGE",
    "PastStep",
    "Recovery",
    "RecoveryOutcome",
    "StructuredAnswer",
]

logger = logging.getLogger("coder_proto")

#: The settled statuses of a turn that ran to its end: a run that stopped ``paused`` (at a
#: queued message under edit, D35) finished its turn as one that stopped ``waiting`` did.
_FINISHED_STATUSES: Final = (STATUS_WAITING, STATUS_PAUSED, STATUS_COMPLETED)

#: D26: the error result of a pending call the ledger has no entry for.
NOT_EXECUTED_MESSAGE: Final = "not executed: the process stopped before this tool ran"
DEFAULT_COMMIT_WINDOW: Final = 300.0
"""How long a journaled send may still land after its write, when the caller gives no bound (the
guide's conservative horizon is the step's request timeout).
"""
DEFAULT_SETTLE_TIMEOUT: Final = 600.0
"""The turn-scale budget of the settle poll: a reconciled pause revives a whole model/tool
continuation.
"""


class StructuredAnswer(Protocol):
    """The structured-output helper as recovery uses it (``coder_proto._agent.structured_output.StructuredOutput``
    satisfies it): its tool ``name``, ``parse`` (the validated answer of a filing, raising a
    ``CoderAgentError`` when invalid) and ``answer`` (the tool loop's result for a filing)."""

    @property
    def name(self) -> str: ...

    def parse(self, call: ToolCall) -> Any: ...

    def answer(self, call: ToolCall) -> ToolOutcome: ...


@attrs.frozen(kw_only=True)
class RecoveryOutcome:
    """What recovery found.

    ``finished`` is true when an earlier attempt of the step completed: ``text`` is what
    ``generate().text`` would have returned, and for a structured-output step
    ``structured`` holds the answer (``structured_found`` says whether a valid filing
    exists; a finished structured step without one is not ``recovered``). ``recovered`` is
    true when the step's result is known and the step must not resubmit. Otherwise the step
    resubmits: ``attempts`` is the step's committed attempts (the send journal's attempt count)
    and ``cut_short`` whether the last one was cut short. ``status`` is the settled chat
    status, ``last_error`` the chat's error when it settled in ``error``.
    """

    chat_id: str
    status: str
    finished: bool
    recovered: bool
    cut_short: bool
    submitted: bool
    attempts: int
    text: str = ""
    structured_found: bool = False
    structured: Any = None
    newest_message_id: int | None = None
    last_error: ChatError | None = None
    reconciled: int = 0


class Recovery(DurableMachine[RecoveryOutcome]):
    """The settle-wait, reconciliation and result check for one step on one chat (see the
    module docstring).

    ``wall`` is the wall clock (epoch seconds) at ``now``: journal times are wall-clock, and
    the machine derives the wall clock of any later ``now`` from the pair. ``client_tools``
    are the names of the step's configured client tools; ``structured`` the step's
    structured-output helper, if any. ``pin_cut_short`` is true when recovery follows a known
    timeout or cancellation of this step's last attempt. ``commit_window`` bounds the
    in-flight-send wait, ``interrupt_timeout`` the probe-and-interrupt phase, and
    ``settle_timeout`` the settle poll and the reads after it (builtin ``TimeoutError`` on
    expiry); ``poll_interval`` is the poll period.
    """

    def __init__(
        self,
        selector: PrefixSelector,
        *,
        chat_id: str,
        marker: str,
        now: float,
        wall: float,
        tenant: str,
        client_tools: Collection[str] = (),
        structured: StructuredAnswer | None = None,
        pin_cut_short: bool = False,
        commit_window: float = DEFAULT_COMMIT_WINDOW,
        interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
        settle_timeout: float = DEFAULT_SETTLE_TIMEOUT,
        poll_interval: float = INTERRUPT_POLL_INTERVAL,
        page_size: int = RECOVERY_PAGE_SIZE,
    ) -> None:
        super().__init__(selector)
        self.chat_id = check_key_part(chat_id, "chat_id")
        self.tenant = check_key_part(tenant, "tenant")
        if type(marker) is not str or not marker:
            raise CoderAgentError(f"marker must be a non-empty string, got {marker!r}")
        self.marker = marker
        self.structured = structured
        names = set(client_tools)
        if structured is not None:
            names.add(structured.name)
        self.client_tools = frozenset(names)
        self.pin_cut_short = bool(pin_cut_short)
        self.commit_window = _seconds(commit_window, "commit_window")
        self.interrupt_timeout = _seconds(interrupt_timeout, "interrupt_timeout")
        self.settle_timeout = _seconds(settle_timeout, "settle_timeout")
        self.poll_interval = _seconds(poll_interval, "poll_interval")
        self.page_size = page_size
        self._wall_offset = float(wall) - float(now)
        self._reconciled = 0
        self._start(now)

    def __repr__(self) -> str:
        return f"Recovery(chat_id={self.chat_id!r}, marker={self.marker!r}, done={self.done})"

    @property
    def wall(self) -> float:
        """The wall clock at the latest ``now``."""
        return self.now + self._wall_offset

    # -- the settle-wait ---------------------------------------------------------------------

    def _run(self) -> Generator[None, None, RecoveryOutcome]:
        probe_deadline = self.now + self.interrupt_timeout
        chat = yield from self._get_chat(probe_deadline)
        status = chat.status
        if chat.archived:
            # An archived chat runs nothing and accepts nothing: only its history can answer.
            scan = yield from self._scan(probe_deadline)
            return self._classify(chat, scan, self.pin_cut_short)
        entry = yield from self._store("get_journal", self.tenant, self.chat_id)
        scan = yield from self._scan(probe_deadline)
        attempts = scan.attempts
        journaled = (
            entry
            if entry is not None and entry.marker == self.marker and entry.attempt == attempts
            else None
        )
        cut_short = True
        if status == STATUS_REQUIRES_ACTION:
            # A client tool crashed mid-execution: reconcile, never interrupt the pause away.
            cut_short = yield from self._reconcile(scan, probe_deadline)
        elif journaled is not None and journaled.state != SUBMITTING:
            # A previous recovery pass acted on this attempt, then died.
            cut_short = journaled.state == CUT_SHORT
            if cut_short:
                # The journal records intent, not a landed interrupt: make it true.
                yield from self._interrupt(status, probe_deadline)
        else:
            stopped = yield from self._interrupt(status, probe_deadline)
            if stopped is None:
                # 409: nothing was running. A probed "interrupting" is an earlier interrupt
                # (a timeout's, a sweeper's) that already truncated the attempt.
                cut_short = status == STATUS_INTERRUPTING
        if journaled is not None and journaled.state == SUBMITTING:
            # The crashed attempt's own send may still land: sleep out its commit window.
            remaining = min(self.commit_window, journaled.at + self.commit_window - self.wall)
            if remaining > 0:
                yield from self._sleep_until(self.now + remaining)
            recount = yield from self._scan(self.now + self.settle_timeout)
            if recount.attempts == journaled.attempt and journaled.attempt > 0:
                # An unlanded send over an existing attempt: that attempt was cut short,
                # errored or unsubmitted, or the step would not have resent.
                cut_short = True
        if self.pin_cut_short:
            cut_short = True
        settle_deadline = self.now + self.settle_timeout
        while True:
            chat = yield from self._get_chat(settle_deadline)
            status = chat.status
            if status in SETTLED_STATUSES:
                break
            if status == STATUS_REQUIRES_ACTION and not cut_short:
                # A stable pause: the revived run called a new client tool.
                scan = yield from self._scan(settle_deadline)
                unstarted = yield from self._reconcile(scan, settle_deadline)
                cut_short = unstarted or self.pin_cut_short
            if self.now + self.poll_interval >= settle_deadline:
                raise TimeoutError(
                    f"chat {self.chat_id} did not settle within {self.settle_timeout:g}s "
                    f"(status {status!r})"
                )
            # Acknowledged is not settled: wait it out.
            yield from self._sleep_until(self.now + self.poll_interval)
        scan = yield from self._scan(settle_deadline)
        return self._classify(chat, scan, cut_short)

    def _classify(self, chat: Chat, scan: HistoryScan, cut_short: bool) -> RecoveryOutcome:
        status = chat.status
        submitted = scan.submitted
        finished = submitted and not cut_short and status in _FINISHED_STATUSES
        text = ""
        found = False
        answer: Any = None
        recovered = finished
        if finished:
            turn = scan.turn_messages()
            text = recover_text(turn, self.client_tools)
            if self.structured is not None:
                found, answer = recover_structured(
                    turn, self.structured.name, self.structured.parse
                )
                recovered = found
        logger.info(
            "recovery of chat %s for %s: status %s, %s (attempts %d, cut short %s)",
            self.chat_id,
            self.marker,
            status,
            "recovered" if recovered else "resubmit",
            scan.attempts,
            cut_short,
        )
        return RecoveryOutcome(
            chat_id=self.chat_id,
            status=status,
            finished=finished,
            recovered=recovered,
            cut_short=cut_short,
            submitted=submitted,
            attempts=scan.attempts,
            text=text,
            structured_found=found,
            structured=answer,
            newest_message_id=scan.newest_message_id,
            last_error=chat.last_error if status == STATUS_ERROR else None,
            reconciled=self._reconciled,
        )

    # -- ledger reconciliation (D26) ---------------------------------------------------------

    def _reconcile(self, scan: HistoryScan, deadline: float) -> Wait[bool]:
        """Answer the pause from the ledger; ``True`` when a call was unstarted and the chat
        was interrupted (the attempt is cut short)."""
        self._reconciled += 1
        pending = pending_client_calls(scan.messages, self.client_tools)
        if not pending:
            # No pending call this step knows: nothing can answer the pause, so stop it.
            logger.warning(
                "chat %s is paused for tool calls this step does not configure; interrupting",
                self.chat_id,
            )
            yield from self._interrupt(STATUS_REQUIRES_ACTION, deadline)
            return True
        results: dict[str, ToolOutcome] = {}
        redrive: list[ToolCall] = []
        unstarted: list[ToolCall] = []
        structured = self.structured
        for call in pending:
            if structured is not None and call.tool_name == structured.name:
                # A filing has no effect: answer it as the live loop would.
                results[call.tool_call_id] = structured.answer(call)
                continue
            entry: LedgerEntry | None = yield from self._store(
                "get_ledger", self.tenant, self.chat_id, call.tool_call_id
            )
            if entry is None:
                unstarted.append(call)
            elif entry.state == "done":
                results[call.tool_call_id] = ToolOutcome(
                    tool_call_id=call.tool_call_id, output=entry.output
                )
            else:
                redrive.append(call)
        # One write-ahead with the batch's final verdict, before any request.
        verdict = CUT_SHORT if unstarted else RESUMED
        yield from self._store(
            "put_journal",
            self.tenant,
            self.chat_id,
            JournalEntry(state=verdict, marker=self.marker, attempt=scan.attempts, at=self.wall),
        )
        logger.info(
            "reconciling chat %s: %d recorded, %d to re-drive, %d unstarted (%s)",
            self.chat_id,
            len(results),
            len(redrive),
            len(unstarted),
            verdict,
        )
        if redrive:
            outcomes = yield from self._run_tools(tuple(redrive))
            for outcome in outcomes:
                if outcome.is_error:
                    raise RecoveryError(
                        f"re-driving tool call {outcome.tool_call_id} of chat {self.chat_id} "
                        f"failed ({outcome.output}); its effect may have committed, so the "
                        "pause is left for a later recovery",
                        chat_id=self.chat_id,
                    )
                results[outcome.tool_call_id] = outcome
        if unstarted and len(unstarted) == len(pending):
            # D26: every call unstarted, so only interrupt (D4's follow-up included).
            yield from self._interrupt(STATUS_REQUIRES_ACTION, deadline)
            return True
        submission = tuple(
            _result_input(results.get(call.tool_call_id), call.tool_call_id) for call in pending
        )
        try:
            yield from self._rest(
                build_submit_tool_results(self.chat_id, submission),
                parse_submit_tool_results,
                deadline=deadline,
                timeout_message=f"submitting recovered tool results to {self.chat_id} timed out",
            )
        except CoderApiError as exc:
            if exc.status != 409:
                raise RecoveryError(
                    f"the server refused the reconciled tool results of chat {self.chat_id}: "
                    f"{exc.message}",
                    chat_id=self.chat_id,
                ) from exc
            # The pause was answered or cancelled meanwhile (D6): none of ours applied.
            logger.warning("chat %s was no longer waiting for tool results", self.chat_id)
            return True
        if unstarted:
            yield from self._interrupt(STATUS_RUNNING, deadline)
            return True
        return False

    # -- requests ----------------------------------------------------------------------------

    def _get_chat(self, deadline: float) -> Wait[Chat]:
        return (
            yield from self._rest(
                build_get_chat(self.chat_id),
                parse_get_chat,
                deadline=deadline,
                timeout_message=f"reading chat {self.chat_id} timed out during recovery",
            )
        )

    def _interrupt(self, last_status: str | None, deadline: float) -> Wait[Chat | None]:
        """Interrupt with D4's follow-up; ``None`` when the server answered 409 (no live
        run)."""
        try:
            return (
                yield from interrupt_chat(
                    self, self.chat_id, last_status=last_status, deadline=deadline
                )
            )
        except CoderApiError as exc:
            if exc.status == 409:
                return None
            raise

    def _scan(self, deadline: float, *, find: bool = False) -> Wait[HistoryScan]:
        scan = HistoryScan(self.marker, find=find)
        before: int | None = None
        while True:
            page = yield from self._rest(
                build_get_messages(self.chat_id, before_id=before, limit=self.page_size),
                parse_get_messages,
                deadline=deadline,
                timeout_message=f"reading the history of chat {self.chat_id} timed out",
            )
            scan.add(page)
            before = scan.next_before_id
            if before is None:
                return scan


class PastStep(Recovery):
    """A step replayed after later steps ran on its chat (its marker is among the
    checkpoint's finished steps, and a later step was sent since): its result is read from
    history, around its newest user message, and nothing on the chat is touched (no
    interrupt, no reconciliation: the chat belongs to the later step now). ``settle_timeout``
    bounds the reads. Raises ``RecoveryError`` when the step's prompt is not in history."""

    def __repr__(self) -> str:
        return f"PastStep(chat_id={self.chat_id!r}, marker={self.marker!r}, done={self.done})"

    def _run(self) -> Generator[None, None, RecoveryOutcome]:
        scan = yield from self._scan(self.now + self.settle_timeout, find=True)
        turn = scan.marked_turn()
        if not turn:
            raise RecoveryError(
                f"step {self.marker} finished earlier on chat {self.chat_id}, but its prompt "
                "is no longer in the chat's history",
                chat_id=self.chat_id,
            )
        text = recover_text(turn, self.client_tools)
        found, answer = False, None
        if self.structured is not None:
            found, answer = recover_structured(turn, self.structured.name, self.structured.parse)
        return RecoveryOutcome(
            chat_id=self.chat_id,
            status="",
            finished=True,
            recovered=found if self.structured is not None else True,
            cut_short=False,
            submitted=False,
            attempts=0,
            text=text,
            structured_found=found,
            structured=answer,
            newest_message_id=scan.newest_message_id,
        )


def _result_input(outcome: ToolOutcome | None, tool_call_id: str) -> ToolResultInput:
    if outcome is None:
        return ToolResultInput(
            tool_call_id=tool_call_id, output=NOT_EXECUTED_MESSAGE, is_error=True
        )
    return ToolResultInput(
        tool_call_id=tool_call_id, output=outcome.output, is_error=outcome.is_error
    )


def _seconds(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise CoderAgentError(f"{name} must be a non-negative number of seconds, got {value!r}")
    return float(value)
