"""One Temporal worker process of the tests: ``python -m tests.temporal.worker``.

It serves ``OrderWorkflow`` and ``OrphanSweepWorkflow`` and the library's activities on
``TEMPORAL_TASK_QUEUE`` of the dev server at ``TEMPORAL_ADDRESS`` until SIGTERM, with the
store ``DURABLE_DB`` (an SQLite file, or with ``DURABLE_PG_SCHEMA`` a PostgreSQL connection
string for ``PostgresStore``) and the fake payment service ``PAYMENTS_DB``. The fake Coder
server is ``CODER_URL`` / ``CODER_SESSION_TOKEN`` / ``CODER_ORGANIZATION_ID``.

``DURABLE_CRASH`` names a point where the process SIGKILLs itself the first time it gets
there (after writing the point to ``DURABLE_REACHED``):

* ``event:<op>``: right after a successful response of a REST operation (``create_chat``:
  inside the first segment; ``submit_tool_results``: the results were submitted);
* ``<tool>:before`` / ``<tool>:after``: inside a crash-safe tool, around its effect;
* ``before:<write>`` / ``after:<write>``: around a store write (``put_checkpoint:finished``...).

``DURABLE_FREEZE`` names such a point where the process stops itself (SIGSTOP) instead, the
first time any worker sharing ``DURABLE_FROZEN`` gets there: it creates that file with its pid
first, and goes on where it stopped once it gets SIGCONT. ``DURABLE_LEASE_DURATION`` is the
steps' ``lease_duration`` (seconds; the library's default when empty), and
``WORKER_ACTIVITY_POLLS`` how many activity tasks the worker asks Temporal for at once (a
frozen worker's outstanding polls still take tasks, which then time out).

Once its worker runs, the process writes ``WORKER_READY``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from coder_io_asyncio.temporal import DurableActivities, OrphanSweepWorkflow, workflow_runner
from coder_io_common.stores import PostgresStore, SQLiteStore
from coder_proto.durable import DurableToolContext, crash_safe
from tests.durable import payments
from tests.durable.orders import CrashingStore

from .workflows import (
    ArchiveDurableWorkflow,
    OrderWorkflow,
    SharedOrderWorkflow,
    SlowTurnWorkflow,
)

_crash = {"point": os.environ.get("DURABLE_CRASH", "")}


def crash_here(point: str) -> None:
    if _crash["point"] and _crash["point"] == point:
        with open(os.environ["DURABLE_REACHED"], "w") as f:
            f.write(point)
        os.kill(os.getpid(), signal.SIGKILL)
    freeze_here(point)


def freeze_here(point: str) -> None:
    if not point or os.environ.get("DURABLE_FREEZE", "") != point:
        return
    try:
        fd = os.open(os.environ["DURABLE_FROZEN"], os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:  # another worker froze there first
        return
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)


@crash_safe
def reserve_stock(sku: str, quantity: int, ctx: DurableToolContext) -> str:
    """Reserve stock for the order."""
    crash_here("reserve_stock:before")
    receipt = payments.apply(
        os.environ["PAYMENTS_DB"], f"reserve:{ctx.chat_id}", ctx.idempotency_key, quantity
    )
    crash_here("reserve_stock:after")
    return f"reservation {receipt}"


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    crash_here("charge_card:before")
    receipt = payments.apply(
        os.environ["PAYMENTS_DB"], f"charge:{ctx.chat_id}", ctx.idempotency_key, amount_cents
    )
    crash_here("charge_card:after")
    return f"charged: receipt {receipt}"


def on_event(event: Any) -> None:
    if event.type == "http:response" and event.ok:
        crash_here("event:" + event.op)


def open_store() -> Any:
    location, schema = os.environ["DURABLE_DB"], os.environ.get("DURABLE_PG_SCHEMA")
    if schema:
        return PostgresStore(location, schema=schema)
    return SQLiteStore(location)


async def main() -> None:
    """Serve until SIGTERM (see the module docstring)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    store = open_store()
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    lease: dict[str, Any] = {}
    if os.environ.get("DURABLE_LEASE_DURATION"):
        lease["lease_duration"] = float(os.environ["DURABLE_LEASE_DURATION"])
    polls: dict[str, Any] = {}
    if os.environ.get("WORKER_ACTIVITY_POLLS"):
        polls["max_concurrent_activity_task_polls"] = int(os.environ["WORKER_ACTIVITY_POLLS"])
    activities = DurableActivities(
        store=CrashingStore(store, crash_here),
        tools=[reserve_stock, charge_card],
        organization_id=os.environ["CODER_ORGANIZATION_ID"],
        on_transport_event=on_event,
        heartbeat_interval=0.3,
        request_timeout=30.0,
        commit_window=0.5,
        poll_interval=0.05,
        settle_retry_delay=0.05,
        archive_options={"settle_retry_delay": 0.05},
        sweep_options={"settle_retry_delay": 0.05},
        **lease,
    )
    try:
        async with activities:
            worker = Worker(
                client,
                task_queue=os.environ["TEMPORAL_TASK_QUEUE"],
                workflows=[
                    OrderWorkflow,
                    OrphanSweepWorkflow,
                    SlowTurnWorkflow,
                    SharedOrderWorkflow,
                    ArchiveDurableWorkflow,
                ],
                activities=activities.activities(),
                workflow_runner=workflow_runner(),
                sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
                max_heartbeat_throttle_interval=timedelta(milliseconds=300),
                default_heartbeat_throttle_interval=timedelta(milliseconds=300),
                graceful_shutdown_timeout=timedelta(seconds=5),
                **polls,
            )
            async with worker:
                ready = os.environ.get("WORKER_READY")
                if ready:
                    with open(ready, "w") as f:
                        f.write(str(os.getpid()))
                await stop.wait()
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
