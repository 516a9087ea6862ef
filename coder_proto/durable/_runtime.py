"""What every adapter's durable functions share (docs/durable-workflows.md; D5, D22, D26): the
step's setup, the agent it runs, the bookkeeping of driving a durable machine, stepping an
effect program, and the crash-safe tool binding.

The adapters' ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and ``bind_tools`` keep
only their I/O: store calls (in a worker thread, or awaited), requests through their driver,
tool functions, waiting, and their runtime's cancellation.

* ``DurableStep`` turns ``run_turn``'s arguments into the ``StepPlan`` (the commit window
  defaults to ``request_timeout``, else 300 s), the step's client tools (the options'
  ``tools``), and the keyword arguments of each agent the step runs (its ``AgentOptions``);
* ``turn_report`` reads a finished (or failed) agent turn into a ``TurnReport``;
* ``DurableDrive`` is the loop of driving one durable machine: its actions become
  ``Relay`` / ``Abandon`` / ``ApplyStore`` / ``RunCalls`` commands, outcomes are fed back,
  deadlines ticked, a cancellation cancels the machine and abandons its requests;
* ``EffectStep`` steps an effect program (``step_program``, a crash-safe tool's program):
  each effect's value is sent back, an exception thrown back in;
* ``tool_binder`` builds an adapter's ``bind_tools`` from its crash-safe function class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import attrs

from .._actions import CancelRequest, RunTools, SendRequest, ToolOutcome
from .._agent.structured_output import StructuredOutput
from .._agent.tools import Tool, tools_by_name
from .._constants import INTERRUPT_POLL_INTERVAL, INTERRUPT_WAIT_TIMEOUT
from .._errors import CoderAgentError
from .._options import AgentOptions
from .._outputs import ToolCall
from .._rest.http import HttpRequest, HttpResponse
from ._lease import DEFAULT_LEASE_POLL, WorkflowLease
from ._records import DEFAULT_TENANT
from ._recovery import DEFAULT_COMMIT_WINDOW, DEFAULT_SETTLE_TIMEOUT
from ._step import DurableStepResult, StepPlan, TurnReport, step_program
from ._store import DEFAULT_LEASE_DURATION, StoreCall, StoreOp, check_store
from ._store_engine import DurableMachine
from ._tools import CrashSafeTool, DurableBinding

__all__ = [
    "Abandon",
    "ApplyStore",
    "BindTools",
    "BoundFunction",
    "DurableCommand",
    "DurableDrive",
    "DurableStep",
    "EffectStep",
    "Relay",
    "RunCalls",
    "ToolsArg",
    "bind_crash_safe",
    "commit_window_for",
    "tool_binder",
    "turn_report",
]

logger = logging.getLogger("coder_proto")

#: What ``tools=`` accepts (``coder_proto._agent.tools.tools_by_name``).
ToolsArg: TypeAlias = Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | None

#: An adapter's crash-safe function: ``(tool, binding, store)`` -> the callable that runs the
#: tool's program with the store on that runtime.
BoundFunction: TypeAlias = Callable[[CrashSafeTool, DurableBinding, Any], Any]


def commit_window_for(commit_window: float | None, request_timeout: float | None) -> float:
    """How long a crashed attempt's send may still land (recovery's commit window): the
    caller's value, else the turn's ``request_timeout`` (C.3: no send outlives it), else
    ``DEFAULT_COMMIT_WINDOW`` (300 s)."""
    if commit_window is not None:
        return float(commit_window)
    if request_timeout is not None and request_timeout > 0:
        return float(request_timeout)
    return DEFAULT_COMMIT_WINDOW


# -- one step -------------------------------------------------------------------------------------


class BindTools(Protocol):
    """An adapter's ``bind_tools``."""

    def __call__(
        self,
        tools: ToolsArg,
        *,
        store: Any,
        tenant: str = DEFAULT_TENANT,
        workflow_id: str | None = None,
        step: str | None = None,
    ) -> dict[str, Tool]: ...


class DurableStep:
    """One ``run_turn`` call, checked before anything is journaled or sent: the store, the
    plan (``StepPlan``), the step's client tools (``agent.tools``) and its agents' settings
    (``agent``). The adapter runs ``program()``'s effects; ``agent_kwargs`` are the arguments
    of the agent of one ``RunAgentTurn`` (or of the dry construction that checks the settings
    up front). ``on_transport_event`` goes to those agents only when the client was supplied
    (a client created for the call has the hook already)."""

    def __init__(
        self,
        workflow_id: str,
        prompt: str,
        *,
        store: Any,
        step: str | None,
        tenant: str,
        agent: AgentOptions,
        commit_window: float | None = None,
        settle_timeout: float = DEFAULT_SETTLE_TIMEOUT,
        interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
        poll_interval: float = INTERRUPT_POLL_INTERVAL,
        supplied_client: bool = False,
        on_transport_event: Callable[[Any], object] | None = None,
        lease_owner: str | None = None,
        lease_duration: float = DEFAULT_LEASE_DURATION,
        lease_wait: float | None = None,
    ) -> None:
        check_store(store)
        self.store = store
        self.tools: dict[str, Tool] = dict(agent.tools)
        self.agent = agent
        self.supplied_client = supplied_client
        self.on_transport_event = on_transport_event
        output_type = agent.output_type
        self.plan = StepPlan(
            workflow_id=workflow_id,
            prompt=prompt,
            step=step,
            tenant=tenant,
            client_tools=frozenset(self.tools),
            structured=StructuredOutput(output_type) if output_type is not None else None,
            commit_window=commit_window_for(commit_window, agent.request_timeout),
            settle_timeout=settle_timeout,
            interrupt_timeout=interrupt_timeout,
            poll_interval=poll_interval,
        )
        #: The workflow's lease this step holds (D27); ``None`` without an owner id.
        self.lease: WorkflowLease | None = None
        if lease_owner is not None:
            self.lease = WorkflowLease(
                tenant=tenant,
                workflow_id=workflow_id,
                owner=lease_owner,
                duration=lease_duration,
                wait=lease_wait,
                poll=min(poll_interval, DEFAULT_LEASE_POLL)
                if poll_interval > 0
                else DEFAULT_LEASE_POLL,
            )

    def __repr__(self) -> str:
        return f"DurableStep({self.plan.marker!r})"

    def guard(self, effect: object) -> None:
        """Before a side effect of the step: raise ``WorkflowLeaseLostError`` once the step
        lost its lease (D27)."""
        if self.lease is not None:
            self.lease.guard(effect)

    def program(self) -> Generator[Any, Any, DurableStepResult]:
        """The step's effect program (``coder_proto.durable.step_program``)."""
        return step_program(self.plan)

    @property
    def binding(self) -> DurableBinding:
        """The binding of tools run by the step's durable machines (recovery re-drives)."""
        plan = self.plan
        return DurableBinding(tenant=plan.tenant, workflow_id=plan.workflow_id, marker=plan.marker)

    def bound_tools(
        self, binding: DurableBinding, bound_function: BoundFunction
    ) -> dict[str, Tool]:
        """The step's tools with the crash-safe ones bound to the store with ``binding`` (its
        attempt included: the live loop journals ``resumed`` once a crash-safe tool of the
        attempt committed)."""
        return bind_crash_safe(self.tools, binding, self.store, bound_function)

    def agent_kwargs(
        self,
        chat_id: str | None,
        last_seen_message_id: int | None,
        binding: DurableBinding,
        bound_function: BoundFunction,
    ) -> dict[str, Any]:
        """``CoderAgent``'s keyword arguments (without ``client``) for a turn on ``chat_id``
        (``None``: a fresh chat) from ``last_seen_message_id``: the step's options with the
        tools bound with ``binding``."""
        kwargs: dict[str, Any] = {
            "options": self.agent,
            "tools": self.bound_tools(binding, bound_function),
            "chat_id": chat_id,
            "last_seen_message_id": last_seen_message_id,
        }
        if self.supplied_client and self.on_transport_event is not None:
            # With a created client its own hook gets every event; twice would duplicate them.
            kwargs["on_transport_event"] = self.on_transport_event
        return kwargs

    def dry_kwargs(self, bound_function: BoundFunction) -> dict[str, Any]:
        """The arguments of an agent built only to check the settings before anything is
        journaled or sent (construction does no I/O)."""
        binding = DurableBinding(tenant=self.plan.tenant)
        return self.agent_kwargs(None, None, binding, bound_function)


def turn_report(
    agent: Any, *, result: Any = None, error: BaseException | None = None, cancelled: bool = False
) -> TurnReport:
    """How an agent turn went, read off the agent after ``generate`` returned (``result``) or
    raised (``error``; ``cancelled`` when it was the runtime's own cancellation)."""
    return TurnReport(
        result=result,
        error=error,
        cancelled=cancelled,
        chat_id=agent.chat_id,
        last_seen_message_id=agent.last_seen_message_id,
        stranded_chat_ids=agent.stranded_chat_ids,
    )


# -- crash-safe tools ------------------------------------------------------------------------------


def bind_crash_safe(
    tools: ToolsArg, binding: DurableBinding, store: Any, bound_function: BoundFunction
) -> dict[str, Tool]:
    """``tools`` as a name -> tool mapping, every ``crash_safe`` one bound to ``store`` with
    ``binding`` (others pass through)."""
    out: dict[str, Tool] = {}
    for name, item in tools_by_name(tools).items():
        if isinstance(item, CrashSafeTool):
            out[name] = attrs.evolve(item, func=bound_function(item, binding, store))
        else:
            out[name] = item
    return out


def tool_binder(bound_function: BoundFunction) -> BindTools:
    """An adapter's ``bind_tools`` for its crash-safe function class (``BoundFunction``)."""

    def bind_tools(
        tools: ToolsArg,
        *,
        store: Any,
        tenant: str = DEFAULT_TENANT,
        workflow_id: str | None = None,
        step: str | None = None,
    ) -> dict[str, Tool]:
        """The tools with every ``crash_safe`` tool bound to ``store`` and ``tenant`` (others
        pass through), as a name -> tool mapping for ``CoderAgent(tools=...)``. With
        ``workflow_id`` (and the step's marker as ``step``), a crash-safe tool running on a
        chat no checkpoint names claims it for the workflow before its effect. ``run_turn``
        binds its tools itself."""
        check_store(store)
        binding = DurableBinding(tenant=tenant, workflow_id=workflow_id, marker=step)
        return bind_crash_safe(tools, binding, store, bound_function)

    bind_tools.__module__ = getattr(bound_function, "__module__", __name__)
    bind_tools.__qualname__ = "bind_tools"
    return bind_tools


# -- effect programs ---------------------------------------------------------------------------------


class EffectStep:
    """An effect program being run: ``effect`` is the one to perform now; report its value
    with ``send`` (or the exception it raised with ``throw``) until ``done``, then read
    ``value``. ``close`` abandons the program (the runtime's cancellation)."""

    def __init__(self, program: Generator[Any, Any, Any]) -> None:
        self._program = program
        self.done = False
        self.value: Any = None
        self.effect: Any = None
        self._advance(lambda: program.send(None))

    def __repr__(self) -> str:
        return f"<EffectStep done={self.done} effect={self.effect!r}>"

    def send(self, value: Any) -> None:
        """The current effect's value."""
        self._advance(lambda: self._program.send(value))

    def throw(self, error: BaseException) -> None:
        """The current effect raised ``error`` (the program may catch it)."""
        self._advance(lambda: self._program.throw(error))

    def close(self) -> None:
        """Abandon the program (its ``finally`` blocks run)."""
        self._program.close()
        self.done = True

    def _advance(self, step: Callable[[], Any]) -> None:
        try:
            self.effect = step()
        except StopIteration as stop:
            self.done = True
            self.effect = None
            self.value = stop.value


# -- driving durable machines -------------------------------------------------------------------------


@attrs.frozen
class Relay:
    """Send ``request`` (already routed by the client's prefix selector) through the client's
    driver (``RelayedRequest``), then report ``relayed(request_id, outcome)``."""

    request_id: int
    request: HttpRequest


@attrs.frozen
class Abandon:
    """Stop waiting for request ``request_id`` (its outcome is ignored from now on)."""

    request_id: int


@attrs.frozen
class ApplyStore:
    """Perform ``op`` on the durable store, then report ``stored`` or ``store_raised``."""

    call_id: int
    op: StoreOp


@attrs.frozen
class RunCalls:
    """Run the client tools of ``calls`` (D5), then report ``tools_returned`` or
    ``tools_raised``."""

    calls: tuple[ToolCall, ...]


DurableCommand: TypeAlias = Relay | Abandon | ApplyStore | RunCalls


class DurableDrive:
    """One durable machine being driven to its result (``coder_proto.durable._store_engine``).

    With a ``guard`` (a lease's), ``commands`` raises instead of returning a side effect
    the guard refuses; the adapter then cancels the drive as on its own cancellation.

    The adapter's loop: perform ``commands(now)`` (due deadlines are ticked first) in order;
    stop when ``done``; otherwise wait for an outcome at most ``delay(now)`` seconds
    (``None``: no deadline) and loop. Outcomes may be reported at any time, from the
    adapter's tasks; one for a request no longer ``wanted`` is ignored. On the runtime's
    cancellation: perform ``cancel(reason, now)`` (``Abandon`` commands) and re-raise.
    ``result()`` is the machine's value, or raises its error."""

    def __init__(
        self, machine: DurableMachine[Any], guard: Callable[[object], None] | None = None
    ) -> None:
        self.machine = machine
        self._requests: set[int] = set()
        #: Called before each side effect (``WorkflowLease.guard``): raises to stop the drive.
        self._guard = guard

    def __repr__(self) -> str:
        return f"<DurableDrive {self.machine!r}>"

    @property
    def done(self) -> bool:
        return bool(self.machine.done)

    def result(self) -> Any:
        return self.machine.result()

    def wanted(self, request_id: int) -> bool:
        """The outcome of request ``request_id`` is still awaited (not abandoned)."""
        return request_id in self._requests

    def commands(self, now: float) -> list[DurableCommand]:
        """Tick the machine if its deadline passed, then its pending actions as commands."""
        machine = self.machine
        deadline = machine.next_deadline()
        if deadline is not None and deadline <= now and not machine.done:
            machine.tick(now)
        out: list[DurableCommand] = []
        for action in machine.actions():
            out.append(self._command(action))
        guard = self._guard
        if guard is not None:
            for command in out:
                if not isinstance(command, Abandon):
                    guard(command.op if isinstance(command, ApplyStore) else command)
        return out

    def delay(self, now: float) -> float | None:
        """How long to wait for an outcome before ``commands`` must tick: seconds, or ``None``
        when the machine has no deadline."""
        deadline = self.machine.next_deadline()
        return None if deadline is None else max(0.0, deadline - now)

    def cancel(self, reason: BaseException | None, now: float) -> list[Abandon]:
        """The runtime cancelled the call (D22): the machine is cancelled; abandon its
        requests."""
        machine = self.machine
        machine.cancel(now, reason)
        out: list[Abandon] = []
        for action in machine.actions():
            if isinstance(action, CancelRequest):
                out.append(self._abandon(action.request_id))
        return out

    # -- outcomes ----------------------------------------------------------------------------

    def relayed(self, request_id: int, outcome: HttpResponse | str, now: float) -> None:
        """Request ``request_id`` was answered (an ``HttpResponse``) or failed (the message
        of its network failure)."""
        if request_id not in self._requests:
            return
        self._requests.discard(request_id)
        if isinstance(outcome, HttpResponse):
            self.machine.response_received(request_id, outcome, now)
        else:
            self.machine.request_failed(request_id, outcome, now)

    def stored(self, call_id: int, value: Any, now: float) -> None:
        """The store call ``call_id`` returned ``value``."""
        self.machine.store_result(call_id, value, now)

    def store_raised(self, call_id: int, error: BaseException, now: float) -> None:
        """The store call ``call_id`` raised ``error``."""
        self.machine.store_failed(call_id, error, now)

    def tools_returned(self, outcomes: Sequence[ToolOutcome], now: float) -> None:
        """The outcomes of the ``RunCalls`` (missing ones become error results, D5)."""
        self.machine.tool_results(list(outcomes), now)

    def tools_raised(self, error: BaseException, now: float) -> None:
        """The tool runner raised: logged, and every call still gets a result (D5)."""
        logger.warning(
            "the tool runner raised; the calls get error results",
            exc_info=(type(error), error, error.__traceback__),
        )
        self.machine.tool_results([], now)

    # -- internals ---------------------------------------------------------------------------

    def _command(self, action: Any) -> DurableCommand:
        if isinstance(action, SendRequest):
            self._requests.add(action.request_id)
            return Relay(action.request_id, action.request)
        if isinstance(action, CancelRequest):
            return self._abandon(action.request_id)
        if isinstance(action, StoreCall):
            return ApplyStore(action.call_id, action.op)
        if isinstance(action, RunTools):
            return RunCalls(action.calls)
        raise CoderAgentError(f"a durable machine emitted an unknown action {action!r}")

    def _abandon(self, request_id: int) -> Abandon:
        self._requests.discard(request_id)
        return Abandon(request_id)
