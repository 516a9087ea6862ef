"""``CoderChatClient`` on trio: every raw chat operation as an ``async`` method (wire 2, 6, 7,
8, 9; D4, D10, D11, D16, D17, D20-D24).

The operations are the core's (``coder_proto._shells.client_calls``) and their ``async`` bodies are
runtime-neutral, so this class is ``coder_io_asyncio``'s with the trio driver
(``coder_io_trio._driver``), trio worker threads for file reads and a trio watch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import trio

from coder_io_asyncio import client as _asyncio_client
from coder_proto._shells.watch_feed import standalone_watch
from coder_proto._transport_events import TransportEventSink

from ._driver import Driver, transport_sink
from .watch import ChatWatch

__all__ = ["CoderChatClient", "watch_chats"]


class CoderChatClient(_asyncio_client.CoderChatClient):
    """The raw Coder chat API on trio (the same methods and arguments as on asyncio).

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN``;
    ``http_client`` (an ``httpx.AsyncClient``, which runs on trio) is used as given and never
    closed here, otherwise one is created (no read timeout, 30 s connect timeout, D23) and
    closed by ``aclose()`` / ``async with``. ``verify`` is the TLS setting of the stream
    sockets and of the created HTTP client (``True``, ``False``, a CA bundle path or an
    ``ssl.SSLContext``). ``on_transport_event`` receives the ``http:*`` events (wire 11, D24);
    it may be a coroutine function. ``recorder`` records a transcript. Construction does no
    I/O and needs no running trio loop; the operations must run inside ``trio.run``. The
    client's background work (D22) runs in trio system tasks owned by the client, and
    ``aclose`` awaits it (at most 10 s).
    """

    _driver_class: ClassVar[Any] = Driver
    _watch_class: ClassVar[Any] = ChatWatch

    @staticmethod
    def _make_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
        return transport_sink(callback)

    @staticmethod
    async def _to_thread(fn: Callable[..., Any], /, *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args)

    def _setup(self) -> None:
        """httpx runs on trio without anyio's asyncio backend: nothing to load."""


#: The standalone watch (wire 1.5, 6): a trio ``ChatWatch`` over a client of its own.
watch_chats = standalone_watch(CoderChatClient, ChatWatch)
