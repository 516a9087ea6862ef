"""A Temporal worker for the example: ``python -m examples.temporal.worker``.

It runs the example's workflow and the library's activities on the task queue
``coder-orders``. Settings come from the environment:

* ``TEMPORAL_ADDRESS`` (default ``127.0.0.1:7233``);
* ``CODER_URL``, ``CODER_SESSION_TOKEN``, ``CODER_ORGANIZATION_ID``: the Coder deployment
  (or the fake server, see README.md);
* ``CODER_STORE``: a PostgreSQL connection string (``postgresql://...``) for a fleet of
  machines, else an SQLite file for workers on one machine (default
  ``example-workflows.sqlite3``);
* ``PAYMENTS_DB``: the example's stand-in payment service, an SQLite file (default
  ``example-payments.sqlite3``).

Start as many as you like, on as many machines as share the store; SIGTERM or Ctrl-C stops
one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from coder_io_asyncio import DurableToolContext, SQLiteStore, crash_safe
from coder_io_asyncio.temporal import DurableActivities, OrphanSweepWorkflow, workflow_runner

from .workflows import OrderWorkflow

TASK_QUEUE = "coder-orders"


def _charge(amount_cents: int, idempotency_key: str) -> str:
    """The stand-in payment service: one charge per idempotency key."""
    with sqlite3.connect(os.environ.get("PAYMENTS_DB", "example-payments.sqlite3")) as db:
        db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, cents INTEGER)")
        db.execute("INSERT OR IGNORE INTO charges VALUES (?, ?)", (idempotency_key, amount_cents))
        (rowid,) = db.execute(
            "SELECT rowid FROM charges WHERE key = ?", (idempotency_key,)
        ).fetchone()
    return f"receipt-{rowid}"


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    return f"charged {amount_cents} cents: {_charge(amount_cents, ctx.idempotency_key)}"


def open_store() -> Any:
    location = os.environ.get("CODER_STORE", "example-workflows.sqlite3")
    if location.startswith(("postgresql://", "postgres://")):
        from coder_io_common.stores import PostgresStore

        return PostgresStore(location)
    return SQLiteStore(location)


async def main() -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))
    store = open_store()
    try:
        async with DurableActivities(
            store=store,
            tools=[charge_card],
            organization_id=os.environ.get("CODER_ORGANIZATION_ID"),
            request_timeout=300,
            heartbeat_interval=2.0,
        ) as activities:
            worker = Worker(
                client,
                task_queue=TASK_QUEUE,
                workflows=[OrderWorkflow, OrphanSweepWorkflow],
                activities=activities.activities(),
                workflow_runner=workflow_runner(),
            )
            # SIGTERM and Ctrl-C shut the worker down: its running steps are cancelled (their
            # runs interrupted, their checkpoints written) and retried on another worker.
            stop = asyncio.Event()
            for signum in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(signum, stop.set)
            async with worker:
                print(f"worker {os.getpid()} serving {TASK_QUEUE!r}", flush=True)
                await stop.wait()
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
