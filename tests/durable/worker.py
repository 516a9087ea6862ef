"""One workflow process of the crash-point matrix: ``python -m tests.durable.worker``.

The workflow: step ``reserve`` (a crash-safe ``reserve_stock`` tool), step ``charge`` (a
crash-safe ``charge_card`` tool), then ``archive_workflow`` and ``sweep_orphans``. Every
process runs the whole workflow from the top, as an engine without memoised step results
would: finished steps must come back from the durable layer, never be resubmitted.

Environment: ``CODER_URL``, ``CODER_SESSION_TOKEN``, ``CODER_ORGANIZATION_ID`` (the fake
server), ``DURABLE_DB`` (the store: an SQLite file, or with ``DURABLE_PG_SCHEMA`` set a
PostgreSQL connection string, for ``PostgresStore`` or, when ``DURABLE_PG_ASYNC`` is set,
``AsyncPostgresStore``), ``PAYMENTS_DB`` (the payment service),
``DURABLE_WORKFLOW`` (the workflow id), ``DURABLE_RESULT`` (where the final results are
written as JSON), ``DURABLE_REACHED`` (where a crash point is recorded just before the kill),
and ``DURABLE_CRASH``: the crash point, ``<step>/<point>``, where ``<step>`` is ``reserve``,
``charge``, ``archive`` or ``sweep`` and ``<point>`` one of

* ``effect:before`` / ``effect:after``: inside a tool, around the payment call;
* ``before:<write>`` / ``after:<write>``: around a store write, ``<write>`` being the method
  and, for records, their state (``put_ledger:committing``, ``put_journal:resumed``,
  ``put_checkpoint:finished``, ``put_checkpoint:in_flight`` ...);
* ``event:<op>``: right after a successful response of a REST operation (``create_chat``,
  ``create_chat_message``, ``submit_tool_results``, ``interrupt_chat``, ``archive_chat``...);
* ``ws:<event>``: at a stream event (``ws:open``, ``ws:event``: the first frame...).

With ``DURABLE_WORKFLOWS`` set (a comma-separated list of workflow ids), the process runs the
two steps of each of those workflows instead, as one of several competing workers (D27):
a step that meets another worker's lease records ``busy`` for its workflow and the process
goes on with the next one; ``DURABLE_LEASE_WAIT`` (seconds) makes the steps wait for the
lease instead. Nothing is archived or swept in that mode.

The process SIGKILLs itself the first time the point is reached.

Fencing (D37): with ``DURABLE_FENCED`` set (an SQLite file), ``charge_card`` charges the
Temporal example's payment service there (``examples/temporal/payments.py``: once per
idempotency key, refusing a stale fencing token), checking the step's lease first.
``DURABLE_FREEZE`` (``charge/effect:unchecked`` before that check, ``charge/effect:checked``
after it) makes the process write its pid to ``DURABLE_REACHED`` and SIGSTOP itself there,
once; a competing worker's step that then ends with another library error records it as
``failed`` instead of ending the process. ``DURABLE_LEASE_DURATION`` sets the steps' lease
(seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from typing import Any

from coder_io_asyncio import CoderChatClient
from coder_io_asyncio.durable import archive_workflow, run_turn, sweep_orphans
from coder_io_common.stores import AsyncPostgresStore, PostgresStore, SQLiteStore
from coder_proto import CoderAgentError
from coder_proto.durable import (
    DurableToolContext,
    WorkflowBusyError,
    crash_safe,
)
from examples.temporal import payments as example_payments

from . import payments
from .orders import CrashingStore

#: The crash point and the payment service of this process (read by ``main``).
_config = {"crash": "", "payments": ""}

STEPS = (
    ("reserve", "Reserve 2 units of SKU-1."),
    ("charge", "Charge the card 500 cents."),
)

_current = {"step": ""}

#: The steps' lease: far longer than any stall of a live process on a loaded machine, so no
#: live holder ever sees its lease expire. A killed process leaves its lease behind (D27);
#: the test lets it run out (``orders.expire_lease``) before the next process starts, instead
#: of waiting for it.
LEASE: dict[str, Any] = {"lease_duration": 30.0}

_frozen = {"done": False}


def freeze_here(point: str) -> None:
    """Stop this whole process (SIGSTOP) at ``DURABLE_FREEZE``, once, after writing its pid to
    ``DURABLE_REACHED``; the test wakes it with SIGCONT."""
    if _frozen["done"] or os.environ.get("DURABLE_FREEZE") != f"{_current['step']}/{point}":
        return
    _frozen["done"] = True
    with open(os.environ["DURABLE_REACHED"], "w") as f:
        f.write(str(os.getpid()))
    # Sent to this thread: it stops the whole process before this thread runs another line
    # (a signal sent to the process may be taken by another thread, letting this one run on).
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def crash_here(point: str) -> None:
    crash = _config["crash"]
    if crash and crash == f"{_current['step']}/{point}":
        with open(os.environ["DURABLE_REACHED"], "w") as f:
            f.write(crash)
        os.kill(os.getpid(), signal.SIGKILL)


def open_store() -> Any:
    """The store the environment names (see the module docstring)."""
    location, schema = os.environ["DURABLE_DB"], os.environ.get("DURABLE_PG_SCHEMA")
    if not schema:
        return SQLiteStore(location)
    if os.environ.get("DURABLE_PG_ASYNC"):
        return AsyncPostgresStore(location, schema=schema)
    return PostgresStore(location, schema=schema)


@crash_safe
def reserve_stock(sku: str, quantity: int, ctx: DurableToolContext) -> str:
    """Reserve stock for the order."""
    crash_here("effect:before")
    receipt = payments.apply(_config["payments"], "reserve", ctx.idempotency_key, quantity)
    crash_here("effect:after")
    return f"reservation {receipt}"


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    crash_here("effect:before")
    receipt = payments.apply(_config["payments"], "charge", ctx.idempotency_key, amount_cents)
    crash_here("effect:after")
    return f"charged: receipt {receipt}"


@crash_safe(name="charge_card")
def fenced_charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    freeze_here("effect:unchecked")
    ctx.check_lease()
    freeze_here("effect:checked")
    assert ctx.fencing_token is not None
    receipt = example_payments.charge(
        os.environ["DURABLE_FENCED"],
        amount_cents,
        idempotency_key=ctx.idempotency_key,
        scope=f"{ctx.tenant}/{ctx.workflow_id}",
        fencing_token=ctx.fencing_token,
    )
    return f"charged: receipt {receipt}"


def on_event(event: Any) -> None:
    if event.type == "http:response" and event.ok:
        crash_here("event:" + event.op)
    elif event.type.startswith("ws:"):
        crash_here(event.type)


async def main() -> None:
    """Run the workflow with the settings of the environment (see the module docstring)."""
    _config["crash"] = os.environ.get("DURABLE_CRASH", "")
    _config["payments"] = os.environ["PAYMENTS_DB"]
    if os.environ.get("DURABLE_LEASE_DURATION"):
        LEASE["lease_duration"] = float(os.environ["DURABLE_LEASE_DURATION"])
    workflow = os.environ["DURABLE_WORKFLOW"]
    inner = open_store()
    store = CrashingStore(inner, crash_here)
    try:
        async with CoderChatClient(on_transport_event=on_event) as client:
            if os.environ.get("DURABLE_WORKFLOWS"):
                results = await _compete(os.environ["DURABLE_WORKFLOWS"].split(","), store, client)
            else:
                results = await _workflow(workflow, store, client)
    finally:
        if isinstance(inner, AsyncPostgresStore):
            await inner.aclose()
        else:
            inner.close()
    with open(os.environ["DURABLE_RESULT"], "w") as f:
        json.dump(results, f)


def _step_options(store: Any, client: CoderChatClient) -> dict[str, Any]:
    """``run_turn``'s settings for every step this process runs."""
    return {
        "store": store,
        "tools": [
            reserve_stock,
            fenced_charge_card if os.environ.get("DURABLE_FENCED") else charge_card,
        ],
        "organization_id": os.environ["CODER_ORGANIZATION_ID"],
        "request_timeout": 30.0,
        "commit_window": 0.5,
        "poll_interval": 0.05,
        "settle_retry_delay": 0.05,
        "client": client,
        **LEASE,
    }


async def _compete(workflows: list[str], store: Any, client: CoderChatClient) -> dict[str, Any]:
    wait = os.environ.get("DURABLE_LEASE_WAIT") or None
    results: dict[str, Any] = {}
    for workflow in workflows:
        steps: dict[str, Any] = {}
        for step, prompt in STEPS:
            _current["step"] = step
            try:
                result = await run_turn(
                    workflow,
                    prompt,
                    step=step,
                    lease_wait=float(wait) if wait else None,
                    **_step_options(store, client),
                )
            except WorkflowBusyError as exc:
                steps["busy"] = {"step": step, "retryable": exc.retryable}
                break
            except CoderAgentError as exc:
                if not os.environ.get("DURABLE_FREEZE"):
                    raise
                steps["failed"] = {"step": step, "error": type(exc).__name__}
                break
            steps[step] = {
                "text": result.text,
                "recovered": result.recovered,
                "chat_id": result.chat_id,
            }
        results[workflow] = steps
    return results


async def _workflow(workflow: str, store: Any, client: CoderChatClient) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for step, prompt in STEPS:
        _current["step"] = step
        result = await run_turn(workflow, prompt, step=step, **_step_options(store, client))
        results[step] = {"text": result.text, "recovered": result.recovered}
    _current["step"] = "archive"
    archived = await archive_workflow(
        workflow, store=store, settle_retry_delay=0.05, client=client, **LEASE
    )
    results["archive"] = {"archived": archived.archived, "chat_id": archived.chat_id}
    _current["step"] = "sweep"
    swept = await sweep_orphans(store=store, settle_retry_delay=0.05, client=client)
    results["sweep"] = {
        "archived": list(swept.archived_chat_ids),
        "failed": [chat for chat, _ in swept.failed],
    }
    return results


if __name__ == "__main__":
    asyncio.run(main())
