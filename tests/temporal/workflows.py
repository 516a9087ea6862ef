"""The workflow of the Temporal tests: an order in three durable steps (reserve stock with a
crash-safe tool, charge the card with a crash-safe tool, confirm), then the archive. Workflow
code: deterministic, the library imported through the sandbox's pass-through."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from coder_io_asyncio.temporal import DurableTurns

STEPS = (
    ("reserve", "Reserve 2 units of SKU-1."),
    ("charge", "Charge the card 500 cents."),
    ("confirm", "Confirm the order."),
)

#: The first step of ``SharedOrderWorkflow``: a turn that lasts a few seconds, so the two
#: workflows sharing a durable workflow overlap.
DRAFT = ("draft", "Draft the order note.")

#: Fast retries for the tests (a killed worker's step is retried as soon as its heartbeat
#: times out).
RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=1.5,
    maximum_interval=timedelta(seconds=1),
)


@workflow.defn(name="Order")
class OrderWorkflow:
    """Three durable steps, then the archive; returns what each step reported."""

    @workflow.run
    async def run(self, heartbeat_timeout: float) -> dict[str, Any]:
        turns = DurableTurns(
            heartbeat_timeout=timedelta(seconds=heartbeat_timeout),
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RETRY,
        )
        out = await _run_steps(turns, STEPS)
        archived = await turns.archive()
        out["archive"] = {"archived": archived.archived, "chat_id": archived.chat_id}
        return out


async def _run_steps(turns: DurableTurns, steps: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for step, prompt in steps:
        result = await turns.turn(prompt, step=step)
        out[step] = {
            "text": result.text,
            "recovered": result.recovered,
            "attempt": result.attempt,
            "chat_id": result.chat_id,
        }
    return out


@workflow.defn(name="SharedOrder")
class SharedOrderWorkflow:
    """The order's steps (after a slow draft step) on the durable workflow ``durable_id``,
    which other Temporal workflows may share; no archive (``ArchiveDurableWorkflow`` retires
    the shared workflow once they are all done)."""

    @workflow.run
    async def run(self, durable_id: str, heartbeat_timeout: float) -> dict[str, Any]:
        turns = DurableTurns(
            workflow_id=durable_id,
            heartbeat_timeout=timedelta(seconds=heartbeat_timeout),
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RETRY,
        )
        return await _run_steps(turns, (DRAFT, *STEPS))


@workflow.defn(name="ArchiveDurable")
class ArchiveDurableWorkflow:
    """The archive of the durable workflow ``durable_id``."""

    @workflow.run
    async def run(self, durable_id: str, heartbeat_timeout: float) -> dict[str, Any]:
        turns = DurableTurns(
            workflow_id=durable_id,
            heartbeat_timeout=timedelta(seconds=heartbeat_timeout),
            retry_policy=RETRY,
        )
        archived = await turns.archive()
        return {"archived": archived.archived, "chat_id": archived.chat_id}


@workflow.defn(name="SlowTurn")
class SlowTurnWorkflow:
    """One long step, for cancellation: cancelling the workflow cancels its activity."""

    @workflow.run
    async def run(self, heartbeat_timeout: float) -> str:
        turns = DurableTurns(
            heartbeat_timeout=timedelta(seconds=heartbeat_timeout), retry_policy=RETRY
        )
        result = await turns.turn("Write slowly about the weather.", step="slow")
        return result.text
