"""Durable agent workflows on a real Temporal server (docs/scale-out.md): the order
workflow of ``tests/temporal/workflows.py`` runs on worker processes
(``tests/temporal/worker.py``) against the fake Coder server, and every run ends with the
exactly-once proof of ``harness.check_exactly_once``."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from coder_io_asyncio.temporal import OrphanSweepWorkflow, SweepOutcome, SweepRequest

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
from .workflows import OrderWorkflow

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
        OrphanSweepWorkflow.run, SweepRequest(), id=f"sweep-{uuid.uuid4().hex[:8]}", task_queue=queue
    )
    return result


def test_three_step_workflow_completes(temporal_server: TemporalServer) -> None:
    queue = f"orders-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        paths = {n: os.path.join(tmp, n) for n in ("store.sqlite3", "payments.sqlite3", "log")}
        env = worker_env(
            temporal_server.address, queue, server, paths["store.sqlite3"], paths["payments.sqlite3"]
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
