"""Durable workflows on the event-loop adapters: ``run_turn``, ``archive_workflow``,
``sweep_orphans`` and ``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``).

Every decision lives in the core (``coder_proto.durable``): each call is one effect program
(``coder_proto.durable._runtime``: the step program, the recovery and cleanup machines, the
crash-safe tool programs, the workflow lease around them), and the call runs it as a task of
the client's connection (``ProgramJob`` started with ``Connection.start_durable``): its store
calls, requests, tool pauses, sleeps and the lease's renewal timer are the connection's, so
the client's driver performs them as it performs every other task's commands:

* store calls on the durable store: a ``DurableStore`` (``SQLiteStore``, ``MemoryStore``) is
  called in a worker thread (a write may wait on another process's lock, which must never
  stall the event loop); an ``AsyncDurableStore``'s coroutines are awaited;
* the durable machines' requests go out on the client's driver (its HTTP client, session
  token, ``http:*`` events and prefix selector), their tool pauses run the step's tools;
* a step's agent turn is a task of the job's own on the same connection (an agent core with
  the step's tools bound to the store, a fresh chat held by the step's chat gate until its
  early checkpoint answered, D28): its requests, sockets and tool pauses are the job's
  commands, and the blocking adapter's ``timeout`` is a deadline of the job. Its agent is
  closed without archiving (archiving ends resumability).

The client created for a call is closed at its end. A bound crash-safe tool runs its own
program (``crash_safe_program``) where the agent calls it.

``DurableFunctions`` holds the functions for one adapter (its runtime, client and agent
classes); the adapter exports its bound methods. Cancellation is the runtime's: a cancelled
``run_turn`` interrupts the turn (D22); the checkpoint is still written and the lease
released (bounded) before the cancellation propagates, unwrapped.

Steps of one workflow run one after another (sessions are single-flight across the whole
system): each step, and the archive, holds the workflow's lease (D27), taken before anything
is read and renewed while it runs. Archive at the end of the workflow only.
"""

from __future__ import annotations

import contextlib
import inspect  # async only
import logging
import os
import threading  # async only
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import httpx

from coder_io_common.tls import VerifyTypes
from coder_proto import (
    AgentOptions,
    CoderAgentError,  # async only
    ToolInvocation,
)
from coder_proto.adapter import (
    DEFAULT_MAX_STEPS,
    INTERRUPT_POLL_INTERVAL,
    INTERRUPT_WAIT_TIMEOUT,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
    BindTools,
    DurableBinding,
    DurableStep,
    EffectStep,
    Guard,
    Invoke,
    ProgramJob,
    ToolOutcome,
    ToolsArg,
    WallClock,
    WorkflowLease,
    archive_call,
    check_connection,
    crash_safe_program,
    option_keywords,
    run_program,
    sweep_call,
    tool_binder,
)
from coder_proto.durable import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_SETTLE_TIMEOUT,
    DEFAULT_TENANT,
    ArchiveWorkflowResult,
    CrashSafeTool,
    DurableStepResult,
    StoreOp,
    SweepResult,
)

# blocking: from .._driver import Deadline
from .agent import CoderAgent
from .client import CoderChatClient
from .runtime import AsyncRuntime
from .tools import invoke_all

__all__ = ["DurableFunctions"]

logger = logging.getLogger("coder_io_common")

#: How long the effects after a cancellation (the checkpoint, the lease's release) may take.
_AFTER_CANCEL_BOUND = 30.0


async def _apply(runtime: AsyncRuntime, store: Any, op: StoreOp) -> Any:
    """Perform one store call (``check_store`` made sure the method exists) the runtime's
    way (``runtime.call``)."""
    method = getattr(store, op.method)
    return await runtime.call(method, f"{type(store).__name__}.{op.method}", *op.args)


async def _run_effects(
    runtime: AsyncRuntime, program: Any, perform: Callable[[Any], Awaitable[Any]]
) -> Any:
    """Run an effect program: each effect performed and its value sent back, an exception it
    raised thrown back in. The runtime's cancellation (whatever ends the task) is thrown in
    too: what the program still does then is performed shielded, bounded, before it
    propagates."""
    step = EffectStep(program)
    cancelled = False
    while not step.done:
        try:
            if cancelled:
                with runtime.finishing(_AFTER_CANCEL_BOUND):
                    value = await perform(step.effect)
            else:
                value = await perform(step.effect)
        except Exception as exc:
            step.throw(exc)
        except BaseException as exc:  # the runtime's cancellation, whatever ends the task
            cancelled = True
            step.throw(exc)
        else:
            step.send(value)
    return step.value


class _LeaseCheck:
    """A step's lease check for a crash-safe tool's context (D37): ``acheck`` on the event
    loop (the store call awaited, or in a worker thread), ``check`` from the worker thread a
    plain tool function runs in (a plain store called there). Made on the loop's thread."""

    def __init__(self, lease: WorkflowLease, store: Any, runtime: AsyncRuntime) -> None:
        self._lease = lease
        self._store = store
        self._runtime = runtime
        self._loop_thread = threading.get_ident()  # async only

    @property
    def fencing_token(self) -> int | None:
        return self._lease.fencing_token

    async def acheck(self) -> None:  # unasync: keep
        await _run_effects(self._runtime, self._lease.verify(), self._perform)  # async only
        # blocking: self.check()

    # async only: begin
    async def _perform(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return await _apply(self._runtime, self._store, effect)
        assert isinstance(effect, WallClock)
        return time.time()

    # async only: end
    def check(self) -> None:
        # async only: begin
        if threading.get_ident() == self._loop_thread:
            raise CoderAgentError(
                "check_lease() blocks, and this is the event loop's thread: in a coroutine "
                "tool function, await ctx.acheck_lease() instead"
            )
        if inspect.iscoroutinefunction(getattr(self._store, "get_lease", None)):
            raise CoderAgentError(
                f"check_lease() cannot read {type(self._store).__name__} (its methods are "
                "coroutines) from a plain tool function: make the tool a coroutine function "
                "and await ctx.acheck_lease()"
            )
        # async only: end
        run_program(self._lease.verify(), self._perform_blocking)

    def _perform_blocking(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return effect.apply(self._store)
        assert isinstance(effect, WallClock)
        return time.time()


class _BoundCrashSafe:
    """The function of a bound crash-safe tool: runs its program with the store. Plain
    functions run in a worker thread, as the agent runs plain tools.

    Its program (the journal's write-ahead, the lease check, ``Invoke``, the recorded result)
    runs here rather than as a task of a connection, because nothing in the tool contract
    reaches one: ``bind_tools`` returns tools for any ``CoderAgent`` (not only ``run_turn``'s),
    the function gets only its arguments and a ``ToolContext`` (chat, call id, tool name),
    and the connection sees a tool call as one opaque ``ToolInvocation`` of an
    ``InvokeTools``, answered as a whole with ``tool_finished``. A turn's task makes store
    calls only for its chat gate (D28), one write between the create call and the stream;
    the program's are interleaved with the function's run (the write-ahead before it, the
    result after it, the lease checked in between), and an agent that ``bind_tools`` serves
    outside ``run_turn`` has no store on its session at all. A plain tool function's
    ``check_lease()`` must also block in its worker thread, where an ``ApplyStore`` of the
    connection could only be waited for across threads. Routing it through the connection
    would need a tool plan that carries an effect program in place of a function, and a
    tool pause that runs it (its store calls as the pause's ``ApplyStore``, its ``Invoke``
    as the invocation)."""

    def __init__(
        self,
        tool: CrashSafeTool,
        binding: DurableBinding,
        store: Any,
        runtime: AsyncRuntime,
        guard: Guard | None = None,
        lease: WorkflowLease | None = None,
    ) -> None:
        self._tool = tool
        self._binding = binding
        self._store = store
        self._runtime = runtime
        self._guard = guard
        self._lease = lease

    def __repr__(self) -> str:
        return f"<crash-safe {self._tool.name} tenant={self._binding.tenant!r}>"

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lease = self._lease
        check = None if lease is None else _LeaseCheck(lease, self._store, self._runtime)
        program = crash_safe_program(self._tool, self._binding, args, kwargs, self._guard, check)
        return await _run_effects(self._runtime, program, self._perform)

    async def _perform(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return await _apply(self._runtime, self._store, effect)
        if isinstance(effect, WallClock):
            return time.time()
        assert isinstance(effect, Invoke)
        tool = self._tool
        return await self._runtime.call(
            tool.inner, f"tool {tool.name!r}", *effect.args, **effect.kwargs
        )


class _Call:
    """One durable call on ``functions``' runtime: its program runs as a task of ``client``'s
    connection (``ProgramJob``), whose store calls this performs on ``store``; a step's agent
    turns (``step``, the ``DurableStep``) run inside that task."""

    def __init__(
        self,
        functions: DurableFunctions,
        store: Any,
        client: CoderChatClient,
        step: DurableStep | None = None,
        # blocking: timeout: float | None = None,
    ) -> None:
        self._runtime = functions._runtime
        self._store = store
        self._client = client
        self._step = step
        # blocking: self._timeout = timeout

    async def run(self, program: Any) -> Any:
        """Run ``program`` to its value. The runtime's cancellation cancels the task (a
        running turn first, then the program); what the program still does then (the
        checkpoint, the lease's release) is waited for, shielded and bounded, before the
        cancellation propagates."""
        client = self._client
        driver = client.driver
        with driver.locked() as now:
            job = ProgramJob(
                program,
                store=self._apply,
                selector=client.selector,
                now=now,
                wall=time.time(),
                step=self._step,
                make_sink=client._make_sink,
                env=os.environ,
                # blocking: timeout=self._timeout,
            )
        run = driver.durable(job, invoke=self._invoke)
        try:
            return await run.result()
        except BaseException as exc:  # the runtime's cancellation, whatever ends the task
            if run.done:
                raise
            reason = exc
        run.cancel(reason)
        with self._runtime.finishing(_AFTER_CANCEL_BOUND):
            await run.wait_until(_never)
        if run.done:
            return await run.result()
        # The bound after the cancellation ran out before the program ended.
        raise reason

    async def _apply(self, op: StoreOp) -> Any:
        return await _apply(self._runtime, self._store, op)

    async def _invoke(self, invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
        """The invocations of one tool pause of the call (a durable machine's or the step
        turn's, planned by the core, D5)."""
        return await invoke_all(self._runtime, invocations)


def _never() -> bool:
    return False


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
        self,
        tool: CrashSafeTool,
        binding: DurableBinding,
        store: Any,
        guard: Guard | None = None,
        lease: WorkflowLease | None = None,
    ) -> _BoundCrashSafe:
        return _BoundCrashSafe(tool, binding, store, self._runtime, guard, lease)

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

    async def _run(
        self,
        program: Any,
        store: Any,
        client: CoderChatClient,
        step: DurableStep | None = None,
        # blocking: timeout: float | None = None,
    ) -> Any:
        """Run a call's program as a task of ``client``'s connection."""
        return await _Call(self, store, client, step).run(program)  # async only
        # blocking: return _Call(self, store, client, step, timeout).run(program)

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
        # blocking: timeout: float | None = None,
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
        its probe and interrupt, ``poll_interval`` the poll period. The blocking adapter's
        ``run_turn`` also takes ``timeout``, the caller's deadline for the agent turn
        (``generate(timeout=...)``): a turn it cuts is checkpointed as aborted (the next
        attempt recovers and resubmits) and the builtin ``TimeoutError`` raised.

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
        # blocking: timeout = Deadline.check(timeout)
        # The option keywords are folded into ``options`` (``option_keywords``).
        assert options is not None
        durable = DurableStep(
            workflow_id,
            prompt,
            store=store,
            step=step,
            tenant=tenant,
            agent=options,
            bound_function=self._bind,
            commit_window=commit_window,
            settle_timeout=settle_timeout,
            interrupt_timeout=interrupt_timeout,
            poll_interval=poll_interval,
            supplied_client=client is not None,
            on_transport_event=on_transport_event,
            lease_owner=uuid.uuid4().hex,
            lease_duration=lease_duration,
            lease_wait=lease_wait,
            lease_clock=time.time,
        )
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:
            # Construction does no I/O: bad agent settings fail here, before anything is
            # journaled or sent.
            self._agent_class(client=chat_client, **durable.dry_kwargs())
            program = durable.program()
            result: DurableStepResult = await self._run(
                program, store, chat_client, durable  # async only
                # blocking: program, store, chat_client, durable, timeout
            )
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
        call = archive_call(
            workflow_id,
            store=store,
            tenant=tenant,
            lease_owner=uuid.uuid4().hex,
            settle_deadline=settle_deadline,
            settle_retry_delay=settle_retry_delay,
            interrupt_timeout=interrupt_timeout,
            lease_duration=lease_duration,
            lease_wait=lease_wait,
            lease_clock=time.time,
        )
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:
            result: ArchiveWorkflowResult = await self._run(call.program(), store, chat_client)
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
        call = sweep_call(
            store=store,
            lease_owner=uuid.uuid4().hex,
            min_age=min_age,
            settle_deadline=settle_deadline,
            settle_retry_delay=settle_retry_delay,
            interrupt_timeout=interrupt_timeout,
            lease_duration=lease_duration,
        )
        async with self._client_for(
            client, base_url, token, http_client, verify, on_transport_event
        ) as chat_client:
            result: SweepResult = await self._run(call.program(), store, chat_client)
            return result
