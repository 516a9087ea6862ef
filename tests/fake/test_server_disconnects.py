"""Clients that leave the served fake abruptly, and servers that stop under load.

A client that disconnects without a close frame (a crash, a SIGKILL, a dropped network) is
normal, and so is one that closes mid-stream: the fake sees it gone at once (not at its next
ping timeout), sends nothing after the close handshake and logs no error. Stopping a server
is prompt even when a client stopped reading and the server's writes are blocked.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import Say, Script, Wait

from .netclients import AsyncWs
from .support import V2

#: Long enough that a client leaves while it streams (one delta per word).
LONG_REPLY = Script((Say(" ".join(f"word{i}" for i in range(400))),))
#: A run that stays quiet after its first words: nothing to send for a long while.
QUIET_REPLY = Script((Say("partial "), Wait(30.0), Say("rest")))


def run(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            async with asyncio.timeout(60):
                await fn(*args, **kwargs)

        asyncio.run(main())

    return wrapper


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """The ERROR (and worse) records the fake logged so far (the fake's logger is the
    adapter's, ``coder_io_asyncio``; asyncio's own go to ``asyncio``)."""
    with caplog.at_level(logging.DEBUG):
        yield lambda: [
            f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR
        ]


async def create_chat(server: FakeCoderServer, script: Script) -> str:
    server.config.scripts.push(script)
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Coder-Session-Token": server.token}
    ) as http:
        body = {
            "organization_id": server.organization_id,
            "content": [{"type": "text", "text": "hi"}],
        }
        response = await http.post(V2, json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def deltas(ws: AsyncWs) -> int:
    return sum(1 for e in ws.raw.events() if e["type"] == "message_part")


async def streaming(server: FakeCoderServer, script: Script, parts: int = 3) -> AsyncWs:
    chat_id = await create_chat(server, script)
    ws = await AsyncWs.connect(server, f"{V2}/{chat_id}/stream")
    await ws.wait(lambda _raw: deltas(ws) >= parts)
    return ws


def vanish(ws: AsyncWs) -> None:
    """Close the TCP connection without a close frame (what a crashed client does)."""
    ws.writer.close()


@run
async def test_a_client_gone_without_a_close_frame_is_seen_gone_at_once() -> None:
    """server-behaviour 3.1: the socket ended, so the connection is over; the server does not
    wait for its next ping to find out."""
    async with FakeCoderServer(ping_interval=60.0, ping_timeout=60.0) as server:
        ws = await streaming(server, QUIET_REPLY, parts=1)
        assert server.open_websockets == 1
        vanish(ws)
        assert await server.wait_idle_async(5.0), "the handler waited for its ping timeout"
        assert server.counters.open_streams == 0


@run
async def test_a_client_gone_mid_stream_is_no_error(errors: Callable[[], list[str]]) -> None:
    """Frames the model produces after the client vanished are not sent (wsproto's state is
    closed), and nothing is logged as an error."""
    async with FakeCoderServer(chunk_delay=0.002, ping_interval=60.0) as server:
        for _ in range(3):
            ws = await streaming(server, LONG_REPLY)
            vanish(ws)
            assert await server.wait_idle_async(5.0)
    assert errors() == []


@run
async def test_a_client_closing_mid_stream_gets_no_frame_after_the_handshake(
    errors: Callable[[], list[str]],
) -> None:
    async with FakeCoderServer(chunk_delay=0.001, ping_interval=60.0) as server:
        for _ in range(5):
            ws = await streaming(server, LONG_REPLY)
            ws.raw.close()
            await ws.flush()
            await ws.wait_end()
            # wsproto raises on a frame after the server's close: none came.
            assert ws.raw.close_code == 1000
            await ws.close()
        assert await server.wait_idle_async(5.0)
    assert errors() == []


CLIENT = """
import socket, sys, time
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.sendall(sys.argv[2].encode())
sock.recv(4096)
print("reading", flush=True)
time.sleep(60)
"""


def test_a_client_killed_mid_stream_is_no_error(errors: Callable[[], list[str]]) -> None:
    """A client SIGKILLed while the stream runs (its unread bytes make the kernel reset the
    connection): the server sees it gone and logs no error."""
    with FakeCoderServer(chunk_delay=0.002, ping_interval=60.0) as server:
        chat_id = asyncio.run(create_chat(server, LONG_REPLY))
        upgrade = (
            f"GET {V2}/{chat_id}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\nCoder-Session-Token: {server.token}\r\n\r\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(server.port), upgrade], stdout=subprocess.PIPE
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == b"reading\n"
            deadline = time.monotonic() + 10.0
            while server.open_websockets == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)  # the stream is running
            child.send_signal(signal.SIGKILL)
            child.wait(10.0)
            assert server.wait_idle(5.0)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert errors() == []


@run
async def test_stopping_is_prompt_even_when_a_connection_was_just_woken() -> None:
    """A stop that coincides with a wake-up of a connection (the model changed) must still
    end that connection at once: not after its next ping and ping timeout."""
    server = FakeCoderServer(ping_interval=30.0, ping_timeout=30.0)
    await server.start_async()
    ws = await streaming(server, QUIET_REPLY, parts=1)
    await asyncio.sleep(0.05)  # the handler now waits for its next frame or ping
    server.notify()  # every connection is woken ...
    await asyncio.wait_for(server.stop_async(), 10.0)  # ... and the server stops at once
    await ws.wait_end()
    assert ws.raw.close_code == 1001
    await ws.close()


def test_stopping_is_prompt_when_a_client_stopped_reading() -> None:
    """A client that reads nothing while the server streams fills the socket buffers, so the
    server's writes block; stopping the server does not wait for that client."""
    server = FakeCoderServer(chunk_delay=0.0, ping_interval=60.0)
    server.start()
    chat_id = asyncio.run(create_chat(server, Script((Say("x" * 4_000_000, chunk=200),))))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((server.host, server.port))
    stopper = threading.Thread(target=server.stop)
    try:
        sock.sendall(
            (
                f"GET {V2}/{chat_id}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"Sec-WebSocket-Version: 13\r\nCoder-Session-Token: {server.token}\r\n\r\n"
            ).encode()
        )
        deadline = time.monotonic() + 10.0
        while server.open_websockets == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # the stream fills the buffers; the client never reads
        stopper.start()
        stopper.join(10.0)
        stuck = stopper.is_alive()
    finally:
        sock.close()  # lets a stuck server finish
        if stopper.is_alive():
            stopper.join(60.0)
    assert not stuck, "stop() waited for a client that does not read"
