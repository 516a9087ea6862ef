"""The core's I/O vocabulary: what a machine asks its adapter to do, and what comes back.

Every connection-owning machine of the core (the stream reader, the segment and turn
machines, the watch machine) speaks the same small language, in the style of aioquic and
websockets:

* **inputs** are method calls that carry the current monotonic time ``now`` (seconds):
  ``connection_made(conn_id, now)``, ``connection_failed(conn_id, message, now)``,
  ``data_received(conn_id, data, now)``, ``connection_lost(conn_id, now)``,
  ``response_received(request_id, response, now)``, ``request_failed(request_id, message,
  now)`` and ``tick(now)``;
* **outputs** are the actions below, drained with ``actions()``, plus ``next_deadline()`` (the
  monotonic time at which the adapter must call ``tick``, or ``None``).

Machines that run a whole agent turn add three actions: ``RunTools`` (run client tools and
report ``tool_results(outcomes, now)``), ``RunInBackground`` (drive another machine on the side,
fire-and-forget: interrupts and withdrawals, D22) and ``CancelRequest`` (an outstanding request
no longer matters). Every such machine satisfies the ``Machine`` protocol, so one small driving
loop per runtime serves all of them.

An adapter performs each action, feeds the outcome back as an input, and calls ``tick`` when
the deadline passes. It never decides anything itself: retries, status checks and cursors are
the core's business (docs/architecture.md rule 1).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias

import attrs

from ._errors import CoderAgentError
from ._outputs import ToolCall
from ._rest.http import HttpRequest, HttpResponse

__all__ = [
    "Action",
    "CancelRequest",
    "CloseConnection",
    "Machine",
    "OpenConnection",
    "RunInBackground",
    "RunTools",
    "SendData",
    "SendRequest",
    "ToolOutcome",
]


@attrs.frozen(kw_only=True)
class OpenConnection:
    """Open a TCP connection to ``host:port`` (TLS when ``tls``, verifying
    ``server_hostname``), then report ``connection_made`` or ``connection_failed``. Bytes that
    arrive are reported with ``data_received``; end of stream with ``connection_lost``."""

    conn_id: int
    host: str
    port: int
    tls: bool
    server_hostname: str | None = None


@attrs.frozen(kw_only=True)
class SendData:
    """Write ``data`` to connection ``conn_id``."""

    conn_id: int
    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")


@attrs.frozen(kw_only=True)
class CloseConnection:
    """Close connection ``conn_id`` (after writing anything queued before it). No
    ``connection_lost`` input is expected afterwards."""

    conn_id: int


@attrs.frozen(kw_only=True)
class SendRequest:
    """Send a REST request (the adapter adds the session token header), then report
    ``response_received`` or ``request_failed`` with the same ``request_id``."""

    request_id: int
    request: HttpRequest


@attrs.frozen(kw_only=True)
class CancelRequest:
    """Abandon request ``request_id``: its outcome no longer matters (a lost race, a segment
    that ended). No input is expected for it afterwards; one that arrives anyway is ignored."""

    request_id: int


@attrs.frozen(kw_only=True)
class ToolOutcome:
    """The outcome of one client tool call, as the adapter reports it (D5).

    ``output`` is any JSON value. A tool that raised, failed input validation or is not
    registered reports ``is_error=True`` with a string ``output`` describing the failure.
    """

    tool_call_id: str
    output: Any
    is_error: bool = False


@attrs.frozen(kw_only=True)
class RunTools:
    """Run these client tool calls (the adapter owns the callables and input validation), then
    report ``tool_results(outcomes, now)`` with one ``ToolOutcome`` per call. ``input`` of each
    call is JSON text (the raw ``action_required`` args)."""

    calls: tuple[ToolCall, ...]


class Machine(Protocol):
    """What every driveable machine of the core offers its adapter."""

    @property
    def done(self) -> bool: ...

    def actions(self) -> list[Action]: ...

    def next_deadline(self) -> float | None: ...

    def tick(self, now: float) -> None: ...

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None: ...

    def request_failed(self, request_id: int, message: str | CoderAgentError, now: float) -> None: ...


@attrs.frozen(kw_only=True)
class RunInBackground:
    """Drive ``job`` on the side, fire-and-forget: nobody awaits its outcome, but the adapter
    keeps it alive until it is done (the job bounds itself, 10 s for interrupts and
    withdrawals) and awaits every such job when the agent closes (D22). Re-raising a caller's
    cancellation never waits for it."""

    job: Machine


Action: TypeAlias = (
    OpenConnection
    | SendData
    | CloseConnection
    | SendRequest
    | CancelRequest
    | RunTools
    | RunInBackground
)
"""What a core machine's ``actions()`` hands its driver: ``Connection.perform`` turns each into
commands."""
