"""``CoderChatClient``, blocking: every raw chat operation as a plain method (wire 2, 6, 7, 8,
9; D4, D10, D11, D16, D17, D20-D24).

The operations are defined once in the core (``coder_proto._shells.client_calls.ChatOperations``: signatures,
docstrings, argument checks, the machine each one runs); this module turns each into a
blocking method that performs it in the calling thread: the file of an upload is read, the
machine is built under the driver's lock and run on the client's ``Driver``. The client
holds the state wire 1 gives a client: one ``PrefixSelector`` (the negotiated chat prefix)
and one ``http:*`` event counter.

Threads: a client may be shared between threads when its ``httpx.Client`` may be (the one it
creates is): each thread performs its own requests, and the machines (with the prefix
negotiation they share) are stepped under the driver's lock.
"""

from __future__ import annotations

from typing import ClassVar

from coder_proto.adapter import standalone_watch

from ._driver import Driver
from ._sync import client
from .watch import ChatWatch

__all__ = ["CoderChatClient", "watch_chats"]


class CoderChatClient(client.CoderChatClient):
    """The raw Coder chat API, blocking.

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (explicit
    values win; a missing one raises ``CoderAgentError``); one trailing ``/`` is removed.
    ``http_client`` (an ``httpx.Client``) is used as given (its transport, headers and
    timeouts; D23) and never closed by this client; otherwise one is created (30 s connect
    timeout) and closed by ``close()`` / ``with``. ``verify`` is the TLS setting
    of the stream sockets and of the created HTTP client (``True``, ``False``, a CA bundle
    path or an ``ssl.SSLContext``). A REST call no other deadline bounds ends within
    ``http_timeout`` seconds (60; ``None`` for none, D29), however slowly the server answers,
    and reads at most ``max_response_bytes`` of body (32 MiB; a larger one fails the call
    with ``CoderProtocolError``, D30). ``on_transport_event`` receives the ``http:*`` events
    (wire 11, D24); it must be a plain function. ``prefix`` pins the chat prefix (otherwise it
    is negotiated, wire 1.4). ``recorder`` (a ``coder_proto.transcript.Recorder``) is told
    what crosses the wire (``docs/transcripts.md``). Construction does no I/O. The token never
    appears in a repr, an error, a log record or an event.
    """

    _driver_class: ClassVar[type[Driver]] = Driver
    _watch_class: ClassVar[type[ChatWatch]] = ChatWatch


#: The standalone watch (wire 1.5, 6): a ``ChatWatch`` over a client of its own.
watch_chats = standalone_watch(CoderChatClient, ChatWatch)
