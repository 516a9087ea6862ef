"""asyncio as the async layer's runtime (``coder_io_common._async.runtime.AsyncRuntime``), and
the asyncio ``Driver``.

* tasks: ``asyncio.create_task``, held here until they end (the loop keeps only weak
  references); a task group cancels and awaits what is left when its block is left by an
  exception;
* waiting: a one-shot event of its own (``_Event``: an ``asyncio.Event`` holds an empty deque
  of about 600 bytes, and every open chat holds events), ``asyncio.timeout``,
  ``asyncio.Semaphore``; the timer is one ``loop.call_later`` handle, moved when the deadline
  moves;
* worker threads: ``asyncio.to_thread`` (a cancelled caller never waits for the thread);
* cancellation: ``asyncio.CancelledError``, delivered once, so cleanup after it needs no
  shield;
* stream sockets: ``loop.create_connection`` (TLS with the driver's context) bounded by the
  connect timeout, with a protocol of its own (``_SocketProtocol``) that hands each chunk to
  the host as it arrives: no stream reader, writer or pending read per open socket (an open,
  idle chat holds about 1.7 KiB less than on ``asyncio.open_connection``). A task per socket
  connects and reports the socket made, then ends: the protocol reports the socket's end
  itself, so an open socket holds no task (about 1 KiB less per open chat); writes go to the
  transport's buffer (a peer that lets more than ``MAX_UNSENT`` bytes pile up there is
  dropped, D30); closing starts a task that flushes what is buffered and waits for the
  transport to close for at most ``CLOSE_GRACE`` seconds, then aborts it, so no socket
  outlives its client (D30).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, ClassVar

from coder_io_common._async import driver
from coder_io_common._async.runtime import (
    CLOSE_GRACE,
    AsyncRuntime,
    Event,
    SocketHost,
    Spawned,
)
from coder_io_common.tls import VerifyTypes, ssl_context
from coder_proto import Conn
from coder_proto.adapter import CONNECT_TIMEOUT, MAX_UNSENT

__all__ = ["ASYNCIO", "AsyncioRuntime", "Driver", "VerifyTypes", "ssl_context", "transport_sink"]

#: The most bytes one socket read hands to the client.
_READ_CHUNK = 65_536


class _Task:
    """An asyncio task, as the async layer holds it."""

    __slots__ = ("_done", "_runtime", "future", "lingering")

    def __init__(
        self,
        future: asyncio.Future[Any],
        runtime: AsyncioRuntime | None = None,
        done: Callable[[Spawned], None] | None = None,
    ) -> None:
        self.future = future
        self.lingering = False
        self._runtime = runtime
        self._done = done

    def ended(self, future: asyncio.Future[Any]) -> None:
        """The future's done callback (a bound method, not a closure per task): forget it,
        log its failure, tell the spawner."""
        runtime = self._runtime
        if runtime is not None:
            runtime._tasks.discard(future)
            if not future.cancelled() and future.exception() is not None:
                runtime.logger.error("a driver task failed", exc_info=future.exception())
        if self._done is not None:
            self._done(self)

    def __repr__(self) -> str:
        return f"<task {self.future!r}>"

    def cancel(self) -> None:
        self.future.cancel()


class _TaskGroup:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Spawned:
        task = asyncio.ensure_future(fn(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return _Task(task)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def join(self) -> None:
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def close(self) -> None:
        """Cancel what still runs and wait until it ended."""
        pending = list(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


class _Timer:
    """One ``call_later`` handle, replaced when the deadline moves."""

    __slots__ = ("_callback", "_closed", "_due", "_handle")

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._due: float | None = None
        self._closed = False

    def arm(self, due: float | None) -> None:
        if self._closed or (due == self._due and (due is None or self._handle is not None)):
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._due = due
        if due is not None:
            loop = asyncio.get_running_loop()
            self._handle = loop.call_later(max(0.0, due - time.monotonic()), self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._due = None
        self._callback()

    def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _LoopToken:
    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def run_soon(self, fn: Callable[..., object], *args: Any) -> None:
        loop = self._loop
        if loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)


class _CutAfter:
    """``AsyncRuntime.cut_after``'s block: a plain context manager, not an async generator
    (a generator per call would sit in the loop's registry of async generators)."""

    __slots__ = ("_cut", "_limit")

    def __init__(self, seconds: float | None) -> None:
        self._cut = _Cut()
        self._limit = asyncio.timeout(seconds)

    async def __aenter__(self) -> _Cut:
        await self._limit.__aenter__()
        return self._cut

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        limit = self._limit
        try:
            await limit.__aexit__(kind, error, tb)
        except TimeoutError:
            if not limit.expired():
                raise  # the block's own error, not the cut
            self._cut.expired = True
            return True
        if kind is not None and issubclass(kind, TimeoutError) and limit.expired():
            self._cut.expired = True
            return True
        return False


class _Event:
    """A one-shot event (``runtime.Event``): set once, it stays set. ``wait`` hands out a
    bare future (no coroutine frame per waiter: an open chat's consumer waits on one); the
    futures of waiters cancelled meanwhile are dropped when the next one comes or the event
    is set."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():  # else its waiter was cancelled meanwhile
                waiter.set_result(None)

    def is_set(self) -> bool:
        return self._set

    def wait(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._set:
            waiter.set_result(None)
        elif self._waiters is None:
            self._waiters = [waiter]
        else:
            waiters = self._waiters
            waiters[:] = [w for w in waiters if not w.done()]
            waiters.append(waiter)
        return waiter


class _Cut:
    """``AsyncRuntime.cut_after``'s verdict."""

    __slots__ = ("expired",)

    def __init__(self) -> None:
        self.expired = False


class _Socket:
    """The asyncio side of one ``Conn``: its connecting task (``None`` once the socket is
    made), once made its transport and protocol, and why it was dropped (D30), if it was."""

    __slots__ = ("dropped", "protocol", "task", "transport")

    def __init__(self) -> None:
        self.task: Spawned | None = None
        self.transport: asyncio.Transport | None = None
        self.protocol: _SocketProtocol | None = None
        self.dropped: OSError | None = None


class _SocketProtocol(asyncio.Protocol):
    """The reading side of one stream socket: each chunk goes to the host as it arrives
    (none after ``conn`` is closed). Reading waits, paused, until the host was told the
    socket is made (``resume_reading``). The socket's end (``lost``) is reported to the host
    here, unless it was closed here; it settles ``ended``, a future a closing task waits on
    (made by it)."""

    __slots__ = ("_conn", "_host", "_sock", "ended", "error", "lost")

    def __init__(self, host: SocketHost, conn: Conn, sock: _Socket) -> None:
        self._host = host
        self._conn = conn
        self._sock = sock
        self.ended: asyncio.Future[None] | None = None
        #: What ended the socket (``None``: end of stream, or closed here), once ``lost``.
        self.error: Exception | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the host hears of the socket before its first bytes
        if hasattr(transport, "max_size"):  # a plain socket's transport (TLS reads its own)
            # Chunks of at most 64 KiB, as the stream reader handed them out before: a read
            # of the transport's 256 KiB turns into that many events at once, and a long
            # turn's peak memory grows with it.
            transport.max_size = _READ_CHUNK

    def data_received(self, data: bytes) -> None:
        if not self._conn.closed:
            self._host.socket_data(self._conn, data)

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost:  # the end of stream was seen already
            return
        self.lost = True
        self.error = exc
        ended = self.ended
        if ended is not None and not ended.done():
            ended.set_result(None)
        if self._conn.closed:  # closed here (or the host heard of its failure)
            return
        error = self._sock.dropped or self.error
        if error is not None:
            self._host.socket_failed(self._conn, error)
        else:
            self._host.socket_lost(self._conn)


async def _close_transport(transport: asyncio.Transport, protocol: _SocketProtocol) -> None:
    """Close ``transport`` after what it buffered (and, on TLS, the closing handshake),
    waiting at most ``CLOSE_GRACE`` seconds for that (a peer that reads nothing never takes
    it); then abort it. Runs to the end even in a task cancelled again meanwhile."""
    try:
        transport.close()
        if not protocol.lost:
            ended = protocol.ended = asyncio.get_running_loop().create_future()
            await asyncio.wait((ended,), timeout=CLOSE_GRACE)
    finally:
        # Nothing after a graceful close; the socket at once otherwise.
        transport.abort()


class AsyncioRuntime(AsyncRuntime):
    """The async layer's runtime on asyncio (see the module docstring)."""

    name: ClassVar[str] = "asyncio"
    cancelled: ClassVar[type[BaseException]] = asyncio.CancelledError

    def __init__(self) -> None:
        super().__init__()
        self._tasks: set[asyncio.Future[Any]] = set()

    # -- tasks ------------------------------------------------------------------------------

    def spawn(
        self,
        fn: Callable[..., Awaitable[None]],
        *args: Any,
        done: Callable[[Spawned], None] | None = None,
    ) -> Spawned:
        future = asyncio.ensure_future(fn(*args))
        task = _Task(future, self, done)
        self._tasks.add(future)
        future.add_done_callback(task.ended)
        return task

    @contextlib.asynccontextmanager
    async def task_group(self) -> AsyncIterator[_TaskGroup]:
        group = _TaskGroup()
        try:
            yield group
            await group.join()
        finally:
            await group.close()

    # -- waiting -----------------------------------------------------------------------------

    def event(self) -> Event:
        return _Event()

    async def wait(self, event: Event, timeout: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
        return event.is_set()

    def cut_after(self, seconds: float | None) -> _CutAfter:
        return _CutAfter(seconds)

    def timer(self, callback: Callable[[], None]) -> _Timer:
        return _Timer(callback)

    def semaphore(self, value: int) -> asyncio.Semaphore:
        return asyncio.Semaphore(value)

    def loop_token(self) -> _LoopToken:
        return _LoopToken(asyncio.get_running_loop())

    def current_loop(self) -> object:
        return asyncio.get_running_loop()

    # -- threads -----------------------------------------------------------------------------

    async def to_thread(
        self, fn: Callable[..., Any], /, *args: Any, abandon_on_cancel: bool = False
    ) -> Any:
        # asyncio never waits for the thread of a cancelled caller.
        return await asyncio.to_thread(fn, *args)

    # -- cancellation: delivered once, so cleanup after it runs as it is -----------------------

    def shield(self, timeout: float | None = None) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def finishing(self, timeout: float) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    # -- I/O ---------------------------------------------------------------------------------

    def prepare_http(self) -> None:
        # httpx's first request on asyncio imports anyio's asyncio backend (0.1-0.2 s,
        # seconds on a loaded machine).
        with contextlib.suppress(ImportError):
            importlib.import_module("anyio._backends._asyncio")

    def open_socket(self, host: SocketHost, conn: Conn) -> None:
        sock = conn.io = _Socket()
        sock.task = host.spawn(self._socket, host, conn, sock)

    def write_socket(self, conn: Conn, data: bytes) -> None:
        sock: _Socket = conn.io
        transport = sock.transport
        if transport is None or sock.dropped is not None:
            return
        waiting = transport.get_write_buffer_size()
        if waiting > MAX_UNSENT:
            # D30: the peer sends but reads nothing. The reading task sees the abort and
            # reports the failure (one report per connection, from its task).
            sock.dropped = OSError(
                f"more than {MAX_UNSENT} bytes wait to be sent: the peer reads nothing"
            )
            transport.abort()
            return
        transport.write(data)

    def close_socket(self, conn: Conn) -> None:
        sock: _Socket = conn.io
        task = sock.task
        if task is not None:
            # Still connecting: the task closes what it opened (``_close_transport``).
            task.cancel()
        else:
            protocol = sock.protocol
            assert protocol is not None
            task = protocol._host.spawn(_close_transport, sock.transport, protocol)
        # Bounded by ``CLOSE_GRACE``: the client's close gives it that time.
        task.lingering = True

    async def _socket(self, host: SocketHost, conn: Conn, sock: _Socket) -> None:
        """Open the connection and report it made; its protocol hands the host every chunk
        read, and reports its end. Every outcome is reported."""
        loop = asyncio.get_running_loop()
        protocol = sock.protocol = _SocketProtocol(host, conn, sock)
        transport: asyncio.Transport | None = None
        try:
            try:
                made, _ = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: protocol,
                        conn.host,
                        conn.port,
                        ssl=host.ssl if conn.tls else None,
                        server_hostname=conn.server_hostname,
                    ),
                    CONNECT_TIMEOUT,
                )
            except (OSError, TimeoutError, ValueError, ssl.SSLError) as exc:
                host.socket_failed(conn, exc)
                return
            transport = made
            if conn.closed or protocol.lost:  # closed here, or ended (reported) already
                return
            sock.transport = made
            sock.task = None
            transport = None  # the socket's own now: its close or its end closes it
            host.socket_made(conn)
            made.resume_reading()
        finally:
            if transport is not None:
                await _close_transport(transport, protocol)


#: The runtime every asyncio object of the adapter uses.
ASYNCIO = AsyncioRuntime()


class Driver(driver.Driver):
    """The driver on asyncio (``coder_io_common._async.driver.Driver``): ``start`` and
    ``perform`` must be called on the running loop."""

    runtime: ClassVar[AsyncRuntime] = ASYNCIO


def transport_sink(callback: Callable[[Any], object] | None) -> Any:
    """The sink for a user's ``on_transport_event`` on asyncio (``driver.transport_sink``)."""
    return driver.transport_sink(callback, ASYNCIO)
