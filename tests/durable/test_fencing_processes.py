"""Frozen lease holders (D37) across real processes, on SQLite and on PostgreSQL.

A worker process (``tests/durable/worker.py``) with a short lease runs a workflow whose
``charge_card`` tool charges the Temporal example's payment service
(``examples/temporal/payments.py``), fenced by the step's lease. The worker stops itself
(SIGSTOP) inside that tool, after the tool wrote ``committing`` and past the check of its lease,
and stays stopped past its lease. A second worker, waiting for the lease, takes it over and
finishes the step: its recovery re-drives the ambiguous call with the same idempotency key and
its own, larger fencing token, and the charge is made. Then the first worker is woken
(SIGCONT): its tool goes on to charge with its older token, and the payment service refuses
it. Every trial: one charge, one refused stale charge. A worker frozen before the check
instead fails the check on waking and never reaches the payment service.

The trials here are few and short; ``FENCING_TRIALS`` and ``FENCING_LEASE`` (seconds) run
more, or with another lease, by hand.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from examples.temporal import payments as example_payments
from tests.postgres_server import PostgresServer
from tests.workers import Zygote

from .orders import add_scripts

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the workflow processes are forked"),
    pytest.mark.timeout(600),
]

STORES = ("sqlite", "postgres")
TRIALS = int(os.environ.get("FENCING_TRIALS", "2"))
#: The workers' lease: renewed every third of it; the frozen worker's runs out while it is
#: stopped.
LEASE = float(os.environ.get("FENCING_LEASE", "3.0"))


@pytest.fixture(scope="module")
def zygotes() -> Iterator[queue.Queue[Zygote]]:
    lanes: queue.Queue[Zygote] = queue.Queue()
    for _ in range(2):
        lanes.put(Zygote())
    try:
        yield lanes
    finally:
        while not lanes.empty():
            lanes.get().close()


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def frozen_trial(
    zygotes: queue.Queue[Zygote], postgres: PostgresServer | None, point: str
) -> dict[str, Any]:
    """One trial: the first worker frozen at ``charge/<point>``, the second one finishing the
    step, the first one woken. Returns what the payment service and the workers saw."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02, run_start_delay=0.0) as server,
    ):
        add_scripts(server)
        tag = uuid.uuid4().hex[:10]
        fenced = os.path.join(tmp, "example-payments.sqlite3")
        base = {
            "CODER_URL": server.url,
            "CODER_SESSION_TOKEN": server.token,
            "CODER_ORGANIZATION_ID": server.organization_id,
            "DURABLE_DB": os.path.join(tmp, "store.sqlite3"),
            "DURABLE_PG_SCHEMA": "",
            "DURABLE_PG_ASYNC": "",
            "PAYMENTS_DB": os.path.join(tmp, "payments.sqlite3"),
            "DURABLE_WORKFLOW": "unused",
            "DURABLE_WORKFLOWS": f"frozen-{tag}",
            "DURABLE_CRASH": "",
            "DURABLE_FENCED": fenced,
            "DURABLE_LEASE_DURATION": str(LEASE),
            "DURABLE_REACHED": os.path.join(tmp, "reached"),
        }
        if postgres is not None:
            base["DURABLE_DB"] = postgres.conninfo()
            base["DURABLE_PG_SCHEMA"] = f"fence_{tag}"
        frozen = {
            **base,
            "DURABLE_FREEZE": f"charge/{point}",
            "DURABLE_LEASE_WAIT": "",
            "DURABLE_RESULT": os.path.join(tmp, "frozen.json"),
            "DURABLE_LOG": os.path.join(tmp, "frozen.log"),
        }
        taker = {
            **base,
            "DURABLE_FREEZE": "",
            "DURABLE_LEASE_WAIT": "60",
            "DURABLE_RESULT": os.path.join(tmp, "taker.json"),
            "DURABLE_LOG": os.path.join(tmp, "taker.log"),
        }
        first, second = zygotes.get(), zygotes.get()
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                running = pool.submit(first.run, frozen)
                deadline = time.monotonic() + 120
                while not os.path.exists(base["DURABLE_REACHED"]) or not _read(
                    base["DURABLE_REACHED"]
                ):
                    assert not running.done(), _read(frozen["DURABLE_LOG"])
                    assert time.monotonic() < deadline, "the worker never reached the tool"
                    time.sleep(0.02)
                pid = int(_read(base["DURABLE_REACHED"]))
                try:
                    taker_exit = second.run(taker)
                finally:
                    os.kill(pid, signal.SIGCONT)
                frozen_exit = running.result(timeout=300)
        finally:
            zygotes.put(first)
            zygotes.put(second)
        logs = _read(frozen["DURABLE_LOG"])[-4000:] + _read(taker["DURABLE_LOG"])[-4000:]
        assert (frozen_exit, taker_exit) == (0, 0), logs
        with open(frozen["DURABLE_RESULT"]) as f:
            frozen_result = json.load(f)[base["DURABLE_WORKFLOWS"]]
        with open(taker["DURABLE_RESULT"]) as f:
            taker_result = json.load(f)[base["DURABLE_WORKFLOWS"]]
        server.wait_idle(5.0)
        if postgres is not None:
            postgres.drop_schema(base["DURABLE_PG_SCHEMA"])
        return {
            "payments": example_payments.counts(fenced),
            "frozen": frozen_result,
            "taker": taker_result,
            "logs": logs,
        }


def _postgres(request: pytest.FixtureRequest, store: str) -> PostgresServer | None:
    return request.getfixturevalue("postgres_server") if store != "sqlite" else None


@pytest.mark.parametrize("store", STORES)
def test_a_worker_frozen_past_its_lease_has_its_stale_charge_refused_d37(
    store: str, zygotes: queue.Queue[Zygote], request: pytest.FixtureRequest
) -> None:
    postgres = _postgres(request, store)
    counts = {"trials": 0, "charges": 0, "refused": 0}
    for _ in range(TRIALS):
        seen = frozen_trial(zygotes, postgres, "effect:checked")
        logs = seen["logs"]
        # The second worker finished both steps; the charge was made once, with its token.
        assert set(seen["taker"]) == {"reserve", "charge"}, (seen, logs)
        # The woken worker's charge was refused, and its step did not finish.
        assert seen["payments"] == {"charges": 1, "refused": 1}, (seen, logs)
        assert "charge" not in seen["frozen"], (seen, logs)
        counts["trials"] += 1
        counts["charges"] += seen["payments"]["charges"]
        counts["refused"] += seen["payments"]["refused"]
    print(f"\nD37 frozen workers on {store} (lease {LEASE:g} s): {counts}")


@pytest.mark.parametrize("store", STORES)
def test_a_worker_frozen_before_its_check_fails_the_check_on_waking_d37(
    store: str, zygotes: queue.Queue[Zygote], request: pytest.FixtureRequest
) -> None:
    seen = frozen_trial(zygotes, _postgres(request, store), "effect:unchecked")
    logs = seen["logs"]
    assert set(seen["taker"]) == {"reserve", "charge"}, (seen, logs)
    # The check refused before the payment service was called: nothing to refuse there.
    assert seen["payments"] == {"charges": 1, "refused": 0}, (seen, logs)
    assert "charge" not in seen["frozen"], (seen, logs)
    assert "WorkflowLeaseLostError" in logs, logs
