"""The hostile REST cases: each is a handler for ``HostileServer`` plus what the client is
configured with, and the decision an adapter must implement to pass it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from .server import Conn, response

#: How long a misbehaving handler keeps misbehaving before it gives up and hangs up: long
#: past every bound a case sets, so a client that honours none of them is seen to fail.
GIVE_UP = 6.5

#: The bound every case sets on its call (``http_timeout``), and the margin past it that
#: still counts as bounded: a generous outer bound that only catches a hang.
BOUND = 1.0
MARGIN = 4.0

#: The body limit the size cases set (``max_response_bytes``).
LIMIT = 1024 * 1024


@attrs.frozen
class Case:
    name: str
    handler: Callable[[Conn], None]
    #: The error class the call must end with (``None``: any allowed error).
    expect: type[BaseException] | tuple[type[BaseException], ...] | None = None
    client: dict[str, Any] = attrs.Factory(
        lambda: {"http_timeout": BOUND, "max_response_bytes": LIMIT}
    )


def _answer(data: bytes) -> Callable[[Conn], None]:
    def handler(conn: Conn) -> None:
        if conn.read_request()[0]:
            conn.send(data)
            conn.drain()

    return handler


def _json(status: int, value: Any) -> Callable[[Conn], None]:
    return _answer(response(status, json.dumps(value).encode()))


def _reset_before_answer(conn: Conn) -> None:
    conn.read_request()
    conn.reset()


def _reset_mid_head(conn: Conn) -> None:
    conn.read_request()
    conn.send(b"HTTP/1.1 200 OK\r\nContent-Le")
    conn.reset()


def _truncated_body(conn: Conn) -> None:
    conn.read_request()
    conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"id\":")
    conn.sock.close()


def _reset_mid_body(conn: Conn) -> None:
    conn.read_request()
    conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"id\":")
    conn.reset()


def _garbage_status_line(conn: Conn) -> None:
    conn.read_request()
    conn.send(b"NOT HTTP AT ALL\r\n\r\n")
    conn.drain()


def _never_answers(conn: Conn) -> None:
    conn.read_request()
    conn.pause(GIVE_UP)


def _trickled_body(conn: Conn) -> None:
    conn.read_request()
    body = b'{"id":"c1"' + b" " * 49 + b"}"
    conn.send(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    for i in range(len(body)):
        if not conn.send(body[i : i + 1]) or not conn.pause(GIVE_UP / len(body)):
            return


def _trickled_head(conn: Conn) -> None:
    conn.read_request()
    head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200
    for i in range(len(head)):
        if not conn.send(head[i : i + 1]) or not conn.pause(GIVE_UP / len(head)):
            return


def _continue_flood(conn: Conn) -> None:
    conn.read_request()
    for _ in range(int(GIVE_UP / 0.01)):
        if not conn.send(b"HTTP/1.1 100 Continue\r\n\r\n") or not conn.pause(0.01):
            return


def _endless_chunked(conn: Conn) -> None:
    conn.read_request()
    conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    sent = 0
    # Enough to pass the limit many times over, then stall: a client without the limit
    # holds it all, a client without a deadline waits for the rest.
    while sent < 48 * LIMIT:
        if not conn.send_patiently(chunk):
            return
        sent += 65536
    conn.pause(GIVE_UP)


#: Built once, at import: what the server holds is not counted as the client's growth by
#: the report (``tests/bench/hostile.py`` traces the whole process).
_TOO_LARGE = response(200, b'{"id":"c1","pad":"' + b"x" * (4 * LIMIT) + b'"}')


def _too_large(conn: Conn) -> None:
    conn.read_request()
    if conn.send_patiently(_TOO_LARGE):
        conn.drain()


def _slow_endless_chunked(conn: Conn) -> None:
    conn.read_request()
    conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(int(GIVE_UP / 0.05)):
        if not conn.send(b"1\r\n \r\n") or not conn.pause(0.05):
            return


CHAT = {"id": "c1"}

REST_CASES: list[Case] = [
    Case("status-500-json", _json(500, {"message": "boom", "detail": "d"})),
    Case("status-404-empty", _answer(response(404))),
    Case("status-429-html", _answer(response(429, b"<html>" * 1000, {"Content-Type": "text/html"}))),
    Case("status-200-not-json", _answer(response(200, b"<html>not json</html>"))),
    Case("status-200-json-array", _json(200, [1, 2, 3])),
    Case("status-200-deep-nesting", _answer(response(200, b"[" * 100_000 + b"]" * 100_000))),
    Case("status-400-deep-nesting", _answer(response(400, b"[" * 100_000 + b"]" * 100_000))),
    Case("status-500-huge-message", _json(500, {"message": "m" * (8 * LIMIT)})),
    Case("status-500-lone-surrogate", _answer(response(500, b'{"message":"a\\ud800b"}'))),
    Case("status-999", _answer(response(999, b"{}"))),
    Case("redirect-302", _answer(response(302, b"", {"Location": "http://127.0.0.1:9/x"}))),
    Case("reset-before-answer", _reset_before_answer),
    Case("reset-mid-head", _reset_mid_head),
    Case("truncated-body", _truncated_body),
    Case("reset-mid-body", _reset_mid_body),
    Case("garbage-status-line", _garbage_status_line),
    Case("never-answers", _never_answers),
    Case("trickled-body", _trickled_body),
    Case("trickled-head", _trickled_head),
    Case("continue-flood", _continue_flood),
    Case("slow-endless-chunked", _slow_endless_chunked),
    Case("endless-chunked", _endless_chunked),
    Case("body-over-limit", _too_large),
]
