"""Durable workflows, blocking: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``).

Every decision lives in the core (``coder_proto.durable``): the step program, the recovery
and cleanup machines, the crash-safe tool programs. This module only performs their effects,
in the calling thread:

* store calls on the durable store: a ``DurableStore`` (``SQLiteStore``, ``MemoryStore``) is
  called directly; an ``AsyncDurableStore`` (coroutine methods) is refused, since nothing here
  runs an event loop;
* the durable machines' requests, sent through the client's driver (its HTTP client, session
  token, ``http:*`` events and prefix selector), their deadlines, and their tool runs;
* agent turns: a ``CoderAgent`` on the client, with the step's tools bound to the store. The
  agent is never disposed (disposal archives the chat, and archiving ends resumability);
  the client created for a call is closed at its end.

Steps of one workflow run one after another (sessions are single-flight across the whole
system): each step, and the archive, holds the workflow's lease (D27), taken before anything
is read and renewed by a thread of the call while it runs. Archive at the end of the workflow
only. A ``KeyboardInterrupt`` while a step
waits cancels what runs (D22) and propagates.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx

from coder_io_common.tls import VerifyTypes
from coder_proto import CoderAgentError, ToolCall
from coder_proto._actions import ToolOutcome
from coder_proto._agent.tool_calls import plan_tool_calls
from coder_proto._constants import (
    DEFAULT_MAX_STEPS,
    INTERRUPT_POLL_INTERVAL,
    INTERRUPT_WAIT_TIMEOUT,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
)
from coder_proto._options import AgentOptions, option_keywords
from coder_proto._shells.agent_shell import check_connection
from coder_proto.durable import (
    DEFAULT_SETTLE_TIMEOUT,
    DEFAULT_TENANT,
    ArchiveWorkflowResult,
    CrashSafeTool,
    DurableStepResult,
    SweepResult,
    check_store,
)
from coder_proto.durable._archiving import ArchiveWorkflow, OrphanSweep
from coder_proto.durable._effects import Invoke, Sleep, WallClock
from coder_proto.durable._lease import WorkflowLease
from coder_proto.durable._runtime import (
    ApplyStore,
    DurableDrive,
    DurableStep,
    EffectStep,
    Relay,
    RunCalls,
    ToolsArg,
    tool_binder,
    turn_report,
)
from coder_proto.durable._step import Drive, RunAgentTurn, TurnReport
from coder_proto.durable._store import DEFAULT_LEASE_DURATION, StoreOp
from coder_proto.durable._store_engine import DurableMachine, RelayedRequest
from coder_proto.durable._tools import DurableBinding

from ._driver import Deadline, blocking_sleep, sigint_deferred
from .agent import CoderAgent, _discard, _invoke
from .client import CoderChatClient

__all__ = ["archive_workflow", "bind_tools", "run_turn", "sweep_orphans"]

ToolRunner = Callable[[tuple[ToolCall, ...]], Sequence[ToolOutcome]]
Guard = Callable[[object], None]

logger = logging.getLogger("coder_io_sync")


# -- performing effects ---------------------------------------------------------------------------


def _plain(fn: Callable[..., Any], what: str, /, *args: Any, **kwargs: Any) -> Any:
    """Call a store method or a tool function. Nothing here runs an event loop: a coroutine
    function, or an awaitable result, is refused (``CoderAgentError``)."""
    if inspect.iscoroutinefunction(fn):
        raise CoderAgentError(
            f"{what} is a coroutine function; the blocking adapter (coder_io_sync) needs "
            "plain functions"
        )
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        _discard(value)
        raise CoderAgentError(
            f"{what} returned an awaitable; the blocking adapter (coder_io_sync) needs plain "
            "functions"
        )
    return value


def _apply(store: Any, op: StoreOp) -> Any:
    """Perform one store call on a ``DurableStore`` (plain methods; ``check_store`` made sure
    they exist)."""
    method = getattr(store, op.method)
    return _plain(method, f"{type(store).__name__}.{op.method}", *op.args)


def _run_effects(program: Any, perform: Callable[[Any], Any], guard: Guard | None = None) -> Any:
    """Run an effect program in the calling thread: each effect's value is sent back, an
    exception it raised thrown back in. An interruption (``KeyboardInterrupt``) closes the
    program and propagates; so does what ``guard`` raises before an effect (a lost lease)."""
    step = EffectStep(program)
    while not step.done:
        if guard is not None:
            try:
                guard(step.effect)
            except BaseException:
                step.close()
                raise
        try:
            value = perform(step.effect)
        except Exception as exc:
            step.throw(exc)
        except BaseException:
            step.close()
            raise
        else:
            step.send(value)
    return step.value


class _BoundCrashSafe:
    """The function of a bound crash-safe tool: runs ``CrashSafeTool.program`` with the store
    (a plain function, as the blocking agent runs tools)."""

    def __init__(
        self, tool: CrashSafeTool, binding: DurableBinding, store: Any, guard: Guard | None = None
    ) -> None:
        self._tool = tool
        self._binding = binding
        self._store = store
        self._guard = guard

    def __repr__(self) -> str:
        return f"<crash-safe {self._tool.name} tenant={self._binding.tenant!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        program = self._tool.program(self._binding, args, kwargs)
        return _run_effects(program, self._perform, self._guard)

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return _apply(self._store, effect)
        if isinstance(effect, WallClock):
            return time.time()
        assert isinstance(effect, Invoke)
        return _plain(self._tool.inner, f"tool {self._tool.name!r}", *effect.args, **effect.kwargs)


#: ``bind_tools``, blocking (``coder_proto.durable._runtime.tool_binder``).
bind_tools = tool_binder(_BoundCrashSafe)


def _tool_runner(tools: dict[str, Any], chat_id: str | None) -> ToolRunner:
    def run(calls: tuple[ToolCall, ...]) -> list[ToolOutcome]:
        plan = plan_tool_calls(calls, tools, chat_id=chat_id)
        return [*plan.outcomes, *(_invoke(invocation) for invocation in plan.invocations)]

    return run


# -- driving durable machines ---------------------------------------------------------------------


def _drive(
    machine: DurableMachine[Any],
    client: CoderChatClient,
    store: Any,
    tools: ToolRunner | None = None,
    guard: Guard | None = None,
) -> Any:
    """Drive a durable machine to its result (or raise its error) in the calling thread:
    requests through the client's driver, store calls on ``store``, tool runs with ``tools``,
    ticks at its deadline. The machine is stepped under the driver's lock (it shares the
    prefix selector with the driver's machines). An interruption, or what ``guard`` raises
    before a side effect (a lost lease), cancels it (D22) and propagates."""
    driver = client.driver
    drive = DurableDrive(machine, guard)

    def perform(command: Any) -> None:
        if isinstance(command, Relay):
            # An earlier outcome of the same batch may have made the machine abandon it.
            if drive.wanted(command.request_id):
                outcome = driver.run(RelayedRequest(command.request))
                with driver.locked() as now:
                    drive.relayed(command.request_id, outcome, now)
        elif isinstance(command, ApplyStore):
            try:
                value = _apply(store, command.op)
            except Exception as exc:
                with driver.locked() as now:
                    drive.store_raised(command.call_id, exc, now)
            else:
                with driver.locked() as now:
                    drive.stored(command.call_id, value, now)
        elif isinstance(command, RunCalls):
            try:
                outcomes = () if tools is None else tools(command.calls)
            except Exception as exc:
                with driver.locked() as now:
                    drive.tools_raised(exc, now)
            else:
                with driver.locked() as now:
                    drive.tools_returned(outcomes, now)
        # Abandon: a blocking request is never in flight while its machine is stepped.

    try:
        with sigint_deferred():
            while True:
                with driver.locked() as now:
                    commands = drive.commands(now)
                for command in commands:
                    perform(command)
                with driver.locked() as now:
                    if drive.done:
                        break
                    if commands:
                        continue
                    delay = drive.delay(now)
                if delay is None:  # pragma: no cover - a machine waiting for nothing
                    raise CoderAgentError(f"{machine!r} waits for nothing")
                blocking_sleep(delay)
    except BaseException as exc:
        with driver.locked() as now:
            drive.cancel(exc, now)
        raise
    return drive.result()


# -- the workflow lease (D27) -----------------------------------------------------------------------


def _perform_plain(store: Any, effect: Any) -> Any:
    """The effects of a lease's program: store calls, the wall clock, sleeps."""
    if isinstance(effect, StoreOp):
        return _apply(store, effect)
    if isinstance(effect, WallClock):
        return time.time()
    assert isinstance(effect, Sleep)
    blocking_sleep(effect.seconds)
    return None


def _renew(store: Any, lease: WorkflowLease, stop: threading.Event) -> None:
    """The renewal timer (a thread of the call): renew every third of the duration until
    ``stop`` is set or the lease is lost; the core judges each answer."""
    while not lease.lost and not stop.wait(lease.renew_delay(time.time())):
        wall = time.time()
        try:
            ok = _apply(store, lease.renew_op(wall))
        except Exception as exc:
            lease.renew_failed(exc, wall)
        else:
            lease.renewed(ok, wall)


def _leased(store: Any, lease: WorkflowLease, work: Callable[[], Any]) -> Any:
    """Take ``lease`` (``WorkflowBusyError`` when another worker holds it, after waiting
    as the lease allows), run ``work()`` while a thread renews it, then release it however
    ``work`` ended."""
    _run_effects(lease.acquire(), lambda effect: _perform_plain(store, effect))
    stop = threading.Event()
    renewer = threading.Thread(
        target=_renew, args=(store, lease, stop), name="coder-lease-renewal", daemon=True
    )
    renewer.start()
    try:
        return work()
    finally:
        stop.set()
        renewer.join()
        try:
            _apply(store, lease.release_op())
        except Exception as exc:
            # The lease expires on its own; the work's own outcome matters more.
            logger.warning("releasing the lease on workflow %s failed: %s", lease.workflow_id, exc)
        lease.released()


def _owner() -> str:
    """A lease owner id unique to one call (D27)."""
    return uuid.uuid4().hex


# -- clients --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _client_for(
    client: CoderChatClient | None,
    base_url: str | None,
    token: str | None,
    http_client: httpx.Client | None,
    verify: VerifyTypes,
    on_transport_event: Callable[[Any], object] | None,
) -> Iterator[CoderChatClient]:
    check_connection(client, base_url=base_url, token=token, http_client=http_client)
    if client is not None:
        yield client
        return
    created = CoderChatClient(
        base_url,
        token,
        http_client=http_client,
        verify=verify,
        on_transport_event=on_transport_event,
    )
    try:
        yield created
    finally:
        created.close()


# -- the public functions -------------------------------------------------------------------------


@option_keywords
def run_turn(
    workflow_id: str,
    prompt: str,
    *,
    store: Any,
    step: str | None = None,
    tenant: str = DEFAULT_TENANT,
    options: AgentOptions | None = None,
    tools: ToolsArg = None,
    output_type: Any = None,
    organization_id: str | None = None,
    model: str | None = None,
    instructions: str | None = None,
    request_timeout: float | None = None,
    workspace_id: str | None = None,
    mcp_server_ids: Sequence[str] = (),
    reasoning_effort: str | None = None,
    plan_mode: str | None = None,
    busy_behavior: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_retries: int = 0,
    settle_deadline: float = SETTLE_DEADLINE,
    settle_retry_delay: float = SETTLE_RETRY_DELAY,
    commit_window: float | None = None,
    settle_timeout: float = DEFAULT_SETTLE_TIMEOUT,
    interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
    poll_interval: float = INTERRUPT_POLL_INTERVAL,
    timeout: float | None = None,
    lease_duration: float = DEFAULT_LEASE_DURATION,
    lease_wait: float | None = None,
    on_transport_event: Callable[[Any], object] | None = None,
    client: CoderChatClient | None = None,
    base_url: str | None = None,
    token: str | None = None,
    http_client: httpx.Client | None = None,
    verify: VerifyTypes = True,
) -> DurableStepResult:
    """Run one durable workflow step: one agent turn, resumable in any process
    (docs/durable-workflows.md; ``coder_proto.durable._step``).

    The workflow's checkpoint (its chat and resume cursor) is read from ``store``; without one
    the turn creates the chat. Before resubmitting on a checkpointed chat, recovery settles
    the chat and reconciles crash-safe tools; when an earlier attempt of this step already
    finished, its result is returned (``recovered``) without resubmitting. The step marker
    ``[workflow_id/step]`` is embedded in the prompt and the send is journaled write-ahead.
    The checkpoint is written whatever the turn's outcome (the guide's ``finally``); chats a
    failed fresh-chat turn discarded are recorded as stranded. The turn's error is raised
    after that.

    ``step`` names the step (default: a digest of the prompt; pass distinct names to steps
    that send the same prompt). ``tools`` are the step's client tools (``crash_safe`` ones are
    bound to ``store`` and ``tenant``); ``output_type`` enables structured output
    (``result.output``). The agent options are ``CoderAgent``'s. ``commit_window`` is how long
    a crashed attempt's send may still land (default ``request_timeout``, else 300 s);
    ``settle_timeout`` bounds recovery's settle poll (turn scale), ``interrupt_timeout`` its
    probe and interrupt, ``poll_interval`` the poll period. ``timeout`` is the caller's
    deadline for the agent turn (``generate(timeout=...)``): a turn it cuts is checkpointed as
    aborted (the next attempt recovers and resubmits) and the builtin ``TimeoutError`` raised.

    The step holds the workflow's lease (D27) from before it reads anything until it ends:
    while another worker holds it, ``WorkflowBusyError`` (retryable) is raised before
    anything is read or sent, unless ``lease_wait`` (seconds) allows waiting for it.
    ``lease_duration`` (60 s) is how long a dead worker's lease outlives it; it is renewed
    every third of that while the step runs. A step that lost its lease raises
    ``WorkflowLeaseLostError`` before its next side effect. A fresh chat is checkpointed as
    soon as the server created it, before its stream opens (D28).

    Connection: ``client`` or
    ``base_url`` / ``token`` (``CODER_URL`` / ``CODER_SESSION_TOKEN``) with ``http_client`` and
    ``verify``; ``on_transport_event`` receives every transport event.
    """
    Deadline.check(timeout)
    # The option keywords are folded into ``options`` (``option_keywords``).
    assert options is not None
    durable = DurableStep(
        workflow_id,
        prompt,
        store=store,
        step=step,
        tenant=tenant,
        agent=options,
        commit_window=commit_window,
        settle_timeout=settle_timeout,
        interrupt_timeout=interrupt_timeout,
        poll_interval=poll_interval,
        supplied_client=client is not None,
        on_transport_event=on_transport_event,
        lease_owner=_owner(),
        lease_duration=lease_duration,
        lease_wait=lease_wait,
    )
    lease = durable.lease
    assert lease is not None
    lease.clock = time.time
    bind = functools.partial(_BoundCrashSafe, guard=durable.guard)
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:

        def perform(effect: Any) -> Any:
            if isinstance(effect, StoreOp):
                return _apply(store, effect)
            if isinstance(effect, WallClock):
                return time.time()
            if isinstance(effect, Drive):
                with chat_client.driver.locked() as now:
                    machine = effect.build(chat_client.selector, now, time.time())
                bound = durable.bound_tools(durable.binding, bind)
                runner = _tool_runner(bound, getattr(machine, "chat_id", None))
                return _drive(machine, chat_client, store, runner, durable.guard)
            assert isinstance(effect, RunAgentTurn)
            return agent_turn(effect)

        def agent_turn(effect: RunAgentTurn) -> TurnReport:
            agent = CoderAgent(
                client=chat_client,
                **durable.agent_kwargs(
                    effect.chat_id, effect.last_seen_message_id, effect.binding, bind
                ),
            )
            if effect.chat_id is None:

                def chat_created(chat_id: str) -> None:
                    # D28, before the stream opens (called as the create call answered).
                    op = effect.early_checkpoint(chat_id)
                    if op is None:
                        return
                    try:
                        durable.guard(op)
                        _apply(store, op)
                    except Exception as exc:
                        logger.warning("the early checkpoint of chat %s failed: %s", chat_id, exc)

                agent._core.session.on_chat_created = chat_created
            try:
                report = turn_report(agent, result=agent.generate(effect.prompt, timeout=timeout))
            except KeyboardInterrupt as exc:
                report = turn_report(agent, error=exc, cancelled=True)
            except Exception as exc:
                report = turn_report(agent, error=exc)
            # Never archive: archiving ends resumability. Closing waits (bounded) for the
            # interrupt a timeout or cancellation fired, before the checkpoint is written.
            agent.close(archive=False)
            return report

        # Construction does no I/O: bad agent settings fail here, before anything is
        # journaled or sent.
        CoderAgent(client=chat_client, **durable.dry_kwargs(bind))
        result: DurableStepResult = _leased(
            store, lease, lambda: _run_effects(durable.program(), perform, durable.guard)
        )
        return result


def archive_workflow(
    workflow_id: str,
    *,
    store: Any,
    tenant: str = DEFAULT_TENANT,
    settle_deadline: float = SETTLE_DEADLINE,
    settle_retry_delay: float = SETTLE_RETRY_DELAY,
    interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
    lease_duration: float = DEFAULT_LEASE_DURATION,
    lease_wait: float | None = None,
    on_transport_event: Callable[[Any], object] | None = None,
    client: CoderChatClient | None = None,
    base_url: str | None = None,
    token: str | None = None,
    http_client: httpx.Client | None = None,
    verify: VerifyTypes = True,
) -> ArchiveWorkflowResult:
    """Retire a workflow at its end (or in its failure handler), never per step: stop a live
    run, archive the checkpointed chat and every stranded chat recorded for the workflow
    (409s retried within ``settle_deadline``, D10), then forget them in the store
    (``coder_proto.durable.ArchiveWorkflow``). ``archived`` is ``False`` when the workflow
    never created a chat. It holds the workflow's lease like a step (D27; ``lease_wait``,
    ``lease_duration`` as for ``run_turn``): ``WorkflowBusyError`` while a step runs."""
    check_store(store)
    lease = WorkflowLease(
        tenant=tenant,
        workflow_id=workflow_id,
        owner=_owner(),
        duration=lease_duration,
        wait=lease_wait,
        what="archive",
        clock=time.time,
    )
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:

        def work() -> ArchiveWorkflowResult:
            with chat_client.driver.locked() as now:
                machine = ArchiveWorkflow(
                    chat_client.selector,
                    tenant=tenant,
                    workflow_id=workflow_id,
                    now=now,
                    settle_deadline=settle_deadline,
                    retry_delay=settle_retry_delay,
                    interrupt_timeout=interrupt_timeout,
                )
            archived: ArchiveWorkflowResult = _drive(machine, chat_client, store, guard=lease.guard)
            return archived

        result: ArchiveWorkflowResult = _leased(store, lease, work)
        return result


def sweep_orphans(
    *,
    store: Any,
    min_age: float = 0.0,
    settle_deadline: float = SETTLE_DEADLINE,
    settle_retry_delay: float = SETTLE_RETRY_DELAY,
    interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
    lease_duration: float = DEFAULT_LEASE_DURATION,
    on_transport_event: Callable[[Any], object] | None = None,
    client: CoderChatClient | None = None,
    base_url: str | None = None,
    token: str | None = None,
    http_client: httpx.Client | None = None,
    verify: VerifyTypes = True,
) -> SweepResult:
    """Interrupt and archive every chat the token can see that no checkpoint in ``store``
    accounts for, whatever its status (``coder_proto.durable.OrphanSweep``). Run it where the
    token is dedicated to the workflows using ``store``; with workers inside a first turn at
    the same time, pass ``min_age`` (seconds) longer than a first turn can take. A stranded
    chat is retired under its workflow's lease (D27); while a step of that workflow runs, it
    is left for the next sweep (in ``failed``, with a ``WorkflowBusyError``)."""
    check_store(store)
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:
        with chat_client.driver.locked() as now:
            machine = OrphanSweep(
                chat_client.selector,
                now=now,
                wall=time.time(),
                min_age=min_age,
                settle_deadline=settle_deadline,
                retry_delay=settle_retry_delay,
                interrupt_timeout=interrupt_timeout,
                lease_owner=_owner(),
                lease_duration=lease_duration,
            )
        result: SweepResult = _drive(machine, chat_client, store)
        return result
