"""A Temporal worker for the example: ``python -m examples.temporal.worker``.

It runs the example's workflow and the library's activities on the task queue
``coder-orders``. Settings come from the environment:

* ``TEMPORAL_ADDRESS`` (default ``127.0.0.1:7233``);
* ``CODER_URL``, ``CODER_SESSION_TOKEN``, ``CODER_ORGANIZATION_ID``: the Coder deployment
  (or the fake server, see README.md);
* ``CODER_STORE``: a PostgreSQL connection string (``postgresql://...``) for a fleet of
  machines, else an SQLite file for workers on one machine (default
  ``example-workflows.sqlite3``);
* ``PAYMENTS_DB``: the example's stand-in payment service (``payments.py``), an SQLite file
  (default ``example-payments.sqlite3``). It charges once per idempotency key and refuses a
  charge whose fencing token is lower than one it has seen for the workflow (D37).

Start as many as you like, on as many machines as share the store; SIGTERM or Ctrl-C stops
one.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from coder_io_asyncio import DurableToolContext, SQLiteStore, crash_safe
from coder_io_asyncio.temporal import DurableActivities, OrphanSweepWorkflow, workflow_runner

from . import payments
from .workflows import OrderWorkflow

TASK_QUEUE = "coder-orders"


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    # The step runs under the workflow's lease: fail now if another worker took it over (or
    # this one's clock says it expired), and fence the charge with the lease's number, so
    # that a worker frozen right here cannot charge after a later holder did.
    ctx.check_lease()
    if ctx.fencing_token is None:
        raise RuntimeError("charge_card charges only inside a durable step (under its lease)")
    receipt = payments.charge(
        os.environ.get("PAYMENTS_DB", "example-payments.sqlite3"),
        amount_cents,
        idempotency_key=ctx.idempotency_key,
        scope=f"{ctx.tenant}/{ctx.workflow_id}",
        fencing_token=ctx.fencing_token,
    )
    return f"charged {amount_cents} cents: {receipt}"


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
