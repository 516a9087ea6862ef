"""What only the blocking ``watch_chats()`` does (wire 6, 1.5): entering the ``with``
subscribes (the socket is open before it returns, so nothing created afterwards is missed),
and a dropped standalone watch closes the client it created. The behaviour every runtime
shares (order, redials, rejections, teardown, Ctrl-C) is ``tests/integration/test_watch.py``."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import ChatWatch, CoderChatClient, watch_chats
from coder_proto import ChatWatchEvent, WatchBackoff

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


def test_dropping_a_standalone_watch_closes_its_client(server: FakeCoderServer) -> None:
    watch = watch_chats(server.url, server.token, backoff=FAST)
    watch.__enter__()
    client = watch._client
    assert server.counters.open_watches == 1
    del watch
    gc.collect()
    assert client.driver.closed and client.driver.http_client.is_closed
    assert server.wait_idle(5.0)
