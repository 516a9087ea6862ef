"""trio as the async layer's runtime (``coder_io_common._async.runtime.AsyncRuntime``), and the
trio ``Driver``.

* tasks: trio system tasks, each in its own cancel scope. They belong to the client, not to
  the caller, so a caller's cancellation never cancels the interrupt it fires (D22), and
  they end when the client closes (or when ``trio.run`` ends); a task group is a nursery
  whose exception group of one exception (the caller's ``trio.Cancelled``) is unwrapped;
* waiting: a one-shot event of its own (``_Event``: parked tasks in a list, lighter than a
  ``trio.Event``), ``trio.move_on_after``, ``trio.Semaphore``; the timer is one task
  sleeping in a cancel scope whose deadline moves with the drive's;
* worker threads: ``trio.to_thread.run_sync`` (abandoned on cancellation for client tools);
* cancellation: ``trio.Cancelled``, level-triggered: cleanup after it runs in shielded,
  bounded cancel scopes;
* stream sockets: ``trio.open_tcp_stream`` wrapped in ``trio.SSLStream`` for TLS (the
  driver's context, verification on by default) bounded by the connect timeout; a plain
  connection's socket is then taken from its stream and read and written directly. One task
  reads (its own system task, with a cancel scope only while it connects: once connected, a
  cancellation notifies the socket's closing), another writes what the machine sends in
  order while there is something to send (a peer that lets more than ``MAX_UNSENT`` bytes
  wait unsent is dropped, D30); closing sends our end after what was written and waits for
  the peer's, all within ``CLOSE_GRACE`` seconds of the close, then closes the socket anyway
  (D30).

Construction does no I/O and needs no running trio loop; everything else runs inside
``trio.run``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Union

import trio

from coder_io_common._async import driver
from coder_io_common._async.runtime import CLOSE_GRACE, AsyncRuntime, Event, SocketHost, Spawned
from coder_io_common.tls import VerifyTypes, ssl_context
from coder_proto import Conn
from coder_proto.adapter import CONNECT_TIMEOUT, MAX_UNSENT

__all__ = [
    "TRIO",
    "Driver",
    "TrioRuntime",
    "VerifyTypes",
    "cancelled_now",
    "ssl_context",
    "transport_sink",
]

_READ_CHUNK = 65_536


def _first(group: BaseExceptionGroup) -> BaseException:
    """The first exception of ``group`` that is not a group."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _boxed(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any]:
    return (fn(*args),)


def cancelled_now() -> bool:
    """True when the calling task's cancel scope is already cancelled (its next checkpoint
    raises ``trio.Cancelled``)."""
    return trio.current_effective_deadline() == -math.inf


class _Task:
    """A cancel scope for one task (the trio side of a handle's ``io`` slot)."""

    __slots__ = ("lingering", "name", "scope")

    def __init__(self, name: str) -> None:
        self.scope = trio.CancelScope()
        self.name = name
        self.lingering = False

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def cancel(self) -> None:
        self.scope.cancel()


class _TaskGroup:
    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Spawned:
        task = _Task(getattr(fn, "__name__", ""))
        self._nursery.start_soon(self._run, task, fn, args)
        return task

    @staticmethod
    async def _run(task: _Task, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        with task.scope:
            await fn(*args)

    def cancel(self) -> None:
        self._nursery.cancel_scope.cancel()


class _Timer:
    """One task for every deadline of a driver: it sleeps until the earliest one (re-armed by
    moving its cancel scope's deadline) and calls back."""

    __slots__ = ("_callback", "_closed", "_due", "_running", "_scope")

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._due: float | None = None
        self._scope: trio.CancelScope | None = None
        self._running = False
        self._closed = False

    def arm(self, due: float | None) -> None:
        self._due = due
        if due is None:
            if self._scope is not None:
                self._scope.deadline = math.inf
            return
        deadline = trio.current_time() + max(0.0, due - time.monotonic())
        if self._scope is not None:
            self._scope.deadline = deadline
        elif not self._running and not self._closed:
            self._running = True
            trio.lowlevel.spawn_system_task(self._loop)

    def close(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()

    async def _loop(self) -> None:
        try:
            while not self._closed:
                due = self._due
                with trio.CancelScope() as scope:
                    self._scope = scope
                    if due is not None:
                        scope.deadline = trio.current_time() + max(0.0, due - time.monotonic())
                    await trio.sleep_forever()
                self._scope = None
                if self._closed:
                    return
                # trio's clock and ``time.monotonic`` may disagree by a hair: never early.
                due = self._due
                if due is not None and due <= time.monotonic():
                    # Once per arming: the callback arms the timer again if it wants.
                    self._due = None
                    self._callback()
                    await trio.lowlevel.checkpoint()
        finally:
            self._scope = None
            self._running = False


class _LoopToken:
    __slots__ = ("_token",)

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token

    def run_soon(self, fn: Callable[..., object], *args: Any) -> None:
        # From any thread or a finalizer: the loop runs it at its next turn (a finalizer must
        # not drive the machines in the middle of other code).
        self._token.run_sync_soon(fn, *args)


class _Event:
    """A one-shot event (``runtime.Event``): set once, it stays set. Lighter than
    ``trio.Event`` (no attrs instance with a set of tasks, no coroutine of its own per wait):
    every open chat's consumer waits on one. ``wait`` parks the calling task at once, so
    what it returns must be awaited right away (the layer always does)."""

    __slots__ = ("_set", "_tasks")

    def __init__(self) -> None:
        self._set = False
        self._tasks: list[trio.lowlevel.Task] | None = None

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        tasks, self._tasks = self._tasks, None
        for task in tasks or ():
            trio.lowlevel.reschedule(task)

    def is_set(self) -> bool:
        return self._set

    def wait(self) -> Awaitable[object]:
        if self._set:
            return trio.lowlevel.checkpoint()
        task = trio.lowlevel.current_task()
        if self._tasks is None:
            self._tasks = [task]
        else:
            self._tasks.append(task)
        return trio.lowlevel.wait_task_rescheduled(functools.partial(self._abort, task))

    def _abort(self, task: trio.lowlevel.Task, _raise_cancel: object) -> trio.lowlevel.Abort:
        """The waiting ``task`` was cancelled: it waits no more (the event is still unset:
        setting it reschedules its waiters and forgets them)."""
        assert self._tasks is not None
        self._tasks.remove(task)
        return trio.lowlevel.Abort.SUCCEEDED


class _Cut:
    """``AsyncRuntime.cut_after``'s verdict."""

    __slots__ = ("expired",)

    def __init__(self) -> None:
        self.expired = False


#: What a connected socket reads and writes: a plain TCP connection's own socket (``_plain``),
#: or a TLS stream.
_Stream = Union[socket.socket, "trio.SSLStream[Any]"]


class _Socket:
    """The trio side of one ``Conn``: its stream, the bytes to write (and how many are not
    sent yet), its reader task, its writer task while there is something to write (or a
    close to make), the writer's scope, and why the connection was dropped (D30), if it was.
    The reader has no scope of its own (every open chat would hold one): a drop wakes its
    pending read by notifying the socket's closing (``_stop_reading``).

    A plain connection is read and written on its own socket, taken from trio's stream once
    connected: an open, idle chat then waits in trio's readiness wait alone, without the
    stream's and the trio socket's coroutines stacked on it (about 1 KiB per chat)."""

    __slots__ = (
        "closing",
        "dropped",
        "host",
        "outbox",
        "reader",
        "sending",
        "stopped",
        "stream",
        "unsent",
        "writer",
    )

    def __init__(self, host: SocketHost) -> None:
        self.host = host
        self.stream: _Stream | None = None
        self.outbox: list[bytes] = []
        self.unsent = 0
        self.closing = False
        self.dropped: OSError | None = None
        #: The reader was cancelled once connected: it reads no more.
        self.stopped = False
        self.reader: _Reader | None = None
        self.writer: Spawned | None = None
        self.sending: trio.CancelScope | None = None

    def cancel(self) -> None:
        if self.reader is not None:
            self.reader.cancel()


class _Reader:
    """The reading task of one socket (``Spawned``), started by the runtime and told to its
    host (``SocketHost.adopt``). It has a cancel scope while it connects; once connected it
    has none (every open chat would hold one, with trio's cancel status): cancelling it then
    stops the reading by notifying the socket's closing, which wakes a pending read, and the
    reader checks before every other read."""

    __slots__ = ("ended", "lingering", "scope", "sock")

    def __init__(self, sock: _Socket) -> None:
        self.sock = sock
        self.scope: trio.CancelScope | None = trio.CancelScope()
        self.lingering = False
        self.ended = False

    def __repr__(self) -> str:
        return "<task _socket>"

    def cancel(self) -> None:
        if self.ended:
            return
        if self.scope is not None:
            self.scope.cancel()
            return
        sock = self.sock
        sock.stopped = True
        assert sock.stream is not None  # connected: the scope is gone
        trio.lowlevel.notify_closing(_raw_socket(sock.stream))


def _raw_socket(stream: _Stream) -> Any:
    """The socket under ``stream`` (a TLS stream's transport's)."""
    if isinstance(stream, trio.SSLStream):
        return stream.transport_stream.socket
    return stream


def _shutdown_write(stream: _Stream) -> None:
    """Send the end of our side of the TCP connection (after what is queued)."""
    with contextlib.suppress(OSError):
        _raw_socket(stream).shutdown(socket.SHUT_WR)


def _plain(stream: trio.SocketStream) -> socket.socket:
    """The socket of a connected plain ``stream``, taken from it (the stream holds nothing
    after), non-blocking."""
    raw = socket.socket(fileno=stream.socket.detach())
    raw.setblocking(False)
    return raw


async def _send_all(raw: socket.socket, data: bytes) -> None:
    """Send all of ``data`` on the non-blocking ``raw``, waiting for room when it has none."""
    view = memoryview(data)
    while view:
        try:
            sent = raw.send(view)
        except BlockingIOError:
            sent = 0
        if sent:
            view = view[sent:]
        else:
            await trio.lowlevel.wait_writable(raw)


async def _close_stream(stream: _Stream) -> None:
    """Close ``stream`` at once (a pending wait on its socket is woken)."""
    if isinstance(stream, trio.SSLStream):
        await trio.aclose_forcefully(stream)
    else:
        trio.lowlevel.notify_closing(stream)
        stream.close()


class TrioRuntime(AsyncRuntime):
    """The async layer's runtime on trio (see the module docstring)."""

    name: ClassVar[str] = "trio"
    cancelled: ClassVar[type[BaseException]] = trio.Cancelled

    # -- tasks ------------------------------------------------------------------------------

    def spawn(
        self,
        fn: Callable[..., Awaitable[None]],
        *args: Any,
        done: Callable[[Spawned], None] | None = None,
    ) -> Spawned:
        task = _Task(getattr(fn, "__name__", ""))
        trio.lowlevel.spawn_system_task(self._task_main, task, fn, args, done)
        return task

    async def _task_main(
        self,
        task: _Task,
        fn: Callable[..., Awaitable[None]],
        args: tuple[Any, ...],
        done: Callable[[Spawned], None] | None,
    ) -> None:
        try:
            with task.scope:
                await fn(*args)
        except Exception:  # pragma: no cover - every task reports its own outcome
            self.logger.exception("a driver task failed")
        finally:
            if done is not None:
                done(task)

    @contextlib.asynccontextmanager
    async def task_group(self) -> AsyncIterator[_TaskGroup]:
        try:
            async with trio.open_nursery() as nursery:
                yield _TaskGroup(nursery)
        except BaseExceptionGroup as group:
            # The tasks of the layer's groups report their outcomes and never raise, so the
            # group holds the caller's cancellation (as the block and the tasks each saw it)
            # or what the block raised: one exception, unwrapped (D22).
            _cancelled, rest = group.split(trio.Cancelled)
            if rest is None or len(group.exceptions) == 1:
                raise _first(group) from None
            raise  # pragma: no cover - the layer's tasks never raise

    # -- waiting -----------------------------------------------------------------------------

    def event(self) -> Event:
        return _Event()

    async def wait(self, event: Event, timeout: float | None) -> bool:
        with trio.move_on_after(math.inf if timeout is None else timeout):
            await event.wait()
        return event.is_set()

    @contextlib.asynccontextmanager
    async def cut_after(self, seconds: float | None) -> AsyncIterator[_Cut]:
        cut = _Cut()
        with trio.move_on_after(math.inf if seconds is None else seconds) as scope:
            yield cut
        cut.expired = scope.cancelled_caught

    def timer(self, callback: Callable[[], None]) -> _Timer:
        return _Timer(callback)

    def semaphore(self, value: int) -> trio.Semaphore:
        return trio.Semaphore(value)

    def loop_token(self) -> _LoopToken:
        return _LoopToken(trio.lowlevel.current_trio_token())

    def current_loop(self) -> object:
        return trio.lowlevel.current_trio_token()

    # -- threads -----------------------------------------------------------------------------

    async def to_thread(
        self, fn: Callable[..., Any], /, *args: Any, abandon_on_cancel: bool = False
    ) -> Any:
        # Boxed: trio refuses a function whose value is a coroutine, and a plain tool or store
        # method may return one (the layer awaits it on the loop).
        (value,) = await trio.to_thread.run_sync(
            _boxed, fn, args, abandon_on_cancel=abandon_on_cancel
        )
        return value

    # -- cancellation: level-triggered, so cleanup after it is shielded ------------------------

    def shield(self, timeout: float | None = None) -> AbstractContextManager[Any]:
        scope = trio.CancelScope(shield=True)
        if timeout is not None:
            scope.deadline = trio.current_time() + timeout
        return scope

    def finishing(self, timeout: float) -> AbstractContextManager[Any]:
        if not cancelled_now():
            return contextlib.nullcontext()
        return self.shield(timeout if math.isfinite(timeout) else None)

    # -- I/O ---------------------------------------------------------------------------------

    def prepare_http(self) -> None:
        """httpx runs on trio without anyio's asyncio backend: nothing to load."""

    def open_socket(self, host: SocketHost, conn: Conn) -> None:
        sock = conn.io = _Socket(host)
        reader = sock.reader = _Reader(sock)
        # Not through ``host.spawn``: the reader is its own task's main, without a wrapper
        # coroutine and a scope for its whole life.
        done = host.adopt(reader)
        trio.lowlevel.spawn_system_task(self._socket, reader, host, conn, sock, done)

    def write_socket(self, conn: Conn, data: bytes) -> None:
        sock: _Socket = conn.io
        if sock.dropped is not None:
            return
        if sock.unsent > MAX_UNSENT:
            # D30: the peer sends but reads nothing. The reader stops reading, reports the
            # failure and closes the socket.
            sock.dropped = OSError(
                f"more than {MAX_UNSENT} bytes wait to be sent: the peer reads nothing"
            )
            sock.outbox.clear()
            # A read waiting now ends at once; the reader checks before every other read.
            # The writer's send waiting now ends the same way (the reader reports the drop).
            raw = None if sock.stream is None else _raw_socket(sock.stream)
            if raw is not None:
                trio.lowlevel.notify_closing(raw)
            else:  # pragma: no cover - the machine writes to connected sockets only
                sock.cancel()
            return
        sock.outbox.append(data)
        sock.unsent += len(data)
        if sock.writer is None:  # else the running writer sends it after what it sends
            self._start_writer(sock)

    def close_socket(self, conn: Conn) -> None:
        sock: _Socket = conn.io
        sock.closing = True
        for task in (sock.reader, sock.writer):
            if task is not None:
                task.lingering = True
        if sock.stream is None:
            sock.cancel()
            return
        if sock.writer is None:
            # Nothing is being written: a writer of its own makes the graceful close.
            self._start_writer(sock).lingering = True
        elif sock.sending is not None:
            # Flushing, our end and the peer's: CLOSE_GRACE at most from now (D30).
            sock.sending.deadline = min(sock.sending.deadline, trio.current_time() + CLOSE_GRACE)

    def _start_writer(self, sock: _Socket) -> Spawned:
        """A connected socket's writer runs while there is something to write (or a close to
        make), not for the socket's whole life: every open chat would hold an idle task."""
        writer = sock.writer = sock.host.spawn(self._write, sock)
        return writer

    async def _socket(
        self,
        reader: _Reader,
        host: SocketHost,
        conn: Conn,
        sock: _Socket,
        done: Callable[[Spawned], None],
    ) -> None:
        """The reader's task: connect (within the reader's scope), then read until the
        connection ends; every outcome is reported, and the task's end to ``done``."""
        try:
            assert reader.scope is not None
            with reader.scope:
                ready = await self._connect(host, conn)
            reader.scope = None
            if ready is None:  # it failed (reported) or was cancelled
                return
            # Read in this very task's frame (an open chat waits here): until the connection
            # ends, is dropped (D30) or the reader is cancelled; then close it.
            sock.stream = ready
            try:
                if conn.closed:
                    return
                host.socket_made(conn)
                # After CloseSocket the writer flushes what came before it, then cancels this
                # task; what is read meanwhile is ignored by the drive.
                while sock.dropped is None and not sock.stopped:
                    data: bytes | bytearray | None
                    try:
                        if isinstance(ready, socket.socket):
                            try:
                                data = ready.recv(_READ_CHUNK)
                            except BlockingIOError:
                                data = None
                            if data is None:
                                # An idle chat waits here, and only here (outside the handler:
                                # a wait inside it would keep the error and its traceback).
                                await trio.lowlevel.wait_readable(ready)
                                continue
                            # Other tasks run between two chunks, as after a stream's read.
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        else:
                            data = await ready.receive_some(_READ_CHUNK)
                    except (
                        OSError,
                        ssl.SSLError,
                        trio.BrokenResourceError,
                        trio.ClosedResourceError,
                    ) as exc:
                        if sock.dropped is not None:  # D30: the drop ended the read
                            break
                        if sock.stopped or isinstance(exc, trio.ClosedResourceError):
                            return  # the reader was cancelled, or the socket closed here
                        error = exc.__cause__ if exc.__cause__ is not None else exc
                        host.socket_failed(conn, error)
                        return
                    if not data:
                        host.socket_lost(conn)
                        return
                    host.socket_data(conn, bytes(data))
                    # Not kept while the socket is idle: an open chat waits here.
                    del data
                if sock.dropped is not None:  # else the reader was cancelled between two reads
                    host.socket_failed(conn, sock.dropped)
            finally:
                if sock.writer is not None:
                    sock.writer.cancel()
                await _close_stream(ready)
        except Exception:  # pragma: no cover - the reader reports its own outcome
            self.logger.exception("a socket's reader failed")
        finally:
            reader.ended = True
            done(reader)

    async def _connect(self, host: SocketHost, conn: Conn) -> _Stream | None:
        """Connect ``conn`` (and make its TLS handshake), bounded by the connect timeout: the
        connected stream, or ``None`` once a failure was reported."""
        opened: list[trio.abc.Stream] = []
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                stream: trio.abc.Stream = await trio.open_tcp_stream(conn.host, conn.port)
                opened.append(stream)
                if conn.tls:
                    secure = trio.SSLStream(stream, host.ssl, server_hostname=conn.server_hostname)
                    await secure.do_handshake()
                    return secure
        except (
            OSError,
            ValueError,
            ssl.SSLError,
            trio.TooSlowError,
            trio.BrokenResourceError,
        ) as exc:
            for raw in opened:
                await trio.aclose_forcefully(raw)
            error: BaseException = exc
            if isinstance(exc, trio.TooSlowError):
                error = TimeoutError(f"connect timed out after {CONNECT_TIMEOUT:g}s")
            elif exc.__cause__ is not None:
                error = exc.__cause__
            host.socket_failed(conn, error)
            return None
        except BaseException:
            # Abandoned (CloseSocket) or the run ends: nothing is left open.
            for raw in opened:
                await trio.aclose_forcefully(raw)
            raise
        return _plain(stream)  # type: ignore[arg-type]

    async def _write(self, sock: _Socket) -> None:
        """Write what the machine sends, in order, then end (the next write starts a writer
        again); after ``CloseSocket``, close the socket once everything before it is
        written. After a failure the writer is not started again: the reader reports it."""
        stream = sock.stream
        assert stream is not None
        with trio.CancelScope() as sock.sending:
            if sock.closing:
                sock.sending.deadline = trio.current_time() + CLOSE_GRACE
            try:
                while sock.outbox:
                    data = b"".join(sock.outbox)
                    sock.outbox.clear()
                    if isinstance(stream, socket.socket):
                        await _send_all(stream, data)
                    else:
                        await stream.send_all(data)
                    sock.unsent -= len(data)
            except (OSError, ssl.SSLError, trio.BrokenResourceError, trio.ClosedResourceError):
                # The reader sees the same failure and reports it.
                pass
            else:
                if not sock.closing:
                    sock.writer = None
                    return
            if sock.closing:
                # A graceful close: the end of our side goes out after the last bytes, and
                # the reader drains what the peer still sends until its end (a socket closed
                # with unread bytes is reset, losing what we wrote last), all of it within
                # CLOSE_GRACE of the close (the scope's deadline).
                _shutdown_write(stream)
                await trio.sleep_forever()
        if sock.closing:
            sock.cancel()


#: The runtime every trio object of the adapter uses.
TRIO = TrioRuntime()


class Driver(driver.Driver):
    """The driver on trio (``coder_io_common._async.driver.Driver``): construction needs no
    running loop; ``start`` and ``perform`` must be called inside ``trio.run``."""

    runtime: ClassVar[AsyncRuntime] = TRIO


def transport_sink(callback: Callable[[Any], object] | None) -> Any:
    """The sink for a user's ``on_transport_event`` on trio (``driver.transport_sink``)."""
    return driver.transport_sink(callback, TRIO)
