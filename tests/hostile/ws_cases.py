"""The hostile stream cases: a server that creates the chat properly, then misbehaves on the
WebSocket (its upgrade answer, frames, events). Each case drives one ``CoderAgent.generate``
with a ``request_timeout`` that bounds it."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from typing import Any

import attrs

from .server import Conn, response

CHAT_ID = "0b1c3d4e-0000-4000-8000-00000000c0de"
OTHER_CHAT = "0b1c3d4e-0000-4000-8000-0000000f0e19"
ORG = "0b1c3d4e-0000-4000-8000-0000000000a1"

#: The turn's bound (``request_timeout``) and the margin past it that still counts as bounded.
TURN_BOUND = 2.0
TURN_MARGIN = 6.0

_CHAT = {
    "id": CHAT_ID,
    "organization_id": ORG,
    "owner_id": ORG,
    "title": "x",
    "status": "running",
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
    "archived": False,
}


def frame(payload: bytes, opcode: int = 0x1, fin: bool = True, rsv: int = 0) -> bytes:
    """One unmasked server frame."""
    first = (0x80 if fin else 0) | rsv | opcode
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", first, size)
    elif size < 65536:
        head = struct.pack("!BBH", first, 126, size)
    else:
        head = struct.pack("!BBQ", first, 127, size)
    return head + payload


def events(*items: dict[str, Any]) -> bytes:
    return frame(json.dumps(list(items)).encode())


def own(kind: str, **payload: Any) -> dict[str, Any]:
    return {"type": kind, "chat_id": CHAT_ID, **payload}


def answer_text(text: str, message_id: int = 4) -> bytes:
    """A whole assistant answer and the end of the turn, in one frame."""
    return events(
        own(
            "message",
            message={
                "id": message_id,
                "chat_id": CHAT_ID,
                "role": "assistant",
                "created_at": "2026-01-01T00:00:01Z",
                "content": [{"type": "text", "text": text}],
            },
        ),
        own("status", status={"status": "waiting"}),
    )


Stream = Callable[[Conn, bytes], None]


def serve(stream: Stream) -> Callable[[Conn], None]:
    """A handler that answers the REST calls of a turn and gives stream upgrades to
    ``stream(conn, head)``."""

    def handler(conn: Conn) -> None:
        while True:
            head, _body = conn.read_request()
            if not head:
                return
            line = head.split(b"\r\n", 1)[0]
            target = line.split(b" ")[1].split(b"?")[0] if b" " in line else b""
            if target.endswith(b"/stream"):
                conn.server.upgrades += 1
                stream(conn, head)
                return
            if line.startswith(b"POST ") and target.endswith(b"/chats"):
                conn.send(response(201, json.dumps(_CHAT).encode()))
            elif b"/interrupt" in line:
                conn.send(response(409, b'{"message":"Chat is not in an interruptible state."}'))
            else:
                conn.send(response(204))

    return handler


def accept(conn: Conn, head: bytes, key: str | None = None) -> bool:
    value = conn.ws_accept_value(head) if key is None else key
    return conn.send(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + f"Sec-WebSocket-Accept: {value}\r\n\r\n".encode()
    )


@attrs.frozen
class WsCase:
    name: str
    stream: Stream
    #: ``None``: the turn must fail with an allowed error; else the text it must answer.
    text: str | None = None
    #: Text that must never reach the user.
    forbidden: str | None = None
    #: The client must drop a connection whose peer reads nothing (D30), and so dial again
    #: within the turn.
    dropped: bool = False
    #: The turn's ``request_timeout``.
    bound: float = TURN_BOUND

    @property
    def stream_handler(self) -> Callable[[Conn], None]:
        return serve(self.stream)


#: Built once, at import (the report traces the whole process, server included).
_HUGE_REJECTION = response(500, b"x" * (8 * 1024 * 1024), {"Content-Type": "text/plain"})


def _reject_huge(conn: Conn, head: bytes) -> None:
    if conn.send_patiently(_HUGE_REJECTION):
        conn.drain()


def _bad_accept(conn: Conn, head: bytes) -> None:
    accept(conn, head, key="bm90IHRoZSByaWdodCBvbmU=")
    conn.drain()


def _never_upgrades(conn: Conn, head: bytes) -> None:
    conn.pause(3 * TURN_BOUND)


def _reset_after_upgrade(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.reset()


def _reset_after_first_frame(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(events(own("status", status={"status": "running"})))
    conn.reset()


def _reserved_bits(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(frame(b"[]", rsv=0x40))
    conn.drain()


def _masked_frame(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(b"\x81\x82abcd" + bytes(a ^ b for a, b in zip(b"[]", b"ab", strict=True)))
    conn.drain()


def _not_json(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(frame(b"{not json"))
    conn.drain()


def _deep_frame(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(frame(b"[" * 100_000 + b"]" * 100_000))
    conn.drain()


def _invalid_chat_id(conn: Conn, head: bytes) -> None:
    """An event whose chat id is not one (wire 3.9): the frame is refused, not taken as
    another chat's event to be dropped (D31) while the turn waits."""
    accept(conn, head)
    conn.send(
        events(
            {"type": "status", "chat_id": CHAT_ID + "\r\n", "status": {"status": "running"}},
        )
        + answer_text("too late")
    )
    conn.drain()


def _binary_then_answer(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(frame(b"\x00\x01", opcode=0x2) + answer_text("after binary"))
    conn.drain()


def _fragmented_answer(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    data = answer_text("in three pieces")
    payload = data[2:] if data[1] < 126 else data[4:]
    third = len(payload) // 3
    conn.send(
        frame(payload[:third], fin=False)
        + frame(b"", opcode=0x9)  # a ping between fragments
        + frame(payload[third : 2 * third], opcode=0x0, fin=False)
        + frame(payload[2 * third :], opcode=0x0)
    )
    conn.drain()


def _foreign_events(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(
        events(
            {
                "type": "message_part",
                "chat_id": OTHER_CHAT,
                "message_part": {"role": "assistant", "part": {"type": "text", "text": "INJECTED"}},
            },
            {
                "type": "message",
                "chat_id": OTHER_CHAT,
                "message": {
                    "id": 99,
                    "chat_id": OTHER_CHAT,
                    "role": "assistant",
                    "created_at": "2026-01-01T00:00:01Z",
                    "content": [{"type": "text", "text": "INJECTED"}],
                },
            },
            {"type": "status", "chat_id": OTHER_CHAT, "status": {"status": "waiting"}},
        )
    )
    conn.pause(TURN_BOUND / 4)
    conn.send(answer_text("the real answer"))
    conn.drain()


def _lone_surrogates(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(
        frame(
            b'[{"type":"message_part","chat_id":"' + CHAT_ID.encode() + b'","message_part":'
            b'{"role":"assistant","part":{"type":"text","text":"a\\ud800b"}}}]'
        )
        + answer_text("a\ud800b")
    )
    conn.drain()


def _contradictory_statuses(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(
        events(
            own("status", status={"status": "running"}),
            own("status", status={"status": "bogus"}),
            own("status", status={"status": "pending"}),
        )
        + answer_text("settled at last")
    )
    conn.drain()


def _close_frame_mid_turn(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    conn.send(frame(struct.pack("!H", 1011) + b"going away", opcode=0x8))
    conn.drain()


#: The ping flood's turn bound: long enough to fill 1 MiB of pongs on a loaded machine.
PING_FLOOD_BOUND = 10.0


def _ping_flood_never_reads(conn: Conn, head: bytes) -> None:
    """Pings as fast as the client takes them; nothing it sends is ever read. A client that
    bounds what waits unsent (D30) drops the connection: the server's writes then fail."""
    accept(conn, head)
    ping = frame(b"p" * 125, opcode=0x9) * 64
    # Flooding for as long as the turn may last: a client slowed by a loaded machine still has
    # the whole turn to fill its 1 MiB of unsent pongs and drop the connection.
    end = time.monotonic() + PING_FLOOD_BOUND + 2.0
    while time.monotonic() < end and not conn.stopping:
        try:
            conn.sock.sendall(ping)
        except TimeoutError:
            continue
        except OSError:
            conn.server.dropped += 1
            return


WS_CASES: list[WsCase] = [
    WsCase("upgrade-rejected-huge-body", _reject_huge),
    WsCase("upgrade-bad-accept", _bad_accept),
    WsCase("upgrade-never-answered", _never_upgrades),
    WsCase("reset-after-upgrade", _reset_after_upgrade),
    WsCase("reset-after-first-frame", _reset_after_first_frame),
    WsCase("frame-reserved-bits", _reserved_bits),
    WsCase("frame-masked-by-server", _masked_frame),
    WsCase("frame-not-json", _not_json),
    WsCase("frame-deep-nesting", _deep_frame),
    WsCase("event-invalid-chat-id", _invalid_chat_id, forbidden="too late"),
    WsCase("close-frame-mid-turn", _close_frame_mid_turn),
    WsCase("binary-frame-then-answer", _binary_then_answer, text="after binary"),
    WsCase("fragmented-answer-with-ping", _fragmented_answer, text="in three pieces"),
    WsCase("foreign-events", _foreign_events, text="the real answer", forbidden="INJECTED"),
    WsCase("lone-surrogates", _lone_surrogates, text="a\ufffdb"),
    WsCase(
        "ping-flood-peer-never-reads",
        _ping_flood_never_reads,
        dropped=True,
        bound=PING_FLOOD_BOUND,
    ),
    WsCase("unknown-statuses", _contradictory_statuses, text="settled at last"),
]
