"""Chat route prefix negotiation: ``/api/v2/chats`` first, ``/api/experimental/chats`` on
older servers (wire 1.3-1.5).

One ``PrefixSelector`` is shared by every REST call of one client. It holds the client's only
piece of negotiation state, the locked prefix, which starts unset and is set at most once: the
first *conclusive* answer wins and is never overwritten or renegotiated.

Each call runs as a ``PrefixedExchange``, a small sans-I/O machine::

    exchange = selector.begin(request)           # request built with the v2 path
    send(exchange.request)
    outcome = exchange.on_response(response)     # or exchange.on_network_error(message)
    # Retry(request)     -> send outcome.request and feed its answer to the same exchange
    # Completed(request, response) -> the HTTP answer the operation classifies (any status)
    # Failed(error)      -> no HTTP answer for the operation: raise outcome.error

``Completed`` carries every conclusive HTTP answer, 2xx or not, together with the request that
produced it, so the operation's own classifier (``coder_proto._rest.routes``) is the single place
that turns a status into a typed result or a ``CoderApiError``; that is where op-specific rules
such as D10 (an already-archived chat counts as archived) live. When both prefixes answer 404,
``Completed`` carries the *original v2* request and 404, so the error raised names the v2 path
(wire 1.4). ``Failed`` is only ever a ``CoderNetworkError`` (the request got no response).

Requests outside the chat routes (model listing, workspace helpers) pass through unchanged and
never read or set the lock (wire 1.3, D16).
"""

from __future__ import annotations

import logging
from typing import Final, TypeAlias

import attrs

from .._constants import LEGACY_PREFIX, V2_PREFIX
from .._errors import CoderAgentError, CoderApiError, CoderNetworkError
from .http import HttpRequest, HttpResponse, api_error_from_response

__all__ = [
    "PREFLIGHT_OPS",
    "Completed",
    "ExchangeOutcome",
    "Failed",
    "PrefixSelector",
    "PrefixedExchange",
    "Retry",
    "network_error",
    "participates",
    "preflight_error",
]

logger = logging.getLogger("coder_proto")

#: Operations that preflight the prefix before they dial or stream a body (wire 1.5, D24).
PREFLIGHT_OPS: Final = frozenset({"stream_events", "watch_chats", "upload_chat_file"})

_PROBE_WITHOUT_PREFIX: Final = "Chat route probe succeeded without a prefix"


def _split_query(path: str) -> tuple[str, str]:
    route, sep, query = path.partition("?")
    return route, sep + query


def participates(path: str) -> bool:
    """True when ``path`` (query ignored) is ``/api/v2/chats`` or lies below it: only those
    requests take part in prefix selection (wire 1.3)."""
    route, _ = _split_query(path)
    return route == V2_PREFIX or route.startswith(V2_PREFIX + "/")


def _with_prefix(request: HttpRequest, prefix: str) -> HttpRequest:
    if prefix == V2_PREFIX:
        return request
    return request.with_path(prefix + request.path[len(V2_PREFIX) :])


def network_error(request: HttpRequest, message: str) -> CoderNetworkError:
    """The ``CoderNetworkError`` for a request that got no response (D21): retryable, with the
    method and the path actually requested. ``message`` describes the transport failure and
    must not contain credentials (the adapter passes the exception text of its HTTP client)."""
    text = f"Coder API {request.method} {request.path} request failed: {message or 'network error'}"
    return CoderNetworkError(text, method=request.method, path=request.path)


@attrs.frozen
class Completed:
    """The exchange is over and ``response`` (any status) is the answer to ``request``, the
    request that produced it; classify it with the operation's parser."""

    request: HttpRequest
    response: HttpResponse

    @property
    def ok(self) -> bool:
        return self.response.ok


@attrs.frozen
class Retry:
    """Send ``request`` (the legacy-prefix fallback) and feed its outcome to the same
    exchange."""

    request: HttpRequest


@attrs.frozen
class Failed:
    """The exchange ended without an HTTP answer for the operation; raise ``error``."""

    error: CoderAgentError


ExchangeOutcome: TypeAlias = Completed | Retry | Failed

# Exchange phases.
_DIRECT: Final = "direct"  # not a chat route, or the prefix was locked at begin()
_V2: Final = "v2"  # negotiating: the v2 attempt is in flight
_LEGACY: Final = "legacy"  # negotiating: the legacy fallback is in flight
_DONE: Final = "done"


class PrefixedExchange:
    """One REST call through the selector (wire 1.4). Feed it the outcome of ``request``
    until it returns ``Completed`` or ``Failed``; feeding it after that raises
    ``CoderAgentError``. Exchanges are independent of each other: concurrent calls may probe
    at the same time, and the first conclusive answer among them sets the lock."""

    __slots__ = ("_original", "_phase", "_selector", "_v2_answer", "request")

    def __init__(self, selector: PrefixSelector, request: HttpRequest) -> None:
        self._selector = selector
        self._original = request
        self._v2_answer: Completed | None = None
        #: The request to send now (after ``Retry``, the fallback request).
        self.request: HttpRequest
        locked = selector.prefix
        if not participates(request.path):
            self._phase = _DIRECT
            self.request = request
        elif locked is not None:
            # Rule 1: a locked client sends once to the locked prefix, never falls back.
            self._phase = _DIRECT
            self.request = _with_prefix(request, locked)
        else:
            self._phase = _V2
            self.request = request

    @property
    def done(self) -> bool:
        return self._phase == _DONE

    @property
    def negotiating(self) -> bool:
        """True while this exchange is probing (the prefix was unset when it began)."""
        return self._phase in (_V2, _LEGACY)

    def _finish(self, outcome: Completed | Failed) -> Completed | Failed:
        self._phase = _DONE
        return outcome

    def on_response(self, response: HttpResponse) -> ExchangeOutcome:
        """Feed the HTTP response to ``request`` (any status); implements wire 1.4."""
        phase = self._phase
        if phase == _DONE:
            raise CoderAgentError("this request exchange has already finished")
        sent = self.request
        if phase == _DIRECT:
            return self._finish(Completed(sent, response))
        selector = self._selector
        if phase == _V2:
            if response.status != 404:
                # 2xx, or any HTTP error but 404: proof that the v2 routes exist.
                selector._lock(V2_PREFIX)
                return self._finish(Completed(sent, response))
            if selector.prefix == V2_PREFIX:
                # A concurrent call proved v2 meanwhile: this 404 is the answer itself.
                return self._finish(Completed(sent, response))
            self._v2_answer = Completed(sent, response)
            self._phase = _LEGACY
            self.request = _with_prefix(self._original, LEGACY_PREFIX)
            return Retry(self.request)
        # phase == _LEGACY
        if response.status == 404:
            # Neither prefix has the route: raise the original v2 404, leave the lock unset.
            assert self._v2_answer is not None  # set on the way into the legacy phase
            return self._finish(self._v2_answer)
        selector._lock(LEGACY_PREFIX)
        return self._finish(Completed(sent, response))

    def on_network_error(self, message: str) -> Failed:
        """Feed a failure without a response (connection refused, reset, DNS, TLS, a client
        timeout). Never locks: the error names the request that failed (wire 1.4)."""
        if self._phase == _DONE:
            raise CoderAgentError("this request exchange has already finished")
        self._phase = _DONE
        return Failed(network_error(self.request, message))


class PrefixSelector:
    """The client's chat-prefix state (wire 1.4): ``prefix`` is ``None`` (unset),
    ``"/api/v2/chats"`` or ``"/api/experimental/chats"``. A set prefix never changes.

    ``initial`` pins the prefix up front (for example a standalone stream helper that assumes
    v2, wire 1.5, or a client restored with a known prefix).

    The selector is also where the client keeps the one other fact it learns from the
    deployment once: ``default_organization_id``, the organization ``GET /api/v2/users/me``
    named (D33; ``coder_proto._jobs.organization``), ``None`` until it was asked.
    """

    __slots__ = ("_prefix", "default_organization_id", "organization_lookups")

    def __init__(self, initial: str | None = None) -> None:
        if initial not in (None, V2_PREFIX, LEGACY_PREFIX):
            raise CoderAgentError(
                f"unknown chat prefix {initial!r}: expected {V2_PREFIX!r} or {LEGACY_PREFIX!r}"
            )
        self._prefix: str | None = initial
        #: The organization new chats default to (D33), once ``users/me`` answered.
        self.default_organization_id: str | None = None
        #: ``users/me`` requests in flight for it (D33): later calls wait for their answer.
        self.organization_lookups = 0

    @property
    def prefix(self) -> str | None:
        """The locked prefix, or ``None`` while negotiation is open."""
        return self._prefix

    @property
    def needs_preflight(self) -> bool:
        """True while the prefix is unset: a WebSocket dial or a one-shot streamed upload must
        first run ``preflight_request`` through ``begin`` (wire 1.5)."""
        return self._prefix is None

    def _lock(self, prefix: str) -> None:
        # "Lock X" = set only if still unset: a late answer never overwrites the first lock.
        if self._prefix is None:
            self._prefix = prefix
            logger.debug("chat route prefix locked to %s", prefix)

    def begin(self, request: HttpRequest) -> PrefixedExchange:
        """Start one REST call. ``request`` must be built with the v2 path; it is rewritten to
        the locked prefix when one is set, and negotiated when not (wire 1.3-1.4)."""
        return PrefixedExchange(self, request)

    def preflight_request(self, op: str) -> HttpRequest:
        """The preflight probe ``GET /api/v2/chats`` stamped with ``op`` (``stream_events``,
        ``watch_chats`` or ``upload_chat_file``); run it through ``begin`` and hand the final
        ``Completed`` to ``preflight_result`` (wire 1.5)."""
        if op not in PREFLIGHT_OPS:
            raise CoderAgentError(
                f"{op!r} does not preflight the chat prefix; expected one of "
                f"{', '.join(sorted(PREFLIGHT_OPS))}"
            )
        return HttpRequest.build(op, "GET", V2_PREFIX)

    def preflight_result(self, completed: Completed) -> str:
        """The prefix to use after a preflight answered ``completed`` (its body is discarded).

        A non-2xx answer raises its ``CoderApiError`` (both prefixes 404 -> the v2 404); a
        success that somehow left the prefix unset raises the defensive guard of wire 1.5.
        """
        if not completed.ok:
            raise preflight_error(completed)
        return self.require_prefix()

    def require_prefix(self) -> str:
        """The locked prefix; ``CoderAgentError("Chat route probe succeeded without a prefix")``
        when none is set (the guard of wire 1.5)."""
        if self._prefix is None:
            raise CoderAgentError(_PROBE_WITHOUT_PREFIX)
        return self._prefix

    def __repr__(self) -> str:
        return f"PrefixSelector(prefix={self._prefix!r})"


def preflight_error(completed: Completed) -> CoderApiError:
    """The error a failed preflight raises: the answer's ``CoderApiError`` (wire 1.5)."""
    return api_error_from_response(completed.request, completed.response)
