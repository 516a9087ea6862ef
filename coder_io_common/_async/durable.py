"""Durable workflows on the event-loop adapters: ``run_turn``, ``archive_workflow``,
``sweep_orphans`` and ``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``).

Every decision lives in the core (``coder_proto.durable``): the step program, the recovery
and cleanup machines, the crash-safe tool programs, and what driving them takes
(``coder_proto.durable._runtime``). This module only performs their effects, on a runtime:

* store calls on the durable store: a ``DurableStore`` (``SQLiteStore``, ``MemoryStore``) is
  called in a worker thread (a write may wait on another process's lock, which must never
  stall the event loop); an ``AsyncDurableStore``'s coroutines are awaited;
* the durable machines' requests, sent through the client's driver (its HTTP client, session
  token, ``http:*`` events and prefix selector), their deadlines, and their tool runs, all in
  one task group per machine;
* agent turns: a ``CoderAgent`` on the client, with the step's tools bound to the store. The
  agent is never disposed (disposal archives the chat, and archiving ends resumability);
  the client created for a call is closed at its end.

``DurableFunctions`` holds the functions for one adapter (its runtime, client and agent
classes); the adapter exports its bound methods. Cancellation is the runtime's: a cancelled
``run_turn`` interrupts the turn (D22); the checkpoint is still written (bounded) before the
cancellation propagates, unwrapped.

Steps of one workflow run one after another (sessions are single-flight across the whole
system): each step, and the archive, holds the workflow's lease (D27), taken before anything
is read and renewed by a task while it runs. Archive at the end of the workflow only.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import httpx

from coder_io_common.tls import VerifyTypes
from coder_proto import CoderAgentError
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
from coder_proto._outputs import ToolCall
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
    Abandon,
    ApplyStore,
    BindTools,
    DurableCommand,
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

from .agent import CoderAgent, invoke_all
from .client import CoderChatClient
from .runtime import AsyncRuntime, Event, Task, TaskGroup

__all__ = ["DurableFunctions"]

ToolRunner = Callable[[tuple[ToolCall, ...]], Awaitable[Sequence[ToolOutcome]]]
Guard = Callable[[object], None]

logger = logging.getLogger("coder_io_common")

#: How long the checkpoint writes after a cancelled turn may take.
_AFTER_CANCEL_BOUND = 30.0


def _now() -> float:
    return time.monotonic()


async def _call(runtime: AsyncRuntime, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call a store method or a tool function: coroutine functions are awaited, plain ones run
    in a worker thread (their awaitable result awaited)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    value = await runtime.to_thread(fn, *args)
    if inspect.isawaitable(value):
        value = await value
    return value


async def _apply(runtime: AsyncRuntime, store: Any, op: StoreOp) -> Any:
    """Perform one store call (``check_store`` made sure the method exists)."""
    return await _call(runtime, getattr(store, op.method), *op.args)


async def _run_effects(
    runtime: AsyncRuntime,
    program: Any,
    perform: Callable[[Any], Awaitable[Any]],
    guard: Guard | None = None,
) -> Any:
    """Run an effect program: each effect performed and its value sent back, an exception it
    raised thrown back in. The runtime's cancellation closes the program and propagates; so
    does what ``guard`` raises before an effect (a lost lease)."""
    step = EffectStep(program)
    while not step.done:
        if guard is not None:
            try:
                guard(step.effect)
            except BaseException:
                step.close()
                raise
        try:
            value = await perform(step.effect)
        except runtime.cancelled:
            step.close()
            raise
        except Exception as exc:
            step.throw(exc)
        else:
            step.send(value)
    return step.value


async def _awaited(value: Awaitable[Any]) -> None:
    await value


class _Tasks:
    """The concurrent work of one durable machine's drive: keyed tasks of a task group, each
    waking the drive when it ends."""

    def __init__(self, runtime: AsyncRuntime, group: TaskGroup) -> None:
        self._runtime = runtime
        self._group = group
        self._tasks: dict[tuple[str, int], Task] = {}
        self._wake: Event = runtime.event()

    def spawn(self, key: tuple[str, int], work: Callable[[], Awaitable[None]]) -> None:
        task: Task | None = None

        async def run() -> None:
            try:
                await work()
            finally:
                if self._tasks.get(key) is task:
                    del self._tasks[key]
                self._wake.set()

        task = self._tasks[key] = self._group.start_soon(run)

    def cancel(self, key: tuple[str, int]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    async def wait(self, timeout: float | None) -> None:
        """Until a task ended, at most ``timeout`` seconds."""
        self._wake = self._runtime.event()
        await self._runtime.wait(self._wake, timeout)


class _BoundCrashSafe:
    """The function of a bound crash-safe tool: runs ``CrashSafeTool.program`` with the store.
    Plain functions run in a worker thread, as the agent runs plain tools."""

    def __init__(
        self,
        tool: CrashSafeTool,
        binding: DurableBinding,
        store: Any,
        runtime: AsyncRuntime,
        guard: Guard | None = None,
    ) -> None:
        self._tool = tool
        self._binding = binding
        self._store = store
        self._runtime = runtime
        self._guard = guard

    def __repr__(self) -> str:
        return f"<crash-safe {self._tool.name} tenant={self._binding.tenant!r}>"

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        program = self._tool.program(self._binding, args, kwargs)
        return await _run_effects(self._runtime, program, self._perform, self._guard)

    async def _perform(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return await _apply(self._runtime, self._store, effect)
        if isinstance(effect, WallClock):
            return time.time()
        assert isinstance(effect, Invoke)
        return await _call(self._runtime, self._tool.inner, *effect.args, **effect.kwargs)


class DurableFunctions:
    """``run_turn``, ``archive_workflow``, ``sweep_orphans`` and ``bind_tools`` for one
    adapter: ``runtime`` performs the effects, ``client_class`` / ``agent_class`` are the
    adapter's ``CoderChatClient`` / ``CoderAgent``, ``module`` its module that exports them."""

    def __init__(
        self,
        runtime: AsyncRuntime,
        client_class: type[CoderChatClient],
        agent_class: type[CoderAgent],
        *,
        module: str,
    ) -> None:
        self._runtime = runtime
        self._client_class = client_class
        self._agent_class = agent_class
        #: ``bind_tools`` on this runtime (``coder_proto.durable._runtime.tool_binder``).
        self.bind_tools: BindTools = tool_binder(self._bind)
        self.bind_tools.__module__ = module

    def __repr__(self) -> str:
        return f"<DurableFunctions {self._runtime.name}>"

    # -- plumbing --------------------------------------------------------------------------

    def _bind(
        self, tool: CrashSafeTool, binding: DurableBinding, store: Any, guard: Guard | None = None
    ) -> _BoundCrashSafe:
        return _BoundCrashSafe(tool, binding, store, self._runtime, guard)

    # -- the workflow lease (D27) -----------------------------------------------------------

    async def _perform_plain(self, store: Any, effect: Any) -> Any:
        """The effects of a lease's program: store calls, the wall clock, sleeps."""
        runtime = self._runtime
        if isinstance(effect, StoreOp):
            return await _apply(runtime, store, effect)
        if isinstance(effect, WallClock):
            return time.time()
        assert isinstance(effect, Sleep)
        await runtime.wait(runtime.event(), effect.seconds)
        return None

    async def _renew(self, store: Any, lease: WorkflowLease) -> None:
        """The renewal timer: renew every third of the duration until the lease is lost or
        the task is cancelled; the core judges each answer."""
        runtime = self._runtime
        never = runtime.event()
        while not lease.lost:
            await runtime.wait(never, lease.renew_delay(time.time()))
            wall = time.time()
            try:
                ok = await _apply(runtime, store, lease.renew_op(wall))
            except Exception as exc:
                lease.renew_failed(exc, wall)
            else:
                lease.renewed(ok, wall)

    async def _leased(
        self, store: Any, lease: WorkflowLease, work: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Take ``lease`` (``WorkflowBusyError`` when another worker holds it, after waiting
        as the lease allows), run ``work()`` while a task renews it, then release it however
        ``work`` ended (a cancelled caller's release is bounded)."""
        runtime = self._runtime
        await _run_effects(runtime, lease.acquire(), functools.partial(self._perform_plain, store))
        try:
            async with runtime.task_group() as group:
                group.start_soon(self._renew, store, lease)
                try:
                    return await work()
                finally:
                    group.cancel()
        finally:
            with runtime.finishing(_AFTER_CANCEL_BOUND):
                try:
                    await _apply(runtime, store, lease.release_op())
                except Exception as exc:
                    # The lease expires on its own; the work's own outcome matters more.
                    logger.warning(
                        "releasing the lease on workflow %s failed: %s", lease.workflow_id, exc
                    )
            lease.released()

    @contextlib.asynccontextmanager
    async def _client_for(
        self,
        client: CoderChatClient | None,
        base_url: str | None,
        token: str | None,
        http_client: httpx.AsyncClient | None,
        verify: VerifyTypes,
        on_transport_event: Callable[[Any], object] | None,
    ) -> AsyncIterator[CoderChatClient]:
        check_connection(client, base_url=base_url, token=token, http_client=http_client)
        if client is not None:
            yield client
            return
        created = self._client_class(
            base_url,
            token,
            http_client=http_client,
            verify=verify,
            on_transport_event=on_transport_event,
        )
        try:
            yield created
        finally:
            await created.aclose()

    def _tool_runner(self, tools: dict[str, Any], chat_id: str | None) -> ToolRunner:
        runtime = self._runtime

        async def run(calls: tuple[ToolCall, ...]) -> list[ToolOutcome]:
            plan = plan_tool_calls(calls, tools, chat_id=chat_id)
            outcomes = list(plan.outcomes)
            if plan.invocations:
                outcomes += await invoke_all(runtime, plan.invocations)
            return outcomes

        return run

    async def _drive(
        self,
        machine: DurableMachine[Any],
        client: CoderChatClient,
        store: Any,
        tools: ToolRunner | None = None,
        guard: Guard | None = None,
    ) -> Any:
        """Drive a durable machine to its result (or raise its error): requests through the
        client's driver, store calls on ``store``, tool runs with ``tools``, ticks at its
        deadline. On cancellation the machine is cancelled (D22) and the cancellation
        re-raised; what ``guard`` raises before a side effect (a lost lease) ends the drive
        the same way."""
        runtime = self._runtime
        drive = DurableDrive(machine, guard)

        async def relay(command: Relay) -> None:
            outcome = await client.driver.run(RelayedRequest(command.request))
            drive.relayed(command.request_id, outcome, _now())

        async def apply(command: ApplyStore) -> None:
            try:
                value = await _apply(runtime, store, command.op)
            except Exception as exc:
                drive.store_raised(command.call_id, exc, _now())
            else:
                drive.stored(command.call_id, value, _now())

        async def run_calls(command: RunCalls) -> None:
            if tools is None:
                drive.tools_returned((), _now())
                return
            try:
                outcomes = await tools(command.calls)
            except Exception as exc:
                drive.tools_raised(exc, _now())
            else:
                drive.tools_returned(outcomes, _now())

        def perform(tasks: _Tasks, command: DurableCommand) -> None:
            if isinstance(command, Relay):
                tasks.spawn(("request", command.request_id), functools.partial(relay, command))
            elif isinstance(command, Abandon):
                tasks.cancel(("request", command.request_id))
            elif isinstance(command, ApplyStore):
                tasks.spawn(("store", command.call_id), functools.partial(apply, command))
            else:
                tasks.spawn(("tools", id(command)), functools.partial(run_calls, command))

        async with runtime.task_group() as group:
            tasks = _Tasks(runtime, group)
            try:
                while True:
                    for command in drive.commands(_now()):
                        perform(tasks, command)
                    if drive.done:
                        break
                    await tasks.wait(drive.delay(_now()))
            except (runtime.cancelled, CoderAgentError) as exc:
                for abandon in drive.cancel(exc, _now()):
                    perform(tasks, abandon)
                raise
            finally:
                # What still runs (an abandoned request's task) ends with the machine.
                group.cancel()
        return drive.result()

    # -- the public functions ------------------------------------------------------------------

    @option_keywords
    async def run_turn(
        self,
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
        lease_duration: float = DEFAULT_LEASE_DURATION,
        lease_wait: float | None = None,
        on_transport_event: Callable[[Any], object] | None = None,
        client: CoderChatClient | None = None,
        base_url: str | None = None,
        token: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        verify: VerifyTypes = True,
    ) -> DurableStepResult:
        """Run one durable workflow step: one agent turn, resumable in any process (docs/durable-workflows.md; ``coder_proto.durable._step``).

        The workflow's checkpoint (its chat and resume cursor) is read from ``store``; without
        one the turn creates the chat. Before resubmitting on a checkpointed chat, recovery
        settles the chat and reconciles crash-safe tools; when an earlier attempt of this step
        already finished, its result is returned (``recovered``) without resubmitting. The
        step marker ``[workflow_id/step]`` is embedded in the prompt and the send is journaled
        write-ahead. The checkpoint is written whatever the turn's outcome (the guide's
        ``finally``); chats a failed fresh-chat turn discarded are recorded as stranded. The
        turn's error is raised after that.

        ``step`` names the step (default: a digest of the prompt; pass distinct names to steps
        that send the same prompt). The agent settings are ``CoderAgent``'s: ``options`` (an
        ``AgentOptions``) and the same settings as keywords, a keyword passed explicitly
        overriding the field of ``options``. ``tools`` are the step's client tools
        (``crash_safe`` ones are bound to ``store`` and ``tenant``); ``output_type`` enables
        structured output (``result.output``). ``commit_window`` is how long a crashed
        attempt's send may still land (default ``request_timeout``, else 300 s);
        ``settle_timeout`` bounds recovery's settle poll (turn scale), ``interrupt_timeout``
        its probe and interrupt, ``poll_interval`` the poll period.

        The step holds the workflow's lease (D27) from before it reads anything until it
        ends: while another worker holds it, ``WorkflowBusyError`` (retryable) is raised
        before anything is read or sent, unless ``lease_wait`` (seconds) allows waiting for
        it. ``lease_duration`` (60 s) is how long a dead worker's lease outlives it; it is
        renewed every third of that while the step runs. A step that lost its lease raises
        ``WorkflowLeaseLostError`` before its next side effect. A fresh chat is checkpointed
        as soon as the server created it (D28).

        Connection: ``client`` or ``base_url`` / ``token`` (``CODER_URL`` /
        ``CODER_SESSION_TOKEN``) with ``http_client`` and ``verify``; ``on_transport_event``
        receives every transport event.
        """
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
            lease_owner=uuid.uuid4().hex,
            lease_duration=lease_duration,
            lease_wait=lease_wait,
        )
        lease = durable.lease
        assert lease is not None
        lease.clock = time.time
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:
            # Construction does no I/O: bad agent settings fail here, before anything is
            # journaled or sent.
            self._agent_class(client=chat_client, **durable.dry_kwargs(self._bind))
            perform = self._step_performer(durable, chat_client)
            result: DurableStepResult = await self._leased(
                durable.store,
                lease,
                lambda: _run_effects(self._runtime, durable.program(), perform, durable.guard),
            )
            return result

    def _step_performer(
        self, durable: DurableStep, chat_client: CoderChatClient
    ) -> Callable[[Any], Awaitable[Any]]:
        """Performs the effects of ``run_turn``'s program on ``chat_client``."""
        runtime = self._runtime
        store = durable.store
        cancelled_turn = False
        bind = functools.partial(self._bind, guard=durable.guard)

        async def perform(effect: Any) -> Any:
            if cancelled_turn:
                # The turn was cancelled: the checkpoint is still written (bounded), then the
                # program re-raises the cancellation.
                with runtime.finishing(_AFTER_CANCEL_BOUND):
                    return await perform_now(effect)
            return await perform_now(effect)

        async def perform_now(effect: Any) -> Any:
            if isinstance(effect, StoreOp):
                return await _apply(runtime, store, effect)
            if isinstance(effect, WallClock):
                return time.time()
            if isinstance(effect, Drive):
                machine = effect.build(chat_client.selector, _now(), time.time())
                bound = durable.bound_tools(durable.binding, bind)
                runner = self._tool_runner(bound, getattr(machine, "chat_id", None))
                return await self._drive(machine, chat_client, store, runner, durable.guard)
            assert isinstance(effect, RunAgentTurn)
            return await agent_turn(effect)

        async def agent_turn(effect: RunAgentTurn) -> TurnReport:
            nonlocal cancelled_turn
            agent = self._agent_class(
                client=chat_client,
                **durable.agent_kwargs(
                    effect.chat_id, effect.last_seen_message_id, effect.binding, bind
                ),
            )
            try:
                report = turn_report(agent, result=await self._generate(durable, effect, agent))
            except runtime.cancelled as exc:
                cancelled_turn = True
                report = turn_report(agent, error=exc, cancelled=True)
            except Exception as exc:
                report = turn_report(agent, error=exc)
            # Never archive: archiving ends resumability. Closing waits (bounded) for the
            # interrupt a timeout or cancellation fired, before the checkpoint is written.
            await agent.aclose(archive=False)
            return report

        return perform

    async def _generate(self, durable: DurableStep, effect: RunAgentTurn, agent: Any) -> Any:
        """``agent.generate`` for one step turn; on a fresh chat, the early checkpoint (D28)
        is written as soon as the create call answered. A plain store's write happens right
        there, on the loop, before the stream's dial starts (one short write per workflow,
        which the guarantee is worth); an ``AsyncDurableStore``'s write runs alongside the
        dial. Either is finished before the turn's result is reported."""
        runtime = self._runtime
        if effect.chat_id is not None:
            return await agent.generate(effect.prompt)
        store = durable.store
        async with runtime.task_group() as group:

            async def write(chat_id: str) -> None:
                op = effect.early_checkpoint(chat_id)
                if op is None:
                    return
                try:
                    durable.guard(op)
                    await _apply(runtime, store, op)
                except Exception as exc:
                    logger.warning("the early checkpoint of chat %s failed: %s", chat_id, exc)

            def chat_created(chat_id: str) -> None:
                op = effect.early_checkpoint(chat_id)
                if op is None:
                    return
                if inspect.iscoroutinefunction(getattr(store, op.method, None)):
                    group.start_soon(write, chat_id)
                    return
                try:
                    durable.guard(op)
                    value = op.apply(store)
                    if inspect.isawaitable(value):
                        group.start_soon(_awaited, value)
                except Exception as exc:
                    logger.warning("the early checkpoint of chat %s failed: %s", chat_id, exc)

            agent._core.session.on_chat_created = chat_created
            failure: Exception | None = None
            try:
                result = await agent.generate(effect.prompt)
            except runtime.cancelled:
                raise
            except Exception as exc:
                # Leave the group normally: the write, if any, finishes before the step's
                # own checkpoint writes (a late one would overwrite them).
                failure = exc
            finally:
                agent._core.session.on_chat_created = None
        if failure is not None:
            raise failure
        return result

    async def archive_workflow(
        self,
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
        http_client: httpx.AsyncClient | None = None,
        verify: VerifyTypes = True,
    ) -> ArchiveWorkflowResult:
        """Retire a workflow at its end (or in its failure handler), never per step: stop a
        live run, archive the checkpointed chat and every stranded chat recorded for the
        workflow (409s retried within ``settle_deadline``, D10), then forget them in the store
        (``coder_proto.durable.ArchiveWorkflow``). ``archived`` is ``False`` when the workflow
        never created a chat. It holds the workflow's lease like a step (D27; ``lease_wait``,
        ``lease_duration`` as for ``run_turn``): ``WorkflowBusyError`` while a step runs."""
        check_store(store)
        lease = WorkflowLease(
            tenant=tenant,
            workflow_id=workflow_id,
            owner=uuid.uuid4().hex,
            duration=lease_duration,
            wait=lease_wait,
            what="archive",
            clock=time.time,
        )
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:

            async def work() -> ArchiveWorkflowResult:
                machine = ArchiveWorkflow(
                    chat_client.selector,
                    tenant=tenant,
                    workflow_id=workflow_id,
                    now=_now(),
                    settle_deadline=settle_deadline,
                    retry_delay=settle_retry_delay,
                    interrupt_timeout=interrupt_timeout,
                )
                archived: ArchiveWorkflowResult = await self._drive(
                    machine, chat_client, store, guard=lease.guard
                )
                return archived

            result: ArchiveWorkflowResult = await self._leased(store, lease, work)
            return result

    async def sweep_orphans(
        self,
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
        http_client: httpx.AsyncClient | None = None,
        verify: VerifyTypes = True,
    ) -> SweepResult:
        """Interrupt and archive every chat the token can see that no checkpoint in ``store``
        accounts for, whatever its status (``coder_proto.durable.OrphanSweep``). Run it where
        the token is dedicated to the workflows using ``store``; with workers inside a first
        turn at the same time, pass ``min_age`` (seconds) longer than a first turn can
        take. A stranded chat is retired under its workflow's lease (D27); while a step of
        that workflow runs, it is left for the next sweep (in ``failed``, with a
        ``WorkflowBusyError``)."""
        check_store(store)
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:
            machine = OrphanSweep(
                chat_client.selector,
                now=_now(),
                wall=time.time(),
                min_age=min_age,
                settle_deadline=settle_deadline,
                retry_delay=settle_retry_delay,
                interrupt_timeout=interrupt_timeout,
                lease_owner=uuid.uuid4().hex,
                lease_duration=lease_duration,
            )
            result: SweepResult = await self._drive(machine, chat_client, store)
            return result
