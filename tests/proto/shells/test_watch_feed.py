"""The consumer side of ``watch_chats()`` for every adapter (``coder_proto._shells.watch_feed``; wire
1.5, 6): when the subscription starts, events handed out once and in order, a terminal error
raised to the consumer, a consumer's own stop ending quietly, and the standalone helper."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from coder_proto import ChatWatchEvent, CoderAgentError, CoderApiError, WatchBackoff
from coder_proto._actions import SendRequest
from coder_proto._constants import V2_PREFIX
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._shells.watch_feed import WatchFeed, WatchShell, standalone_watch
from coder_proto._stream.watch import WatchMachine
from tests.core_driver import chat_stub

BASE = "https://coder.test"


def event(chat_id: str, kind: str = "status_change") -> ChatWatchEvent:
    return ChatWatchEvent.from_json({"kind": kind, "chat": chat_stub(chat_id)})


class Subscribed:
    """What an adapter's ``driver.watch`` returns: the run of the watch machine."""

    def __init__(self, machine: WatchMachine) -> None:
        self.machine = machine


def subscriber(selector: PrefixSelector | None = None) -> Any:
    """A ``driver.watch`` stand-in: the machine the connection's ``start_watch`` builds."""

    def subscribe(backoff: WatchBackoff | None) -> Subscribed:
        return Subscribed(
            WatchMachine(
                selector or PrefixSelector(V2_PREFIX),
                base_url=BASE,
                token="tok-feed",
                now=0.0,
                backoff=backoff,
            )
        )

    return subscribe


def started(feed: WatchFeed, selector: PrefixSelector | None = None) -> Any:
    run = feed.start(subscriber(selector))
    assert run is not None
    return run.machine


def test_the_subscription_starts_once_and_never_after_a_close_wire_6() -> None:
    feed = WatchFeed(backoff=WatchBackoff(initial=0.5))
    assert repr(feed) == "<ChatWatch new>" and not feed.exhausted
    machine = started(feed)
    assert machine.policy.initial == 0.5
    assert repr(feed) == "<ChatWatch open>"
    assert feed.start(subscriber()) is None
    assert feed.machine is machine
    closed = WatchFeed()
    closed.close()
    assert repr(closed) == "<ChatWatch closed>"
    with pytest.raises(CoderAgentError, match="closed"):
        closed.start(subscriber())


def test_events_are_handed_out_once_in_arrival_order_wire_6() -> None:
    feed = WatchFeed()
    assert feed.next_event() is None  # not subscribed: nothing yet
    machine = started(feed)
    assert feed.next_event() is None
    machine.events.extend([event("a"), event("b")])
    assert [feed.next_event(), feed.next_event()] == [event("a"), event("b")]
    assert feed.next_event() is None and not machine.events


def test_a_consumers_stop_ends_the_iteration_quietly() -> None:
    feed = WatchFeed()
    machine = started(feed)
    machine.events.append(event("a"))
    machine.cancel(1.0)
    # What arrived before the stop is still handed out, then the watch is over.
    assert feed.next_event() == event("a")
    assert feed.next_event() is None and feed.exhausted


def test_closing_drops_what_was_not_handed_out() -> None:
    feed = WatchFeed()
    machine = started(feed)
    machine.events.extend([event("a"), event("b")])
    assert feed.next_event() == event("a")
    feed.close()
    assert feed.exhausted and feed.next_event() is None


def test_a_terminal_error_is_raised_to_the_consumer_and_ends_the_watch_wire_1_5() -> None:
    feed = WatchFeed()
    machine = started(feed, PrefixSelector())  # not locked: the preflight runs first
    (preflight,) = [a for a in machine.actions() if isinstance(a, SendRequest)]
    answer = HttpResponse(status=401, body=b'{"message": "no"}', headers=())
    machine.response_received(preflight.request_id, answer, 0.1)
    assert machine.done
    with pytest.raises(CoderApiError) as info:
        feed.next_event()
    assert info.value.status == 401
    assert feed.exhausted and feed.next_event() is None


# -- the adapters' shell and standalone helper --------------------------------------------------


def test_the_watch_shell_holds_the_client_and_a_new_feed() -> None:
    client = object()
    shell: WatchShell[object] = WatchShell(client, backoff=WatchBackoff(cap=2.0))
    assert shell._client is client and not shell._owns_client and shell._run is None
    assert shell._feed.backoff == WatchBackoff(cap=2.0)
    assert repr(shell) == "<ChatWatch new>"


def test_the_standalone_watch_owns_a_v2_client_of_its_own_wire_1_5() -> None:
    made: list[tuple[Any, ...]] = []

    class Client:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append((args, kwargs))

    class ChatWatch:
        def __init__(self, client: Any, **kwargs: Any) -> None:
            self.client = client
            self.kwargs = kwargs

    watch_chats = standalone_watch(Client, ChatWatch)
    backoff = WatchBackoff(initial=0.1)
    watch = watch_chats("https://coder.test", "tok", verify=False, backoff=backoff)
    assert made == [(("https://coder.test", "tok"), {"verify": False, "prefix": V2_PREFIX})]
    assert watch.kwargs == {"backoff": backoff, "owns_client": True}
    assert watch_chats.__module__ == __name__
    signature = inspect.signature(watch_chats)
    assert list(signature.parameters) == ["base_url", "token", "verify", "backoff"]
    assert signature.return_annotation == "ChatWatch"
