"""The trio driver: runs any core machine to completion by performing its actions.

One ``Driver`` belongs to one client (``CoderChatClient``, or the agent through its client).
Every runtime-independent decision of driving is ``coder_proto._connection.Drive``'s; this module
is the trio I/O glue that performs the drive's commands (docs/architecture.md "The adapters"; D12, D21-D24):

* ``StartHttp`` -> an ``httpx.AsyncClient`` request (httpx runs on trio) in a task;
  ``CancelHttp`` cancels that task's cancel scope;
* ``OpenSocket`` -> ``trio.open_tcp_stream`` wrapped in ``trio.SSLStream`` for TLS (the
  context built from ``verify``, the same choices httpx offers, verification on by default),
  bounded by ``CONNECT_TIMEOUT``; one task reads the stream, another writes what the machine
  sends in order; ``CloseSocket`` closes it after what was written;
* ``RunToolBatch`` -> the caller's async tool runner in a task; ``CancelToolBatch`` cancels it;
* ``Wake`` -> the ``Run``'s waiters; one timer task sleeping until ``drive.next_deadline()``.

The driver's tasks are trio system tasks, each in its own cancel scope: they belong to the
client, not to the caller, so a caller's cancellation never cancels the interrupt it fires
(D22), and they end when the client closes (or when ``trio.run`` ends). Every task reports its
outcome to the drive and never raises.

Cancellation (D22): when the task awaiting a ``Run`` is cancelled (a ``trio.move_on_after``,
``trio.fail_after`` or a nursery's cancel scope), the driver cancels the machine
(``Drive.cancel``), performs the resulting commands (background interrupts are started,
sockets closed, requests cancelled) and lets ``trio.Cancelled`` propagate, never wrapped and
without waiting for the background work: ``fail_after`` raises ``trio.TooSlowError`` as trio
users expect.

Interface for the adapter's public classes: the names of ``coder_io_asyncio._driver``
(``Driver``, ``Run``, ``transport_sink``, ``ssl_context``, ``VerifyTypes``).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import httpx
import trio

from coder_io_common.tls import VerifyTypes, ssl_context
from coder_io_common.wallclock import created_at, event_sink
from coder_proto import CoderAgentError, ToolCall
from coder_proto._actions import Action, ToolOutcome
from coder_proto._agent.session import Session
from coder_proto._connection import (
    CancelHttp,
    CancelToolBatch,
    CloseSocket,
    Command,
    Conn,
    Drive,
    HttpCall,
    Job,
    OpenSocket,
    Runnable,
    RunToolBatch,
    StartHttp,
    ToolBatch,
    Wake,
    WriteSocket,
)
from coder_proto._constants import BACKGROUND_TASK_BOUND
from coder_proto._rest.settings import CONNECT_TIMEOUT
from coder_proto._transport_events import TransportEventSink
from coder_proto.transcript import Recorder

__all__ = [
    "Driver",
    "Run",
    "Runnable",
    "ToolRunner",
    "VerifyTypes",
    "ssl_context",
    "transport_sink",
]

logger = logging.getLogger("coder_io_trio")

T = TypeVar("T")

#: Runs one ``RunTools`` batch and returns one outcome per call (D5).
ToolRunner: TypeAlias = Callable[[tuple[ToolCall, ...]], Awaitable[Sequence[ToolOutcome]]]

_READ_CHUNK = 65_536
#: How long ``aclose`` waits for its cancelled tasks to finish closing their sockets.
_TASKS_GRACE = 1.0
#: How long a closing socket waits for the peer's end before it is closed anyway.
_CLOSE_GRACE = 1.0


def _shutdown_write(stream: trio.abc.Stream) -> None:
    """Send the end of our side of the TCP connection (after what is queued)."""
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    raw = getattr(transport, "socket", None)
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_WR)


def transport_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
    """The sink for a user's ``on_transport_event`` (wire 11, D24): wall-clock timestamps from
    ``time.time``; a callback that is a coroutine function has its awaitable run as a trio
    system task, and what it raises is swallowed like a plain callback's exceptions."""
    if callback is None:
        return event_sink()

    def deliver(event: Any) -> None:
        result = callback(event)
        if inspect.isawaitable(result):
            trio.lowlevel.spawn_system_task(_await_callback, result)

    return event_sink(deliver)


async def _await_callback(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:
        logger.debug("transport event handler raised; ignored", exc_info=True)


def cancelled_now() -> bool:
    """True when the calling task's cancel scope is already cancelled (its next checkpoint
    raises ``trio.Cancelled``)."""
    return trio.current_effective_deadline() == -math.inf


class _Task:
    """A cancel scope for one driver task (the trio side of a handle's ``io`` slot)."""

    __slots__ = ("name", "scope", "sock")

    def __init__(self, name: str = "", sock: _Socket | None = None) -> None:
        self.scope = trio.CancelScope()
        self.name = name
        #: For a writer task: its socket.
        self.sock = sock

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def cancel(self) -> None:
        self.scope.cancel()


class _Socket(_Task):
    """The trio side of one ``Conn``: its stream, the bytes to write, the writer's wake-up."""

    __slots__ = ("closing", "outbox", "stream", "wake", "writer")

    def __init__(self) -> None:
        super().__init__()
        self.stream: trio.abc.Stream | None = None
        self.outbox: list[bytes] = []
        self.wake = trio.Event()
        self.closing = False
        self.writer: _Task | None = None

    def kick(self) -> None:
        self.wake.set()


def _closing(task: _Task) -> bool:
    """A socket closing gracefully, or its writer."""
    sock = task if isinstance(task, _Socket) else task.sock
    return sock is not None and sock.closing


class Run(Generic[T]):
    """A machine started with ``Driver.start``: await its result, or follow its progress."""

    def __init__(self, driver: Driver, job: Job) -> None:
        self._driver = driver
        self._job = job
        self._changed = trio.Event()
        job.owner = self

    def __repr__(self) -> str:
        return f"<Run {self._job.machine!r}>"

    @property
    def machine(self) -> Any:
        """The machine being run."""
        return self._job.machine

    @property
    def done(self) -> bool:
        return bool(self._job.machine.done)

    def cancel(self, reason: BaseException | None = None) -> None:
        """Cancel the machine now (D22): ``reason`` is the caller's cancellation, or ``None``
        for a consumer teardown. Its cleanup actions are performed at once; background work
        it starts is not waited for. Does nothing once the machine is done."""
        self._driver._cancel(self._job, reason)

    def _wake(self) -> None:
        self._changed.set()

    async def wait_changed(self) -> None:
        """Return when the machine has moved (new parts, new events, done). If the waiting
        task is cancelled, the machine is cancelled and ``trio.Cancelled`` propagates."""
        if self.done:
            return
        if self._changed.is_set():
            self._changed = trio.Event()
        try:
            await self._changed.wait()
        except trio.Cancelled as exc:
            self.cancel(exc)
            raise

    async def result(self) -> T:
        """Wait for the machine to finish and return its result (or raise its error)."""
        while not self.done:
            await self.wait_changed()
        result: T = self._job.machine.result()
        return result

    async def parts(self) -> AsyncIterator[Any]:
        """The machine's ``parts`` deque (a stream-mode ``Turn``), drained live in order until
        the machine is done. The final result or error is ``await run.result()``."""
        parts = self._job.machine.parts
        while True:
            while parts:
                yield parts.popleft()
            if self.done:
                return
            await self.wait_changed()


class Driver:
    """Performs core actions on trio for one client (see the module docstring).

    ``http_client``: a user-supplied ``httpx.AsyncClient`` is used as is (its timeouts and
    transport, D23) and never closed here; otherwise one is created with no read timeout and a
    30 s connect timeout and closed by ``aclose``. ``verify`` configures TLS for the stream
    sockets (and for the created HTTP client). ``sink`` receives the ``http:*`` events.
    Construction does no I/O and needs no running trio loop.
    """

    def __init__(
        self,
        *,
        base_url: str,
        token: str | None,
        http_client: httpx.AsyncClient | None = None,
        verify: VerifyTypes = True,
        sink: TransportEventSink | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.base_url = base_url
        self._ssl = ssl_context(verify)
        self.sink = sink if sink is not None else TransportEventSink()
        self.drive = Drive(
            base_url=base_url,
            token=token,
            sink=self.sink,
            recorder=recorder,
            created_at=created_at,
        )
        if http_client is None:
            http_client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT), verify=self._ssl
            )
            # Wire 1.1: the reference sends no Accept header.
            http_client.headers.pop("Accept", None)
            self._owns_client = True
        else:
            self._owns_client = False
        self.http_client = http_client
        self._tasks: set[_Task] = set()
        self._tasks_done: trio.Event | None = None
        self._timer: trio.CancelScope | None = None
        self._timer_due: float | None = None
        self._timer_running = False
        self._closed = False
        self._background_idle: trio.Event | None = None

    def __repr__(self) -> str:
        return (
            f"<Driver {self.base_url} connections={self.drive.open_connections} "
            f"machines={len(self.drive.jobs)}>"
        )

    # -- public ------------------------------------------------------------------------------

    @property
    def recorder(self) -> Recorder | None:
        """Observes what crosses the wire (``coder_proto.transcript.Recorder``), or ``None``."""
        return self.drive.recorder

    @recorder.setter
    def recorder(self, value: Recorder | None) -> None:
        self.drive.recorder = value

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def open_connections(self) -> int:
        """Sockets currently open or connecting."""
        return self.drive.open_connections

    @property
    def background_jobs(self) -> int:
        """Background jobs (D22) not finished yet."""
        return self.drive.background_jobs

    def start(
        self,
        machine: Runnable[T],
        *,
        session: Session | None = None,
        tools: ToolRunner | None = None,
    ) -> Run[T]:
        """Start driving ``machine`` (already started by its constructor). With ``session``,
        its connections are the session's and routed by the routing rule; ``tools`` runs its
        ``RunTools`` batches. Must be called inside ``trio.run``."""
        if self._closed:
            raise CoderAgentError("this client is closed")
        job = self.drive.start(machine, session=session, tools=tools, now=time.monotonic())
        run: Run[T] = Run(self, job)
        self._pump()
        return run

    async def run(
        self,
        machine: Runnable[T],
        *,
        session: Session | None = None,
        tools: ToolRunner | None = None,
    ) -> T:
        """Drive ``machine`` to completion and return its result (or raise its error)."""
        return await self.start(machine, session=session, tools=tools).result()

    def attach_session(self, session: Session) -> None:
        """Keep driving ``session`` between turns (its paused stream keeps reading, H.6)."""
        self.drive.attach_session(session)

    def perform(self, actions: Iterable[Action], *, session: Session) -> None:
        """Perform actions a session method returned (``reset_session``,
        ``close_retained_stream`` ...) in that session's connection scope."""
        self.drive.perform(actions, session=session, now=time.monotonic())
        self._pump()

    async def wait_background(self, timeout: float = BACKGROUND_TASK_BOUND) -> bool:
        """Wait until every background job finished (``True``) or ``timeout`` passed
        (``False``)."""
        with trio.move_on_after(timeout):
            while self.background_jobs:
                event = self._background_idle = trio.Event()
                await event.wait()
        return not self.background_jobs

    async def aclose(self, *, background_timeout: float = BACKGROUND_TASK_BOUND) -> None:
        """Close the driver (idempotent): await the background jobs for at most
        ``background_timeout`` seconds (D22), cancel what is left, close every socket, cancel
        every task and close the HTTP client if it was created here. Called from a task that
        is already cancelled, the closing still happens (shielded, bounded)."""
        if self._closed:
            return
        self._closed = True
        self.drive.close()
        try:
            with trio.CancelScope(shield=cancelled_now()) as waiting:
                waiting.deadline = trio.current_time() + background_timeout + _TASKS_GRACE
                await self.wait_background(background_timeout)
        finally:
            self.drive.shutdown(time.monotonic())
            self._pump()
            if self._timer is not None:
                self._timer.cancel()
            # Sockets being closed finish their close (what was written goes out); every
            # other task is cancelled now, the rest after the grace period.
            for task in list(self._tasks):
                if not _closing(task):
                    task.cancel()
            with trio.CancelScope(shield=True) as closing:
                closing.deadline = trio.current_time() + 3 * _TASKS_GRACE
                if self._tasks:
                    done = self._tasks_done = trio.Event()
                    with trio.move_on_after(_CLOSE_GRACE + _TASKS_GRACE):
                        await done.wait()
                for task in list(self._tasks):
                    task.cancel()
                if self._owns_client:
                    await self.http_client.aclose()

    # -- performing the drive's commands -------------------------------------------------------

    def _pump(self) -> None:
        """Perform every command the drive produced, re-arm the timer, wake the waiters."""
        drive = self.drive
        for command in drive.commands():
            self._perform(command)
        self._arm_timer(drive.next_deadline())
        idle = self._background_idle
        if idle is not None and not drive.background_jobs:
            idle.set()

    def _perform(self, command: Command) -> None:
        if isinstance(command, Wake):
            command.job.owner._wake()
        elif isinstance(command, WriteSocket):
            sock: _Socket = command.conn.io
            sock.outbox.append(command.data)
            sock.kick()
        elif isinstance(command, StartHttp):
            command.call.io = self._spawn(self._http, command.call)
        elif isinstance(command, OpenSocket):
            sock = _Socket()
            command.conn.io = sock
            self._spawn(self._socket, command.conn, sock, task=sock)
        elif isinstance(command, CloseSocket):
            sock = command.conn.io
            sock.closing = True
            if sock.stream is None or sock.writer is None:
                sock.cancel()
            else:
                sock.kick()
        elif isinstance(command, CancelHttp):
            if command.call.io is not None:
                command.call.io.cancel()
        elif isinstance(command, CancelToolBatch):
            if command.batch.io is not None:
                command.batch.io.cancel()
        elif isinstance(command, RunToolBatch):
            command.batch.io = self._spawn(self._run_tools, command.batch)
        else:  # pragma: no cover - every command is handled above
            raise CoderAgentError(f"unknown command {command!r}")

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: Any, task: Any = None) -> _Task:
        handle: _Task = task if task is not None else _Task(getattr(fn, "__name__", ""))
        self._tasks.add(handle)
        trio.lowlevel.spawn_system_task(self._task_main, handle, fn, *args)
        return handle

    async def _task_main(
        self, handle: _Task, fn: Callable[..., Awaitable[None]], *args: Any
    ) -> None:
        try:
            with handle.scope:
                await fn(*args)
        except Exception:  # pragma: no cover - every task reports its own outcome
            logger.exception("a driver task failed")
        finally:
            self._tasks.discard(handle)
            if not self._tasks and self._tasks_done is not None:
                self._tasks_done.set()

    def _arm_timer(self, due: float | None) -> None:
        if self._closed and not self.drive.jobs:
            due = None
        self._timer_due = due
        if due is None:
            if self._timer is not None:
                self._timer.deadline = math.inf
            return
        deadline = trio.current_time() + max(0.0, due - time.monotonic())
        if self._timer is not None:
            self._timer.deadline = deadline
        elif not self._timer_running:
            self._timer_running = True
            trio.lowlevel.spawn_system_task(self._timer_loop)

    async def _timer_loop(self) -> None:
        """One task for every deadline: it sleeps until the earliest one (re-armed by moving
        its cancel scope's deadline) and ticks the drive."""
        try:
            while not self._closed or self.drive.jobs:
                due = self._timer_due
                with trio.CancelScope() as scope:
                    self._timer = scope
                    if due is not None:
                        scope.deadline = trio.current_time() + max(0.0, due - time.monotonic())
                    await trio.sleep_forever()
                self._timer = None
                if self._closed and not self.drive.jobs:
                    return
                due = self._timer_due
                if due is not None and due <= time.monotonic():
                    self.drive.tick(time.monotonic())
                    self._pump()
                    await trio.lowlevel.checkpoint()
        finally:
            self._timer = None
            self._timer_running = False

    def _cancel(self, job: Job, reason: BaseException | None) -> None:
        self.drive.cancel(job, reason, time.monotonic())
        self._pump()

    # -- REST --------------------------------------------------------------------------------

    async def _http(self, call: HttpCall) -> None:
        drive = self.drive
        try:
            client = self.http_client
            outgoing = client.build_request(
                call.method, call.url, headers=call.headers, content=call.body
            )
            response = await client.send(outgoing, stream=True)
            try:
                drive.http_headers(call, response.status_code, time.monotonic())
                body = await response.aread()
            finally:
                with trio.CancelScope(shield=True):
                    await response.aclose()
        except Exception as exc:
            drive.http_failed(call, exc, time.monotonic())
        else:
            drive.http_response(
                call,
                status=response.status_code,
                headers=response.headers.multi_items(),
                body=body,
                reason=response.reason_phrase,
                now=time.monotonic(),
            )
        self._pump()

    # -- sockets -----------------------------------------------------------------------------

    async def _socket(self, conn: Conn, sock: _Socket) -> None:
        """Open the connection, then read it until it ends; every outcome is one input."""
        drive = self.drive
        opened: list[trio.abc.Stream] = []
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                stream: trio.abc.Stream = await trio.open_tcp_stream(conn.host, conn.port)
                opened.append(stream)
                if conn.tls:
                    secure = trio.SSLStream(stream, self._ssl, server_hostname=conn.server_hostname)
                    await secure.do_handshake()
                    stream = secure
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
            drive.socket_failed(conn, error, time.monotonic())
            self._pump()
            return
        except BaseException:
            # Abandoned (CloseSocket) or the run ends: nothing is left open.
            for raw in opened:
                await trio.aclose_forcefully(raw)
            raise
        sock.stream = stream
        try:
            if conn.closed:
                return
            sock.writer = self._spawn(self._write, conn, sock, task=_Task("_write", sock))
            drive.socket_made(conn, time.monotonic())
            self._pump()
            # After CloseSocket the writer flushes what came before it, then cancels this
            # task; what is read meanwhile is ignored by the drive.
            while True:
                try:
                    data = await stream.receive_some(_READ_CHUNK)
                except (OSError, ssl.SSLError, trio.BrokenResourceError) as exc:
                    error = exc.__cause__ if exc.__cause__ is not None else exc
                    drive.socket_failed(conn, error, time.monotonic())
                    self._pump()
                    return
                except trio.ClosedResourceError:
                    return
                if not data:
                    drive.socket_lost(conn, time.monotonic())
                    self._pump()
                    return
                drive.socket_data(conn, bytes(data), time.monotonic())
                self._pump()
        finally:
            if sock.writer is not None:
                sock.writer.cancel()
            await trio.aclose_forcefully(stream)

    async def _write(self, conn: Conn, sock: _Socket) -> None:
        """Write what the machine sends, in order; after ``CloseSocket``, close the socket
        once everything before it is written."""
        stream = sock.stream
        assert stream is not None
        try:
            while True:
                while sock.outbox:
                    data = b"".join(sock.outbox)
                    sock.outbox.clear()
                    await stream.send_all(data)
                if sock.closing:
                    break
                await sock.wake.wait()
                sock.wake = trio.Event()
        except (OSError, ssl.SSLError, trio.BrokenResourceError, trio.ClosedResourceError):
            # The reader sees the same failure and reports it.
            pass
        if sock.closing:
            # A graceful close: the end of our side goes out after the last bytes, and the
            # reader drains what the peer still sends until its end (a socket closed with
            # unread bytes is reset, losing what we wrote last), bounded by a grace period.
            _shutdown_write(stream)
            with trio.move_on_after(_CLOSE_GRACE):
                await trio.sleep_forever()
            sock.cancel()

    # -- tools -------------------------------------------------------------------------------

    async def _run_tools(self, batch: ToolBatch) -> None:
        try:
            outcomes = await batch.runner(batch.calls)
        except Exception as exc:
            self.drive.tools_failed(batch, exc, time.monotonic())
        else:
            self.drive.tools_done(batch, outcomes, time.monotonic())
        self._pump()
