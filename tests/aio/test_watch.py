"""``watch_chats()`` on asyncio against the fake server (wire 6, 1.5, 11): events in order,
redials after drops with the backoff, terminal 4xx rejections, prompt teardown however the
consumer stops, the standalone helper without preflight, and no ``ws:*`` events.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from coder_io_asyncio import CoderChatClient, watch_chats
from coder_io_asyncio.fake_server import FakeCoderServer
from coder_proto.errors import CoderApiError
from coder_proto.watch import WatchBackoff
from coder_proto.wire.chats import ChatWatchEvent

FAST = WatchBackoff(initial=0.02, cap=0.1)


def arun(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            async with asyncio.timeout(60):
                await fn(*args, **kwargs)

        asyncio.run(main())

    return wrapper


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as fake:
        yield fake


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def until_waiting(watch: Any, chat_ids: set[str]) -> list[ChatWatchEvent]:
    got: list[ChatWatchEvent] = []
    waiting: set[str] = set()
    async for event in watch:
        got.append(event)
        if event.kind == "status_change" and event.chat.status == "waiting":
            waiting.add(event.chat.id)
            if waiting >= chat_ids:
                return got
    raise AssertionError("the watch ended")


@arun
async def test_events_arrive_in_order_and_only_the_preflight_is_instrumented_wire_6(
    server: FakeCoderServer,
) -> None:
    events: list[Any] = []
    async with CoderChatClient(server.url, server.token, on_transport_event=events.append) as c:
        async with c.watch_chats() as watch:
            await wait_for(lambda: server.counters.open_watches == 1)
            chat = await c.create_chat(organization_id=server.organization_id, content="hi")
            got = await until_waiting(watch, {chat.id})
    assert next((e.kind, e.chat.status) for e in got if e.chat.id == chat.id) == (
        "created",
        "running",
    )
    types = {e.type for e in events}
    assert not any(t.startswith("ws:") for t in types)
    preflight = [e for e in events if e.type == "http:request" and e.op == "watch_chats"]
    assert [(e.method, e.path) for e in preflight] == [("GET", "/api/v2/chats")]
    assert await asyncio.to_thread(server.wait_idle, 5.0)


@arun
async def test_a_legacy_only_server_is_watched_on_the_experimental_route() -> None:
    with FakeCoderServer(chunk_delay=0.001, legacy_only=True) as server:
        async with CoderChatClient(server.url, server.token) as c:
            async with c.watch_chats() as watch:
                await wait_for(lambda: server.counters.open_watches == 1)
                assert c.prefix == "/api/experimental/chats"
                chat = await c.create_chat(organization_id=server.organization_id, content="x")
                await until_waiting(watch, {chat.id})


@arun
async def test_drops_are_redialed_with_backoff_and_the_watch_goes_on(
    server: FakeCoderServer,
) -> None:
    server.faults.drop_stream_after_frames(0, times=3, route="watch")
    async with CoderChatClient(server.url, server.token) as c:
        async with c.watch_chats(backoff=FAST) as watch:
            await wait_for(lambda: server.counters.watch_dials == 4)
            await wait_for(lambda: server.counters.open_watches == 1)
            chat = await c.create_chat(organization_id=server.organization_id, content="hi")
            await until_waiting(watch, {chat.id})
    assert await asyncio.to_thread(server.wait_idle, 5.0)


@pytest.mark.parametrize("status", [401, 404, 408, 429])
@arun
async def test_any_4xx_upgrade_rejection_ends_the_watch_with_an_api_error(
    server: FakeCoderServer, status: int
) -> None:
    server.faults.reject_upgrades(status, route="watch", message="no watching")
    async with CoderChatClient(server.url, server.token) as c:
        watch = c.watch_chats(backoff=FAST)
        with pytest.raises(CoderApiError) as info:
            async for _ in watch:
                pass
        # The iterator stays finished.
        with pytest.raises(StopAsyncIteration):
            await watch.__anext__()
    assert info.value.status == status and info.value.path == "/api/v2/chats/watch"
    assert server.counters.watch_dials == 1


@arun
async def test_a_5xx_rejection_is_redialed(server: FakeCoderServer) -> None:
    server.faults.reject_upgrades(503, route="watch", times=2)
    async with CoderChatClient(server.url, server.token) as c, c.watch_chats(backoff=FAST):
        await wait_for(lambda: server.counters.open_watches == 1)


@arun
async def test_a_preflight_error_propagates_wire_1_5(server: FakeCoderServer) -> None:
    async with CoderChatClient(server.url, "bad-token") as c:
        with pytest.raises(CoderApiError) as info:
            async with c.watch_chats() as watch:
                await watch.__anext__()
    assert info.value.status == 401 and server.counters.watch_dials == 0


# -- teardown ----------------------------------------------------------------------------------


@arun
async def test_leaving_the_context_closes_the_socket_at_once(server: FakeCoderServer) -> None:
    async with CoderChatClient(server.url, server.token) as c:
        async with c.watch_chats() as watch:
            await wait_for(lambda: server.counters.open_watches == 1)
        assert c.driver.open_connections == 0
        await wait_for(lambda: server.counters.open_watches == 0, timeout=1.0)
        assert [e async for e in watch] == []


@arun
async def test_breaking_out_of_a_bare_async_for_closes_the_socket(server: FakeCoderServer) -> None:
    async with CoderChatClient(server.url, server.token) as c:

        async def first_event() -> ChatWatchEvent:
            async for event in c.watch_chats():
                return event
            raise AssertionError("no event")

        task = asyncio.create_task(first_event())
        await wait_for(lambda: server.counters.open_watches == 1)
        await c.create_chat(organization_id=server.organization_id, content="hi")
        event = await task
        gc.collect()
        assert event.kind == "created"
        assert c.driver.open_connections == 0
        await wait_for(lambda: server.counters.open_watches == 0, timeout=1.0)


@arun
async def test_cancelling_the_consumer_closes_the_socket_and_propagates(
    server: FakeCoderServer,
) -> None:
    async with CoderChatClient(server.url, server.token) as c:
        watch = c.watch_chats()

        async def consume() -> None:
            async for _ in watch:
                pass

        task = asyncio.create_task(consume())
        await wait_for(lambda: server.counters.open_watches == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert c.driver.open_connections == 0
        await wait_for(lambda: server.counters.open_watches == 0, timeout=1.0)


@arun
async def test_a_caller_deadline_surfaces_as_timeout_error(server: FakeCoderServer) -> None:
    async with CoderChatClient(server.url, server.token) as c:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3), c.watch_chats() as watch:
                async for _ in watch:
                    pass
        assert c.driver.open_connections == 0


# -- the standalone helper (wire 1.5, 6) -----------------------------------------------------------


@arun
async def test_standalone_watch_dials_v2_without_a_preflight(server: FakeCoderServer) -> None:
    async with watch_chats(server.url, server.token, backoff=FAST) as watch:
        await wait_for(lambda: server.counters.open_watches == 1)
        async with CoderChatClient(server.url, server.token) as c:
            chat = await c.create_chat(organization_id=server.organization_id, content="hi")
        await until_waiting(watch, {chat.id})
    assert server.counters.requests["list_chats"] == 0
    assert await asyncio.to_thread(server.wait_idle, 5.0)
