"""The pure side of the workflow lease (D27) and of the early checkpoint (D28): what
``WorkflowLease`` decides at each clock value, the lease of the orphan sweep, a drive's
guard on a durable job (a ``Connection`` driven by hand), and the step program's handling of
the early checkpoint. No sockets, no clock: the
tests feed the wall clock in."""

from __future__ import annotations

import pickle
from collections.abc import Generator
from typing import Any

import pytest

from coder_proto import (
    ApplyStore,
    CancelHttp,
    CoderAgentError,
    CoderStreamError,
    Connection,
    StartHttp,
    TaskMoved,
)
from coder_proto.durable import (
    OUTCOME_IN_FLIGHT,
    Checkpoint,
    DurableStoreError,
    DurableWork,
    MemoryStore,
    WorkflowBusyError,
    WorkflowLeaseLostError,
)
from coder_proto.durable._archiving import ArchiveWorkflow, OrphanSweep
from coder_proto.durable._effects import Invoke, Sleep, WallClock
from coder_proto.durable._lease import WorkflowLease, check_lease_wait, is_side_effect
from coder_proto.durable._scan import step_marker
from coder_proto.durable._step import RunAgentTurn, StepPlan, TurnReport, step_program
from coder_proto.durable._store import StoreOp
from coder_proto.durable._tools import DurableBinding

from .harness import World

T, WF = "acme", "wf-lease"


class Clock:
    """A wall clock the test advances; performs a lease program's effects on a store."""

    def __init__(self, store: MemoryStore, wall: float = 1_000.0) -> None:
        self.store = store
        self.wall = wall
        self.sleeps: list[float] = []

    def run(self, program: Generator[Any, Any, Any]) -> Any:
        value: Any = None
        while True:
            try:
                effect = program.send(value)
            except StopIteration as stop:
                return stop.value
            if isinstance(effect, WallClock):
                value = self.wall
            elif isinstance(effect, Sleep):
                self.sleeps.append(effect.seconds)
                self.wall += effect.seconds
                value = None
            else:
                assert isinstance(effect, StoreOp)
                value = effect.apply(self.store)


def lease(owner: str = "me", **kwargs: Any) -> WorkflowLease:
    return WorkflowLease(tenant=T, workflow_id=WF, owner=owner, **kwargs)


def test_a_free_or_own_lease_is_taken_and_a_live_foreign_one_is_busy_at_once() -> None:
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=30.0)
    taken = clock.run(mine.acquire())
    assert taken.owner == "me" and taken.expires_at == 1_030.0
    assert mine.held and mine.expires_at == 1_030.0 and mine.interval == 10.0
    # Taking it again as the same owner extends it.
    clock.wall += 5
    assert clock.run(mine.acquire()).expires_at == 1_035.0
    other = lease("other")
    with pytest.raises(WorkflowBusyError) as busy:
        clock.run(other.acquire())
    assert busy.value.owner == "me" and busy.value.expires_at == 1_035.0
    assert busy.value.retryable and clock.sleeps == [] and not other.held
    assert "'me' holds its lease" in str(busy.value)


def test_a_waiting_acquire_polls_and_takes_over_at_the_expiry() -> None:
    store = MemoryStore()
    clock = Clock(store)
    clock.run(lease("dead", duration=2.5).acquire())
    waiting = lease("me", wait=10.0, poll=1.0)
    taken = clock.run(waiting.acquire())
    assert taken.owner == "me"
    # Polls at most a second apart, the last one right at the dead holder's expiry.
    assert clock.sleeps == [1.0, 1.0, 0.5] and clock.wall == 1_002.5


def test_a_wait_shorter_than_the_holders_lease_ends_busy() -> None:
    store = MemoryStore()
    clock = Clock(store)
    clock.run(lease("holder", duration=60.0).acquire())
    with pytest.raises(WorkflowBusyError):
        clock.run(lease("me", wait=2.5, poll=1.0).acquire())
    assert clock.sleeps == [1.0, 1.0, 0.5]


def test_renewals_extend_the_lease_and_a_refused_one_loses_it() -> None:
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0)
    clock.run(mine.acquire())
    assert mine.renew_delay(1_000.0) == 1.0 and mine.renew_delay(1_002.0) == 0.0
    op = mine.renew_op(1_001.0)
    mine.renewed(op.apply(store), 1_001.0)
    assert mine.expires_at == 1_004.0 and mine.renew_delay(1_001.5) == 0.5
    # Nothing refuses a read, the clock or a sleep; everything else is allowed while held.
    for effect in (op, StoreOp("put_checkpoint", ()), Invoke((), {}), object()):
        mine.guard(effect)
    mine.check()
    # Another worker takes the lease over once it expired.
    store.acquire_lease(T, WF, "thief", 1_010.0, 60.0)
    mine.renewed(mine.renew_op(1_010.0).apply(store), 1_010.0)
    assert mine.lost and not mine.held
    for effect in (StoreOp("get_checkpoint", ()), WallClock(), Sleep(1.0)):
        mine.guard(effect)
    for effect in (StoreOp("put_checkpoint", ()), Invoke((), {}), object()):
        with pytest.raises(WorkflowLeaseLostError):
            mine.guard(effect)
    with pytest.raises(WorkflowLeaseLostError) as lost:
        mine.check()
    assert lost.value.retryable and lost.value.what == "step"
    # Releasing leaves the thief's lease alone.
    mine.release_op().apply(store)
    mine.released()
    held = store.get_lease(T, WF)
    assert held is not None and held.owner == "thief"


def test_a_failing_store_loses_the_lease_only_after_its_expiry() -> None:
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0, poll=0.25)
    clock.run(mine.acquire())
    mine.renew_failed(OSError("database is locked"), 1_001.0)
    assert not mine.lost
    # The next try comes soon, not a whole interval later.
    assert mine.renew_delay(1_001.0) == pytest.approx(0.25)
    mine.renew_failed(OSError("database is locked"), 1_003.0)
    assert mine.lost


def test_a_holder_that_stalled_past_its_expiry_stops_before_its_first_side_effect() -> None:
    """A worker frozen longer than its lease wakes up with no failed renewal to tell it; its
    clock does: past the confirmed expiry, the next side effect is refused, reads are not."""
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0, clock=lambda: clock.wall)
    clock.run(mine.acquire())
    clock.wall += 2.9
    mine.guard(StoreOp("put_checkpoint", ()))
    mine.check()
    assert mine.held
    clock.wall += 0.1
    mine.guard(StoreOp("get_checkpoint", ()))
    with pytest.raises(WorkflowLeaseLostError):
        mine.guard(Invoke((), {}))
    assert mine.lost and not mine.held
    with pytest.raises(WorkflowLeaseLostError):
        mine.check()
    # Without a clock only a refused or failed renewal loses it (the pure default).
    blind = lease("other", duration=3.0)
    clock.run(blind.acquire())
    clock.wall += 100
    blind.guard(Invoke((), {}))


def test_lease_settings_are_checked() -> None:
    assert check_lease_wait(None) == 0.0 and check_lease_wait(0) == 0.0
    assert check_lease_wait(2) == 2.0
    for bad in (-1, float("inf"), True, "5"):
        with pytest.raises(CoderAgentError, match="lease_wait"):
            check_lease_wait(bad)
    with pytest.raises(CoderAgentError, match="lease_duration"):
        lease(duration=0)
    with pytest.raises(CoderAgentError, match="owner"):
        lease(owner="")
    assert is_side_effect(StoreOp("release_lease", ())) and not is_side_effect(WallClock())


def test_the_lease_errors_pickle() -> None:
    lost = WorkflowLeaseLostError(tenant=T, workflow_id=WF, what="archive")
    again = pickle.loads(pickle.dumps(lost))
    assert type(again) is WorkflowLeaseLostError and again.what == "archive"
    assert again.workflow_id == WF and str(again) == str(lost) and "archive" in str(lost)


def test_a_durable_job_stops_before_a_side_effect_once_the_guard_refuses() -> None:
    world = World()
    mine = lease(duration=3.0)
    Clock(world.store).run(mine.acquire())
    world.store.put_checkpoint(T, WF, Checkpoint(chat_id=world.create_chat("hi")))
    machine = ArchiveWorkflow(world.selector, tenant=T, workflow_id=WF, now=world.now)
    conn = Connection(base_url="https://coder.example")
    job = DurableWork(machine, store=world.store, guard=mine.guard)
    task = conn.start_durable(job, now=world.now)

    def work() -> list[Any]:
        return [c for c in conn.commands() if not isinstance(c, TaskMoved)]

    (read,) = work()
    assert isinstance(read, ApplyStore) and read.op.method == "get_checkpoint"
    mine.renewed(False, 1_001.0)
    conn.store_finished(read.call, value=read.op.apply(read.call.runner), now=world.now)
    # The stranded-chat listing is a read: still allowed.
    (listing,) = work()
    assert isinstance(listing, ApplyStore) and listing.op.method == "stranded_chats"
    conn.store_finished(listing.call, value=(), now=world.now)
    # The probe of the chat is a request: refused, never sent.
    assert not any(isinstance(c, StartHttp | CancelHttp | ApplyStore) for c in work())
    assert task.done and job.refused is not None
    with pytest.raises(WorkflowLeaseLostError):
        task.result()


def test_the_sweep_retires_a_stranded_chat_under_its_workflows_lease_d27() -> None:
    world = World()
    busy_chat = world.create_chat("one")
    free_chat = world.create_chat("two")
    world.settle_server(busy_chat)
    world.settle_server(free_chat)
    store = world.store
    store.add_stranded(T, "wf-busy", busy_chat)
    store.add_stranded(T, "wf-free", free_chat)
    store.acquire_lease(T, "wf-busy", "worker", world.wall, 600.0)
    sweep = OrphanSweep(
        world.selector,
        now=world.now,
        wall=world.wall,
        lease_owner="sweeper",
        lease_duration=1.0,
        settle_deadline=5.0,
        retry_delay=0.05,
    )
    assert sweep.lease_duration >= 5.0  # outlives one retire's own bound
    result = world.drive(sweep)
    assert result.archived_chat_ids == (free_chat,)
    ((chat, error),) = result.failed
    assert chat == busy_chat and isinstance(error, WorkflowBusyError)
    assert error.owner == "worker" and error.chat_id == busy_chat
    assert [r.chat_id for r in store.stranded_chats()] == [busy_chat]
    assert store.get_lease(T, "wf-free") is None
    lease_ops = [(op.method, op.args[1]) for op in world.store_ops if "lease" in op.method]
    # The busy one is only asked for; the free one is taken, and released after the retire.
    assert sorted(lease_ops) == [
        ("acquire_lease", "wf-busy"),
        ("acquire_lease", "wf-free"),
        ("release_lease", "wf-free"),
    ]
    assert lease_ops.index(("acquire_lease", "wf-free")) + 1 == lease_ops.index(
        ("release_lease", "wf-free")
    )
    busy = store.get_lease(T, "wf-busy")
    assert busy is not None and busy.owner == "worker"


def test_the_early_checkpoint_names_a_fresh_chat_only_d28() -> None:
    binding = DurableBinding(tenant=T, workflow_id=WF, marker="[wf/one]", attempt=1)
    fresh = RunAgentTurn(chat_id=None, last_seen_message_id=None, prompt="p", binding=binding)
    op = fresh.early_checkpoint("chat-1")
    assert op is not None and op.method == "put_checkpoint" and op.is_write
    assert op.args == (
        T,
        WF,
        Checkpoint(chat_id="chat-1", step="[wf/one]", outcome=OUTCOME_IN_FLIGHT),
    )
    resumed = RunAgentTurn(chat_id="c", last_seen_message_id=3, prompt="p", binding=binding)
    assert resumed.early_checkpoint("c") is None
    unbound = RunAgentTurn(
        chat_id=None, last_seen_message_id=None, prompt="p", binding=DurableBinding(tenant=T)
    )
    assert unbound.early_checkpoint("c") is None


def test_a_discarded_fresh_chat_undoes_its_early_checkpoint_then_is_stranded_d28() -> None:
    """The session dropped the chat after its stream was lost for good (C.5): the step
    first clears the early checkpoint, then records the chat as stranded, then raises; the
    next attempt starts with a new chat."""
    world = World()
    lost = CoderStreamError("the stream could not be re-established", retryable=True)

    def turn(effect: RunAgentTurn) -> TurnReport:
        chat = world.create_chat(effect.prompt)
        op = effect.early_checkpoint(chat)
        assert op is not None
        world.store_ops.append(op)
        op.apply(world.store)
        world.settle_server(chat)
        return TurnReport(error=lost, stranded_chat_ids=(chat,))

    plan = StepPlan(workflow_id=WF, prompt="do it", step="one", tenant=T)
    with pytest.raises(CoderStreamError):
        world.run_program(step_program(plan), turn=turn)
    (stranded,) = world.store.stranded_chats(T)
    assert world.store.get_checkpoint(T, WF) is None
    methods = [op.method for op in world.store_ops]
    assert methods == [
        "get_checkpoint",
        "put_checkpoint",
        "get_checkpoint",
        "delete_checkpoint",
        "add_stranded",
    ]
    # The next attempt: a fresh chat, checkpointed early again and then finished.
    chats: list[str] = []

    def again(effect: RunAgentTurn) -> TurnReport:
        assert effect.chat_id is None
        chat = world.create_chat(effect.prompt)
        chats.append(chat)
        op = effect.early_checkpoint(chat)
        assert op is not None
        op.apply(world.store)
        world.settle_server(chat)
        return TurnReport(result=None, chat_id=chat, last_seen_message_id=None)

    world.run_program(step_program(plan), turn=again)
    cp = world.store.get_checkpoint(T, WF)
    assert cp is not None and cp.chat_id == chats[0] != stranded.chat_id
    assert cp.step == step_marker(WF, "one")


# -- D37: fencing tokens and the check before an effect ---------------------------------------------


def test_each_holder_gets_a_larger_fencing_token_d37() -> None:
    store = MemoryStore()
    clock = Clock(store)
    first = lease("first", duration=3.0)
    assert first.fencing_token is None
    assert clock.run(first.acquire()).fencing_token == 1 and first.fencing_token == 1
    clock.wall += 1.0
    first.renewed(clock.run(iter_one(first.renew_op(clock.wall))), clock.wall)
    assert first.fencing_token == 1 and store.get_lease(T, WF).fencing_token == 1
    clock.wall += 10.0
    second = lease("second", duration=3.0)
    assert clock.run(second.acquire()).fencing_token == 2 and second.fencing_token == 2


def iter_one(op: StoreOp) -> Generator[Any, Any, Any]:
    return (yield op)


def test_the_check_passes_while_the_lease_is_ours_and_fresh_d37() -> None:
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0)
    clock.run(mine.acquire())
    clock.wall += 2.9
    assert clock.run(mine.verify()) is None
    assert mine.held


def test_the_check_fails_once_another_worker_took_the_lease_over_d37() -> None:
    """The frozen holder: it never saw a renewal fail, its clock was stopped with it, but the
    store records the next acquisition."""
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0)
    clock.run(mine.acquire())
    store.acquire_lease(T, WF, "thief", clock.wall + 5.0, 3.0)
    with pytest.raises(WorkflowLeaseLostError, match="later acquisition") as info:
        clock.run(mine.verify())
    error = info.value
    assert "fencing token 2; this step's is 1" in str(error)
    assert (error.owner, error.expires_at) == ("thief", clock.wall + 8.0) and error.retryable
    assert mine.lost and not mine.held
    # Lost for good: the guard refuses the next side effect, a second check fails at once.
    with pytest.raises(WorkflowLeaseLostError):
        mine.guard(Invoke((), {}))
    with pytest.raises(WorkflowLeaseLostError, match="lost its lease"):
        clock.run(mine.verify())


def test_the_check_fails_when_the_same_owner_acquired_again_or_nobody_holds_it_d37() -> None:
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0)
    clock.run(mine.acquire())
    store.acquire_lease(T, WF, "me", clock.wall, 3.0)  # another acquisition under our id
    with pytest.raises(WorkflowLeaseLostError, match="fencing token 2; this step's is 1"):
        clock.run(mine.verify())
    gone = WorkflowLease(tenant=T, workflow_id="wf-2", owner="gone", duration=3.0, what="archive")
    clock.run(gone.acquire())
    store.release_lease(T, "wf-2", "gone")
    with pytest.raises(WorkflowLeaseLostError, match="holds no lease on it") as info:
        clock.run(gone.verify())
    assert "this archive no longer holds" in str(info.value) and info.value.owner is None


def test_the_check_fails_by_the_holders_own_clock_past_the_confirmed_expiry_d37() -> None:
    """Nobody took the lease yet, but this worker's clock is past the expiry the store last
    confirmed: another worker may take it at any moment."""
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0)
    clock.run(mine.acquire())
    clock.wall += 3.0
    with pytest.raises(WorkflowLeaseLostError, match="by this worker's clock"):
        clock.run(mine.verify())
    assert mine.lost
    # Released meanwhile (no expiry left): counts as past it.
    other = lease("other", duration=3.0)
    clock.wall += 10.0
    clock.run(other.acquire())
    assert other._past_expiry(clock.wall) is False
    other.released()
    assert other._past_expiry(clock.wall) is True


def test_the_check_reads_the_clock_after_the_store_and_reports_its_failures_d37() -> None:
    store = MemoryStore()
    clock = Clock(store)
    mine = lease(duration=3.0)
    clock.run(mine.acquire())
    program = mine.verify()
    op = next(program)
    assert op == StoreOp("get_lease", (T, WF))
    with pytest.raises(DurableStoreError, match="get_lease failed: OSError"):
        program.throw(OSError("disk gone"))
    assert not mine.lost  # the store could not say: nothing decided
    # Never held (or held no longer): lost at once, before any read.
    with pytest.raises(WorkflowLeaseLostError):
        next(lease("never").verify())
