"""The engine of the durable machines: ``CoreMachine`` plus store calls and tool runs.

A ``DurableMachine`` speaks the action vocabulary of ``coder_proto._actions`` (``SendRequest``,
``CancelRequest``, ``RunTools``, deadlines with ``tick``) plus ``StoreCall``
(``coder_proto.durable._store``). Its extra inputs are ``store_result(call_id, value, now)``,
``store_failed(call_id, error, now)`` and ``tool_results(outcomes, now)``. An adapter drives
it like any other machine and performs store calls on the durable store it was given.

``RelayedRequest`` lets an adapter hand one of a durable machine's requests (already routed by
the shared prefix selector) to the driver it uses for every other machine, so the request
gets that driver's HTTP client, session token and transport events.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Final, TypeVar

from .._actions import Action, CancelRequest, RunTools, SendRequest, ToolOutcome
from .._agent.turn import normalize_outcomes
from .._engine import CoreMachine, Wait
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .._rest.http import HttpRequest, HttpResponse
from .._rest.prefix import PrefixSelector
from ._errors import DurableStoreError
from ._store import StoreCall, StoreOp

__all__ = ["DurableMachine", "RelayedRequest"]

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


class RelayedRequest:
    """A one-request machine: sends ``request`` as it is (no prefix selection: it was routed
    already) and finishes with the ``HttpResponse``, or with the network failure's message
    (a ``str``). Cancelling it abandons the request."""

    def __init__(self, request: HttpRequest) -> None:
        self.request = request
        self._pending: list[Action] = [SendRequest(request_id=1, request=request)]
        self._outcome: HttpResponse | str = "the request was abandoned"
        self._done = False

    def __repr__(self) -> str:
        return f"RelayedRequest(op={self.request.op!r}, done={self._done})"

    @property
    def done(self) -> bool:
        return self._done

    def actions(self) -> list[Action]:
        out, self._pending = self._pending, []
        return out

    def next_deadline(self) -> float | None:
        return None

    def tick(self, now: float) -> None:
        """Nothing waits on time here."""

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None:
        if not self._done:
            self._outcome, self._done = response, True

    def request_failed(self, request_id: int, message: str | CoderAgentError, now: float) -> None:
        if not self._done:
            self._outcome, self._done = str(message), True

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        if not self._done:
            self._pending = [CancelRequest(request_id=1)]
            self._done = True

    def result(self) -> HttpResponse | str:
        return self._outcome
