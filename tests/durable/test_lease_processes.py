"""The workflow lease (D27) and the early checkpoint (D28) across real processes.

* Kill trials: a workflow process (``tests/durable/worker.py``) is SIGKILLed inside the first
  segment of a new workflow, once its stream opened or delivered its first frame, before any
  tool ran. The early checkpoint already names the chat, so the rerun recovers on that chat
  (interrupting the crashed attempt's run, answering its pause "not executed") and finishes
  there: one chat, every effect once, nothing left unarchived.
* Races: four worker processes run the same workflows at the same time, on SQLite and on
  PostgreSQL. The lease lets one worker at a time run a step of a workflow: every workflow
  has one chat, each step's prompt was sent once, every effect happened once; the other
  workers got ``WorkflowBusyError`` (or, when they asked to wait, waited and then recovered
  the finished step from history).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_common.stores import PostgresStore, SQLiteStore
from coder_io_sync.durable import archive_workflow, sweep_orphans
from tests.postgres_server import PostgresServer
from tests.workers import Zygote

from . import payments
from .orders import add_scripts, chats
from .test_crash_matrix import (
    Outcome,
    Scenario,
    check_outcome,
    run_scenario,
)

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the workflow processes are forked"),
    pytest.mark.timeout(600),
]

#: The stores of the process tests: the ones with a synchronous driver, whose early
#: checkpoint is written before the stream is dialled.
STORES = ("sqlite", "postgres")
LANES = 4
TRIALS = 3


@pytest.fixture(scope="module")
def zygotes() -> Iterator[queue.Queue[Zygote]]:
    lanes: queue.Queue[Zygote] = queue.Queue()
    for _ in range(LANES):
        lanes.put(Zygote())
    try:
        yield lanes
    finally:
        while not lanes.empty():
            lanes.get().close()


def _postgres(request: pytest.FixtureRequest, store: str) -> PostgresServer | None:
    return request.getfixturevalue("postgres_server") if store != "sqlite" else None


# -- D28: kill -9 inside a new workflow's first segment ------------------------------------------

KILL_POINTS = ("reserve/ws:open", "reserve/ws:event")


@pytest.mark.parametrize("store", STORES)
def test_a_kill_in_the_first_segment_is_recovered_on_the_same_chat_d28(
    store: str, zygotes: queue.Queue[Zygote], request: pytest.FixtureRequest
) -> None:
    postgres = _postgres(request, store)
    scenarios = [
        Scenario(
            f"first-segment-{point.rsplit(':', 1)[1]}-{trial}",
            (point,),
            frozenset(),
            # The crashed attempt was cut short (its run interrupted, or its pause answered
            # "not executed"), so the step is sent once more, on the same chat.
            attempts=(("reserve", 2), ("charge", 1)),
        )
        for point in KILL_POINTS
        for trial in range(TRIALS)
    ]

    def run(scenario: Scenario) -> Outcome:
        zygote = zygotes.get()
        try:
            return run_scenario(scenario, zygote, store, postgres)
        finally:
            zygotes.put(zygote)

    with concurrent.futures.ThreadPoolExecutor(max_workers=LANES) as pool:
        outcomes = list(pool.map(run, scenarios))
    for outcome in outcomes:
        # Killed at the point, then finished: one chat (no orphan), each effect once, every
        # prompt as often as allowed, everything archived.
        check_outcome(outcome.scenario, outcome)
    print(f"\nD28 kill trials on {store}: {len(outcomes)} killed processes, all recovered")


# -- D27: competing workers ------------------------------------------------------------------------

WORKERS = 4
WORKFLOWS = 3


def _race(
    zygotes: queue.Queue[Zygote],
    store: str,
    postgres: PostgresServer | None,
    *,
    wait: float | None,
) -> tuple[list[int], list[dict[str, Any]], FakeCoderServer, dict[str, Any]]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02, run_start_delay=0.0) as server,
    ):
        add_scripts(server)
        tag = uuid.uuid4().hex[:8]
        workflows = [f"race-{tag}-{n}" for n in range(WORKFLOWS)]
        base = {
            "CODER_URL": server.url,
            "CODER_SESSION_TOKEN": server.token,
            "CODER_ORGANIZATION_ID": server.organization_id,
            "DURABLE_DB": os.path.join(tmp, "store.sqlite3"),
            "DURABLE_PG_SCHEMA": "",
            "DURABLE_PG_ASYNC": "",
            "PAYMENTS_DB": os.path.join(tmp, "payments.sqlite3"),
            "DURABLE_WORKFLOW": "unused",
            "DURABLE_REACHED": os.path.join(tmp, "reached"),
            "DURABLE_CRASH": "",
            "DURABLE_LEASE_WAIT": "" if wait is None else str(wait),
        }
        if postgres is not None:
            base["DURABLE_DB"] = postgres.conninfo()
            base["DURABLE_PG_SCHEMA"] = f"race_{tag}"
        envs = []
        for n in range(WORKERS):
            # Each worker takes the workflows in another order: they collide everywhere.
            order = workflows[n % WORKFLOWS :] + workflows[: n % WORKFLOWS]
            envs.append(
                {
                    **base,
                    "DURABLE_WORKFLOWS": ",".join(order),
                    "DURABLE_RESULT": os.path.join(tmp, f"result-{n}.json"),
                    "DURABLE_LOG": os.path.join(tmp, f"log-{n}"),
                }
            )
        # Start every worker before any of them gets far: one zygote each, all at once.
        lanes = [zygotes.get() for _ in range(WORKERS)]
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
                exits = list(
                    pool.map(lambda pair: pair[0].run(pair[1]), zip(lanes, envs, strict=True))
                )
        finally:
            for lane in lanes:
                zygotes.put(lane)
        logs = ""
        results = []
        for env in envs:
            with open(env["DURABLE_LOG"]) as f:
                logs += f.read()[-3000:]
            if os.path.exists(env["DURABLE_RESULT"]):
                with open(env["DURABLE_RESULT"]) as f:
                    results.append(json.load(f))
        # The end of the workflows, in the test: archive each, then sweep.
        shared: Any = (
            SQLiteStore(base["DURABLE_DB"])
            if postgres is None
            else PostgresStore(base["DURABLE_DB"], schema=base["DURABLE_PG_SCHEMA"])
        )
        connection = {"base_url": server.url, "token": server.token, "settle_retry_delay": 0.05}
        with shared:
            for workflow in workflows:
                assert archive_workflow(workflow, store=shared, **connection).archived
            swept = sweep_orphans(store=shared, **connection)
        server.wait_idle(5.0)
        summary = {
            "workflows": workflows,
            "logs": logs,
            "chats": chats(server),
            "effects": payments.effects(base["PAYMENTS_DB"]),
            "swept": swept,
        }
        if postgres is not None:
            postgres.drop_schema(base["DURABLE_PG_SCHEMA"])
        return exits, results, server, summary


def _check_race(
    exits: list[int], results: list[dict[str, Any]], summary: dict[str, Any]
) -> dict[str, int]:
    logs = summary["logs"]
    assert exits == [0] * WORKERS, logs
    assert len(results) == WORKERS, logs
    chats = summary["chats"]
    effects = summary["effects"]
    counts = {"busy": 0, "ran": 0, "recovered": 0}
    for workflow in summary["workflows"]:
        # One chat per workflow, each step's prompt sent once on it.
        mine = [c for c in chats if any(f"[{workflow}/" in p for p in c["prompts"])]
        assert len(mine) == 1, (workflow, chats, logs)
        prompts = mine[0]["prompts"]
        for step in ("reserve", "charge"):
            assert sum(f"[{workflow}/{step}]" in p for p in prompts) == 1, (prompts, logs)
        # Every effect once: one reservation and one charge, on that chat.
        kinds = sorted(e["kind"] for e in effects if f"/{mine[0]['id']}/" in e["key"])
        assert kinds == ["charge", "reserve"], (workflow, effects, logs)
        finished = 0
        for result in results:
            steps = result[workflow]
            if "busy" in steps:
                assert steps["busy"]["retryable"] is True
                counts["busy"] += 1
            for step in ("reserve", "charge"):
                if step in steps:
                    assert steps[step]["chat_id"] == mine[0]["id"], (steps, logs)
                    counts["recovered" if steps[step]["recovered"] else "ran"] += 1
            finished += "charge" in steps
        assert finished >= 1, (workflow, results, logs)
    assert len(effects) == 2 * WORKFLOWS, (effects, logs)
    # Each step ran live exactly once; every other worker that got to it recovered it.
    assert counts["ran"] == 2 * WORKFLOWS, (counts, results, logs)
    assert all(c["archived"] for c in chats), (chats, logs)
    assert summary["swept"].archived_chat_ids == (), logs
    return counts


@pytest.mark.parametrize("store", STORES)
def test_competing_workers_get_busy_errors_and_run_each_step_once_d27(
    store: str, zygotes: queue.Queue[Zygote], request: pytest.FixtureRequest
) -> None:
    exits, results, _, summary = _race(zygotes, store, _postgres(request, store), wait=None)
    counts = _check_race(exits, results, summary)
    print(
        f"\nD27 race on {store} (no waiting): {WORKERS} workers x {WORKFLOWS} workflows: {counts}"
    )


@pytest.mark.parametrize("store", STORES)
def test_competing_workers_that_wait_all_finish_every_workflow_d27(
    store: str, zygotes: queue.Queue[Zygote], request: pytest.FixtureRequest
) -> None:
    exits, results, _, summary = _race(zygotes, store, _postgres(request, store), wait=60.0)
    counts = _check_race(exits, results, summary)
    # Waiting workers never give up: every worker finished every workflow, the ones that
    # waited by recovering the finished steps from history.
    assert counts["busy"] == 0, (counts, summary["logs"])
    assert counts["ran"] + counts["recovered"] == 2 * WORKFLOWS * WORKERS, counts
    print(f"\nD27 race on {store} (waiting): {WORKERS} workers x {WORKFLOWS} workflows: {counts}")


def test_a_killed_holder_blocks_until_its_lease_expires_then_is_taken_over_d27(
    zygotes: queue.Queue[Zygote],
) -> None:
    """A worker SIGKILLed inside a step leaves its lease behind; a second worker with no wait
    is refused with WorkflowBusyError until the lease expires, then takes it over and
    finishes the workflow on the same chat."""
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "store.sqlite3")
        with SQLiteStore(db) as store:
            # The dead holder's lease: live for a minute, however slowly the worker starts.
            lease = store.acquire_lease("default", "wf-dead", "dead-worker", time.time(), 60.0)
            assert lease.owner == "dead-worker"
        with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02) as server:
            add_scripts(server)
            env = {
                "CODER_URL": server.url,
                "CODER_SESSION_TOKEN": server.token,
                "CODER_ORGANIZATION_ID": server.organization_id,
                "DURABLE_DB": db,
                "DURABLE_PG_SCHEMA": "",
                "DURABLE_PG_ASYNC": "",
                "PAYMENTS_DB": os.path.join(tmp, "payments.sqlite3"),
                "DURABLE_WORKFLOW": "unused",
                "DURABLE_REACHED": os.path.join(tmp, "reached"),
                "DURABLE_CRASH": "",
                "DURABLE_LEASE_WAIT": "",
                "DURABLE_WORKFLOWS": "wf-dead",
                "DURABLE_RESULT": os.path.join(tmp, "result.json"),
                "DURABLE_LOG": os.path.join(tmp, "log"),
            }
            zygote = zygotes.get()
            try:
                assert zygote.run(env) == 0
                with open(env["DURABLE_RESULT"]) as f:
                    busy = json.load(f)
                assert busy == {"wf-dead": {"busy": {"step": "reserve", "retryable": True}}}
                # Nothing reached the server while the dead holder's lease was live.
                assert server.model.chats == {}
                # The lease runs out: its last renewal is now a whole duration ago.
                with SQLiteStore(db) as store:
                    ago = time.time() - 61.0
                    assert store.renew_lease("default", "wf-dead", "dead-worker", ago, 60.0)
                assert zygote.run(env) == 0
            finally:
                zygotes.put(zygote)
            with open(env["DURABLE_RESULT"]) as f:
                done = json.load(f)["wf-dead"]
            assert set(done) == {"reserve", "charge"}, done
            assert len(server.model.chats) == 1
        assert sorted(e["kind"] for e in payments.effects(env["PAYMENTS_DB"])) == [
            "charge",
            "reserve",
        ]
