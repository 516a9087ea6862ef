"""Races on every store: threads (tasks, for the asyncio store) and processes racing for one
workflow lease, where each round must have exactly one winner that every contender agrees on;
a renewal racing a takeover, where never both succeed; and concurrent ledger and journal
writes, where every write lands whole.

Each contender uses a store object of its own (its own connection), so the database's own
locking decides, not the store object's; ``MemoryStore`` is one object shared by the threads.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

from coder_proto.durable import JournalEntry, LedgerEntry

from .kinds import Blocking, StoreMaker, open_spec

T = "racing"
THREADS = 8
THREAD_ROUNDS = 100
PROCESSES = 4
PROCESS_ROUNDS = 50
WRITERS = 6
WRITES = 40
#: Contenders take a lease at this wall-clock time plus the round number; the stale leases
#: seeded before odd rounds expired long before.
START = 1_000_000.0


def workflow(round_: int) -> str:
    return f"race-{round_}"


def seed_stale_leases(store: Any, rounds: int) -> None:
    """Odd rounds race for a lease a crashed worker left behind (long expired)."""
    for round_ in range(1, rounds, 2):
        store.acquire_lease(T, workflow(round_), "crashed-worker", 0.0, 1.0)


def check_rounds(store: Any, seen: dict[int, dict[str, str]], contenders: int) -> None:
    """Each round: every contender saw the same holder, that holder is one of them, and the
    store holds it."""
    assert seen
    for round_, holders in sorted(seen.items()):
        assert len(holders) == contenders, round_
        winners = {owner for owner, holder in holders.items() if holder == owner}
        assert len(winners) == 1, (round_, holders)
        (winner,) = winners
        assert set(holders.values()) == {winner}, (round_, holders)
        lease = store.get_lease(T, workflow(round_))
        assert lease is not None and lease.owner == winner
        assert lease.expires_at == START + round_ + 60.0


def run_threads(count: int, body: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            body(index)
        except BaseException as exc:
            errors.append(exc)
            raise

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive()
    assert not errors, errors


# -- one lease, many contenders -----------------------------------------------------------------


def test_threads_racing_for_one_lease_exactly_one_wins_each_round(maker: StoreMaker) -> None:
    first = maker.open()
    seed_stale_leases(first, THREAD_ROUNDS)
    seen: dict[int, dict[str, str]] = {r: {} for r in range(THREAD_ROUNDS)}
    if isinstance(first, Blocking):  # asyncio: tasks race on one loop, over the pool
        async_store = first.inner

        async def round_of_tasks(round_: int) -> None:
            owners = [f"task-{i}" for i in range(THREADS)]
            leases = await asyncio.gather(
                *(
                    async_store.acquire_lease(T, workflow(round_), o, START + round_, 60.0)
                    for o in owners
                )
            )
            seen[round_] = {o: lease.owner for o, lease in zip(owners, leases, strict=True)}

        for round_ in range(THREAD_ROUNDS):
            first.runner.run(round_of_tasks(round_))
    else:
        stores = [first] + [maker.open() for _ in range(THREADS - 1)]
        barrier = threading.Barrier(THREADS)

        def contender(index: int) -> None:
            store, owner = stores[index], f"thread-{index}"
            for round_ in range(THREAD_ROUNDS):
                barrier.wait(60)
                lease = store.acquire_lease(T, workflow(round_), owner, START + round_, 60.0)
                seen[round_][owner] = lease.owner

        run_threads(THREADS, contender)
    check_rounds(first, seen, THREADS)


def _process_contender(
    spec: tuple[str, ...], index: int, rounds: int, barrier: Any, results: Any
) -> None:
    store, close = open_spec(spec)
    owner = f"process-{index}"
    try:
        outcome = []
        for round_ in range(rounds):
            barrier.wait(60)
            lease = store.acquire_lease(T, workflow(round_), owner, START + round_, 60.0)
            outcome.append((round_, owner, lease.owner))
        results.put(outcome)
    finally:
        close()


def test_processes_racing_for_one_lease_exactly_one_wins_each_round(
    shared_maker: StoreMaker,
) -> None:
    store = shared_maker.open()
    seed_stale_leases(store, PROCESS_ROUNDS)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    procs = [
        context.Process(
            target=_process_contender,
            args=(shared_maker.spec, i, PROCESS_ROUNDS, barrier, results),
        )
        for i in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    seen: dict[int, dict[str, str]] = {r: {} for r in range(PROCESS_ROUNDS)}
    for outcome in outcomes:
        for round_, owner, holder in outcome:
            seen[round_][owner] = holder
    check_rounds(store, seen, PROCESSES)


def test_a_renewal_racing_a_takeover_never_both_succeed(maker: StoreMaker) -> None:
    """At the instant a lease expires, its holder renews while others try to take it over:
    either the renewal wins and nobody took it, or exactly one contender took it and the
    renewal failed."""
    first = maker.open()
    rounds, contenders = 60, 4
    for round_ in range(rounds):
        first.acquire_lease(T, workflow(round_), "holder", START + round_ - 60.0, 60.0)
    renewed: dict[int, bool] = {}
    seen: dict[int, dict[str, str]] = {r: {} for r in range(rounds)}
    if isinstance(first, Blocking):
        async_store = first.inner

        async def round_of_tasks(round_: int) -> None:
            now = START + round_
            owners = [f"task-{i}" for i in range(contenders)]
            renewal, *leases = await asyncio.gather(
                async_store.renew_lease(T, workflow(round_), "holder", now, 60.0),
                *(async_store.acquire_lease(T, workflow(round_), o, now, 60.0) for o in owners),
            )
            renewed[round_] = renewal
            seen[round_] = {o: lease.owner for o, lease in zip(owners, leases, strict=True)}

        for round_ in range(rounds):
            first.runner.run(round_of_tasks(round_))
    else:
        stores = [first] + [maker.open() for _ in range(contenders)]
        barrier = threading.Barrier(contenders + 1)

        def racer(index: int) -> None:
            store = stores[index]
            for round_ in range(rounds):
                now = START + round_
                barrier.wait(60)
                if index == 0:
                    renewed[round_] = store.renew_lease(T, workflow(round_), "holder", now, 60.0)
                else:
                    owner = f"thread-{index}"
                    lease = store.acquire_lease(T, workflow(round_), owner, now, 60.0)
                    seen[round_][owner] = lease.owner

        run_threads(contenders + 1, racer)
    for round_ in range(rounds):
        holders = set(seen[round_].values())
        winners = {o for o, h in seen[round_].items() if o == h}
        final = first.get_lease(T, workflow(round_))
        assert final is not None
        if renewed[round_]:
            # Renewed before any takeover: every contender saw the holder.
            assert winners == set() and holders == {"holder"} and final.owner == "holder"
        else:
            assert len(winners) == 1 and final.owner in winners, (round_, seen[round_])
            assert holders == winners


# -- concurrent writes ----------------------------------------------------------------------------


def write_batch(store: Any, writer: int) -> None:
    tenant = f"writer-{writer}"
    for n in range(WRITES):
        store.put_ledger(tenant, "chat", f"call-{n}", LedgerEntry.committing())
        store.put_ledger(tenant, "chat", f"call-{n}", LedgerEntry.done({"n": n, "w": writer}))
        # Every writer also overwrites one shared ledger entry and one shared journal entry.
        store.put_ledger(T, "shared", "call", LedgerEntry.done({"n": n, "w": writer}))
        store.put_journal(
            T, "shared", JournalEntry(state="submitting", marker=tenant, attempt=n, at=float(n))
        )
        store.add_stranded(tenant, "wf", f"s-{n}")


def check_batches(store: Any) -> None:
    for writer in range(WRITERS):
        tenant = f"writer-{writer}"
        for n in range(WRITES):
            assert store.get_ledger(tenant, "chat", f"call-{n}") == LedgerEntry.done(
                {"n": n, "w": writer}
            )
        assert [s.chat_id for s in store.stranded_chats(tenant)] == [
            f"s-{n}" for n in range(WRITES)
        ]
    assert len(store.stranded_chats()) == WRITERS * WRITES
    # The shared entries hold one writer's write whole (never a torn mix).
    writers = {f"writer-{w}" for w in range(WRITERS)}
    shared = store.get_ledger(T, "shared", "call")
    assert shared is not None
    assert shared.output["n"] in range(WRITES) and shared.output["w"] in range(WRITERS)
    journal = store.get_journal(T, "shared")
    assert journal is not None and journal.marker in writers and journal.attempt == journal.at


def test_concurrent_ledger_and_journal_writes_all_land(maker: StoreMaker) -> None:
    first = maker.open()
    if isinstance(first, Blocking):
        async_store = first.inner

        async def writer(index: int) -> None:
            tenant = f"writer-{index}"
            for n in range(WRITES):
                await async_store.put_ledger(tenant, "chat", f"call-{n}", LedgerEntry.committing())
                await async_store.put_ledger(
                    tenant, "chat", f"call-{n}", LedgerEntry.done({"n": n, "w": index})
                )
                await async_store.put_ledger(
                    T, "shared", "call", LedgerEntry.done({"n": n, "w": index})
                )
                await async_store.put_journal(
                    T,
                    "shared",
                    JournalEntry(state="submitting", marker=tenant, attempt=n, at=float(n)),
                )
                await async_store.add_stranded(tenant, "wf", f"s-{n}")

        async def all_writers() -> None:
            await asyncio.gather(*(writer(i) for i in range(WRITERS)))

        first.runner.run(all_writers())
    else:
        stores = [first] + [maker.open() for _ in range(WRITERS - 1)]
        run_threads(WRITERS, lambda i: write_batch(stores[i], i))
    check_batches(first)


def _process_writer(spec: tuple[str, ...], writer: int) -> None:
    store, close = open_spec(spec)
    try:
        write_batch(store, writer)
    finally:
        close()


def test_processes_writing_at_once_all_land(shared_maker: StoreMaker) -> None:
    """Several processes writing one database at once: every write lands, none is torn."""
    store = shared_maker.open()  # PostgreSQL: the writers race to create the schema too
    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(target=_process_writer, args=(shared_maker.spec, i))
        for i in range(WRITERS)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    check_batches(store)
