"""Serve the fake Coder model on loopback: h11 for HTTP/1.1, wsproto for WebSockets, asyncio
for I/O.

``FakeCoderServer`` is usable three ways:

* ``with FakeCoderServer() as server:`` runs its own event loop in a thread, so synchronous
  and trio code can use it;
* ``async with FakeCoderServer() as server:`` runs in the caller's asyncio loop;
* ``coder-agent fake-server --port N`` (``coder_io_sync.cli``) serves until interrupted.

``server.url``, ``server.token`` and ``server.organization_id`` are what a client needs.
``server.model``, ``server.config``, ``server.faults`` and ``server.counters`` give
thread-safe access to the pure model (``coder_proto.fake``): every attribute read, write and
method call on them holds the server's lock and wakes the server afterwards, so faults can be
changed while clients are connected, from any thread.

Example::

    from coder_io_asyncio.fake_server import FakeCoderServer
    from coder_proto.fake import CallClientTool, Say, Script

    with FakeCoderServer(chunk_delay=0.001) as server:
        server.config.scripts.add(
            r"weather",
            Script([CallClientTool(name="get_weather", args={"city": "Paris"}),
                    Say("It is {tool_result}.")]),
        )
        server.faults.drop_stream_after_frames(3)      # the first stream drops mid-turn
        ...  # point a client at server.url with server.token
        assert server.wait_idle()                      # nothing leaked

The adapter contains no policy: routes, status codes, frames, drops and timings all come from
the model. It only moves bytes, sends WebSocket pings (every ``ping_interval`` seconds; a pong
missing for ``ping_timeout`` closes with 1001 "Ping failed"), closes a connection whose client
sends a data frame (1008: the server never reads), and counts open connections.

Clients leave as they like: a close frame is answered, a connection that simply ends (a crash,
a SIGKILL) is over at once, and nothing is sent after either (frames the model produces for a
departed client are dropped, as a real server drops them). Stopping closes every connection
with 1001 and never waits more than ``CLOSE_TIMEOUT`` for a client that stopped reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, cast

import attrs
import h11
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError, generate_accept_token

from coder_proto.fake import (
    FakeCoderModel,
    FakeConfig,
    FakeCounters,
    FakeHttpResponse,
    Faults,
    ScriptBook,
    StreamSubscription,
    WatchSubscription,
)

__all__ = ["FakeCoderServer"]

logger = logging.getLogger("coder_io_asyncio")

#: The largest request body read: an upload at the 10 MiB limit plus headroom, so that the
#: model (not the adapter) answers 413 for slightly larger files.
MAX_BODY_BYTES = 11 * 1024 * 1024
READ_CHUNK = 65_536
#: How long a closing handshake may take before the socket is dropped.
CLOSE_TIMEOUT = 1.0
_OPEN = ConnectionState.OPEN


class _Locked:
    """A proxy that holds ``lock`` around every attribute access and call on ``target`` and
    runs ``after`` once the lock is released (to wake the server)."""

    __slots__ = ("_after", "_lock", "_target")

    _PROXIED = (FakeCoderModel, FakeConfig, Faults, FakeCounters, ScriptBook)

    def __init__(self, target: Any, lock: threading.RLock, after: Callable[[], None]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_lock", lock)
        object.__setattr__(self, "_after", after)

    def __getattr__(self, name: str) -> Any:
        lock, target, after = self._lock, self._target, self._after
        with lock:
            value = getattr(target, name)
            if isinstance(value, dict | list):
                # A copy, so a reader never iterates a container the loop is changing.
                value = type(value)(value)
        if isinstance(value, self._PROXIED):
            return _Locked(value, lock, after)
        if callable(value) and not isinstance(value, type):
            method = value

            def call(*args: Any, **kwargs: Any) -> Any:
                with lock:
                    result = method(*args, **kwargs)
                after()
                return result

            return call
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        with self._lock:
            setattr(self._target, name, value)
        self._after()

    def __repr__(self) -> str:
        return f"<locked {type(self._target).__name__}>"


@attrs.define
class _WsState:
    """What the WebSocket reader task learned about the client side."""

    wake: asyncio.Event
    client_closed: bool = False
    client_gone: bool = False
    violation: bool = False
    last_pong: float = 0.0


class FakeCoderServer:
    """A fake Coder deployment on ``127.0.0.1`` (see the module docstring).

    ``config`` and ``faults`` default to fresh ones; ``token`` defaults to a random session
    token (``config.token`` is replaced by it); ``config_overrides`` set ``FakeConfig`` fields
    (for example ``chunk_delay=0``, ``legacy_only=True``, ``stamp_promotions=False``). The
    model's wall clock is set to the real one.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        config: FakeConfig | None = None,
        faults: Faults | None = None,
        ping_interval: float = 15.0,
        ping_timeout: float = 15.0,
        **config_overrides: Any,
    ) -> None:
        config = config if config is not None else FakeConfig()
        known = {f.name for f in attrs.fields(FakeConfig)}
        for key, value in config_overrides.items():
            if key not in known:
                raise TypeError(f"unknown FakeConfig field {key!r}")
            setattr(config, key, value)
        config.token = token if token is not None else "fake-" + secrets.token_hex(16)
        config.wall_clock_offset = time.time() - time.monotonic()
        self._model = FakeCoderModel(config, faults)
        self._lock = threading.RLock()
        self.host = host
        self._requested_port = port
        self.port = 0
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Each open WebSocket's wake-up event, with its chat id (``None``: a watch).
        self._wakers: dict[asyncio.Event, str | None] = {}
        self._tick_wake: asyncio.Event | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop_event: asyncio.Event | None = None
        #: ``stop_async`` began: every loop of the server ends at its next wake-up.
        self._stopping = False
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # -- public values ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The deployment's base URL, for example ``http://127.0.0.1:53211``."""
        return f"http://{self.host}:{self.port}"

    @property
    def token(self) -> str:
        """The session token clients must send."""
        return self._model.config.token

    @property
    def organization_id(self) -> str:
        return self._model.organization_id

    @property
    def model(self) -> FakeCoderModel:
        """The model, behind the server's lock (safe from any thread)."""
        return cast(FakeCoderModel, _Locked(self._model, self._lock, self.notify))

    @property
    def config(self) -> FakeConfig:
        return cast(FakeConfig, _Locked(self._model.config, self._lock, self.notify))

    @property
    def faults(self) -> Faults:
        return cast(Faults, _Locked(self._model.faults, self._lock, self.notify))

    @property
    def counters(self) -> FakeCounters:
        return cast(FakeCounters, _Locked(self._model.counters, self._lock, self.notify))

    @property
    def open_connections(self) -> int:
        """TCP connections currently open (HTTP and WebSocket)."""
        with self._lock:
            return self._model.counters.open_connections

    @property
    def open_websockets(self) -> int:
        with self._lock:
            return self._model.counters.open_websockets

    def __repr__(self) -> str:
        return f"<FakeCoderServer {self.url}>"

    # -- waking -----------------------------------------------------------------------------

    def notify(self) -> None:
        """Wake the server's ticker and every connection (after a change to the model).
        Safe from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() == self._loop_thread_id:
            self._wake_all()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        if self._tick_wake is not None:
            self._tick_wake.set()
        for event in self._wakers:
            event.set()

    def _wake_advanced(self, chat_ids: set[str]) -> None:
        """Wake the streams of ``chat_ids`` and every watch (watch events follow any chat)."""
        if not chat_ids:
            return
        for event, chat_id in self._wakers.items():
            if chat_id is None or chat_id in chat_ids:
                event.set()

    # -- asyncio lifecycle --------------------------------------------------------------------

    async def start_async(self) -> None:
        """Start serving in the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._stopping = False
        self._tick_wake = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._server = await asyncio.start_server(
            self._handle_connection, self.host, self._requested_port
        )
        sockname = self._server.sockets[0].getsockname()
        self.port = int(sockname[1])
        self._ticker = asyncio.create_task(self._tick_loop())

    async def stop_async(self) -> None:
        """Stop serving: close the listener and every connection. Idempotent."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        # Besides the cancellation: a loop that was being woken at this very moment must not
        # carry on (a cancellation racing a wake-up used to be lost, and the connection then
        # lasted until its next ping timed out).
        self._stopping = True
        self._wake_all()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if self._ticker is not None:
            self._ticker.cancel()
            tasks.append(self._ticker)
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1.0)

    async def __aenter__(self) -> FakeCoderServer:
        await self.start_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop_async()

    async def serve_forever(self, ready: Callable[[FakeCoderServer], None] | None = None) -> None:
        """Serve until cancelled (or ``stop()`` from another thread); ``ready`` is called
        once the URL is known."""
        await self.start_async()
        assert self._stop_event is not None
        try:
            if ready is not None:
                ready(self)
            await self._stop_event.wait()
        finally:
            await self.stop_async()

    # -- thread lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeCoderServer:
        """Start serving on an event loop in a background thread; returns once listening."""
        if self._thread is not None:
            raise RuntimeError("this FakeCoderServer is already running")
        self._started.clear()
        self._thread = threading.Thread(
            target=self._thread_main, name="fake-coder-server", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            self._thread = None
            raise self._start_error
        return self

    def _thread_main(self) -> None:
        def ready(_server: FakeCoderServer) -> None:
            self._started.set()

        try:
            asyncio.run(self.serve_forever(ready))
        except BaseException as exc:  # reported to the starting thread
            self._start_error = exc
            self._started.set()

    def stop(self) -> None:
        """Stop the background thread's server and wait for it. Idempotent."""
        thread = self._thread
        if thread is None:
            return
        loop, stop = self._loop, self._stop_event
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join()
        self._thread = None

    def __enter__(self) -> FakeCoderServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- waiting helpers ----------------------------------------------------------------------

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until no connection is open (``True``) or ``timeout`` passes (``False``).
        For threaded use; from the server's own loop use ``wait_idle_async``."""
        deadline = time.monotonic() + timeout
        while self.open_connections:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    async def wait_idle_async(self, timeout: float = 5.0) -> bool:
        """``wait_idle`` without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while self.open_connections:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.002)
        return True

    # -- the ticker -----------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        """Run the model's workers at their deadlines and wake the connections after each
        step."""
        wake = self._tick_wake
        assert wake is not None
        while not self._stopping:
            with self._lock:
                deadline = self._model.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            await _wait(wake, timeout)
            wake.clear()
            with self._lock:
                self._model.tick(time.monotonic())
                advanced = self._model.drain_advanced()
            self._wake_advanced(advanced)

    # -- connections ----------------------------------------------------------------------------

    def _count(self, field: str, delta: int) -> None:
        with self._lock:
            counters = self._model.counters
            setattr(counters, field, getattr(counters, field) + delta)

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        with self._lock:
            self._model.counters.open_connections += 1
            self._model.counters.total_connections += 1
        try:
            await self._serve_http(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, h11.RemoteProtocolError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in the fake: log it, drop the connection
            logger.exception("fake server connection failed")
        finally:
            self._tasks.discard(task)
            writer.close()
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await writer.wait_closed()
            except (Exception, asyncio.CancelledError):
                # A client that reads nothing keeps our buffered bytes: drop them.
                writer.transport.abort()
            self._count("open_connections", -1)

    async def _next_event(self, conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await reader.read(READ_CHUNK)
            conn.receive_data(data)

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        while True:
            try:
                event = await self._next_event(conn, reader)
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(
                        conn, writer, _plain(exc.error_status_hint, "Bad Request"), close=True
                    )
                return
            if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return
            if not isinstance(event, h11.Request):
                return
            request = event
            body = bytearray()
            too_large = False
            while True:
                part = await self._next_event(conn, reader)
                if isinstance(part, h11.Data):
                    if len(body) + len(part.data) > MAX_BODY_BYTES:
                        too_large = True
                    else:
                        body += part.data
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            method = request.method.decode("ascii", "replace")
            target = request.target.decode("ascii", "replace")
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers]
            if too_large:
                await self._send(conn, writer, _plain(413, "Request body too large."), close=True)
                return
            if method == "GET" and _wants_websocket(headers):
                await self._upgrade(conn, reader, writer, target, headers)
                return
            with self._lock:
                response = self._model.handle_http(
                    method, target, headers, bytes(body), time.monotonic()
                )
            self._wake_all()
            if response.delay > 0:
                await asyncio.sleep(response.delay)
            await self._send(conn, writer, response, close=False)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _send(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        response: FakeHttpResponse,
        *,
        close: bool,
    ) -> None:
        headers = [(k, v) for k, v in response.headers]
        headers.append(("Content-Length", str(len(response.body))))
        if close:
            headers.append(("Connection", "close"))
        data = conn.send(h11.Response(status_code=response.status, headers=headers)) or b""
        if response.body:
            data += conn.send(h11.Data(data=response.body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        writer.write(data)
        await writer.drain()

    # -- WebSocket ------------------------------------------------------------------------------

    async def _upgrade(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        target: str,
        headers: list[tuple[str, str]],
    ) -> None:
        with self._lock:
            result = self._model.handle_upgrade(target, headers, time.monotonic())
        if isinstance(result, FakeHttpResponse):
            await self._send(conn, writer, result, close=True)
            return
        sub = result
        lowered = {k.lower(): v for k, v in headers}
        key = lowered.get("sec-websocket-key", "")
        if not key or lowered.get("sec-websocket-version", "") != "13":
            with self._lock:
                sub.close()
            await self._send(conn, writer, _plain(400, "Invalid WebSocket handshake."), close=True)
            return
        accept = generate_accept_token(key.encode("ascii", "replace"))
        writer.write(
            conn.send(
                h11.InformationalResponse(
                    status_code=101,
                    headers=[
                        ("Upgrade", "websocket"),
                        ("Connection", "Upgrade"),
                        ("Sec-WebSocket-Accept", accept.decode("ascii")),
                    ],
                )
            )
            or b""
        )
        await writer.drain()
        ws = WsConnection(ConnectionType.SERVER)
        trailing, _closed = conn.trailing_data
        await self._run_websocket(reader, writer, ws, sub, bytes(trailing))

    async def _run_websocket(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        ws: WsConnection,
        sub: StreamSubscription | WatchSubscription,
        trailing: bytes,
    ) -> None:
        state = _WsState(wake=asyncio.Event(), last_pong=time.monotonic())
        self._wakers[state.wake] = sub.chat_id if isinstance(sub, StreamSubscription) else None
        self._count("open_websockets", 1)
        reader_task = asyncio.create_task(self._ws_reader(reader, writer, ws, state, trailing))
        close_code: int | None = 1001
        close_reason = "server shutting down"
        try:
            next_ping = time.monotonic() + self.ping_interval
            ping_sent: float | None = None
            while not self._stopping:
                now = time.monotonic()
                with self._lock:
                    frames = sub.pull(now)
                    closed = sub.closed
                    frame_deadline = sub.next_deadline()
                if state.client_closed or state.client_gone or ws.state is not _OPEN:
                    # The client left: what the model produced for it is dropped.
                    close_code = None if state.client_gone else 1000
                    close_reason = ""
                    return
                for frame in frames:
                    writer.write(ws.send(TextMessage(data=frame.decode("utf-8"))))
                if frames:
                    await writer.drain()
                if closed:
                    close_code, close_reason = sub.close_code, ""
                    return
                if state.violation:
                    close_code, close_reason = 1008, "unexpected data message"
                    return
                # Heartbeat (server-behaviour 3.1): one ping at a time; an unanswered ping
                # older than ping_timeout ends the connection.
                if ping_sent is not None and state.last_pong >= ping_sent:
                    ping_sent = None
                if ping_sent is not None and now - ping_sent >= self.ping_timeout:
                    close_code, close_reason = 1001, "Ping failed"
                    return
                if ping_sent is None and now >= next_ping and ws.state is _OPEN:
                    writer.write(ws.send(Ping(payload=secrets.token_bytes(4))))
                    await writer.drain()
                    ping_sent = now
                    next_ping = now + self.ping_interval
                wait_until = next_ping if ping_sent is None else ping_sent + self.ping_timeout
                if frame_deadline is not None:
                    wait_until = min(wait_until, frame_deadline)
                await _wait(state.wake, max(0.0, wait_until - time.monotonic()))
                state.wake.clear()
        finally:
            self._wakers.pop(state.wake, None)
            with self._lock:
                sub.close()
            await self._close_websocket(writer, ws, state, reader_task, close_code, close_reason)
            self._count("open_websockets", -1)

    async def _close_websocket(
        self,
        writer: asyncio.StreamWriter,
        ws: WsConnection,
        state: _WsState,
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
                # A client that reads nothing gets CLOSE_TIMEOUT; on shutdown the close frame
                # is queued but neither flushed nor answered here, so stopping stays fast.
                if not self._stopping:
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

    async def _ws_reader(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        ws: WsConnection,
        state: _WsState,
        trailing: bytes,
    ) -> None:
        """Read the client's frames: answer pings, note pongs and the close handshake, and
        flag data frames (the server never reads data: D12, server-behaviour 3.1)."""
        data = trailing
        try:
            while True:
                if data:
                    ws.receive_data(data)
                else:
                    data = await reader.read(READ_CHUNK)
                    if not data:
                        # The connection ended without a close frame (wsproto now reads it
                        # as closed with 1006): the client is gone.
                        ws.receive_data(None)
                        state.client_gone = True
                        state.wake.set()
                        return
                    continue
                data = b""
                for event in ws.events():
                    if isinstance(event, Ping):
                        if ws.state is _OPEN:
                            writer.write(ws.send(event.response()))
                    elif isinstance(event, Pong):
                        state.last_pong = time.monotonic()
                        state.wake.set()
                    elif isinstance(event, CloseConnection):
                        state.client_closed = True
                        state.wake.set()
                        if ws.state is ConnectionState.REMOTE_CLOSING:
                            writer.write(ws.send(event.response()))
                        return
                    elif isinstance(event, TextMessage | BytesMessage):
                        state.violation = True
                        state.wake.set()
                        return
        except (RemoteProtocolError, LocalProtocolError, ConnectionError):
            state.client_gone = True
            state.wake.set()


async def _wait(event: asyncio.Event, timeout: float | None) -> None:
    """Wait until ``event`` is set or ``timeout`` seconds passed. Unlike ``wait_for`` on
    Python 3.11, a cancellation that arrives as the event is set is never lost."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


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
    from coder_proto._json import dumps

    return FakeHttpResponse(
        status=status,
        headers=(("Content-Type", "application/json; charset=utf-8"),),
        body=dumps({"message": message}),
    )
