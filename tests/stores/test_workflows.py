"""Durable workflows on the PostgreSQL stores, on every runtime, against the fake server over
loopback: ``PostgresStore`` (plain methods) works everywhere, called in worker threads on the
event loops; ``AsyncPostgresStore`` is awaited on asyncio, and refused before anything is sent
where it cannot run (trio: psycopg's async driver needs asyncio; blocking: nothing awaits)."""

from __future__ import annotations

from typing import Any

import pytest

from coder_io_common.stores import AsyncPostgresStore, PostgresStore
from coder_proto.durable import DurableStoreError, DurableToolContext, LedgerEntry, crash_safe
from coder_proto.durable._scan import step_marker
from coder_proto.fake import CallClientTool, Say, Script
from tests.integration.conftest import MakeServer
from tests.postgres_server import PostgresServer

CHARGES: dict[str, int] = {}


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    CHARGES.setdefault(ctx.idempotency_key, amount_cents)
    return f"receipt {len(CHARGES)}"


def fake(make_server: MakeServer) -> Any:
    CHARGES.clear()
    server = make_server()
    server.config.scripts.add(
        r"Charge",
        Script(
            (
                Say("Charging."),
                CallClientTool(name="charge_card", args={"amount_cents": 500}),
                Say("Charged: {tool_result}"),
            )
        ),
    )
    return server


def options(server: Any, store: Any) -> dict[str, Any]:
    return {
        "store": store,
        "tenant": "acme",
        "base_url": server.url,
        "token": server.token,
        "organization_id": server.organization_id,
        "tools": [charge_card],
        "poll_interval": 0.05,
        "settle_retry_delay": 0.05,
    }


async def workflow(rt: Any, server: Any, store: Any, read: Any) -> str:
    """Two steps, a retried step answered from history, archive, sweep; ``read(method,
    *args)`` reads the store from the scenario."""
    opts = options(server, store)
    plan = await rt.durable("run_turn", "order-1", "Plan the order.", step="plan", **opts)
    chat = plan.chat_id or ""
    charged = await rt.durable("run_turn", "order-1", "Charge the card.", step="charge", **opts)
    assert charged.text == 'Charged: "receipt 1"' and charged.chat_id == chat
    checkpoint = await read("get_checkpoint", "acme", "order-1")
    assert checkpoint.chat_id == chat and step_marker("order-1", "charge") in checkpoint.steps
    (key,) = CHARGES
    call_id = key.rsplit("/", 1)[1]
    assert await read("get_ledger", "acme", chat, call_id) == LedgerEntry.done("receipt 1")
    again = await rt.durable("run_turn", "order-1", "Charge the card.", step="charge", **opts)
    assert again.recovered and again.text == charged.text and len(CHARGES) == 1
    connection = {"base_url": server.url, "token": server.token}
    archived = await rt.durable(
        "archive_workflow",
        "order-1",
        store=store,
        tenant="acme",
        settle_retry_delay=0.05,
        **connection,
    )
    assert archived.archived and server.model.chats[chat].archived
    assert await read("get_checkpoint", "acme", "order-1") is None
    assert await read("get_ledger", "acme", chat, call_id) is None
    swept = await rt.durable("sweep_orphans", store=store, **connection)
    assert swept.archived_chat_ids == ()
    return chat


def test_a_workflow_runs_on_the_blocking_postgres_store_on_every_runtime(
    runtime: Any, make_server: MakeServer, postgres_server: PostgresServer, pg_schema: str
) -> None:
    server = fake(make_server)
    with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:

        async def read(method: str, *args: Any) -> Any:
            return getattr(store, method)(*args)

        async def scenario(rt: Any) -> str:
            return await workflow(rt, server, store, read)

        chat = runtime.run(scenario)
        assert store.checkpointed_chat_ids() == frozenset()
    assert server.model.chats[chat].archived


def test_the_async_postgres_store_is_awaited_on_asyncio_and_refused_elsewhere(
    runtime: Any, make_server: MakeServer, postgres_server: PostgresServer, pg_schema: str
) -> None:
    server = fake(make_server)
    conninfo = postgres_server.conninfo()

    async def scenario(rt: Any) -> None:
        store = AsyncPostgresStore(conninfo, schema=pg_schema)

        async def read(method: str, *args: Any) -> Any:
            return await getattr(store, method)(*args)

        if rt.name == "asyncio":
            try:
                await workflow(rt, server, store, read)
            finally:
                await store.aclose()
            return
        match = "runs on asyncio" if rt.name == "trio" else "coroutine function"
        with pytest.raises(DurableStoreError, match=match):
            await rt.durable("run_turn", "order-1", "Plan the order.", **options(server, store))

    runtime.run(scenario)
    if runtime.name != "asyncio":
        assert server.model.chats == {}
