"""``CoderChatClient`` on trio: every raw chat operation as an ``async`` method (wire 2, 6, 7,
8, 9; D4, D10, D11, D16, D17, D20-D24; ``coder_io_common._async.client``), and the standalone
``watch_chats``."""

from __future__ import annotations

from typing import ClassVar

from coder_io_common._async import client
from coder_proto.adapter import standalone_watch

from ._runtime import Driver
from .watch import ChatWatch

__all__ = ["CoderChatClient", "watch_chats"]


class CoderChatClient(client.CoderChatClient):
    """The raw Coder chat API on trio (the same methods and arguments as on asyncio).

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN``;
    ``http_client`` (an ``httpx.AsyncClient``, which runs on trio) is used as given and never
    closed here, otherwise one is created (no read timeout, 30 s connect timeout, D23) and
    closed by ``aclose()`` / ``async with``. ``verify`` is the TLS setting of the stream
    sockets and of the created HTTP client (``True``, ``False``, a CA bundle path or an
    ``ssl.SSLContext``). ``on_transport_event`` receives the ``http:*`` events (wire 11, D24);
    it may be a coroutine function. ``prefix`` pins the chat prefix (otherwise it is
    negotiated, wire 1.4). ``recorder`` records a transcript. Construction does no I/O and
    needs no running trio loop; the operations must run inside ``trio.run``. The client's
    background work (D22) runs in trio system tasks owned by the client, and ``aclose`` awaits
    it (at most 10 s).
    """

    _driver_class: ClassVar[type[Driver]] = Driver
    _watch_class: ClassVar[type[ChatWatch]] = ChatWatch


#: The standalone watch (wire 1.5, 6): a trio ``ChatWatch`` over a client of its own.
watch_chats = standalone_watch(CoderChatClient, ChatWatch)
