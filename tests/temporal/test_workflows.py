"""Durable agent workflows on a real Temporal server (docs/scale-out.md): the order
workflow of ``tests/temporal/workflows.py`` runs on worker processes
(``tests/temporal/worker.py``) against the fake Coder server, and every run ends with the
exactly-once proof of ``harness.check_exactly_once``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import tempfile
import uuid
from typing import Any

import attrs
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    WorkflowAlreadyStartedError,
)

from coder_io_asyncio.temporal import OrphanSweepWorkflow, SweepOutcome, SweepRequest
from tests.durable.orders import expire_lease
from tests.postgres_server import PostgresServer

from .harness import (
    HEARTBEAT_TIMEOUT,
    WorkerProcess,
    add_scripts,
    chats,
    check_exactly_once,
    fake_server,
    run_fleet,
    worker_env,
)
from .server import TemporalServer
from .workflows import OrderWorkflow, SlowTurnWorkflow

pytestmark = pytest.mark.timeout(300)


async def _run_orders(
    address: str, queue: str, workflow_ids: list[str], *, timeout: float = 120.0
) -> dict[str, dict[str, Any]]:
    client = await Client.connect(address)
    handles = [
        await client.start_workflow(
            OrderWorkflow.run, HEARTBEAT_TIMEOUT, id=workflow_id, task_queue=queue
        )
        for workflow_id in workflow_ids
    ]
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout)
    return dict(zip(workflow_ids, results, strict=True))


async def _sweep(address: str, queue: str) -> SweepOutcome:
    client = await Client.connect(address)
    result: SweepOutcome = await client.execute_workflow(
        OrphanSweepWorkflow.run,
        SweepRequest(),
        id=f"sweep-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
    )
    return result


def test_three_step_workflow_completes(temporal_server: TemporalServer) -> None:
    queue = f"orders-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        paths = {n: os.path.join(tmp, n) for n in ("store.sqlite3", "payments.sqlite3", "log")}
        env = worker_env(
            temporal_server.address,
            queue,
            server,
            paths["store.sqlite3"],
            paths["payments.sqlite3"],
        )
        worker = WorkerProcess(env, os.path.join(tmp, "ready"), paths["log"])
        try:
            worker.wait_ready()
            results = asyncio.run(_run_orders(temporal_server.address, queue, ["order-1"]))
            swept = asyncio.run(_sweep(temporal_server.address, queue))
        finally:
            code = worker.stop()
        assert code == 0, worker.tail()
        result = results["order-1"]
        assert [result[s]["recovered"] for s in ("reserve", "charge", "confirm")] == [False] * 3
        assert result["reserve"]["text"].startswith('Reserved: "reservation reserve')
        counts = check_exactly_once(server, paths["payments.sqlite3"], results)
        assert counts["chats"] == 1 and counts["orphans"] == 0, counts
        assert swept.archived_chat_ids == [], swept
        assert all(c["archived"] for c in chats(server))


# -- the worker killed at each interesting point ------------------------------------------------


@attrs.frozen
class Kill:
    """``point``: where the first worker SIGKILLs itself (``tests/temporal/worker.py``);
    ``recovered``: the step the second worker answers from the durable layer; ``resent``:
    the steps whose prompt may be sent twice (cut short before its tool ran)."""

    name: str
    point: str
    recovered: str | None
    resent: frozenset[str] = frozenset()
    #: Where the first worker died: a step (retried as a later attempt) or the archive.
    died_in: str = "reserve"


KILLS = (
    # Inside the first segment: the chat exists, nothing is checkpointed yet.
    Kill("first-segment", "event:create_chat", None, frozenset({"reserve"})),
    Kill("reserve-tool-before-effect", "reserve_stock:before", "reserve"),
    Kill("reserve-tool-after-effect", "reserve_stock:after", "reserve"),
    Kill("reserve-after-results", "event:submit_tool_results", "reserve"),
    Kill("reserve-after-checkpoint", "after:put_checkpoint:finished", "reserve"),
    Kill("charge-tool-before-effect", "charge_card:before", "charge", died_in="charge"),
    Kill("charge-tool-after-effect", "charge_card:after", "charge", died_in="charge"),
    # The archive is retried elsewhere as soon as its heartbeats stop, not after its timeout.
    Kill("archive-after-archived", "event:archive_chat", None, died_in="archive"),
    Kill("archive-after-forget", "after:forget_chat", None, died_in="archive"),
)


@attrs.frozen
class KillOutcome:
    kill: Kill
    first_exit: int
    reached: str
    results: dict[str, dict[str, Any]]
    swept: SweepOutcome
    counts: dict[str, int]
    log: str


def _run_kill(kill: Kill, address: str) -> KillOutcome:
    queue = f"kill-{kill.name}-{uuid.uuid4().hex[:6]}"
    workflow_id = f"order-{kill.name}"
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        paths = {
            n: os.path.join(tmp, n)
            for n in ("store.sqlite3", "payments.sqlite3", "log", "reached", "ready")
        }
        env = worker_env(
            address,
            queue,
            server,
            paths["store.sqlite3"],
            paths["payments.sqlite3"],
            DURABLE_REACHED=paths["reached"],
        )

        async def scenario() -> tuple[int, dict[str, Any], SweepOutcome]:
            client = await Client.connect(address)
            first = WorkerProcess(
                {**env, "DURABLE_CRASH": kill.point}, paths["ready"], paths["log"]
            )
            try:
                await asyncio.to_thread(first.wait_ready)
                handle = await client.start_workflow(
                    OrderWorkflow.run, HEARTBEAT_TIMEOUT, id=workflow_id, task_queue=queue
                )
                first_exit = await asyncio.to_thread(first.proc.wait, 120)
            finally:
                first.kill()
            # The killed worker's lease runs out before the second worker starts (waiting for
            # it is the frozen-worker test's part): the retry goes on without it.
            await asyncio.to_thread(expire_lease, paths["store.sqlite3"], None, workflow_id)
            second = WorkerProcess(env, paths["ready"], paths["log"])
            try:
                await asyncio.to_thread(second.wait_ready)
                result = await asyncio.wait_for(handle.result(), 120)
                swept = await _sweep(address, queue)
            finally:
                assert second.stop() == 0, second.tail()
            return first_exit, result, swept

        first_exit, result, swept = asyncio.run(scenario())
        with open(paths["log"], errors="replace") as f:
            log = f.read()[-8000:]
        reached = ""
        if os.path.exists(paths["reached"]):
            with open(paths["reached"]) as f:
                reached = f.read()
        server.wait_idle(5.0)
        results = {workflow_id: result}
        context = f"{kill.name}\n{log}"
        try:
            counts = check_exactly_once(
                server, paths["payments.sqlite3"], results, resent=kill.resent
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{context}") from exc
        return KillOutcome(kill, first_exit, reached, results, swept, counts, log)


@pytest.fixture(scope="module")
def kill_outcomes(temporal_server: TemporalServer) -> dict[str, KillOutcome | BaseException]:
    def run(kill: Kill) -> KillOutcome | BaseException:
        try:
            return _run_kill(kill, temporal_server.address)
        except BaseException as exc:  # reported by the test of that point
            return exc

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return {k.name: o for k, o in zip(KILLS, pool.map(run, KILLS), strict=True)}


@pytest.mark.parametrize("kill", KILLS, ids=lambda k: k.name)
def test_worker_killed(kill: Kill, kill_outcomes: dict[str, KillOutcome | BaseException]) -> None:
    outcome = kill_outcomes[kill.name]
    if isinstance(outcome, BaseException):
        raise outcome
    context = f"{kill.name}\n{outcome.log}"
    assert outcome.first_exit == -signal.SIGKILL, context
    assert outcome.reached == kill.point, context
    result = outcome.results[f"order-{kill.name}"]
    for step in ("reserve", "charge", "confirm"):
        assert result[step]["recovered"] == (step == kill.recovered), (step, result, context)
    # The step the worker died in ran again on the second worker (a later Temporal attempt);
    # the steps before it were not run again.
    steps = ("reserve", "charge", "confirm")
    for step in steps:
        if step == kill.died_in:
            assert result[step]["attempt"] >= 2, (step, result, context)
        elif kill.died_in == "archive" or steps.index(step) < steps.index(kill.died_in):
            assert result[step]["attempt"] == 1, (step, result, context)
    # Nothing is left: the sweep retired the orphan of a chat that was never checkpointed.
    assert outcome.counts["orphans"] == len(outcome.swept.archived_chat_ids), (outcome, context)


# -- workers racing ---------------------------------------------------------------------------

RACERS = 4
RACE_WORKFLOWS = 12


def test_workers_race_the_same_workflows(temporal_server: TemporalServer) -> None:
    """Four worker processes serve one task queue; each workflow is started by four starters
    at once. Temporal admits one run per workflow id, and whichever worker picks up a step,
    each workflow ends with one chat and its effects once."""
    queue = f"race-{uuid.uuid4().hex[:8]}"
    address = temporal_server.address
    workflow_ids = [f"race-{n}" for n in range(RACE_WORKFLOWS)]
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        store, payments_db = os.path.join(tmp, "store.sqlite3"), os.path.join(tmp, "pay.sqlite3")
        env = worker_env(address, queue, server, store, payments_db)
        workers = [
            WorkerProcess(env, os.path.join(tmp, f"ready-{n}"), os.path.join(tmp, f"log-{n}"))
            for n in range(RACERS)
        ]

        async def race() -> tuple[dict[str, Any], int, int]:
            client = await Client.connect(address)

            async def start(workflow_id: str) -> bool:
                try:
                    await client.start_workflow(
                        OrderWorkflow.run, HEARTBEAT_TIMEOUT, id=workflow_id, task_queue=queue
                    )
                except WorkflowAlreadyStartedError:
                    return False
                return True

            starts = await asyncio.gather(*(start(w) for w in workflow_ids for _ in range(RACERS)))
            results = await asyncio.wait_for(
                asyncio.gather(*(client.get_workflow_handle(w).result() for w in workflow_ids)),
                180,
            )
            return dict(zip(workflow_ids, results, strict=True)), sum(starts), len(starts)

        try:
            for worker in workers:
                worker.wait_ready()
            results, started, attempts = asyncio.run(race())
        finally:
            codes = [w.stop() for w in workers]
        assert codes == [0] * RACERS, [w.tail() for w in workers]
        assert (started, attempts) == (RACE_WORKFLOWS, RACE_WORKFLOWS * RACERS)
        server.wait_idle(5.0)
        counts = check_exactly_once(server, payments_db, results)
        assert counts["chats"] == RACE_WORKFLOWS and counts["resends"] == 0, counts
        for result in results.values():
            assert not any(result[s]["recovered"] for s in ("reserve", "charge", "confirm"))


# -- cancellation -----------------------------------------------------------------------------


def test_cancelling_the_workflow_interrupts_the_run(temporal_server: TemporalServer) -> None:
    """The running step heartbeats its progress; cancelling the workflow cancels the
    activity, which interrupts the server's run."""
    queue = f"cancel-{uuid.uuid4().hex[:8]}"
    address = temporal_server.address
    with tempfile.TemporaryDirectory() as tmp, fake_server(chunk_delay=0.01) as server:
        add_scripts(server)
        store, payments_db = os.path.join(tmp, "store.sqlite3"), os.path.join(tmp, "pay.sqlite3")
        env = worker_env(address, queue, server, store, payments_db)
        worker = WorkerProcess(env, os.path.join(tmp, "ready"), os.path.join(tmp, "log"))

        async def cancel() -> tuple[dict[str, Any], BaseException]:
            client = await Client.connect(address)
            handle = await client.start_workflow(
                SlowTurnWorkflow.run, 5.0, id=f"slow-{uuid.uuid4().hex[:6]}", task_queue=queue
            )
            details: dict[str, Any] = {}
            for _ in range(300):
                description = await handle.describe()
                pending = description.raw_description.pending_activities
                if pending and pending[0].heartbeat_details.payloads:
                    (details,) = await client.data_converter.decode(
                        pending[0].heartbeat_details.payloads, [dict]
                    )
                    if details.get("phase") == "turn" and details.get("events", 0) > 5:
                        break
                await asyncio.sleep(0.1)
            await handle.cancel()
            try:
                await asyncio.wait_for(handle.result(), 60)
            except WorkflowFailureError as exc:
                return details, exc
            raise AssertionError("the cancelled workflow completed")

        try:
            worker.wait_ready()
            details, error = asyncio.run(cancel())
        finally:
            assert worker.stop() == 0, worker.tail()
        assert details["step"] == "slow" and details["attempt"] == 1, details
        assert details["segments"] >= 1, details
        assert isinstance(error.cause, CancelledError), error
        assert server.counters.requests["interrupt_chat"] >= 1
        (chat,) = chats(server)
        assert chat["status"] != "running", chat


# -- a fleet on PostgreSQL ----------------------------------------------------------------------

FLEET_WORKERS = 3
FLEET_WORKFLOWS = 50
FLEET_KILLS = 5


def test_fleet_with_random_kills(
    temporal_server: TemporalServer, postgres_server: PostgresServer, pg_schema: str
) -> None:
    """Three worker processes share a PostgreSQL store and run fifty three-step workflows
    while a supervisor SIGKILLs a random worker every one to three seconds (and starts a new
    one): every workflow completes, every effect exactly once, every chat archived."""
    queue = f"fleet-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        payments_db = os.path.join(tmp, "pay.sqlite3")
        env = worker_env(
            temporal_server.address,
            queue,
            server,
            postgres_server.conninfo(),
            payments_db,
            DURABLE_PG_SCHEMA=pg_schema,
        )
        run = run_fleet(
            temporal_server.address,
            env,
            tmp,
            workers=FLEET_WORKERS,
            workflows=FLEET_WORKFLOWS,
            kills=FLEET_KILLS,
            seed=int(os.environ.get("CODER_FLEET_SEED", "16")),
        )
        server.wait_idle(5.0)
        # A step may be sent again once per kill that cut an attempt short before its tool ran.
        counts = check_exactly_once(
            server,
            payments_db,
            run.results,
            resent=frozenset({"reserve", "charge", "confirm"}),
            max_sends=1 + run.kills,
        )
        assert run.kills >= 1, run
        assert counts["orphans"] == len(run.swept), (counts, run.swept)
        per_minute = FLEET_WORKFLOWS / (run.elapsed / 60) / FLEET_WORKERS
        print(
            f"\nfleet: {FLEET_WORKFLOWS} workflows, {FLEET_WORKERS} workers, {run.kills} kills,"
            f" {run.elapsed:.1f} s, {per_minute:.1f} workflows/min/worker, {counts}"
        )


# -- errors and Temporal's retry rules ------------------------------------------------------------


def test_errors_follow_temporal_retry_rules(temporal_server: TemporalServer) -> None:
    """A passing failure (503) is retried by Temporal and the workflow completes; a permanent
    one (403) fails the step, the archive or the sweep at once, typed by the library error."""
    queue = f"errors-{uuid.uuid4().hex[:8]}"
    address = temporal_server.address
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        store, payments_db = os.path.join(tmp, "store.sqlite3"), os.path.join(tmp, "pay.sqlite3")
        env = worker_env(address, queue, server, store, payments_db)
        worker = WorkerProcess(env, os.path.join(tmp, "ready"), os.path.join(tmp, "log"))

        async def failure(run: Any) -> ApplicationError:
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(run, 60)
            activity_error = failed.value.cause
            assert isinstance(activity_error, ActivityError), activity_error
            assert isinstance(activity_error.cause, ApplicationError), activity_error.cause
            return activity_error.cause

        async def scenarios() -> tuple[dict[str, Any], list[ApplicationError]]:
            client = await Client.connect(address)

            def order(name: str) -> Any:
                return client.execute_workflow(
                    OrderWorkflow.run, HEARTBEAT_TIMEOUT, id=f"{name}-{queue}", task_queue=queue
                )

            server.faults.fail_requests("create_chat", 503)
            passed = await asyncio.wait_for(order("passing"), 60)
            errors = []
            server.faults.fail_requests("create_chat", 403, times=None)
            errors.append(await failure(order("refused")))
            server.faults.clear()
            server.faults.fail_requests("archive_chat", 403, times=None)
            errors.append(await failure(order("unarchivable")))
            server.faults.clear()
            server.faults.fail_requests("*", 403, times=None)
            errors.append(
                await failure(
                    client.execute_workflow(
                        OrphanSweepWorkflow.run,
                        SweepRequest(),
                        id=f"sweep-{queue}",
                        task_queue=queue,
                    )
                )
            )
            server.faults.clear()
            return passed, errors

        try:
            worker.wait_ready()
            passed, errors = asyncio.run(scenarios())
        finally:
            assert worker.stop() == 0, worker.tail()
        assert passed["reserve"]["attempt"] == 2, passed
        assert passed["charge"]["attempt"] == 1, passed
        for error in errors:
            assert error.type == "CoderApiError", error
            assert error.non_retryable, error
            assert error.details[0]["status"] == 403, error.details
            assert server.token not in str(error)
