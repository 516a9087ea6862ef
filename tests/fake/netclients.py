"""Plain WebSocket clients for the served fake: a raw socket (blocking, asyncio or trio) plus
the ``RawWs`` wsproto core. Deliberately not the library's client, so the fake's wire format
is checked on its own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any

import trio

from coder_integrations.fake_server import FakeCoderServer

from .support import RawWs

DEFAULT_TIMEOUT = 10.0


def _headers(
    server: FakeCoderServer, token: str | None, extra: dict[str, str] | None
) -> dict[str, str]:
    headers = {"Coder-Session-Token": server.token if token is None else token}
    if token == "":
        headers = {}
    if extra:
        headers.update(extra)
    return headers


# -- blocking ---------------------------------------------------------------------------------------


class SyncWs:
    """A blocking WebSocket client on a plain socket."""

    def __init__(
        self,
        server: FakeCoderServer,
        target: str,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.raw = RawWs(target, _headers(server, token, headers))
        self.sock = socket.create_connection((server.host, server.port), timeout=DEFAULT_TIMEOUT)
        self.sock.sendall(self.raw.data_to_send())
        self.wait(lambda r: r.accepted is not None)

    def _pump(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            data = b""
        self.raw.feed(data)
        out = self.raw.data_to_send()
        if out:
            with contextlib.suppress(OSError):
                self.sock.sendall(out)
        return True

    def wait(self, predicate: Callable[[RawWs], bool], timeout: float = DEFAULT_TIMEOUT) -> RawWs:
        deadline = time.monotonic() + timeout
        while not predicate(self.raw):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("condition not reached")
            if self.raw.eof:
                raise AssertionError("connection ended before the condition")
            self._pump(min(left, 0.5))
        return self.raw

    def wait_status(
        self, wanted: set[str], timeout: float = DEFAULT_TIMEOUT
    ) -> list[dict[str, Any]]:
        self.wait(lambda r: r.saw_status(wanted), timeout)
        return self.raw.events()

    def wait_end(self, timeout: float = DEFAULT_TIMEOUT) -> RawWs:
        deadline = time.monotonic() + timeout
        while not self.raw.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the server did not end the connection")
            self._pump(min(left, 0.5))
        return self.raw

    def send_raw(self) -> None:
        out = self.raw.data_to_send()
        if out:
            self.sock.sendall(out)

    def close(self) -> None:
        if not self.raw.eof:
            self.raw.close()
            with contextlib.suppress(OSError):
                self.send_raw()
                with contextlib.suppress(TimeoutError, AssertionError):
                    self.wait_end(2.0)
        self.sock.close()

    def __enter__(self) -> SyncWs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- asyncio ----------------------------------------------------------------------------------------


class AsyncWs:
    """An asyncio WebSocket client on ``asyncio.open_connection``."""

    def __init__(
        self, raw: RawWs, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.raw = raw
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(
        cls,
        server: FakeCoderServer,
        target: str,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> AsyncWs:
        raw = RawWs(target, _headers(server, token, headers))
        reader, writer = await asyncio.open_connection(server.host, server.port)
        ws = cls(raw, reader, writer)
        writer.write(raw.data_to_send())
        await ws.wait(lambda r: r.accepted is not None)
        return ws

    async def _pump(self) -> None:
        try:
            data = await self.reader.read(65536)
        except ConnectionError:
            data = b""
        self.raw.feed(data)
        out = self.raw.data_to_send()
        if out and not self.writer.is_closing():
            self.writer.write(out)

    async def wait(
        self, predicate: Callable[[RawWs], bool], timeout: float = DEFAULT_TIMEOUT
    ) -> RawWs:
        async with asyncio.timeout(timeout):
            while not predicate(self.raw):
                if self.raw.eof:
                    raise AssertionError("connection ended before the condition")
                await self._pump()
        return self.raw

    async def wait_status(
        self, wanted: set[str], timeout: float = DEFAULT_TIMEOUT
    ) -> list[dict[str, Any]]:
        await self.wait(lambda r: r.saw_status(wanted), timeout)
        return self.raw.events()

    async def wait_end(self, timeout: float = DEFAULT_TIMEOUT) -> RawWs:
        async with asyncio.timeout(timeout):
            while not self.raw.eof:
                await self._pump()
        return self.raw

    async def flush(self) -> None:
        out = self.raw.data_to_send()
        if out:
            self.writer.write(out)
            await self.writer.drain()

    async def close(self) -> None:
        if not self.raw.eof:
            self.raw.close()
            with contextlib.suppress(OSError):
                await self.flush()
                with contextlib.suppress(TimeoutError, AssertionError):
                    await self.wait_end(2.0)
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


# -- trio ------------------------------------------------------------------------------------------


class TrioWs:
    """A trio WebSocket client on ``trio.open_tcp_stream``."""

    def __init__(self, raw: RawWs, stream: trio.SocketStream) -> None:
        self.raw = raw
        self.stream = stream

    @classmethod
    async def connect(
        cls, server: FakeCoderServer, target: str, *, token: str | None = None
    ) -> TrioWs:
        raw = RawWs(target, _headers(server, token, None))
        stream = await trio.open_tcp_stream(server.host, server.port)
        ws = cls(raw, stream)
        await stream.send_all(raw.data_to_send())
        await ws.wait(lambda r: r.accepted is not None)
        return ws

    async def _pump(self) -> None:
        try:
            data = await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            data = b""
        self.raw.feed(data)
        out = self.raw.data_to_send()
        if out:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.stream.send_all(out)

    async def wait(
        self, predicate: Callable[[RawWs], bool], timeout: float = DEFAULT_TIMEOUT
    ) -> RawWs:
        with trio.fail_after(timeout):
            while not predicate(self.raw):
                if self.raw.eof:
                    raise AssertionError("connection ended before the condition")
                await self._pump()
        return self.raw

    async def wait_status(
        self, wanted: set[str], timeout: float = DEFAULT_TIMEOUT
    ) -> list[dict[str, Any]]:
        await self.wait(lambda r: r.saw_status(wanted), timeout)
        return self.raw.events()

    async def wait_end(self, timeout: float = DEFAULT_TIMEOUT) -> RawWs:
        with trio.fail_after(timeout):
            while not self.raw.eof:
                await self._pump()
        return self.raw

    async def close(self) -> None:
        if not self.raw.eof:
            self.raw.close()
            out = self.raw.data_to_send()
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.stream.send_all(out)
                with trio.move_on_after(2.0):
                    await self.wait_end()
        await self.stream.aclose()
