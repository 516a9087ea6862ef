"""Durable workflows, blocking: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``).

Every decision lives in the core (``coder_proto.durable``): each call is one effect program
(``coder_proto.durable._runtime``: the step program, the recovery and cleanup machines, the
crash-safe tool programs, the workflow lease around them). This module only performs their
effects, in the calling thread:

* store calls on the durable store: a ``DurableStore`` (``SQLiteStore``, ``MemoryStore``) is
  called directly; an ``AsyncDurableStore`` (coroutine methods) is refused, since nothing here
  runs an event loop;
* the durable machines, run on the client's driver like any other machine (its HTTP client,
  session token, ``http:*`` events and prefix selector): their store calls are performed as
  above, their tool runs with the step's tools;
* agent turns: a ``CoderAgent`` on the client, with the step's tools bound to the store. The
  agent is never disposed (disposal archives the chat, and archiving ends resumability);
  the client created for a call is closed at its end;
* the lease's renewal timer: a thread of the call.

Steps of one workflow run one after another (sessions are single-flight across the whole
system): each step, and the archive, holds the workflow's lease (D27), taken before anything
is read and renewed while it runs. Archive at the end of the workflow only. A
``KeyboardInterrupt`` while a step waits cancels what runs (D22); the lease is released
before it propagates.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx

from coder_io_common.tls import VerifyTypes
from coder_proto import CoderAgentError
from coder_proto._actions import ToolOutcome
from coder_proto._agent.tool_calls import ToolInvocation
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
)
from coder_proto.durable._effects import Invoke, Sleep, WallClock
from coder_proto.durable._lease import WorkflowLease
from coder_proto.durable._runtime import (
    DurableStep,
    EffectStep,
    Guard,
    RunDurable,
    StartRenewal,
    StopRenewal,
    ToolsArg,
    archive_call,
    crash_safe_program,
    renewal,
    sweep_call,
    tool_binder,
    turn_report,
)
from coder_proto.durable._step import RunAgentTurn, TurnReport
from coder_proto.durable._store import DEFAULT_LEASE_DURATION, StoreOp
from coder_proto.durable._tools import DurableBinding

from ._driver import Deadline, blocking_sleep
from .agent import CoderAgent, _discard, _invoke
from .client import CoderChatClient

__all__ = ["archive_workflow", "bind_tools", "run_turn", "sweep_orphans"]

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
    return _plain(getattr(store, op.method), f"{type(store).__name__}.{op.method}", *op.args)


def _run_effects(program: Any, perform: Callable[[Any], Any]) -> Any:
    """Run an effect program in the calling thread (``EffectStep.run``)."""
    return EffectStep(program).run(perform)


class _LeaseCheck:
    """A step's lease check for a crash-safe tool's context (D37), in the calling thread.
    ``acheck`` does the same blocking check (the blocking adapter runs plain tool functions
    only)."""

    def __init__(self, lease: WorkflowLease, store: Any) -> None:
        self._lease = lease
        self._store = store

    @property
    def fencing_token(self) -> int | None:
        return self._lease.fencing_token

    def check(self) -> None:
        _run_effects(self._lease.verify(), _Effects(self._store))

    async def acheck(self) -> None:
        self.check()


class _BoundCrashSafe:
    """The function of a bound crash-safe tool: runs its program with the store (a plain
    function, as the blocking agent runs tools)."""

    def __init__(
        self,
        tool: CrashSafeTool,
        binding: DurableBinding,
        store: Any,
        guard: Guard | None = None,
        lease: WorkflowLease | None = None,
    ) -> None:
        self._tool = tool
        self._binding = binding
        self._store = store
        self._guard = guard
        self._lease = lease

    def __repr__(self) -> str:
        return f"<crash-safe {self._tool.name} tenant={self._binding.tenant!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lease = self._lease
        check = None if lease is None else _LeaseCheck(lease, self._store)
        program = crash_safe_program(self._tool, self._binding, args, kwargs, self._guard, check)
        return _run_effects(program, self._perform)

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Invoke):
            tool = self._tool
            return _plain(tool.inner, f"tool {tool.name!r}", *effect.args, **effect.kwargs)
        return _Effects(self._store)(effect)


#: ``bind_tools``, blocking (``coder_proto.durable._runtime.tool_binder``).
bind_tools = tool_binder(_BoundCrashSafe)


class _Stopped(Exception):
    """The renewal timer was stopped."""


class _Effects:
    """Performs a durable call's effects in the calling thread: store calls on ``store``,
    durable jobs on ``client``'s driver, agent turns of ``step`` cut at ``timeout``, the
    lease's renewal timer in a thread of the call."""

    def __init__(
        self,
        store: Any,
        client: CoderChatClient | None = None,
        step: DurableStep | None = None,
        timeout: float | None = None,
    ) -> None:
        self._store = store
        self._client = client
        self._step = step
        self._timeout = timeout
        self._renewer: tuple[threading.Thread, threading.Event] | None = None

    def __call__(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return _apply(self._store, effect)
        if isinstance(effect, WallClock):
            return time.time()
        if isinstance(effect, Sleep):
            return blocking_sleep(effect.seconds)
        if isinstance(effect, RunDurable):
            return self._run(effect)
        if isinstance(effect, RunAgentTurn):
            return self._turn(effect)
        if isinstance(effect, StartRenewal):
            stop = threading.Event()
            thread = threading.Thread(
                target=self._renew, args=(effect.lease, stop), name="coder-lease-renewal"
            )
            thread.daemon = True
            self._renewer = (thread, stop)
            return thread.start()
        assert isinstance(effect, StopRenewal)
        assert self._renewer is not None
        thread, stop = self._renewer
        stop.set()
        return thread.join()

    def _run(self, effect: RunDurable) -> Any:
        client = self._client
        assert client is not None
        with client.driver.locked() as now:
            job = effect.job(client.selector, now, time.time(), store=self._apply)
        return client.driver.durable(job, invoke=_invoke_all).result()

    def _apply(self, op: StoreOp) -> Any:
        return _apply(self._store, op)

    def _renew(self, lease: WorkflowLease, stop: threading.Event) -> None:
        """The renewal timer (a thread of the call): ``renewal(lease)`` until ``stop``."""

        def perform(effect: Any) -> Any:
            if isinstance(effect, Sleep):
                if stop.wait(effect.seconds):
                    raise _Stopped
                return None
            return self(effect)

        with contextlib.suppress(_Stopped):
            _run_effects(renewal(lease), perform)

    def _turn(self, effect: RunAgentTurn) -> TurnReport:
        step, client = self._step, self._client
        assert step is not None
        assert client is not None

        def chat_created(chat_id: str) -> None:
            # D28, before the stream opens (called as the create call answered).
            op = step.early_checkpoint(effect, chat_id)
            if op is not None:
                try:
                    self._apply(op)
                except Exception as exc:
                    step.early_checkpoint_failed(chat_id, exc)

        fresh = effect.chat_id is None
        agent = CoderAgent(
            client=client,
            on_chat_created=chat_created if fresh else None,
            **step.turn_kwargs(effect),
        )
        try:
            result = agent.generate(effect.prompt, timeout=self._timeout)
            report = turn_report(agent, result=result)
        except KeyboardInterrupt as exc:
            report = turn_report(agent, error=exc, cancelled=True)
        except Exception as exc:
            report = turn_report(agent, error=exc)
        # Never archive: archiving ends resumability. Closing waits (bounded) for the
        # interrupt a timeout or cancellation fired, before the checkpoint is written.
        agent.close(archive=False)
        return report


def _invoke_all(invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
    """The invocations of one of a durable job's tool pauses (``job.plan_tools``, D5), one
    after the other."""
    return [_invoke(invocation) for invocation in invocations]


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
        bound_function=_BoundCrashSafe,
        commit_window=commit_window,
        settle_timeout=settle_timeout,
        interrupt_timeout=interrupt_timeout,
        poll_interval=poll_interval,
        supplied_client=client is not None,
        on_transport_event=on_transport_event,
        lease_owner=_owner(),
        lease_duration=lease_duration,
        lease_wait=lease_wait,
        lease_clock=time.time,
    )
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:
        # Construction does no I/O: bad agent settings fail here, before anything is
        # journaled or sent.
        CoderAgent(client=chat_client, **durable.dry_kwargs())
        effects = _Effects(store, chat_client, durable, timeout)
        result: DurableStepResult = _run_effects(durable.program(), effects)
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
    call = archive_call(
        workflow_id,
        store=store,
        tenant=tenant,
        lease_owner=_owner(),
        settle_deadline=settle_deadline,
        settle_retry_delay=settle_retry_delay,
        interrupt_timeout=interrupt_timeout,
        lease_duration=lease_duration,
        lease_wait=lease_wait,
        lease_clock=time.time,
    )
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:
        result: ArchiveWorkflowResult = _run_effects(call.program(), _Effects(store, chat_client))
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
    call = sweep_call(
        store=store,
        lease_owner=_owner(),
        min_age=min_age,
        settle_deadline=settle_deadline,
        settle_retry_delay=settle_retry_delay,
        interrupt_timeout=interrupt_timeout,
        lease_duration=lease_duration,
    )
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:
        result: SweepResult = _run_effects(call.program(), _Effects(store, chat_client))
        return result
