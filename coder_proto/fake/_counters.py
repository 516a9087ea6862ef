"""What the fake Coder server saw: ``FakeCounters`` and its ``RequestRecord`` log.

Requests per operation, stream dials per chat, open streams and (kept by the serving loop)
open connections, so tests can prove nothing leaked. The token is never recorded.
"""

from __future__ import annotations

from collections import Counter

import attrs

__all__ = ["FakeCounters", "RequestRecord"]


@attrs.frozen(kw_only=True)
class RequestRecord:
    """One request as the server answered it (the token is never recorded)."""

    method: str
    path: str
    op: str
    status: int


@attrs.define
class FakeCounters:
    """What the server saw. The adapter keeps the connection counts."""

    requests: Counter[str] = attrs.Factory(Counter)
    request_log: list[RequestRecord] = attrs.Factory(list)
    stream_dials: Counter[str] = attrs.Factory(Counter)
    streams_accepted: Counter[str] = attrs.Factory(Counter)
    watch_dials: int = 0
    open_streams: int = 0
    open_watches: int = 0
    open_connections: int = 0
    open_websockets: int = 0
    total_connections: int = 0
    max_request_log: int = 10_000

    def record(self, method: str, path: str, op: str, status: int) -> None:
        self.requests[op] += 1
        if len(self.request_log) >= self.max_request_log:
            del self.request_log[: self.max_request_log // 2]
        self.request_log.append(RequestRecord(method=method, path=path, op=op, status=status))
