"""The asyncio runtime of durable workflows against the fake server over loopback: ``run_turn``
(one turn per step, recovery before resubmitting, the checkpoint in ``finally``),
``archive_workflow``, ``sweep_orphans`` and ``bind_tools`` (seed durable-workflows)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest

from coder_io_asyncio import (
    CoderAgent,
    CoderChatClient,
    DurableToolContext,
    archive_workflow,
    bind_tools,
    crash_safe,
    run_turn,
    sweep_orphans,
)
from coder_io_asyncio.fake_server import FakeCoderServer
from coder_io_sync.durable_sqlite import SQLiteStore
from coder_proto.durable import (
    OUTCOME_ABORTED,
    DurableStoreError,
    LedgerEntry,
    MemoryStore,
    step_marker,
)
from coder_proto.errors import CoderAgentError
from coder_proto.fake import CallClientTool, Say, Script, Wait

CHARGES: dict[str, int] = {}


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    CHARGES.setdefault(ctx.idempotency_key, amount_cents)
    return f"receipt {len(CHARGES)}"


@attrs.frozen
class Verdict:
    approved: bool
    reason: str


def serve(test: Callable[[FakeCoderServer], Awaitable[None]]) -> None:
    async def main() -> None:
        async with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02) as server:
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
            server.config.scripts.add(r"Stall", Script((Say("thinking"), Wait(30.0), Say("late"))))
            server.config.scripts.add(
                r"Judge",
                Script(
                    (
                        CallClientTool(
                            name="structured_output", args={"approved": True, "reason": "fine"}
                        ),
                        Say("Filed."),
                    )
                ),
            )
            await test(server)
            assert await server.wait_idle_async(5.0)

    asyncio.run(main())


def options(server: FakeCoderServer, store: Any, **extra: Any) -> dict[str, Any]:
    return {
        "store": store,
        "base_url": server.url,
        "token": server.token,
        "organization_id": server.organization_id,
        "poll_interval": 0.05,
        "settle_retry_delay": 0.05,
        **extra,
    }


def user_prompts(server: FakeCoderServer, chat_id: str) -> list[str]:
    chat = server.model.chats[chat_id]
    return [
        "".join(p.get("text", "") for p in m.content) for m in chat.messages if m.role == "user"
    ]


def test_a_workflow_runs_step_by_step_then_archives(tmp_path: pathlib.Path) -> None:
    """Step 1 creates the chat, step 2 resumes it with a crash-safe tool, a retried step is
    answered from history, and the end of the workflow archives and forgets the chat."""
    events: list[Any] = []

    async def test(server: FakeCoderServer) -> None:
        CHARGES.clear()
        with SQLiteStore(tmp_path / "wf.sqlite3") as store:
            opts = options(server, store, tools=[charge_card], on_transport_event=events.append)
            plan = await run_turn("wf-1", "Plan the order.", step="plan", **opts)
            assert not plan.recovered and plan.result is not None
            assert plan.text.endswith("Plan the order.")
            charged = await run_turn("wf-1", "Charge the card.", step="charge", **opts)
            assert charged.text == 'Charged: "receipt 1"' and charged.chat_id == plan.chat_id
            again = await run_turn("wf-1", "Charge the card.", step="charge", **opts)
            assert again.recovered and again.text == charged.text and again.result is None
            replay = await run_turn("wf-1", "Plan the order.", step="plan", **opts)
            assert replay.recovered and replay.text == plan.text
            assert len(CHARGES) == 1
            chat = plan.chat_id or ""
            assert user_prompts(server, chat) == [
                f"{step_marker('wf-1', 'plan')} Plan the order.",
                f"{step_marker('wf-1', 'charge')} Charge the card.",
            ]
            (key,) = CHARGES
            assert key == f"default/{chat}/" + key.rsplit("/", 1)[1]
            archived = await archive_workflow(
                "wf-1",
                store=store,
                base_url=server.url,
                token=server.token,
                settle_retry_delay=0.05,
            )
            assert archived.archived and archived.chat_id == chat
            assert server.model.chats[chat].archived
            assert store.get_checkpoint("default", "wf-1") is None
            swept = await sweep_orphans(store=store, base_url=server.url, token=server.token)
            assert swept.archived_chat_ids == ()

    tokens: list[str] = []

    async def remember(server: FakeCoderServer) -> None:
        tokens.append(server.token)
        await test(server)

    serve(remember)
    assert any(e.type == "http:request" and e.op == "create_chat" for e in events)
    assert not any(tokens[0] in repr(e) for e in events)


def test_a_deadline_cut_turn_is_checkpointed_as_aborted_and_resubmitted() -> None:
    """The caller's deadline cancels the turn: the checkpoint is still written (the guide's
    ``finally``), marked so that the next attempt pins ``cut_short`` and resubmits."""

    async def test(server: FakeCoderServer) -> None:
        store = MemoryStore()
        opts = options(server, store)
        first = await run_turn("wf-2", "Say hi.", step="hello", **opts)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await run_turn("wf-2", "Stall please.", step="slow", **opts)
        cp = store.get_checkpoint("default", "wf-2")
        assert cp is not None and cp.outcome == OUTCOME_ABORTED and cp.chat_id == first.chat_id
        server.config.scripts.push(Script((Say("done now"),)))
        retry = await run_turn("wf-2", "Stall please.", step="slow", **opts)
        assert not retry.recovered and retry.text == "done now"
        prompts = user_prompts(server, first.chat_id or "")
        assert sum("/slow]" in p for p in prompts) == 2

    serve(test)


def test_structured_output_steps_recover_the_answer() -> None:
    async def test(server: FakeCoderServer) -> None:
        store = MemoryStore()
        opts = options(server, store, output_type=Verdict)
        live = await run_turn("wf-3", "Judge this.", step="judge", **opts)
        assert live.output == Verdict(approved=True, reason="fine")
        again = await run_turn("wf-3", "Judge this.", step="judge", **opts)
        assert again.recovered and again.output == Verdict(approved=True, reason="fine")

    serve(test)


class AsyncStore:
    """An ``AsyncDurableStore`` over a ``MemoryStore`` (an async database stand-in)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def call(*args: Any) -> Any:
            self.calls.append(name)
            await asyncio.sleep(0)
            return method(*args)

        return call


def test_an_async_store_is_awaited() -> None:
    async def test(server: FakeCoderServer) -> None:
        CHARGES.clear()
        store = AsyncStore()
        opts = options(server, store, tools=[charge_card])
        await run_turn("wf-4", "Charge now.", step="charge", **opts)
        assert "put_ledger" in store.calls and "put_checkpoint" in store.calls
        assert len(CHARGES) == 1

    serve(test)


def test_bind_tools_makes_an_agents_tools_crash_safe() -> None:
    """An agent used directly: ``bind_tools`` gives its crash-safe tools their ledger."""

    async def test(server: FakeCoderServer) -> None:
        CHARGES.clear()
        store = MemoryStore()
        tools = bind_tools([charge_card], store=store, tenant="acme")
        async with CoderAgent(
            base_url=server.url,
            token=server.token,
            organization_id=server.organization_id,
            tools=tools,
        ) as agent:
            result = await agent.generate("Charge it.")
            assert result.text == 'Charged: "receipt 1"'
            entries = list(store.ledger.items())
            assert len(entries) == 1
            (tenant, chat, _call), entry = entries[0]
            assert tenant == "acme" and chat == agent.chat_id
            assert entry == LedgerEntry.done("receipt 1")

    serve(test)


def test_a_failing_store_fails_the_step_before_anything_is_sent() -> None:
    class Broken(MemoryStore):
        def get_checkpoint(self, *args: Any) -> Any:
            raise OSError("database is locked")

    async def test(server: FakeCoderServer) -> None:
        with pytest.raises(DurableStoreError, match="locked"):
            await run_turn("wf-5", "Say hi.", **options(server, Broken()))
        with pytest.raises(CoderAgentError, match="not a durable store: it lacks"):
            await run_turn("wf-5", "Say hi.", **options(server, object()))
        with pytest.raises(CoderAgentError, match="not a durable store"):
            bind_tools([charge_card], store=None)
        with pytest.raises(CoderAgentError, match="brackets"):
            await run_turn("wf[5]", "Say hi.", **options(server, MemoryStore()))
        assert server.model.chats == {}

    serve(test)


def test_client_and_connection_arguments_are_exclusive() -> None:
    async def test(server: FakeCoderServer) -> None:
        async with CoderChatClient(server.url, server.token) as client:
            with pytest.raises(CoderAgentError, match="either client"):
                await run_turn("wf-6", "hi", store=MemoryStore(), client=client, token="x")
            result = await run_turn(
                "wf-6",
                "Say hi.",
                store=MemoryStore(),
                client=client,
                organization_id=server.organization_id,
            )
            assert result.chat_id is not None

    serve(test)


def test_bad_agent_settings_fail_before_anything_is_journaled_or_sent() -> None:
    async def test(server: FakeCoderServer) -> None:
        store = MemoryStore()
        await run_turn("wf-7", "Say hi.", step="one", **options(server, store))
        with pytest.raises(CoderAgentError, match="max_steps"):
            await run_turn("wf-7", "Say more.", step="two", max_steps=0, **options(server, store))
        journal = store.get_journal("default", next(iter(store.checkpointed_chat_ids())))
        assert journal is None or journal.marker != step_marker("wf-7", "two")

    serve(test)
