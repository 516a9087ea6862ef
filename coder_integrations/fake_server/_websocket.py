"""One accepted WebSocket of the served fake: frames out as the model's subscription produces
them, the client's frames read only for the heartbeat and the closing handshake.

The loop sends WebSocket pings (every ``ping_interval`` seconds; a pong missing for
``ping_timeout`` closes with 1001 "Ping failed"), closes a connection whose client sends a
data frame (1008: the server never reads data), and ends when the subscription does (with its
close code, or by dropping the TCP connection). A client that leaves (a close frame, or a
connection that simply ends) is gone at once: what the model produced for it is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

import attrs
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from coder_proto.fake import StreamSubscription, WatchSubscription

from ._serving import Serving, wait_event

__all__ = ["CLOSE_TIMEOUT", "READ_CHUNK", "run_websocket"]

#: How long a closing handshake may take before the socket is dropped.
CLOSE_TIMEOUT = 1.0
READ_CHUNK = 65_536
_OPEN = ConnectionState.OPEN


@attrs.define
class _Client:
    """What the reader task learned about the client side."""

    wake: asyncio.Event
    closed: bool = False
    gone: bool = False
    violation: bool = False
    last_pong: float = 0.0


async def run_websocket(
    serving: Serving,
    conn_id: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    sub: StreamSubscription | WatchSubscription,
    trailing: bytes,
) -> None:
    """Serve ``sub`` on the upgraded connection until either side ends it."""
    ws = WsConnection(ConnectionType.SERVER)
    client = _Client(wake=asyncio.Event(), last_pong=time.monotonic())
    waker_chat = sub.chat_id if isinstance(sub, StreamSubscription) else None
    serving.add_waker(client.wake, waker_chat)
    serving.count("open_websockets", 1)
    reader_task = asyncio.create_task(_read_client(reader, writer, ws, client, trailing))
    close_code: int | None = 1001
    close_reason = "server shutting down"
    ending = ""
    try:
        next_ping = time.monotonic() + serving.ping_interval
        ping_sent: float | None = None
        while not serving.stopping:
            now = time.monotonic()
            with serving.lock:
                frames = sub.pull(now)
                closed = sub.closed
                frame_deadline = sub.next_deadline()
            if client.closed or client.gone or ws.state is not _OPEN:
                # The client left: what the model produced for it is dropped.
                close_code = None if client.gone else 1000
                close_reason = ""
                ending = "client gone" if client.gone else "client closed"
                return
            for frame in frames:
                text = frame.decode("utf-8")
                serving.note(conn_id, f"frame {text.rstrip()}")
                writer.write(ws.send(TextMessage(data=text)))
            if frames:
                await writer.drain()
            if closed:
                close_code, close_reason = sub.close_code, ""
                ending = "dropped" if close_code is None else ""
                return
            if client.violation:
                close_code, close_reason = 1008, "unexpected data message"
                return
            # Heartbeat (server-behaviour 3.1): one ping at a time; an unanswered ping older
            # than ping_timeout ends the connection.
            if ping_sent is not None and client.last_pong >= ping_sent:
                ping_sent = None
            if ping_sent is not None and now - ping_sent >= serving.ping_timeout:
                close_code, close_reason = 1001, "Ping failed"
                return
            if ping_sent is None and now >= next_ping and ws.state is _OPEN:
                writer.write(ws.send(Ping(payload=secrets.token_bytes(4))))
                await writer.drain()
                ping_sent = now
                next_ping = now + serving.ping_interval
            wait_until = next_ping if ping_sent is None else ping_sent + serving.ping_timeout
            if frame_deadline is not None:
                wait_until = min(wait_until, frame_deadline)
            await wait_event(client.wake, max(0.0, wait_until - time.monotonic()))
            client.wake.clear()
    finally:
        serving.remove_waker(client.wake, waker_chat)
        with serving.lock:
            sub.close()
        serving.note(conn_id, ending or f"close {close_code} {close_reason}".rstrip())
        await _close(serving, writer, ws, client, reader_task, close_code, close_reason)
        serving.count("open_websockets", -1)


async def _close(
    serving: Serving,
    writer: asyncio.StreamWriter,
    ws: WsConnection,
    client: _Client,
    reader_task: asyncio.Task[None],
    code: int | None,
    reason: str,
) -> None:
    try:
        if code is not None and ws.state in (_OPEN, ConnectionState.REMOTE_CLOSING):
            if ws.state is _OPEN:
                writer.write(ws.send(CloseConnection(code=code, reason=reason)))
            else:
                writer.write(ws.send(CloseConnection(code=code)))
            # A client that reads nothing gets CLOSE_TIMEOUT; on shutdown the close frame is
            # queued but neither flushed nor answered here, so stopping stays fast.
            if not serving.stopping:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await writer.drain()
                    if not reader_task.done():
                        await asyncio.shield(reader_task)
    except (ConnectionError, LocalProtocolError, TimeoutError):
        pass
    finally:
        reader_task.cancel()
        with contextlib.suppress(BaseException):
            await reader_task


async def _read_client(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ws: WsConnection,
    client: _Client,
    trailing: bytes,
) -> None:
    """Read the client's frames: answer pings, note pongs and the close handshake, and flag
    data frames (the server never reads data: D12, server-behaviour 3.1)."""
    data = trailing
    try:
        while True:
            if data:
                ws.receive_data(data)
            else:
                data = await reader.read(READ_CHUNK)
                if not data:
                    # The connection ended without a close frame (wsproto now reads it as
                    # closed with 1006): the client is gone.
                    ws.receive_data(None)
                    client.gone = True
                    client.wake.set()
                    return
                continue
            data = b""
            for event in ws.events():
                if isinstance(event, Ping):
                    if ws.state is _OPEN:
                        writer.write(ws.send(event.response()))
                elif isinstance(event, Pong):
                    client.last_pong = time.monotonic()
                    client.wake.set()
                elif isinstance(event, CloseConnection):
                    client.closed = True
                    client.wake.set()
                    if ws.state is ConnectionState.REMOTE_CLOSING:
                        writer.write(ws.send(event.response()))
                    return
                elif isinstance(event, TextMessage | BytesMessage):
                    client.violation = True
                    client.wake.set()
                    return
    except (RemoteProtocolError, LocalProtocolError, ConnectionError):
        client.gone = True
        client.wake.set()
