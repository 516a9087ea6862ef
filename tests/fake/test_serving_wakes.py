"""The served fake wakes the connections a change concerns: the streams of the chats a
request or a tick changed and every watch, at the cost of those alone."""

from __future__ import annotations

import asyncio

from coder_integrations.fake_server._serving import Serving
from coder_proto.fake import FakeCoderModel


def _serving() -> Serving:
    serving = Serving(FakeCoderModel(), ping_interval=15.0, ping_timeout=15.0, trace=None)
    serving.tick_wake = asyncio.Event()
    return serving


def test_a_request_wakes_the_ticker_every_watch_and_the_streams_of_its_chats() -> None:
    serving = _serving()
    a1, a2, b, watch = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()
    serving.add_waker(a1, "a")
    serving.add_waker(a2, "a")
    serving.add_waker(b, "b")
    serving.add_waker(watch, None)
    serving.wake_request({"a", "gone"})
    assert serving.tick_wake is not None and serving.tick_wake.is_set()
    assert (a1.is_set(), a2.is_set(), b.is_set(), watch.is_set()) == (True, True, False, True)


def test_a_request_that_changed_no_chat_still_wakes_the_ticker_and_the_watches() -> None:
    serving = _serving()
    stream, watch = asyncio.Event(), asyncio.Event()
    serving.add_waker(stream, "a")
    serving.add_waker(watch, None)
    serving.wake_request(set())
    assert serving.tick_wake is not None and serving.tick_wake.is_set()
    assert (stream.is_set(), watch.is_set()) == (False, True)


def test_a_tick_wakes_the_streams_of_the_chats_that_advanced_and_every_watch() -> None:
    serving = _serving()
    a, b, watch = asyncio.Event(), asyncio.Event(), asyncio.Event()
    serving.add_waker(a, "a")
    serving.add_waker(b, "b")
    serving.add_waker(watch, None)
    serving.wake_chats(set())
    assert not (a.is_set() or b.is_set() or watch.is_set())
    serving.wake_chats({"b"})
    assert (a.is_set(), b.is_set(), watch.is_set()) == (False, True, True)


def test_a_closed_connection_is_woken_no_more() -> None:
    serving = _serving()
    a1, a2, watch = asyncio.Event(), asyncio.Event(), asyncio.Event()
    serving.add_waker(a1, "a")
    serving.add_waker(a2, "a")
    serving.add_waker(watch, None)
    serving.remove_waker(a1, "a")
    serving.remove_waker(watch, None)
    serving.wake_all()
    assert (a1.is_set(), a2.is_set(), watch.is_set()) == (False, True, False)
    a2.clear()
    serving.remove_waker(a2, "a")
    serving.wake_request({"a"})
    assert not a2.is_set()


def test_without_a_ticker_the_connections_are_woken_all_the_same() -> None:
    serving = Serving(FakeCoderModel(), ping_interval=15.0, ping_timeout=15.0, trace=None)
    a, b = asyncio.Event(), asyncio.Event()
    serving.add_waker(a, "a")
    serving.add_waker(b, "b")
    serving.wake_request({"a"})
    assert (a.is_set(), b.is_set()) == (True, False)
    serving.wake_all()
    assert b.is_set()
