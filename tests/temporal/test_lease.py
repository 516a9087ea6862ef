"""The workflow lease on a real Temporal server (D27; docs/durable-workflows.md "Run one step
of a workflow at a time"): two Temporal workflows sharing one durable workflow, and a worker
frozen past its heartbeat timeout while Temporal retries its step elsewhere. Each run ends
with the exactly-once proof of ``harness.check_exactly_once``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from .harness import (
    HEARTBEAT_TIMEOUT,
    WorkerProcess,
    add_scripts,
    chats,
    check_exactly_once,
    fake_server,
    worker_env,
)
from .server import TemporalServer
from .workflows import ArchiveDurableWorkflow, OrderWorkflow, SharedOrderWorkflow

pytestmark = pytest.mark.timeout(300)

BUSY = "WorkflowBusyError"
ORDER_STEPS = ("reserve", "charge", "confirm")


async def _attempts(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """The steps of a finished workflow as its history records them, in order: the attempt
    that finished each one, the failure of the attempt before it (its error type), and the
    worker that ran it."""
    out: list[dict[str, Any]] = []
    scheduled: dict[int, int] = {}
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.event_id] = len(scheduled)
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            failure = started.last_failure
            kind = None
            if failure.HasField("timeout_failure_info"):
                kind = "timeout"
            elif failure.HasField("application_failure_info"):
                kind = failure.application_failure_info.type
            out.append(
                {
                    "index": scheduled[started.scheduled_event_id],
                    "attempt": started.attempt,
                    "last_failure": kind,
                    "worker": started.identity,
                }
            )
    return sorted(out, key=lambda a: a["index"])


def _workers(env: dict[str, str], tmp: str, count: int) -> list[WorkerProcess]:
    return [
        WorkerProcess(env, os.path.join(tmp, f"ready-{n}"), os.path.join(tmp, f"log-{n}"))
        for n in range(count)
    ]


# -- two Temporal workflows, one durable workflow --------------------------------------------


def test_two_workflows_share_one_durable_workflow(temporal_server: TemporalServer) -> None:
    """Two Temporal workflows run the same steps of one durable workflow at the same time on
    two worker processes. Each step runs once, on one chat: whichever workflow's attempt
    holds the lease runs it, the other's attempt meets ``WorkflowBusyError``, is retried by
    Temporal and answers the step from the durable layer."""
    queue = f"shared-{uuid.uuid4().hex[:8]}"
    durable_id = f"shared-order-{uuid.uuid4().hex[:6]}"
    address = temporal_server.address
    names = [f"{durable_id}-a", f"{durable_id}-b"]
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        store, payments_db = os.path.join(tmp, "store.sqlite3"), os.path.join(tmp, "pay.sqlite3")
        env = worker_env(address, queue, server, store, payments_db)
        workers = _workers(env, tmp, 2)

        async def run() -> tuple[list[dict[str, Any]], dict[str, Any], list[list[Any]]]:
            client = await Client.connect(address)
            handles = await asyncio.gather(
                *(
                    client.start_workflow(
                        SharedOrderWorkflow.run,
                        args=[durable_id, HEARTBEAT_TIMEOUT],
                        id=name,
                        task_queue=queue,
                    )
                    for name in names
                )
            )
            results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 180)
            archived = await client.execute_workflow(
                ArchiveDurableWorkflow.run,
                args=[durable_id, HEARTBEAT_TIMEOUT],
                id=f"{durable_id}-archive",
                task_queue=queue,
            )
            return list(results), archived, [await _attempts(h) for h in handles]

        try:
            for worker in workers:
                worker.wait_ready()
            results, archived, histories = asyncio.run(run())
        finally:
            codes = [w.stop() for w in workers]
        context = "\n".join(w.tail() for w in workers)
        assert codes == [0, 0], context
        server.wait_idle(5.0)
        steps = ("draft", *ORDER_STEPS)
        first = results[0]
        # One chat for the durable workflow: both workflows report it for every step, with
        # the same answers.
        chat_id = first["draft"]["chat_id"]
        for result in results:
            for step in steps:
                assert result[step]["chat_id"] == chat_id, (step, results)
                assert result[step]["text"] == first[step]["text"], (step, results)
        # Each step ran once: one workflow ran it, the other recovered it.
        for step in steps:
            recovered = sorted(r[step]["recovered"] for r in results)
            assert recovered == [False, True], (step, results, histories)
        # The workflows overlapped: the loser of the first step met the lease, and Temporal
        # retried it until the winner's step was done.
        loser = next(n for n, r in enumerate(results) if r["draft"]["recovered"])
        draft = histories[loser][0]
        assert draft["attempt"] >= 2 and draft["last_failure"] == BUSY, histories
        assert results[loser]["draft"]["attempt"] == draft["attempt"], (results, histories)
        busy = sum(1 for h in histories for a in h if a["last_failure"] == BUSY)
        assert busy >= 1, histories
        # Every step's prompt was sent once, every effect applied once, the chat archived.
        (chat,) = chats(server)
        assert sum(p.startswith(f"[{durable_id}/draft]") for p in chat["prompts"]) == 1, chat
        counts = check_exactly_once(
            server, payments_db, {durable_id: {**first, "archive": archived}}
        )
        assert counts["chats"] == 1 and counts["orphans"] == 0, counts
        assert counts["resends"] == 0 and counts["effects"] == 2, counts
        assert archived["archived"] is True and archived["chat_id"] == chat_id, archived
        workers_used = {a["worker"] for h in histories for a in h}
        print(
            f"\nshared durable workflow: {busy} steps retried after {BUSY},"
            f" run by {len(workers_used)} workers, {counts}"
        )


# -- a worker frozen past its heartbeat timeout ----------------------------------------------

FROZEN_HEARTBEAT_TIMEOUT = 2.0
#: The steps' lease, by when the frozen worker goes on. ``after-takeover``: long enough that
#: Temporal's retry surely meets the frozen attempt's lease, short enough that it expires soon
#: after. The frozen worker's outstanding activity poll takes one more attempt, which times
#: out too, before the other worker gets one: two heartbeat timeouts and a retry (about 6 s),
#: and the lease's last renewal may be a third of it before the freeze, so it lasts at least
#: 13 s past the freeze. ``while-leased``: far longer than the freeze, however slow the
#: machine (the frozen attempt releases it when it ends).
FROZEN_LEASE = {"after-takeover": 20.0, "while-leased": 120.0}


@pytest.mark.parametrize("resume", ["while-leased", "after-takeover"])
def test_frozen_worker_outlived_by_its_lease(temporal_server: TemporalServer, resume: str) -> None:
    """A worker stops (SIGSTOP) right after the charge's effect, before it submits the tool
    result. Temporal retries the step on the other worker once its heartbeats stop; the retry
    meets ``WorkflowBusyError`` while the frozen attempt's lease lasts. The frozen worker goes
    on (SIGCONT) after that, either while its lease still stands (its attempt runs to its end,
    then the retry answers the step from the durable layer) or once the lease expired and the
    retry took it over and finished the workflow (the frozen attempt stops). Either way the
    charge is applied once, on the workflow's one chat, and no finished turn is sent again."""
    queue = f"frozen-{uuid.uuid4().hex[:8]}"
    workflow_id = f"frozen-order-{uuid.uuid4().hex[:6]}"
    address = temporal_server.address
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        store, payments_db = os.path.join(tmp, "store.sqlite3"), os.path.join(tmp, "pay.sqlite3")
        frozen_file = os.path.join(tmp, "frozen")
        env = worker_env(
            address,
            queue,
            server,
            store,
            payments_db,
            DURABLE_FREEZE="charge_card:after",
            DURABLE_FROZEN=frozen_file,
            DURABLE_LEASE_DURATION=str(FROZEN_LEASE[resume]),
            WORKER_ACTIVITY_POLLS="1",
        )
        workers = _workers(env, tmp, 2)
        frozen_pid: list[int] = []

        async def frozen() -> int:
            deadline = time.monotonic() + 120
            while True:
                if os.path.exists(frozen_file):
                    with open(frozen_file) as f:
                        text = f.read()
                    if text:
                        return int(text)
                assert time.monotonic() < deadline, "no worker reached the charge's effect"
                await asyncio.sleep(0.05)

        async def busy_retry(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
            deadline = time.monotonic() + 120
            seen: list[Any] = []
            while True:
                description = await handle.describe()
                for pending in description.raw_description.pending_activities:
                    failure = pending.last_failure
                    snap = (pending.attempt, pending.state, str(failure)[:300])
                    if snap not in seen:
                        seen.append(snap)
                    if pending.attempt >= 2 and failure.application_failure_info.type == BUSY:
                        return {"attempt": pending.attempt, "message": failure.message}
                if description.status != WorkflowExecutionStatus.RUNNING:
                    raise AssertionError(
                        f"the workflow ended ({description.status}) while a worker was"
                        f" frozen: {await _attempts(handle)} {seen}"
                    )
                assert time.monotonic() < deadline, str(
                    list(description.raw_description.pending_activities)
                )[-3000:]
                await asyncio.sleep(0.1)

        async def scenario() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
            client = await Client.connect(address)
            handle = await client.start_workflow(
                OrderWorkflow.run, FROZEN_HEARTBEAT_TIMEOUT, id=workflow_id, task_queue=queue
            )
            frozen_pid.append(await frozen())
            # Temporal retried the step on the other worker, which met the frozen lease.
            busy = await busy_retry(handle)
            if resume == "after-takeover":
                result = await asyncio.wait_for(handle.result(), 120)
                os.kill(frozen_pid[0], signal.SIGCONT)
                (frozen_worker,) = [w for w in workers if w.proc.pid == frozen_pid[0]]
                deadline = time.monotonic() + 60
                while "WorkflowLeaseLostError" not in frozen_worker.tail():
                    assert time.monotonic() < deadline, frozen_worker.tail()
                    await asyncio.sleep(0.1)
            else:
                os.kill(frozen_pid[0], signal.SIGCONT)
                result = await asyncio.wait_for(handle.result(), 120)
            return result, busy, await _attempts(handle)

        try:
            for worker in workers:
                worker.wait_ready()
            result, busy, attempts = asyncio.run(scenario())
        finally:
            for pid in frozen_pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            codes = [w.stop() for w in workers]
        context = "\n".join(w.tail() for w in workers)
        assert codes == [0, 0], context
        assert frozen_pid[0] in {w.proc.pid for w in workers}, frozen_pid
        server.wait_idle(5.0)
        # The charge was retried (a later attempt finished it), after the lease turned it away.
        assert busy["attempt"] >= 2, busy
        assert result["charge"]["attempt"] >= busy["attempt"], (result, busy)
        charge = attempts[1]
        assert charge["attempt"] == result["charge"]["attempt"] >= 2, attempts
        # The steps before it were not run again.
        assert result["reserve"]["recovered"] is False, result
        # One chat, every prompt sent once, every effect applied once, everything archived.
        try:
            counts = check_exactly_once(server, payments_db, {workflow_id: result})
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{attempts}\n{context}") from exc
        assert counts["chats"] == 1 and counts["orphans"] == 0, counts
        assert counts["resends"] == 0, counts
        # The frozen attempt, cancelled by Temporal as timed out once it went on, was not cut
        # short: nothing interrupted the server's run (the retry would have sent the charge's
        # prompt again, and the model would have charged again under a new key).
        assert server.counters.requests["interrupt_chat"] == 0, server.counters.requests
        print(f"\nfrozen worker: retry met {BUSY} ({busy}), steps {attempts}, {counts}")
