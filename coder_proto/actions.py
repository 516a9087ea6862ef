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

An adapter performs each action, feeds the outcome back as an input, and calls ``tick`` when
the deadline passes. It never decides anything itself: retries, status checks and cursors are
the core's business (DESIGN rule 1).
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from .rest import HttpRequest

__all__ = [
    "Action",
    "CloseConnection",
    "OpenConnection",
    "SendData",
    "SendRequest",
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


Action: TypeAlias = OpenConnection | SendData | CloseConnection | SendRequest
