"""A misbehaving server of our own, on loopback.

``HostileServer(handler)`` listens on 127.0.0.1 and runs ``handler(conn)`` in a thread of
its own for every connection it accepts: the handler reads and writes raw bytes, so it can
break HTTP/1.1 and WebSocket at exactly the point a case wants. ``read_head`` and
``read_body`` read what the client sent; everything else is the handler's own doing.
``stop()`` closes the listener and every connection and joins the threads.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

Handler = Callable[["Conn"], None]

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Conn:
    """One accepted connection, as its handler sees it."""

    def __init__(self, sock: socket.socket, server: HostileServer) -> None:
        self.sock = sock
        self.server = server
        self.buffer = b""

    @property
    def stopping(self) -> bool:
        return self.server.stopping.is_set()

    def read_head(self) -> bytes:
        """The request head (up to the blank line); ``b""`` when the client hung up."""
        while b"\r\n\r\n" not in self.buffer:
            data = self._recv()
            if not data:
                return b""
            self.buffer += data
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head

    def read_body(self, head: bytes) -> bytes:
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(self.buffer) < length:
            data = self._recv()
            if not data:
                break
            self.buffer += data
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return body

    def read_request(self) -> tuple[bytes, bytes]:
        head = self.read_head()
        return head, (self.read_body(head) if head else b"")

    def header(self, head: bytes, name: str) -> str | None:
        for line in head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode("latin-1")
        return None

    def ws_accept_value(self, head: bytes) -> str:
        key = (self.header(head, "sec-websocket-key") or "").encode()
        return base64.b64encode(hashlib.sha1(key + _WS_GUID).digest()).decode()

    def _recv(self) -> bytes:
        while not self.stopping:
            try:
                return self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return b""
        return b""

    def send(self, data: bytes) -> bool:
        """Write ``data``; ``False`` once the client is gone or the server stops."""
        if self.stopping:
            return False
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def send_patiently(self, data: bytes) -> bool:
        """Write all of ``data`` however long the client pauses reading (``send`` gives up
        at the socket's 0.1 s timeout, which a loaded machine can exceed); ``False`` once
        the client is gone or the server stops."""
        view = memoryview(data)
        while view:
            if self.stopping:
                return False
            try:
                view = view[self.sock.send(view) :]
            except TimeoutError:
                continue
            except OSError:
                return False
        return True

    def pause(self, seconds: float) -> bool:
        """Sleep, waking early when the server stops (``False`` then)."""
        return not self.server.stopping.wait(seconds)

    def drain(self) -> None:
        """Read and drop whatever the client sends until it hangs up."""
        while self._recv():
            pass

    def reset(self) -> None:
        """Abort the connection (RST)."""
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
            self.sock.close()


def response(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    """An ordinary HTTP/1.1 response with a Content-Length."""
    lines = [f"HTTP/1.1 {status} X"]
    fields = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    fields.update(headers or {})
    lines += [f"{k}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class HostileServer:
    """Serve ``handler`` on loopback (see the module docstring)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.stopping = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        # A small receive window: a client's unread replies pile up on its side quickly.
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        #: Connections a handler saw the client drop (``Conn.server.dropped += 1``).
        self.dropped = 0
        #: Stream upgrades requested (a redial is a second one).
        self.upgrades = 0
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)

    def __enter__(self) -> HostileServer:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(0.1)
            thread = threading.Thread(
                target=self._serve, args=(sock,), name="hostile-conn", daemon=True
            )
            with self._lock:
                self.connections += 1
                self._socks.append(sock)
                self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            self.handler(Conn(sock, self))
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        if self._acceptor.is_alive():
            self._acceptor.join(5)
        with self._lock:
            socks, threads = list(self._socks), list(self._threads)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
        deadline = time.monotonic() + 5
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
