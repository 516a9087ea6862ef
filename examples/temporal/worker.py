"""A Temporal worker for the example: ``python -m examples.temporal.worker``.

It runs the example's workflow and the library's activities on the task queue
``coder-orders``. Settings come from the environment:

* ``TEMPORAL_ADDRESS`` (default ``127.0.0.1:7233``);
* ``CODER_URL``, ``CODER_SESSION_TOKEN``, ``CODER_ORGANIZATION_ID``: the Coder deployment
  (or the fake server, see README.md);
* ``CODER_STORE``: a PostgreSQL connection string (``postgresql://...``) for a fleet of
  machines, else an SQLite file for workers on one machine (default
  ``workflows.sqlite3`` in ``EXAMPLE_DIR``);
* ``PAYMENTS_DB``: the example's stand-in payment service (``payments.py``), an SQLite file
  (default ``payments.sqlite3`` in ``EXAMPLE_DIR``). It charges once per idempotency key and
  refuses a charge whose fencing token is lower than one it has seen for the workflow (D37).

``EXAMPLE_DIR`` is ``coder-agents-temporal-example`` in the system's temporary directory, so
that the workers of one machine share their files and the example writes nothing where it is
started. Start as many as you like, on as many machines as share the store; SIGTERM or Ctrl-C
stops one.

A step that finds another worker running a step of its workflow fails with
``WorkflowBusyError`` and Temporal retries it after its backoff; that is how competing
attempts wait for each other, so the worker logs it as one line saying so, not as a failure
with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from coder_io_asyncio import DurableToolContext, SQLiteStore, crash_safe
from coder_io_asyncio.temporal import DurableActivities, OrphanSweepWorkflow, workflow_runner

from . import payments
from .workflows import OrderWorkflow

TASK_QUEUE = "coder-orders"
EXAMPLE_DIR = Path(tempfile.gettempdir()) / "coder-agents-temporal-example"


def example_file(variable: str, name: str) -> str:
    """The file the environment variable names, else ``name`` in ``EXAMPLE_DIR``."""
    if variable in os.environ:
        return os.environ[variable]
    EXAMPLE_DIR.mkdir(exist_ok=True)
    return str(EXAMPLE_DIR / name)


class BusyStepsAreExpected(logging.Filter):
    """Temporal logs every failed activity attempt as a warning with its traceback. An attempt
    that met ``WorkflowBusyError`` did nothing and is retried after the backoff: its record
    becomes one line that says so, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ApplicationError) and error.type == "WorkflowBusyError":
            record.msg = "%s; Temporal retries the step after its backoff (expected)"
            record.args = (error.message,)
            record.exc_info = record.exc_text = None
        return True


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
        example_file("PAYMENTS_DB", "payments.sqlite3"),
        amount_cents,
        idempotency_key=ctx.idempotency_key,
        scope=f"{ctx.tenant}/{ctx.workflow_id}",
        fencing_token=ctx.fencing_token,
    )
    return f"charged {amount_cents} cents: {receipt}"


def open_store() -> Any:
    location = example_file("CODER_STORE", "workflows.sqlite3")
    if location.startswith(("postgresql://", "postgres://")):
        from coder_io_common.stores import PostgresStore

        return PostgresStore(location)
    return SQLiteStore(location)


async def main() -> None:
    logging.getLogger("temporalio.activity").addFilter(BusyStepsAreExpected())
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
