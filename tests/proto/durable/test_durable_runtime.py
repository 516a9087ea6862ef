"""What every adapter's durable functions share (``coder_proto.durable._runtime``;
docs/durable-workflows.md; D5, D22, D26-D28): the step's setup and its agents' settings, the
turn report, stepping effect programs, binding crash-safe tools, the calls' programs under the
workflow lease, and a durable machine driven by hand on a ``Connection`` the way an embedder
does (a ``DurableWork`` started with ``start_durable``: its commands performed, outcomes fed
back, deadlines, cancellation).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from coder_proto import (
    AgentOptions,
    ApplyStore,
    CancelHttp,
    Connection,
    InvokeTools,
    StartHttp,
    Task,
    TaskMoved,
)
from coder_proto._agent.tools import Tool, tool
from coder_proto._errors import CoderAgentError, CoderNetworkError
from coder_proto._outputs import ToolCall
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_get_chat, parse_get_chat
from coder_proto.durable import (
    DEFAULT_COMMIT_WINDOW,
    CrashSafeTool,
    DurableStoreError,
    DurableToolContext,
    DurableWork,
    MemoryStore,
    StoreOp,
    crash_safe,
)
from coder_proto.durable._runtime import (
    DurableStep,
    EffectStep,
    commit_window_for,
    tool_binder,
    turn_report,
)
from coder_proto.durable._scan import step_marker
from coder_proto.durable._step import RunAgentTurn
from coder_proto.durable._store_engine import DurableMachine
from coder_proto.durable._tools import DurableBinding
from tests.core_driver import chat_stub

BASE = "https://coder.example"
V2 = "/api/v2/chats"
CALL = ToolCall(tool_call_id="t1", tool_name="lookup", input="{}")


# -- the step's setup -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("commit_window", "request_timeout", "expected"),
    [
        (None, None, DEFAULT_COMMIT_WINDOW),
        (None, 0.0, DEFAULT_COMMIT_WINDOW),
        (None, 42, 42.0),
        (7, 42.0, 7.0),
    ],
)
def test_the_commit_window_defaults_to_the_request_timeout_c3(
    commit_window: float | None, request_timeout: float | None, expected: float
) -> None:
    assert commit_window_for(commit_window, request_timeout) == expected


def test_the_agents_hook_is_passed_only_with_a_supplied_client() -> None:
    def hook(event: Any) -> None:
        return None

    options = AgentOptions(model="gpt-5", max_steps=3)
    supplied = step(agent=options, on_transport_event=hook, supplied_client=True)
    kwargs = supplied.dry_kwargs()
    assert kwargs["on_transport_event"] is hook and kwargs["options"] is options
    # A client created for the call has the hook already: every event would arrive twice.
    created = step(agent=options, on_transport_event=hook, supplied_client=False)
    assert "on_transport_event" not in created.dry_kwargs()


@crash_safe
def charge(amount: int, ctx: DurableToolContext) -> str:
    """Charge an amount."""
    return f"charged {amount} as {ctx.idempotency_key}"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


class Bound:
    """A stand-in for an adapter's crash-safe function."""

    def __init__(
        self,
        item: CrashSafeTool,
        binding: DurableBinding,
        store: Any,
        guard: Any = None,
        lease: Any = None,
    ) -> None:
        self.item, self.binding, self.store, self.guard = item, binding, store, guard
        self.lease = lease


bind_tools = tool_binder(Bound)


def step(**kwargs: Any) -> DurableStep:
    kwargs.setdefault("store", MemoryStore())
    kwargs.setdefault("step", "s1")
    kwargs.setdefault("tenant", "acme")
    kwargs.setdefault("agent", AgentOptions(request_timeout=30.0, tools=[charge, lookup]))
    kwargs.setdefault("bound_function", Bound)
    return DurableStep("wf-1", "do it", **kwargs)


def test_a_step_is_planned_from_run_turns_arguments() -> None:
    durable = step(settle_timeout=9.0, interrupt_timeout=3.0, poll_interval=0.5)
    plan = durable.plan
    assert (
        plan.marker == step_marker("wf-1", "s1")
        and repr(durable) == f"DurableStep({plan.marker!r})"
    )
    assert plan.client_tools == frozenset({"charge", "lookup"}) and plan.structured is None
    assert (plan.commit_window, plan.settle_timeout) == (30.0, 9.0)
    assert (plan.interrupt_timeout, plan.poll_interval) == (3.0, 0.5)
    assert durable.binding == DurableBinding(tenant="acme", workflow_id="wf-1", marker=plan.marker)
    structured = step(agent=AgentOptions(output_type=int, tools=[charge, lookup]))
    assert structured.plan.structured is not None


def test_a_bad_store_or_plan_fails_before_anything_runs() -> None:
    with pytest.raises(CoderAgentError, match="not a durable store"):
        step(store=object())
    with pytest.raises(CoderAgentError, match="non-empty"):
        DurableStep(
            "wf-1",
            " ",
            store=MemoryStore(),
            step=None,
            tenant="t",
            agent=AgentOptions(),
            bound_function=Bound,
        )


def test_the_steps_agents_get_its_settings_its_chat_and_its_bound_tools() -> None:
    store = MemoryStore()
    options = AgentOptions(model="m", tools=[charge, lookup])
    durable = step(store=store, supplied_client=True, agent=options)
    binding = DurableBinding(tenant="acme", workflow_id="wf-1", marker="[wf-1/s1]", attempt=2)
    turn = RunAgentTurn(chat_id="c1", last_seen_message_id=7, prompt="p", binding=binding)
    kwargs = durable.turn_kwargs(turn)
    assert (kwargs["chat_id"], kwargs["last_seen_message_id"]) == ("c1", 7)
    assert kwargs["options"] is options  # the bound tools= override its tools
    bound = kwargs["tools"]["charge"].func
    assert isinstance(bound, Bound) and bound.store is store
    assert bound.binding == binding  # the attempt included
    assert bound.guard == durable.guard  # the lease's guard, before every side effect
    assert kwargs["tools"]["lookup"] is durable.tools["lookup"]  # not crash-safe: as is
    dry = durable.dry_kwargs()
    assert dry["chat_id"] is None and dry["last_seen_message_id"] is None
    assert dry["tools"]["charge"].func.binding == DurableBinding(tenant="acme")
    program = durable.program()
    assert next(program) == StoreOp("get_checkpoint", ("acme", "wf-1"))
    program.close()


def test_a_turn_report_reads_the_agent_after_its_turn() -> None:
    class Agent:
        chat_id = "c1"
        last_seen_message_id = 9
        stranded_chat_ids = ("s1",)

    report = turn_report(Agent(), result="r")
    assert (report.result, report.error, report.cancelled) == ("r", None, False)
    assert (report.chat_id, report.last_seen_message_id, report.stranded_chat_ids) == (
        "c1",
        9,
        ("s1",),
    )
    error = TimeoutError()
    assert turn_report(Agent(), error=error, cancelled=True).cancelled


def test_bind_tools_binds_crash_safe_tools_only_and_checks_the_store() -> None:
    store = MemoryStore()
    tools = bind_tools(
        {"charge": charge, "lookup": lookup}, store=store, workflow_id="wf", step="m"
    )
    assert isinstance(tools["charge"].func, Bound) and isinstance(tools["charge"], CrashSafeTool)
    assert tools["charge"].func.binding == DurableBinding(
        tenant="default", workflow_id="wf", marker="m"
    )
    assert tools["lookup"] is lookup and isinstance(tools["lookup"], Tool)
    assert bind_tools.__module__ == __name__
    with pytest.raises(CoderAgentError, match="not a durable store"):
        bind_tools([charge], store=None)


# -- effect programs ---------------------------------------------------------------------------------


def program(log: list[Any]) -> Generator[str, Any, str]:
    value = yield "first"
    log.append(value)
    try:
        yield "second"
    except ValueError as exc:
        log.append(str(exc))
    try:
        yield "third"
    finally:
        log.append("closed")
    return "end"


def test_an_effect_program_gets_values_and_errors_back_in_order() -> None:
    log: list[Any] = []
    run = EffectStep(program(log))
    assert run.effect == "first" and not run.done
    run.send(1)
    assert run.effect == "second"
    run.throw(ValueError("boom"))
    assert run.effect == "third"
    run.send(None)
    assert run.done and run.value == "end" and run.effect is None
    assert log == [1, "boom", "closed"]
    assert "done=True" in repr(run)


def test_an_abandoned_program_runs_its_finally_blocks() -> None:
    log: list[Any] = []
    run = EffectStep(program(log))
    run.send(1)
    run.send(None)
    run.close()
    assert run.done and log == [1, "closed"]


def test_an_error_the_program_does_not_catch_is_raised() -> None:
    run = EffectStep(program([]))
    with pytest.raises(KeyError):
        run.throw(KeyError("x"))


# -- driving durable machines on a Connection --------------------------------------------------------


class Probe(DurableMachine[Any]):
    """A store call, a tool run, a request, then a one-second wait."""

    def __init__(self, now: float = 0.0) -> None:
        super().__init__(PrefixSelector(V2))
        self._start(now)

    def _run(self) -> Generator[None, None, Any]:
        checkpoint = yield from self._store("get_checkpoint", "t", "w")
        outcomes = yield from self._run_tools((CALL,))
        chat = yield from self._rest(build_get_chat("c1"), parse_get_chat)
        yield from self._sleep_until(self.now + 1.0)
        return checkpoint, outcomes, chat.id


def performer(op: StoreOp) -> Any:
    """The job's store performer (the test answers the store calls itself)."""
    raise AssertionError("never called here")


def ok_chat() -> HttpResponse:
    return HttpResponse(status=200, body=json.dumps(chat_stub("c1")).encode(), headers=())


def probe_lookup() -> str:
    """The client tool the probe calls (the test reports its outcome itself)."""
    raise AssertionError("never called here")


def started(machine: DurableMachine[Any], *, tools: Any = None) -> tuple[Connection, Task]:
    """``machine`` as a durable job on a fresh connection, with the client ``tools``."""
    conn = Connection(base_url=BASE)
    job = DurableWork(machine, store=performer, tools=tools)
    return conn, conn.start_durable(job, now=0.0)


def work(conn: Connection) -> list[Any]:
    """The commands to perform, without the task wake-ups."""
    return [c for c in conn.commands() if not isinstance(c, TaskMoved)]


def to_the_request(conn: Connection) -> StartHttp:
    """Answer the probe's store call; its tool call names no tool of the job, so the tool-call
    policy fails it at once (D5) and the request follows."""
    (store,) = work(conn)
    conn.store_finished(store.call, value=None, now=0.0)
    (request,) = work(conn)
    assert isinstance(request, StartHttp)
    return request


def test_a_machine_is_driven_command_by_command_to_its_result() -> None:
    conn, task = started(Probe(), tools={"lookup": Tool.from_function(probe_lookup, name="lookup")})
    assert "Probe" in repr(task.machine)
    (store,) = work(conn)
    assert isinstance(store, ApplyStore) and store.op == StoreOp("get_checkpoint", ("t", "w"))
    assert store.call.runner is performer
    assert conn.next_deadline() is None  # nothing to wait for but the store
    conn.store_finished(store.call, value=None, now=0.1)
    (calls,) = work(conn)
    assert isinstance(calls, InvokeTools) and calls.run.calls == (CALL,)
    (invocation,) = calls.run.invocations
    conn.tool_finished(calls.run, invocation, value="ok", now=0.2)
    (request,) = work(conn)
    assert isinstance(request, StartHttp) and request.call.url == f"{BASE}{V2}/c1"
    answer = ok_chat()
    conn.http_finished(request.call, status=200, headers=(), body=answer.body, now=0.3)
    assert work(conn) == [] and conn.next_deadline() == pytest.approx(1.3)
    assert not task.done
    conn.tick(now=1.3)
    assert work(conn) == [] and task.done
    checkpoint, outcomes, chat_id = task.result()
    assert checkpoint is None and chat_id == "c1"
    assert [o.output for o in outcomes] == ["ok"]


def test_a_late_outcome_for_an_abandoned_request_is_ignored_d22() -> None:
    conn, task = started(Probe())
    request = to_the_request(conn)
    task.cancel(KeyboardInterrupt(), now=0.5)
    assert work(conn) == [CancelHttp(request.call)]
    assert task.done
    # No effect on the finished machine.
    conn.http_finished(request.call, status=200, headers=(), body=b"{}", now=0.6)
    with pytest.raises(CoderAgentError, match="cancelled"):
        task.result()


def test_a_network_failure_is_the_machines_error() -> None:
    conn, task = started(Probe())
    request = to_the_request(conn)
    conn.http_finished(request.call, error="ConnectError: refused", now=0.1)
    assert task.done
    with pytest.raises(CoderNetworkError):
        task.result()


def test_a_store_failure_fails_the_machine_with_its_cause() -> None:
    conn, task = started(Probe())
    (store,) = work(conn)
    conn.store_finished(store.call, error=OSError("disk full"), now=0.0)
    conn.store_finished(store.call, error=OSError("again"), now=0.0)  # answered once only
    conn.store_finished(store.call, value=None, now=0.0)
    with pytest.raises(DurableStoreError, match="disk full"):
        task.result()


def test_a_call_of_a_tool_the_job_lacks_still_gets_an_error_result_d5() -> None:
    conn, task = started(Probe())
    request = to_the_request(conn)
    answer = ok_chat()
    conn.http_finished(request.call, status=200, headers=(), body=answer.body, now=0.0)
    conn.tick(now=2.0)
    _, outcomes, _ = task.result()
    assert [o.is_error for o in outcomes] == [True]


def test_a_request_the_machine_gives_up_on_is_cancelled() -> None:
    class Impatient(DurableMachine[Any]):
        def __init__(self) -> None:
            super().__init__(PrefixSelector(V2))
            self._start(0.0)

        def _run(self) -> Generator[None, None, Any]:
            try:
                yield from self._rest(build_get_chat("c1"), parse_get_chat, deadline=1.0)
            except TimeoutError:
                return "gave up"

    conn, task = started(Impatient())
    (request,) = work(conn)
    assert conn.next_deadline() == 1.0
    conn.tick(now=1.0)
    assert work(conn) == [CancelHttp(request.call)]
    assert task.result() == "gave up"


def test_a_cancellation_while_a_store_call_runs_ignores_its_outcome_d22() -> None:
    conn, task = started(Probe())
    (store,) = work(conn)
    task.cancel(None, now=0.0)
    assert work(conn) == [] and task.done
    assert store.call.finished  # left to finish on its own; what it reports is ignored
    conn.store_finished(store.call, value=None, now=0.1)
    with pytest.raises(CoderAgentError, match="cancelled"):
        task.result()
