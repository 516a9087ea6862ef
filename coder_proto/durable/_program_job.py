"""A durable call's effect program as a job of ``coder_proto.Connection`` (``start_durable``).

``run_turn``, ``archive_workflow`` and ``sweep_orphans`` are each one effect program
(``coder_proto.durable._runtime``). ``ProgramJob`` runs one with the connection's own
vocabulary, so an adapter only performs the connection's commands:

* ``StoreOp``: a store call, an ``ApplyStore`` command (``store_finished`` answers it; the
  store's exception is thrown back into the program as it is);
* ``WallClock``: the wall clock, read off the ``now`` of the input being handled (the job
  is given the wall clock that matched its starting ``now``): no command;
* ``Sleep``: a deadline of the job (``next_deadline`` / ``tick``);
* ``RunDurable``: the durable machine runs inside the job, its requests, tool pauses
  (``InvokeTools``) and store calls flowing out as the job's own;
* ``StartRenewal`` / ``StopRenewal``: the lease's renewal timer (``renewal(lease)``) runs
  beside the program inside the job, its sleeps deadlines of the job and its renewals store
  calls. Stopping it waits for a renewal in flight, so that a late renewal never lands
  after the release;
* any effect of ``outside`` (``RunAgentTurn``): left to the embedder as ``effect``; the job
  waits until ``Task.effect_finished`` reports its value or exception.

Cancelling the job throws the cancellation into the program once (the lease's release, a
step's checkpoint still run afterwards); the job ends when the program ends.

Why the agent turn is still the embedder's: the turn is an ordinary turn of the same
connection (the adapter's ``CoderAgent`` on the same client starts it with ``start_turn``, so
its requests, sockets and tool pauses are already the connection's commands), and so is its
early checkpoint (D28): the step's chat gate (``DurableStep.chat_gate``, set on the turn's
session) holds the turn between the create call's answer and anything else on the chat until
that write, an ``ApplyStore`` of the turn's own task, answered (``Turn.hold_chat``). What the
job still leaves out is the agent object around the turn: its observer and hooks, built by the
adapter's agent class, and the blocking adapter's ``timeout`` (a bound on the caller's
blocking call). Taking the turn in means the job starting a turn task of its connection (an
agent core built from ``DurableStep.turn_kwargs``, the ``GenerateCall`` ladder, the agent's
close without archiving) and reporting its end as a ``TurnReport``, which the connection has
no action for yet: a job's actions are requests, sockets, tool pauses and store calls.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Sequence
from typing import Any

from .._actions import ToolOutcome
from .._agent.tool_calls import ToolPlan
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .._rest.http import HttpResponse
from .._rest.prefix import PrefixSelector
from ._effects import Sleep, WallClock
from ._runtime import RunDurable, StartRenewal, StopRenewal, renewal
from ._step import RunAgentTurn
from ._store import StoreCall, StoreOp
from ._store_engine import DurableWork

__all__ = ["ProgramJob"]


class _Strand:
    """One generator the job runs (the program, or the lease's renewal timer) and what it
    waits for: a store call (``call_id``), a deadline, or nothing (running, or waiting on
    the job: a durable machine, the embedder's effect, the renewal's stop)."""

    __slots__ = ("call_id", "deadline", "ended", "error", "program", "value")

    def __init__(self, program: Generator[Any, Any, Any]) -> None:
        self.program = program
        self.call_id: int | None = None
        self.deadline: float | None = None
        self.ended = False
        self.value: Any = None
        self.error: BaseException | None = None


class ProgramJob:
    """Runs a durable call's effect ``program`` (see the module docstring). ``store`` is the
    embedder's performer of a ``StoreOp`` (``ApplyStore``'s runner); ``selector`` is the
    connection's prefix selector for the durable machines it builds; ``now`` (monotonic) and
    ``wall`` (seconds since the epoch) are the same instant, from which every later ``now``
    gives the wall clock. The program starts at once."""

    def __init__(
        self,
        program: Generator[Any, Any, Any],
        *,
        store: Any,
        selector: PrefixSelector,
        now: float,
        wall: float,
        outside: tuple[type, ...] = (RunAgentTurn,),
    ) -> None:
        self.store = store
        self._selector = selector
        self._start = now
        self._wall = wall
        self._outside = outside
        self.now = now
        #: The effect left to the embedder, until ``Task.effect_finished`` answers it.
        self.effect: Any = None
        self._out: list[Any] = []
        #: Store calls of the job's own strands have negative ids (the durable machine's count
        #: up from 1).
        self._ids = itertools.count(-1, -1)
        self._calls: dict[int, _Strand] = {}
        self._inner: DurableWork | None = None
        self._renewal: _Strand | None = None
        self._stopping = False
        self._cancelled = False
        self._main = _Strand(program)
        self._resume(self._main, now)

    def __repr__(self) -> str:
        return f"<ProgramJob done={self.done} effect={self.effect!r}>"

    # -- what the connection reads -----------------------------------------------------------

    @property
    def done(self) -> bool:
        """The program ended: ``result()`` returns its value or raises its error."""
        return self._main.ended

    def result(self) -> Any:
        """The program's value, or raise its error."""
        if not self._main.ended:
            raise CoderAgentError("the durable call has not finished yet")
        main = self._main
        if main.error is not None:
            raise main.error
        return main.value

    def actions(self) -> list[Any]:
        """The pending actions: the durable machine's (checked by its guard) and the store
        calls of the job's own strands."""
        out: list[Any] = []
        while self._inner is not None:
            inner = self._inner
            out.extend(inner.actions())
            if not inner.done:
                break
            self._inner = None
            try:
                value = inner.result()
            except Exception as exc:
                self._resume(self._main, self.now, error=exc)
            else:
                self._resume(self._main, self.now, value)
        out.extend(self._out)
        self._out = []
        return out

    def next_deadline(self) -> float | None:
        deadlines = [s.deadline for s in (self._main, self._renewal) if s is not None]
        if self._inner is not None:
            deadlines.append(self._inner.next_deadline())
        due = [d for d in deadlines if d is not None]
        return min(due) if due else None

    def request_deadline(self, request_id: int) -> float | None:
        """When the running durable machine abandons request ``request_id``
        (``DurableWork.request_deadline``); ``None`` once no machine runs."""
        inner = self._inner
        return None if inner is None else inner.request_deadline(request_id)

    def plan_tools(self, calls: Sequence[ToolCall]) -> ToolPlan:
        """The tool-call policy of the running durable machine (only it pauses for tools)."""
        inner = self._inner
        assert inner is not None
        return inner.plan_tools(calls)

    # -- inputs ----------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        self.now = now
        inner = self._inner
        if inner is not None:
            deadline = inner.next_deadline()
            if deadline is not None and deadline <= now:
                inner.tick(now)
        for strand in (self._renewal, self._main):
            if strand is not None and strand.deadline is not None and strand.deadline <= now:
                strand.deadline = None
                self._resume(strand, now)

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None:
        self.now = now
        if self._inner is not None:
            self._inner.response_received(request_id, response, now)

    def request_failed(self, request_id: int, message: str | CoderAgentError, now: float) -> None:
        self.now = now
        if self._inner is not None:
            self._inner.request_failed(request_id, message, now)

    def tool_results(self, outcomes: Sequence[ToolOutcome], now: float) -> None:
        self.now = now
        if self._inner is not None:
            self._inner.tool_results(outcomes, now)

    def store_result(self, call_id: int, value: Any, now: float) -> None:
        self._store_done(call_id, value, None, now)

    def store_failed(self, call_id: int, error: BaseException, now: float) -> None:
        self._store_done(call_id, None, error, now)

    def effect_finished(self, value: Any, error: BaseException | None, now: float) -> None:
        """The embedder's effect (``effect``) returned ``value`` or raised ``error``; ignored
        when no effect is waiting."""
        self.now = now
        if self.effect is None:
            return
        self.effect = None
        self._resume(self._main, now, value, error)

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        """The caller's cancellation (``reason``; ``None``: the connection's end), thrown into
        the program once, wherever it waits; what it still does afterwards (the lease's
        release, a step's checkpoint) runs on."""
        self.now = now
        if self._main.ended or self._cancelled:
            return
        self._cancelled = True
        error = reason if reason is not None else CoderAgentError("the durable call was cancelled")
        main = self._main
        if main.call_id is not None:
            del self._calls[main.call_id]
            main.call_id = None
        main.deadline = None
        self.effect = None
        if self._stopping:
            self._stop_renewal()
        inner = self._inner
        if inner is not None:
            self._inner = None
            inner.cancel(now, error)
            self._out.extend(inner.actions())
        self._resume(main, now, error=error)

    # -- internals -------------------------------------------------------------------------------

    def _store_done(
        self, call_id: int, value: Any, error: BaseException | None, now: float
    ) -> None:
        self.now = now
        if call_id > 0:
            if self._inner is not None:
                if error is None:
                    self._inner.store_result(call_id, value, now)
                else:
                    self._inner.store_failed(call_id, error, now)
            return
        strand = self._calls.pop(call_id, None)
        if strand is None:
            return
        strand.call_id = None
        self._resume(strand, now, value, error)
        if self._stopping and strand is self._renewal and strand.call_id is None:
            self._stop_renewal()
            self._resume(self._main, now)

    def _stop_renewal(self) -> None:
        renewing = self._renewal
        assert renewing is not None
        self._stopping = False
        self._renewal = None
        if renewing.call_id is not None:
            del self._calls[renewing.call_id]
        renewing.program.close()

    def _resume(
        self,
        strand: _Strand,
        now: float,
        value: Any = None,
        error: BaseException | None = None,
    ) -> None:
        """Step ``strand`` with ``value`` (or ``error`` thrown in) and perform its effects
        until it waits or ends."""
        program = strand.program
        while True:
            try:
                effect = program.send(value) if error is None else program.throw(error)
            except StopIteration as stop:
                strand.ended = True
                strand.value = stop.value
                return
            except BaseException as exc:  # the program's error, the cancellation included
                strand.ended = True
                strand.error = exc
                return
            value, error = None, None
            try:
                if isinstance(effect, WallClock):
                    value = self._wall + (now - self._start)
                    continue
                if isinstance(effect, StoreOp):
                    call_id = strand.call_id = next(self._ids)
                    self._calls[call_id] = strand
                    self._out.append(StoreCall(call_id=call_id, op=effect))
                    return
                if isinstance(effect, Sleep):
                    strand.deadline = now + max(0.0, effect.seconds)
                    return
                # The renewal yields only the three above.
                assert strand is self._main
                if self._program_effect(effect, now):
                    return
            except Exception as exc:  # thrown back into the program
                error = exc

    def _program_effect(self, effect: Any, now: float) -> bool:
        """Take on an effect only the program yields: ``True`` when the program waits for
        it, ``False`` when it goes on at once (with ``None``)."""
        if isinstance(effect, StartRenewal):
            self._renewal = _Strand(renewal(effect.lease))
            self._resume(self._renewal, now)
            return False
        if isinstance(effect, StopRenewal):
            renewing = self._renewal
            assert renewing is not None  # ``leased`` starts it first
            if renewing.call_id is not None:
                self._stopping = True
                return True
            self._renewal = None
            renewing.program.close()
            return False
        if isinstance(effect, RunDurable):
            wall = self._wall + (now - self._start)
            self._inner = effect.job(self._selector, now, wall, store=self.store)
            return True
        if isinstance(effect, self._outside):
            self.effect = effect
            return True
        raise CoderAgentError(f"a durable program yielded an unknown effect {effect!r}")
