"""One TCP connection of the served fake: HTTP/1.1 requests (h11) answered by the model, until
the client leaves or a request upgrades the connection to a WebSocket.

What the connection reads is bounded. Request heads may not exceed 64 KiB. A body is never
read past its route's limit (``FakeCoderModel.body_limit``): a ``Content-Length`` over it is
answered 413 before a byte of the body is read, and a chunked body is counted as it arrives
and answered 413 the moment it passes the limit. After a 413 the connection is half-closed
and closed; what is read of the rest of the body first is bounded too. A declared body at most
``REFUSED_DRAIN`` bytes over the limit is read to its end and dropped (for at most a second),
so that a client that writes its whole body before it reads gets the answer rather than a
reset; a longer one is not read at all, and of a chunked body at most ``REFUSED_DRAIN`` bytes
more are. A client that keeps sending past that finds the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterable
from typing import Any

import attrs
import h11
from wsproto.utilities import generate_accept_token

from coder_proto.fake import FakeHttpResponse

from ._serving import Serving
from ._websocket import CLOSE_TIMEOUT, READ_CHUNK, run_websocket

__all__ = ["MAX_HEAD_BYTES", "serve_connection"]

#: The largest request line plus headers read.
MAX_HEAD_BYTES = 64 * 1024
#: How long the rest of a refused body is read and dropped, at most, before the connection
#: closes.
LINGER = CLOSE_TIMEOUT
#: How much of the rest of a refused body is read and dropped, at most.
REFUSED_DRAIN = 16 * 1024 * 1024


@attrs.frozen
class _Refusal:
    """The 413 that answers a body over its route's limit, and how many bytes of the rest
    are read and dropped before the connection closes."""

    response: FakeHttpResponse
    drain: int


async def serve_connection(
    serving: Serving, conn_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer requests on one connection until it ends."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    while True:
        try:
            event = await _next_event(conn, reader)
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                serving.note(conn_id, f"bad request ({exc})")
                await _send(conn, writer, _plain(exc.error_status_hint, "Bad Request"), close=True)
            return
        if not isinstance(event, h11.Request):
            return
        method = event.method.decode("ascii", "replace")
        target = event.target.decode("ascii", "replace")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers]
        body = await _read_body(serving, conn_id, conn, reader, writer, method, target, headers)
        if body is None:
            return
        if isinstance(body, _Refusal):
            await _send(conn, writer, body.response, close=True)
            await _end_refused(reader, writer, body.drain)
            return
        if method == "GET" and _wants_websocket(headers):
            await _upgrade(serving, conn_id, conn, reader, writer, target, headers)
            return
        with serving.lock:
            response = serving.model.handle_http(method, target, headers, body, time.monotonic())
            touched = serving.model.drain_touched()
            serving.note_answer(conn_id)
        serving.wake_request(touched)
        if response.delay > 0:
            await asyncio.sleep(response.delay)
        await _send(conn, writer, response, close=False)
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
            return
        try:
            conn.start_next_cycle()
        except h11.LocalProtocolError:
            return


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await reader.read(READ_CHUNK))


async def _read_body(
    serving: Serving,
    conn_id: int,
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    method: str,
    target: str,
    headers: list[tuple[str, str]],
) -> bytes | _Refusal | None:
    """The request's body, the 413 to answer instead, or ``None`` when the connection ended
    (or broke the protocol) before the body did."""
    with serving.lock:
        limit = serving.model.body_limit(method, target)
    declared = _content_length(headers)
    if declared is not None and declared > limit:
        # None of it was read: all of it, or (when it is that long) nothing.
        drain = declared if declared <= limit + REFUSED_DRAIN else 0
        return _Refusal(_refuse(serving, conn_id, method, target), drain)
    if conn.they_are_waiting_for_100_continue:
        writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
    body = bytearray()
    while True:
        try:
            part = await _next_event(conn, reader)
        except h11.RemoteProtocolError:
            return None
        if isinstance(part, h11.Data):
            body += part.data
            if len(body) > limit:
                # A chunked body, whose length is not known.
                return _Refusal(_refuse(serving, conn_id, method, target), REFUSED_DRAIN)
        elif isinstance(part, h11.EndOfMessage):
            return bytes(body)
        else:
            return None


def _refuse(serving: Serving, conn_id: int, method: str, target: str) -> FakeHttpResponse:
    with serving.lock:
        response = serving.model.refuse_body(method, target, time.monotonic())
        serving.note_answer(conn_id)
    return response


def _content_length(headers: Iterable[tuple[str, str]]) -> int | None:
    for key, value in headers:
        if key.lower() == "content-length":
            # h11 has checked it is one non-negative decimal number.
            return int(value)
    return None


async def _end_refused(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drain: int
) -> None:
    """Half-close after a refusal's answer, then read and drop at most ``drain`` bytes of
    what the client still sends, for at most ``LINGER`` seconds; the caller closes."""
    with contextlib.suppress(OSError):  # the client may be gone already
        writer.write_eof()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(LINGER):
            while drain > 0:
                data = await reader.read(min(READ_CHUNK, drain))
                if not data:
                    return
                drain -= len(data)


async def _send(
    conn: h11.Connection, writer: asyncio.StreamWriter, response: FakeHttpResponse, *, close: bool
) -> None:
    headers = list(response.headers)
    headers.append(("Content-Length", str(len(response.body))))
    if close:
        headers.append(("Connection", "close"))
    data = conn.send(h11.Response(status_code=response.status, headers=headers)) or b""
    if response.body:
        data += conn.send(h11.Data(data=response.body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    writer.write(data)
    await writer.drain()


async def _upgrade(
    serving: Serving,
    conn_id: int,
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    target: str,
    headers: list[tuple[str, str]],
) -> None:
    with serving.lock:
        result = serving.model.handle_upgrade(target, headers, time.monotonic())
        serving.note_answer(conn_id)
    if isinstance(result, FakeHttpResponse):
        await _send(conn, writer, result, close=True)
        return
    sub = result
    lowered = {k.lower(): v for k, v in headers}
    key = lowered.get("sec-websocket-key", "")
    if not key or lowered.get("sec-websocket-version", "") != "13":
        with serving.lock:
            sub.close()
        serving.note(conn_id, "invalid WebSocket handshake: 400")
        await _send(conn, writer, _plain(400, "Invalid WebSocket handshake."), close=True)
        return
    accept = generate_accept_token(key.encode("ascii", "replace"))
    response = h11.InformationalResponse(
        status_code=101,
        headers=[
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", accept.decode("ascii")),
        ],
    )
    writer.write(conn.send(response) or b"")
    await writer.drain()
    trailing, _closed = conn.trailing_data
    await run_websocket(serving, conn_id, reader, writer, sub, bytes(trailing))


def _wants_websocket(headers: Iterable[tuple[str, str]]) -> bool:
    upgrade = connection = False
    for key, value in headers:
        name = key.lower()
        if name == "upgrade" and value.strip().lower() == "websocket":
            upgrade = True
        elif name == "connection" and "upgrade" in value.lower():
            connection = True
    return upgrade and connection


def _plain(status: int, message: str) -> FakeHttpResponse:
    """An error answer of the serving loop itself (the model never saw the request)."""
    return FakeHttpResponse(
        status=status,
        headers=(("Content-Type", "application/json; charset=utf-8"),),
        body=json.dumps({"message": message}).encode(),
    )
