"""Durable workflows on the blocking adapter against the fake server over loopback:
``run_turn`` (one turn per step, recovery before resubmitting, the checkpoint in ``finally``),
``archive_workflow``, ``sweep_orphans`` and ``bind_tools`` (seed durable-workflows), with no
event loop anywhere."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from coder_io_asyncio.fake_server import FakeCoderServer
from coder_io_sync import (
    CoderAgent,
    CoderChatClient,
    DurableToolContext,
    archive_workflow,
    bind_tools,
    crash_safe,
    run_turn,
    sweep_orphans,
)
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


@crash_safe
async def async_charge(amount_cents: int, ctx: DurableToolContext) -> str:
    """An async crash-safe tool (refused by the blocking adapter)."""
    return "never"


@attrs.frozen
class Verdict:
    approved: bool
    reason: str


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02) as fake:
        fake.config.scripts.add(
            r"Charge",
            Script(
                (
                    Say("Charging."),
                    CallClientTool(name="charge_card", args={"amount_cents": 500}),
                    Say("Charged: {tool_result}"),
                )
            ),
        )
        fake.config.scripts.add(r"Stall", Script((Say("thinking"), Wait(30.0), Say("late"))))
        fake.config.scripts.add(
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
        yield fake
        assert fake.wait_idle(5.0)


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


def test_a_workflow_runs_step_by_step_then_archives(
    server: FakeCoderServer, tmp_path: pathlib.Path
) -> None:
    """Step 1 creates the chat, step 2 resumes it with a crash-safe tool, a retried step is
    answered from history, and the end of the workflow archives and forgets the chat."""
    events: list[Any] = []
    CHARGES.clear()
    with SQLiteStore(tmp_path / "wf.sqlite3") as store:
        opts = options(server, store, tools=[charge_card], on_transport_event=events.append)
        plan = run_turn("wf-1", "Plan the order.", step="plan", **opts)
        assert not plan.recovered and plan.result is not None
        assert plan.text.endswith("Plan the order.")
        charged = run_turn("wf-1", "Charge the card.", step="charge", **opts)
        assert charged.text == 'Charged: "receipt 1"' and charged.chat_id == plan.chat_id
        again = run_turn("wf-1", "Charge the card.", step="charge", **opts)
        assert again.recovered and again.text == charged.text and again.result is None
        replay = run_turn("wf-1", "Plan the order.", step="plan", **opts)
        assert replay.recovered and replay.text == plan.text
        assert len(CHARGES) == 1
        chat = plan.chat_id or ""
        assert user_prompts(server, chat) == [
            f"{step_marker('wf-1', 'plan')} Plan the order.",
            f"{step_marker('wf-1', 'charge')} Charge the card.",
        ]
        (key,) = CHARGES
        assert key == f"default/{chat}/" + key.rsplit("/", 1)[1]
        archived = archive_workflow(
            "wf-1", store=store, base_url=server.url, token=server.token, settle_retry_delay=0.05
        )
        assert archived.archived and archived.chat_id == chat
        assert server.model.chats[chat].archived
        assert store.get_checkpoint("default", "wf-1") is None
        swept = sweep_orphans(store=store, base_url=server.url, token=server.token)
        assert swept.archived_chat_ids == ()
    assert any(e.type == "http:request" and e.op == "create_chat" for e in events)
    assert not any(server.token in repr(e) for e in events)


def test_a_timeout_cut_turn_is_checkpointed_as_aborted_and_resubmitted(
    server: FakeCoderServer,
) -> None:
    """D22: ``timeout=`` is the caller's deadline; the cut turn is still checkpointed (the
    guide's ``finally``) as aborted, so the next attempt pins ``cut_short`` and resubmits."""
    store = MemoryStore()
    opts = options(server, store)
    first = run_turn("wf-2", "Say hi.", step="hello", **opts)
    with pytest.raises(TimeoutError):
        run_turn("wf-2", "Stall please.", step="slow", timeout=0.5, **opts)
    cp = store.get_checkpoint("default", "wf-2")
    assert cp is not None and cp.outcome == OUTCOME_ABORTED and cp.chat_id == first.chat_id
    assert server.counters.requests["interrupt_chat"] >= 1
    server.config.scripts.push(Script((Say("done now"),)))
    retry = run_turn("wf-2", "Stall please.", step="slow", **opts)
    assert not retry.recovered and retry.text == "done now"
    prompts = user_prompts(server, first.chat_id or "")
    assert sum("/slow]" in p for p in prompts) == 2


def test_structured_output_steps_recover_the_answer(server: FakeCoderServer) -> None:
    store = MemoryStore()
    opts = options(server, store, output_type=Verdict)
    live = run_turn("wf-3", "Judge this.", step="judge", **opts)
    assert live.output == Verdict(approved=True, reason="fine")
    again = run_turn("wf-3", "Judge this.", step="judge", **opts)
    assert again.recovered and again.output == Verdict(approved=True, reason="fine")


class AsyncStore:
    """An ``AsyncDurableStore`` (coroutine methods): the blocking adapter cannot await it."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def call(*args: Any) -> Any:
            return method(*args)

        return call


def test_an_async_store_is_refused_before_anything_is_sent(server: FakeCoderServer) -> None:
    with pytest.raises(DurableStoreError, match="coroutine function"):
        run_turn("wf-4", "Charge now.", step="charge", **options(server, AsyncStore()))
    assert server.model.chats == {}


def test_bind_tools_makes_an_agents_tools_crash_safe(server: FakeCoderServer) -> None:
    """An agent used directly: ``bind_tools`` gives its crash-safe tools their ledger."""
    CHARGES.clear()
    store = MemoryStore()
    tools = bind_tools([charge_card], store=store, tenant="acme")
    with CoderAgent(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        tools=tools,
    ) as agent:
        result = agent.generate("Charge it.")
        assert result.text == 'Charged: "receipt 1"'
        entries = list(store.ledger.items())
        assert len(entries) == 1
        (tenant, chat, _call), entry = entries[0]
        assert tenant == "acme" and chat == agent.chat_id
        assert entry == LedgerEntry.done("receipt 1")


def test_an_async_crash_safe_tool_gets_an_error_result_d5(server: FakeCoderServer) -> None:
    server.config.scripts.add(
        r"Async",
        Script(
            (CallClientTool(name="async_charge", args={"amount_cents": 1}), Say("{tool_result}"))
        ),
    )
    tools = bind_tools([async_charge], store=MemoryStore())
    with CoderAgent(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        tools=tools,
    ) as agent:
        result = agent.generate("Pay asynchronously.")
    (outcome,) = result.steps[0].tool_results
    assert outcome.is_error and "coroutine function" in outcome.result


def test_a_failing_store_fails_the_step_before_anything_is_sent(server: FakeCoderServer) -> None:
    class Broken(MemoryStore):
        def get_checkpoint(self, *args: Any) -> Any:
            raise OSError("database is locked")

    with pytest.raises(DurableStoreError, match="locked"):
        run_turn("wf-5", "Say hi.", **options(server, Broken()))
    with pytest.raises(CoderAgentError, match="not a durable store: it lacks"):
        run_turn("wf-5", "Say hi.", **options(server, object()))
    with pytest.raises(CoderAgentError, match="not a durable store"):
        bind_tools([charge_card], store=None)
    with pytest.raises(CoderAgentError, match="brackets"):
        run_turn("wf[5]", "Say hi.", **options(server, MemoryStore()))
    with pytest.raises(CoderAgentError, match="timeout"):
        run_turn("wf-5", "Say hi.", timeout=-1, **options(server, MemoryStore()))
    assert server.model.chats == {}


def test_client_and_connection_arguments_are_exclusive(server: FakeCoderServer) -> None:
    with CoderChatClient(server.url, server.token) as client:
        with pytest.raises(CoderAgentError, match="either client"):
            run_turn("wf-6", "hi", store=MemoryStore(), client=client, token="x")
        result = run_turn(
            "wf-6",
            "Say hi.",
            store=MemoryStore(),
            client=client,
            organization_id=server.organization_id,
        )
        assert result.chat_id is not None


def test_bad_agent_settings_fail_before_anything_is_journaled_or_sent(
    server: FakeCoderServer,
) -> None:
    store = MemoryStore()
    run_turn("wf-7", "Say hi.", step="one", **options(server, store))
    with pytest.raises(CoderAgentError, match="max_steps"):
        run_turn("wf-7", "Say more.", step="two", max_steps=0, **options(server, store))
    journal = store.get_journal("default", next(iter(store.checkpointed_chat_ids())))
    assert journal is None or journal.marker != step_marker("wf-7", "two")


def test_sweep_orphans_interrupts_and_archives_what_no_checkpoint_names() -> None:
    """The sweep's store lookups, interrupts and 409-retried archives (D10), with the retry
    sleeps on the calling thread."""
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.3) as server:
        server.config.scripts.add(r"Stall", Script((Say("thinking"), Wait(30.0))))
        store = MemoryStore()
        with CoderChatClient(server.url, server.token) as client:
            kept = run_turn(
                "wf-8",
                "Say hi.",
                client=client,
                store=store,
                organization_id=server.organization_id,
            )
            busy = client.create_chat(organization_id=server.organization_id, content="Stall")
            idle = client.create_chat(organization_id=server.organization_id, content="hi")
            swept = sweep_orphans(
                store=store, client=client, settle_retry_delay=0.05, interrupt_timeout=5.0
            )
            assert set(swept.archived_chat_ids) == {busy.id, idle.id}
            assert kept.chat_id not in swept.archived_chat_ids
            assert (
                client.get_chat(busy.id).archived
                and not client.get_chat(kept.chat_id or "").archived
            )
        statuses = [r.status for r in server.counters.request_log if r.op == "update_chat"]
        assert server.counters.requests["interrupt_chat"] >= 1 and statuses[-1] < 300
        assert server.wait_idle(5.0)


class Crash(BaseException):
    """The process dies here (a BaseException: nothing catches it on the way out)."""


class CrashingStore(MemoryStore):
    """Dies right after the first write-ahead journal entry is stored."""

    armed = True

    def put_journal(self, *args: Any) -> Any:
        result = super().put_journal(*args)
        if self.armed:
            self.armed = False
            raise Crash
        return result


def test_a_step_that_died_after_its_write_ahead_is_recovered_and_sent_once(
    server: FakeCoderServer,
) -> None:
    store = CrashingStore()
    # A send journaled but never seen may still land within the commit window: keep it short.
    opts = options(server, store, commit_window=0.5)
    first = run_turn("wf-9", "Say hi.", step="one", **opts)
    with pytest.raises(Crash):
        run_turn("wf-9", "Say more.", step="two", **opts)
    # A new attempt (another process would do the same): recovery settles the chat, sees
    # that the journaled send never landed, and sends it once.
    again = run_turn("wf-9", "Say more.", step="two", **opts)
    assert not again.recovered and again.chat_id == first.chat_id
    prompts = user_prompts(server, first.chat_id or "")
    assert sum("/two]" in p for p in prompts) == 1
