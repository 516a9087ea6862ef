"""Effects the durable programs yield besides store calls (``coder_proto.durable._store``):
the wall clock, a pause, and a tool function's invocation. An adapter's trampoline performs
them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["Invoke", "Sleep", "WallClock"]


@attrs.frozen
class WallClock:
    """Send back the wall clock, in seconds since the epoch."""


@attrs.frozen
class Sleep:
    """Wait ``seconds`` (the runtime's sleep; its cancellation applies), then send back
    ``None``."""

    seconds: float


@attrs.frozen
class Invoke:
    """Call the tool's function with ``args`` / ``kwargs`` (await the value when it is
    awaitable) and send back what it returned; an exception is thrown back in."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
