"""The runtime-independent half of every adapter's ``CoderChatClient`` (docs/architecture.md "Public API";
wire 1.1, 1.4, 11): the constructor (settings, the prefix state, the ``http:*`` event sink,
the driver) and the read-only facts. An adapter subclasses ``ClientShell`` with its driver
class and event-sink factory and turns each ``ChatCalls`` operation into a method that
performs the call.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .._jobs.organization import organization_from_env
from .._rest.prefix import PrefixSelector
from .._rest.settings import HTTP_TIMEOUT, MAX_RESPONSE_BYTES, ClientSettings
from .._transport_events import TransportEventSink
from .client_calls import ChatCalls

if TYPE_CHECKING:
    from .._recording import Recorder

__all__ = ["ClientShell"]


HttpClientT = TypeVar("HttpClientT")


class ClientShell(Generic[HttpClientT]):
    """The runtime-independent half of every adapter's ``CoderChatClient``: the constructor
    (settings, wire 1.1; the prefix state, wire 1.4; the ``http:*`` event sink, wire 11; the
    driver) and the read-only facts. An adapter subclasses it with its driver class
    (``_driver_class``) and event-sink factory (``_make_sink``), and turns each ``ChatCalls``
    method into a method that performs the call.

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (explicit
    values win; a missing one raises ``CoderAgentError``); one trailing ``/`` is removed.
    Calls that name no organization use ``CODER_ORGANIZATION_ID`` (or ``CODER_ORG_ID``), else
    the signed-in user's first organization, asked once per client (D33).
    ``http_client`` is used as given (its transport, headers and timeouts; D23) and never
    closed by the client. ``verify`` is the TLS setting of the stream sockets and of a created
    HTTP client (``True``, ``False``, a CA bundle path or an ``ssl.SSLContext``).
    ``on_transport_event`` receives the ``http:*`` events (wire 11, D24). ``prefix`` pins the
    chat prefix (otherwise it is negotiated, wire 1.4). ``recorder`` (a
    ``coder_proto.transcript.Recorder``) is told what crosses the wire. Construction does no
    I/O. The token never appears in a repr, an error, a log record or an event.
    ``http_timeout`` bounds a REST call no other deadline bounds (60 s; ``None`` for none,
    D29) and ``max_response_bytes`` the response bodies read (32 MiB, D30); the adapter's
    driver applies them (``self.settings``).
    """

    #: The adapter's driver class: ``(base_url=, token=, http_client=, verify=, sink=,
    #: recorder=)``.
    _driver_class: ClassVar[Callable[..., Any]]

    @staticmethod
    def _make_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
        raise NotImplementedError

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        http_client: HttpClientT | None = None,
        verify: Any = True,
        on_transport_event: Callable[[Any], object] | None = None,
        prefix: str | None = None,
        recorder: Recorder | None = None,
        http_timeout: float | None = HTTP_TIMEOUT,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.settings = ClientSettings.resolve(
            base_url,
            token,
            environ=os.environ,
            http_timeout=http_timeout,
            max_response_bytes=max_response_bytes,
        )
        #: The client's chat-prefix negotiation state (wire 1.4): one per client.
        self.selector = PrefixSelector(prefix)
        # D33: the organization calls that name none use; without either variable, the first
        # such call asks GET /api/v2/users/me.
        self.selector.default_organization_id = organization_from_env(os.environ)
        self.sink = self._make_sink(on_transport_event)
        self.driver: Any = self._driver_class(
            base_url=self.settings.base_url,
            token=self.settings.token,
            http_client=http_client,
            verify=verify,
            sink=self.sink,
            recorder=recorder,
            selector=self.selector,
        )
        self._calls = ChatCalls(self.selector, self.settings.base_url)
        self._setup()

    def _setup(self) -> None:
        """For the adapter: work of its own at the end of construction (no I/O)."""

    def __repr__(self) -> str:
        return f"<CoderChatClient {self.settings.base_url} prefix={self.selector.prefix!r}>"

    @property
    def base_url(self) -> str:
        """The deployment URL (one trailing ``/`` removed)."""
        return self.settings.base_url

    @property
    def prefix(self) -> str | None:
        """The negotiated chat prefix, ``None`` until the first conclusive answer."""
        return self.selector.prefix
