"""The engine of the durable machines: ``CoreMachine`` plus store calls and tool runs.

A ``DurableMachine`` speaks the action vocabulary of ``coder_proto._actions`` (``SendRequest``,
``CancelRequest``, ``RunTools``, deadlines with ``tick``) plus ``StoreCall``
(``coder_proto.durable._store``). Its extra inputs are ``store_result(call_id, value, now)``,
``store_failed(call_id, error, now)`` and ``tool_results(outcomes, now)``. An adapter drives
it like any other machine and performs store calls on the durable store it was given.

``DurableWork`` runs one on the driver an adapter uses for every other machine (through
``coder_proto.Connection``), so its requests get that driver's HTTP client, session token
and transport events, its store calls become ``ApplyStore`` commands, and a workflow lease's
guard is checked before each side effect.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from .._actions import CancelRequest, RunTools, ToolOutcome
from .._agent.tool_calls import ToolPlan, plan_tool_calls
from .._agent.tools import Tool
from .._agent.turn import normalize_outcomes
from .._engine import CoreMachine, Wait
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .._rest.http import HttpResponse
from .._rest.prefix import PrefixSelector
from ._errors import DurableStoreError
from ._store import StoreCall, StoreOp

__all__ = [
    "DurableJob",  # the earlier name of DurableWork
    "DurableMachine",
    "DurableWork",
]

T = TypeVar("T")

_PENDING: Final = object()


class _StoreFailure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class DurableMachine(CoreMachine[T]):
    """A ``CoreMachine`` that can also call the durable store and run client tools."""

    def __init__(self, selector: PrefixSelector) -> None:
        super().__init__(selector)
        self._store_ids = itertools.count(1)
        self._store_calls: dict[int, Any] = {}
        self._tool_calls: tuple[ToolCall, ...] | None = None
        self._tool_outcomes: tuple[ToolOutcome, ...] | None = None

    # -- inputs ------------------------------------------------------------------------------

    def store_result(self, call_id: int, value: Any, now: float) -> None:
        """The store call ``call_id`` returned ``value``. Unknown ids are ignored."""
        if self._store_calls.get(call_id, None) is _PENDING:
            self._store_calls[call_id] = value
        self._step(now)

    def store_failed(self, call_id: int, error: BaseException, now: float) -> None:
        """The store call ``call_id`` raised ``error``. Unknown ids are ignored."""
        if self._store_calls.get(call_id, None) is _PENDING:
            self._store_calls[call_id] = _StoreFailure(error)
        self._step(now)

    def tool_results(self, outcomes: Sequence[ToolOutcome], now: float) -> None:
        """The outcomes of the outstanding ``RunTools`` (D5: one per call; a missing one
        becomes an error result). Ignored when no tools are being run."""
        if self._tool_calls is not None and self._tool_outcomes is None:
            if isinstance(outcomes, ToolOutcome):
                outcomes = (outcomes,)
            self._tool_outcomes = normalize_outcomes(self._tool_calls, list(outcomes))
        self._step(now)

    # -- for subclasses ----------------------------------------------------------------------

    def _store(self, method: str, *args: Any) -> Wait[Any]:
        """Call ``method`` on the durable store and return its checked value; a failure
        raises ``DurableStoreError`` with the store's exception as its cause."""
        op = StoreOp(method, args)
        call_id = next(self._store_ids)
        self._store_calls[call_id] = _PENDING
        # StoreCall extends the action vocabulary for durable machines only.
        outbox: list[Any] = self._outbox
        outbox.append(StoreCall(call_id=call_id, op=op))
        try:
            while self._store_calls[call_id] is _PENDING:
                yield from self._wait()
            outcome = self._store_calls[call_id]
        finally:
            self._store_calls.pop(call_id, None)
        if isinstance(outcome, _StoreFailure):
            error = outcome.error
            raise DurableStoreError(
                f"the durable store's {method} failed: {type(error).__name__}: {error}"
            ) from error
        try:
            return op.check(outcome)
        except CoderAgentError as exc:
            raise DurableStoreError(exc.message) from exc

    def _run_tools(self, calls: tuple[ToolCall, ...]) -> Wait[tuple[ToolOutcome, ...]]:
        """Ask the adapter to run ``calls`` (one ``RunTools``) and return one outcome per
        call, in order (D5)."""
        self._tool_calls = calls
        self._tool_outcomes = None
        self._emit(RunTools(calls=calls))
        try:
            while self._tool_outcomes is None:
                yield from self._wait()
            return self._tool_outcomes
        finally:
            self._tool_calls = None
            self._tool_outcomes = None


class DurableWork:
    """A durable machine as a job of the core's driving (``coder_proto.Connection``'s
    ``start_durable``): its requests are ordinary requests (``StartHttp`` /
    ``CancelHttp``), its tool runs ordinary tool runs, and its store calls ``ApplyStore``
    commands performed with ``store`` (the adapter's performer of a ``StoreOp``: a plain or a
    coroutine function; opaque here).

    ``tools`` are the client tools its ``RunTools`` may run (``plan_tools`` applies the
    tool-call policy to a pause, D5). With a ``guard`` (a workflow lease's, D27), every side
    effect the machine asks for (a request, a tool run, a store write) is checked first: once
    the guard refuses, nothing of that batch is performed, the machine is cancelled with the
    guard's error, and that error is the job's result.

    On ``coder_proto.Connection`` (``start_durable``): perform each ``ApplyStore`` with
    ``call.runner`` (this ``store``) and answer ``store_finished``; its
    tool pauses come as ``InvokeTools`` with the invocations ``plan_tools`` planned, each
    answered with ``tool_finished``. The task's result is the machine's."""

    def __init__(
        self,
        machine: DurableMachine[T],
        *,
        store: Any = None,
        tools: Mapping[str, Tool] | None = None,
        guard: Callable[[object], None] | None = None,
    ) -> None:
        self.machine = machine
        self.store = store
        self.tools: Mapping[str, Tool] = tools if tools is not None else {}
        self.guard = guard
        #: What the guard raised, once it refused a side effect.
        self.refused: BaseException | None = None

    def __repr__(self) -> str:
        return f"<DurableWork {self.machine!r}>"

    @property
    def done(self) -> bool:
        """The machine finished: ``result()`` returns its value or raises its error."""
        return bool(self.machine.done)

    @property
    def chat_id(self) -> str | None:
        """The chat the machine works on, when it has one."""
        chat_id = getattr(self.machine, "chat_id", None)
        return chat_id if isinstance(chat_id, str) else None

    def plan_tools(self, calls: Sequence[ToolCall]) -> ToolPlan:
        """The tool-call policy for one ``RunTools`` pause of the machine (D5)."""
        return plan_tool_calls(calls, self.tools, chat_id=self.chat_id)

    def actions(self) -> list[Any]:
        """The machine's pending actions, each side effect checked by the guard first."""
        machine = self.machine
        actions: list[Any] = machine.actions()
        guard = self.guard
        if guard is None or self.refused is not None:
            return actions
        try:
            for action in actions:
                if isinstance(action, StoreCall):
                    guard(action.op)
                elif not isinstance(action, CancelRequest):
                    guard(action)
        except Exception as exc:  # the guard's refusal (``WorkflowLeaseLostError``)
            self.refused = exc
            machine.cancel(machine.now, exc)
            return [a for a in (*actions, *machine.actions()) if isinstance(a, CancelRequest)]
        return actions

    def next_deadline(self) -> float | None:
        return self.machine.next_deadline()

    def request_deadline(self, request_id: int) -> float | None:
        """When the machine abandons request ``request_id`` (``CoreMachine.request_deadline``):
        what a blocking adapter bounds the request by."""
        return self.machine.request_deadline(request_id)

    def tick(self, now: float) -> None:
        self.machine.tick(now)

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None:
        self.machine.response_received(request_id, response, now)

    def request_failed(self, request_id: int, message: str | CoderAgentError, now: float) -> None:
        self.machine.request_failed(request_id, message, now)

    def store_result(self, call_id: int, value: Any, now: float) -> None:
        self.machine.store_result(call_id, value, now)

    def store_failed(self, call_id: int, error: BaseException, now: float) -> None:
        self.machine.store_failed(call_id, error, now)

    def tool_results(self, outcomes: Sequence[ToolOutcome], now: float) -> None:
        self.machine.tool_results(outcomes, now)

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        self.machine.cancel(now, reason)

    def result(self) -> Any:
        """The machine's value, or raise its error (the guard's, once it refused)."""
        if self.refused is not None:
            raise self.refused
        return self.machine.result()


DurableJob = DurableWork  # the earlier name, still exported
