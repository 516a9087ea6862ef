"""StreamReader: replay dedup, redials, backoff, terminal endings and transport events
(state machines B, C.1-C.2, C.4; wire 4.5, 5, 11; D12-D15, D24).

``Net`` drives a reader the way an adapter would, against in-memory server ends built from
wsproto (``tests.proto.stream.test_websocket.ServerSide``), with a fake monotonic clock.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from coder_proto import (
    CoderAgentError,
    CoderApiError,
    CoderNetworkError,
    CoderProtocolError,
    CoderStreamError,
    WsCloseEvent,
    WsDialEvent,
    WsErrorEvent,
    WsEventEvent,
    WsOpenEvent,
    WsRedialEvent,
)
from coder_proto._actions import Action, CloseConnection, OpenConnection, SendData
from coder_proto._stream import reader as reader_module
from coder_proto._stream.reader import (
    PARSE_FAILURE_MESSAGE,
    UNTRACKABLE_MESSAGE,
    BackoffPolicy,
    StreamReader,
    budget_exhausted_message,
)
from coder_proto._transport_events import TransportEventSink
from coder_proto._wire import (
    ErrorEvent,
    HistoryResetEvent,
    MessageEvent,
    MessagePartEvent,
    PreviewResetEvent,
    QueueUpdateEvent,
    StatusEvent,
    UnknownEvent,
)
from tests.proto.stream.test_websocket import ServerSide

TOKEN = "tok-very-secret-123"
CHAT = "2b1c3d4e-0000-4000-8000-000000000001"
WALL = 1_700_000_000.0

# -- wire builders ---------------------------------------------------------------------------


def status(value: str) -> dict[str, Any]:
    return {"type": "status", "chat_id": CHAT, "status": {"status": value}}


def delta(text: str, seq: Any, hv: Any = 1, ga: Any = 1, *, kind: str = "text") -> dict[str, Any]:
    return {
        "type": "message_part",
        "chat_id": CHAT,
        "message_part": {
            "role": "assistant",
            "part": {"type": kind, "text": text},
            "history_version": hv,
            "generation_attempt": ga,
            "seq": seq,
        },
    }


def untracked(text: str) -> dict[str, Any]:
    return {
        "type": "message_part",
        "chat_id": CHAT,
        "message_part": {"role": "assistant", "part": {"type": "text", "text": text}},
    }


def snapshot(message_id: int, text: str, role: str = "assistant") -> dict[str, Any]:
    return {
        "type": "message",
        "chat_id": CHAT,
        "message": {
            "id": message_id,
            "chat_id": CHAT,
            "role": role,
            "created_at": "2026-01-01T00:00:00Z",
            "content": [{"type": "text", "text": text}],
        },
    }


def nested_snapshot(message_id: int, depth: int, leaf: str) -> dict[str, Any]:
    """A snapshot with a field the client does not know, ``depth`` arrays deep."""
    event = snapshot(message_id, "text")
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    event["message"]["x_nested"] = value
    return event


# -- the harness -----------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


def make_reader(
    *,
    after_id: int | None = None,
    policy: BackoffPolicy | None = None,
    sink: TransportEventSink | None = None,
    base_url: str = "https://coder.example.com/",
    prefix: str = "/api/v2/chats",
    max_message_size: int | None = None,
    token: str | None = TOKEN,
) -> StreamReader:
    kwargs: dict[str, Any] = {}
    if policy is not None:
        kwargs["policy"] = policy
    if max_message_size is not None:
        kwargs["max_message_size"] = max_message_size
    return StreamReader(
        chat_id=CHAT,
        base_url=base_url,
        prefix=prefix,
        after_id=after_id,
        token=token,
        reader_id=7,
        sink=sink,
        **kwargs,
    )


class Net:
    """Performs a reader's actions against in-memory servers, one per connection."""

    def __init__(self, reader: StreamReader, now: float = 100.0) -> None:
        self.reader = reader
        self.now = now
        self.servers: dict[int, ServerSide] = {}
        self.opened: list[OpenConnection] = []
        self.closed: list[int] = []
        self.actions: list[Action] = []

    def pump(self) -> None:
        for action in self.reader.actions():
            self.actions.append(action)
            if isinstance(action, OpenConnection):
                assert action.conn_id not in self.servers
                self.opened.append(action)
                self.servers[action.conn_id] = ServerSide()
            elif isinstance(action, SendData):
                assert action.conn_id not in self.closed, "data written after CloseConnection"
                self.servers[action.conn_id].receive(action.data)
            else:
                assert isinstance(action, CloseConnection)
                assert action.conn_id not in self.closed, "connection closed twice"
                self.closed.append(action.conn_id)

    @property
    def conn(self) -> int:
        return self.reader.attempt

    @property
    def server(self) -> ServerSide:
        return self.servers[self.conn]

    def start(self) -> Net:
        self.reader.start(self.now)
        self.pump()
        return self

    def connect(self) -> None:
        self.reader.connection_made(self.conn, self.now)
        self.pump()

    def feed(self, data: bytes, conn: int | None = None) -> None:
        self.reader.data_received(self.conn if conn is None else conn, data, self.now)
        self.pump()

    def accept(self) -> None:
        self.connect()
        self.feed(self.server.accept())

    def frame(self, *events: dict[str, Any]) -> None:
        self.feed(self.server.frame(events))

    def drop(self) -> None:
        self.reader.connection_lost(self.conn, self.now)
        self.pump()

    def server_close(self, code: int = 1000, reason: str = "") -> None:
        self.feed(self.server.close(code, reason))

    def reject(self, status_code: int, body: bytes = b"") -> None:
        self.connect()
        self.feed(self.server.reject(status_code, body, [("Content-Type", "application/json")]))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.reader.tick(self.now)
        self.pump()

    def sleep_backoff(self) -> float:
        deadline = self.reader.next_deadline()
        assert deadline is not None
        waited = deadline - self.now
        self.advance(waited)
        return waited

    def popped(self) -> list[Any]:
        out = list(self.reader.events)
        self.reader.events.clear()
        return out


def observed(**kwargs: Any) -> tuple[StreamReader, Net, Recorder]:
    recorder = Recorder()
    sink = TransportEventSink(recorder, wall_clock=lambda: WALL)
    reader = make_reader(sink=sink, **kwargs)
    return reader, Net(reader).start(), recorder


def verdicts(recorder: Recorder) -> list[tuple[int, str, bool]]:
    return [(e.attempt, e.event.type, e.forwarded) for e in recorder.of(WsEventEvent)]


# -- URL and dialing (B.3, wire 1.1, 4.1) ----------------------------------------------------------


def test_dial_url_carries_the_original_after_id_b3() -> None:
    reader = make_reader(after_id=42)
    assert reader.url == f"wss://coder.example.com/api/v2/chats/{CHAT}/stream?after_id=42"
    assert reader.path == f"/api/v2/chats/{CHAT}/stream?after_id=42"


def test_dial_url_without_cursor_has_no_query_and_http_maps_to_ws() -> None:
    reader = make_reader(base_url="http://127.0.0.1:3000", prefix="/api/experimental/chats")
    assert reader.url == f"ws://127.0.0.1:3000/api/experimental/chats/{CHAT}/stream"
    assert reader.path == f"/api/experimental/chats/{CHAT}/stream"


def test_chat_id_is_quoted_into_the_path() -> None:
    reader = StreamReader(
        chat_id="a/b?c", base_url="https://h", prefix="/p", after_id=None, token=None, reader_id=1
    )
    assert reader.url == "wss://h/p/a%2Fb%3Fc/stream"


def test_a_chat_id_that_is_not_valid_unicode_is_a_library_error() -> None:
    """A lone surrogate (a server can send ``"\\ud800"`` as a chat id) has no URL form."""
    with pytest.raises(CoderAgentError, match="chat_id must be valid Unicode text"):
        StreamReader(
            chat_id="c\ud800",
            base_url="https://h",
            prefix="/p",
            after_id=None,
            token=None,
            reader_id=1,
        )


def test_start_opens_connection_one_and_sends_the_upgrade_with_token() -> None:
    reader = make_reader(after_id=5)
    net = Net(reader).start()
    assert net.opened == [
        OpenConnection(
            conn_id=1,
            host="coder.example.com",
            port=443,
            tls=True,
            server_hostname="coder.example.com",
        )
    ]
    assert reader.attempt == 1
    net.connect()
    request = net.server.request
    assert request is not None
    assert request.target == f"/api/v2/chats/{CHAT}/stream?after_id=5"
    assert net.server.header("Coder-Session-Token") == TOKEN
    reader.start(net.now)  # only the first start dials
    net.pump()
    assert len(net.opened) == 1


def test_every_redial_reuses_the_same_url_b3_d12() -> None:
    reader, net, recorder = observed(after_id=9)
    net.accept()
    net.frame(snapshot(10, "a"), snapshot(11, "b"))
    for _ in range(3):
        net.drop()
        net.sleep_backoff()
        net.accept()
    targets = [s.request.target for s in net.servers.values() if s.request is not None]
    assert targets == [f"/api/v2/chats/{CHAT}/stream?after_id=9"] * 4
    assert {e.url for e in recorder.of(WsDialEvent)} == {reader.url}
    assert [e.attempt for e in recorder.of(WsDialEvent)] == [1, 2, 3, 4]
    assert [o.conn_id for o in net.opened] == [1, 2, 3, 4]


def test_ping_is_answered_on_an_open_stream_d12() -> None:
    _, net, _ = observed()
    net.accept()
    net.feed(net.server.ping(b"keepalive"))
    assert [e.payload for e in net.server.received if type(e).__name__ == "Pong"] == [b"keepalive"]


# -- replay dedup (B.2, wire 4.5, J.16, J.18) -------------------------------------------------------


def test_replayed_deltas_are_suppressed_after_a_redial_b2() -> None:
    _reader, net, recorder = observed()
    net.accept()
    net.frame(status("running"), delta("Hel", 1), delta("lo", 2))
    net.drop()
    net.sleep_backoff()
    net.accept()
    net.frame(status("running"), delta("Hel", 1), delta("lo", 2), delta(" you", 3))
    assert verdicts(recorder) == [
        (1, "status", True),
        (1, "message_part", True),
        (1, "message_part", True),
        (2, "status", True),
        (2, "message_part", False),
        (2, "message_part", False),
        (2, "message_part", True),
    ]
    parts = [e for e in net.popped() if isinstance(e, MessagePartEvent)]
    assert [p.part.text for p in parts] == ["Hel", "lo", " you"]


def test_equal_seq_in_the_same_episode_is_a_duplicate_b2() -> None:
    _reader, net, recorder = observed()
    net.accept()
    net.frame(delta("a", 1), delta("a", 1), delta("b", 3), delta("x", 2))
    assert [v[2] for v in verdicts(recorder)] == [True, False, True, False]


@pytest.mark.parametrize(("hv", "ga"), [(2, 1), (1, 2), (0, 1), (1, 0)])
def test_any_episode_change_is_forwarded_even_to_an_older_one_b2(hv: int, ga: int) -> None:
    _reader, net, recorder = observed()
    net.accept()
    net.frame(delta("a", 5, 1, 1), delta("b", 1, hv, ga), delta("c", 1, 1, 1))
    assert [v[2] for v in verdicts(recorder)] == [True, True, True]
    assert len(net.popped()) == 3


def test_messages_are_always_forwarded_even_byte_identical_replays_j18() -> None:
    _reader, net, recorder = observed()
    net.accept()
    net.frame(snapshot(3, "hi"), snapshot(3, "hi"), snapshot(3, "hi"))
    assert [v[2] for v in verdicts(recorder)] == [True, True, True]
    assert [type(e) for e in net.popped()] == [MessageEvent] * 3


def test_other_event_types_are_forwarded_without_progress_b2_d15() -> None:
    reader, net, recorder = observed()
    net.accept()
    net.frame(
        status("running"),
        {"type": "queue_update", "chat_id": CHAT},
        {"type": "history_reset", "chat_id": CHAT},
        {"type": "preview_reset", "chat_id": CHAT},
        {"type": "brand_new_event", "chat_id": CHAT},
        status("error"),
        {"type": "error", "chat_id": CHAT, "error": {"message": "boom"}},
    )
    assert [type(e) for e in net.popped()] == [
        StatusEvent,
        QueueUpdateEvent,
        HistoryResetEvent,
        PreviewResetEvent,
        UnknownEvent,
        StatusEvent,
        ErrorEvent,
    ]
    assert all(v[2] for v in verdicts(recorder))
    assert reader.progress_events == 0


def test_legacy_envelopes_are_unwrapped_d13() -> None:
    _reader, net, _recorder = observed()
    net.accept()
    net.feed(
        net.server.text(
            json.dumps(
                [
                    {"type": "ping", "data": None},
                    {"type": "data", "data": [status("running"), delta("x", 1)]},
                ]
            )
        )
    )
    assert [type(e) for e in net.popped()] == [StatusEvent, MessagePartEvent]


def test_single_object_frame_is_one_event_wire_4_2() -> None:
    _, net, _ = observed()
    net.accept()
    net.feed(net.server.text(json.dumps(status("running"))))
    assert [type(e) for e in net.popped()] == [StatusEvent]


# -- progress (B.2, C.2) --------------------------------------------------------------------------


def _fail_once(net: Net) -> None:
    net.drop()
    net.sleep_backoff()
    net.accept()


def test_progress_resets_failures_and_backoff_b2() -> None:
    reader, net, _ = observed()
    net.accept()
    for _ in range(3):
        _fail_once(net)
    assert reader.consecutive_failures == 3
    assert reader.backoff == 8.0
    net.frame(delta("new", 1))
    assert reader.consecutive_failures == 0
    assert reader.backoff == 1.0
    net.drop()
    assert reader.consecutive_failures == 1
    assert net.sleep_backoff() == 1.0


@pytest.mark.parametrize(
    ("frame", "progress"),
    [
        ([delta("a", 1)], 1),
        ([delta("a", 1), delta("a", 1)], 1),
        ([snapshot(1, "a")], 1),
        ([snapshot(1, "a"), snapshot(1, "a")], 1),
        ([snapshot(1, "a"), snapshot(1, "ab")], 2),
        ([nested_snapshot(1, 900, "a"), nested_snapshot(1, 900, "a")], 1),
        ([nested_snapshot(1, 900, "a"), nested_snapshot(1, 900, "b")], 2),
        ([untracked("a")], 0),
        ([status("running"), {"type": "retry", "chat_id": CHAT}], 0),
        ([delta("a", True)], 0),
    ],
)
def test_what_counts_as_progress_b2(frame: list[dict[str, Any]], progress: int) -> None:
    reader, net, _ = observed()
    net.accept()
    net.frame(*frame)
    assert reader.progress_events == progress


def test_byte_identical_replay_after_a_redial_is_not_progress_b2() -> None:
    reader, net, _ = observed()
    net.accept()
    net.frame(snapshot(4, "done"))
    net.drop()
    net.sleep_backoff()
    net.accept()
    net.frame(snapshot(4, "done"))
    assert reader.consecutive_failures == 1
    net.frame(snapshot(4, "done, revised"))
    assert reader.consecutive_failures == 0


# -- untrackable deltas (B.2, C.2.4, D14) -------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        untracked("x"),
        delta("x", True),
        delta("x", 1, hv=None),
        delta("x", 1, ga="1"),
        delta("x", 1.0),
    ],
)
def test_drop_with_untrackable_deltas_is_terminal_c2_4(event: dict[str, Any]) -> None:
    reader, net, recorder = observed()
    net.accept()
    net.frame(status("running"), event)
    assert reader.untrackable_deltas
    assert [v[2] for v in verdicts(recorder)] == [True, True]
    net.drop()
    assert reader.done
    error = reader.error
    assert isinstance(error, CoderStreamError)
    assert error.reason == "untrackable-deltas"
    assert error.message == UNTRACKABLE_MESSAGE
    assert error.message == (
        "chat stream dropped mid-turn and cannot be resumed: this server does not stamp deltas "
        "with history_version/generation_attempt/seq, so a redial would replay them"
    )
    assert error.url == reader.url
    assert error.chat_id == CHAT
    assert isinstance(error.__cause__, CoderAgentError)
    assert recorder.of(WsRedialEvent) == []
    assert reader.next_deadline() is None


def test_a_new_higher_commit_clears_untrackable_deltas_b2() -> None:
    reader, net, _ = observed(after_id=10)
    net.accept()
    net.frame(untracked("Hi"), snapshot(9, "old"))
    assert reader.untrackable_deltas  # id 9 is not above after_id 10
    net.frame(snapshot(11, "Hi"))
    assert not reader.untrackable_deltas
    net.frame(untracked("more"), snapshot(11, "Hi more"))
    assert reader.untrackable_deltas  # a revision of the same id does not clear it
    net.frame(snapshot(12, "more"))
    net.drop()
    assert not reader.done
    assert reader.consecutive_failures == 1


# -- redials and the budget (C.2, wire 5, J.17) -----------------------------------------------------


def test_every_ending_counts_and_the_schedule_is_1_2_4_8_then_failure_c2() -> None:
    reader, net, recorder = observed(after_id=3)
    net.accept()
    net.frame(status("running"))
    endings = [
        net.drop,
        lambda: net.server_close(1000),
        lambda: net.server_close(1011, "internal"),
        lambda: net.reader.connection_failed(net.conn, "connection reset", net.now),
        net.drop,
    ]
    waits = []
    for i, end in enumerate(endings):
        if i:
            waits.append(net.sleep_backoff())
            net.accept()
        end()
        net.pump()
    assert waits == [1.0, 2.0, 4.0, 8.0]
    redials = recorder.of(WsRedialEvent)
    assert [
        (r.attempt, r.consecutive_failures, r.max_consecutive_failures, r.backoff) for r in redials
    ] == [
        (1, 1, 5, 1.0),
        (2, 2, 5, 2.0),
        (3, 3, 5, 4.0),
        (4, 4, 5, 8.0),
    ]
    assert reader.done
    error = reader.error
    assert isinstance(error, CoderStreamError)
    assert error.reason == "redial-budget-exhausted"
    assert error.message == (
        f"Coder chat stream /api/v2/chats/{CHAT}/stream?after_id=3 could not be "
        "(re-)established after 5 consecutive connection failures without progress"
    )
    assert error.message == budget_exhausted_message(reader.path, 5)
    assert error.url == reader.url
    assert error.chat_id == CHAT
    assert error.retryable
    assert isinstance(error.__cause__, CoderAgentError)
    assert TOKEN not in repr(error) + str(error) + str(error.__cause__)
    assert len(recorder.of(WsDialEvent)) == 5
    assert reader.next_deadline() is None


def test_the_cause_describes_the_last_transport_failure_c2_6() -> None:
    reader = make_reader(policy=BackoffPolicy(max_consecutive_failures=2))
    net = Net(reader).start()
    net.accept()
    net.drop()
    net.sleep_backoff()
    net.connect()
    net.feed(net.server.reject(503, b""))
    assert isinstance(reader.error, CoderStreamError)
    cause = reader.error.__cause__
    assert isinstance(cause, CoderApiError)
    assert cause.status == 503


@pytest.mark.parametrize(
    ("end", "cause_text"),
    [
        ("drop", "no close frame"),
        ("close", "(code 4001): bye"),
        ("failed", "connection failed: refused"),
    ],
)
def test_transport_failures_are_described_as_network_errors(end: str, cause_text: str) -> None:
    reader = make_reader(policy=BackoffPolicy(max_consecutive_failures=1))
    net = Net(reader).start()
    if end == "failed":
        reader.connection_failed(1, "refused", net.now)
    else:
        net.accept()
        if end == "drop":
            net.drop()
        else:
            net.server_close(4001, "bye")
    cause = reader.error.__cause__ if reader.error else None
    assert isinstance(cause, CoderNetworkError)
    assert cause_text in cause.message
    assert cause.method == "GET"
    assert cause.path == reader.path


def test_no_redial_before_the_deadline() -> None:
    reader, net, _ = observed()
    net.accept()
    net.drop()
    assert reader.next_deadline() == net.now + 1.0
    net.advance(0.999)
    assert reader.attempt == 1
    assert len(net.opened) == 1
    net.advance(0.001)
    assert reader.attempt == 2
    assert len(net.opened) == 2
    assert reader.next_deadline() == net.now + 30.0  # the new dial's bound (D29)


def test_backoff_is_capped() -> None:
    policy = BackoffPolicy(initial=10.0, multiplier=3.0, cap=25.0, max_consecutive_failures=10)
    assert policy.schedule() == (10.0, 25.0, 25.0, 25.0, 25.0, 25.0, 25.0, 25.0, 25.0)
    reader = make_reader(policy=policy)
    net = Net(reader).start()
    waits = []
    for _ in range(4):
        net.accept()
        net.drop()
        waits.append(net.sleep_backoff())
    assert waits == [10.0, 25.0, 25.0, 25.0]


def test_default_policy_is_the_reference_schedule_c1() -> None:
    policy = BackoffPolicy()
    assert (policy.initial, policy.multiplier, policy.cap) == (1.0, 2.0, 30.0)
    assert policy.max_consecutive_failures == 5
    assert policy.transient_upgrade_statuses == frozenset({408, 425, 429})
    assert policy.schedule() == (1.0, 2.0, 4.0, 8.0)


def test_connection_failed_before_the_handshake_is_an_ordinary_ending_d12() -> None:
    reader, net, recorder = observed()
    reader.connection_failed(1, "", net.now)
    net.pump()
    assert not reader.done
    assert net.closed == [1]
    assert [e.message for e in recorder.of(WsErrorEvent)] == ["chat stream socket error"]
    assert [(e.code, e.reason) for e in recorder.of(WsCloseEvent)] == [(1006, None)]
    assert reader.consecutive_failures == 1


def test_connection_lost_while_connecting_is_an_ordinary_ending() -> None:
    reader, net, _ = observed()
    reader.connection_lost(1, net.now)
    net.pump()
    assert reader.state == "backoff"
    assert net.closed == [1]


def test_end_of_stream_during_the_handshake_is_an_ordinary_ending_d12() -> None:
    reader, net, recorder = observed()
    net.connect()
    net.drop()
    assert reader.state == "backoff"
    assert [(e.code, e.reason) for e in recorder.of(WsCloseEvent)] == [(1006, None)]


# -- upgrade rejections (C.2.2, D12) ------------------------------------------------------------------


@pytest.mark.parametrize("status_code", [400, 401, 403, 404, 410, 499])
def test_terminal_4xx_rejection_is_an_api_error_c2_2(status_code: int) -> None:
    reader, net, recorder = observed(after_id=8)
    body = json.dumps({"message": "Invalid after_id parameter.", "detail": "x"}).encode()
    net.reject(status_code, body)
    assert reader.done
    error = reader.error
    assert isinstance(error, CoderApiError)
    assert (error.status, error.method) == (status_code, "GET")
    assert error.path == f"/api/v2/chats/{CHAT}/stream?after_id=8"
    assert error.server_message == "Invalid after_id parameter."
    assert error.detail == "x"
    assert error.chat_id == CHAT
    assert error.message == (
        f"Coder API GET /api/v2/chats/{CHAT}/stream?after_id=8 failed ({status_code}): "
        "Invalid after_id parameter. — x"
    )
    assert [e.message for e in recorder.of(WsErrorEvent)] == [
        f"Unexpected server response: {status_code}"
    ]
    assert len(recorder.of(WsCloseEvent)) == 1
    assert recorder.of(WsRedialEvent) == []
    assert net.closed == [1]


def test_rejection_without_json_body_uses_the_status_text() -> None:
    reader, net, _ = observed()
    net.reject(401, b"<html>nope</html>")
    assert isinstance(reader.error, CoderApiError)
    assert reader.error.server_message == "Unauthorized"


@pytest.mark.parametrize("status_code", [408, 425, 429, 500, 502, 503, 301, 302])
def test_transient_rejections_consume_the_budget_d12(status_code: int) -> None:
    reader, net, recorder = observed()
    net.reject(status_code, b"{}")
    assert not reader.done
    assert reader.error is None
    assert reader.consecutive_failures == 1
    assert len(recorder.of(WsRedialEvent)) == 1
    net.sleep_backoff()
    assert reader.attempt == 2


def test_the_transient_set_is_policy_data() -> None:
    reader = make_reader(policy=BackoffPolicy(transient_upgrade_statuses=frozenset({401})))
    net = Net(reader).start()
    net.reject(401)
    assert not reader.done
    net.sleep_backoff()
    net.reject(429)
    assert isinstance(reader.error, CoderApiError)
    assert reader.error.status == 429


def test_rejection_cut_short_by_a_socket_error_is_still_classified_by_status() -> None:
    reader, net, _ = observed()
    net.connect()
    data = net.server.reject(403, b'{"message":"Forbidden."}')
    net.feed(data[:-4])
    reader.connection_failed(1, "reset by peer", net.now)
    net.pump()
    assert isinstance(reader.error, CoderApiError)
    assert reader.error.status == 403


# -- terminal protocol failures (C.2.3) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "{not json",
        "",
        '[{"type":"message_part","chat_id":"c","message_part":{"part":7}}]',
        '[{"type":"message","message":{"id":"seven"}}]',
        "[" * 100_000,
    ],
)
def test_unparseable_frame_is_terminal_and_closes_the_socket_c2_3(payload: str) -> None:
    reader, net, recorder = observed()
    net.accept()
    net.frame(status("running"))
    net.feed(net.server.text(payload))
    assert reader.done
    error = reader.error
    assert isinstance(error, CoderProtocolError)
    assert error.message == PARSE_FAILURE_MESSAGE == "failed to parse chat stream frame"
    assert error.chat_id == CHAT
    assert isinstance(error.__cause__, CoderProtocolError)
    assert [(c.code, c.reason) for c in net.server.closes()] == [(1000, "")]
    assert net.closed == [1]
    assert [e.message for e in recorder.of(WsErrorEvent)] == [PARSE_FAILURE_MESSAGE]
    assert [(e.code, e.reason) for e in recorder.of(WsCloseEvent)] == [(None, None)]
    assert recorder.of(WsRedialEvent) == []
    assert [type(e) for e in net.popped()] == [StatusEvent]


def test_parse_failure_wins_over_untrackable_deltas_c2_order() -> None:
    reader, net, _ = observed()
    net.accept()
    net.frame(untracked("x"))
    net.feed(net.server.text("nope"))
    assert isinstance(reader.error, CoderProtocolError)


def test_websocket_protocol_violation_is_terminal() -> None:
    reader, net, recorder = observed()
    net.accept()
    net.feed(b"\x8f\x00")
    assert isinstance(reader.error, CoderProtocolError)
    assert reader.error.message == PARSE_FAILURE_MESSAGE
    assert [c.code for c in net.server.closes()] == [1002]
    assert net.closed == [1]
    assert len(recorder.of(WsErrorEvent)) == 1


def test_oversize_message_is_terminal_with_close_1009() -> None:
    reader = make_reader(max_message_size=64)
    net = Net(reader).start()
    net.accept()
    net.feed(net.server.text("x" * 65))
    assert isinstance(reader.error, CoderProtocolError)
    assert [c.code for c in net.server.closes()] == [1009]


def test_credentials_in_the_base_url_are_refused_and_never_shown_wire_11() -> None:
    reader, net, recorder = observed(base_url="https://admin:hunter2@coder.example.com")
    assert reader.url == f"wss://coder.example.com/api/v2/chats/{CHAT}/stream"
    assert reader.done
    assert type(reader.error) is CoderAgentError
    assert net.opened == []
    assert "hunter2" not in repr(recorder.events) + str(reader.error)


def test_unparseable_base_url_is_terminal_at_once() -> None:
    reader, net, _ = observed(base_url="https://[::1")
    assert reader.url.startswith("wss://[::1/")
    assert type(reader.error) is CoderAgentError
    assert net.opened == []


def test_bad_url_scheme_is_terminal_at_once_d12() -> None:
    reader, net, recorder = observed(base_url="ftp://coder.example.com")
    assert reader.done
    assert type(reader.error) is CoderAgentError
    assert reader.error.chat_id == CHAT
    assert net.opened == []
    assert [type(e) for e in recorder.events] == [WsDialEvent, WsErrorEvent, WsCloseEvent]


# -- closing by the consumer (C.2.1) ------------------------------------------------------------------


def test_close_sends_1000_and_ends_quietly_c2_1() -> None:
    reader, net, recorder = observed()
    net.accept()
    net.frame(status("running"), delta("a", 1))
    reader.close(net.now)
    net.pump()
    assert reader.done
    assert reader.error is None
    assert [(c.code, c.reason) for c in net.server.closes()] == [(1000, "")]
    assert net.closed == [1]
    assert [(e.code, e.reason) for e in recorder.of(WsCloseEvent)] == [(None, None)]
    reader.close(net.now)
    net.pump()
    assert len(recorder.of(WsCloseEvent)) == 1
    # Late input for the closed connection is ignored.
    reader.data_received(1, b"\x81\x02[]", net.now)
    reader.connection_lost(1, net.now)
    net.pump()
    assert [type(e) for e in net.popped()] == [StatusEvent, MessagePartEvent]
    assert recorder.of(WsRedialEvent) == []


def test_close_during_backoff_cancels_the_redial() -> None:
    reader, net, recorder = observed()
    net.accept()
    net.drop()
    reader.close(net.now)
    net.pump()
    assert reader.done
    assert reader.error is None
    assert reader.next_deadline() is None
    net.advance(60)
    assert reader.attempt == 1
    assert len(recorder.of(WsCloseEvent)) == 1


def test_close_while_connecting_closes_the_pending_connection() -> None:
    reader, net, recorder = observed()
    reader.close(net.now)
    net.pump()
    assert net.closed == [1]
    assert [(e.code, e.reason) for e in recorder.of(WsCloseEvent)] == [(None, None)]
    reader.connection_made(1, net.now)
    net.pump()
    assert net.server.request is None


def test_close_before_start_dials_nothing() -> None:
    reader = make_reader()
    reader.close(0.0)
    reader.start(0.0)
    assert reader.done
    assert reader.actions() == []


def test_handler_closing_the_reader_mid_frame_stops_cleanly() -> None:
    holder: list[StreamReader] = []

    def handler(event: Any) -> None:
        if isinstance(event, WsEventEvent):
            holder[0].close(0.0)

    reader = make_reader(sink=TransportEventSink(handler))
    holder.append(reader)
    net = Net(reader).start()
    net.accept()
    net.feed(net.server.frame([status("running"), delta("x", 1)]) + net.server.ping(b"p"))
    assert reader.done
    assert reader.error is None
    assert net.closed == [1]


def test_handler_closing_the_reader_on_open_stops_cleanly() -> None:
    holder: list[StreamReader] = []

    def handler(event: Any) -> None:
        if isinstance(event, WsOpenEvent):
            holder[0].close(0.0)

    reader = make_reader(sink=TransportEventSink(handler))
    holder.append(reader)
    net = Net(reader).start()
    net.connect()
    net.feed(net.server.accept() + net.server.frame([status("running")]))
    assert reader.done
    assert list(reader.events) == []


def test_handler_closing_the_reader_on_error_prevents_the_redial() -> None:
    holder: list[StreamReader] = []

    def handler(event: Any) -> None:
        if isinstance(event, WsErrorEvent):
            holder[0].close(0.0)

    reader = make_reader(sink=TransportEventSink(handler))
    holder.append(reader)
    net = Net(reader).start()
    net.reject(503)
    assert reader.done
    assert reader.error is None
    assert reader.next_deadline() is None
    reader2 = make_reader(sink=TransportEventSink(handler))
    holder[0] = reader2
    net = Net(reader2).start()
    net.reject(401)
    assert reader2.error is None


# -- stale connections --------------------------------------------------------------------------------


def test_input_for_an_earlier_attempt_is_ignored() -> None:
    reader, net, recorder = observed()
    net.accept()
    old = net.server
    net.drop()
    net.sleep_backoff()
    net.accept()
    reader.data_received(1, old.frame([status("stale")]), net.now)
    reader.connection_lost(1, net.now)
    reader.connection_failed(1, "late", net.now)
    reader.connection_made(1, net.now)
    reader.data_received(99, b"garbage", net.now)
    net.pump()
    assert net.popped() == []
    assert reader.consecutive_failures == 1
    assert reader.state == "open"
    assert len(recorder.of(WsCloseEvent)) == 1


def test_tick_outside_backoff_and_data_before_connection_made_do_nothing() -> None:
    reader, net, _ = observed()
    reader.tick(net.now + 1)  # within the dial's bound
    reader.data_received(1, b"HTTP/1.1 101 ...", net.now)
    net.pump()
    assert reader.state == "connecting"
    assert net.actions == [net.opened[0]]


# -- transport events (wire 11, D24) ------------------------------------------------------------------


def test_transport_events_sequence_and_fields_wire_11() -> None:
    reader, net, recorder = observed(after_id=2)
    net.accept()
    net.frame(status("running"), delta("a", 1))
    net.server_close(1001, "")
    net.sleep_backoff()
    net.accept()
    net.frame(delta("a", 1), delta("b", 2))
    net.server_close(4000, "restarting")
    kinds = [e.type for e in recorder.events]
    assert kinds == [
        "ws:dial",
        "ws:open",
        "ws:event",
        "ws:event",
        "ws:close",
        "ws:redial",
        "ws:dial",
        "ws:open",
        "ws:event",
        "ws:event",
        "ws:close",
        "ws:redial",
    ]
    assert all(e.chat_id == CHAT and e.reader == 7 for e in recorder.events)
    assert all(e.timestamp == WALL for e in recorder.events)
    closes = recorder.of(WsCloseEvent)
    assert [(c.attempt, c.code, c.reason) for c in closes] == [
        (1, 1001, None),
        (2, 4000, "restarting"),
    ]
    assert [e.url for e in recorder.of(WsDialEvent)] == [reader.url] * 2
    ws_events = recorder.of(WsEventEvent)
    assert [e.forwarded for e in ws_events] == [True, True, False, True]
    assert isinstance(ws_events[1].event, MessagePartEvent)


def test_one_close_event_per_dial_and_no_token_anywhere() -> None:
    reader, net, recorder = observed()
    net.reject(503)
    net.sleep_backoff()
    reader.connection_failed(2, "boom", net.now)
    net.pump()
    net.sleep_backoff()
    net.accept()
    net.drop()
    net.sleep_backoff()
    net.accept()
    reader.close(net.now)
    net.pump()
    dials = recorder.of(WsDialEvent)
    closes = recorder.of(WsCloseEvent)
    assert [d.attempt for d in dials] == [c.attempt for c in closes] == [1, 2, 3, 4]
    text = repr(recorder.events) + repr(reader) + repr(net.actions)
    assert TOKEN not in text


def test_no_transport_event_objects_without_an_enabled_sink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("transport event built without a handler")

    for name in ("WsDialEvent", "WsOpenEvent", "WsEventEvent", "WsCloseEvent", "WsErrorEvent"):
        monkeypatch.setattr(reader_module, name, forbidden)
    monkeypatch.setattr(reader_module, "WsRedialEvent", forbidden)
    for sink in (None, TransportEventSink(None)):
        reader = make_reader(sink=sink)
        net = Net(reader).start()
        net.accept()
        net.frame(status("running"), delta("a", 1), delta("a", 1))
        net.feed(net.server.ping())
        net.drop()
        net.sleep_backoff()
        net.reject(500)
        net.sleep_backoff()
        net.accept()
        net.feed(net.server.text("garbage"))
        assert isinstance(reader.error, CoderProtocolError)


def test_reader_repr_has_no_token_and_names_the_reader() -> None:
    reader = make_reader()
    assert TOKEN not in repr(reader)
    assert "reader=7" in repr(reader)


def test_no_token_means_no_token_header() -> None:
    reader = make_reader(token=None)
    net = Net(reader).start()
    net.connect()
    assert net.server.header("Coder-Session-Token") is None


# -- foreign events (D31) ----------------------------------------------------------------------------


def test_events_naming_another_chat_are_ignored_seen_and_logged_once_per_connection_d31(
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = "2b1c3d4e-0000-4000-8000-00000000ffff"
    foreign_delta = {**delta("injected", 1), "chat_id": other}
    foreign_status = {**status("waiting"), "chat_id": other}
    unnamed = {k: v for k, v in status("running").items() if k != "chat_id"}
    reader, net, recorder = observed()
    net.accept()
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        net.frame(foreign_delta, foreign_status, unnamed, delta("own", 1))
        net.frame(foreign_status)
    popped = net.popped()
    assert [type(e) for e in popped] == [StatusEvent, MessagePartEvent]
    assert popped[1].part.text == "own"
    seen = [(e.event.chat_id, e.forwarded, e.ignored) for e in recorder.of(WsEventEvent)]
    assert seen == [
        (other, False, True),
        (other, False, True),
        ("", True, False),
        (CHAT, True, False),
        (other, False, True),
    ]
    # The foreign delta's coordinates do not move the replay filter.
    assert reader.progress_events == 1
    warnings = [r for r in caplog.records if "another chat" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    # A new connection warns again.
    net.drop()
    net.sleep_backoff()
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        net.accept()
        net.frame(foreign_status)
    assert len([r for r in caplog.records if "another chat" in r.getMessage()]) == 2


def test_a_bad_sec_websocket_accept_is_reported_as_such_not_as_a_frame_parse_failure() -> None:
    reader, net, _recorder = observed()
    net.connect()
    net.feed(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: bm90IHRoZSByaWdodCBvbmU=\r\n\r\n"
    )
    error = reader.error
    assert isinstance(error, CoderProtocolError)
    assert "Sec-WebSocket-Accept" in str(error)
    assert "parse" not in str(error)
    assert net.closed == [1]


@pytest.mark.parametrize("stage", ["connecting", "handshake"])
def test_a_dial_whose_upgrade_is_not_answered_in_30_s_fails_and_is_redialed_d29(
    stage: str,
) -> None:
    reader, net, recorder = observed()
    if stage == "handshake":
        net.connect()  # the upgrade request is written, the answer never comes
    assert reader.next_deadline() == net.now + 30.0
    net.advance(29.9)
    assert reader.attempt == 1 and net.closed == []
    net.advance(0.1)
    assert net.closed == [1]
    assert reader.consecutive_failures == 1 and reader.state == "backoff"
    assert "not answered within 30 s" in recorder.of(WsErrorEvent)[-1].message
    net.sleep_backoff()
    assert reader.attempt == 2


def test_an_answered_upgrade_clears_the_dial_bound_d29() -> None:
    reader, net, _recorder = observed()
    net.accept()
    assert reader.next_deadline() is None
    net.advance(3600)
    assert reader.state == "open"


# -- session errors (D34) ----------------------------------------------------------------------

SNAPSHOT_FAILED = "failed to load initial snapshot"


def session_error(message: str = SNAPSHOT_FAILED) -> dict[str, Any]:
    """The real server's session error: no ``kind``, ``retryable`` false (D34)."""
    return {"type": "error", "chat_id": CHAT, "error": {"message": message, "retryable": False}}


def test_d34_an_error_event_then_the_close_is_a_failed_connection() -> None:
    """The stream session failed on the server: nothing is forwarded, the ending counts like
    any other (C.2.5) and says what the server said; the redial then makes progress."""
    reader, net, recorder = observed()
    net.accept()
    net.frame(session_error())
    assert net.popped() == []
    assert verdicts(recorder) == []  # held: not yet decided
    net.server_close(1000)
    assert net.popped() == []
    assert verdicts(recorder) == [(1, "error", False)]
    assert reader.state == "backoff"
    assert reader.consecutive_failures == 1
    (redial,) = recorder.of(WsRedialEvent)
    assert redial.consecutive_failures == 1
    net.sleep_backoff()
    net.accept()
    net.frame(status("running"), delta("a", 1))
    assert [type(e) for e in net.popped()] == [StatusEvent, MessagePartEvent]
    assert reader.consecutive_failures == 0


@pytest.mark.parametrize("end", ["close", "drop", "failed"])
def test_d34_the_budget_error_carries_the_servers_message(end: str) -> None:
    reader, net, recorder = observed(after_id=3, policy=BackoffPolicy(max_consecutive_failures=2))
    for attempt in (1, 2):
        if attempt == 2:
            net.sleep_backoff()
        net.accept()
        net.frame(session_error("failed to subscribe to chat updates"))
        if end == "close":
            net.server_close(1000)
        elif end == "drop":
            net.drop()
        else:
            reader.connection_failed(net.conn, "reset by peer", net.now)
            net.pump()
    assert net.popped() == []
    error = reader.error
    assert isinstance(error, CoderStreamError)
    assert error.reason == "redial-budget-exhausted"
    assert error.message == budget_exhausted_message(
        reader.path, 2, "failed to subscribe to chat updates"
    )
    assert error.message.endswith(
        "; the last one ended with the server's stream error: failed to subscribe to chat updates"
    )
    cause = error.__cause__
    assert isinstance(cause, CoderNetworkError)
    assert cause.message.endswith(
        "after a stream session error: failed to subscribe to chat updates"
    )
    assert verdicts(recorder) == [(1, "error", False), (2, "error", False)]


def test_d34_a_run_error_after_its_status_is_forwarded_at_once() -> None:
    """D2's order: the status first, the error behind it, in one frame or the next."""
    reader, net, _ = observed()
    net.accept()
    net.frame(status("error"), session_error("provider down"))
    assert [type(e) for e in net.popped()] == [StatusEvent, ErrorEvent]
    net.frame(session_error("again"))
    assert [type(e) for e in net.popped()] == [ErrorEvent]
    net.server_close(1000)
    assert reader.consecutive_failures == 1
    assert reader._last_failure is not None
    assert "session error" not in reader._last_failure.message


def test_d34_a_status_error_later_in_the_frame_makes_held_errors_the_runs() -> None:
    """The reference's order (error, then status) and anything between: the held errors go
    out, in order, just before the status."""
    _reader, net, recorder = observed()
    net.accept()
    net.frame(
        status("running"),
        session_error("first"),
        delta("x", 1),
        session_error("second"),
        status("error"),
    )
    popped = net.popped()
    assert [type(e) for e in popped] == [
        StatusEvent,
        MessagePartEvent,
        ErrorEvent,
        ErrorEvent,
        StatusEvent,
    ]
    assert [e.error.message for e in popped if type(e) is ErrorEvent] == ["first", "second"]
    assert verdicts(recorder) == [
        (1, "status", True),
        (1, "message_part", True),
        (1, "error", True),
        (1, "error", True),
        (1, "status", True),
    ]


def test_d34_a_status_error_opening_the_next_frame_releases_the_held_error() -> None:
    _reader, net, _ = observed()
    net.accept()
    net.frame(session_error("boom"))
    net.frame(status("error"))
    assert [type(e) for e in net.popped()] == [ErrorEvent, StatusEvent]


def test_d34_a_connection_that_goes_on_drops_the_held_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The session survived and no run error came: the error was neither; a warning says
    so, and the connection's later ending is an ordinary one."""
    reader, net, recorder = observed()
    net.accept()
    net.frame(session_error("relay gone"))
    net.frame({"type": "mystery", "chat_id": "another-chat"})  # another chat's: undecided
    assert net.popped() == []
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        net.frame(status("running"), session_error("later"))
    assert [type(e) for e in net.popped()] == [StatusEvent]
    assert "sent an error event (relay gone) and went on" in caplog.text
    assert verdicts(recorder)[:2] == [(1, "mystery", False), (1, "error", False)]
    net.frame(delta("x", 1))
    assert [type(e) for e in net.popped()] == [MessagePartEvent]
    net.server_close(1000)
    assert reader._last_failure is not None
    assert "session error" not in reader._last_failure.message


def test_d34_an_error_without_a_payload_is_a_session_error_too() -> None:
    reader, net, _ = observed(policy=BackoffPolicy(max_consecutive_failures=1))
    net.accept()
    net.frame({"type": "error", "chat_id": CHAT})
    net.server_close(1000)
    assert isinstance(reader.error, CoderStreamError)
    assert reader.error.message.endswith("an error event without a payload")


def test_d34_held_errors_do_not_outlive_a_parse_failure_or_a_stop() -> None:
    reader, net, recorder = observed()
    net.accept()
    net.frame(session_error())
    net.feed(net.server.text("{not json"))
    assert isinstance(reader.error, CoderProtocolError)
    assert verdicts(recorder) == [(1, "error", False)]
    assert net.popped() == []

    reader, net, recorder = observed()
    net.accept()
    net.frame(session_error())
    reader.close(net.now)
    net.pump()
    assert reader.done and reader.error is None
    assert verdicts(recorder) == [(1, "error", False)]
    assert net.popped() == []


def test_d34_a_protocol_violation_after_a_held_error_is_a_parse_failure() -> None:
    reader, net, recorder = observed()
    net.accept()
    net.frame(session_error())
    net.feed(b"\x8f\x80" + b"\x00" * 4)  # a masked server frame with a reserved opcode
    assert isinstance(reader.error, CoderProtocolError)
    assert verdicts(recorder) == [(1, "error", False)]
