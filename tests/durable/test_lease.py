"""The workflow lease (D27) and the early checkpoint (D28) on every runtime, against the fake
server over loopback (docs/durable-workflows.md "Run one step of a workflow at a time").

Another worker is played by the test itself, through the store's lease methods: a lease some
other owner holds is exactly what a worker running a step of the workflow leaves in the
store. The leases of the steps under test last a few seconds: long enough that a loaded
machine's stalls never let one expire (a holder's own clock counts it lost past its expiry),
short enough that their renewals come within a test. Another worker's lease that must expire
is a short one, or is renewed by the test with another clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.durable import (
    OUTCOME_FINISHED,
    OUTCOME_IN_FLIGHT,
    DurableToolContext,
    MemoryStore,
    WorkflowBusyError,
    WorkflowLeaseLostError,
    crash_safe,
)
from coder_proto.durable._scan import step_marker
from coder_proto.fake import CallClientTool, Say, Script, Wait

from .test_runtimes import options

CHARGES: dict[str, int] = {}

#: The lease of a step that renews it in the test: renewed every 1.5 s, and lost only when a
#: renewal comes 3 s late.
RENEWED_LEASE = 4.5
#: How long a "Linger" turn lasts: past the first renewal of ``RENEWED_LEASE``.
LINGER = 2.4
#: How long an "Intrude" turn lasts before its tool: past two renewals of ``RENEWED_LEASE``.
INTRUDE_AFTER = 3.8


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card."""
    CHARGES.setdefault(ctx.idempotency_key, amount_cents)
    return f"receipt {len(CHARGES)}"


class RecordingStore(MemoryStore):
    """A ``MemoryStore`` that records the name of every call, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self._calls_lock = threading.Lock()

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name not in STORE_CALLS:
            return value
        lock = super().__getattribute__("_calls_lock")
        calls = super().__getattribute__("calls")

        def call(*args: Any) -> Any:
            with lock:
                calls.append(name)
            return value(*args)

        return call


STORE_CALLS = frozenset(
    {
        "get_checkpoint",
        "put_checkpoint",
        "delete_checkpoint",
        "checkpointed_chat_ids",
        "get_ledger",
        "put_ledger",
        "get_journal",
        "put_journal",
        "add_stranded",
        "stranded_chats",
        "remove_stranded",
        "forget_chat",
        "acquire_lease",
        "renew_lease",
        "release_lease",
        "get_lease",
    }
)


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
        fake.config.scripts.add(r"Peek", Script((CallClientTool(name="peek"), Say("Seen."))))
        fake.config.scripts.add(r"Slow", Script((Say("thinking"), Wait(1.2), Say("done"))))
        fake.config.scripts.add(r"Linger", Script((Say("thinking"), Wait(LINGER), Say("done"))))
        fake.config.scripts.add(
            r"Intrude",
            Script(
                (Say("thinking"), Wait(INTRUDE_AFTER), CallClientTool(name="intrude"), Say("done"))
            ),
        )
        fake.config.scripts.add(
            r"Steal",
            Script(
                (
                    CallClientTool(name="steal"),
                    Say("Now the charge."),
                    CallClientTool(name="charge_card", args={"amount_cents": 700}),
                    Say("after"),
                )
            ),
        )
        yield fake
        assert fake.wait_idle(5.0)


def requests(server: FakeCoderServer) -> int:
    return sum(server.counters.requests.values())


def hold(store: MemoryStore, workflow: str, seconds: float, owner: str = "other-worker") -> None:
    """Another worker takes the workflow's lease for ``seconds`` from now."""
    lease = store.acquire_lease("default", workflow, owner, time.time(), seconds)
    assert lease.owner == owner


def test_a_leased_workflow_is_busy_before_anything_is_read_or_sent_d27(
    runtime: Any, server: FakeCoderServer
) -> None:
    """A step, and the archive, of a workflow another worker leases fail at once with the
    retryable ``WorkflowBusyError``: the server received nothing, the store was only asked
    for the lease. Once the holder released it, the same step runs."""
    store = RecordingStore()
    hold(store, "wf-busy", 60.0)
    store.calls.clear()
    connection = {"base_url": server.url, "token": server.token}

    async def scenario(rt: Any) -> Any:
        with pytest.raises(WorkflowBusyError) as busy:
            await rt.durable("run_turn", "wf-busy", "Say hi.", step="one", **options(server, store))
        error = busy.value
        assert error.retryable and not isinstance(error, WorkflowLeaseLostError)
        assert (error.tenant, error.workflow_id, error.owner) == (
            "default",
            "wf-busy",
            "other-worker",
        )
        assert error.expires_at is not None and error.expires_at > time.time()
        assert requests(server) == 0 and server.model.chats == {}
        assert store.calls == ["acquire_lease"]
        with pytest.raises(WorkflowBusyError):
            await rt.durable("archive_workflow", "wf-busy", store=store, **connection)
        assert requests(server) == 0
        assert store.calls == ["acquire_lease", "acquire_lease"]
        store.release_lease("default", "wf-busy", "other-worker")
        return await rt.durable(
            "run_turn", "wf-busy", "Say hi.", step="one", **options(server, store)
        )

    result = runtime.run(scenario)
    assert result.text.endswith("Say hi.")
    assert store.get_lease("default", "wf-busy") is None


def test_every_step_kind_holds_the_lease_and_releases_it_d27(
    runtime: Any, server: FakeCoderServer
) -> None:
    """A first step (a fresh chat), a resumed step, a replay answered from history, the
    archive and the sweep of a stranded chat: each takes the lease before its first read
    and releases it after its last write; a step's tool sees it held."""
    store = RecordingStore()
    seen: list[Any] = []

    def peek() -> str:
        """Look at the lease."""
        seen.append(store.get_lease("default", "wf-held"))
        return "ok"

    opts = options(server, store, tools=[peek])
    connection = {"base_url": server.url, "token": server.token, "settle_retry_delay": 0.05}

    def bracketed(calls: list[str]) -> None:
        assert calls[0] == "acquire_lease" and calls[-1] == "release_lease", calls
        assert "acquire_lease" not in calls[1:] and "release_lease" not in calls[:-1], calls

    async def scenario(rt: Any) -> None:
        for step, prompt in (("one", "Peek now."), ("two", "Peek again."), ("one", "Peek now.")):
            store.calls.clear()
            await rt.durable("run_turn", "wf-held", prompt, step=step, **opts)
            bracketed([c for c in store.calls if c != "get_lease"])
            assert store.get_lease("default", "wf-held") is None
        store.calls.clear()
        archived = await rt.durable("archive_workflow", "wf-held", store=store, **connection)
        assert archived.archived
        bracketed(store.calls)
        assert store.get_lease("default", "wf-held") is None
        # A stranded chat is swept under its workflow's lease, and left alone while another
        # worker holds it.
        client = await rt.client(server)
        chat = await rt.call(
            client,
            "create_chat",
            organization_id=server.organization_id,
            content="Say hi.",
        )
        await rt.close_client(client)
        store.add_stranded("default", "wf-stranded", chat.id)
        hold(store, "wf-stranded", 60.0)
        swept = await rt.durable("sweep_orphans", store=store, **connection)
        assert swept.archived_chat_ids == ()
        ((failed_chat, error),) = swept.failed
        assert failed_chat == chat.id and isinstance(error, WorkflowBusyError)
        store.release_lease("default", "wf-stranded", "other-worker")
        store.calls.clear()
        swept = await rt.durable("sweep_orphans", store=store, **connection)
        assert swept.archived_chat_ids == (chat.id,)
        calls = store.calls
        assert calls.index("acquire_lease") < calls.index("remove_stranded")
        assert calls.index("remove_stranded") < calls.index("release_lease")
        assert store.get_lease("default", "wf-stranded") is None
        assert store.stranded_chats() == ()

    runtime.run(scenario)
    assert len(seen) == 2  # the replay of step one ran no turn
    owners = {lease.owner for lease in seen}
    assert len(owners) == 2  # a fresh owner id per step
    assert all(lease is not None and lease.expires_at > time.time() - 5 for lease in seen)


def test_a_waiting_step_takes_over_an_expired_lease_d27(
    runtime: Any, server: FakeCoderServer
) -> None:
    """With ``lease_wait``, a step waits for another worker's lease: a holder that died is
    outlived by its expiry, and the step then takes the lease over and runs. A wait shorter
    than the holder's lease ends in ``WorkflowBusyError`` with nothing sent."""
    store = MemoryStore()

    async def scenario(rt: Any) -> Any:
        hold(store, "wf-wait", 60.0)
        started = time.monotonic()
        with pytest.raises(WorkflowBusyError):
            await rt.durable(
                "run_turn",
                "wf-wait",
                "Say hi.",
                step="one",
                lease_wait=0.3,
                **options(server, store),
            )
        assert time.monotonic() - started >= 0.25
        assert requests(server) == 0
        store.leases.clear()
        hold(store, "wf-wait", 0.6, owner="dead-worker")
        return await rt.durable(
            "run_turn", "wf-wait", "Say hi.", step="one", lease_wait=30.0, **options(server, store)
        )

    result = runtime.run(scenario)
    assert not result.recovered and result.text.endswith("Say hi.")
    assert store.get_lease("default", "wf-wait") is None


def test_a_waiting_step_runs_as_soon_as_the_holder_releases_d27(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The holder releases its (long) lease while the step waits: the step runs then, long
    before the lease would have expired."""
    store = MemoryStore()
    hold(store, "wf-release", 600.0)
    timer = threading.Timer(0.3, store.release_lease, ("default", "wf-release", "other-worker"))
    timer.start()
    try:

        async def scenario(rt: Any) -> Any:
            return await rt.durable(
                "run_turn",
                "wf-release",
                "Say hi.",
                step="one",
                lease_wait=60.0,
                **options(server, store, poll_interval=0.05),
            )

        result = runtime.run(scenario)
    finally:
        timer.cancel()
        timer.join()
    assert result.text.endswith("Say hi.")


def test_a_long_step_renews_its_lease_d27(runtime: Any, server: FakeCoderServer) -> None:
    """A step that outlasts its lease renews it every third of its duration, so no other
    worker can take the workflow meanwhile: an intruder whose clock is past the lease's first
    expiry (a tool of the step, near its end) is turned away."""
    store = FirstLeaseStore()
    stolen: list[Any] = []

    def intrude() -> str:
        """Try to take the workflow over."""
        first = store.first_expiry
        assert first is not None
        stolen.append(store.acquire_lease("default", "wf-long", "intruder", first + 0.1, 60.0))
        return "tried"

    async def scenario(rt: Any) -> Any:
        return await rt.durable(
            "run_turn",
            "wf-long",
            "Intrude please.",
            step="long",
            lease_duration=RENEWED_LEASE,
            **options(server, store, tools=[intrude]),
        )

    result = runtime.run(scenario)
    assert result.text.endswith("done")
    assert store.calls.count("renew_lease") >= 2, store.calls
    (seen,) = stolen
    assert seen.owner != "intruder"  # the step held it
    cp = store.get_checkpoint("default", "wf-long")
    assert cp is not None and cp.outcome == OUTCOME_FINISHED


def test_a_step_that_lost_its_lease_stops_before_its_next_side_effect_d27(
    runtime: Any, server: FakeCoderServer
) -> None:
    """Another worker takes the lease over during the step (here: while its first tool runs).
    The renewal finds it taken; the crash-safe tool that comes next does not run its effect,
    and the step ends with ``WorkflowLeaseLostError`` without writing its checkpoint (the
    early checkpoint of D28 stays as it was) and without freeing the new holder's lease."""
    store = RecordingStore()

    def steal() -> str:
        """Let another worker take the lease over."""
        renewals = store.calls.count("renew_lease")
        lease = store.acquire_lease("default", "wf-lost", "new-holder", time.time() + 3600, 60.0)
        assert lease.owner == "new-holder"
        deadline = time.monotonic() + 30
        while store.calls.count("renew_lease") == renewals:  # the step's next renewal
            assert time.monotonic() < deadline, store.calls
            time.sleep(0.02)
        return "taken"

    async def scenario(rt: Any) -> None:
        with pytest.raises(WorkflowLeaseLostError) as lost:
            await rt.durable(
                "run_turn",
                "wf-lost",
                "Steal it.",
                step="one",
                lease_duration=RENEWED_LEASE,
                **options(server, store, tools=[steal, charge_card]),
            )
        assert lost.value.retryable and isinstance(lost.value, WorkflowBusyError)
        assert lost.value.workflow_id == "wf-lost"

    runtime.run(scenario)
    assert CHARGES == {}
    assert store.ledger == {}
    cp = store.get_checkpoint("default", "wf-lost")
    assert cp is not None and cp.outcome == OUTCOME_IN_FLIGHT
    assert cp.step == step_marker("wf-lost", "one")
    lease = store.get_lease("default", "wf-lost")
    assert lease is not None and lease.owner == "new-holder"


def test_a_fresh_chat_is_checkpointed_before_its_turn_goes_on_d28(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The first step's chat is in the checkpoint, as the step's first turn in flight, while
    the turn still runs (here: when its first tool is called); the step's end then records
    it finished."""
    store = MemoryStore()
    seen: list[Any] = []

    def peek() -> str:
        """Look at the checkpoint."""
        seen.append(store.get_checkpoint("default", "wf-early"))
        return "ok"

    async def scenario(rt: Any) -> Any:
        return await rt.durable(
            "run_turn", "wf-early", "Peek now.", step="one", **options(server, store, tools=[peek])
        )

    result = runtime.run(scenario)
    (early,) = seen
    assert early is not None and early.chat_id == result.chat_id
    assert early.outcome == OUTCOME_IN_FLIGHT and early.step == step_marker("wf-early", "one")
    assert early.last_seen_message_id is None
    final = store.get_checkpoint("default", "wf-early")
    assert final is not None and final.outcome == OUTCOME_FINISHED


class FirstLeaseStore(RecordingStore):
    """A ``RecordingStore`` that keeps the expiry of the first lease it granted."""

    def __init__(self) -> None:
        super().__init__()
        self.first_expiry: float | None = None

    def acquire_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> Any:
        lease = super().acquire_lease(tenant, workflow_id, owner, now, duration)
        if self.first_expiry is None:
            self.first_expiry = lease.expires_at
        return lease


class FlakyStore(MemoryStore):
    """A ``MemoryStore`` whose renewals fail twice, whose release fails, and whose early
    checkpoint write fails: none of them may fail the step."""

    def __init__(self) -> None:
        super().__init__()
        self.renewals = 0

    def renew_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> bool:
        self.renewals += 1
        if self.renewals <= 2:
            raise OSError("database is locked")
        return super().renew_lease(tenant, workflow_id, owner, now, duration)

    def release_lease(self, tenant: str, workflow_id: str, owner: str) -> None:
        raise OSError("connection reset")

    def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Any) -> None:
        if checkpoint.outcome == OUTCOME_IN_FLIGHT:
            raise OSError("disk full")
        super().put_checkpoint(tenant, workflow_id, checkpoint)


def test_store_failures_around_the_lease_do_not_fail_the_step_d27(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Renewals that fail while the lease has not expired yet are tried again soon; a release
    that fails leaves the lease to expire; an early checkpoint that fails leaves the step's
    own checkpoint at its end. The step's result stands in each case, and each failure is
    logged."""
    store = FlakyStore()

    async def scenario(rt: Any) -> Any:
        return await rt.durable(
            "run_turn",
            "wf-flaky",
            "Linger please.",
            step="long",
            lease_duration=RENEWED_LEASE,
            **options(server, store, poll_interval=0.05),
        )

    result = runtime.run(scenario)
    assert result.text.endswith("done")
    assert store.renewals >= 3
    cp = store.get_checkpoint("default", "wf-flaky")
    assert cp is not None and cp.outcome == OUTCOME_FINISHED and cp.chat_id == result.chat_id
    lease = store.get_lease("default", "wf-flaky")
    assert lease is not None and lease.expires_at < time.time() + RENEWED_LEASE  # left to expire
    logged = caplog.text
    assert "renewing the lease" in logged and "releasing the lease" in logged
    assert "early checkpoint" in logged


def test_a_cancelled_step_releases_its_lease_d27(runtime: Any, server: FakeCoderServer) -> None:
    """The runtime's own cancellation (a cancelled task or scope, Ctrl-C) during the turn:
    the step still checkpoints and releases the lease, so the retry runs at once."""
    store = MemoryStore()
    opts = options(server, store)

    async def scenario(rt: Any) -> Any:
        step = ("durable", "run_turn", "wf-cancel", "Slow please.")
        assert await rt.cancelled_after(0.3, *step, step="slow", **opts)
        assert store.get_lease("default", "wf-cancel") is None
        return await rt.durable("run_turn", "wf-cancel", "Slow please.", step="slow", **opts)

    result = runtime.run(scenario)
    assert result.text.endswith("done")
