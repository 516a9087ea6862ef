"""The deadline of the REST call the current thread performs (D29), shared by the blocking
driver, which sets it around each call, and the bounded transport of the clients it creates
(``coder_io_sync._transport``), which cuts every read, write and connect to what is left of
it."""

from __future__ import annotations

import threading
import time

__all__ = ["CALL_DEADLINE", "left"]


class _CallDeadline(threading.local):
    """The deadline of the REST call the current thread performs (``None``: none)."""

    at: float | None = None


CALL_DEADLINE = _CallDeadline()


def left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the current call's deadline; ``error`` when none
    is left. Every read and write of a REST call goes through here, so a server that trickles
    bytes, floods ``100 Continue`` or never ends a body cannot extend the call (D29)."""
    at = CALL_DEADLINE.at
    if at is None:
        return timeout
    remaining = at - time.monotonic()
    if remaining <= 0:
        raise error("the request did not finish within its deadline")
    return remaining if timeout is None else min(timeout, remaining)
