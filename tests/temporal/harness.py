"""What the Temporal tests share: the fake Coder server's scripts for the order workflow,
worker processes (``tests/temporal/worker.py``) and what a run left behind (chats on the fake
server, effects at the fake payment service)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import threading
import time
from typing import Any

import attrs

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import Say, Script
from tests import workers
from tests.durable import orders, payments
from tests.durable.orders import chats

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: The heartbeat timeout of the tests' steps: how soon a killed worker's step moves on. Well
#: above the longest stall of a live worker's event loop on a loaded machine: a step whose
#: heartbeats stop while its worker still runs it is retried elsewhere at the same time.
HEARTBEAT_TIMEOUT = 10.0


def add_scripts(server: FakeCoderServer) -> None:
    """The model's answers to the three steps of ``OrderWorkflow``."""
    orders.add_scripts(server)
    scripts = server.config.scripts
    scripts.add(r"Confirm the order", Script((Say("Order confirmed."),)))
    scripts.add(
        r"Draft the order note",
        Script(tuple(Say(f"Draft line {n}. ") for n in range(40)), chunk_delay=0.02),
    )
    scripts.add(
        r"Write slowly", Script(tuple(Say(f"Part {n} of a long answer. ") for n in range(400)))
    )


def fake_server(**config: Any) -> FakeCoderServer:
    """A fake Coder server with fast runs."""
    config.setdefault("chunk_delay", 0.0005)
    config.setdefault("interrupt_delay", 0.02)
    config.setdefault("run_start_delay", 0.0)
    return FakeCoderServer(**config)


class WorkerProcess(workers.WorkerProcess):
    """One ``tests.temporal.worker`` process (``tests/workers.py``): its output goes to
    ``log``, and it creates ``ready`` once it polls its task queue."""

    def __init__(self, env: dict[str, str], ready: str, log: str) -> None:
        super().__init__("tests.temporal.worker", env=env, ready=ready, log=log)


def worker_env(
    temporal: str, queue: str, server: FakeCoderServer, store: str, payments_db: str, **extra: str
) -> dict[str, str]:
    """The environment of a worker process (see ``tests/temporal/worker.py``)."""
    return {
        "TEMPORAL_ADDRESS": temporal,
        "TEMPORAL_TASK_QUEUE": queue,
        "CODER_URL": server.url,
        "CODER_SESSION_TOKEN": server.token,
        "CODER_ORGANIZATION_ID": server.organization_id,
        "DURABLE_DB": store,
        "DURABLE_PG_SCHEMA": "",
        "PAYMENTS_DB": payments_db,
        "DURABLE_CRASH": "",
        "DURABLE_REACHED": "",
        **extra,
    }


def check_exactly_once(
    server: FakeCoderServer,
    payments_db: str,
    results: dict[str, dict[str, Any]],
    *,
    resent: frozenset[str] = frozenset(),
    max_sends: int = 2,
) -> dict[str, int]:
    """The exactly-once proof for finished ``OrderWorkflow`` runs (``results``: workflow id to
    its result): each workflow's steps ran on one chat, where each step's prompt was sent once
    (or, for the steps in ``resent``, up to ``max_sends`` times: a send cut short before its
    tool ran is sent again); its reservation and charge were applied once, on that chat; every
    chat on the server is archived, orphans included, and no orphan saw an effect. Returns
    counts (chats, orphans, effects, payment calls, resends)."""
    all_chats = chats(server)
    effects = payments.effects(payments_db)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for effect in effects:
        by_kind.setdefault(effect["kind"], []).append(effect)
    owned = set()
    resends = 0
    for workflow_id, result in results.items():
        chat_id = result["reserve"]["chat_id"]
        assert chat_id is not None, (workflow_id, result)
        for step in ("reserve", "charge", "confirm"):
            assert result[step]["chat_id"] == chat_id, (workflow_id, step, result)
        (chat,) = [c for c in all_chats if c["id"] == chat_id]
        owned.add(chat_id)
        for step in ("reserve", "charge", "confirm"):
            sent = sum(1 for p in chat["prompts"] if p.startswith(f"[{workflow_id}/{step}]"))
            allowed = max_sends if step in resent else 1
            assert 1 <= sent <= allowed, (workflow_id, step, chat["prompts"])
            resends += sent - 1
        for kind in ("reserve", "charge"):
            applied = by_kind.get(f"{kind}:{chat_id}", [])
            assert len(applied) == 1, (workflow_id, kind, applied)
        receipt = by_kind[f"charge:{chat_id}"][0]["receipt"]
        assert result["charge"]["text"] == f'Charged: "charged: receipt {receipt}"', result
        assert result["confirm"]["text"] == "Order confirmed.", result
        # An archive retried after its first attempt had forgotten the workflow finds nothing
        # left to archive; the chat itself is archived either way (checked below).
        archive = result["archive"]
        assert archive["archived"] is True or archive["chat_id"] is None, result
    assert len(effects) == 2 * len(results), effects
    assert all(c["archived"] for c in all_chats), [c for c in all_chats if not c["archived"]]
    return {
        "chats": len(all_chats),
        "orphans": len(all_chats) - len(owned),
        "effects": len(effects),
        "calls": len(payments.calls(payments_db)),
        "resends": resends,
    }


@attrs.define
class FleetRun:
    """What ``run_fleet`` measured: the workflows' results, the wall time from the first start
    to the last result, the kills, and the sweep's archived orphans."""

    results: dict[str, dict[str, Any]]
    elapsed: float
    kills: int
    swept: list[str]
    workers: int
    logs: list[str]


def run_fleet(
    address: str,
    env: dict[str, str],
    tmp: str,
    *,
    workers: int = 3,
    workflows: int = 50,
    kills: int = 0,
    seed: int = 0,
    kill_every: tuple[float, float] = (1.0, 3.0),
    timeout: float = 300.0,
) -> FleetRun:
    """``workflows`` order workflows on ``workers`` worker processes (``env``: their
    environment, task queue included); with ``kills``, a supervisor SIGKILLs a random worker
    every ``kill_every`` seconds (uniform, seeded) and starts a fresh one in its place, until
    that many were killed or every workflow finished. Then one orphan sweep."""
    from temporalio.client import Client

    from coder_io_asyncio.temporal import OrphanSweepWorkflow, SweepOutcome, SweepRequest

    from .workflows import OrderWorkflow

    rng = random.Random(seed)
    queue = env["TEMPORAL_TASK_QUEUE"]
    serial = iter(range(10_000))

    def spawn() -> WorkerProcess:
        n = next(serial)
        return WorkerProcess(env, os.path.join(tmp, f"ready-{n}"), os.path.join(tmp, f"log-{n}"))

    pool = [spawn() for _ in range(workers)]
    every = list(pool)
    for worker in pool:
        worker.wait_ready()
    done = threading.Event()
    killed = 0

    def supervise() -> None:
        nonlocal killed
        while killed < kills and not done.wait(rng.uniform(*kill_every)):
            victim = rng.randrange(len(pool))
            pool[victim].kill()
            killed += 1
            pool[victim] = spawn()
            every.append(pool[victim])

    async def drive() -> tuple[dict[str, Any], float, SweepOutcome]:
        client = await Client.connect(address)
        ids = [f"fleet-{seed}-{n}" for n in range(workflows)]
        started = time.monotonic()
        handles = [
            await client.start_workflow(
                OrderWorkflow.run, HEARTBEAT_TIMEOUT, id=workflow_id, task_queue=queue
            )
            for workflow_id in ids
        ]
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(h.result() for h in handles)), timeout
            )
        finally:
            done.set()
        elapsed = time.monotonic() - started
        swept: SweepOutcome = await client.execute_workflow(
            OrphanSweepWorkflow.run, SweepRequest(), id=f"sweep-{queue}", task_queue=queue
        )
        return dict(zip(ids, results, strict=True)), elapsed, swept

    supervisor = threading.Thread(target=supervise, name="fleet-supervisor")
    supervisor.start()
    try:
        results, elapsed, swept = asyncio.run(drive())
    finally:
        done.set()
        supervisor.join()
        codes = [w.stop() for w in pool]
    logs = [w.tail() for w in every]
    assert codes == [0] * len(pool), logs
    return FleetRun(results, elapsed, killed, list(swept.archived_chat_ids), workers, logs)
