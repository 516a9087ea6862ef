"""Conformance: every ``dedup-*`` case through a real ``StreamReader`` (FORMAT.md 4.2; state
machines B.2, C.2; wire 4.5, 5, 11).

Each case's ``wire`` is replayed over in-memory WebSocket connections with a fake clock:
``frame`` entries are sent as text frames (a JSON array, as chatd sends them), a ``drop`` ends
the connection (code 1006 = end of stream without a close frame; any other code = a server
close frame with that code), after which the reader's own backoff deadline is awaited and the
next connection is accepted. Verdicts come from the ``ws:event`` transport events (wire 11);
``progress`` is read from the reader's progress counter while each event is reported.

``test_dedup_reader`` checks ``verdicts``, ``redials``, ``readerError`` and, where recorded,
``sockets`` and ``interruptRequests`` exactly. ``test_dedup_turn`` checks the ``turn``
expectation by translating the forwarded events with the model-loop rule (FORMAT.md 4.7);
it needs ``coder_proto._stream.translator`` and skips with the reason when that is not importable.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from coder_proto import WsEventEvent, WsRedialEvent
from coder_proto._actions import SendRequest
from coder_proto._stream.reader import StreamReader
from coder_proto._transport_events import TransportEventSink
from coder_proto._wire import MessageEvent, MessagePartEvent, StreamEvent
from tests.test_reader import Net

from .cases import cases, load

CHAT_ID = "chat-1"
#: FORMAT.md 3: code 1006 means the server or network dropped the socket (no close frame).
ABNORMAL_CLOSURE = 1006


class Replay:
    """The outcome of one case's wire through a reader."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.case = case
        self.verdicts: list[dict[str, Any]] = []
        self.redials: list[dict[str, Any]] = []
        self._progress_seen = 0
        sink = TransportEventSink(self._observe)
        self.reader = StreamReader(
            chat_id=CHAT_ID,
            base_url="https://coder.example.com",
            prefix="/api/v2/chats",
            after_id=case["input"]["afterId"],
            token="conformance-token",
            reader_id=1,
            sink=sink,
        )
        self.net = Net(self.reader, now=0.0)
        self.forwarded: list[StreamEvent] = []
        self.dials = 0
        self._run()

    def _observe(self, event: Any) -> None:
        if event.type == "ws:dial":
            self.dials += 1
        elif isinstance(event, WsEventEvent):
            progress = self.reader.progress_events > self._progress_seen
            self._progress_seen = self.reader.progress_events
            verdict: dict[str, Any] = {
                "attempt": event.attempt,
                "type": event.event.type,
                "forwarded": event.forwarded,
                "progress": progress,
            }
            stream_event = event.event
            if isinstance(stream_event, MessagePartEvent):
                verdict["history_version"] = stream_event.history_version
                verdict["generation_attempt"] = stream_event.generation_attempt
                verdict["seq"] = stream_event.seq
            elif isinstance(stream_event, MessageEvent):
                verdict["messageId"] = stream_event.message.id
            self.verdicts.append(verdict)
        elif isinstance(event, WsRedialEvent):
            self.redials.append(
                {
                    "attempt": event.attempt,
                    "consecutiveFailures": event.consecutive_failures,
                    "maxConsecutiveFailures": event.max_consecutive_failures,
                    "backoffMs": round(event.backoff * 1000),
                }
            )

    def _run(self) -> None:
        net, reader = self.net, self.reader
        net.start()
        net.accept()
        for item in self.case["input"]["wire"]:
            assert not reader.done, "the reader ended before the wire did"
            if "frame" in item:
                net.frame(*item["frame"])
            elif item.get("drop"):
                code = item.get("code", ABNORMAL_CLOSURE)
                if code == ABNORMAL_CLOSURE:
                    net.drop()
                else:
                    net.server_close(code)
                if reader.done:
                    break
                net.sleep_backoff()
                net.accept()
            elif "advanceMs" in item:
                net.advance(item["advanceMs"] / 1000)
            else:
                pytest.fail(f"unknown wire entry {item!r}")
            self.forwarded += net.popped()
        self.forwarded += net.popped()
        if not reader.done:
            reader.close(net.now)  # the consumer is done with the turn
            net.pump()

    def reader_error(self) -> dict[str, Any] | None:
        error = self.reader.error
        if error is None:
            return None
        return {"name": type(error).__name__, "reason": getattr(error, "reason", None)}


CASES = cases("dedup")


@pytest.mark.parametrize("path", CASES)
def test_dedup_reader(path: pathlib.Path) -> None:
    case = load(path)
    expected = case["expected"]
    replay = Replay(case)
    assert replay.verdicts == expected["verdicts"]
    assert replay.redials == expected["redials"]
    assert replay.reader_error() == expected["readerError"]
    if "sockets" in expected:
        assert replay.dials == expected["sockets"]
    if "interruptRequests" in expected:
        # The interrupt decision is the segment's; the reader itself never sends a request.
        sent = [a for a in replay.net.actions if isinstance(a, SendRequest)]
        assert len(sent) == expected["interruptRequests"] == 0
    # Forwarded events are exactly the verdicts marked forwarded, in arrival order (B.2).
    assert len(replay.forwarded) == sum(1 for v in expected["verdicts"] if v["forwarded"])


@pytest.mark.parametrize("path", CASES)
def test_dedup_turn(path: pathlib.Path) -> None:
    try:
        from .mapping import (
            finish_of,
            finish_reason_to_ts,
            joined,
            make_translator,
            model_loop,
            strip_nulls,
            usage_to_ts,
        )
    except ImportError as exc:  # pragma: no cover - depends on the translator being present
        pytest.skip(f"the turn expectation needs coder_proto._stream.translator ({exc})")
    case = load(path)
    expected = case["expected"]["turn"]
    replay = Replay(case)
    translator = make_translator(
        {
            "dynamicToolNames": case["input"]["dynamicToolNames"],
            "turnCursor": case["input"]["afterId"] or 0,
        }
    )
    parts = model_loop(translator, replay.forwarded)
    if expected is None:
        # FORMAT.md 4.2: null when no terminal status arrived (the reader failed first).
        assert translator.terminal_status is None
        assert replay.reader.error is not None
        return
    actual = {
        "text": joined(parts, "text"),
        "reasoning": joined(parts, "reasoning"),
        "toolCallCount": sum(1 for p in parts if p.type == "tool-call"),
        "finishReason": finish_reason_to_ts(finish_of(parts)),
        "usage": usage_to_ts(finish_of(parts).usage),
    }
    assert strip_nulls(actual) == strip_nulls(expected)
