"""``CoderChatClient`` on asyncio: every raw chat operation as an ``async`` method (wire 2, 6,
7, 8, 9; D4, D10, D11, D16, D17, D20-D24; ``coder_io_common._async.client``), and the
standalone ``watch_chats``."""

from __future__ import annotations

from typing import ClassVar

from coder_io_common._async import client
from coder_proto.adapter import standalone_watch

from ._runtime import Driver
from .watch import ChatWatch

__all__ = ["CoderChatClient", "watch_chats"]


class CoderChatClient(client.CoderChatClient):
    """The raw Coder chat API on asyncio.

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (explicit
    values win; a missing one raises ``CoderAgentError``); one trailing ``/`` is removed.
    ``http_client`` (an ``httpx.AsyncClient``) is used as given (its transport, headers and
    timeouts; D23) and never closed by this client; otherwise one is created (no read timeout,
    30 s connect timeout) and closed by ``aclose()`` / ``async with``. ``verify`` is the TLS
    setting of the stream sockets and of the created HTTP client (``True``, ``False``, a CA
    bundle path or an ``ssl.SSLContext``). ``on_transport_event`` receives the ``http:*``
    events (wire 11, D24); it may be a coroutine function. ``prefix`` pins the chat prefix
    (otherwise it is negotiated, wire 1.4). ``recorder`` (a
    ``coder_proto.transcript.Recorder``) is told what crosses the wire
    (``docs/transcripts.md``). Construction does no I/O. The token never appears in a repr,
    an error, a log record or an event.
    """

    _driver_class: ClassVar[type[Driver]] = Driver
    _watch_class: ClassVar[type[ChatWatch]] = ChatWatch


#: The standalone watch (wire 1.5, 6): a ``ChatWatch`` over a client of its own.
watch_chats = standalone_watch(CoderChatClient, ChatWatch)
