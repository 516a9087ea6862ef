"""Start orders and wait for them: ``python -m examples.temporal.starter [N]``.

Starts ``N`` (default 3) ``ExampleOrder`` workflows on the task queue ``coder-orders``,
prints each one's step texts, then runs the orphan sweep once (``--no-sweep`` skips it).
``TEMPORAL_ADDRESS`` as for the worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

from temporalio.client import Client

from coder_io_asyncio.temporal import OrphanSweepWorkflow, SweepRequest

from .worker import TASK_QUEUE
from .workflows import OrderWorkflow


async def main(count: int, sweep: bool) -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))
    run = uuid.uuid4().hex[:6]
    handles = [
        await client.start_workflow(
            OrderWorkflow.run, f"A-{n}", id=f"order-{run}-{n}", task_queue=TASK_QUEUE
        )
        for n in range(count)
    ]
    for handle, texts in zip(
        handles, await asyncio.gather(*(h.result() for h in handles)), strict=True
    ):
        print(f"{handle.id}:")
        for text in texts:
            print(f"  {text}")
    if sweep:
        swept = await client.execute_workflow(
            OrphanSweepWorkflow.run, SweepRequest(), id=f"sweep-{run}", task_queue=TASK_QUEUE
        )
        print(f"sweep: {len(swept.archived_chat_ids)} orphan chat(s) archived")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    asyncio.run(main(int(args[0]) if args else 3, "--no-sweep" not in sys.argv))
