"""Durable workflows on every runtime against the fake server over loopback (the same test
bodies on asyncio, trio and blocking; docs/durable-workflows.md; D5, D22, D26): ``run_turn`` (one
turn per step, recovery before resubmitting, the checkpoint in ``finally``), crash-safe tools
re-driven by recovery after a crash, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools``.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_common.stores import SQLiteStore
from coder_proto import CoderAgentError, CoderChatError
from coder_proto.durable import (
    CUT_SHORT,
    OUTCOME_ABORTED,
    OUTCOME_FAILED,
    OUTCOME_IN_FLIGHT,
    RESUMED,
    SUBMITTING,
    DurableStoreError,
    DurableToolContext,
    JournalEntry,
    LedgerEntry,
    MemoryStore,
    crash_safe,
    idempotency_key,
)
from coder_proto.durable._scan import marked_prompt, step_marker
from coder_proto.fake import CallClientTool, Fail, Say, Script, Wait

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


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    CHARGES.clear()
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
    runtime: Any, server: FakeCoderServer, tmp_path: pathlib.Path
) -> None:
    """Step 1 creates the chat, step 2 resumes it with a crash-safe tool, a retried step is
    answered from history, and the end of the workflow archives and forgets the chat."""
    events: list[Any] = []

    async def scenario(rt: Any) -> None:
        with SQLiteStore(tmp_path / "wf.sqlite3") as store:
            opts = options(server, store, tools=[charge_card], on_transport_event=events.append)
            plan = await rt.durable("run_turn", "wf-1", "Plan the order.", step="plan", **opts)
            assert not plan.recovered and plan.result is not None
            assert plan.text.endswith("Plan the order.")
            charged = await rt.durable(
                "run_turn", "wf-1", "Charge the card.", step="charge", **opts
            )
            assert charged.text == 'Charged: "receipt 1"' and charged.chat_id == plan.chat_id
            # The crash-safe tool committed in the live loop: the attempt is journaled resumed.
            journal = store.get_journal("default", charged.chat_id or "")
            assert journal is not None and journal.state == RESUMED
            assert journal.marker == step_marker("wf-1", "charge") and journal.attempt == 1
            again = await rt.durable("run_turn", "wf-1", "Charge the card.", step="charge", **opts)
            assert again.recovered and again.text == charged.text and again.result is None
            replay = await rt.durable("run_turn", "wf-1", "Plan the order.", step="plan", **opts)
            assert replay.recovered and replay.text == plan.text
            assert len(CHARGES) == 1
            chat = plan.chat_id or ""
            assert user_prompts(server, chat) == [
                f"{step_marker('wf-1', 'plan')} Plan the order.",
                f"{step_marker('wf-1', 'charge')} Charge the card.",
            ]
            (key,) = CHARGES
            assert key == f"default/{chat}/" + key.rsplit("/", 1)[1]
            connection = {"base_url": server.url, "token": server.token}
            archived = await rt.durable(
                "archive_workflow", "wf-1", store=store, settle_retry_delay=0.05, **connection
            )
            assert archived.archived and archived.chat_id == chat
            assert server.model.chats[chat].archived
            assert store.get_checkpoint("default", "wf-1") is None
            swept = await rt.durable("sweep_orphans", store=store, **connection)
            assert swept.archived_chat_ids == ()

    runtime.run(scenario)
    assert any(e.type == "http:request" and e.op == "create_chat" for e in events)
    assert not any(server.token in repr(e) for e in events)


def test_archive_workflow_ends_by_its_settle_deadline_against_a_slow_server(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The archive is answered after 5 s: with a 2 s ``settle_deadline`` the call raises the
    builtin ``TimeoutError`` by then (plus an allowance) and keeps the checkpoint for a later
    attempt, instead of waiting for the answer (D10)."""

    async def scenario(rt: Any) -> Any:
        store = MemoryStore()
        plan = await rt.durable(
            "run_turn", "wf-1", "Plan the order.", step="plan", **options(server, store)
        )
        server.faults.delay_requests("archive_chat", 5.0, times=1)
        start = time.monotonic()
        error: BaseException | None = None
        try:
            await rt.durable(
                "archive_workflow",
                "wf-1",
                store=store,
                settle_deadline=2.0,
                settle_retry_delay=0.05,
                base_url=server.url,
                token=server.token,
            )
        except TimeoutError as exc:
            error = exc
        return plan, error, time.monotonic() - start, store.get_checkpoint("default", "wf-1")

    plan, error, elapsed, checkpoint = runtime.run(scenario)
    assert isinstance(error, TimeoutError)
    assert elapsed < 2.0 + 2.5, f"archiving took {elapsed:.1f} s"
    assert checkpoint is not None and checkpoint.chat_id == plan.chat_id


def test_a_deadline_cut_turn_is_checkpointed_as_aborted_and_resubmitted_d22(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The caller's deadline cancels the turn: the checkpoint is still written (the guide's
    ``finally``), marked so that the next attempt pins ``cut_short`` and resubmits."""
    store = MemoryStore()
    opts = options(server, store)

    async def scenario(rt: Any) -> str:
        first = await rt.durable("run_turn", "wf-2", "Say hi.", step="hello", **opts)
        error = await rt.within(
            0.5, "durable", "run_turn", "wf-2", "Stall please.", step="slow", **opts
        )
        assert isinstance(error, rt.deadline_error)
        cp = store.get_checkpoint("default", "wf-2")
        assert cp is not None and cp.outcome == OUTCOME_ABORTED and cp.chat_id == first.chat_id
        server.config.scripts.push(Script((Say("done now"),)))
        retry = await rt.durable("run_turn", "wf-2", "Stall please.", step="slow", **opts)
        assert not retry.recovered and retry.text == "done now"
        journal = store.get_journal("default", first.chat_id)
        assert journal is not None and journal.state in (SUBMITTING, CUT_SHORT)
        return str(first.chat_id)

    chat_id = runtime.run(scenario)
    assert sum("/slow]" in p for p in user_prompts(server, chat_id)) == 2


def test_the_runtimes_own_cancellation_of_a_turn_is_checkpointed_as_aborted_d22(
    runtime: Any, server: FakeCoderServer
) -> None:
    """A cancelled task or scope, or Ctrl-C, during the step's turn: the turn is interrupted,
    the checkpoint is still written (marked aborted, so the next attempt pins ``cut_short``),
    and the cancellation propagates unwrapped."""
    store = MemoryStore()
    opts = options(server, store)

    async def scenario(rt: Any) -> None:
        first = await rt.durable("run_turn", "wf-14", "Say hi.", step="hello", **opts)
        step = ("durable", "run_turn", "wf-14", "Stall please.")
        assert await rt.cancelled_after(0.5, *step, step="slow", **opts)
        cp = store.get_checkpoint("default", "wf-14")
        assert cp is not None and cp.outcome == OUTCOME_ABORTED and cp.chat_id == first.chat_id
        await rt.until(lambda: server.counters.requests["interrupt_chat"] >= 1)
        await rt.until(lambda: server.model.chats[first.chat_id or ""].status == "waiting")

    runtime.run(scenario)


def test_structured_output_steps_recover_the_answer(runtime: Any, server: FakeCoderServer) -> None:
    store = MemoryStore()
    opts = options(server, store, output_type=Verdict)

    async def scenario(rt: Any) -> None:
        live = await rt.durable("run_turn", "wf-3", "Judge this.", step="judge", **opts)
        assert live.output == Verdict(approved=True, reason="fine")
        again = await rt.durable("run_turn", "wf-3", "Judge this.", step="judge", **opts)
        assert again.recovered and again.output == Verdict(approved=True, reason="fine")

    runtime.run(scenario)


async def crash_during_the_tool(
    rt: Any, server: FakeCoderServer, store: MemoryStore, workflow: str, *, started: bool = True
) -> tuple[str, str]:
    """What a process killed during the step's tool call leaves behind: the step's send
    journaled write-ahead and sent, the chat paused on the call, no result submitted, and
    (``started``) the call's ledger entry ``committing``: its effect may or may not have
    happened. Returns the chat and the call id."""
    opts = options(server, store, tools=[charge_card])
    first = await rt.durable("run_turn", workflow, "Say hi.", step="one", **opts)
    chat_id = str(first.chat_id)
    marker = step_marker(workflow, "charge")
    store.put_journal(
        "default", chat_id, JournalEntry(state=SUBMITTING, marker=marker, attempt=0, at=time.time())
    )
    client = await rt.client(server)
    await rt.call(
        client, "create_chat_message", chat_id, content=marked_prompt(marker, "Charge the card.")
    )
    await rt.until(lambda: server.model.chats[chat_id].status == "requires_action")
    page = await rt.call(client, "get_messages", chat_id, limit=1)
    (call,) = [p for p in page.messages[0].content if p.type == "tool-call"]
    await rt.close_client(client)
    if started:
        store.put_ledger("default", chat_id, call.tool_call_id, LedgerEntry.committing())
    return chat_id, call.tool_call_id


def test_recovery_re_drives_a_tool_the_crash_left_committing_d26(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The next attempt of the step settles the paused chat by re-running the committing
    tool with its idempotency key (the effect is deduplicated by it), submits the one
    complete result set, and answers from history without resubmitting the prompt."""
    store = MemoryStore()

    async def scenario(rt: Any) -> tuple[str, str, Any]:
        chat_id, call_id = await crash_during_the_tool(rt, server, store, "wf-4")
        opts = options(server, store, tools=[charge_card], commit_window=0.5)
        result = await rt.durable("run_turn", "wf-4", "Charge the card.", step="charge", **opts)
        return chat_id, call_id, result

    chat_id, call_id, result = runtime.run(scenario)
    assert result.recovered and result.text == 'Charged: "receipt 1"'
    assert list(CHARGES) == [idempotency_key("default", chat_id, call_id)]
    assert store.get_ledger("default", chat_id, call_id) == LedgerEntry.done("receipt 1")
    journal = store.get_journal("default", chat_id)
    assert journal is not None and journal.state == RESUMED
    assert server.counters.requests["submit_tool_results"] == 1
    assert sum("/charge]" in p for p in user_prompts(server, chat_id)) == 1


def test_a_tool_that_never_started_is_cut_short_and_the_step_resubmitted_d26(
    runtime: Any, server: FakeCoderServer
) -> None:
    """Without a ledger entry the call never ran: recovery submits an error result for it,
    interrupts (D4's follow-up included), journals ``cut-short``, and the step is sent
    again (the tool then runs once)."""
    store = MemoryStore()

    async def scenario(rt: Any) -> tuple[str, Any]:
        chat_id, _ = await crash_during_the_tool(rt, server, store, "wf-5", started=False)
        opts = options(server, store, tools=[charge_card], commit_window=0.5)
        result = await rt.durable("run_turn", "wf-5", "Charge the card.", step="charge", **opts)
        return chat_id, result

    chat_id, result = runtime.run(scenario)
    assert not result.recovered and result.text == 'Charged: "receipt 1"'
    assert len(CHARGES) == 1
    assert server.counters.requests["interrupt_chat"] >= 1
    assert sum("/charge]" in p for p in user_prompts(server, chat_id)) == 2


def test_a_failed_turn_is_checkpointed_as_failed_and_its_error_raised(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The guide's ``finally``: the checkpoint is written whatever the turn's outcome, then
    the turn's error is raised (D2: the run's error event is a ``CoderChatError``)."""
    store = MemoryStore()
    opts = options(server, store)

    async def scenario(rt: Any) -> None:
        first = await rt.durable("run_turn", "wf-11", "Say hi.", step="one", **opts)
        server.config.scripts.push(Script((Say("Starting"), Fail(message="provider exploded"))))
        with pytest.raises(CoderChatError, match="provider exploded"):
            await rt.durable("run_turn", "wf-11", "Try this.", step="two", **opts)
        cp = store.get_checkpoint("default", "wf-11")
        assert cp is not None and cp.chat_id == first.chat_id
        assert (cp.step, cp.outcome) == (step_marker("wf-11", "two"), OUTCOME_FAILED)

    runtime.run(scenario)


def test_the_runtimes_cancellation_during_recovery_stops_it_and_keeps_the_store_d22(
    runtime: Any,
) -> None:
    """A retried step finds its chat busy with someone else's run: recovery interrupts it and
    waits for it to wind down (slowly here). The runtime's own cancellation (a cancelled task
    or scope, Ctrl-C) stops the wait at once, propagates unwrapped, and writes nothing."""
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=3.0) as server:
        server.config.scripts.add(r"Stall", Script((Say("thinking"), Wait(30.0))))
        store = MemoryStore()
        opts = options(server, store)

        async def scenario(rt: Any) -> None:
            first = await rt.durable("run_turn", "wf-12", "Say hi.", step="one", **opts)
            chat_id = first.chat_id or ""
            client = await rt.client(server)
            await rt.call(client, "create_chat_message", chat_id, content="Stall please.")
            await rt.until(lambda: server.model.chats[chat_id].status == "running")
            checkpoint = store.get_checkpoint("default", "wf-12")
            journal = store.get_journal("default", chat_id)
            retry = ("durable", "run_turn", "wf-12", "Say hi.")

            # Cancelled while recovery waits for the interrupted run to wind down.
            def interrupting() -> bool:
                return server.model.chats[chat_id].status == "interrupting"

            assert await rt.cancel_when(interrupting, *retry, step="one", **opts) is not None
            assert interrupting()  # still winding down
            assert store.get_checkpoint("default", "wf-12") == checkpoint
            assert store.get_journal("default", chat_id) == journal
            await rt.until(lambda: server.model.chats[chat_id].status == "waiting", timeout=6.0)
            await rt.close_client(client)

        runtime.run(scenario)
        assert server.wait_idle(5.0)


def test_a_store_failure_during_recovery_fails_the_step_and_submits_nothing(
    runtime: Any, server: FakeCoderServer
) -> None:
    store = MemoryStore()

    async def scenario(rt: Any) -> None:
        chat_id, _ = await crash_during_the_tool(rt, server, store, "wf-15")

        def broken(*args: Any) -> Any:
            raise OSError("the ledger table is gone")

        store.get_ledger = broken  # type: ignore[method-assign]
        opts = options(server, store, tools=[charge_card], commit_window=0.5)
        with pytest.raises(DurableStoreError, match="ledger table is gone"):
            await rt.durable("run_turn", "wf-15", "Charge the card.", step="charge", **opts)
        assert server.model.chats[chat_id].status == "requires_action"
        client = await rt.client(server)
        await rt.call(client, "interrupt_chat", chat_id, wait=True, last_status="requires_action")
        await rt.close_client(client)

    runtime.run(scenario)
    assert server.counters.requests["submit_tool_results"] == 0
    assert not CHARGES


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
    runtime: Any, server: FakeCoderServer
) -> None:
    store = CrashingStore()
    # A send journaled but never seen may still land within the commit window: keep it short.
    opts = options(server, store, commit_window=0.5)

    async def scenario(rt: Any) -> str:
        first = await rt.durable("run_turn", "wf-13", "Say hi.", step="one", **opts)
        with pytest.raises(Crash):
            await rt.durable("run_turn", "wf-13", "Say more.", step="two", **opts)
        # A new attempt (another process would do the same): recovery settles the chat, sees
        # that the journaled send never landed, and sends it once.
        again = await rt.durable("run_turn", "wf-13", "Say more.", step="two", **opts)
        assert not again.recovered and again.chat_id == first.chat_id
        return first.chat_id or ""

    chat_id = runtime.run(scenario)
    assert sum("/two]" in p for p in user_prompts(server, chat_id)) == 1


class AsyncStore:
    """An ``AsyncDurableStore`` over a ``MemoryStore`` (an async database stand-in)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def call(*args: Any) -> Any:
            self.calls.append(name)
            return method(*args)

        return call


def test_an_async_store_is_awaited_on_event_loops_and_refused_when_blocking(
    runtime: Any, server: FakeCoderServer
) -> None:
    store = AsyncStore()

    async def scenario(rt: Any) -> None:
        opts = options(server, store, tools=[charge_card])
        if rt.name == "sync":
            with pytest.raises(DurableStoreError, match="coroutine function"):
                await rt.durable("run_turn", "wf-6", "Charge now.", step="charge", **opts)
            assert server.model.chats == {}
            return
        await rt.durable("run_turn", "wf-6", "Charge now.", step="charge", **opts)
        assert "put_ledger" in store.calls and "put_checkpoint" in store.calls
        assert len(CHARGES) == 1

    runtime.run(scenario)


def test_the_early_checkpoint_is_written_before_the_stream_is_dialled_d28(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The fresh chat's turn waits for the checkpoint naming its chat before it dials the
    stream, whatever the store: an ``AsyncDurableStore`` on the event loops too."""
    events: list[str] = []
    dialled_before: list[bool] = []

    def early(checkpoint: Any) -> None:
        if checkpoint.outcome == OUTCOME_IN_FLIGHT:
            dialled_before.append("ws:dial" in events)

    class Watched(AsyncStore):
        def __getattr__(self, name: str) -> Any:
            call = super().__getattr__(name)
            if name != "put_checkpoint":
                return call

            async def put(tenant: str, workflow_id: str, checkpoint: Any) -> Any:
                early(checkpoint)
                return await call(tenant, workflow_id, checkpoint)

            return put

    class WatchedMemory(MemoryStore):
        def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Any) -> None:
            early(checkpoint)
            super().put_checkpoint(tenant, workflow_id, checkpoint)

    store: Any = WatchedMemory() if runtime.name == "sync" else Watched()

    async def scenario(rt: Any) -> Any:
        opts = options(server, store, on_transport_event=lambda e: events.append(e.type))
        return await rt.durable("run_turn", "wf-dial", "Say hi.", step="one", **opts)

    result = runtime.run(scenario)
    assert result.chat_id is not None
    assert dialled_before == [False] and "ws:dial" in events


def test_a_step_cancelled_during_its_early_checkpoint_keeps_its_own_checkpoint_d28(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The caller's cancellation while the early checkpoint is being written: nothing more
    happens on the new chat until the write answered, and the write lands before the step's
    own checkpoint (the aborted turn), never after it."""
    started = threading.Event()
    release = threading.Event()

    class SlowEarly(MemoryStore):
        def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Any) -> None:
            if checkpoint.outcome == OUTCOME_IN_FLIGHT:
                started.set()
                release.wait(10.0)
            super().put_checkpoint(tenant, workflow_id, checkpoint)

    def cancelling() -> bool:
        if not started.is_set():
            return False
        # The write goes on a moment after the cancellation reached the step.
        threading.Timer(0.3, release.set).start()
        return True

    store = SlowEarly()
    opts = options(server, store)

    async def scenario(rt: Any) -> Any:
        step = ("durable", "run_turn", "wf-slow-early", "Say hi.")
        assert await rt.cancel_when(cancelling, *step, step="one", **opts) is not None

    runtime.run(scenario)
    checkpoint = store.get_checkpoint("default", "wf-slow-early")
    assert checkpoint is not None and checkpoint.outcome == OUTCOME_ABORTED
    (chat,) = server.model.chats.values()
    assert checkpoint.chat_id == chat.id
    assert store.get_lease("default", "wf-slow-early") is None
    assert len([m for m in chat.messages if m.role == "user"]) == 1  # the created prompt only


def test_bind_tools_makes_an_agents_tools_crash_safe(runtime: Any, server: FakeCoderServer) -> None:
    """An agent used directly: ``bind_tools`` gives its crash-safe tools their ledger."""
    store = MemoryStore()

    async def scenario(rt: Any) -> None:
        tools = rt.adapter.bind_tools([charge_card], store=store, tenant="acme")
        agent = await rt.agent(server, tools=tools)
        result = await rt.generate(agent, "Charge it.")
        assert result.text == 'Charged: "receipt 1"'
        (((tenant, chat, _call), entry),) = store.ledger.items()
        assert tenant == "acme" and chat == agent.chat_id
        assert entry == LedgerEntry.done("receipt 1")
        await rt.close(agent)

    runtime.run(scenario)


def test_a_failing_store_or_bad_arguments_fail_before_anything_is_sent(
    runtime: Any, server: FakeCoderServer
) -> None:
    class Broken(MemoryStore):
        def get_checkpoint(self, *args: Any) -> Any:
            raise OSError("database is locked")

    async def scenario(rt: Any) -> None:
        with pytest.raises(DurableStoreError, match="locked"):
            await rt.durable("run_turn", "wf-7", "Say hi.", **options(server, Broken()))
        with pytest.raises(CoderAgentError, match="not a durable store: it lacks"):
            await rt.durable("run_turn", "wf-7", "Say hi.", **options(server, object()))
        with pytest.raises(CoderAgentError, match="not a durable store"):
            rt.adapter.bind_tools([charge_card], store=None)
        with pytest.raises(CoderAgentError, match="brackets"):
            await rt.durable("run_turn", "wf[7]", "Say hi.", **options(server, MemoryStore()))
        store = MemoryStore()
        await rt.durable("run_turn", "wf-8", "Say hi.", step="one", **options(server, store))
        with pytest.raises(CoderAgentError, match="max_steps"):
            await rt.durable(
                "run_turn", "wf-8", "Say more.", step="two", max_steps=0, **options(server, store)
            )
        journal = store.get_journal("default", next(iter(store.checkpointed_chat_ids())))
        assert journal is None or journal.marker != step_marker("wf-8", "two")

    runtime.run(scenario)
    assert len(server.model.chats) == 1


def test_client_and_connection_arguments_are_exclusive(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        with pytest.raises(CoderAgentError, match="either client"):
            await rt.durable(
                "run_turn", "wf-9", "hi", store=MemoryStore(), client=client, token="x"
            )
        result = await rt.durable(
            "run_turn",
            "wf-9",
            "Say hi.",
            store=MemoryStore(),
            client=client,
            organization_id=server.organization_id,
        )
        assert result.chat_id is not None
        await rt.close_client(client)

    runtime.run(scenario)


def test_sweep_orphans_interrupts_and_archives_what_no_checkpoint_names_d10(
    runtime: Any,
) -> None:
    """The sweep's store lookups, interrupts and 409-retried archives (D10)."""
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.3) as server:
        server.config.scripts.add(r"Stall", Script((Say("thinking"), Wait(30.0))))
        store = MemoryStore()

        async def scenario(rt: Any) -> None:
            client = await rt.client(server)
            org = server.organization_id
            kept = await rt.durable(
                "run_turn", "wf-10", "Say hi.", client=client, store=store, organization_id=org
            )
            busy = await rt.call(client, "create_chat", organization_id=org, content="Stall")
            idle = await rt.call(client, "create_chat", organization_id=org, content="hi")
            swept = await rt.durable(
                "sweep_orphans",
                store=store,
                client=client,
                settle_retry_delay=0.05,
                interrupt_timeout=5.0,
            )
            assert set(swept.archived_chat_ids) == {busy.id, idle.id}
            assert kept.chat_id not in swept.archived_chat_ids
            assert (await rt.call(client, "get_chat", busy.id)).archived
            assert not (await rt.call(client, "get_chat", kept.chat_id)).archived
            await rt.close_client(client)

        runtime.run(scenario)
        statuses = [r.status for r in server.counters.request_log if r.op == "update_chat"]
        assert server.counters.requests["interrupt_chat"] >= 1 and statuses[-1] < 300
        assert server.wait_idle(5.0)
