"""One durable workflow step: every decision of ``run_turn``, as a program of effects
(docs/durable-workflows.md: "Shape each step", "Recover after a crash", "Recover the result before
resubmitting").

``step_program`` is a generator that yields effects and receives their values; an adapter's
``run_turn`` is a trampoline that performs them (a few lines per runtime):

* ``StoreOp``: a call on the durable store;
* ``WallClock``: the wall clock (epoch seconds), for the send journal;
* ``RunMachine``: build a durable machine (``build(selector, now, wall)``) and drive it to its
  result (its error is thrown back in); ``DurableStep.program`` hands it on as
  ``coder_proto.durable._runtime.RunDurable``, with the step's tools and the lease's guard;
* ``RunAgentTurn``: run one agent turn (``generate``) on the given chat with the given
  cursor and the step's tools bound to the durable store, and report it as a ``TurnReport``
  (never raising: the error, and whether a deadline or cancellation cut the turn, are in the
  report).

The program, in order:

0. (The adapter took the workflow's lease first, D27, and checks it before every side
   effect of the program: ``coder_proto.durable._lease``.)
1. Load the checkpoint. None: the turn creates a fresh chat, and the adapter performs
   ``RunAgentTurn.early_checkpoint`` as soon as the create call answered (D28), so a crash
   from then on is recovered on that chat; only a crash between the create call and that
   write leaves an orphan for the sweep.
2. With a checkpoint: a step that finished before the step sent last is a replay, answered
   from history without touching the chat (``PastStep``). Otherwise skip recovery only when
   the store proves the chat was left settled by a finished turn of another step and nothing
   was sent since (``needs_recovery``); else run ``Recovery``: a finished attempt's result is
   returned without resubmitting.
3. Journal the send write-ahead (``submitting``, the marker, the step's committed attempts,
   the wall clock), then run the turn with the marker embedded in the prompt.
4. In every case (the ``finally`` of the guide): when a failed fresh-chat turn discarded
   its chat, undo the early checkpoint naming it (D28) and record it as stranded; otherwise
   checkpoint the chat, the cursor, the step, how the turn ended and the finished steps.
   Then return the result or raise the turn's error.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import attrs

from .._errors import CoderAgentError, CoderChatError
from .._rest.prefix import PrefixSelector
from ._effects import WallClock
from ._errors import RecoveryError
from ._records import (
    OUTCOME_ABORTED,
    OUTCOME_FAILED,
    OUTCOME_FINISHED,
    OUTCOME_IN_FLIGHT,
    SUBMITTING,
    Checkpoint,
    JournalEntry,
    StepOutcome,
    check_key_part,
)
from ._recovery import (
    DEFAULT_COMMIT_WINDOW,
    DEFAULT_SETTLE_TIMEOUT,
    PastStep,
    Recovery,
    RecoveryOutcome,
    StructuredAnswer,
)
from ._scan import default_step, marked_prompt, step_marker
from ._store import StoreOp, store_call
from ._store_engine import DurableMachine
from ._tools import DurableBinding

__all__ = [
    "DurableStepResult",
    "RunAgentTurn",
    "RunMachine",
    "StepPlan",
    "TurnReport",
    "latest_step",
    "needs_recovery",
    "step_program",
    "turn_outcome",
]


@attrs.frozen
class RunMachine:
    """Build the machine with ``build(selector, now, wall)`` (the client's prefix selector,
    the monotonic and the wall clock), drive it, and send back its result (its error is
    thrown back in)."""

    build: Callable[[PrefixSelector, float, float], DurableMachine[Any]]


@attrs.frozen(kw_only=True)
class RunAgentTurn:
    """Run one agent turn: an agent on ``chat_id`` (a fresh chat when ``None``) with
    ``last_seen_message_id``, the step's tools bound with ``binding``, ``generate(prompt)``.
    Send back a ``TurnReport``."""

    chat_id: str | None
    last_seen_message_id: int | None
    prompt: str
    binding: DurableBinding

    def early_checkpoint(self, chat_id: str) -> StoreOp | None:
        """D28: the store write to perform as soon as a fresh chat's create call answered with
        ``chat_id``, before the stream opens: the checkpoint naming the chat, with the step's
        first turn in flight. ``None`` on a turn that resumes a checkpointed chat."""
        if self.chat_id is not None or self.binding.workflow_id is None:
            return None
        checkpoint = Checkpoint(
            chat_id=chat_id, step=self.binding.marker, outcome=OUTCOME_IN_FLIGHT
        )
        return StoreOp(
            "put_checkpoint", (self.binding.tenant, self.binding.workflow_id, checkpoint)
        )


@attrs.frozen(kw_only=True)
class TurnReport:
    """How an agent turn went, read off the agent after ``generate`` returned or raised:
    ``result`` (the agent's result) or ``error``; ``cancelled`` when the caller's cancellation
    ended it; the agent's ``chat_id`` and cursor afterwards (``chat_id`` is ``None`` after a
    fresh-chat stream failure discarded the session, C.5) and its ``stranded_chat_ids``."""

    result: Any = None
    error: BaseException | None = None
    cancelled: bool = False
    chat_id: str | None = None
    last_seen_message_id: int | None = None
    stranded_chat_ids: tuple[str, ...] = ()


def turn_outcome(report: TurnReport) -> StepOutcome:
    """How the turn ended, for the checkpoint: ``finished`` with a result; ``aborted`` when the
    caller's cancellation, a caller deadline (builtin ``TimeoutError``) or the turn's own
    ``request_timeout`` (``CoderChatError`` kind ``timeout``, C.3) cut it: each fired an
    interrupt, so the next recovery must pin ``cut_short``; ``failed`` otherwise."""
    error = report.error
    if error is None:
        return OUTCOME_FINISHED
    if report.cancelled or isinstance(error, TimeoutError):
        return OUTCOME_ABORTED
    if isinstance(error, CoderChatError) and error.kind == "timeout":
        return OUTCOME_ABORTED
    return OUTCOME_FAILED


def needs_recovery(checkpoint: Checkpoint, entry: JournalEntry | None, marker: str) -> bool:
    """False only when the store proves the chat is settled and nothing of this step was sent:
    the checkpoint records a finished turn of another step, and the newest journal entry (if
    any) belongs to that step (no later send was journaled). Anything else (a failed, aborted
    or in-flight turn, a crash after a later write-ahead, a retry of a finished step) runs the
    settle-wait and the result check."""
    if checkpoint.outcome != OUTCOME_FINISHED or checkpoint.step is None:
        return True
    if checkpoint.step == marker:
        return True
    return entry is not None and entry.marker != checkpoint.step


@attrs.frozen(kw_only=True)
class StepPlan:
    """What one step is: the workflow, the step's name (the prompt's digest when ``None``),
    the prompt, the tenant, the names of the configured client tools, the structured-output
    helper, and recovery's bounds (seconds)."""

    workflow_id: str
    prompt: str
    step: str | None = None
    tenant: str = "default"
    client_tools: frozenset[str] = frozenset()
    structured: StructuredAnswer | None = None
    commit_window: float = DEFAULT_COMMIT_WINDOW
    settle_timeout: float = DEFAULT_SETTLE_TIMEOUT
    interrupt_timeout: float = 15.0
    poll_interval: float = 1.0

    def __attrs_post_init__(self) -> None:
        check_key_part(self.workflow_id, "workflow_id")
        check_key_part(self.tenant, "tenant")
        if type(self.prompt) is not str or not self.prompt.strip():
            raise CoderAgentError("a durable step's prompt must be a non-empty string")
        if not isinstance(self.client_tools, frozenset):
            object.__setattr__(self, "client_tools", frozenset(self.client_tools))

    @property
    def step_name(self) -> str:
        return self.step if self.step is not None else default_step(self.prompt)

    @property
    def marker(self) -> str:
        return step_marker(self.workflow_id, self.step_name)

    def recovery(
        self, chat_id: str, *, pin_cut_short: bool = False, past: bool = False
    ) -> Callable[[PrefixSelector, float, float], Recovery]:
        """The factory of this step's ``Recovery`` (``PastStep`` with ``past``) on
        ``chat_id``."""
        kind = PastStep if past else Recovery

        def build(selector: PrefixSelector, now: float, wall: float) -> Recovery:
            return kind(
                selector,
                chat_id=chat_id,
                marker=self.marker,
                now=now,
                wall=wall,
                tenant=self.tenant,
                client_tools=self.client_tools,
                structured=self.structured,
                pin_cut_short=pin_cut_short,
                commit_window=self.commit_window,
                interrupt_timeout=self.interrupt_timeout,
                settle_timeout=self.settle_timeout,
                poll_interval=self.poll_interval,
            )

        return build


@attrs.frozen(kw_only=True)
class DurableStepResult:
    """What ``run_turn`` returns.

    ``text`` is the turn's final text (``generate().text``); ``output`` the structured answer
    of a structured-output step. ``recovered`` is true when an earlier attempt had finished
    and the result was read from history instead of resubmitting (then ``result`` is
    ``None``); otherwise ``result`` is the agent's full result (steps, usage, tool calls...).
    ``chat_id`` and ``last_seen_message_id`` are what the checkpoint now holds; ``step`` is
    the step's marker.
    """

    text: str
    recovered: bool
    chat_id: str | None
    step: str
    last_seen_message_id: int | None = None
    output: Any = None
    result: Any = None


def latest_step(checkpoint: Checkpoint, entry: JournalEntry | None) -> str | None:
    """The marker of the step sent last on the checkpointed chat: the journal's when it names
    a step that has not finished (a later send, written ahead of it), else the checkpoint's."""
    if entry is not None and entry.marker not in checkpoint.steps:
        return entry.marker
    return checkpoint.step


def step_program(plan: StepPlan) -> Generator[Any, Any, DurableStepResult]:
    """The step (see the module docstring). Raises the turn's error after checkpointing."""
    marker = plan.marker
    prompt = marked_prompt(marker, plan.prompt)
    tenant, workflow_id = plan.tenant, plan.workflow_id
    checkpoint: Checkpoint | None = yield from store_call("get_checkpoint", tenant, workflow_id)
    chat_id = checkpoint.chat_id if checkpoint is not None else None
    cursor = checkpoint.last_seen_message_id if checkpoint is not None else None
    attempts = 0
    if checkpoint is not None:
        assert chat_id is not None
        entry: JournalEntry | None = yield from store_call("get_journal", tenant, chat_id)
        if marker in checkpoint.steps and marker != latest_step(checkpoint, entry):
            # A replay of a step that finished before later ones: history answers it, and
            # the chat (the later step's now) is left alone.
            past: RecoveryOutcome = yield RunMachine(plan.recovery(chat_id, past=True))
            if not past.recovered:
                raise RecoveryError(
                    f"step {marker} finished earlier but no valid structured answer is in its turn",
                    chat_id=chat_id,
                )
            return DurableStepResult(
                text=past.text,
                recovered=True,
                chat_id=chat_id,
                step=marker,
                last_seen_message_id=cursor,
                output=past.structured,
            )
        if needs_recovery(checkpoint, entry, marker):
            pin = checkpoint.step == marker and checkpoint.outcome == OUTCOME_ABORTED
            outcome: RecoveryOutcome = yield RunMachine(plan.recovery(chat_id, pin_cut_short=pin))
            newest = outcome.newest_message_id
            if newest is not None and newest > (cursor or 0):
                cursor = newest
            if outcome.recovered:
                yield from store_call(
                    "put_checkpoint",
                    tenant,
                    workflow_id,
                    Checkpoint(
                        chat_id=chat_id,
                        last_seen_message_id=cursor,
                        step=marker,
                        outcome=OUTCOME_FINISHED,
                        steps=checkpoint.finishing(marker),
                    ),
                )
                return DurableStepResult(
                    text=outcome.text,
                    recovered=True,
                    chat_id=chat_id,
                    step=marker,
                    last_seen_message_id=cursor,
                    output=outcome.structured,
                )
            attempts = outcome.attempts
        wall = yield WallClock()
        # Write-ahead, before the send: no entry proves no send of this attempt started.
        yield from store_call(
            "put_journal",
            tenant,
            chat_id,
            JournalEntry(state=SUBMITTING, marker=marker, attempt=attempts, at=float(wall)),
        )
    report: TurnReport = yield RunAgentTurn(
        chat_id=chat_id,
        last_seen_message_id=cursor,
        prompt=prompt,
        binding=DurableBinding(
            tenant=tenant, workflow_id=workflow_id, marker=marker, attempt=attempts + 1
        ),
    )
    # The guide's ``finally``: checkpoint even when the turn failed.
    if report.chat_id is None and report.stranded_chat_ids:
        # The session was discarded (C.5): undo the early checkpoint (D28), or a claim a
        # crash-safe tool wrote, for the dead chat first, so that the next attempt starts
        # fresh ("clear the eagerly checkpointed id yourself"); then list it as stranded.
        current: Checkpoint | None = yield from store_call("get_checkpoint", tenant, workflow_id)
        if current is not None and current.chat_id in report.stranded_chat_ids:
            yield from store_call("delete_checkpoint", tenant, workflow_id)
    for stranded in report.stranded_chat_ids:
        yield from store_call("add_stranded", tenant, workflow_id, stranded)
    if report.chat_id is not None:
        outcome_kind = turn_outcome(report)
        steps = (
            checkpoint.steps
            if checkpoint is not None and checkpoint.chat_id == report.chat_id
            else ()
        )
        if outcome_kind == OUTCOME_FINISHED and marker not in steps:
            steps = (*steps, marker)
        yield from store_call(
            "put_checkpoint",
            tenant,
            workflow_id,
            Checkpoint(
                chat_id=report.chat_id,
                last_seen_message_id=report.last_seen_message_id,
                step=marker,
                outcome=outcome_kind,
                steps=steps,
            ),
        )
    if report.error is not None:
        raise report.error
    result = report.result
    return DurableStepResult(
        text=getattr(result, "text", ""),
        recovered=False,
        chat_id=report.chat_id,
        step=marker,
        last_seen_message_id=report.last_seen_message_id,
        output=getattr(result, "output", None),
        result=result,
    )
