"""Agent observers: the hooks an agent calls around its work, for tracing and metrics
(docs/observability.md).

An observer sees, for one agent, every turn (its start, then its result or its failure),
every client tool execution (made around the tool's call, in the task or thread that runs
it, so an observer may make its own context current for the tool) and every transport event
of the agent's session (``segment:*``, ``ws:*``, and ``http:*`` when the agent's session and
its client share one event sink). ``observe(agent, observer)`` attaches one; the adapters
call the hooks only when one is attached, so an agent without an observer does no extra
work. ``coder_integrations.otel`` is the OpenTelemetry observer;
``coder_io_common.instrumentation.instrument`` (re-exported by every adapter) turns it on,
finding it through an entry point when it is called, so OpenTelemetry is not imported before.

This module imports nothing beyond the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from coder_proto.adapter import ToolOutcome, TransportEventSink

__all__ = [
    "AgentObserver",
    "ToolObservation",
    "TurnObservation",
    "observe",
    "observed_async_tool",
    "observed_tool",
    "tee_events",
    "turn_observation",
]

T = TypeVar("T")


class TurnObservation:
    """One turn as an observer follows it (no-op here). The adapter calls ``end`` when the
    turn ends: with its result (a ``TurnResult``/``GenerateResult``), or with the error (an
    exception, a cancellation included) that ended it, or with neither when a stream was
    left before it finished. Only the first call counts: it calls ``finished``, which a
    subclass overrides."""

    _ended = False

    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        """The turn ended (see the class docstring)."""
        if self._ended:
            return
        self._ended = True
        self.finished(result, error)

    def finished(self, result: Any, error: BaseException | None) -> None:
        """For subclasses: the turn ended, once."""

    def end_stream(self, run: Any, error: BaseException | None) -> None:
        """A streaming turn's block was left: ``run`` is the driver's ``TaskHandle`` (or ``None``
        when it never started). A finished run's result (or error) is read from its
        machine; an unfinished one was interrupted by leaving."""
        if self._ended:
            return
        if run is not None and run.done and error is None:
            try:
                result = run.machine.result()
            except Exception as exc:
                self.end(error=exc)
            else:
                self.end(result)
        else:
            self.end(error=error)


class ToolObservation:
    """One client tool execution as an observer follows it (no-op here); a context manager
    entered in the task or thread that runs the tool, around the call. ``invocation`` is the
    ``ToolInvocation`` to run (an observer may hand a stand-in that reports the exception a
    tool raised); ``outcome`` receives the ``ToolOutcome`` and returns it."""

    def __init__(self, invocation: Any) -> None:
        self.invocation = invocation

    def __enter__(self) -> ToolObservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def outcome(self, outcome: ToolOutcome) -> ToolOutcome:
        """The tool's outcome (returned unchanged)."""
        return outcome


class _NullTurn(TurnObservation):
    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        return None

    def end_stream(self, run: Any, error: BaseException | None) -> None:
        return None


_NULL_TURN = _NullTurn()


class AgentObserver:
    """Base class of an agent's observer: every hook does nothing. Subclasses override what
    they follow. Hooks must not raise (the adapters do not guard them)."""

    def turn_started(self, agent: Any, *, streaming: bool) -> TurnObservation:
        """A turn of ``agent`` starts (``generate``, or entering ``stream``)."""
        return _NULL_TURN

    def tool_started(self, invocation: Any) -> ToolObservation:
        """A client tool call (a ``ToolInvocation``) is about to run."""
        return ToolObservation(invocation)

    def transport_event(self, event: Any) -> None:
        """A transport event of the agent's session (``coder_proto`` transport events)."""


def turn_observation(
    observer: AgentObserver | None, agent: Any, *, streaming: bool
) -> TurnObservation:
    """The observation of a turn starting: the observer's, or one that does nothing."""
    if observer is None:
        return _NULL_TURN
    return observer.turn_started(agent, streaming=streaming)


def observed_tool(
    observer: AgentObserver | None, run: Callable[[Any], ToolOutcome]
) -> Callable[[Any], ToolOutcome]:
    """``run`` (a blocking runner of one ``ToolInvocation``) wrapped in the observer's tool
    hook; ``run`` itself without an observer."""
    if observer is None:
        return run
    hooks = observer

    def observed(invocation: Any) -> ToolOutcome:
        with hooks.tool_started(invocation) as seen:
            return seen.outcome(run(seen.invocation))

    return observed


def observed_async_tool(
    observer: AgentObserver | None, run: Callable[..., Awaitable[ToolOutcome]]
) -> Callable[..., Awaitable[ToolOutcome]]:
    """``run`` (an async runner whose last argument is the ``ToolInvocation``) wrapped in the
    observer's tool hook; ``run`` itself without an observer."""
    if observer is None:
        return run
    hooks = observer

    async def observed(*args: Any) -> ToolOutcome:
        *rest, invocation = args
        with hooks.tool_started(invocation) as seen:
            return seen.outcome(await run(*rest, seen.invocation))

    return observed


class _Tee:
    """A sink callback delivering each event to the listeners, then to the callback the sink
    had. A listener that raises is ignored (like any transport-event callback)."""

    __slots__ = ("listeners", "original")

    def __init__(self, original: Callable[[Any], object] | None) -> None:
        self.original = original
        self.listeners: list[Callable[[Any], object]] = []

    def __call__(self, event: Any) -> object:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                pass
        if self.original is not None:
            return self.original(event)
        return None


def tee_events(sink: TransportEventSink, listener: Callable[[Any], object]) -> None:
    """Deliver the events of ``sink`` to ``listener`` too (before the callback it has). The
    sink starts building events if it did not: only connections opened from now on report
    to it, so tee before the first turn."""
    tee = sink.callback
    if not isinstance(tee, _Tee):
        tee = _Tee(sink.callback)
        sink.callback = tee
        sink.enabled = True
    if listener not in tee.listeners:
        tee.listeners.append(listener)


def observe(agent: Any, observer: AgentObserver) -> None:
    """Attach ``observer`` to ``agent`` (any adapter's ``CoderAgent``): its hooks are called
    from the next turn on, and it receives the transport events of the agent's session. An
    agent has at most one observer; attaching another replaces the hooks (events keep going
    to every observer attached so far)."""
    agent._observer = observer
    tee_events(agent._core.session.sink, observer.transport_event)
