"""The consumer side of ``watch_chats()`` (wire 1.5, 6), for every adapter's ``ChatWatch``.

``WatchFeed`` holds what an iterator over a ``coder_proto._stream.watch.WatchMachine`` decides: when
the subscription starts (and that a closed watch never starts again), the buffer of events
taken from the machine, when the iteration ends, and that a terminal error (the preflight's,
a 4xx upgrade rejection) is raised to the consumer while a consumer's own stop ends quietly.
The adapter's ``ChatWatch`` only waits for the machine to move (``await`` on an event loop,
a blocking wait otherwise) and tears the socket down.

``standalone_watch`` builds each adapter's module-level ``watch_chats()`` (the reference's
``watchChatEvents``): no client of the caller's own, no preflight, the v2 route.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from .._constants import V2_PREFIX
from .._errors import CoderAgentError
from .._stream.watch import WatchBackoff, WatchMachine
from .._wire.chats import ChatWatchEvent

__all__ = ["StandaloneWatch", "WatchFeed", "WatchShell", "standalone_watch"]

W_co = TypeVar("W_co", covariant=True)
W = TypeVar("W")
R = TypeVar("R", bound="Subscription")
ClientT = TypeVar("ClientT")


class Subscription(Protocol):
    """What an adapter's driver returns for a started watch: its run, with the machine."""

    @property
    def machine(self) -> Any: ...


class WatchFeed:
    """One subscription's consumer state. ``start`` subscribes once (``None`` once started);
    ``next_event`` hands out the events in arrival order."""

    def __init__(self, *, backoff: WatchBackoff | None = None) -> None:
        self.backoff = backoff
        self.machine: WatchMachine | None = None
        self.buffer: collections.deque[ChatWatchEvent] = collections.deque()
        self.closed = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open" if self.machine is not None else "new"
        return f"<ChatWatch {state}>"

    @property
    def exhausted(self) -> bool:
        """Closed with nothing left to hand out: the iteration ends."""
        return self.closed and not self.buffer

    def start(self, subscribe: Callable[[WatchBackoff | None], R]) -> R | None:
        """Subscribe (the first time): ``subscribe(backoff)`` starts the watch machine (an
        adapter's ``driver.watch``, over ``Connection.start_watch``) and returns its run, whose
        ``machine`` the feed reads. ``None`` when already subscribed; ``CoderAgentError``
        when the watch was closed first."""
        if self.machine is not None:
            return None
        if self.closed:
            raise CoderAgentError("this chat watch is closed")
        run = subscribe(self.backoff)
        self.machine = run.machine
        return run

    def next_event(self) -> ChatWatchEvent | None:
        """The next event, or ``None`` when there is none yet (wait for the machine to move,
        unless ``exhausted``). When the machine has finished, the watch closes: a consumer's
        stop ends it quietly, a terminal error is raised here (wire 6)."""
        machine = self.machine
        if machine is None or self.closed:
            return None
        if not self.buffer:
            self.buffer.extend(machine.take())
        if self.buffer:
            return self.buffer.popleft()
        if machine.done:
            self.closed = True
            if not machine.cancelled:
                machine.result()  # raises the terminal error
        return None

    def close(self) -> None:
        """The consumer stopped: nothing more is handed out (the adapter cancels the
        machine)."""
        self.closed = True
        self.buffer.clear()


class WatchShell(Generic[ClientT]):
    """The runtime-independent half of every adapter's ``ChatWatch``: the client it watches
    through (closed with the watch when ``owns_client``), the ``WatchFeed`` and the adapter's
    run of the machine (``_run``, once subscribed)."""

    def __init__(
        self,
        client: ClientT,
        *,
        backoff: WatchBackoff | None = None,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._owns_client = owns_client
        self._feed = WatchFeed(backoff=backoff)
        self._run: Any = None

    def __repr__(self) -> str:
        return repr(self._feed)


class StandaloneWatch(Protocol[W_co]):
    """The signature of an adapter's module-level ``watch_chats``."""

    def __call__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        verify: Any = True,
        backoff: WatchBackoff | None = None,
    ) -> W_co: ...


def standalone_watch(
    client_class: Callable[..., Any], watch_class: Callable[..., W]
) -> StandaloneWatch[W]:
    """The adapter's ``watch_chats`` function: a ``watch_class`` over a ``client_class``
    created for it (pinned to the v2 prefix, closed with the watch)."""

    def watch_chats(
        base_url: str | None = None,
        token: str | None = None,
        *,
        verify: Any = True,
        backoff: WatchBackoff | None = None,
    ) -> W:
        """The standalone watch (the reference's ``watchChatEvents``, wire 1.5, 6): no client
        of your own and no preflight; it dials ``/api/v2/chats/watch`` directly. ``base_url``
        and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN``; ``verify`` is the
        TLS setting (``True``, ``False``, a CA bundle path or an ``ssl.SSLContext``). Use
        ``CoderChatClient.watch_chats()`` for prefix selection on older servers."""
        client = client_class(base_url, token, verify=verify, prefix=V2_PREFIX)
        return watch_class(client, backoff=backoff, owns_client=True)

    # Named as the module-level function it becomes in the adapter's client module, so that
    # introspection (the API reference, ``help()``) finds it there.
    watch_chats.__module__ = getattr(client_class, "__module__", __name__)
    watch_chats.__qualname__ = "watch_chats"
    watch_chats.__annotations__["return"] = getattr(watch_class, "__name__", "ChatWatch")
    return watch_chats
