"""A durable step's fresh chat held by the turn until its early checkpoint answered (D28;
``Turn.hold_chat``, ``coder_proto.durable._runtime.EarlyCheckpoint``): between the create
call's answer and the checkpoint's store write, nothing else happens on the chat (no stream,
no message, not even a cancellation's interrupt), whatever the write's outcome."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from coder_proto import (
    AgentOptions,
    ApplyStore,
    CoderChatError,
    Connection,
    OpenSocket,
    StartHttp,
    TaskMoved,
)
from coder_proto.durable import MemoryStore, StoreOp
from coder_proto.durable._runtime import DurableStep
from coder_proto.durable._step import RunAgentTurn
from coder_proto.durable._tools import DurableBinding
from tests.core_driver import chat_stub

BASE = "https://coder.example"
NOW = 100.0


def performer(op: StoreOp) -> Any:
    """The gate's store performer (the tests answer the store calls themselves)."""
    raise AssertionError("never called here")


def gated(
    workflow_id: str | None = "w", **settings: Any
) -> tuple[Connection, Any, Any, DurableStep]:
    """A connection with an agent whose session is held by a step's early checkpoint, its
    fresh-chat turn started."""
    conn = Connection(base_url=BASE)
    step = DurableStep(
        "w",
        "hi",
        store=MemoryStore(),
        step="one",
        tenant="t",
        agent=AgentOptions(),
        bound_function=lambda *args, **kwargs: None,
    )
    binding = DurableBinding(tenant="t", workflow_id=workflow_id, marker="[w/one]")
    effect = RunAgentTurn(chat_id=None, last_seen_message_id=None, prompt="hi", binding=binding)
    agent = conn.agent(organization_id="org-1", **settings)
    gate = step.chat_gate(effect, performer)
    assert "EarlyCheckpoint" in repr(gate) and gate.store is performer
    agent.session.chat_gate = gate
    task = conn.start_turn(agent, "hi", now=NOW)
    return conn, agent, task, step


def work(conn: Connection) -> list[Any]:
    return [c for c in conn.commands() if not isinstance(c, TaskMoved)]


def create(conn: Connection, now: float = NOW) -> list[Any]:
    """Answer the create call; the commands that follow."""
    (request,) = work(conn)
    assert isinstance(request, StartHttp) and request.call.method == "POST"
    body = json.dumps(chat_stub("c1")).encode()
    conn.http_finished(request.call, status=201, body=body, now=now)
    return work(conn)


def test_the_stream_opens_only_once_the_checkpoint_naming_the_chat_was_written() -> None:
    conn, agent, task, _step = gated()
    (store,) = create(conn)
    assert isinstance(store, ApplyStore) and store.call.runner is performer
    method, (tenant, workflow_id, checkpoint) = store.op.method, store.op.args
    assert (method, tenant, workflow_id) == ("put_checkpoint", "t", "w")
    assert checkpoint.chat_id == "c1" and checkpoint.outcome == "in_flight"
    assert agent.session.chat_id == "c1" and not task.done
    conn.tick(now=NOW + 1)
    assert work(conn) == []  # still held
    conn.store_finished(store.call, value=None, now=NOW + 2)
    assert any(isinstance(c, OpenSocket) for c in work(conn))


def test_a_failed_write_is_logged_and_the_turn_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    conn, _agent, _task, _step = gated()
    (store,) = create(conn)
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        conn.store_finished(store.call, error=OSError("disk full"), now=NOW + 1)
    assert "early checkpoint of chat c1 failed: disk full" in caplog.text
    assert any(isinstance(c, OpenSocket) for c in work(conn))


def test_a_turn_without_a_write_to_wait_for_goes_straight_on() -> None:
    """A step without a workflow to checkpoint (the gate's ``hold`` gives no write)."""
    conn, _agent, _task, _step = gated(workflow_id=None)
    commands = create(conn)
    assert not any(isinstance(c, ApplyStore) for c in commands)
    assert any(isinstance(c, OpenSocket) for c in commands)


def test_a_cancellation_waits_for_the_write_then_interrupts() -> None:
    """The write must never land after the turn ended (the step's own checkpoint follows
    the turn): the cancelled turn ends, and its interrupt goes out, once it answered."""
    conn, _agent, task, _step = gated()
    (store,) = create(conn)
    task.cancel(KeyboardInterrupt(), now=NOW + 1)
    assert not task.done and work(conn) == []
    conn.store_finished(store.call, value=None, now=NOW + 2)
    assert task.done
    interrupts = [
        c for c in work(conn) if isinstance(c, StartHttp) and c.call.url.endswith("/interrupt")
    ]
    assert len(interrupts) == 1


def test_the_turns_own_timeout_is_set_aside_while_held_then_taken() -> None:
    """No deadline falls due while the turn is held (nothing to tick); once the write
    answered past the turn's ``request_timeout``, the turn times out."""
    conn, _agent, task, _step = gated(request_timeout=5.0)
    (store,) = create(conn)
    assert conn.next_deadline() is None
    conn.store_finished(store.call, value=None, now=NOW + 10)
    assert task.done
    with pytest.raises(CoderChatError) as caught:
        task.result()
    assert caught.value.kind == "timeout"
