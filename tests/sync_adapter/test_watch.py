"""``watch_chats()`` on the blocking adapter against the fake server (wire 6, 1.5, 11): events
in order, redials after drops with the backoff, terminal 4xx rejections, prompt teardown
however the consumer stops (``with``, ``break``, Ctrl-C), the standalone helper without
preflight, and no ``ws:*`` events."""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coder_io_asyncio.fake_server import FakeCoderServer
from coder_io_sync import ChatWatch, CoderChatClient, watch_chats
from coder_proto.errors import CoderApiError
from coder_proto.watch import WatchBackoff
from coder_proto.wire.chats import ChatWatchEvent

FAST = WatchBackoff(initial=0.02, cap=0.1)


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as fake:
        yield fake


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def until_waiting(watch: ChatWatch, chat_ids: set[str]) -> list[ChatWatchEvent]:
    got: list[ChatWatchEvent] = []
    waiting: set[str] = set()
    for event in watch:
        got.append(event)
        if event.kind == "status_change" and event.chat.status == "waiting":
            waiting.add(event.chat.id)
            if waiting >= chat_ids:
                return got
    raise AssertionError("the watch ended")


def test_entering_subscribes_and_events_arrive_in_order_wire_6(server: FakeCoderServer) -> None:
    events: list[Any] = []
    with CoderChatClient(server.url, server.token, on_transport_event=events.append) as c:
        with c.watch_chats() as watch:
            # Entering returned once the socket was open: nothing created later is missed.
            assert server.counters.open_watches == 1
            chat = c.create_chat(organization_id=server.organization_id, content="hi")
            got = until_waiting(watch, {chat.id})
    assert next((e.kind, e.chat.status) for e in got if e.chat.id == chat.id) == (
        "created",
        "running",
    )
    types = {e.type for e in events}
    assert not any(t.startswith("ws:") for t in types)
    preflight = [e for e in events if e.type == "http:request" and e.op == "watch_chats"]
    assert [(e.method, e.path) for e in preflight] == [("GET", "/api/v2/chats")]
    assert server.wait_idle(5.0)


def test_a_legacy_only_server_is_watched_on_the_experimental_route() -> None:
    with FakeCoderServer(chunk_delay=0.001, legacy_only=True) as server:
        with CoderChatClient(server.url, server.token) as c, c.watch_chats() as watch:
            assert c.prefix == "/api/experimental/chats"
            chat = c.create_chat(organization_id=server.organization_id, content="x")
            until_waiting(watch, {chat.id})


def create_when(server: FakeCoderServer, ready: Callable[[], bool]) -> threading.Thread:
    """Create a chat from another thread once ``ready()`` holds (the watch only redials
    while its consumer waits in ``next()``, so the test's thread must be iterating)."""

    def body() -> None:
        wait_for(ready)
        with CoderChatClient(server.url, server.token) as other:
            other.create_chat(organization_id=server.organization_id, content="hi")

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def until_any_waiting(watch: ChatWatch) -> None:
    for event in watch:
        if event.kind == "status_change" and event.chat.status == "waiting":
            return
    raise AssertionError("the watch ended")


def test_drops_are_redialed_with_backoff_and_the_watch_goes_on(server: FakeCoderServer) -> None:
    server.faults.drop_stream_after_frames(0, times=3, route="watch")
    with CoderChatClient(server.url, server.token) as c:
        with c.watch_chats(backoff=FAST) as watch:
            creator = create_when(
                server,
                lambda: server.counters.watch_dials == 4 and server.counters.open_watches == 1,
            )
            until_any_waiting(watch)
            creator.join()
    assert server.wait_idle(5.0)


@pytest.mark.parametrize("status", [401, 404, 408, 429])
def test_any_4xx_upgrade_rejection_ends_the_watch_with_an_api_error(
    server: FakeCoderServer, status: int
) -> None:
    server.faults.reject_upgrades(status, route="watch", message="no watching", times=2)
    with CoderChatClient(server.url, server.token) as c:
        watch = c.watch_chats(backoff=FAST)
        with pytest.raises(CoderApiError) as info:
            for _ in watch:
                pass
        # The iterator stays finished.
        with pytest.raises(StopIteration):
            next(watch)
        with pytest.raises(CoderApiError), c.watch_chats(backoff=FAST):
            pass  # entering raises it too
    assert info.value.status == status and info.value.path == "/api/v2/chats/watch"
    assert server.counters.watch_dials == 2


def test_a_5xx_rejection_is_redialed(server: FakeCoderServer) -> None:
    server.faults.reject_upgrades(503, route="watch", times=2)
    with CoderChatClient(server.url, server.token) as c, c.watch_chats(backoff=FAST) as watch:
        creator = create_when(server, lambda: server.counters.open_watches == 1)
        until_any_waiting(watch)
        creator.join()
    assert server.counters.watch_dials == 3


def test_a_preflight_error_propagates_from_entering_wire_1_5(server: FakeCoderServer) -> None:
    with CoderChatClient(server.url, "bad-token") as c:
        with pytest.raises(CoderApiError) as info, c.watch_chats():
            pass
    assert info.value.status == 401 and server.counters.watch_dials == 0


# -- teardown ----------------------------------------------------------------------------------


def test_leaving_the_context_closes_the_socket_at_once(server: FakeCoderServer) -> None:
    with CoderChatClient(server.url, server.token) as c:
        with c.watch_chats() as watch:
            assert server.counters.open_watches == 1
        assert c.driver.open_connections == 0
        wait_for(lambda: server.counters.open_watches == 0, timeout=1.0)
        assert list(watch) == []


def test_breaking_out_of_a_bare_for_closes_the_socket(server: FakeCoderServer) -> None:
    with CoderChatClient(server.url, server.token) as c:
        creator = create_when(server, lambda: server.counters.open_watches == 1)
        kinds: list[str] = []
        for event in c.watch_chats():
            kinds.append(event.kind)
            break
        creator.join()
        gc.collect()
        assert kinds == ["created"]
        assert c.driver.open_connections == 0
        wait_for(lambda: server.counters.open_watches == 0, timeout=1.0)


def test_ctrl_c_while_waiting_closes_the_socket_and_propagates(server: FakeCoderServer) -> None:
    with CoderChatClient(server.url, server.token) as c:
        watch = c.watch_chats()
        main = threading.main_thread().ident
        assert main is not None and threading.current_thread() is threading.main_thread()
        killer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
        killer.start()
        with pytest.raises(KeyboardInterrupt):
            for _ in watch:
                pass
        killer.join()
        assert c.driver.open_connections == 0
        wait_for(lambda: server.counters.open_watches == 0, timeout=1.0)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# -- the standalone helper (wire 1.5, 6) -----------------------------------------------------------


def test_standalone_watch_dials_v2_without_a_preflight(server: FakeCoderServer) -> None:
    with watch_chats(server.url, server.token, backoff=FAST) as watch:
        assert server.counters.open_watches == 1
        with CoderChatClient(server.url, server.token) as c:
            chat = c.create_chat(organization_id=server.organization_id, content="hi")
        until_waiting(watch, {chat.id})
    assert server.counters.requests["list_chats"] == 0
    assert server.wait_idle(5.0)


def test_dropping_a_standalone_watch_closes_its_client(server: FakeCoderServer) -> None:
    watch = watch_chats(server.url, server.token, backoff=FAST)
    watch.__enter__()
    client = watch._client
    assert server.counters.open_watches == 1
    del watch
    gc.collect()
    assert client.driver.closed and client.driver.http_client.is_closed
    assert server.wait_idle(5.0)
