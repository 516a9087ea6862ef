"""What every adapter's durable functions share (docs/durable-workflows.md; D5, D22, D26-D28):
each call of ``run_turn``, ``archive_workflow`` and ``sweep_orphans`` as one effect program,
with the workflow lease around it, and the crash-safe tool binding.

A call's ``program()`` (``DurableStep`` for ``run_turn``, ``archive_call``, ``sweep_call``)
runs as a task of the client's connection (``coder_proto.durable._program_job.ProgramJob``),
which answers each effect (an exception is thrown back in):

* ``StoreOp``: a call on the durable store (an ``ApplyStore`` command);
* ``WallClock``: the wall clock; ``Sleep``: a deadline of the task;
* ``RunDurable``: build the durable job (``effect.job(selector, now, wall, store=...)``, the
  connection's prefix selector, the monotonic and the wall clock, and the adapter's performer
  of a ``StoreOp``) and run it inside the task: its requests are the connection's, its store
  calls ``ApplyStore`` commands, its tool runs the connection's, with ``job.plan_tools``
  deciding which functions to call;
* ``RunAgentTurn``: one agent turn, left to the adapter (``DurableStep.turn_kwargs``, the
  early checkpoint of ``DurableStep.early_checkpoint``, ``turn_report``);
* ``StartRenewal`` / ``StopRenewal``: start the lease's renewal timer, which runs
  ``renewal(lease)``'s effects beside the call until it is stopped, and stop it.

The caller's cancellation is thrown into the program too: the lease is still stopped and
released (bounded) before it propagates. ``tool_binder`` builds an adapter's ``bind_tools``
from its crash-safe function class, whose runs are ``crash_safe_program`` (``StoreOp``,
``WallClock`` and ``Invoke``, performed by the adapter where the agent calls the tool).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, Protocol, TypeAlias

import attrs

from .._agent.options import AgentOptions
from .._agent.structured_output import StructuredOutput
from .._agent.tools import Tool, tools_by_name
from .._constants import INTERRUPT_POLL_INTERVAL, INTERRUPT_WAIT_TIMEOUT
from .._rest.prefix import PrefixSelector
from ._archiving import ArchiveWorkflow, OrphanSweep
from ._effects import Sleep, WallClock
from ._lease import DEFAULT_LEASE_POLL, WorkflowLease
from ._records import DEFAULT_TENANT
from ._recovery import DEFAULT_COMMIT_WINDOW, DEFAULT_SETTLE_TIMEOUT
from ._step import DurableStepResult, RunAgentTurn, RunMachine, StepPlan, TurnReport, step_program
from ._store import DEFAULT_LEASE_DURATION, StoreCall, StoreOp, check_store
from ._store_engine import DurableMachine, DurableWork
from ._tools import CrashSafeTool, DurableBinding, LeaseCheck

__all__ = [
    "BindTools",
    "BoundFunction",
    "DurableCall",
    "DurableStep",
    "EarlyCheckpoint",
    "EffectStep",
    "Guard",
    "RunDurable",
    "StartRenewal",
    "StopRenewal",
    "ToolsArg",
    "archive_call",
    "bind_crash_safe",
    "commit_window_for",
    "crash_safe_program",
    "guarded",
    "leased",
    "renewal",
    "sweep_call",
    "tool_binder",
    "turn_report",
]

logger = logging.getLogger("coder_proto")

ToolsArg: TypeAlias = Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | None
"""What ``tools=`` accepts: tools or plain functions, a mapping of names to them, or ``None``."""

#: An adapter's crash-safe function: ``(tool, binding, store, guard=None, lease=None)`` ->
#: the callable that runs ``crash_safe_program`` with the store on that runtime (``lease``:
#: the step's ``WorkflowLease``, which the tool's context checks, D37).
BoundFunction: TypeAlias = Callable[..., Any]

Guard: TypeAlias = Callable[[object], None]
"""A check before each side effect (``WorkflowLease.guard``): raises to stop the call."""

#: What builds a durable machine: ``(selector, now, wall)`` -> the machine.
Build: TypeAlias = Callable[[PrefixSelector, float, float], DurableMachine[Any]]


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
    plan (``StepPlan``), the step's client tools (``tools``, the crash-safe ones bound with
    the adapter's ``bound_function``), its agents' settings (``agent``) and, with a
    ``lease_owner``, the workflow's lease (D27; ``lease_clock``, the adapter's wall clock,
    makes a lease past its confirmed expiry count as lost at the next side effect).
    ``program()`` is the whole call: the lease
    taken, renewed and released around the step program, each of the step's side effects
    guarded by the lease. ``on_transport_event`` goes to the step's agents only when the client
    was supplied (a client created for the call has the hook already)."""

    def __init__(
        self,
        workflow_id: str,
        prompt: str,
        *,
        store: Any,
        step: str | None,
        tenant: str,
        agent: AgentOptions,
        bound_function: BoundFunction,
        commit_window: float | None = None,
        settle_timeout: float = DEFAULT_SETTLE_TIMEOUT,
        interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
        poll_interval: float = INTERRUPT_POLL_INTERVAL,
        supplied_client: bool = False,
        on_transport_event: Callable[[Any], object] | None = None,
        lease_owner: str | None = None,
        lease_duration: float = DEFAULT_LEASE_DURATION,
        lease_wait: float | None = None,
        lease_clock: Callable[[], float] | None = None,
    ) -> None:
        check_store(store)
        self.store = store
        self.tools: dict[str, Tool] = dict(agent.tools)
        self.agent = agent
        self.bound_function = bound_function
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
                clock=lease_clock,
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
        """The whole call (see the class docstring): ``step_program`` under the lease, its
        ``RunMachine`` effects as ``RunDurable`` with the step's tools and the lease's guard."""
        guard = self.guard

        def translate(effect: Any) -> Any:
            if isinstance(effect, RunMachine):
                return RunDurable(effect.build, tools=self.bound_tools(self.binding), guard=guard)
            return effect

        work = guarded(step_program(self.plan), guard, translate)
        return work if self.lease is None else leased(self.lease, work)

    @property
    def binding(self) -> DurableBinding:
        """The binding of tools run by the step's durable machines (recovery re-drives)."""
        plan = self.plan
        return DurableBinding(tenant=plan.tenant, workflow_id=plan.workflow_id, marker=plan.marker)

    def bound_tools(self, binding: DurableBinding) -> dict[str, Tool]:
        """The step's tools with the crash-safe ones bound to the store with ``binding`` (its
        attempt included: the live loop journals ``resumed`` once a crash-safe tool of the
        attempt committed), guarded by the lease, and given it to check (D37)."""
        bound_function = self.bound_function
        guard = self.guard
        lease = self.lease

        def bind(tool: CrashSafeTool, binding: DurableBinding, store: Any) -> Any:
            return bound_function(tool, binding, store, guard=guard, lease=lease)

        return bind_crash_safe(self.tools, binding, self.store, bind)

    def turn_kwargs(self, effect: RunAgentTurn) -> dict[str, Any]:
        """``CoderAgent``'s keyword arguments (without ``client``) for the turn of ``effect``
        (on its chat, ``None``: a fresh chat, from its cursor): the step's options with the
        tools bound with the effect's binding."""
        return self._agent_kwargs(effect.chat_id, effect.last_seen_message_id, effect.binding)

    def dry_kwargs(self) -> dict[str, Any]:
        """The arguments of an agent built only to check the settings before anything is
        journaled or sent (construction does no I/O)."""
        return self._agent_kwargs(None, None, DurableBinding(tenant=self.plan.tenant))

    def early_checkpoint(self, effect: RunAgentTurn, chat_id: str) -> StoreOp | None:
        """D28: the store write to perform as soon as the fresh chat of ``effect``'s turn was
        created (``chat_id``), before its stream opens; ``None`` when there is none, or when
        the lease is lost (logged: the step stops before its next side effect anyway)."""
        op = effect.early_checkpoint(chat_id)
        if op is None:
            return None
        try:
            self.guard(op)
        except Exception as exc:
            self.early_checkpoint_failed(chat_id, exc)
            return None
        return op

    def early_checkpoint_failed(self, chat_id: str, error: BaseException) -> None:
        """The early checkpoint's write raised ``error``: logged, the turn goes on (the step's
        own checkpoint follows it)."""
        logger.warning("the early checkpoint of chat %s failed: %s", chat_id, error)

    def chat_gate(self, effect: RunAgentTurn, store: Callable[[StoreOp], Any]) -> EarlyCheckpoint:
        """The gate that holds ``effect``'s turn at its fresh chat until the early checkpoint
        (D28) answered: set it as the turn's session's ``chat_gate``; ``store`` performs the
        write (``ApplyStore``'s runner)."""
        return EarlyCheckpoint(self, effect, store)

    def _agent_kwargs(
        self, chat_id: str | None, last_seen_message_id: int | None, binding: DurableBinding
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "options": self.agent,
            "tools": self.bound_tools(binding),
            "chat_id": chat_id,
            "last_seen_message_id": last_seen_message_id,
        }
        if self.supplied_client and self.on_transport_event is not None:
            # With a created client its own hook gets every event; twice would duplicate them.
            kwargs["on_transport_event"] = self.on_transport_event
        return kwargs


class EarlyCheckpoint:
    """A turn's chat gate (``SessionState.chat_gate``) for a durable step's fresh chat
    (``DurableStep.chat_gate``): the turn pauses right after the create call answered until
    the checkpoint naming the chat (D28) was written with ``store``; a failed write is
    logged and the turn goes on (the step's own checkpoint follows it)."""

    __slots__ = ("_effect", "_step", "store")

    def __init__(
        self, step: DurableStep, effect: RunAgentTurn, store: Callable[[StoreOp], Any]
    ) -> None:
        self._step = step
        self._effect = effect
        self.store = store

    def __repr__(self) -> str:
        return f"<EarlyCheckpoint {self._effect.binding.marker}>"

    def hold(self, chat_id: str) -> StoreOp | None:
        return self._step.early_checkpoint(self._effect, chat_id)

    def store_call(self, call_id: int, op: StoreOp) -> StoreCall:
        return StoreCall(call_id=call_id, op=op)

    def failed(self, chat_id: str, error: BaseException) -> None:
        self._step.early_checkpoint_failed(chat_id, error)


def turn_report(
    agent: Any, *, result: Any = None, error: BaseException | None = None, cancelled: bool = False
) -> TurnReport:
    """How an agent turn went, read off ``agent`` (an agent or its session: its chat, cursor
    and stranded chats) after ``generate`` returned (``result``) or raised (``error``;
    ``cancelled`` when the caller's cancellation ended it)."""
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

    def run(self, perform: Callable[[Any], Any]) -> Any:
        """Step the program to its end with ``perform`` (a function that performs one effect
        and returns its value) and return the program's value. What ``perform`` raises, an
        interruption included, is thrown into the program, so its ``finally`` blocks (the
        lease's release) run before it propagates."""
        while not self.done:
            try:
                value = perform(self.effect)
            except BaseException as exc:
                self.throw(exc)
            else:
                self.send(value)
        return self.value

    def _advance(self, step: Callable[[], Any]) -> None:
        try:
            self.effect = step()
        except StopIteration as stop:
            self.done = True
            self.effect = None
            self.value = stop.value


def crash_safe_program(
    tool: CrashSafeTool,
    binding: DurableBinding,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    guard: Guard | None = None,
    lease_check: LeaseCheck | None = None,
) -> Generator[Any, Any, Any]:
    """One run of a bound crash-safe tool (``CrashSafeTool.program``), each side effect
    checked by ``guard`` first (a step's lease, D27), ``lease_check`` given to the tool's
    context (D37). Its effects: ``StoreOp``, ``WallClock``, ``Invoke`` (call
    ``tool.inner``)."""
    return guarded(tool.program(binding, args, dict(kwargs), lease_check), guard)


# -- effects of a call --------------------------------------------------------------------------------


@attrs.frozen
class RunDurable:
    """Build the durable job (``job``) and run it on the client's driver to its result (its
    error is thrown back in)."""

    build: Build
    #: The client tools its ``RunTools`` may run (crash-safe ones bound).
    tools: Mapping[str, Tool] = attrs.field(factory=dict)
    guard: Guard | None = None

    def job(self, selector: PrefixSelector, now: float, wall: float, *, store: Any) -> DurableWork:
        """The job: the machine built with the client's ``selector``, the monotonic ``now``
        and the ``wall`` clock; ``store`` is the adapter's performer of its ``StoreOp``."""
        machine = self.build(selector, now, wall)
        return DurableWork(machine, store=store, tools=self.tools, guard=self.guard)


@attrs.frozen
class StartRenewal:
    """Start the renewal timer of ``lease``: run ``renewal(lease)``'s effects beside the
    call (a thread, a task) until ``StopRenewal``; send back ``None``."""

    lease: WorkflowLease = attrs.field(eq=False)


@attrs.frozen
class StopRenewal:
    """Stop the renewal timer of ``lease`` (and wait until it stopped); send back ``None``."""

    lease: WorkflowLease = attrs.field(eq=False)


def guarded(
    program: Generator[Any, Any, Any],
    guard: Guard | None,
    translate: Callable[[Any], Any] | None = None,
) -> Generator[Any, Any, Any]:
    """``program``'s effects, each checked by ``guard`` first (what it raises closes the
    program and propagates) and passed through ``translate``; values and exceptions go back
    to ``program``."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = program.send(value) if error is None else program.throw(error)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if guard is not None:
                guard(effect)
            if translate is not None:
                effect = translate(effect)
        except BaseException:
            program.close()
            raise
        try:
            value = yield effect
        except Exception as exc:
            error = exc
        except BaseException:
            # The runtime's cancellation: the program ends here.
            program.close()
            raise


def renewal(lease: WorkflowLease) -> Generator[Any, Any, None]:
    """The renewal timer's effects (D27): every third of the duration, renew the lease; the
    lease judges each answer. Ends once the lease is lost; the adapter stops it otherwise
    (its ``Sleep`` raising, or its task cancelled)."""
    while not lease.lost:
        wall = float((yield WallClock()))
        yield Sleep(lease.renew_delay(wall))
        wall = float((yield WallClock()))
        try:
            ok = yield lease.renew_op(wall)
        except Exception as exc:
            lease.renew_failed(exc, wall)
        else:
            lease.renewed(ok, wall)


def leased(lease: WorkflowLease, work: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """``work`` under ``lease`` (D27): take it (``WorkflowBusyError`` when another worker
    holds it, after waiting as the lease allows), renew it while ``work`` runs, then release
    it however ``work`` ended (the runtime's cancellation included; a failed release is
    logged: the lease expires on its own)."""
    yield from lease.acquire()
    yield StartRenewal(lease)
    closed = False
    try:
        return (yield from work)
    except GeneratorExit:
        # Closed rather than run to its end: nothing more can be performed.
        closed = True
        raise
    finally:
        if not closed:
            yield StopRenewal(lease)
            try:
                yield lease.release_op()
            except Exception as exc:
                # The work's own outcome matters more.
                logger.warning(
                    "releasing the lease on workflow %s failed: %s", lease.workflow_id, exc
                )
            lease.released()


# -- the calls ------------------------------------------------------------------------------------------


@attrs.frozen
class DurableCall:
    """``archive_workflow`` or ``sweep_orphans``, checked before anything is read or sent:
    its ``store``, its ``lease`` (``None`` for the sweep) and ``program()``, the whole call."""

    store: Any
    lease: WorkflowLease | None
    work: Callable[[], Generator[Any, Any, Any]]

    def program(self) -> Generator[Any, Any, Any]:
        """The call's effect program (see the module docstring)."""
        work = self.work()
        return work if self.lease is None else leased(self.lease, work)


def _run_durable(build: Build, guard: Guard | None = None) -> Generator[Any, Any, Any]:
    return (yield RunDurable(build, guard=guard))


def archive_call(
    workflow_id: str,
    *,
    store: Any,
    tenant: str,
    lease_owner: str,
    settle_deadline: float,
    settle_retry_delay: float,
    interrupt_timeout: float,
    lease_duration: float,
    lease_wait: float | None,
    lease_clock: Callable[[], float] | None = None,
) -> DurableCall:
    """``archive_workflow``: the ``ArchiveWorkflow`` machine under the workflow's lease, held
    like a step's (D27; ``lease_clock`` as for ``DurableStep``)."""
    check_store(store)
    lease = WorkflowLease(
        tenant=tenant,
        workflow_id=workflow_id,
        owner=lease_owner,
        duration=lease_duration,
        wait=lease_wait,
        what="archive",
        clock=lease_clock,
    )

    def build(selector: PrefixSelector, now: float, wall: float) -> ArchiveWorkflow:
        return ArchiveWorkflow(
            selector,
            tenant=tenant,
            workflow_id=workflow_id,
            now=now,
            settle_deadline=settle_deadline,
            retry_delay=settle_retry_delay,
            interrupt_timeout=interrupt_timeout,
        )

    return DurableCall(store, lease, lambda: _run_durable(build, lease.guard))


def sweep_call(
    *,
    store: Any,
    lease_owner: str,
    min_age: float,
    settle_deadline: float,
    settle_retry_delay: float,
    interrupt_timeout: float,
    lease_duration: float,
) -> DurableCall:
    """``sweep_orphans``: the ``OrphanSweep`` machine (it takes each stranded chat's
    workflow lease itself, D27)."""
    check_store(store)

    def build(selector: PrefixSelector, now: float, wall: float) -> OrphanSweep:
        return OrphanSweep(
            selector,
            now=now,
            wall=wall,
            min_age=min_age,
            settle_deadline=settle_deadline,
            retry_delay=settle_retry_delay,
            interrupt_timeout=interrupt_timeout,
            lease_owner=lease_owner,
            lease_duration=lease_duration,
        )

    return DurableCall(store, None, lambda: _run_durable(build))
