"""Workflow code of the example: an order in three durable steps, then the archive.

Workflow code is deterministic: every call to the Coder server happens in an activity on a
worker (``DurableTurns.turn`` runs one). The library is imported through the sandbox's
pass-through; the worker gives Temporal ``workflow_runner()``.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from coder_io_asyncio.temporal import DurableTurns


@workflow.defn(name="ExampleOrder")
class OrderWorkflow:
    """Check the order, charge the card (a crash-safe client tool), confirm; then archive."""

    @workflow.run
    async def run(self, order: str) -> list[str]:
        turns = DurableTurns(heartbeat_timeout=timedelta(seconds=10))
        texts = []
        try:
            for step, prompt in (
                ("check", f"Check order {order}."),
                ("charge", f"Charge the card for order {order}."),
                ("confirm", f"Confirm the order {order}."),
            ):
                texts.append((await turns.turn(prompt, step=step)).text)
        finally:
            # The workflow's chats end with the workflow, also when it fails.
            await turns.archive()
        return texts
