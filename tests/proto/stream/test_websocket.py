"""WebSocketClient against a server-side wsproto connection, in memory (wire 1.1, 4.1-4.2; D12).

``ServerSide`` is the in-memory server end used here and by the reader tests: it parses the
client's upgrade request and produces the bytes a server would send (accept, reject, text
frames, pings, close frames).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
)

from coder_proto import CoderAgentError
from coder_proto._stream.websocket import (
    MAX_REJECTION_BODY,
    WebSocketClient,
    WsClosed,
    WsEvent,
    WsFailed,
    WsOpen,
    WsRejected,
    WsText,
    websocket_url,
)

TOKEN = "s3cr3t-token-value"
MIB = 1024 * 1024


class ServerSide:
    """The server end of one WebSocket connection, built from wsproto (in memory)."""

    def __init__(self) -> None:
        self.ws = WSConnection(ConnectionType.SERVER)
        self.request: Request | None = None
        self.received: list[Event] = []

    def receive(self, data: bytes | None) -> list[Event]:
        """Feed what the client wrote; return (and record) the events it produced."""
        if data is None or data:
            self.ws.receive_data(data)
        events = list(self.ws.events())
        for event in events:
            if isinstance(event, Request):
                self.request = event
        self.received += events
        return events

    def header(self, name: str) -> str | None:
        assert self.request is not None
        for key, value in self.request.extra_headers:
            if key.decode().lower() == name.lower():
                return value.decode()
        return None

    def accept(self) -> bytes:
        return self.ws.send(AcceptConnection())

    def reject(
        self,
        status: int,
        body: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
        *,
        finish: bool = True,
    ) -> bytes:
        hdrs = [(k.encode(), v.encode()) for k, v in headers]
        hdrs.append((b"content-length", str(len(body)).encode()))
        out = self.ws.send(RejectConnection(status_code=status, headers=hdrs, has_body=True))
        return out + self.ws.send(RejectData(data=body, body_finished=finish))

    def text(self, text: str, *, fragment: int | None = None) -> bytes:
        if fragment is None:
            return self.ws.send(Message(data=text))
        out = b""
        chunks = [text[i : i + fragment] for i in range(0, len(text), fragment)] or [""]
        for i, chunk in enumerate(chunks):
            out += self.ws.send(Message(data=chunk, message_finished=i == len(chunks) - 1))
        return out

    def frame(self, events: Iterable[dict[str, Any]]) -> bytes:
        """One stream frame: a JSON array of events plus a newline, as chatd sends it."""
        return self.text(json.dumps(list(events)) + "\n")

    def binary(self, data: bytes) -> bytes:
        return self.ws.send(Message(data=data))

    def ping(self, payload: bytes = b"") -> bytes:
        return self.ws.send(Ping(payload=payload))

    def close(self, code: int = 1000, reason: str = "") -> bytes:
        return self.ws.send(CloseConnection(code=code, reason=reason or None))

    def closes(self) -> list[CloseConnection]:
        return [e for e in self.received if isinstance(e, CloseConnection)]


def handshake(
    url: str = "ws://coder.test/api/v2/chats/c1/stream", **kwargs: Any
) -> tuple[WebSocketClient, ServerSide]:
    """A client whose upgrade the server has read (not yet answered)."""
    kwargs.setdefault("token", TOKEN)
    client = WebSocketClient(url, **kwargs)
    server = ServerSide()
    server.receive(client.initiate())
    return client, server


def opened(**kwargs: Any) -> tuple[WebSocketClient, ServerSide]:
    client, server = handshake(**kwargs)
    assert client.receive_data(server.accept()) == [WsOpen()]
    return client, server


# -- URLs (wire 1.1) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("https://coder.example.com", "wss://coder.example.com/p"),
        ("http://coder.example.com", "ws://coder.example.com/p"),
        ("https://coder.example.com/", "wss://coder.example.com/p"),
        ("https://coder.example.com//", "wss://coder.example.com//p"),
        ("https://coder.example.com/base", "wss://coder.example.com/base/p"),
        ("wss://already.example", "wss://already.example/p"),
        ("ftp://other.example", "ftp://other.example/p"),
    ],
)
def test_websocket_url_maps_scheme_and_strips_one_slash_wire_1_1(base: str, expected: str) -> None:
    assert websocket_url(base, "/p") == expected


def test_websocket_url_appends_query_without_none_values() -> None:
    assert websocket_url("https://h", "/s", {"after_id": 7}) == "wss://h/s?after_id=7"
    assert websocket_url("https://h", "/s", {"after_id": None}) == "wss://h/s"


@pytest.mark.parametrize(
    ("url", "host", "port", "tls", "target"),
    [
        ("wss://coder.example.com/api/v2/chats/x/stream", "coder.example.com", 443, True, None),
        ("ws://127.0.0.1:8080/s?after_id=3", "127.0.0.1", 8080, False, "/s?after_id=3"),
        ("ws://[::1]:9000/s", "::1", 9000, False, "/s"),
        ("wss://h.example", "h.example", 443, True, "/"),
    ],
)
def test_client_derives_connection_parameters_from_the_url(
    url: str, host: str, port: int, tls: bool, target: str | None
) -> None:
    client = WebSocketClient(url, token=None)
    assert (client.host, client.port, client.tls) == (host, port, tls)
    assert client.server_hostname == (host if tls else None)
    assert client.target == (target or "/api/v2/chats/x/stream")


@pytest.mark.parametrize(
    "url",
    [
        "https://coder.example.com/stream",
        "http://coder.example.com/stream",
        "ftp://coder.example.com/stream",
        "coder.example.com/stream",
        "ws:///no-host",
        "ws://host:notaport/",
        "ws://host:0/",
        "ws://user:hunter2@host/",
    ],
)
def test_bad_url_is_a_configuration_error_at_construction_d12(url: str) -> None:
    with pytest.raises(CoderAgentError) as info:
        WebSocketClient(url, token=TOKEN)
    assert type(info.value) is CoderAgentError
    assert "hunter2" not in str(info.value)
    assert TOKEN not in str(info.value)


def test_token_that_cannot_be_a_header_fails_without_quoting_it() -> None:
    bad = "abc\r\nX-Injected: 1"
    with pytest.raises(CoderAgentError) as info:
        WebSocketClient("ws://h/s", token=bad)
    assert "abc" not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


# -- handshake ------------------------------------------------------------------------------------


def test_upgrade_request_carries_token_header_and_no_compression_wire_1_1() -> None:
    _client, server = handshake("wss://coder.example.com/api/v2/chats/c1/stream?after_id=4")
    assert server.request is not None
    assert server.request.target == "/api/v2/chats/c1/stream?after_id=4"
    assert server.request.host == "coder.example.com"
    assert server.header("Coder-Session-Token") == TOKEN
    assert server.header("Sec-WebSocket-Extensions") is None
    assert server.request.extensions == []


def test_host_header_has_the_port_only_when_not_default() -> None:
    _, server = handshake("ws://coder.test:8080/s")
    assert server.request is not None
    assert server.request.host == "coder.test:8080"
    _, server = handshake("wss://coder.test:443/s")
    assert server.request is not None
    assert server.request.host == "coder.test"
    _, server = handshake("ws://[::1]:8080/s")
    assert server.request is not None
    assert server.request.host == "[::1]:8080"


def test_no_token_means_no_token_header_and_extra_headers_are_sent() -> None:
    _, server = handshake(token=None, headers=[("X-Trace", "abc")])
    assert server.header("Coder-Session-Token") is None
    assert server.header("X-Trace") == "abc"


def test_token_never_appears_in_repr() -> None:
    client, server = handshake()
    assert TOKEN not in repr(client)
    events = client.receive_data(server.accept())
    assert TOKEN not in repr(client)
    assert TOKEN not in repr(events)


def test_initiate_twice_is_an_error() -> None:
    client, _ = handshake()
    with pytest.raises(CoderAgentError):
        client.initiate()


def test_accept_and_first_frame_in_one_chunk() -> None:
    client, server = handshake()
    data = server.accept() + server.text('[{"type":"status"}]')
    assert client.receive_data(data) == [WsOpen(), WsText('[{"type":"status"}]')]
    assert client.opened


# -- rejected upgrades (D12) -----------------------------------------------------------------------


def test_rejection_is_reported_with_status_and_whole_json_body() -> None:
    client, server = handshake()
    body = json.dumps({"message": "Unauthorized.", "detail": "bad token"}).encode()
    data = server.reject(401, body, [("Content-Type", "application/json")])
    head, tail = data[: len(data) - 5], data[len(data) - 5 :]
    assert client.receive_data(head) == []  # body incomplete: nothing reported yet
    events = client.receive_data(tail)
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, WsRejected)
    assert (event.status, event.reason, event.body) == (401, "Unauthorized", body)
    assert ("content-type", "application/json") in event.headers
    assert client.done
    assert client.receive_data(b"more") == []


def test_rejection_body_read_until_end_of_stream() -> None:
    client, _ = handshake()
    head = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n"
    assert client.receive_data(head) == []
    assert client.receive_data(b"down for maintenance") == []
    events = client.receive_data(None)
    assert events == [
        WsRejected(503, "Service Unavailable", b"down for maintenance", (("connection", "close"),))
    ]


def test_rejection_cut_short_by_end_of_stream_reports_what_arrived() -> None:
    client, server = handshake()
    data = server.reject(404, b"0123456789", finish=False)
    client.receive_data(data[:-5])
    events = client.receive_data(None)
    assert len(events) == 1
    assert isinstance(events[0], WsRejected)
    assert events[0].status == 404
    assert events[0].body == b"01234"


def test_rejection_body_is_bounded() -> None:
    client, server = handshake()
    body = b"x" * (MAX_REJECTION_BODY + 1000)
    events = client.receive_data(server.reject(502, body))
    assert len(events) == 1
    assert isinstance(events[0], WsRejected)
    assert events[0].body == body[:MAX_REJECTION_BODY]


def test_rejection_with_unknown_status_has_empty_reason() -> None:
    client, server = handshake()
    events = client.receive_data(server.reject(599, b""))
    assert events == [WsRejected(599, "", b"", (("content-length", "0"),))]


def test_informational_response_other_than_101_is_a_rejection() -> None:
    client, _ = handshake()
    events = client.receive_data(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert events == [WsRejected(100, "Continue", b"")]


def test_garbage_instead_of_http_response_is_a_failure() -> None:
    client, _ = handshake()
    events = client.receive_data(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    assert len(events) == 1
    assert isinstance(events[0], WsFailed)
    assert client.data_to_send() == b""


def test_bad_accept_token_is_a_failure() -> None:
    client, _ = handshake()
    response = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: wrong\r\n\r\n"
    )
    events = client.receive_data(response)
    assert len(events) == 1
    assert isinstance(events[0], WsFailed)


def test_end_of_stream_before_any_response_is_an_abrupt_close_d12() -> None:
    client, _ = handshake()
    assert client.receive_data(None) == [WsClosed(None, None)]


def test_end_of_stream_midway_through_the_response_headers_is_an_abrupt_close() -> None:
    client, server = handshake()
    client.receive_data(server.accept()[:10])
    assert client.receive_data(None) == [WsClosed(None, None)]


# -- messages -----------------------------------------------------------------------------------


def test_fragmented_5_mib_text_message_is_reassembled_wire_4_1() -> None:
    client, server = opened()
    text = ("é" + "abcdefghij" * 7) * (5 * MIB // 72)
    data = server.text(text, fragment=64 * 1024)
    events: list[WsEvent] = []
    for i in range(0, len(data), 1_000_000):
        events += client.receive_data(data[i : i + 1_000_000])
    assert events == [WsText(text)]
    assert len(text.encode()) > 5 * MIB - 100


def test_message_of_exactly_the_limit_is_accepted() -> None:
    client, server = opened(max_message_size=4 * MIB)
    text = "a" * (4 * MIB)
    assert client.receive_data(server.text(text, fragment=MIB)) == [WsText(text)]


def test_oversize_message_fails_and_queues_close_1009() -> None:
    client, server = opened(max_message_size=1000)
    events = client.receive_data(server.text("a" * 600) + server.text("b" * 1200, fragment=300))
    assert len(events) == 2
    assert events[0] == WsText("a" * 600)
    assert isinstance(events[1], WsFailed)
    assert "1000" in events[1].message
    server.receive(client.data_to_send())
    assert [c.code for c in server.closes()] == [1009]
    assert client.done
    assert client.receive_data(b"\x81\x01c") == []


def test_size_limit_counts_utf8_bytes() -> None:
    client, server = opened(max_message_size=10)
    events = client.receive_data(server.text("ééééé" + "é"))  # 12 bytes, 6 characters
    assert len(events) == 1
    assert isinstance(events[0], WsFailed)


def test_ping_is_answered_with_the_same_payload() -> None:
    client, server = opened()
    assert client.receive_data(server.ping(b"hb-1")) == []
    server.receive(client.data_to_send())
    assert [e for e in server.received if isinstance(e, Pong)] == [Pong(payload=b"hb-1")]
    assert client.data_to_send() == b""


def test_binary_messages_and_pongs_are_ignored() -> None:
    client, server = opened()
    data = server.binary(b"\x00\x01") + server.ws.send(Pong(payload=b"x")) + server.text("t")
    assert client.receive_data(data) == [WsText("t")]


def test_server_close_is_reported_and_answered() -> None:
    client, server = opened()
    events = client.receive_data(server.text("last") + server.close(1001, "going away"))
    assert events == [WsText("last"), WsClosed(1001, "going away")]
    server.receive(client.data_to_send())
    assert [c.code for c in server.closes()] == [1001]
    assert client.receive_data(None) == []


def test_close_frame_without_status_reports_1005() -> None:
    client, _server = opened()
    assert client.receive_data(b"\x88\x00") == [WsClosed(1005, "")]


def test_abrupt_end_of_stream_has_no_code() -> None:
    client, server = opened()
    assert client.receive_data(server.text("a")) == [WsText("a")]
    assert client.receive_data(None) == [WsClosed(None, None)]
    assert client.done
    assert client.receive_data(None) == []


def test_invalid_frame_is_a_protocol_failure_with_close_1002() -> None:
    client, server = opened()
    events = client.receive_data(b"\x8f\x00")  # reserved opcode 0xF
    assert len(events) == 1
    assert isinstance(events[0], WsFailed)
    server.receive(client.data_to_send())
    assert [c.code for c in server.closes()] == [1002]


def test_invalid_utf8_text_is_a_protocol_failure_with_close_1007() -> None:
    client, server = opened()
    events = client.receive_data(b"\x81\x02\xc3\x28")
    assert len(events) == 1
    assert isinstance(events[0], WsFailed)
    server.receive(client.data_to_send())
    assert [c.code for c in server.closes()] == [1007]


def test_close_queues_1000_once_and_then_waits_for_the_reply() -> None:
    client, server = opened()
    client.close()
    data = client.data_to_send()
    client.close()
    assert client.data_to_send() == b""
    server.receive(data)
    assert [(c.code, c.reason) for c in server.closes()] == [(1000, "")]
    reply = server.ws.send(server.closes()[0].response())
    assert client.receive_data(reply) == [WsClosed(1000, "")]
    client.close()
    assert client.data_to_send() == b""


def test_no_pong_and_no_second_close_once_closing() -> None:
    client, server = opened()
    client.close()
    server.receive(client.data_to_send())
    assert client.receive_data(b"\x89\x04late") == []
    assert client.data_to_send() == b""
    events = client.receive_data(b"\x8f\x00")
    assert len(events) == 1
    assert isinstance(events[0], WsFailed)
    assert client.data_to_send() == b""


def test_non_ascii_path_is_a_configuration_error() -> None:
    with pytest.raises(CoderAgentError):
        WebSocketClient("ws://h/chats/é", token=None)


def test_close_with_reason() -> None:
    client, server = opened()
    client.close(4000, "done here")
    server.receive(client.data_to_send())
    assert [(c.code, c.reason) for c in server.closes()] == [(4000, "done here")]


def test_close_before_the_upgrade_sends_nothing_and_ends() -> None:
    client, server = handshake()
    client.close()
    assert client.data_to_send() == b""
    assert client.done
    assert client.receive_data(server.accept()) == []


def test_close_after_a_terminal_event_is_a_no_op() -> None:
    client, _server = opened()
    client.receive_data(None)
    client.close()
    assert client.data_to_send() == b""


# -- byte-level robustness (h11 test_io style) ----------------------------------------------------


def _script(server: ServerSide) -> bytes:
    return (
        server.accept()
        + server.text("hello")
        + server.ping(b"p")
        + server.text("fragmented message é", fragment=4)
        + server.binary(b"ignored")
        + server.text("x" * 70_000)
        + server.close(1000, "bye")
    )


_EXPECTED = [
    WsOpen(),
    WsText("hello"),
    WsText("fragmented message é"),
    WsText("x" * 70_000),
    WsClosed(1000, "bye"),
]


def test_bytes_fed_one_at_a_time() -> None:
    client, server = handshake()
    data = _script(server)
    events: list[WsEvent] = []
    for i in range(len(data)):
        events += client.receive_data(data[i : i + 1])
    assert events == _EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_bytes_fed_at_random_splits(data: st.DataObject) -> None:
    client, server = handshake()
    payload = _script(server)
    cuts = sorted(
        data.draw(st.lists(st.integers(0, len(payload)), max_size=30), label="cut points")
    )
    events: list[WsEvent] = []
    start = 0
    for cut in [*cuts, len(payload)]:
        events += client.receive_data(payload[start:cut])
        start = cut
    assert events == _EXPECTED
    server.receive(client.data_to_send())
    assert any(isinstance(e, Pong) for e in server.received)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8), st.booleans())
def test_arbitrary_bytes_never_raise_and_end_at_most_once(
    chunks: list[bytes], after_open: bool
) -> None:
    client, _server = opened() if after_open else handshake()
    events: list[WsEvent] = []
    for chunk in chunks:
        events += client.receive_data(chunk)
    events += client.receive_data(None)
    terminal = [e for e in events if isinstance(e, WsClosed | WsRejected | WsFailed)]
    assert len(terminal) == 1
    assert events[-1] is terminal[0]
    assert client.done
    assert isinstance(client.data_to_send(), bytes)


# -- the token the server sends back (docs/robustness.md) -------------------------------------------


def test_a_close_reason_echoing_the_token_is_redacted() -> None:
    client, server = opened()
    events = client.receive_data(server.close(4000, f"bad {TOKEN}"))
    assert events == [WsClosed(4000, "bad <redacted>")]


def test_a_close_reason_without_the_token_is_kept_as_sent() -> None:
    client, server = opened()
    assert client.receive_data(server.close(1001, "going away")) == [WsClosed(1001, "going away")]


def test_a_rejection_echoing_the_token_loses_it_from_body_and_headers() -> None:
    client, server = handshake()
    body = json.dumps({"message": f"token {TOKEN} is invalid"}).encode()
    (event,) = client.receive_data(server.reject(401, body, [("X-Echo", TOKEN)]))
    assert isinstance(event, WsRejected)
    assert TOKEN.encode() not in event.body and b"token <redacted> is invalid" in event.body
    assert ("x-echo", "<redacted>") in event.headers


def test_a_handshake_failure_quoting_the_token_is_redacted() -> None:
    # wsproto quotes an extension it did not offer: the server chose what it quotes.
    client, server = handshake()
    accept = server.accept()
    head, _, _rest = accept.partition(b"\r\n\r\n")
    answer = head + f"\r\nSec-WebSocket-Extensions: {TOKEN}\r\n\r\n".encode()
    (event,) = client.receive_data(answer)
    assert isinstance(event, WsFailed) and event.handshake
    assert event.message == "WebSocket handshake failed: unrecognized extension <redacted>"


def test_an_error_event_loses_the_token_and_chat_content_keeps_it() -> None:
    client, server = opened()
    text = f"the model wrote {TOKEN}"
    part = {"type": "message_part", "chat_id": "c1", "part": {"type": "text", "text": text}}
    error = {"type": "error", "chat_id": "c1", "error": {"message": f"x {TOKEN}"}}
    data = server.frame([part]) + server.frame([part, error])
    first, second = client.receive_data(data)
    assert isinstance(first, WsText) and isinstance(second, WsText)
    assert json.loads(first.text) == [part]
    assert json.loads(second.text)[0] == part
    assert json.loads(second.text)[1]["error"] == {"message": "x <redacted>"}


def test_without_a_token_nothing_is_redacted() -> None:
    client, server = opened(token=None)
    assert client.receive_data(server.close(4000, f"bad {TOKEN}")) == [
        WsClosed(4000, f"bad {TOKEN}")
    ]


def test_a_close_reason_cut_in_the_middle_of_the_token_loses_what_it_holds() -> None:
    # The server cuts a close reason to 123 bytes: the token may be only begun.
    client, server = opened()
    reason = ("x" * 110 + TOKEN)[:123]
    (event,) = client.receive_data(server.close(4000, reason))
    assert event == WsClosed(4000, "x" * 110 + "<redacted>")


def test_a_rejection_body_cut_at_its_bound_in_the_middle_of_the_token_loses_it() -> None:
    client, server = handshake()
    body = b"x" * (MAX_REJECTION_BODY - 10) + TOKEN.encode() + b" and more"
    events = client.receive_data(server.reject(500, body))
    (event,) = events
    assert isinstance(event, WsRejected)
    assert event.body == b"x" * (MAX_REJECTION_BODY - 10) + b"<redacted>"


def test_an_idle_open_connection_answers_pings_closes_and_fragments_as_before() -> None:
    """Between messages an open connection does not keep wsproto's state (an idle chat's
    memory); every frame after that is handled as on a connection that kept it: a ping is
    answered, a fragmented message with a ping between its fragments is joined, the
    caller's close is one valid close frame, and the server's answer ends the connection."""
    client, server = opened()
    assert client.receive_data(server.text("first")) == [WsText("first")]
    assert client.receive_data(server.ping(b"hb-1")) == []
    fragments = server.text("abcdef", fragment=2)
    middle = fragments.index(b"cd") - 2  # the second fragment's header
    data = fragments[:middle] + server.ping(b"hb-2") + fragments[middle:]
    assert client.receive_data(data) == [WsText("abcdef")]
    assert client.receive_data(server.text("then")) == [WsText("then")]
    server.receive(client.data_to_send())
    pongs = [e.payload for e in server.received if isinstance(e, Pong)]
    assert pongs == [b"hb-1", b"hb-2"]
    client.close(1000, "bye")
    server.receive(client.data_to_send())
    assert [(c.code, c.reason) for c in server.closes()] == [(1000, "bye")]
    assert client.receive_data(server.ws.send(server.closes()[0].response())) == [
        WsClosed(1000, "bye")
    ]
    assert client.done
