"""Durable workflows on asyncio: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``).

Every decision lives in the core (``coder_proto.durable``): the step program, the recovery
and cleanup machines, the crash-safe tool programs, and what driving them takes
(``coder_proto.durable._runtime``). This module only performs their effects:

* store calls on the durable store: a ``DurableStore`` (``SQLiteStore``, ``MemoryStore``) is
  called in a worker thread (a write may wait on another process's lock, which must never
  stall the event loop); an ``AsyncDurableStore``'s coroutines are awaited;
* the durable machines' requests, sent through the client's driver (its HTTP client, session
  token, ``http:*`` events and prefix selector), their deadlines, and their tool runs;
* agent turns: a ``CoderAgent`` on the client, with the step's tools bound to the store. The
  agent is never disposed (disposal archives the chat, and archiving ends resumability);
  the client created for a call is closed at its end.

The functions are written once for the event-loop runtimes: ``DurableFunctions`` performs
the effects with a ``DurableRuntime`` (asyncio's here; the trio adapter supplies its own), so
``run_turn`` and friends are the bound methods of one instance per runtime.

Run steps of one workflow strictly one after another (sessions are single-flight across the
whole system). Archive at the end of the workflow only.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, ClassVar

import httpx

from coder_io_common.tls import VerifyTypes
from coder_proto import ToolCall
from coder_proto._actions import ToolOutcome
from coder_proto._agent.tool_calls import ToolInvocation, plan_tool_calls
from coder_proto._constants import (
    DEFAULT_MAX_STEPS,
    INTERRUPT_POLL_INTERVAL,
    INTERRUPT_WAIT_TIMEOUT,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
)
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
from coder_proto.durable._effects import Invoke, WallClock
from coder_proto.durable._runtime import (
    Abandon,
    AgentOptions,
    ApplyStore,
    BoundFunction,
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
from coder_proto.durable._store import StoreOp
from coder_proto.durable._store_engine import DurableMachine, RelayedRequest
from coder_proto.durable._tools import DurableBinding

from .agent import CoderAgent, _invoke
from .client import CoderChatClient

__all__ = [
    "DurableFunctions",
    "DurableRuntime",
    "archive_workflow",
    "bind_tools",
    "run_turn",
    "sweep_orphans",
]

ToolRunner = Callable[[tuple[ToolCall, ...]], Awaitable[Sequence[ToolOutcome]]]


def _now() -> float:
    return time.monotonic()


# -- the runtime seam -----------------------------------------------------------------------------


class _Tasks:
    """The concurrent work of one durable machine's drive: keyed tasks, each waking the
    drive when it ends."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._wake = asyncio.Event()

    async def close(self) -> None:
        """Cancel what still runs and wait until it ended."""
        pending = list(self._tasks.values())
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def spawn(self, key: tuple[str, int], work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks[key] = task

        def done(_task: asyncio.Future[None]) -> None:
            if self._tasks.get(key) is task:
                del self._tasks[key]
            self._wake.set()

        task.add_done_callback(done)

    def cancel(self, key: tuple[str, int]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    async def wait(self, timeout: float | None) -> None:
        """Until a task ended, at most ``timeout`` seconds."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)


class DurableRuntime:
    """How an event-loop runtime performs durable effects (asyncio here): its cancellation,
    worker threads, concurrent tool calls and task sets."""

    #: The runtime's own cancellation (D22), never wrapped.
    cancelled: ClassVar[type[BaseException]] = asyncio.CancelledError

    async def to_thread(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def invoke_all(self, invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
        """The calls of one pause, concurrently; one outcome per call, in order."""
        return list(await asyncio.gather(*(_invoke(i) for i in invocations)))

    @contextlib.asynccontextmanager
    async def tasks(self) -> AsyncIterator[Any]:
        """A task set for one drive; what still runs at the end is cancelled."""
        tasks = _Tasks()
        try:
            yield tasks
        finally:
            await tasks.close()

    async def after_cancel(self, work: Awaitable[Any]) -> Any:
        """Work that must still happen after the caller's cancellation ended a turn (the
        checkpoint writes): asyncio lets a task await again once the cancellation was
        delivered."""
        return await work

    async def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call a store method or a tool function: coroutine functions are awaited, plain
        ones run in a worker thread (their awaitable result awaited)."""
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        value = await self.to_thread(fn, *args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return value


async def _run_effects(
    runtime: DurableRuntime, program: Any, perform: Callable[[Any], Awaitable[Any]]
) -> Any:
    """Run an effect program: each effect performed and its value sent back, an exception it
    raised thrown back in. The runtime's cancellation closes the program and propagates."""
    step = EffectStep(program)
    while not step.done:
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


async def _apply(runtime: DurableRuntime, store: Any, op: StoreOp) -> Any:
    """Perform one store call (``check_store`` made sure the method exists)."""
    return await runtime.call(getattr(store, op.method), *op.args)


class _BoundCrashSafe:
    """The function of a bound crash-safe tool: runs ``CrashSafeTool.program`` with the store.
    Plain functions run in a worker thread, as the agent runs plain tools."""

    runtime: ClassVar[DurableRuntime] = DurableRuntime()

    def __init__(self, tool: CrashSafeTool, binding: DurableBinding, store: Any) -> None:
        self._tool = tool
        self._binding = binding
        self._store = store

    def __repr__(self) -> str:
        return f"<crash-safe {self._tool.name} tenant={self._binding.tenant!r}>"

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        program = self._tool.program(self._binding, args, kwargs)
        return await _run_effects(self.runtime, program, self._perform)

    async def _perform(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return await _apply(self.runtime, self._store, effect)
        if isinstance(effect, WallClock):
            return time.time()
        assert isinstance(effect, Invoke)
        return await self.runtime.call(self._tool.inner, *effect.args, **effect.kwargs)


#: ``bind_tools`` on asyncio (``coder_proto.durable._runtime.tool_binder``).
bind_tools = tool_binder(_BoundCrashSafe)


# -- the functions ----------------------------------------------------------------------------------


class DurableFunctions:
    """``run_turn``, ``archive_workflow`` and ``sweep_orphans`` for one event-loop runtime:
    ``runtime`` performs the effects, ``client_class`` / ``agent_class`` are the runtime's
    ``CoderChatClient`` / ``CoderAgent``, ``bound_function`` its crash-safe function class."""

    def __init__(
        self,
        runtime: DurableRuntime,
        client_class: type[CoderChatClient],
        agent_class: type[CoderAgent],
        bound_function: BoundFunction,
    ) -> None:
        self._runtime = runtime
        self._client_class = client_class
        self._agent_class = agent_class
        self._bound = bound_function

    def __repr__(self) -> str:
        return f"<DurableFunctions {type(self._runtime).__name__}>"

    # -- plumbing --------------------------------------------------------------------------

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
                outcomes += await runtime.invoke_all(plan.invocations)
            return outcomes

        return run

    async def _drive(
        self,
        machine: DurableMachine[Any],
        client: CoderChatClient,
        store: Any,
        tools: ToolRunner | None = None,
    ) -> Any:
        """Drive a durable machine to its result (or raise its error): requests through the
        client's driver, store calls on ``store``, tool runs with ``tools``, ticks at its
        deadline. On cancellation the machine is cancelled (D22) and the cancellation
        re-raised."""
        runtime = self._runtime
        drive = DurableDrive(machine)

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

        def perform(tasks: Any, command: DurableCommand) -> None:
            if isinstance(command, Relay):
                tasks.spawn(("request", command.request_id), relay(command))
            elif isinstance(command, Abandon):
                tasks.cancel(("request", command.request_id))
            elif isinstance(command, ApplyStore):
                tasks.spawn(("store", command.call_id), apply(command))
            else:
                tasks.spawn(("tools", id(command)), run_calls(command))

        async with runtime.tasks() as tasks:
            try:
                while True:
                    for command in drive.commands(_now()):
                        perform(tasks, command)
                    if drive.done:
                        break
                    await tasks.wait(drive.delay(_now()))
            except runtime.cancelled as exc:
                for abandon in drive.cancel(exc, _now()):
                    perform(tasks, abandon)
                raise
        return drive.result()

    # -- the public functions ------------------------------------------------------------------

    async def run_turn(
        self,
        workflow_id: str,
        prompt: str,
        *,
        store: Any,
        step: str | None = None,
        tenant: str = DEFAULT_TENANT,
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
        that send the same prompt). ``tools`` are the step's client tools (``crash_safe``
        ones are bound to ``store`` and ``tenant``); ``output_type`` enables structured output
        (``result.output``). The agent options are ``CoderAgent``'s. ``commit_window`` is how
        long a crashed attempt's send may still land (default ``request_timeout``, else
        300 s); ``settle_timeout`` bounds recovery's settle poll (turn scale),
        ``interrupt_timeout`` its probe and interrupt, ``poll_interval`` the poll period.
        Connection: ``client`` or ``base_url`` / ``token`` (``CODER_URL`` /
        ``CODER_SESSION_TOKEN``) with ``http_client`` and ``verify``; ``on_transport_event``
        receives every transport event.
        """
        durable = DurableStep(
            workflow_id,
            prompt,
            store=store,
            step=step,
            tenant=tenant,
            tools=tools,
            commit_window=commit_window,
            settle_timeout=settle_timeout,
            interrupt_timeout=interrupt_timeout,
            poll_interval=poll_interval,
            supplied_client=client is not None,
            agent=AgentOptions(
                output_type=output_type,
                organization_id=organization_id,
                model=model,
                instructions=instructions,
                request_timeout=request_timeout,
                workspace_id=workspace_id,
                mcp_server_ids=mcp_server_ids,
                reasoning_effort=reasoning_effort,
                plan_mode=plan_mode,
                busy_behavior=busy_behavior,
                max_steps=max_steps,
                max_retries=max_retries,
                settle_deadline=settle_deadline,
                settle_retry_delay=settle_retry_delay,
                on_transport_event=on_transport_event,
            ),
        )
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:
            # Construction does no I/O: bad agent settings fail here, before anything is
            # journaled or sent.
            self._agent_class(client=chat_client, **durable.dry_kwargs(self._bound))
            result: DurableStepResult = await _run_effects(
                self._runtime, durable.program(), self._step_performer(durable, chat_client)
            )
            return result

    def _step_performer(
        self, durable: DurableStep, chat_client: CoderChatClient
    ) -> Callable[[Any], Awaitable[Any]]:
        """Performs the effects of ``run_turn``'s program on ``chat_client``."""
        runtime = self._runtime
        store = durable.store
        cancelled_turn = False

        async def perform(effect: Any) -> Any:
            if cancelled_turn:
                # The turn was cancelled: the checkpoint is still written (bounded), then the
                # program re-raises the cancellation.
                return await runtime.after_cancel(perform_now(effect))
            return await perform_now(effect)

        async def perform_now(effect: Any) -> Any:
            if isinstance(effect, StoreOp):
                return await _apply(runtime, store, effect)
            if isinstance(effect, WallClock):
                return time.time()
            if isinstance(effect, Drive):
                machine = effect.build(chat_client.selector, _now(), time.time())
                bound = durable.bound_tools(durable.binding, self._bound)
                runner = self._tool_runner(bound, getattr(machine, "chat_id", None))
                return await self._drive(machine, chat_client, store, runner)
            assert isinstance(effect, RunAgentTurn)
            return await agent_turn(effect)

        async def agent_turn(effect: RunAgentTurn) -> TurnReport:
            nonlocal cancelled_turn
            agent = self._agent_class(
                client=chat_client,
                **durable.agent_kwargs(
                    effect.chat_id, effect.last_seen_message_id, effect.binding, self._bound
                ),
            )
            try:
                report = turn_report(agent, result=await agent.generate(effect.prompt))
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

    async def archive_workflow(
        self,
        workflow_id: str,
        *,
        store: Any,
        tenant: str = DEFAULT_TENANT,
        settle_deadline: float = SETTLE_DEADLINE,
        settle_retry_delay: float = SETTLE_RETRY_DELAY,
        interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
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
        never created a chat."""
        check_store(store)
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:
            machine = ArchiveWorkflow(
                chat_client.selector,
                tenant=tenant,
                workflow_id=workflow_id,
                now=_now(),
                settle_deadline=settle_deadline,
                retry_delay=settle_retry_delay,
                interrupt_timeout=interrupt_timeout,
            )
            result: ArchiveWorkflowResult = await self._drive(machine, chat_client, store)
            return result

    async def sweep_orphans(
        self,
        *,
        store: Any,
        min_age: float = 0.0,
        settle_deadline: float = SETTLE_DEADLINE,
        settle_retry_delay: float = SETTLE_RETRY_DELAY,
        interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
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
        take."""
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
            )
            result: SweepResult = await self._drive(machine, chat_client, store)
            return result


_functions = DurableFunctions(DurableRuntime(), CoderChatClient, CoderAgent, _BoundCrashSafe)
run_turn = _functions.run_turn
archive_workflow = _functions.archive_workflow
sweep_orphans = _functions.sweep_orphans
