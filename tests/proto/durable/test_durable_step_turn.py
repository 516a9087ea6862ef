"""A durable step's agent turn run by its job (``ProgramJob`` started with
``Connection.start_durable``; ``StartStepTurn``): a ``generate`` task of the job's own on
the same connection, its commands the job's, a fresh chat held until its early checkpoint
(D28), its agent closed without archiving, the interrupt a cut turn fired waited for (at most
``BACKGROUND_TASK_BOUND``) before the program gets the ``TurnReport``; the job's
``timeout`` cuts the turn, and the caller's cancellation cancels the turn first (D22)."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from coder_proto import (
    AgentOptions,
    ApplyStore,
    CloseSocket,
    CoderApiError,
    Connection,
    OpenSocket,
    StartHttp,
    TaskMoved,
)
from coder_proto._errors import CoderAgentError
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._transport_events import TransportEventSink
from coder_proto.adapter import BACKGROUND_TASK_BOUND, ProgramJob
from coder_proto.durable import MemoryStore, StoreOp
from coder_proto.durable._runtime import DurableStep
from coder_proto.durable._step import RunAgentTurn, TurnReport
from coder_proto.durable._tools import DurableBinding
from coder_proto.transcript import TranscriptRecorder
from tests.core_driver import chat_stub

BASE = "https://coder.example"
V2 = "/api/v2/chats"
FRESH = RunAgentTurn(
    chat_id=None,
    last_seen_message_id=None,
    prompt="hi",
    binding=DurableBinding(tenant="t", workflow_id="w", marker="[w/one]"),
)


def performer(op: StoreOp) -> Any:
    """The job's store performer (the tests answer the store calls themselves)."""
    raise AssertionError("never called here")


def durable_step(**settings: Any) -> DurableStep:
    return DurableStep(
        "w",
        "hi",
        store=MemoryStore(),
        step="one",
        tenant="t",
        agent=AgentOptions(organization_id="org-1"),
        bound_function=lambda *args, **kwargs: None,
        **settings,
    )


def turn_program(seen: list[TurnReport]) -> Generator[Any, Any, str]:
    """A program that reads the checkpoint, runs the turn, keeps its report and raises its
    error (as the step program does)."""
    yield StoreOp("get_checkpoint", ("t", "w"))
    report: TurnReport = yield FRESH
    seen.append(report)
    if report.error is not None:
        raise report.error
    return "finished"


def start(
    seen: list[TurnReport], *, timeout: float | None = None, recorder: Any = None
) -> tuple[Connection, Any, ProgramJob]:
    """The job started, its io set as an embedder's, its checkpoint read: the turn's create
    call is out."""
    conn = Connection(base_url=BASE, recorder=recorder)
    job = ProgramJob(
        turn_program(seen),
        store=performer,
        selector=PrefixSelector(V2),
        now=100.0,
        wall=1_000_000.0,
        step=durable_step(),
        timeout=timeout,
    )
    task = conn.start_durable(job, now=100.0)
    task.io = "the job's io"
    (read,) = work(conn)
    conn.store_finished(read.call, value=None, now=100.0)
    return conn, task, job


def work(conn: Connection) -> list[Any]:
    return [c for c in conn.commands() if not isinstance(c, TaskMoved)]


def created(conn: Connection, now: float) -> ApplyStore:
    """Answer the create call; the early checkpoint's write that follows (D28)."""
    (create,) = work(conn)
    assert isinstance(create, StartHttp) and create.call.url == BASE + V2
    body = json.dumps(chat_stub("c1")).encode()
    conn.http_finished(create.call, status=201, body=body, now=now)
    (write,) = work(conn)
    assert isinstance(write, ApplyStore) and write.call.runner is performer
    assert write.op.method == "put_checkpoint" and write.op.args[2].chat_id == "c1"
    return write


def interrupt(commands: list[Any]) -> StartHttp:
    (call,) = [c for c in commands if isinstance(c, StartHttp)]
    assert call.call.url.endswith("/c1/interrupt") and call.call.background
    return call


def test_the_turn_is_a_task_of_the_jobs_own_and_its_error_is_reported() -> None:
    seen: list[TurnReport] = []
    conn, task, job = start(seen)
    turn = job.turn
    assert turn.kind == "generate" and turn.io == "the job's io" and "turn=" in repr(job)
    assert conn.stats.attached_sessions == 1
    with pytest.raises(CoderAgentError, match="not finished"):
        job.result()
    (create,) = work(conn)
    assert create.call.task is turn
    conn.http_finished(create.call, status=500, body=b'{"message": "down"}', now=101.0)
    assert task.done and job.turn is None
    (report,) = seen
    assert isinstance(report.error, CoderApiError) and not report.cancelled
    assert report.chat_id is None and report.result is None
    with pytest.raises(CoderApiError):
        task.result()
    # The agent was closed: its session is no longer kept.
    assert conn.stats.attached_sessions == 0 and conn.stats.tasks == 0


def test_the_timeout_cuts_the_turn_and_the_interrupt_is_waited_for() -> None:
    seen: list[TurnReport] = []
    conn, task, _job = start(seen, timeout=5.0)
    write = created(conn, now=101.0)
    conn.store_finished(write.call, value=None, now=102.0)
    assert any(isinstance(c, OpenSocket) for c in work(conn))
    assert conn.next_deadline() == 105.0  # the job's timeout, from the turn's start
    conn.tick(now=105.0)
    commands = work(conn)
    assert any(isinstance(c, CloseSocket) for c in commands)
    call = interrupt(commands)
    # The closing waits for the interrupt the cut fired, at most the background bound.
    assert not task.done and seen == []
    assert conn.next_deadline() == 105.0 + BACKGROUND_TASK_BOUND
    conn.http_finished(call.call, status=200, body=b"{}", now=105.5)
    (report,) = seen
    assert isinstance(report.error, TimeoutError) and not report.cancelled
    assert "timeout of 5 s" in str(report.error) and report.chat_id == "c1"
    with pytest.raises(TimeoutError):
        task.result()


def test_a_cancellation_waits_for_the_early_write_then_reports_the_cut_turn_d22() -> None:
    seen: list[TurnReport] = []
    lines: list[str] = []
    conn, task, _job = start(seen, recorder=TranscriptRecorder(lines.append))
    write = created(conn, now=101.0)
    reason = KeyboardInterrupt()
    task.cancel(reason, now=101.5)
    # The turn holds the chat until its checkpoint answered: no interrupt yet (D28).
    assert work(conn) == [] and not task.done
    conn.store_finished(write.call, value=None, now=102.0)
    interrupt(work(conn))
    assert not task.done
    # An interrupt that never answers is waited for only as long as its bound (D22).
    assert conn.next_deadline() == 102.0 + BACKGROUND_TASK_BOUND
    conn.tick(now=102.0 + BACKGROUND_TASK_BOUND)
    (report,) = seen
    assert report.cancelled and report.error is reason and report.chat_id == "c1"
    # The transcript has the turn and its cancellation, as for any turn.
    kinds = [json.loads(line)["kind"] for line in lines if line.strip()]
    assert kinds[:2] == ["header", "turn"] and "cancel" in kinds and "turn_end" in kinds
    with pytest.raises(KeyboardInterrupt):
        task.result()


def test_a_cancellation_after_the_turn_ended_still_ends_the_call() -> None:
    """The turn's report goes to the program as the turn went (its checkpoint is the
    truth); the call then ends with the cancellation."""
    seen: list[TurnReport] = []

    def keeps(report: TurnReport) -> Generator[Any, Any, str]:
        seen.append(report)
        return "kept"
        yield  # pragma: no cover - a generator

    conn = Connection(base_url=BASE)

    def program() -> Generator[Any, Any, str]:
        yield StoreOp("get_checkpoint", ("t", "w"))
        report = yield FRESH
        return (yield from keeps(report))

    job = ProgramJob(
        program(),
        store=performer,
        selector=PrefixSelector(V2),
        now=100.0,
        wall=1_000_000.0,
        step=durable_step(),
        timeout=1.0,
    )
    task = conn.start_durable(job, now=100.0)
    (read,) = work(conn)
    conn.store_finished(read.call, value=None, now=100.0)
    write = created(conn, now=100.5)
    conn.store_finished(write.call, value=None, now=100.6)
    work(conn)
    conn.tick(now=101.0)
    call = interrupt(work(conn))
    reason = KeyboardInterrupt()
    task.cancel(reason, now=101.2)
    conn.http_finished(call.call, status=200, body=b"{}", now=101.5)
    (report,) = seen
    assert isinstance(report.error, TimeoutError) and not report.cancelled
    with pytest.raises(KeyboardInterrupt) as caught:
        task.result()
    assert caught.value is reason


def test_the_connections_end_ends_the_turn_and_forgets_the_job() -> None:
    seen: list[TurnReport] = []
    conn, _task, job = start(seen)
    write = created(conn, now=101.0)
    conn.store_finished(write.call, value=None, now=101.5)
    turn = job.turn
    conn.close(now=102.0)
    assert turn.done and job.turn is None
    assert conn.stats.tasks == 0 and conn.stats.background_jobs == 0


def test_the_steps_own_transport_event_hook_gets_the_segment_events() -> None:
    heard: list[str] = []
    made: list[Any] = []

    def make_sink(callback: Any) -> TransportEventSink:
        made.append(callback)
        return TransportEventSink(callback)

    step = durable_step(supplied_client=True, on_transport_event=lambda e: heard.append(e.type))
    job = ProgramJob(
        iter(()),
        store=performer,
        selector=PrefixSelector(V2),
        now=100.0,
        wall=1_000_000.0,
        step=step,
        make_sink=make_sink,
        env={"CODER_ORGANIZATION_ID": "org-env"},
    )
    client = TransportEventSink(lambda e: heard.append(f"client {e.type}"))
    core = job.turn_agent(
        FRESH, base_url=BASE, token=None, selector=PrefixSelector(V2), sink=client
    )
    assert len(made) == 1 and core.session.chat_gate is not None

    class Event:
        def __init__(self, type: str) -> None:
            self.type = type

    core.session.sink.emit(Event("segment:start"))
    core.session.sink.emit(Event("ws:open"))
    assert heard == ["segment:start", "client ws:open"]
    resumed = RunAgentTurn(chat_id="c9", last_seen_message_id=4, prompt="hi", binding=FRESH.binding)
    again = job.turn_agent(
        resumed, base_url=BASE, token=None, selector=PrefixSelector(V2), sink=client
    )
    assert again.session.chat_gate is None and again.session.chat_id == "c9"
