"""Transport event delivery (wire 11; D24)."""

from __future__ import annotations

from typing import Any

from coder_proto import SegmentStartEvent, WsDialEvent
from coder_proto._transport_events import TransportEventSink


def test_no_callback_means_disabled_and_emit_is_a_no_op() -> None:
    sink = TransportEventSink()
    assert sink.enabled is False and sink.now() == 0.0
    sink.emit(SegmentStartEvent(segment=1))


def test_events_are_delivered_with_injected_wall_clock() -> None:
    seen: list[Any] = []
    sink = TransportEventSink(seen.append, wall_clock=lambda: 123.5)
    assert sink.enabled
    sink.emit(
        WsDialEvent(
            chat_id="c",
            reader=1,
            attempt=1,
            url="wss://h/api/v2/chats/c/stream",
            timestamp=sink.now(),
        )
    )
    assert seen[0].type == "ws:dial" and seen[0].timestamp == 123.5


def test_handler_exceptions_are_swallowed_wire_11() -> None:
    def boom(event: object) -> None:
        raise RuntimeError("handler bug")

    TransportEventSink(boom).emit(SegmentStartEvent(segment=1, chat_id="c"))
