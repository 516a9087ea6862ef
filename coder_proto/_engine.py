"""The engine behind the core's multi-step machines (turns, segments, cleanup jobs).

A machine's logic is written as a generator coroutine that reads like the spec's sequential
drivers (state machines G.2, H.4): it sends a REST request and waits for its answer, sleeps
until a deadline, waits for stream events. It never blocks: every wait is a ``yield`` that
hands control back to the adapter, and every input (a response, bytes, a tick) steps the
coroutine once, which then re-checks what it was waiting for. The adapter sees only the
``Machine`` protocol of ``coder_proto._actions``: inputs that carry ``now``, ``actions()``,
``next_deadline()``, ``done`` and ``result()``.

Two interruptions can reach a waiting coroutine, always checked before anything else it waits
for (C.4): the runtime's own cancellation (``cancel(now)``, D22) raises ``Cancelled`` inside it,
and the deadline it armed with ``_arm_abort_deadline`` raises ``TimedOut``. The coroutine's
``except``/``finally`` blocks do the spec's cleanup (interrupt or withdraw, advance the cursor,
settle events) exactly where the reference has them.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from ._actions import Action, CancelRequest, SendRequest
from ._errors import CoderAgentError
from ._rest.http import HttpRequest, HttpResponse
from ._rest.prefix import Completed, Failed, PrefixSelector, Retry

__all__ = ["Cancelled", "CoreMachine", "Interruption", "TimedOut", "Wait"]

logger = logging.getLogger("coder_proto")

T = TypeVar("T")
R = TypeVar("R")

#: What a machine coroutine yields: nothing; it is resumed after every input.
Wait = Generator[None, None, T]


class Interruption(Exception):
    """Base of the two interruptions a waiting coroutine can receive."""


class Cancelled(Interruption):
    """The runtime cancelled the call (D22); ``reason`` is what the adapter reported."""

    def __init__(self, reason: BaseException | None = None) -> None:
        super().__init__("cancelled")
        self.reason = reason


class TimedOut(Interruption):
    """The deadline armed with ``_arm_abort_deadline`` passed (C.3)."""


class Exchange(Protocol):
    """A REST exchange machine: ``PrefixedExchange`` (wire 1.4) or ``ModelConfigsExchange``
    (wire 8). Its outcome is ``Retry(request)`` (send again), ``Failed(error)``, or the
    exchange's own result."""

    @property
    def request(self) -> HttpRequest: ...

    def on_response(self, response: HttpResponse) -> Any: ...

    def on_network_error(self, message: str) -> Failed: ...


class _Call:
    """One logical REST call: an exchange, the request id currently in flight, and the
    deadline the machine waits for it with (``None``: none of its own)."""

    __slots__ = ("deadline", "exchange", "outcome", "request_id")

    def __init__(self, exchange: Exchange, request_id: int) -> None:
        self.exchange = exchange
        self.request_id = request_id
        self.outcome: Any = None
        self.deadline: float | None = None


_NOT_FINISHED = CoderAgentError("the machine has not finished yet")


class CoreMachine(Generic[T]):
    """A sans-I/O machine driven by a generator coroutine (``_run``).

    Subclasses implement ``_run`` and call ``_start(now)`` once constructed. The adapter feeds
    ``response_received`` / ``request_failed`` for the requests it was asked to send, ``tick``
    when ``next_deadline()`` passes, and ``cancel`` when its own task is cancelled.
    """

    __slots__ = (
        "_abort_deadline",
        "_calls",
        "_cancel",
        "_error",
        "_finished",
        "_gen",
        "_now",
        "_outbox",
        "_request_ids",
        "_selector",
        "_stepping",
        "_timers",
        "_value",
        "cancelled",
    )

    def __init__(self, selector: PrefixSelector) -> None:
        self._selector = selector
        self._outbox: list[Action] = []
        self._request_ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._timers: dict[object, float] = {}
        self._now = 0.0
        self._gen: Generator[None, None, T] | None = None
        self._finished = False
        self._stepping = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._cancel: Cancelled | None = None
        self._abort_deadline: float | None = None
        #: True when the machine ended because of ``cancel`` (the adapter re-raises its own
        #: cancellation; ``result()`` must not be consulted).
        self.cancelled = False

    # -- the adapter's side ----------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once the machine finished (with a value, an error, or cancelled)."""
        return self._finished

    def actions(self) -> list[Action]:
        """Drain the actions to perform, in order."""
        out, self._outbox = self._outbox, []
        return out

    def next_deadline(self) -> float | None:
        """The monotonic time at which ``tick`` must be called, or ``None``."""
        if self._finished:
            return None
        times = list(self._timers.values())
        if self._abort_deadline is not None:
            times.append(self._abort_deadline)
        return min(times) if times else None

    def tick(self, now: float) -> None:
        """Time passed (a deadline may have expired)."""
        self._step(now)

    def resume(self, now: float) -> None:
        """Something the machine waits for moved without passing through one of its inputs
        (a driver fed its session's stream reader directly): run it until it waits again."""
        self._step(now)

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None:
        """The response to request ``request_id`` arrived (any status). Unknown or abandoned
        request ids are ignored."""
        call = self._calls.get(request_id)
        if call is None:
            self._step(now)
            return
        outcome = call.exchange.on_response(response)
        self._drop_call(request_id)
        if isinstance(outcome, Retry):
            self._send(call, outcome.request)
        else:
            call.outcome = outcome
        self._step(now)

    def request_failed(self, request_id: int, message: str | CoderAgentError, now: float) -> None:
        """Request ``request_id`` got no response (network failure). ``message`` must not
        contain credentials. A ``CoderAgentError`` instead of a message is the adapter's
        verdict on an answer it refused (a body over ``max_response_bytes``, D30): the call
        fails with it as is."""
        call = self._drop_call(request_id)
        if call is not None:
            if isinstance(message, CoderAgentError):
                call.outcome = Failed(message)
            else:
                call.outcome = call.exchange.on_network_error(message)
        self._step(now)

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        """The runtime cancelled the call (D22). The machine runs its cancellation cleanup at
        once (firing background work as actions) and finishes with ``cancelled`` set; drain
        ``actions()`` once more, then re-raise the runtime's own cancellation. ``reason`` is the
        caller's cancellation or deadline exception, or ``None`` for a consumer teardown."""
        if self._finished:
            return
        self._cancel = Cancelled(reason)
        self._step(now)

    def result(self) -> T:
        """The machine's value, or raise its error."""
        if not self._finished:
            raise _NOT_FINISHED
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    @property
    def error(self) -> BaseException | None:
        """The error the machine finished with, if any."""
        return self._error

    @property
    def abort_deadline(self) -> float | None:
        """The monotonic time at which the machine abandons whatever it waits for and fails
        with its timeout (a turn segment's ``request_timeout``, state machines C.3), or
        ``None`` when no such deadline is armed (or the machine is done). A blocking adapter
        bounds the request it performs by it, as an event loop's timer would cut it."""
        return self._abort_deadline

    def request_deadline(self, request_id: int) -> float | None:
        """The monotonic time at which the machine abandons request ``request_id`` if it is
        still unanswered: the deadline it waits for that request with (a cleanup's
        ``settle_deadline``, a background job's bound) or the abort deadline (C.3), whichever
        comes first (a request not in flight has only the abort deadline); ``None`` when
        neither is set. A blocking adapter bounds the request it performs by it, as an event
        loop's timer would cut the request when the machine abandons it."""
        call = self._calls.get(request_id)
        own = None if call is None else call.deadline
        abort = self._abort_deadline
        if own is None:
            return abort
        if abort is None:
            return own
        return min(own, abort)

    # -- for subclasses ----------------------------------------------------------------------

    def _run(self) -> Generator[None, None, T]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _start(self, now: float) -> None:
        self._now = now
        self._gen = self._run()
        self._step(now)

    def _step(self, now: float) -> None:
        if now > self._now:
            self._now = now
        if self._finished or self._stepping or self._gen is None:
            return
        self._stepping = True
        try:
            self._gen.send(None)
        except StopIteration as stop:
            self._finish(value=stop.value, error=None)
        except Cancelled:
            self.cancelled = True
            self._finish(error=CoderAgentError("the call was cancelled"))
        except CoderAgentError as exc:
            self._finish(error=exc)
        except TimeoutError as exc:
            self._finish(error=exc)
        except Exception as exc:
            # A bug must not escape as a bare KeyError/TypeError: wrap it, keep the cause.
            logger.error("internal error in %s", type(self).__name__, exc_info=True)
            wrapped = CoderAgentError(f"internal error in {type(self).__name__}: {exc!r}")
            wrapped.__cause__ = exc
            self._finish(error=wrapped)
        finally:
            self._stepping = False

    def _finish(self, *, value: Any = None, error: BaseException | None) -> None:
        self._finished = True
        self._value = value
        self._error = error
        self._timers.clear()
        self._abort_deadline = None
        for request_id in list(self._calls):
            self._outbox.append(CancelRequest(request_id=request_id))
        self._calls.clear()

    @property
    def now(self) -> float:
        """The latest ``now`` any input carried."""
        return self._now

    def _emit(self, action: Action) -> None:
        self._outbox.append(action)

    def _emit_all(self, actions: list[Action]) -> None:
        self._outbox.extend(actions)

    def _arm_abort_deadline(self, deadline: float | None) -> None:
        """Arm (or, with ``None``, disarm) the deadline that raises ``TimedOut`` at the next
        wait."""
        self._abort_deadline = deadline

    def _check_interruptions(self) -> None:
        """Raise a pending cancellation, then an expired abort deadline (C.4: the abort and
        timeout are checked before anything else)."""
        if self._cancel is not None:
            cancel, self._cancel = self._cancel, None
            raise cancel
        deadline = self._abort_deadline
        if deadline is not None and self._now >= deadline:
            self._abort_deadline = None
            raise TimedOut()

    def _wait(self) -> Wait[None]:
        """Suspend until the next input, then check interruptions."""
        yield
        self._check_interruptions()

    def _set_timer(self, key: object, when: float | None) -> None:
        if when is None:
            self._timers.pop(key, None)
        else:
            self._timers[key] = when

    def _sleep_until(self, when: float) -> Wait[None]:
        """Wait until ``when`` (interruptible)."""
        key = object()
        self._set_timer(key, when)
        try:
            self._check_interruptions()
            while self._now < when:
                yield from self._wait()
        finally:
            self._timers.pop(key, None)

    # -- REST ------------------------------------------------------------------------------

    def _send(self, call: _Call, request: HttpRequest) -> None:
        request_id = next(self._request_ids)
        call.request_id = request_id
        self._calls[request_id] = call
        self._emit(SendRequest(request_id=request_id, request=request))

    def _begin_call(self, request: HttpRequest) -> _Call:
        """Send ``request`` through the prefix selector (wire 1.4) without waiting."""
        return self._begin_exchange(self._selector.begin(request))

    def _begin_exchange(self, exchange: Exchange) -> _Call:
        """Send the first request of ``exchange`` without waiting."""
        call = _Call(exchange, 0)
        self._send(call, exchange.request)
        return call

    def _abandon(self, call: _Call) -> None:
        """Forget ``call`` and tell the adapter its outcome no longer matters."""
        if call.outcome is None and self._drop_call(call.request_id) is not None:
            self._emit(CancelRequest(request_id=call.request_id))

    def _drop_call(self, request_id: int) -> _Call | None:
        """Forget request ``request_id``'s call (``None`` when it is not in flight). The last
        one leaves a fresh, empty table: an emptied dict keeps its slots, about 160 bytes an
        open, idle turn would hold after its requests."""
        calls = self._calls
        call = calls.pop(request_id, None)
        if not calls:
            self._calls = {}
        return call

    @staticmethod
    def _completed(parse: Callable[[HttpRequest, HttpResponse], R]) -> Callable[[Any], R]:
        def classify(outcome: Any) -> R:
            assert isinstance(outcome, Completed)
            return parse(outcome.request, outcome.response)

        return classify

    def _await_call(
        self,
        call: _Call,
        parse: Callable[[Any], R],
        *,
        deadline: float | None = None,
        timeout_message: str = "",
    ) -> Wait[R]:
        """Wait for ``call`` and classify its outcome with ``parse`` (a ``Failed`` outcome
        raises its error); on ``deadline`` abandon it and raise the builtin ``TimeoutError``."""
        key = object()
        if deadline is not None:
            call.deadline = deadline
            self._set_timer(key, deadline)
        try:
            while call.outcome is None:
                if deadline is not None and self._now >= deadline:
                    self._abandon(call)
                    raise TimeoutError(timeout_message or "the request did not finish in time")
                yield from self._wait()
        finally:
            self._timers.pop(key, None)
            self._abandon(call)
        outcome = call.outcome
        if isinstance(outcome, Failed):
            raise outcome.error
        return parse(outcome)

    def _rest(
        self,
        request: HttpRequest,
        parse: Callable[[HttpRequest, HttpResponse], R],
        *,
        deadline: float | None = None,
        timeout_message: str = "",
    ) -> Wait[R]:
        """Send ``request`` and wait for its classified answer."""
        call = self._begin_call(request)
        return (
            yield from self._await_call(
                call, self._completed(parse), deadline=deadline, timeout_message=timeout_message
            )
        )
