"""Wall-clock readings the core takes as inputs (it never reads a clock itself): the
timestamp of a transcript's header (``docs/transcripts.md``) and of transport events (D24)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

from coder_proto.adapter import TransportEventSink

__all__ = ["created_at", "event_sink"]


def created_at() -> str:
    """The wall-clock timestamp of a transcript header (UTC, ISO 8601, seconds)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def event_sink(deliver: Callable[[Any], object] | None = None) -> TransportEventSink:
    """A transport-event sink stamping events with ``time.time`` (D24), delivering to
    ``deliver`` (none: events are not built at all)."""
    if deliver is None:
        return TransportEventSink(wall_clock=time.time)
    return TransportEventSink(deliver, wall_clock=time.time)
