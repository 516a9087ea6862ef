"""A durable machine as an ordinary task of the core's ``Connection`` (docs/durable-workflows.md;
D5, D22, D27; ``start_durable``): its store calls come as ``ApplyStore`` and are answered with
``store_returned`` / ``store_raised``, its requests as ``StartHttp`` / ``CancelHttp``, its tool
runs as ``InvokeTools`` planned like a turn's; a lease's guard stops it before a side effect.
Also the calls' effect programs every adapter runs: the lease around the work, its renewal, the
guard, the archive and sweep calls, and a whole call run by an embedder's loop of its own on
a ``Connection`` against the in-core fake. Pure (no sockets, no clock: the tests feed
``now``), except the last test: the custom-loop template (``examples/custom_loop``) performs a
durable job's store calls and requests against the fake server over loopback.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import pathlib
import time
from collections.abc import Generator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import (
    AgentOptions,
    ApplyStore,
    CancelHttp,
    Connection,
    InvokeTools,
    StartHttp,
    Task,
    TaskMoved,
    tool,
)
from coder_proto._actions import ToolOutcome
from coder_proto._errors import CoderAgentError
from coder_proto._outputs import ToolCall
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_get_chat, parse_get_chat
from coder_proto.durable import (
    Checkpoint,
    DurableStoreError,
    DurableWork,
    MemoryStore,
    StoreOp,
    WorkflowBusyError,
    WorkflowLeaseLostError,
)
from coder_proto.durable._archiving import ArchiveWorkflow, OrphanSweep
from coder_proto.durable._effects import Sleep, WallClock
from coder_proto.durable._lease import WorkflowLease
from coder_proto.durable._runtime import (
    DurableStep,
    EffectStep,
    RunDurable,
    StartRenewal,
    StopRenewal,
    archive_call,
    guarded,
    leased,
    renewal,
    sweep_call,
)
from coder_proto.durable._step import RunAgentTurn, RunMachine
from coder_proto.durable._store_engine import DurableMachine
from coder_proto.durable._tools import DurableBinding
from tests.core_driver import chat_stub

from .harness import World

BASE = "https://coder.example"
V2 = "/api/v2/chats"
CALL = ToolCall(tool_call_id="t1", tool_name="lookup", input='{"city": "Oslo"}')


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


class Probe(DurableMachine[Any]):
    """A store read, a store write, a tool run, a request, then a one-second wait."""

    chat_id = "c1"

    def __init__(self, now: float = 0.0) -> None:
        super().__init__(PrefixSelector(V2))
        self._start(now)

    def _run(self) -> Generator[None, None, Any]:
        checkpoint = yield from self._store("get_checkpoint", "t", "w")
        yield from self._store("add_stranded", "t", "w", "c0")
        outcomes = yield from self._run_tools((CALL,))
        chat = yield from self._rest(build_get_chat("c1"), parse_get_chat)
        yield from self._sleep_until(self.now + 1.0)
        return checkpoint, outcomes, chat.id


def performer(op: StoreOp) -> Any:
    raise AssertionError("the test performs the store calls itself")


def only(commands: list[Any], kind: type) -> Any:
    (command,) = [c for c in commands if isinstance(c, kind)]
    return command


def test_a_durable_job_is_an_ordinary_connection_task() -> None:
    conn = Connection(base_url=BASE, token="secret-token-1234")
    job = DurableWork(Probe(), store=performer, tools={"lookup": lookup})
    assert "Probe" in repr(job) and job.chat_id == "c1"
    task = conn.start_durable(job, now=0.0)
    read = only(conn.commands(), ApplyStore)
    assert read.op == StoreOp("get_checkpoint", ("t", "w")) and read.call.runner is performer
    assert read.call_id == read.call.call_id and "get_checkpoint" in repr(read.call)
    conn.store_finished(read.call, value=None, now=0.1)
    write = only(conn.commands(), ApplyStore)
    assert write.op.method == "add_stranded"
    conn.store_finished(write.call, value=None, now=0.1)
    conn.store_finished(write.call, value=None, now=0.1)  # a second answer is ignored
    run = only(conn.commands(), InvokeTools).run
    # The tool-call policy of the job decides what to call (D5).
    assert run.calls == (CALL,) and [i.tool.name for i in run.invocations] == ["lookup"]
    conn.tool_finished(run, run.invocations[0], value="Oslo", now=0.2)
    request = only(conn.commands(), StartHttp).call
    assert request.url == f"{BASE}{V2}/c1"
    assert ("Coder-Session-Token", "secret-token-1234") in request.headers
    body = json.dumps(chat_stub("c1")).encode()
    conn.http_finished(request, status=200, headers=(), body=body, now=0.3)
    assert not task.done and conn.next_deadline() == pytest.approx(1.3)
    conn.tick(now=1.3)
    assert any(isinstance(c, TaskMoved) for c in conn.commands())
    checkpoint, outcomes, chat_id = task.result()
    assert checkpoint is None and chat_id == "c1"
    assert [o.output for o in outcomes] == ["Oslo"]


def test_a_store_failure_is_the_durable_tasks_error() -> None:
    conn = Connection(base_url=BASE)
    task = conn.start_durable(DurableWork(Probe(), store=performer), now=0.0)
    read = only(conn.commands(), ApplyStore)
    conn.store_finished(read.call, error=OSError("disk full"), now=0.1)
    conn.store_finished(read.call, error=OSError("again"), now=0.1)  # ignored
    assert task.done
    with pytest.raises(DurableStoreError, match="disk full"):
        task.result()


def test_a_machine_without_a_store_fails_its_first_store_call() -> None:
    conn = Connection(base_url=BASE)
    task = conn.start_durable(DurableWork(Probe()), now=0.0)
    assert not any(isinstance(c, ApplyStore) for c in conn.commands())
    with pytest.raises(DurableStoreError, match="without a durable store"):
        task.result()


def test_a_cancelled_durable_task_cancels_its_request_and_ignores_a_late_store_answer_d22() -> None:
    conn = Connection(base_url=BASE)
    task = conn.start_durable(DurableWork(Probe(), store=performer), now=0.0)
    read = only(conn.commands(), ApplyStore)
    task.cancel(KeyboardInterrupt(), now=0.1)
    assert task.done and read.call.finished
    conn.store_finished(read.call, value=None, now=0.2)
    with pytest.raises(CoderAgentError, match="cancelled"):
        task.result()
    # In flight: the request is cancelled like any other.
    conn = Connection(base_url=BASE)
    job = DurableWork(Probe(), store=performer)
    task = conn.start_durable(job, now=0.0)
    for _ in range(2):
        conn.store_finished(only(conn.commands(), ApplyStore).call, value=None, now=0.0)
    # The job has no tools: its policy failed every call at once (D5), and the request went out.
    request = only(conn.commands(), StartHttp).call
    task.cancel(None, now=0.5)
    assert [c for c in conn.commands() if not isinstance(c, TaskMoved)] == [CancelHttp(request)]
    assert task.done and job.done


def test_a_guard_that_refuses_stops_the_job_before_the_side_effect_d27() -> None:
    refused: list[object] = []

    def guard(effect: object) -> None:
        if isinstance(effect, StoreOp) and effect.is_write:
            refused.append(effect)
            raise WorkflowLeaseLostError(tenant="t", workflow_id="w")

    conn = Connection(base_url=BASE)
    task = conn.start_durable(DurableWork(Probe(), store=performer, guard=guard), now=0.0)
    read = only(conn.commands(), ApplyStore)  # a read passes
    conn.store_finished(read.call, value=None, now=0.1)
    assert not any(isinstance(c, ApplyStore) for c in conn.commands())  # the write does not
    assert task.done and len(refused) == 1
    with pytest.raises(WorkflowLeaseLostError):
        task.result()


def test_a_refused_request_is_never_sent_and_the_machine_ends_d27() -> None:
    class Requests(DurableMachine[Any]):
        def __init__(self) -> None:
            super().__init__(PrefixSelector(V2))
            self._start(0.0)

        def _run(self) -> Generator[None, None, Any]:
            chat = yield from self._rest(build_get_chat("c1"), parse_get_chat)
            return chat.id

    lease = WorkflowLease(tenant="t", workflow_id="w", owner="me")
    lease.renewed(False, 1.0)  # taken over
    conn = Connection(base_url=BASE)
    job = DurableWork(Requests(), guard=lease.guard)
    task = conn.start_durable(job, now=0.0)
    assert not any(isinstance(c, StartHttp | CancelHttp) for c in conn.commands())
    with pytest.raises(WorkflowLeaseLostError):
        task.result()
    assert job.done


# -- the calls' programs ----------------------------------------------------------------------------


def run(program: Generator[Any, Any, Any], perform: Any) -> Any:
    return EffectStep(program).run(perform)


class Effects:
    """Performs a call's effects on a ``MemoryStore`` with a test clock, recording them."""

    def __init__(self, store: MemoryStore, wall: float = 1_000.0) -> None:
        self.store = store
        self.wall = wall
        self.seen: list[Any] = []

    def __call__(self, effect: Any) -> Any:
        self.seen.append(effect)
        if isinstance(effect, WallClock):
            return self.wall
        if isinstance(effect, Sleep):
            self.wall += effect.seconds
            return None
        if isinstance(effect, StoreOp):
            return effect.apply(self.store)
        if isinstance(effect, StartRenewal | StopRenewal):
            return None
        raise AssertionError(effect)


def work(log: list[str]) -> Generator[Any, Any, str]:
    yield StoreOp("get_checkpoint", ("t", "w"))
    log.append("worked")
    return "done"


def test_the_lease_is_taken_renewed_and_released_around_the_work_d27() -> None:
    store = MemoryStore()
    lease = WorkflowLease(tenant="t", workflow_id="w", owner="me")
    effects = Effects(store)
    log: list[str] = []
    assert run(leased(lease, work(log)), effects) == "done"
    kinds = [type(e).__name__ for e in effects.seen]
    assert kinds[:2] == ["WallClock", "StoreOp"] and "StartRenewal" in kinds
    assert kinds.index("StartRenewal") < kinds.index("StopRenewal")
    assert effects.seen[-1] == lease.release_op() and store.get_lease("t", "w") is None
    assert log == ["worked"] and not lease.held


def test_the_lease_is_released_when_the_work_fails_or_is_cancelled_d27(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def failing() -> Generator[Any, Any, str]:
        yield StoreOp("get_checkpoint", ("t", "w"))
        raise ValueError("boom")

    store = MemoryStore()
    lease = WorkflowLease(tenant="t", workflow_id="w", owner="me")
    with pytest.raises(ValueError, match="boom"):
        run(leased(lease, failing()), Effects(store))
    assert store.get_lease("t", "w") is None

    class Cancelling(Effects):
        def __call__(self, effect: Any) -> Any:
            if effect == StoreOp("get_checkpoint", ("t", "w")):
                raise KeyboardInterrupt
            if isinstance(effect, StoreOp) and effect.method == "release_lease":
                raise OSError("gone")
            return super().__call__(effect)

    lease = WorkflowLease(tenant="t", workflow_id="w", owner="me")
    cancelling = Cancelling(store)
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        with pytest.raises(KeyboardInterrupt):
            run(leased(lease, work([])), cancelling)
    assert any(isinstance(e, StopRenewal) for e in cancelling.seen)
    assert "releasing the lease on workflow w failed" in caplog.text
    # Closed rather than run: nothing more is asked for.
    program = leased(WorkflowLease(tenant="t", workflow_id="w2", owner="me"), work([]))
    step = EffectStep(program)
    while not isinstance(step.effect, StartRenewal):
        step.send(Effects(store)(step.effect))
    step.send(None)
    step.close()
    assert step.done


def test_a_busy_workflow_is_refused_before_the_work_starts_d27() -> None:
    store = MemoryStore()
    store.acquire_lease("t", "w", "other", 1_000.0, 60.0)
    lease = WorkflowLease(tenant="t", workflow_id="w", owner="me")
    log: list[str] = []
    with pytest.raises(WorkflowBusyError):
        run(leased(lease, work(log)), Effects(store))
    assert log == []


def test_the_renewal_timer_renews_every_third_and_ends_once_the_lease_is_lost_d27() -> None:
    store = MemoryStore()
    lease = WorkflowLease(tenant="t", workflow_id="w", owner="me", duration=3.0)
    effects = Effects(store)
    run(lease.acquire(), effects)
    renewing = EffectStep(renewal(lease))
    assert renewing.effect == WallClock()
    renewing.send(effects.wall)
    assert renewing.effect == Sleep(1.0)
    renewing.send(None)
    renewing.send(1_001.0)
    assert renewing.effect == lease.renew_op(1_001.0)
    renewing.send(True)
    assert lease.expires_at == 1_004.0
    renewing.send(1_002.0)
    renewing.send(None)
    renewing.send(1_002.0)
    renewing.throw(OSError("flaky"))  # logged; tried again soon
    assert not lease.lost
    renewing.send(1_002.5)
    renewing.send(None)
    renewing.send(1_003.0)
    renewing.send(False)  # taken over
    assert lease.lost and renewing.done


def test_the_guard_closes_the_program_before_a_refused_effect() -> None:
    closed: list[bool] = []

    def program() -> Generator[Any, Any, str]:
        try:
            value = yield "read"
            try:
                yield "fails"
            except ValueError:
                value += "!"
            yield "write"
            return value
        finally:
            closed.append(True)

    def guard(effect: object) -> None:
        if effect == "write":
            raise WorkflowLeaseLostError(tenant="t", workflow_id="w")

    step = EffectStep(guarded(program(), guard, str.upper))
    assert step.effect == "READ"
    step.send("v")
    assert step.effect == "FAILS"
    with pytest.raises(WorkflowLeaseLostError):
        step.throw(ValueError("x"))  # caught; the write that follows is refused
    assert closed == [True]
    # A cancellation thrown in closes the program too.
    closed.clear()
    step = EffectStep(guarded(program(), None))
    with pytest.raises(KeyboardInterrupt):
        step.throw(KeyboardInterrupt())
    assert closed == [True]


def test_a_step_program_runs_its_machines_as_durable_jobs_under_its_lease() -> None:
    def bound(
        item: Any, binding: DurableBinding, store: Any, guard: Any = None, lease: Any = None
    ) -> Any:
        return lambda *args, **kwargs: None

    store = MemoryStore()
    store.put_checkpoint("t", "wf", Checkpoint(chat_id="c1"))
    durable = DurableStep(
        "wf",
        "hi",
        store=store,
        step="s",
        tenant="t",
        agent=AgentOptions(tools=[lookup]),
        bound_function=bound,
        lease_owner="me",
    )
    effects = Effects(store)
    step = EffectStep(durable.program())
    while not isinstance(step.effect, RunDurable):
        step.send(effects(step.effect))
    effect = step.effect
    assert effect.guard == durable.guard and set(effect.tools) == {"lookup"}
    job = effect.job(PrefixSelector(V2), 0.0, 1_000.0, store=performer)
    assert job.store is performer and job.chat_id == "c1" and job.guard == durable.guard
    assert isinstance(RunMachine(effect.build), RunMachine)
    step.throw(KeyboardInterrupt())  # the runtime's cancellation
    while not step.done:
        try:
            step.send(effects(step.effect))
        except KeyboardInterrupt:
            break
    assert store.get_lease("t", "wf") is None  # released on the way out
    # The early checkpoint of a fresh chat's turn (D28), refused once the lease is lost.
    binding = DurableBinding(tenant="t", workflow_id="wf", marker="[wf/s]", attempt=1)
    turn = RunAgentTurn(chat_id=None, last_seen_message_id=None, prompt="p", binding=binding)
    op = durable.early_checkpoint(turn, "c2")
    assert op is not None and op.method == "put_checkpoint"
    resumed = RunAgentTurn(chat_id="c1", last_seen_message_id=3, prompt="p", binding=binding)
    assert durable.early_checkpoint(resumed, "c1") is None
    assert durable.lease is not None
    durable.lease.renewed(False, 1.0)
    assert durable.early_checkpoint(turn, "c2") is None


def test_the_archive_and_the_sweep_are_programs_of_one_durable_job() -> None:
    store = MemoryStore()
    archive = archive_call(
        "wf",
        store=store,
        tenant="t",
        lease_owner="me",
        settle_deadline=5.0,
        settle_retry_delay=0.1,
        interrupt_timeout=1.0,
        lease_duration=60.0,
        lease_wait=None,
    )
    assert archive.lease is not None and archive.lease.what == "archive"
    effects = Effects(store)
    step = EffectStep(archive.program())
    while not isinstance(step.effect, RunDurable):
        step.send(effects(step.effect))
    job = step.effect.job(PrefixSelector(V2), 0.0, 1_000.0, store=performer)
    assert isinstance(job.machine, ArchiveWorkflow) and job.guard == archive.lease.guard
    sweep = sweep_call(
        store=store,
        lease_owner="me",
        min_age=0.0,
        settle_deadline=5.0,
        settle_retry_delay=0.1,
        interrupt_timeout=1.0,
        lease_duration=60.0,
    )
    assert sweep.lease is None
    first = next(sweep.program())
    assert isinstance(first, RunDurable) and first.guard is None
    machine = first.job(PrefixSelector(V2), 0.0, 1_000.0, store=performer).machine
    assert isinstance(machine, OrphanSweep)
    with pytest.raises(CoderAgentError, match="not a durable store"):
        sweep_call(
            store=None,
            lease_owner="me",
            min_age=0.0,
            settle_deadline=5.0,
            settle_retry_delay=0.1,
            interrupt_timeout=1.0,
            lease_duration=60.0,
        )


def test_tool_outcomes_reach_the_job_machine() -> None:
    conn = Connection(base_url=BASE)
    machine = Probe()
    job = DurableWork(machine, store=performer, tools={"lookup": lookup})
    task = conn.start_durable(job, now=0.0)
    for _ in range(2):
        call = only(conn.commands(), ApplyStore).call
        conn.store_finished(call, value=None, now=0.0)
    run = only(conn.commands(), InvokeTools).run
    outcome = ToolOutcome(tool_call_id="t1", output="ok")
    conn.tool_finished(run, run.invocations[0], outcome=outcome, now=0.0)
    request = only(conn.commands(), StartHttp).call
    conn.http_finished(request, error="refused", now=0.1)
    assert job.done and task.done
    with pytest.raises(CoderAgentError):
        task.result()


# -- a whole durable call on a Connection driven by hand ------------------------------------------


class HandLoop:
    """An embedder's loop for one durable call, with no I/O of its own: the call's effects
    performed on a ``MemoryStore`` and a test clock, its durable job run on a ``Connection``
    whose requests the in-core fake (``coder_proto.fake``, through ``World``) answers."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.conn = Connection(base_url=BASE, token=world.model.token)
        self.effects: list[str] = []
        self.store_ops: list[str] = []
        self.requests: list[tuple[str, str]] = []

    def perform_store(self, op: StoreOp) -> Any:
        """The durable job's ``store``: what ``ApplyStore`` performs."""
        self.store_ops.append(op.method)
        return op.apply(self.world.store)

    def run(self, program: Generator[Any, Any, Any]) -> Any:
        step = EffectStep(program)
        while not step.done:
            effect = step.effect
            self.effects.append(type(effect).__name__)
            try:
                value = self.perform(effect)
            except Exception as exc:
                step.throw(exc)
            else:
                step.send(value)
        return step.value

    def perform(self, effect: Any) -> Any:
        world = self.world
        if isinstance(effect, StoreOp):
            return self.perform_store(effect)
        if isinstance(effect, WallClock):
            return world.wall
        if isinstance(effect, Sleep):
            world.advance(effect.seconds)
            return None
        if isinstance(effect, StartRenewal | StopRenewal):
            return None  # the call ends long before the lease's first renewal is due
        assert isinstance(effect, RunDurable), effect
        job = effect.job(self.conn.calls.selector, world.now, world.wall, store=self.perform_store)
        return self.drive(self.conn.start_durable(job, now=world.now))

    def drive(self, task: Task) -> Any:
        conn, world = self.conn, self.world
        while True:
            commands = conn.commands()
            for command in commands:
                if isinstance(command, ApplyStore):
                    call = command.call
                    try:
                        value = call.runner(command.op)
                    except Exception as exc:
                        conn.store_finished(call, error=exc, now=world.now)
                    else:
                        conn.store_finished(call, value=value, now=world.now)
                elif isinstance(command, StartHttp):
                    request = command.call
                    path = request.url.removeprefix(BASE)
                    self.requests.append((request.method, path))
                    answer = world.model.handle_http(
                        request.method, path, request.headers, request.body or b"", world.now
                    )
                    conn.http_finished(
                        request,
                        status=answer.status,
                        headers=answer.headers,
                        body=answer.body,
                        now=world.now,
                    )
                else:
                    assert isinstance(command, TaskMoved), command
            if commands:
                continue
            if task.done:
                return task.result()
            due = [t for t in (conn.next_deadline(), world.model.next_deadline()) if t is not None]
            assert due, "the durable task waits for nothing"
            world.advance(max(0.0, min(due) - world.now))
            conn.tick(now=world.now)


def test_a_whole_durable_call_runs_on_a_connection_driven_by_hand_d27() -> None:
    """``archive_workflow`` as an embedder's loop runs it: the lease taken, the
    ``ArchiveWorkflow`` machine as a ``DurableWork`` on the connection (its store calls
    performed as ``ApplyStore``, its requests answered by the fake), the lease released."""
    world = World()
    store = world.store
    chat = world.create_chat("the workflow's chat")
    stranded = world.create_chat("a stranded chat")
    world.settle_server(chat)
    world.settle_server(stranded)
    store.put_checkpoint("t", "wf", Checkpoint(chat_id=chat))
    store.add_stranded("t", "wf", stranded)
    call = archive_call(
        "wf",
        store=store,
        tenant="t",
        lease_owner="me",
        settle_deadline=30.0,
        settle_retry_delay=0.1,
        interrupt_timeout=5.0,
        lease_duration=60.0,
        lease_wait=None,
    )
    loop = HandLoop(world)
    result = loop.run(call.program())
    assert result.archived and result.chat_id == chat
    assert set(result.archived_chat_ids) == {chat, stranded}
    assert world.model.chats[chat].archived and world.model.chats[stranded].archived
    # Forgotten, and the lease released.
    assert store.get_checkpoint("t", "wf") is None and store.stranded_chats("t") == ()
    assert store.get_lease("t", "wf") is None
    kinds = loop.effects
    assert kinds.index("StartRenewal") < kinds.index("RunDurable") < kinds.index("StopRenewal")
    # The machine's store calls came as ApplyStore, between the lease's own store effects.
    assert loop.store_ops[0] == "acquire_lease" and loop.store_ops[-1] == "release_lease"
    assert loop.store_ops[1:3] == ["get_checkpoint", "stranded_chats"]
    assert loop.store_ops[-2] == "delete_checkpoint"
    # Each chat probed, then archived, over the connection's requests (the stranded one first).
    assert loop.requests == [
        (method, f"{V2}/{target}") for target in (stranded, chat) for method in ("GET", "PATCH")
    ]
    assert loop.conn.commands() == [] and loop.conn.stats.open_connections == 0


def test_the_custom_loop_template_performs_a_durable_jobs_store_calls() -> None:
    """``SelectorsLoop`` of ``examples/custom_loop/selectors_loop.py`` runs an
    ``ArchiveWorkflow`` job started with ``start_durable``: its ``ApplyStore`` commands
    performed inline on the store, its requests over loopback to the fake server."""
    path = pathlib.Path(__file__).resolve().parents[2] / "examples/custom_loop/selectors_loop.py"
    spec = importlib.util.spec_from_file_location("custom_loop_template", path)
    assert spec is not None and spec.loader is not None
    template = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(template)
    store = MemoryStore()
    performed: list[str] = []

    def perform(op: StoreOp) -> Any:
        performed.append(op.method)
        return op.apply(store)

    with FakeCoderServer(chunk_delay=0.001) as server:
        conn = Connection(base_url=server.url, token=server.token)
        loop = template.SelectorsLoop(conn)
        try:
            create = conn.calls.create_chat(organization_id=server.organization_id, content="hi")
            chat = loop.run(conn.start_call(create, now=time.monotonic())).id
            store.put_checkpoint("t", "wf", Checkpoint(chat_id=chat))
            machine = ArchiveWorkflow(
                conn.calls.selector, tenant="t", workflow_id="wf", now=time.monotonic()
            )
            job = DurableWork(machine, store=perform)
            result = loop.run(conn.start_durable(job, now=time.monotonic()))
        finally:
            loop.close()
        assert result.archived and result.archived_chat_ids == (chat,)
        assert server.model.chats[chat].archived
    assert performed[:2] == ["get_checkpoint", "stranded_chats"]
    assert performed[-1] == "delete_checkpoint" and store.get_checkpoint("t", "wf") is None
