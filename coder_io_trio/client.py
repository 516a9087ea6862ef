"""``CoderChatClient`` on trio: every raw chat operation as an ``async`` method (wire 2, 6, 7,
8, 9; D4, D10, D11, D16, D17, D20-D24).

The method bodies are runtime-neutral (each builds a machine of ``coder_proto.client`` and
awaits it on the client's driver), so this class is ``coder_io_asyncio``'s with the trio
driver (``coder_io_trio._driver``), trio worker threads for file reads and a trio watch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import trio

from coder_io_asyncio import client as _asyncio_client
from coder_proto.errors import CoderAgentError
from coder_proto.transport_events import TransportEventSink
from coder_proto.watch import WatchBackoff

from ._driver import Driver, transport_sink
from .watch import ChatWatch

__all__ = ["CoderChatClient"]


class CoderChatClient(_asyncio_client.CoderChatClient):
    """The raw Coder chat API on trio (the same methods and arguments as on asyncio).

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN``;
    ``http_client`` (an ``httpx.AsyncClient``, which runs on trio) is used as given and never
    closed here, otherwise one is created (no read timeout, 30 s connect timeout, D23) and
    closed by ``aclose()`` / ``async with``. ``verify`` is the TLS setting of the stream
    sockets and of the created HTTP client (``True``, ``False``, a CA bundle path or an
    ``ssl.SSLContext``). ``on_transport_event`` receives the ``http:*`` events (wire 11, D24);
    it may be a coroutine function. Construction does no I/O and needs no running trio loop;
    the operations must run inside ``trio.run``. The client's background work (D22) runs in
    trio system tasks owned by the client, and ``aclose`` awaits it (at most 10 s).
    """

    _driver_class: ClassVar[Any] = Driver
    _watch_class: ClassVar[Any] = ChatWatch

    @staticmethod
    def _make_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
        return transport_sink(callback)

    @staticmethod
    async def _to_thread(fn: Callable[..., Any], /, *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args)

    def watch_chats(self, *, backoff: WatchBackoff | None = None) -> ChatWatch:
        """Lifecycle events of every chat visible to the user (wire 6): use as
        ``async with client.watch_chats() as watch: async for event in watch``."""
        if self.driver.closed:
            raise CoderAgentError("this client is closed")
        return ChatWatch(self, backoff=backoff)
