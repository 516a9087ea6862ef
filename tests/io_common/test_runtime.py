"""The runtime interface (``coder_io_common._async.runtime.AsyncRuntime``) as asyncio and trio
supply it: one test body per promise, run on both. The layer above relies on exactly these:
client-owned tasks outlive their caller's cancellation, a task group's cancellation comes out
unwrapped, cleanup after a cancellation still runs, the timer fires at its (moving) deadline,
worker threads, events, semaphores and the loop token."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
import trio

from coder_io_asyncio._runtime import ASYNCIO
from coder_io_common._async.runtime import AsyncRuntime, Spawned
from coder_io_trio._runtime import TRIO


class Harness:
    """Runs a test body on one runtime, with that runtime's idioms for what the body cannot
    express through the interface (a caller's deadline, sleeping)."""

    def __init__(self, runtime: AsyncRuntime) -> None:
        self.runtime = runtime

    def run(self, body: Callable[[Harness], Coroutine[Any, Any, Any]]) -> Any:
        if self.runtime is ASYNCIO:
            return asyncio.run(asyncio.wait_for(body(self), 30))

        async def main() -> Any:
            with trio.fail_after(30):
                return await body(self)

        return trio.run(main)

    async def sleep(self, seconds: float) -> None:
        if self.runtime is ASYNCIO:
            await asyncio.sleep(seconds)
        else:
            await trio.sleep(seconds)

    async def within(self, seconds: float, fn: Callable[[], Awaitable[Any]]) -> bool:
        """``await fn()`` under a caller deadline of ``seconds``: whether the deadline cut it."""
        if self.runtime is ASYNCIO:
            try:
                async with asyncio.timeout(seconds):
                    await fn()
            except TimeoutError:
                return True
            return False
        with trio.move_on_after(seconds) as scope:
            await fn()
        return scope.cancelled_caught


@pytest.fixture(params=["asyncio", "trio"])
def h(request: pytest.FixtureRequest) -> Harness:
    return Harness(ASYNCIO if request.param == "asyncio" else TRIO)


def test_a_spawned_task_outlives_its_callers_cancellation(h: Harness) -> None:
    async def body(h: Harness) -> tuple[bool, bool, list[Spawned]]:
        runtime = h.runtime
        finished = runtime.event()
        ended: list[Spawned] = []

        async def work() -> None:
            await h.sleep(0.1)
            finished.set()

        async def caller() -> None:
            ended_task = runtime.spawn(work, done=ended.append)
            assert ended_task is not None
            await runtime.event().wait()

        cut = await h.within(0.02, caller)
        return cut, await runtime.wait(finished, 5.0), ended

    cut, finished, ended = h.run(body)
    assert cut and finished and len(ended) == 1


def test_a_cancelled_task_reports_that_it_ended_even_before_it_started(h: Harness) -> None:
    async def body(h: Harness) -> list[Spawned]:
        runtime = h.runtime
        ended: list[Spawned] = []
        started: list[bool] = []

        async def work() -> None:
            started.append(True)
            await runtime.event().wait()

        runtime.spawn(work, done=ended.append).cancel()
        running = runtime.spawn(work, done=ended.append)
        await h.sleep(0.02)
        running.cancel()
        running.cancel()  # idempotent
        for _ in range(50):
            if len(ended) == 2:
                break
            await h.sleep(0.01)
        return ended

    ended = h.run(body)
    assert len(ended) == 2 and not ended[0].lingering


def test_an_exception_of_a_spawned_task_is_logged_never_raised(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(h: Harness) -> None:
        async def broken() -> None:
            raise RuntimeError("a bug")

        h.runtime.spawn(broken)
        await h.sleep(0.05)

    with caplog.at_level(logging.ERROR, logger=f"coder_io_{h.runtime.name}"):
        h.run(body)
    (record,) = [r for r in caplog.records if r.name == f"coder_io_{h.runtime.name}"]
    assert record.exc_info is not None and "a bug" in str(record.exc_info[1])


def test_a_task_group_waits_for_its_tasks(h: Harness) -> None:
    async def body(h: Harness) -> list[int]:
        got: list[int] = []

        async def one(value: int, delay: float) -> None:
            await h.sleep(delay)
            got.append(value)

        async with h.runtime.task_group() as group:
            group.start_soon(one, 1, 0.03)
            group.start_soon(one, 2, 0.01)
        return got

    assert h.run(body) == [2, 1]


def test_the_callers_cancellation_cancels_the_group_and_comes_out_unwrapped(h: Harness) -> None:
    async def body(h: Harness) -> tuple[bool, list[str], list[type[BaseException]]]:
        runtime = h.runtime
        seen: list[str] = []
        raised: list[type[BaseException]] = []

        async def child() -> None:
            try:
                await runtime.event().wait()
            except runtime.cancelled:
                seen.append("child cancelled")
                raise

        async def caller() -> None:
            try:
                async with runtime.task_group() as group:
                    group.start_soon(child)
                    await runtime.event().wait()
            except BaseException as exc:
                raised.append(type(exc))
                raise

        cut = await h.within(0.05, caller)
        return cut, seen, raised

    cut, seen, raised = h.run(body)
    assert cut and seen == ["child cancelled"]
    assert raised == [h.runtime.cancelled]  # never an exception group


def test_cancelling_a_group_or_one_of_its_tasks(h: Harness) -> None:
    async def body(h: Harness) -> list[str]:
        runtime = h.runtime
        seen: list[str] = []

        async def child(name: str) -> None:
            try:
                await runtime.event().wait()
            except runtime.cancelled:
                seen.append(name)
                raise

        async with runtime.task_group() as group:
            first = group.start_soon(child, "first")
            group.start_soon(child, "second")
            await h.sleep(0.01)
            first.cancel()
            await h.sleep(0.01)
            group.cancel()
        return seen

    assert h.run(body) == ["first", "second"]


def test_cleanup_after_the_callers_cancellation_still_runs(h: Harness) -> None:
    """``finishing`` and ``shield``: what must still happen after a cancellation (closing a
    response, writing a checkpoint) can await, on asyncio (cancellation delivered once) and
    on trio (level-triggered, so the block is shielded), bounded by its timeout."""

    async def body(h: Harness) -> tuple[bool, list[str]]:
        runtime = h.runtime
        done: list[str] = []

        async def caller() -> None:
            try:
                await runtime.event().wait()
            except runtime.cancelled:
                with runtime.finishing(5.0):
                    await h.sleep(0.01)
                    done.append("finished")
                with runtime.shield():
                    await h.sleep(0.01)
                    done.append("shielded")
                with runtime.shield(0.05):
                    # Cut at its bound where the runtime needs one (trio), never hanging.
                    await runtime.wait(runtime.event(), 0.1)
                done.append("bounded")
                raise

        cut = await h.within(0.02, caller)
        with runtime.finishing(0.01):  # not cancelled: the block runs as it is
            await h.sleep(0.03)
            done.append("not cancelled")
        return cut, done

    cut, done = h.run(body)
    assert cut and done == ["finished", "shielded", "bounded", "not cancelled"]


def test_wait_says_whether_the_event_was_set_in_time(h: Harness) -> None:
    async def body(h: Harness) -> list[bool]:
        runtime = h.runtime
        event = runtime.event()
        early = await runtime.wait(event, 0.02)

        async def set_soon() -> None:
            await h.sleep(0.02)
            event.set()

        runtime.spawn(set_soon)
        return [early, await runtime.wait(event, None), event.is_set()]

    assert h.run(body) == [False, True, True]


def test_an_event_wakes_its_waiters_once_and_not_a_cancelled_one(h: Harness) -> None:
    async def body(h: Harness) -> tuple[list[str], bool, bool]:
        runtime = h.runtime
        event = runtime.event()
        woken: list[str] = []

        async def waiter(name: str) -> None:
            await event.wait()
            woken.append(name)

        _first, second, third = (runtime.spawn(waiter, name) for name in ("a", "b", "c"))
        await h.sleep(0.01)  # all three wait
        third.cancel()
        await h.sleep(0.01)  # the third has left its wait
        second.cancel()  # the second is cancelled, and the event set before it runs again
        event.set()
        event.set()  # once set, it stays set
        await h.sleep(0.01)
        already = await runtime.wait(event, 0)  # a set event is not waited for
        return woken, event.is_set(), already

    assert h.run(body) == (["a"], True, True)


def test_an_event_waited_for_again_after_a_timed_out_wait_wakes_the_new_waiters(
    h: Harness,
) -> None:
    async def body(h: Harness) -> tuple[list[bool], list[str]]:
        runtime = h.runtime
        event = runtime.event()
        woken: list[str] = []

        async def waiter(name: str) -> None:
            await event.wait()
            woken.append(name)

        # Waits that time out leave the event unset; later waiters still get woken.
        timed_out = [await runtime.wait(event, 0.01) for _ in range(3)]
        runtime.spawn(waiter, "a")
        runtime.spawn(waiter, "b")
        await h.sleep(0.01)
        event.set()
        await h.sleep(0.01)
        return timed_out, sorted(woken)

    assert h.run(body) == ([False, False, False], ["a", "b"])


def test_the_timer_calls_back_at_its_deadline_as_it_moves(h: Harness) -> None:
    async def body(h: Harness) -> list[tuple[str, float]]:
        runtime = h.runtime
        fired: list[tuple[str, float]] = []
        label = ["first"]
        timer = runtime.timer(lambda: fired.append((label[0], time.monotonic())))
        start = time.monotonic()
        timer.arm(start + 0.03)
        timer.arm(start + 0.03)  # the same deadline: nothing changes
        await h.sleep(0.1)
        label[0] = "moved"
        timer.arm(time.monotonic() + 10.0)
        timer.arm(time.monotonic() + 0.02)  # moved earlier
        await h.sleep(0.1)
        label[0] = "disarmed"
        timer.arm(time.monotonic() + 0.02)
        timer.arm(None)
        await h.sleep(0.06)
        label[0] = "closed"
        timer.arm(time.monotonic() + 0.02)
        timer.close()
        timer.arm(time.monotonic() + 0.01)
        await h.sleep(0.06)
        return [(name, at - start) for name, at in fired]

    fired = h.run(body)
    assert [name for name, _ in fired] == ["first", "moved"]
    assert fired[0][1] >= 0.03


def test_a_semaphore_holds_at_most_its_places(h: Harness) -> None:
    async def body(h: Harness) -> tuple[int, list[int]]:
        semaphore = h.runtime.semaphore(2)
        inside = [0, 0]
        entered: list[int] = []

        async def one(index: int) -> None:
            async with semaphore:
                entered.append(index)
                inside[0] += 1
                inside[1] = max(inside[1], inside[0])
                await h.sleep(0.01)
                inside[0] -= 1

        async with h.runtime.task_group() as group:
            for index in range(6):
                group.start_soon(one, index)
        return inside[1], entered

    most, entered = h.run(body)
    assert most == 2 and sorted(entered) == list(range(6))


def test_a_semaphore_serves_its_waiters_first_come_first_served(h: Harness) -> None:
    async def body(h: Harness) -> list[int]:
        runtime = h.runtime
        semaphore = runtime.semaphore(1)
        entered: list[int] = []
        release = runtime.event()

        async def holder() -> None:
            async with semaphore:
                await release.wait()

        async def waiter(index: int) -> None:
            async with semaphore:
                entered.append(index)
                await h.sleep(0.005)

        async with runtime.task_group() as group:
            group.start_soon(holder)
            await h.sleep(0.01)
            for index in range(4):
                group.start_soon(waiter, index)
                await h.sleep(0.01)  # each waits before the next arrives
            release.set()
        return entered

    assert h.run(body) == [0, 1, 2, 3]


def test_a_worker_thread_runs_off_the_loop_and_may_be_abandoned(h: Harness) -> None:
    release = threading.Event()
    threads: list[str] = []

    def blocking(value: int) -> int:
        threads.append(threading.current_thread().name)
        release.wait(5.0)
        return value * 2

    async def later(value: int) -> int:
        return value

    async def body(h: Harness) -> tuple[int, bool]:
        runtime = h.runtime
        # Whatever the function returns comes back, a coroutine too (the caller awaits it).
        assert await (await runtime.to_thread(later, 3)) == 3
        release.set()
        doubled = await runtime.to_thread(blocking, 21)
        release.clear()
        # A cancelled caller of an abandoned thread returns at once; the thread finishes later.
        cut = await h.within(0.05, lambda: runtime.to_thread(blocking, 1, abandon_on_cancel=True))
        release.set()
        return doubled, cut

    doubled, cut = h.run(body)
    assert doubled == 42 and cut
    assert threading.main_thread().name not in threads


def test_a_loop_token_runs_a_function_on_the_loop_from_another_thread(h: Harness) -> None:
    async def body(h: Harness) -> tuple[list[int], bool]:
        runtime = h.runtime
        token = runtime.loop_token()
        got: list[int] = []
        arrived = runtime.event()

        def on_loop(value: int) -> None:
            got.append(value)
            arrived.set()

        thread = threading.Thread(target=token.run_soon, args=(on_loop, 7))
        thread.start()
        ok = await runtime.wait(arrived, 5.0)
        thread.join()
        return got, ok

    got, ok = h.run(body)
    assert got == [7] and ok


def test_the_runtimes_name_and_cancellation() -> None:
    assert (ASYNCIO.name, ASYNCIO.cancelled) == ("asyncio", asyncio.CancelledError)
    assert (TRIO.name, TRIO.cancelled) == ("trio", trio.Cancelled)
    assert ASYNCIO.logger.name == "coder_io_asyncio" and TRIO.logger.name == "coder_io_trio"
    assert repr(TRIO) == "<TrioRuntime>"


def test_a_cut_block_ends_at_its_time_without_an_exception(h: Harness) -> None:
    """``cut_after``: the work inside is cancelled when its time is up (a REST call's total
    deadline, D29), the block ends normally and says so; a block done in time is not cut."""

    async def body(h: Harness) -> tuple[bool, bool, bool, bool]:
        reached: list[bool] = []
        async with h.runtime.cut_after(0.05) as cut:
            await h.runtime.event().wait()
            reached.append(True)  # never: the wait is cut
        async with h.runtime.cut_after(None) as uncut:
            await h.sleep(0.01)
        async with h.runtime.cut_after(5.0) as early:
            await h.sleep(0.01)
        return cut.expired, bool(reached), uncut.expired, early.expired

    assert h.run(body) == (True, False, False, False)


def test_a_cut_block_lets_its_own_errors_and_the_callers_cancellation_through(
    h: Harness,
) -> None:
    async def body(h: Harness) -> tuple[bool, bool]:
        runtime = h.runtime
        own = False
        try:
            async with runtime.cut_after(5.0):
                raise TimeoutError("a socket's own timeout, not the cut")
        except TimeoutError:
            own = True

        async def caller() -> None:
            async with runtime.cut_after(5.0):
                await runtime.event().wait()

        return own, await h.within(0.05, caller)

    assert h.run(body) == (True, True)


class _Host:
    """A ``SocketHost`` that records what a socket reports."""

    def __init__(self, runtime: AsyncRuntime) -> None:
        import ssl

        self.runtime = runtime
        self.ssl = ssl.create_default_context()
        self.reports: list[object] = []
        self.tasks: list[Spawned] = []
        self.ended: list[Spawned] = []

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> Spawned:
        task = self.runtime.spawn(fn, *args, done=self.ended.append)
        self.tasks.append(task)
        return task

    def adopt(self, task: Spawned) -> Callable[[Spawned], None]:
        self.tasks.append(task)
        return self.ended.append

    def socket_made(self, conn: Any) -> None:
        self.reports.append("made")

    def socket_data(self, conn: Any, data: bytes) -> None:
        self.reports.append("data")

    def socket_lost(self, conn: Any) -> None:
        self.reports.append("lost")

    def socket_failed(self, conn: Any, error: BaseException) -> None:
        self.reports.append(error)


def test_a_peer_that_reads_nothing_is_dropped_past_1_mib_unsent(h: Harness) -> None:
    """D30: what waits unsent is bounded; past ``MAX_UNSENT`` the socket reports one failure,
    later writes are ignored, and closing ends every task of the socket."""
    import socket

    from coder_proto._actions import OpenConnection
    from coder_proto._connection import Conn
    from coder_proto._stream.websocket import MAX_UNSENT

    # A listener nobody accepts on: the kernel completes the connection, and a small window
    # fills at once; nothing is ever read.
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    port = listener.getsockname()[1]

    async def body(h: Harness) -> _Host:
        runtime = h.runtime
        host = _Host(runtime)
        conn = Conn(None, OpenConnection(conn_id=1, host="127.0.0.1", port=port, tls=False))  # type: ignore[arg-type]
        runtime.open_socket(host, conn)
        while "made" not in host.reports:
            await h.sleep(0.01)
        chunk = b"x" * 65536
        for _ in range(20 * MAX_UNSENT // len(chunk)):
            if any(isinstance(r, OSError) for r in host.reports):
                break
            runtime.write_socket(conn, chunk)
            await h.sleep(0.002)
        runtime.write_socket(conn, chunk)  # after the drop: ignored
        await h.sleep(0.02)
        conn.closed = True
        runtime.close_socket(conn)
        for _ in range(300):
            if len(host.ended) == len(host.tasks):
                break
            await h.sleep(0.01)
        return host

    try:
        host = h.run(body)
    finally:
        listener.close()
    failures = [r for r in host.reports if isinstance(r, BaseException)]
    assert len(failures) == 1 and "reads nothing" in str(failures[0]), host.reports
    assert len(host.ended) == len(host.tasks)
