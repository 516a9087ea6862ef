"""A durable call's effect program as a task of a ``Connection`` (``ProgramJob`` started with
``start_durable``; ``coder_proto.durable._program_job``): store calls as ``ApplyStore``, the
wall clock read off ``now``, sleeps as deadlines, a durable machine inside the task, the
lease's renewal timer beside the program, a step's agent turn as a task of the job's own, and
the caller's cancellation thrown into the program once (a running turn cancelled first)."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from coder_proto import ApplyStore, CancelHttp, Connection, StartHttp, TaskMoved
from coder_proto._errors import CoderAgentError
from coder_proto._outputs import ToolCall
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_get_chat, parse_get_chat
from coder_proto.adapter import ProgramJob
from coder_proto.durable import MemoryStore, StoreOp
from coder_proto.durable._effects import Sleep, WallClock
from coder_proto.durable._lease import WorkflowLease
from coder_proto.durable._runtime import RunDurable, leased
from coder_proto.durable._store_engine import DurableMachine
from tests.core_driver import chat_stub

BASE = "https://coder.example"
V2 = "/api/v2/chats"
#: The wall clock when the job started (at monotonic 100).
WALL = 1_000_000.0
CALL = ToolCall(tool_call_id="t1", tool_name="lookup", input="{}")


def performer(op: StoreOp) -> Any:
    """The job's store performer (the tests answer the store calls themselves)."""
    raise AssertionError("never called here")


def start(program: Generator[Any, Any, Any]) -> tuple[Connection, Any, ProgramJob]:
    conn = Connection(base_url=BASE)
    job = ProgramJob(program, store=performer, selector=PrefixSelector(V2), now=100.0, wall=WALL)
    return conn, conn.start_durable(job, now=100.0), job


def work(conn: Connection) -> list[Any]:
    """The commands to perform, without the task wake-ups."""
    return [c for c in conn.commands() if not isinstance(c, TaskMoved)]


def serve(conn: Connection, store: MemoryStore, now: float) -> list[StoreOp]:
    """Perform every store call on ``store`` until none is left; the ops performed."""
    done: list[StoreOp] = []
    while True:
        calls = [c for c in work(conn) if isinstance(c, ApplyStore)]
        if not calls:
            return done
        for command in calls:
            done.append(command.op)
            conn.store_finished(command.call, value=command.op.apply(store), now=now)


class Probe(DurableMachine[Any]):
    """A durable machine: a store call, a tool run, then a request."""

    def __init__(self, selector: PrefixSelector, now: float) -> None:
        super().__init__(selector)
        self._start(now)

    def _run(self) -> Generator[None, None, Any]:
        checkpoint = yield from self._store("get_checkpoint", "t", "w")
        outcomes = yield from self._run_tools((CALL,))
        chat = yield from self._rest(build_get_chat("c1"), parse_get_chat)
        return checkpoint, [o.output for o in outcomes], chat.id


def probe(selector: PrefixSelector, now: float, wall: float) -> Probe:
    assert wall == WALL + (now - 100.0)
    return Probe(selector, now)


def ok_chat() -> bytes:
    return json.dumps(chat_stub("c1")).encode()


def test_a_program_runs_through_the_connections_commands() -> None:
    seen: list[Any] = []

    def program() -> Generator[Any, Any, str]:
        seen.append((yield WallClock()))
        seen.append((yield StoreOp("get_checkpoint", ("t", "w"))))
        try:
            yield StoreOp("get_checkpoint", ("t", "w"))
        except OSError as exc:  # the store's own exception, as it is
            seen.append(str(exc))
        yield Sleep(2.0)
        seen.append((yield WallClock()))
        seen.append((yield RunDurable(probe)))
        return "ran"

    conn, task, job = start(program())
    assert "ProgramJob" in repr(job) and seen == [WALL]
    (store,) = work(conn)
    assert isinstance(store, ApplyStore) and store.call.runner is performer
    conn.store_finished(store.call, value=None, now=100.5)
    (store,) = work(conn)
    conn.store_finished(store.call, error=OSError("disk full"), now=100.5)
    assert seen == [WALL, None, "disk full"] and work(conn) == []
    assert conn.next_deadline() == 102.5
    conn.tick(now=102.5)
    assert seen[-1] == WALL + 2.5
    # The durable machine's commands are the task's own.
    (store,) = work(conn)
    assert store.call_id > 0  # the machine's ids; the program's own are negative
    conn.store_finished(store.call, value=None, now=103.0)
    # The machine's tool-call policy answered its pause: the job has no such tool (D5).
    (request,) = work(conn)
    assert isinstance(request, StartHttp) and request.call.deadline is None
    conn.http_finished(request.call, status=200, body=ok_chat(), now=103.5)
    checkpoint, outputs, chat_id = seen[-1]
    assert checkpoint is None and "unknown tool" in outputs[0] and chat_id == "c1"
    assert task.done and task.result() == "ran"


def test_a_machines_error_and_an_unknown_effect_are_thrown_into_the_program() -> None:
    def failing(selector: PrefixSelector, now: float, wall: float) -> Probe:
        return Probe(selector, now)

    def program() -> Generator[Any, Any, list[str]]:
        out = []
        try:
            yield RunDurable(failing)
        except CoderAgentError as exc:
            out.append(type(exc).__name__)
        try:
            yield "no such effect"
        except CoderAgentError as exc:
            out.append(str(exc))
        return out

    conn, task, _job = start(program())
    (store,) = work(conn)
    conn.store_finished(store.call, error=OSError("gone"), now=101.0)
    assert task.done
    name, unknown = task.result()
    assert name == "DurableStoreError" and "unknown effect 'no such effect'" in unknown


def test_what_reaches_no_running_machine_is_ignored() -> None:
    def program() -> Generator[Any, Any, str]:
        yield Sleep(1.0)
        return "slept"

    conn, task, job = start(program())
    assert job.request_deadline(1) is None
    job.response_received(1, HttpResponse(status=200, body=b"{}", headers=()), 100.1)
    job.request_failed(1, "refused", 100.1)
    job.tool_results((), 100.1)
    job.store_result(7, None, 100.1)  # the machine's id, no machine
    job.store_result(-7, None, 100.1)  # an id of no call
    assert not job.done
    conn.tick(now=101.0)
    assert task.result() == "slept"


def test_the_machines_deadlines_are_the_tasks() -> None:
    class Patient(DurableMachine[Any]):
        def __init__(self, selector: PrefixSelector, now: float) -> None:
            super().__init__(selector)
            self._start(now)

        def _run(self) -> Generator[None, None, Any]:
            try:
                yield from self._rest(build_get_chat("c1"), parse_get_chat, deadline=self.now + 5)
            except TimeoutError:
                return "gave up"

    def program() -> Generator[Any, Any, Any]:
        return (yield RunDurable(lambda selector, now, wall: Patient(selector, now)))

    conn, task, _job = start(program())
    (request,) = work(conn)
    assert conn.next_deadline() == 105.0 and request.call.deadline == 105.0
    conn.tick(now=103.0)  # not due yet
    assert not task.done
    conn.tick(now=105.0)
    assert work(conn) == [CancelHttp(request.call)]
    assert task.result() == "gave up"


def lease(duration: float = 3.0) -> WorkflowLease:
    return WorkflowLease(tenant="t", workflow_id="w", owner="me", duration=duration)


def test_the_lease_is_renewed_by_a_timer_of_the_task_d27() -> None:
    store = MemoryStore()
    held = lease()

    def work_under_lease() -> Generator[Any, Any, str]:
        yield Sleep(2.5)
        return "done"

    conn, task, _job = start(leased(held, work_under_lease()))
    assert [op.method for op in serve(conn, store, 100.0)] == ["acquire_lease"]
    # Renewed every third of the duration, beside the program's own sleep.
    assert conn.next_deadline() == 101.0
    conn.tick(now=101.0)
    (renew,) = work(conn)
    assert renew.op.method == "renew_lease" and renew.op.args[3] == WALL + 1.0
    conn.store_finished(renew.call, value=renew.op.apply(store), now=101.0)
    conn.tick(now=102.0)
    (renew,) = work(conn)
    # The step ends while a renewal is in flight: the release waits for it.
    conn.tick(now=102.5)
    assert work(conn) == [] and not task.done
    conn.store_finished(renew.call, value=renew.op.apply(store), now=102.6)
    assert [op.method for op in serve(conn, store, 102.7)] == ["release_lease"]
    assert task.result() == "done" and store.get_lease("t", "w") is None


def test_a_renewal_that_lost_the_lease_ends_the_timer_d27() -> None:
    store = MemoryStore()
    held = lease()

    def work_under_lease() -> Generator[Any, Any, str]:
        yield Sleep(1.5)
        return "done"

    conn, task, _job = start(leased(held, work_under_lease()))
    serve(conn, store, 100.0)
    store.acquire_lease("t", "w", "other", WALL + 10.0, 60.0)  # taken over
    conn.tick(now=101.0)
    (renew,) = work(conn)
    conn.store_finished(renew.call, value=renew.op.apply(store), now=101.0)
    assert held.lost and conn.next_deadline() == 101.5  # no renewal any more
    conn.tick(now=101.5)
    serve(conn, store, 101.5)
    assert task.result() == "done"


def test_a_cancellation_is_thrown_into_the_program_once_and_it_still_releases_d22() -> None:
    store = MemoryStore()
    held = lease(duration=30.0)

    def work_under_lease() -> Generator[Any, Any, str]:
        yield StoreOp("get_checkpoint", ("t", "w"))
        return "never"

    conn, task, _job = start(leased(held, work_under_lease()))
    (acquire,) = work(conn)
    conn.store_finished(acquire.call, value=acquire.op.apply(store), now=100.0)
    (read,) = work(conn)
    reason = KeyboardInterrupt()
    task.cancel(reason, now=100.2)
    task.cancel(KeyboardInterrupt(), now=100.3)  # once only
    conn.store_finished(read.call, value=None, now=100.4)  # abandoned: ignored
    assert [op.method for op in serve(conn, store, 100.5)] == ["release_lease"]
    assert task.done
    with pytest.raises(KeyboardInterrupt) as caught:
        task.result()
    assert caught.value is reason
    assert store.get_lease("t", "w") is None


@pytest.mark.parametrize("where", ["sleep", "machine"])
def test_a_cancellation_ends_whatever_the_program_waits_for(where: str) -> None:
    def program() -> Generator[Any, Any, Any]:
        if where == "sleep":
            yield Sleep(10.0)
        else:
            yield RunDurable(probe)

    conn, task, job = start(program())
    commands = work(conn)
    task.cancel(None, now=101.0)
    with pytest.raises(CoderAgentError, match="the durable call was cancelled"):
        task.result()
    assert conn.next_deadline() is None
    if where == "machine":
        (store,) = commands
        conn.store_finished(store.call, value=None, now=101.5)  # the machine is gone
        assert job.request_deadline(1) is None


def test_a_cancellation_while_the_renewal_stops_leaves_the_lease_to_expire() -> None:
    store = MemoryStore()
    held = lease()

    def work_under_lease() -> Generator[Any, Any, str]:
        yield Sleep(1.5)
        return "done"

    conn, task, _job = start(leased(held, work_under_lease()))
    serve(conn, store, 100.0)
    conn.tick(now=101.0)
    (renew,) = work(conn)
    conn.tick(now=101.5)  # the program ends and waits for the renewal to stop
    task.cancel(TimeoutError("caller's deadline"), now=101.6)
    with pytest.raises(TimeoutError):
        task.result()
    conn.store_finished(renew.call, value=renew.op.apply(store), now=101.7)
    assert work(conn) == []


def test_the_renewal_goes_on_while_a_durable_machine_runs_d27() -> None:
    store = MemoryStore()
    held = lease()

    def work_under_lease() -> Generator[Any, Any, Any]:
        try:
            return (yield RunDurable(probe))
        except CoderAgentError as exc:
            return type(exc).__name__

    conn, task, _job = start(leased(held, work_under_lease()))
    (acquire,) = work(conn)
    conn.store_finished(acquire.call, value=acquire.op.apply(store), now=100.0)
    (read,) = work(conn)  # the machine's store call, which has no deadline
    conn.tick(now=101.0)
    (renew,) = work(conn)
    assert renew.op.method == "renew_lease"
    conn.store_finished(renew.call, value=renew.op.apply(store), now=101.0)
    conn.store_finished(read.call, value=None, now=101.1)
    (request,) = work(conn)
    conn.http_finished(request.call, error="ConnectError: refused", now=101.2)
    assert [op.method for op in serve(conn, store, 101.3)] == ["release_lease"]
    assert task.result() == "CoderNetworkError"
