"""The pure side of the raw chat client: settings, one small machine per REST operation, and
the facts every adapter's driver needs (wire 1, 2, 7, 8, 9; D16, D17, D20, D23, D24).

An adapter's ``CoderChatClient`` stays a thin shell: each ``async``/blocking method builds one
of the machines below and hands it to its driver, which sends the requests and feeds the
answers back. Everything a method would otherwise decide lives here:

* ``ClientSettings.resolve`` applies the ``CODER_URL`` / ``CODER_SESSION_TOKEN`` defaults
  (explicit values win) and removes one trailing ``/`` (wire 1.1);
* ``RestJob`` runs one REST call through the client's ``PrefixSelector`` (wire 1.4) and
  classifies the answer with the operation's ``parse_*`` function (wire 2, 10);
* ``ModelConfigsJob`` / ``ResolveModelJob`` list model configs and resolve a hint with the
  org route and its legacy fallback (wire 8, D16);
* ``PreviewUrlJob`` / ``SharePortJob`` are the workspace helpers (wire 9: no prefix, no
  transport events);
* ``plan_upload`` turns bytes, a path or a file object into what the adapter must read and
  the media type and name the upload carries (wire 7, D20).

``emits_transport_events`` says which requests a driver reports as ``http:*`` events (wire 9,
11), and ``CONNECT_TIMEOUT`` is the connect bound of D23, so no driver carries policy of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Final, Generic, TypeVar

from .errors import CoderAgentError
from .machine import CoreMachine
from .prefix import PrefixSelector
from .rest import HttpRequest, HttpResponse

__all__ = [
    "CONNECT_TIMEOUT",
    "UNOBSERVED_OPS",
    "RestJob",
    "emits_transport_events",
]

R = TypeVar("R")

#: D23: the connect timeout of the HTTP clients an adapter creates (no read timeout: the
#: core's deadlines bound every wait) and of the stream sockets it opens.
CONNECT_TIMEOUT: Final = 30.0

#: Operations that emit no ``http:*`` events: the workspace helpers (wire 9, 11).
UNOBSERVED_OPS: Final = frozenset({"get_workspace", "get_app_host", "share_port"})


def emits_transport_events(request: HttpRequest) -> bool:
    """True when a driver reports ``request`` as ``http:request`` / ``http:response`` /
    ``http:error`` events (wire 11, D24): every REST call except the workspace helpers
    (wire 9)."""
    return request.op not in UNOBSERVED_OPS


class RestJob(CoreMachine[R], Generic[R]):
    """One REST operation (wire 2): send ``request`` through the client's prefix selector
    (wire 1.4; requests outside the chat routes pass through unchanged) and classify the
    conclusive answer with ``parse`` (a ``parse_*`` function of ``coder_proto.operations``).
    ``result()`` is the parsed value or raises its ``CoderApiError`` / ``CoderNetworkError`` /
    ``CoderProtocolError``."""

    def __init__(
        self,
        selector: PrefixSelector,
        request: HttpRequest,
        parse: Callable[[HttpRequest, HttpResponse], R],
        *,
        now: float,
    ) -> None:
        if not isinstance(request, HttpRequest):
            raise CoderAgentError("RestJob needs an HttpRequest")
        super().__init__(selector)
        self.request = request
        self._parse = parse
        self._start(now)

    def __repr__(self) -> str:
        return f"RestJob(op={self.request.op!r}, done={self.done})"

    def _run(self) -> Generator[None, None, R]:
        return (yield from self._rest(self.request, self._parse))
