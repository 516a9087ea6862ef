"""Conformance: every ``dedup`` case through a real ``StreamReader``.

Each case's ``wire`` is replayed over in-memory WebSocket connections with a fake clock:
``frame`` entries are sent as text frames (a JSON array, as the server sends them), ``drop``
ends the connection without a close frame and ``close`` with the server's close frame of that
code, after which the reader's own backoff deadline is awaited and the next connection is
accepted. Verdicts come from the ``ws:event`` transport events; ``progress`` is read from the
reader's progress counter while each event is reported.

``test_dedup_reader`` checks ``verdicts``, ``redials``, ``reader_error`` and, where stated,
``dials`` and ``interrupt_requests``. ``test_dedup_turn`` checks ``turn`` by translating the
forwarded events with the model-loop procedure.
"""

from __future__ import annotations

from typing import Any

import pytest

from coder_proto._actions import SendRequest
from coder_proto._stream.reader import StreamReader
from coder_proto._transport_events import TransportEventSink, WsEventEvent, WsRedialEvent
from coder_proto._wire import MessageEvent, MessagePartEvent, StreamEvent
from tests.proto.stream.test_reader import Net

from .corpus import Case, Unreadable, case_of, cases
from .mapping import check_trace, make_translator, model_loop

CHAT_ID = "chat-1"
EXPECT_KEYS = {"verdicts", "redials", "reader_error", "turn", "dials", "interrupt_requests"}


class Replay:
    """The outcome of one case's wire through a reader."""

    def __init__(self, given: dict[str, Any]) -> None:
        self.given = given
        self.verdicts: list[dict[str, Any]] = []
        self.redials: list[dict[str, Any]] = []
        self._progress_seen = 0
        sink = TransportEventSink(self._observe)
        self.reader = StreamReader(
            chat_id=CHAT_ID,
            base_url="https://coder.example.com",
            prefix="/api/v2/chats",
            after_id=given["after_id"],
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
            verdict: dict[str, Any] = {"attempt": event.attempt, "type": event.event.type}
            stream_event = event.event
            if isinstance(stream_event, MessagePartEvent):
                verdict["history_version"] = stream_event.history_version
                verdict["generation_attempt"] = stream_event.generation_attempt
                verdict["seq"] = stream_event.seq
            elif isinstance(stream_event, MessageEvent):
                verdict["message_id"] = stream_event.message.id
            verdict["forwarded"] = event.forwarded
            verdict["progress"] = progress
            self.verdicts.append(verdict)
        elif isinstance(event, WsRedialEvent):
            self.redials.append(
                {
                    "attempt": event.attempt,
                    "consecutive_failures": event.consecutive_failures,
                    "max_consecutive_failures": event.max_consecutive_failures,
                    "backoff": event.backoff,
                }
            )

    def _run(self) -> None:
        net, reader = self.net, self.reader
        net.start()
        net.accept()
        for item in self.given["wire"]:
            assert not reader.done, "the reader ended before the wire did"
            if "frame" in item:
                net.frame(*item["frame"])
            elif "drop" in item or "close" in item:
                if "drop" in item:
                    net.drop()
                else:
                    net.server_close(item["close"])
                if reader.done:
                    break
                net.sleep_backoff()
                net.accept()
            elif "advance" in item:
                net.advance(item["advance"])
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
        return {"type": type(error).__name__, "reason": getattr(error, "reason", None)}


CASES = cases("dedup")


@pytest.mark.parametrize("case", CASES)
def test_dedup_reader(case: Case | Unreadable) -> None:
    case = case_of(case)
    expect = case.expect
    unknown = set(expect) - EXPECT_KEYS
    assert not unknown, f"expected keys {sorted(unknown)} are not part of the dedup vocabulary"
    replay = Replay(case.given)
    assert replay.verdicts == expect["verdicts"]
    assert replay.redials == expect["redials"]
    assert replay.reader_error() == expect["reader_error"]
    if "dials" in expect:
        assert replay.dials == expect["dials"]
    if "interrupt_requests" in expect:
        # Interrupting is the segment's decision; the reader itself never sends a request.
        sent = [a for a in replay.net.actions if isinstance(a, SendRequest)]
        assert len(sent) == expect["interrupt_requests"] == 0
    # Forwarded events are exactly the verdicts marked forwarded, in arrival order.
    assert len(replay.forwarded) == sum(1 for v in expect["verdicts"] if v["forwarded"])


@pytest.mark.parametrize("case", CASES)
def test_dedup_turn(case: Case | Unreadable) -> None:
    case = case_of(case)
    expect = case.expect["turn"]
    replay = Replay(case.given)
    translator = make_translator(
        {
            "dynamic_tool_names": case.given["dynamic_tool_names"],
            "turn_cursor": case.given["after_id"] or 0,
        }
    )
    parts = model_loop(translator, replay.forwarded)
    if expect is None:
        # No terminal status arrived: the reader failed first.
        assert translator.terminal_status is None
        assert replay.reader.error is not None
        return
    check_trace(expect, parts)
