"""The data-frame fast path of ``WebSocketClient`` is invisible (wire 4.1-4.2; D12).

After the upgrade, complete text frames are decoded by the client itself and everything else
goes to wsproto. Whatever the server sends, cut into whatever reads, the client must report
exactly the events, and write exactly the bytes, that it reports and writes when every byte
goes through wsproto: that reference is the same class with the fast path switched off.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request
from wsproto.frame_protocol import FrameProtocol

from coder_proto._stream.websocket import WebSocketClient, WsClosed, WsFailed, WsOpen, WsText

URL = "ws://127.0.0.1:8080/api/v2/chats/c/stream?after_id=1"
LIMIT = 300_000


def _pair(*, fast: bool) -> tuple[WebSocketClient, bytes]:
    """A client that sent its upgrade request, and the server's 101 response to it."""
    client = WebSocketClient(URL, token="t", max_message_size=LIMIT)
    if not fast:
        client._head = None  # the reference: every byte through wsproto
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(client.initiate())
    assert any(isinstance(e, Request) for e in server.events())
    return client, server.send(AcceptConnection())


def _raw(first: int, payload: bytes, *, mask: bool = False) -> bytes:
    """A frame built by hand (for what wsproto will not build: masked, reserved bits)."""
    length = len(payload)
    if length < 126:
        head = bytes([first, length | (0x80 if mask else 0)])
    elif length < 65536:
        head = bytes([first, 126 | (0x80 if mask else 0)]) + struct.pack("!H", length)
    else:
        head = bytes([first, 127 | (0x80 if mask else 0)]) + struct.pack("!Q", length)
    if mask:
        key = b"\x01\x02\x03\x04"
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        head += key
    return head + payload


texts = st.one_of(
    st.text(max_size=20),
    st.integers(126, 70_000).map(lambda n: "é" * (n // 2) + "x" * (n % 2)),
)


@st.composite
def server_frames(draw: st.DrawFn) -> bytes:
    proto = FrameProtocol(client=False, extensions=[])
    out = b""
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(
            st.sampled_from(["text", "text", "text", "ping", "pong", "binary", "fragmented", "bad"])
        )
        if kind == "text":
            out += proto.send_data(draw(texts), True)
        elif kind == "ping":
            out += proto.ping(draw(st.binary(max_size=10)))
        elif kind == "pong":
            out += proto.pong(draw(st.binary(max_size=10)))
        elif kind == "binary":
            out += proto.send_data(draw(st.binary(max_size=200)), True)
        elif kind == "fragmented":
            pieces = draw(st.lists(st.text(max_size=200), min_size=2, max_size=4))
            for i, piece in enumerate(pieces):
                out += proto.send_data(piece, i == len(pieces) - 1)
                if draw(st.booleans()):
                    out += proto.ping(b"mid")  # control frames may interleave fragments
        else:
            out += draw(
                st.sampled_from(
                    [
                        _raw(0x81, b"\xff\xfe"),  # invalid UTF-8
                        _raw(0x81, b"masked", mask=True),
                        _raw(0xC1, b"rsv1"),
                        _raw(0x80, b"orphan continuation"),
                        _raw(0x81, b"x" * (LIMIT + 1)),  # over the size limit
                        _raw(0x89, b"p" * 126),  # control frame too long
                        # A new message before the fragmented one finished.
                        _raw(0x01, b"first fragment") + _raw(0x81, b"interloper"),
                    ]
                )
            )
    if draw(st.booleans()):
        out += proto.close(draw(st.sampled_from([1000, 1001, 4000])), "bye")
    return out


def _run(client: WebSocketClient, accept: bytes, data: bytes, cuts: list[int]) -> dict[str, Any]:
    stream = accept + data
    points = sorted({c % (len(stream) + 1) for c in cuts})
    events: list[Any] = []
    written = b""
    last = 0
    for point in [*points, len(stream)]:
        events += client.receive_data(stream[last:point])
        written += client.data_to_send()
        last = point
    events += client.receive_data(None)
    written += client.data_to_send()
    return {"events": events, "written_len": len(written), "done": client.done}


@settings(max_examples=300, deadline=None)
@given(data=server_frames(), cuts=st.lists(st.integers(0, 10**6), max_size=6))
def test_fast_path_reports_what_wsproto_reports(data: bytes, cuts: list[int]) -> None:
    fast, accept = _pair(fast=True)
    slow, accept_slow = _pair(fast=False)
    got = _run(fast, accept, data, cuts)
    want = _run(slow, accept_slow, data, cuts)
    # Close frames and pongs are masked with random keys: compare their lengths.
    assert got == want


def test_text_frames_after_the_upgrade_take_the_fast_path() -> None:
    client, accept = _pair(fast=True)
    proto = FrameProtocol(client=False, extensions=[])
    frames = b"".join(proto.send_data(f'[{{"n":{i}}}]\n', True) for i in range(3))
    assert client.receive_data(accept + frames[:7]) == [WsOpen()]
    assert client._fast
    assert client.receive_data(frames[7:]) == [WsText(f'[{{"n":{i}}}]\n') for i in range(3)]


def test_the_fast_paths_text_events_are_the_frozen_value_class() -> None:
    """The fast path builds its ``WsText`` without the ``__init__`` frame: the same frozen,
    hashable, picklable value."""
    client, accept = _pair(fast=True)
    proto = FrameProtocol(client=False, extensions=[])
    client.receive_data(accept)
    (event,) = client.receive_data(proto.send_data("[]\n", True))
    assert type(event) is WsText and event == WsText("[]\n")
    assert hash(event) == hash(WsText("[]\n")) and repr(event) == repr(WsText("[]\n"))
    assert pickle.loads(pickle.dumps(event)) == event
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.text = "other"  # type: ignore[misc]


def test_end_of_stream_inside_a_frame_is_a_close_without_code() -> None:
    client, accept = _pair(fast=True)
    proto = FrameProtocol(client=False, extensions=[])
    frame = proto.send_data("x" * 500, True)
    assert client.receive_data(accept + frame[:100]) == [WsOpen()]
    assert client.receive_data(None) == [WsClosed(None, None)]


def test_rejected_upgrade_never_takes_the_fast_path() -> None:
    client = WebSocketClient(URL, token=None)
    client.initiate()
    response = b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno"
    events = client.receive_data(response)
    assert [type(e).__name__ for e in events] == ["WsRejected"]
    assert not client._fast


def test_unterminated_response_head_keeps_the_wsproto_path() -> None:
    client = WebSocketClient(URL, token=None)
    client.initiate()
    events = client.receive_data(b"HTTP/1.1 101 Switching\r\nX: " + os.urandom(8).hex().encode())
    assert events == []
    filler = b"y" * (70 * 1024)
    events = client.receive_data(filler)
    assert client._head is None and not client._fast
    events += client.receive_data(None)
    assert len(events) == 1 and isinstance(events[0], WsClosed | WsFailed)


def test_frame_headers_cut_anywhere_wait_for_the_rest() -> None:
    """A read boundary inside a frame's header or extended length only delays the text."""
    proto = FrameProtocol(client=False, extensions=[])
    for text in ("short", "m" * 300, "l" * 70_000):
        frame = proto.send_data(text, True)
        for cut in range(1, min(11, len(frame))):
            client, accept = _pair(fast=True)
            assert client.receive_data(accept + frame[:cut]) == [WsOpen()]
            assert client.receive_data(frame[cut:]) == [WsText(text)]
