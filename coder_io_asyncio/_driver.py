"""The asyncio driver: runs any core machine to completion by performing its actions.

One ``Driver`` belongs to one client (``CoderChatClient``, or the agent through its client).
Every runtime-independent decision of driving (routing socket inputs to the running turn or
the session, the connection and request registries, background jobs, ``http:*`` events, token
scrubbing, tool batches, transcripts) is ``coder_proto._connection.Drive``'s; this module is the
asyncio I/O glue that performs the drive's commands (docs/architecture.md "The adapters"; D12, D21-D24):

* ``StartHttp`` -> an ``httpx.AsyncClient`` request in a task; ``CancelHttp`` cancels it. On
  a client the driver created, at most ``HTTP_CONCURRENCY`` (its pool size) are in flight at
  once; the others wait their turn here rather than in httpx's pool;
* ``OpenSocket`` -> ``asyncio.open_connection`` (TLS with the context built from ``verify``,
  the same choices httpx offers) bounded by ``CONNECT_TIMEOUT``, then one task reads the
  socket; ``WriteSocket`` / ``CloseSocket`` write / close it;
* ``RunToolBatch`` -> the caller's async tool runner in a task; ``CancelToolBatch`` cancels it;
* ``Wake`` -> the ``Run``'s waiters; one loop timer at ``drive.next_deadline()``.

Cancellation (D22): when the task awaiting a ``Run`` is cancelled, the driver cancels the
machine (``Drive.cancel``), performs the resulting commands (background interrupts are
started, sockets closed, requests cancelled) and re-raises the ``asyncio.CancelledError``
unwrapped, without waiting for the background work. A caller's ``asyncio.timeout`` therefore
surfaces as the builtin ``TimeoutError``.

Interface for the adapters' public classes (stable; the trio and blocking drivers offer the
same names):

* ``Driver(base_url=..., token=..., http_client=None, verify=True, sink=None, recorder=None)``;
* ``driver.start(machine, *, session=None, tools=None) -> Run`` and
  ``await driver.run(machine, ...)`` (the machine's result, or its error raised);
* ``run.machine``, ``run.done``, ``await run.result()``, ``await run.wait_changed()``,
  ``run.parts()`` (an async iterator draining ``machine.parts`` live), ``run.cancel(reason)``;
* ``driver.perform(actions, session=...)`` for actions a session method returned
  (``reset_session``, ``close_retained_stream`` ...); ``driver.attach_session(session)`` to
  keep a session's paused stream read without starting a machine;
* ``driver.closed``, ``driver.open_connections``, ``driver.background_jobs`` (observability
  and tests);
* ``await driver.wait_background(timeout)`` and ``await driver.aclose()``;
* ``transport_sink(on_transport_event)``: the ``TransportEventSink`` for a user callback
  (sync or async), with ``time.time`` timestamps;
* ``driver.recorder`` (a ``coder_proto.transcript.Recorder`` or ``None``, settable): told
  about every turn, REST exchange, chunk read from a session's stream socket, tool run,
  cancellation and session call (``docs/transcripts.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import httpx

from coder_io_common.tls import VerifyTypes, ssl_context
from coder_io_common.wallclock import created_at
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
    "created_at",
    "ssl_context",
    "transport_sink",
]

logger = logging.getLogger("coder_io_asyncio")

T = TypeVar("T")

#: Runs one ``RunTools`` batch and returns one outcome per call (D5; missing ones become error
#: results in the core).
ToolRunner: TypeAlias = Callable[[tuple[ToolCall, ...]], Awaitable[Sequence[ToolOutcome]]]

_READ_CHUNK = 65_536
#: Requests in flight at once on an HTTP client the driver created: the size of its
#: connection pool. More would only wait in httpx's pool, whose bookkeeping rescans every
#: waiting request and connection whenever one is added or finishes (a fleet of agents
#: opening at once would cost time quadratic in their number); they wait here instead, in
#: order, at no cost.
HTTP_CONCURRENCY = 100


def transport_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
    """The sink for a user's ``on_transport_event`` (wire 11, D24): wall-clock timestamps from
    ``time.time``; a callback that is a coroutine function has its awaitable scheduled on the
    running loop, and what it raises is swallowed like a plain callback's exceptions."""
    if callback is None:
        return TransportEventSink(wall_clock=time.time)

    def deliver(event: Any) -> None:
        result = callback(event)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            _callback_tasks.add(task)
            task.add_done_callback(_callback_done)

    return TransportEventSink(deliver, wall_clock=time.time)


_callback_tasks: set[asyncio.Future[Any]] = set()


def _callback_done(task: asyncio.Future[Any]) -> None:
    _callback_tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.debug("transport event handler raised; ignored", exc_info=task.exception())


class _Socket:
    """The asyncio side of one ``Conn``: its task and, once connected, its writer."""

    __slots__ = ("task", "writer")

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.StreamWriter | None = None


class Run(Generic[T]):
    """A machine started with ``Driver.start``: await its result, or follow its progress."""

    def __init__(self, driver: Driver, job: Job) -> None:
        self._driver = driver
        self._job = job
        self._changed = asyncio.Event()
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

    async def wait_changed(self) -> None:
        """Return when the machine has moved (new parts, new events, done). If the waiting
        task is cancelled, the machine is cancelled and the ``CancelledError`` re-raised."""
        if self.done:
            return
        self._changed.clear()
        try:
            await self._changed.wait()
        except asyncio.CancelledError as exc:
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
    """Performs core actions on asyncio for one client (see the module docstring).

    ``http_client``: a user-supplied ``httpx.AsyncClient`` is used as is (its timeouts and
    transport, D23) and never closed here; otherwise one is created with no read timeout and a
    30 s connect timeout and closed by ``aclose``. ``verify`` configures TLS for the stream
    sockets (and for the created HTTP client). ``sink`` receives the ``http:*`` events.
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
        self._http_gate: asyncio.Semaphore | None = None
        if http_client is None:
            http_client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT),
                verify=self._ssl,
                limits=httpx.Limits(max_connections=HTTP_CONCURRENCY, max_keepalive_connections=20),
            )
            # Wire 1.1: the reference sends no Accept header.
            http_client.headers.pop("Accept", None)
            self._owns_client = True
            self._http_gate = asyncio.Semaphore(HTTP_CONCURRENCY)
        else:
            self._owns_client = False
        self.http_client = http_client
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: float | None = None
        self._closed = False
        self._background_idle: asyncio.Event | None = None

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
        ``RunTools`` batches. Must be called from the event loop."""
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
        """Keep driving ``session`` between turns (its paused stream keeps reading, H.6).
        ``start(..., session=session)`` does this implicitly."""
        self.drive.attach_session(session)

    def perform(self, actions: Iterable[Action], *, session: Session) -> None:
        """Perform actions a session method returned (``reset_session``,
        ``close_retained_stream`` ...) in that session's connection scope."""
        self.drive.perform(actions, session=session, now=time.monotonic())
        self._pump()

    async def wait_background(self, timeout: float = BACKGROUND_TASK_BOUND) -> bool:
        """Wait until every background job finished (``True``) or ``timeout`` passed
        (``False``)."""
        deadline = time.monotonic() + timeout
        while self.background_jobs:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            event = self._background_idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), left)
        return True

    async def aclose(self, *, background_timeout: float = BACKGROUND_TASK_BOUND) -> None:
        """Close the driver (idempotent): await the background jobs for at most
        ``background_timeout`` seconds (D22), cancel what is left, close every socket, cancel
        every task and close the HTTP client if it was created here."""
        if self._closed:
            return
        self._closed = True
        self.drive.close()
        try:
            await self.wait_background(background_timeout)
        finally:
            self.drive.shutdown(time.monotonic())
            self._pump()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
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
            command.job.owner._changed.set()
        elif isinstance(command, WriteSocket):
            writer = command.conn.io.writer
            if writer is not None:
                writer.write(command.data)
        elif isinstance(command, StartHttp):
            command.call.io = self._spawn(self._http(command.call))
        elif isinstance(command, OpenSocket):
            sock = command.conn.io = _Socket()
            sock.task = self._spawn(self._socket(command.conn, sock))
        elif isinstance(command, CloseSocket):
            sock = command.conn.io
            if sock.writer is not None:
                sock.writer.close()
            if sock.task is not None:
                sock.task.cancel()
        elif isinstance(command, CancelHttp | CancelToolBatch):
            handle = command.call if isinstance(command, CancelHttp) else command.batch
            if handle.io is not None:
                handle.io.cancel()
        elif isinstance(command, RunToolBatch):
            command.batch.io = self._spawn(self._run_tools(command.batch))
        else:  # pragma: no cover - every command is handled above
            raise CoderAgentError(f"unknown command {command!r}")

    def _arm_timer(self, due: float | None) -> None:
        if self._closed and not self.drive.jobs:
            due = None
        if due == self._timer_due and (due is None or self._timer is not None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_due = due
        if due is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(0.0, due - time.monotonic()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_due = None
        self.drive.tick(time.monotonic())
        self._pump()

    def _cancel(self, job: Job, reason: BaseException | None) -> None:
        self.drive.cancel(job, reason, time.monotonic())
        self._pump()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- REST --------------------------------------------------------------------------------

    async def _http(self, call: HttpCall) -> None:
        gate = self._http_gate
        if gate is None:
            await self._exchange(call)
        else:
            async with gate:
                await self._exchange(call)

    async def _exchange(self, call: HttpCall) -> None:
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
                await response.aclose()
        except asyncio.CancelledError:
            # CancelHttp: the drive already reported the cancellation.
            raise
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
        writer: asyncio.StreamWriter | None = None
        try:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        conn.host,
                        conn.port,
                        ssl=self._ssl if conn.tls else None,
                        server_hostname=conn.server_hostname,
                    ),
                    CONNECT_TIMEOUT,
                )
            except (OSError, TimeoutError, ValueError, ssl.SSLError) as exc:
                drive.socket_failed(conn, exc, time.monotonic())
                self._pump()
                return
            if conn.closed:
                return
            sock.writer = writer
            drive.socket_made(conn, time.monotonic())
            self._pump()
            while not conn.closed:
                try:
                    data = await reader.read(_READ_CHUNK)
                except (OSError, ssl.SSLError) as exc:
                    drive.socket_failed(conn, exc, time.monotonic())
                    self._pump()
                    return
                if not data:
                    drive.socket_lost(conn, time.monotonic())
                    self._pump()
                    return
                drive.socket_data(conn, data, time.monotonic())
                self._pump()
        finally:
            if writer is not None:
                writer.close()

    # -- tools -------------------------------------------------------------------------------

    async def _run_tools(self, batch: ToolBatch) -> None:
        try:
            outcomes = await batch.runner(batch.calls)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.drive.tools_failed(batch, exc, time.monotonic())
        else:
            self.drive.tools_done(batch, outcomes, time.monotonic())
        self._pump()
