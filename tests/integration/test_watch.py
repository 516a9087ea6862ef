"""``watch_chats()`` on every runtime against the fake server (the same test bodies on asyncio,
trio and blocking; wire 6, 1.5, 11): events in order, redials after drops with the backoff,
terminal 4xx rejections, prompt teardown however the consumer stops (leaving the block,
``break``, the runtime's own cancellation, a caller's deadline), the standalone helper
without preflight, and no ``ws:*`` events.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import CoderApiError, WatchBackoff
from tests.runtimes import SyncRuntime

from .conftest import MakeServer

FAST = WatchBackoff(initial=0.02, cap=0.1)


def waiting_for(chat_ids: set[str]) -> Any:
    """``events_until`` predicate: every chat of ``chat_ids`` reported ``waiting``."""

    def done(events: list[Any]) -> bool:
        waiting = {
            e.chat.id for e in events if e.kind == "status_change" and e.chat.status == "waiting"
        }
        return waiting >= chat_ids

    return done


def test_events_arrive_in_order_and_only_the_preflight_is_instrumented_wire_6(
    runtime: Any, server: FakeCoderServer
) -> None:
    events: list[Any] = []

    async def scenario(rt: Any) -> list[Any]:
        client = await rt.client(server, on_transport_event=events.append)
        watch = await rt.enter(client.watch_chats())
        await rt.until(lambda: server.counters.open_watches == 1)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="hi")
        got = await rt.events_until(watch, waiting_for({chat.id}))
        await rt.leave(watch)
        await rt.close_client(client)
        assert await rt.idle(server)
        return [(e.kind, e.chat.status) for e in got if e.chat.id == chat.id]

    assert runtime.run(scenario)[0] == ("created", "running")
    assert not any(e.type.startswith("ws:") for e in events)
    preflight = [e for e in events if e.type == "http:request" and e.op == "watch_chats"]
    assert [(e.method, e.path) for e in preflight] == [("GET", "/api/v2/chats")]


def test_a_legacy_only_server_is_watched_on_the_experimental_route_wire_1_4(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server(legacy_only=True)

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        watch = await rt.enter(client.watch_chats())
        await rt.until(lambda: server.counters.open_watches == 1)
        assert client.prefix == "/api/experimental/chats"
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="x")
        await rt.events_until(watch, waiting_for({chat.id}))
        await rt.leave(watch)
        await rt.close_client(client)

    runtime.run(scenario)


async def watch_a_chat_once_connected(
    rt: Any, server: FakeCoderServer, client: Any, watch: Any, dials: int
) -> list[Any]:
    """Consume ``watch`` while a chat is created once the watch is connected for the
    ``dials``-th time (the blocking watch redials only while its consumer waits in
    ``next()``); the events up to that chat's ``waiting``."""

    async def create_when_connected() -> None:
        await rt.until(lambda: server.counters.watch_dials == dials)
        await rt.until(lambda: server.counters.open_watches == 1)
        await rt.call(client, "create_chat", organization_id=server.organization_id, content="hi")

    def any_waiting(events: list[Any]) -> bool:
        return any(e.kind == "status_change" and e.chat.status == "waiting" for e in events)

    got, created = await rt.concurrently(
        lambda: rt.events_until(watch, any_waiting), create_when_connected
    )
    assert created is None, created
    assert not isinstance(got, BaseException), got
    return list(got)


def test_drops_are_redialed_with_backoff_and_the_watch_goes_on_wire_6(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.faults.drop_stream_after_frames(0, times=3, route="watch")

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        watch = await rt.enter(client.watch_chats(backoff=FAST))
        await watch_a_chat_once_connected(rt, server, client, watch, dials=4)
        await rt.leave(watch)
        await rt.close_client(client)
        assert await rt.idle(server)

    runtime.run(scenario)
    assert server.counters.watch_dials == 4


@pytest.mark.parametrize("status", [401, 404, 408, 429])
def test_any_4xx_upgrade_rejection_ends_the_watch_with_an_api_error_wire_6(
    runtime: Any, server: FakeCoderServer, status: int
) -> None:
    server.faults.reject_upgrades(status, route="watch", message="no watching")

    async def scenario(rt: Any) -> CoderApiError:
        client = await rt.client(server)
        watch = client.watch_chats(backoff=FAST)
        with pytest.raises(CoderApiError) as info:
            await rt.drain(watch)
        # The iterator stays finished.
        with pytest.raises(StopAsyncIteration):
            await rt.next_event(watch)
        await rt.close_client(client)
        return info.value

    error = runtime.run(scenario)
    assert error.status == status and error.path == "/api/v2/chats/watch"
    assert server.counters.watch_dials == 1


def test_a_5xx_rejection_is_redialed_wire_6(runtime: Any, server: FakeCoderServer) -> None:
    server.faults.reject_upgrades(503, route="watch", times=2)

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        watch = await rt.enter(client.watch_chats(backoff=FAST))
        await watch_a_chat_once_connected(rt, server, client, watch, dials=3)
        await rt.leave(watch)
        await rt.close_client(client)

    runtime.run(scenario)
    assert server.counters.watch_dials == 3


def test_a_preflight_error_propagates_wire_1_5(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> CoderApiError:
        client = rt.adapter.CoderChatClient(server.url, "bad-token")
        with pytest.raises(CoderApiError) as info:
            watch = await rt.enter(client.watch_chats())
            try:
                await rt.next_event(watch)
            finally:
                await rt.leave(watch)
        await rt.close_client(client)
        return info.value

    assert runtime.run(scenario).status == 401
    assert server.counters.watch_dials == 0


# -- teardown ----------------------------------------------------------------------------------


def test_leaving_the_block_closes_the_socket_at_once(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        watch = await rt.enter(client.watch_chats())
        await rt.until(lambda: server.counters.open_watches == 1)
        await rt.leave(watch)
        assert client.driver.open_connections == 0
        await rt.until(lambda: server.counters.open_watches == 0, timeout=1.0)
        assert await rt.drain(watch) == []
        await rt.close_client(client)

    runtime.run(scenario)


def test_breaking_out_of_a_bare_loop_closes_the_socket(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> str:
        client = await rt.client(server)

        async def create_when_open() -> None:
            await rt.until(lambda: server.counters.open_watches == 1)
            await rt.call(
                client, "create_chat", organization_id=server.organization_id, content="hi"
            )

        first, _ = await rt.concurrently(
            lambda: rt.first_event(client.watch_chats()), create_when_open
        )
        gc.collect()
        # The dropped iterator's finalizer hands the teardown to the loop (trio runs it at its
        # next turn: a finalizer must not drive the machines in the middle of other code).
        await rt.until(lambda: client.driver.open_connections == 0, timeout=1.0)
        await rt.until(lambda: server.counters.open_watches == 0, timeout=1.0)
        await rt.close_client(client)
        return str(first.kind)

    assert runtime.run(scenario) == "created"


def test_the_runtimes_own_cancellation_closes_the_socket_and_propagates_d22(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> bool:
        client = await rt.client(server)
        watch = client.watch_chats()
        propagated = await rt.cancel_consumer(watch, lambda: server.counters.open_watches == 1)
        assert client.driver.open_connections == 0
        await rt.until(lambda: server.counters.open_watches == 0, timeout=1.0)
        await rt.close_client(client)
        return bool(propagated)

    assert runtime.run(scenario)


def test_a_caller_deadline_surfaces_as_the_runtimes_deadline_error_d22(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> BaseException | None:
        client = await rt.client(server)
        error = await rt.watch_within(0.3, client.watch_chats())
        assert client.driver.open_connections == 0
        await rt.until(lambda: server.counters.open_watches == 0, timeout=1.0)
        await rt.close_client(client)
        return error

    assert isinstance(loop_runtime.run(scenario), loop_runtime.deadline_error)


def test_the_blocking_watch_stops_when_another_thread_closes_it(
    make_server: MakeServer, recorder: Any
) -> None:
    """The blocking watch has no caller deadline: another thread's ``close()`` (or Ctrl-C,
    above) stops it. The waiting iteration ends at once, the socket is closed, and the watch
    stays finished."""
    server = make_server()
    runtime = SyncRuntime(recorder)

    async def scenario(rt: Any) -> list[Any]:
        client = await rt.client(server)
        watch = await rt.enter(client.watch_chats())
        got = await rt.close_from_another_thread(watch, lambda: server.counters.open_watches == 1)
        assert client.driver.open_connections == 0
        await rt.until(lambda: server.counters.open_watches == 0, timeout=1.0)
        with pytest.raises(StopAsyncIteration):
            await rt.next_event(watch)
        await rt.close_client(client)
        assert await rt.idle(server)
        return got

    assert runtime.run(scenario) == []


# -- the standalone helper (wire 1.5, 6) -----------------------------------------------------------


def test_standalone_watch_dials_v2_without_a_preflight_wire_1_5(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        watch = await rt.enter(rt.adapter.watch_chats(server.url, server.token, backoff=FAST))
        await rt.until(lambda: server.counters.open_watches == 1)
        client = await rt.client(server)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="hi")
        await rt.close_client(client)
        await rt.events_until(watch, waiting_for({chat.id}))
        await rt.leave(watch)
        assert watch._client.driver.closed  # the watch's own client closes with it
        assert await rt.idle(server)

    runtime.run(scenario)
    assert server.counters.requests["list_chats"] == 0
