"""Durable workflows, blocking: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (seed durable-workflows; ``coder_proto.durable``).

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

Run steps of one workflow strictly one after another (sessions are single-flight across the
whole system). Archive at the end of the workflow only. A ``KeyboardInterrupt`` while a step
waits cancels what runs (D22) and propagates.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import httpx

from coder_proto.actions import CancelRequest, RunTools, SendRequest, ToolOutcome
from coder_proto.agent import StructuredOutput, ToolInvocation, plan_tool_calls
from coder_proto.constants import (
    DEFAULT_MAX_STEPS,
    INTERRUPT_POLL_INTERVAL,
    INTERRUPT_WAIT_TIMEOUT,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
)
from coder_proto.durable import (
    DEFAULT_COMMIT_WINDOW,
    DEFAULT_SETTLE_TIMEOUT,
    DEFAULT_TENANT,
    ArchiveWorkflow,
    ArchiveWorkflowResult,
    CrashSafeTool,
    Drive,
    DurableBinding,
    DurableMachine,
    DurableStepResult,
    DurableToolContext,
    Invoke,
    MemoryStore,
    OrphanSweep,
    RelayedRequest,
    RunAgentTurn,
    StepPlan,
    StoreCall,
    StoreOp,
    SweepResult,
    TurnReport,
    WallClock,
    check_store,
    crash_safe,
    step_program,
)
from coder_proto.errors import CoderAgentError
from coder_proto.parts import ToolCall
from coder_proto.rest import HttpResponse
from coder_proto.tools import Tool, tools_by_name

from ._driver import Deadline, VerifyTypes, blocking_sleep, sigint_deferred
from .agent import CoderAgent, _invoke
from .client import CoderChatClient

__all__ = [
    "DurableStepResult",
    "DurableToolContext",
    "MemoryStore",
    "archive_workflow",
    "bind_tools",
    "crash_safe",
    "run_turn",
    "sweep_orphans",
]

logger = logging.getLogger("coder_io_sync")

ToolsArg = Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | None


def _now() -> float:
    return time.monotonic()


# -- the store ------------------------------------------------------------------------------------


def _apply(store: Any, op: StoreOp) -> Any:
    """Perform one store call. Coroutine methods are refused: the blocking adapter takes a
    ``DurableStore`` with plain methods."""
    method = getattr(store, op.method, None)
    if method is None:
        raise CoderAgentError(f"{type(store).__name__} has no store method {op.method}")
    if inspect.iscoroutinefunction(method):
        raise CoderAgentError(
            f"{type(store).__name__}.{op.method} is a coroutine function; the blocking adapter "
            "(coder_io_sync) needs a DurableStore with plain methods"
        )
    value = method(*op.args)
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        raise CoderAgentError(
            f"{type(store).__name__}.{op.method} returned an awaitable; the blocking adapter "
            "(coder_io_sync) needs a DurableStore with plain methods"
        )
    return value


def _run_effects(program: Any, perform: Callable[[Any], Any]) -> Any:
    """Trampoline a core effect program: each effect's value is sent back, an exception it
    raised thrown back in. An interruption (``KeyboardInterrupt``) closes the program and
    propagates."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = program.throw(error) if error is not None else program.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = perform(effect)
        except Exception as exc:
            error = exc
        except BaseException:
            program.close()
            raise


# -- crash-safe tools -----------------------------------------------------------------------------


class _BoundCrashSafe:
    """The function of a bound crash-safe tool: runs ``CrashSafeTool.program`` with the store
    (a plain function, as the blocking agent runs tools)."""

    def __init__(self, tool: CrashSafeTool, binding: DurableBinding, store: Any) -> None:
        self._tool = tool
        self._binding = binding
        self._store = store

    def __repr__(self) -> str:
        return f"<crash-safe {self._tool.name} tenant={self._binding.tenant!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        program = self._tool.program(self._binding, args, kwargs)
        return _run_effects(program, self._perform)

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            return _apply(self._store, effect)
        if isinstance(effect, WallClock):
            return time.time()
        assert isinstance(effect, Invoke)
        inner = self._tool.inner
        if inspect.iscoroutinefunction(inner):
            raise CoderAgentError(
                f"tool {self._tool.name!r} is a coroutine function; the blocking adapter "
                "(coder_io_sync) runs plain functions"
            )
        value = inner(*effect.args, **effect.kwargs)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()
            raise CoderAgentError(
                f"tool {self._tool.name!r} returned an awaitable; the blocking adapter "
                "(coder_io_sync) runs plain functions"
            )
        return value


def bind_tools(
    tools: ToolsArg,
    *,
    store: Any,
    tenant: str = DEFAULT_TENANT,
    workflow_id: str | None = None,
    step: str | None = None,
) -> dict[str, Tool]:
    """The tools with every ``crash_safe`` tool bound to ``store`` and ``tenant`` (others pass
    through), as a name -> tool mapping for ``CoderAgent(tools=...)``. With ``workflow_id``
    (and the step's marker as ``step``), a crash-safe tool running on a chat no checkpoint
    names claims it for the workflow before its effect. ``run_turn`` binds its tools itself."""
    check_store(store)
    binding = DurableBinding(tenant=tenant, workflow_id=workflow_id, marker=step)
    out: dict[str, Tool] = {}
    for name, item in tools_by_name(tools).items():
        if isinstance(item, CrashSafeTool):
            out[name] = attrs.evolve(item, func=_BoundCrashSafe(item, binding, store))
        else:
            out[name] = item
    return out


def _tool_runner(
    tools: Mapping[str, Tool], chat_id: str | None
) -> Callable[[tuple[ToolCall, ...]], list[ToolOutcome]]:
    def run(calls: tuple[ToolCall, ...]) -> list[ToolOutcome]:
        plan = plan_tool_calls(calls, tools, chat_id=chat_id)
        outcomes = list(plan.outcomes)
        invocation: ToolInvocation
        for invocation in plan.invocations:
            outcomes.append(_invoke(invocation))
        return outcomes

    return run


# -- driving durable machines ---------------------------------------------------------------------


def _drive(
    machine: DurableMachine[Any],
    client: CoderChatClient,
    store: Any,
    tools: Callable[[tuple[ToolCall, ...]], Sequence[ToolOutcome]] | None = None,
) -> Any:
    """Drive a durable machine to its result (or raise its error) in the calling thread:
    requests through the client's driver, store calls on ``store``, ``RunTools`` with
    ``tools``, ``tick`` at its deadline. The machine is stepped under the driver's lock (it
    shares the prefix selector with the driver's machines). An interruption cancels it (D22)
    and propagates."""
    driver = client.driver
    # Outcomes of one batch of actions are fed after the whole batch was performed, so a
    # ``CancelRequest`` the first outcome provokes still reaches the second request.
    inbox: list[tuple[str, int, Any]] = []

    def perform(action: Any) -> None:
        if isinstance(action, SendRequest):
            outcome = driver.run(RelayedRequest(action.request))
            inbox.append(("request", action.request_id, outcome))
        elif isinstance(action, CancelRequest):
            inbox[:] = [i for i in inbox if i[:2] != ("request", action.request_id)]
        elif isinstance(action, StoreCall):
            try:
                inbox.append(("store", action.call_id, _apply(store, action.op)))
            except Exception as exc:
                inbox.append(("store-failed", action.call_id, exc))
        elif isinstance(action, RunTools):
            outcomes: Sequence[ToolOutcome] = ()
            if tools is not None:
                try:
                    outcomes = tools(action.calls)
                except Exception:
                    logger.warning(
                        "the tool runner raised; the calls get error results", exc_info=True
                    )
            inbox.append(("tools", 0, list(outcomes)))
        else:  # pragma: no cover - the durable machines emit nothing else
            raise CoderAgentError(f"unknown action {action!r}")

    def feed(kind: str, key: int, value: Any, now: float) -> None:
        if kind == "request":
            if isinstance(value, HttpResponse):
                machine.response_received(key, value, now)
            else:
                machine.request_failed(key, value, now)
        elif kind == "store":
            machine.store_result(key, value, now)
        elif kind == "store-failed":
            machine.store_failed(key, value, now)
        else:
            machine.tool_results(value, now)

    try:
        with sigint_deferred():
            while True:
                with driver.locked():
                    actions = machine.actions()
                for action in actions:
                    perform(action)
                with driver.locked() as now:
                    while inbox:
                        feed(*inbox.pop(0), now)
                    if machine.done:
                        break
                    if actions:
                        continue
                    deadline = machine.next_deadline()
                    if deadline is None:  # pragma: no cover - a machine waiting for nothing
                        raise CoderAgentError(f"{machine!r} waits for nothing")
                    if deadline <= now:
                        machine.tick(now)
                        continue
                blocking_sleep(deadline - _now())
    except BaseException as exc:
        with driver.locked() as now:
            machine.cancel(now, exc)
            machine.actions()
        raise
    return machine.result()


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
    if client is not None:
        if base_url is not None or token is not None or http_client is not None:
            raise CoderAgentError("pass either client or base_url/token/http_client, not both")
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


def run_turn(
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
    timeout: float | None = None,
    on_transport_event: Callable[[Any], object] | None = None,
    client: CoderChatClient | None = None,
    base_url: str | None = None,
    token: str | None = None,
    http_client: httpx.Client | None = None,
    verify: VerifyTypes = True,
) -> DurableStepResult:
    """Run one durable workflow step: one agent turn, resumable in any process (seed
    durable-workflows; ``coder_proto.durable.step``).

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
    Connection: ``client`` or
    ``base_url`` / ``token`` (``CODER_URL`` / ``CODER_SESSION_TOKEN``) with ``http_client`` and
    ``verify``; ``on_transport_event`` receives every transport event.
    """
    check_store(store)
    Deadline.check(timeout)
    tool_map = tools_by_name(tools)
    structured = StructuredOutput(output_type) if output_type is not None else None
    if commit_window is None:
        commit_window = (
            float(request_timeout)
            if request_timeout is not None and request_timeout > 0
            else DEFAULT_COMMIT_WINDOW
        )
    plan = StepPlan(
        workflow_id=workflow_id,
        prompt=prompt,
        step=step,
        tenant=tenant,
        client_tools=frozenset(tool_map.keys()),
        structured=structured,
        commit_window=commit_window,
        settle_timeout=settle_timeout,
        interrupt_timeout=interrupt_timeout,
        poll_interval=poll_interval,
    )
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:

        def bound(binding: DurableBinding) -> dict[str, Tool]:
            return bind_tools(
                tool_map,
                store=store,
                tenant=binding.tenant,
                workflow_id=binding.workflow_id,
                step=binding.marker,
            )

        def perform(effect: Any) -> Any:
            if isinstance(effect, StoreOp):
                return _apply(store, effect)
            if isinstance(effect, WallClock):
                return time.time()
            if isinstance(effect, Drive):
                with chat_client.driver.locked() as now:
                    machine = effect.build(chat_client.selector, now, time.time())
                binding = DurableBinding(tenant=tenant, workflow_id=workflow_id, marker=plan.marker)
                runner = _tool_runner(bound(binding), getattr(machine, "chat_id", None))
                return _drive(machine, chat_client, store, runner)
            assert isinstance(effect, RunAgentTurn)
            return agent_turn(effect)

        def make_agent(
            chat_id: str | None, cursor: int | None, binding: DurableBinding
        ) -> CoderAgent:
            return CoderAgent(
                client=chat_client,
                chat_id=chat_id,
                last_seen_message_id=cursor,
                tools=bound(binding),
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
                # With a supplied client its own hook gets the http/ws events.
                on_transport_event=on_transport_event if client is not None else None,
            )

        def agent_turn(effect: RunAgentTurn) -> TurnReport:
            agent = make_agent(effect.chat_id, effect.last_seen_message_id, effect.binding)
            result: Any = None
            error: BaseException | None = None
            cancelled = False
            try:
                result = agent.generate(effect.prompt, timeout=timeout)
            except KeyboardInterrupt as exc:
                error, cancelled = exc, True
            except Exception as exc:
                error = exc
            report = TurnReport(
                result=result,
                error=error,
                cancelled=cancelled,
                chat_id=agent.chat_id,
                last_seen_message_id=agent.last_seen_message_id,
                stranded_chat_ids=agent.stranded_chat_ids,
            )
            # Never archive: archiving ends resumability. Closing waits (bounded) for the
            # interrupt a timeout or cancellation fired, before the checkpoint is written.
            agent.close(archive=False)
            return report

        # Construction does no I/O: bad agent settings fail here, before anything is
        # journaled or sent.
        make_agent(None, None, DurableBinding(tenant=tenant))
        result: DurableStepResult = _run_effects(step_program(plan), perform)
        return result


def archive_workflow(
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
    http_client: httpx.Client | None = None,
    verify: VerifyTypes = True,
) -> ArchiveWorkflowResult:
    """Retire a workflow at its end (or in its failure handler), never per step: stop a live
    run, archive the checkpointed chat and every stranded chat recorded for the workflow
    (409s retried within ``settle_deadline``, D10), then forget them in the store
    (``coder_proto.durable.ArchiveWorkflow``). ``archived`` is ``False`` when the workflow
    never created a chat."""
    check_store(store)
    with _client_for(
        client, base_url, token, http_client, verify, on_transport_event
    ) as chat_client:
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
        result: ArchiveWorkflowResult = _drive(machine, chat_client, store)
        return result


def sweep_orphans(
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
    http_client: httpx.Client | None = None,
    verify: VerifyTypes = True,
) -> SweepResult:
    """Interrupt and archive every chat the token can see that no checkpoint in ``store``
    accounts for, whatever its status (``coder_proto.durable.OrphanSweep``). Run it where the
    token is dedicated to the workflows using ``store``; with workers inside a first turn at
    the same time, pass ``min_age`` (seconds) longer than a first turn can take."""
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
            )
        result: SweepResult = _drive(machine, chat_client, store)
        return result
