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
* ``RunAgentTurn``: the step's agent turn, a task of the connection of its own (a child of
  the job's, ``StartStepTurn``): an agent core built from ``DurableStep.turn_kwargs`` with
  the step's chat gate on a fresh chat (D28), its ``generate`` ladder run as any turn is,
  its tool pauses the job's own ``InvokeTools``. When it ends, the agent is closed without
  archiving (archiving ends resumability) and the job waits for the interrupt a cut turn
  fired (bounded by the interrupt's own ``BACKGROUND_TASK_BOUND``, D22) before the program
  gets the ``TurnReport``. ``timeout`` (the blocking adapter's) bounds the turn: past it the turn is
  cancelled (``CancelStepTurn``) and reported with the builtin ``TimeoutError``.

Cancelling the job cancels a running turn first (its interrupt fired, its early checkpoint's
write waited for by the turn itself) and answers the program with the cancelled turn's
``TurnReport``; otherwise the cancellation is thrown into the program once, wherever it
waits. Either way, what the program still does afterwards (the lease's release, a step's
checkpoint) runs on; the job ends when the program ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs

from .._actions import ToolOutcome
from .._agent.agent_core import AgentCore
from .._agent.options import resolve_options
from .._agent.tool_calls import ToolPlan
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .._rest.http import HttpResponse
from .._rest.prefix import PrefixSelector
from .._shells.agent_shell import segment_sink
from .._transport_events import TransportEventSink
from ._effects import Sleep, WallClock
from ._runtime import RunDurable, StartRenewal, StopRenewal, renewal, turn_report
from ._step import RunAgentTurn, TurnReport
from ._store import StoreCall, StoreOp
from ._store_engine import DurableWork

if TYPE_CHECKING:
    from .._agent.session import Session
    from .._agent.session_state import ChatGate
    from ._runtime import DurableStep

__all__ = ["CancelStepTurn", "ProgramJob", "StartStepTurn"]


@attrs.frozen
class StartStepTurn:
    """A job's action: start the step's agent turn of ``effect`` as a child task of the job's
    (``ProgramJob.turn_agent`` builds its agent core; the connection sets ``ProgramJob.turn``
    and answers with ``ProgramJob.turn_ended``)."""

    effect: RunAgentTurn


@attrs.frozen
class CancelStepTurn:
    """A job's action: cancel its running turn (``ProgramJob.turn``) with ``reason`` (the
    caller's cancellation, the job's ``timeout``, or ``None`` for the connection's end)."""

    reason: BaseException | None


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
    gives the wall clock. A ``run_turn`` call's job has its ``step`` (``DurableStep``), whose
    agent turns it runs: ``timeout`` bounds each (seconds, ``None``: unbounded),
    ``make_sink`` makes the sink of the step's own ``on_transport_event`` (the embedder's, so
    that a coroutine callback runs its way; a plain ``TransportEventSink`` by default) and
    ``env`` names the organization when the settings do not (D33). The program starts at
    once."""

    def __init__(
        self,
        program: Generator[Any, Any, Any],
        *,
        store: Any,
        selector: PrefixSelector,
        now: float,
        wall: float,
        step: DurableStep | None = None,
        timeout: float | None = None,
        make_sink: Callable[[Callable[[Any], object]], TransportEventSink] = TransportEventSink,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self._selector = selector
        self._start = now
        self._wall = wall
        self._step = step
        self._timeout = timeout
        self._make_sink = make_sink
        self._env = env
        self.now = now
        #: The step's running agent turn: the connection's child ``Task`` (``StartStepTurn``).
        self.turn: Any = None
        #: When the running turn is cut (``timeout``).
        self._turn_deadline: float | None = None
        #: The caller's cancellation of the running turn (``cancel``), or the ``TimeoutError``
        #: that cut it (``timeout``): the turn's error in its report.
        self._turn_cancel: BaseException | None = None
        self._turn_cut: TimeoutError | None = None
        #: The ended turn's report, until its closing is over (``_closing``).
        self._report: TurnReport | None = None
        #: Holds while the ended turn's session still runs the interrupt it fired.
        self._closing: Callable[[], bool] | None = None
        #: A cancellation that came after the turn ended: the call still ends with it.
        self._late: BaseException | None = None
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
        return f"<ProgramJob done={self.done} turn={self.turn!r}>"

    # -- what the connection reads -----------------------------------------------------------

    @property
    def done(self) -> bool:
        """The program ended: ``result()`` returns its value or raises its error."""
        return self._main.ended

    def result(self) -> Any:
        """The program's value, or raise its error (or the caller's cancellation when it came
        only after the step's turn had ended)."""
        if not self._main.ended:
            raise CoderAgentError("the durable call has not finished yet")
        main = self._main
        if main.error is not None:
            raise main.error
        if self._late is not None:
            raise self._late
        return main.value

    def actions(self) -> list[Any]:
        """The pending actions: the durable machine's (checked by its guard), the store calls
        of the job's own strands, and the start or cancellation of the step's turn. An ended
        turn's report goes to the program first once its closing is over."""
        out: list[Any] = []
        if self._report is not None:
            self._answer_turn(self.now)
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
        deadlines.append(self._turn_deadline)
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
        if self._turn_deadline is not None and self._turn_deadline <= now:
            self._turn_deadline = None
            self._turn_cut = TimeoutError(
                f"the agent turn did not finish within its timeout of {self._timeout:g} s"
            )
            self._out.append(CancelStepTurn(self._turn_cut))

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

    # -- the step's agent turn (``StartStepTurn``) --------------------------------------------------

    def turn_agent(
        self,
        effect: RunAgentTurn,
        *,
        base_url: str,
        token: str | None,
        selector: PrefixSelector,
        sink: TransportEventSink,
    ) -> AgentCore:
        """The agent core of ``effect``'s turn on the connection (``base_url``, ``token``,
        ``selector``, its event ``sink``): ``DurableStep.turn_kwargs`` (``CoderAgent``'s
        keywords) mapped onto the core's, the agent's own ``on_transport_event`` given the
        ``segment:*`` events through the embedder's ``make_sink``, and a fresh chat held by
        the step's chat gate until its early checkpoint answered (D28)."""
        step = self._step
        assert step is not None  # only a step's program runs an agent turn
        kwargs = step.turn_kwargs(effect)
        callback = kwargs.pop("on_transport_event", None)
        if callback is not None:
            sink = segment_sink(sink, self._make_sink(callback))
        options = resolve_options(kwargs.pop("options"), {"tools": kwargs.pop("tools")})
        core = AgentCore(
            options,
            base_url=base_url,
            token=token,
            selector=selector,
            sink=sink,
            env=self._env,
            **kwargs,
        )
        if effect.chat_id is None:
            # Its ``StoreCall`` is an action the connection takes from durable work only, which
            # the agent package's ``Action`` does not name.
            core.session.chat_gate = cast("ChatGate", step.chat_gate(effect, self.store))
        return core

    def turn_ended(
        self,
        value: Any,
        error: BaseException | None,
        session: Session,
        closing: Callable[[], bool],
        now: float,
    ) -> None:
        """The running turn ended with ``value`` or ``error`` and its agent was closed:
        ``closing()`` holds while the interrupt it fired runs (itself bounded, D22); then the
        program gets the ``TurnReport`` read off the turn's ``session``."""
        self.now = now
        self.turn = None
        self._turn_deadline = None
        cancelled, cut = self._turn_cancel, self._turn_cut
        if cancelled is not None:
            report = turn_report(session, error=cancelled, cancelled=True)
        elif error is None:
            # Finished as the timeout fell due: the cut came too late.
            report = turn_report(session, result=value)
        else:
            report = turn_report(session, error=error if cut is None else cut)
        self._report = report
        self._closing = closing
        self._answer_turn(now)

    def _answer_turn(self, now: float) -> None:
        """Hand the ended turn's report to the program once its closing is over."""
        closing = self._closing
        if closing is not None and closing():
            return
        report = self._report
        assert report is not None
        self._report = None
        self._closing = None
        self._resume(self._main, now, report)

    # -- cancellation -------------------------------------------------------------------------------

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        """The caller's cancellation (``reason``; ``None``: the connection's end). A running
        turn is cancelled first and the program answered with its cancelled report; a turn
        that already ended is reported as it went, and the call still ends with the
        cancellation; otherwise the cancellation is thrown into the program once, wherever it
        waits. What the program still does afterwards (the lease's release, a step's
        checkpoint) runs on."""
        self.now = now
        if self._main.ended or self._cancelled:
            return
        self._cancelled = True
        error = reason if reason is not None else CoderAgentError("the durable call was cancelled")
        if self.turn is not None:
            self._turn_cancel = error
            self._turn_deadline = None
            self._out.append(CancelStepTurn(reason))
            return
        if self._report is not None:
            self._late = error
            return
        main = self._main
        if main.call_id is not None:
            del self._calls[main.call_id]
            main.call_id = None
        main.deadline = None
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
        if isinstance(effect, RunAgentTurn):
            self._out.append(StartStepTurn(effect))
            if self._timeout is not None:
                self._turn_deadline = now + self._timeout
            return True
        raise CoderAgentError(f"a durable program yielded an unknown effect {effect!r}")
