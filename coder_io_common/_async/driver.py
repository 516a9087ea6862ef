"""The driver of the event-loop adapters: runs any core machine to completion by performing
its commands on an ``AsyncRuntime``.

One ``Driver`` belongs to one client (``CoderChatClient``, or the agent through its client).
Every runtime-independent decision of driving (routing socket inputs to the running turn or
the session, the connection and request registries, background jobs, ``http:*`` events, token
scrubbing, tool pauses, the generate ladder, transcripts) is ``coder_proto.Connection``'s: each
piece of work the driver runs is one of its tasks (``start_turn``, ``start_call``,
``start_watch``, ``start_durable``, ``start_close``). This module performs the
connection's commands (docs/architecture.md "The adapters"; D12, D21-D24), the same way on
every runtime:

* ``StartHttp`` -> an ``httpx.AsyncClient`` request (httpx runs on asyncio and on trio) in a
  task of the client; ``CancelHttp`` cancels it. The whole exchange, from sending to the
  last byte of the body, ends within ``http_timeout`` when the core sets no deadline of its
  own (D29), and the body is read as it comes, at most ``max_response_bytes`` of it (D30).
  On a client the driver created, at most ``HTTP_CONCURRENCY`` (its pool size) are in
  flight at once; the others wait their turn here rather than in httpx's pool;
* ``OpenSocket`` / ``WriteSocket`` / ``CloseSocket`` -> the runtime's stream sockets
  (``AsyncRuntime.open_socket``), which report back through the driver's ``socket_*``
  methods;
* ``InvokeTools`` -> the run's invoker (``Invoker``) on the pause's invocations in a task,
  each outcome answered with ``tool_finished`` (an invoker that raises is logged and every
  call gets an error result, D5); ``CancelTools`` cancels the task;
* ``TaskMoved`` -> the ``TaskHandle``'s waiters; one timer at ``connection.next_deadline()``.

``_perform`` dispatches on the command's type, one branch per command: a new command is one
more branch there and, when it does I/O, one more task method reporting its outcome to the
connection and ending with ``_pump``.

The driver's tasks belong to the client, not to the caller, so a caller's cancellation never
cancels the interrupt it fires (D22); they end when the client closes. Every task reports its
outcome to the connection and never raises.

Cancellation (D22): when the task awaiting a ``TaskHandle`` is cancelled (``asyncio.timeout``, a
cancelled task, ``trio.move_on_after``, ``trio.fail_after``, a cancelled nursery), the driver
cancels the machine (``Connection.cancel``), performs the resulting commands (background
interrupts are started, sockets closed, requests cancelled) and lets the runtime's
cancellation propagate unwrapped, without waiting for the background work: a caller's
``asyncio.timeout`` surfaces as the builtin ``TimeoutError``, ``trio.fail_after`` as
``trio.TooSlowError``.

Interface for the public classes (the blocking driver offers the same names):

* ``Driver(base_url=..., token=..., http_client=None, verify=True, sink=None, recorder=None)``
  on a subclass that names its ``runtime``; construction does no I/O and needs no running
  loop;
* ``driver.turn(core, messages, *, mode, edit_message_id=None, invoke) -> TaskHandle`` (an agent's
  turn: ``"generate"`` with its whole ladder, ``"stream"`` or ``"segment"``),
  ``driver.call(call, *, data=None)`` (a plain operation), ``driver.watch(backoff=...)``,
  ``driver.durable(job, *, invoke)`` (a ``DurableWork`` or a ``ProgramJob``),
  ``driver.close_agent(core, *, archive)`` and ``driver.reset(core)``;
* ``run.machine``, ``run.done``, ``await run.result()``, ``await run.wait_changed()``,
  ``await run.wait_until(predicate)``,
  ``run.parts()`` (an async iterator draining ``machine.parts`` live), ``run.cancel(reason)``;
* ``driver.closed``, ``driver.open_connections``, ``driver.background_jobs`` (observability
  and tests);
* ``await driver.wait_background(timeout)`` and ``await driver.aclose()``;
* ``transport_sink(on_transport_event, runtime)``: the ``TransportEventSink`` for a user
  callback (sync or async), with ``time.time`` timestamps;
* ``driver.recorder`` (a ``coder_proto.transcript.Recorder`` or ``None``, settable): told
  about every turn, REST exchange, chunk read from a session's stream socket, tool run,
  cancellation and session call (``docs/transcripts.md``).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

from coder_io_common.tls import VerifyTypes, ssl_context
from coder_io_common.wallclock import created_at, event_sink
from coder_proto import (
    AgentCore,
    ApplyStore,
    CancelHttp,
    CancelTools,
    CloseSocket,
    CoderAgentError,
    CoderProtocolError,
    Conn,
    Connection,
    HttpExchange,
    InvokeTools,
    OpenSocket,
    StartHttp,
    StoreRequest,
    Task,
    TaskMoved,
    ToolBatch,
    ToolInvocation,
    WatchBackoff,
    WriteSocket,
)
from coder_proto.adapter import (
    BACKGROUND_TASK_BOUND,
    CONNECT_TIMEOUT,
    HTTP_TIMEOUT,
    MAX_RESPONSE_BYTES,
    ConnectionCommand,
    Operation,
    PrefixSelector,
    ToolOutcome,
    TransportEventSink,
)

from .runtime import CLOSE_GRACE, AsyncRuntime, Event, Spawned

if TYPE_CHECKING:
    import httpx

    from coder_proto.adapter import ProgramJob
    from coder_proto.durable import (
        DurableWork,
    )
    from coder_proto.transcript import (
        Recorder,
    )

__all__ = ["HTTP_CONCURRENCY", "Driver", "Invoker", "TaskHandle", "transport_sink"]

T = TypeVar("T")

#: Runs the invocations of one tool pause (the core planned them, D5) and returns one outcome
#: per invocation, in order (``invocation.succeeded`` / ``failed``).
Invoker: TypeAlias = Callable[[Sequence[ToolInvocation]], Awaitable[Sequence[ToolOutcome]]]

#: Requests in flight at once on an HTTP client the driver created: the size of its
#: connection pool. More would only wait in httpx's pool, whose bookkeeping rescans every
#: waiting request and connection whenever one is added or finishes (a fleet of agents
#: opening at once would cost time quadratic in their number); they wait here instead, in
#: order, at no cost.
HTTP_CONCURRENCY = 100
#: How long a closing driver waits for its cancelled tasks to finish (closing sockets).
_TASKS_GRACE = 1.0


def transport_sink(
    callback: Callable[[Any], object] | None, runtime: AsyncRuntime
) -> TransportEventSink:
    """The sink for a user's ``on_transport_event`` (wire 11, D24): wall-clock timestamps from
    ``time.time``; a callback that is a coroutine function has its awaitable run in a task of
    its own, and what it raises is swallowed like a plain callback's exceptions."""
    if callback is None:
        return event_sink()

    def deliver(event: Any) -> None:
        result = callback(event)
        if inspect.isawaitable(result):
            runtime.spawn(_await_callback, runtime.logger, result)

    return event_sink(deliver)


async def _await_callback(logger: logging.Logger, awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:
        logger.debug("transport event handler raised; ignored", exc_info=True)


class _TooLarge(Exception):
    """A response body past ``max_response_bytes``."""


async def _read_body(response: httpx.Response, most: int) -> bytes:
    """The body of ``response``, read as it comes; ``_TooLarge`` once it passes ``most``
    bytes (D30), so no more than that is ever held."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > most:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class TaskHandle(Generic[T]):
    """A piece of work the driver started (a turn, a call, the watch, a durable job, an
    agent's close): await its result, or follow its progress."""

    __slots__ = ("_changed", "_driver", "_invoke", "_runtime", "_task")

    def __init__(self, driver: Driver, task: Task, invoke: Invoker | None) -> None:
        self._driver = driver
        self._runtime = driver.runtime
        self._task = task
        #: Runs the tool pauses' invocations (a turn's or a durable job's).
        self._invoke = invoke
        self._changed: Event = self._runtime.event()
        task.io = self

    def __repr__(self) -> str:
        return f"<TaskHandle {self._task.machine!r}>"

    @property
    def machine(self) -> Any:
        """The core machine running now (a generate's turn changes along its ladder)."""
        return self._task.machine

    @property
    def done(self) -> bool:
        return self._task.done

    def cancel(self, reason: BaseException | None = None) -> None:
        """Cancel the machine now (D22): ``reason`` is the caller's cancellation, or ``None``
        for a consumer teardown. Its cleanup actions are performed at once; background work
        it starts is not waited for. Does nothing once the machine is done."""
        self._driver._cancel(self._task, reason)

    def _wake(self) -> None:
        self._changed.set()

    def changed(self) -> Awaitable[Any]:
        """What to await for the machine's next move (new parts, new events, done), without
        a coroutine of its own: the runtime's wait on the handle's event. The awaiting code
        cancels the machine when the wait is cancelled (``wait_changed`` does)."""
        if self._changed.is_set():
            self._changed = self._runtime.event()
        return self._changed.wait()

    async def wait_changed(self) -> None:
        """Return when the machine has moved (new parts, new events, done). If the waiting
        task is cancelled, the machine is cancelled and the runtime's cancellation
        propagates."""
        if self.done:
            return
        try:
            await self.changed()
        except self._runtime.cancelled as exc:
            self.cancel(exc)
            raise

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` holds or the machine is done (cancellation as for
        ``wait_changed``)."""
        while not (predicate() or self.done):
            await self.wait_changed()

    async def result(self) -> T:
        """Wait for the machine to finish and return its result (or raise its error)."""
        while not self.done:
            await self.wait_changed()
        result: T = self._task.result()
        return result

    async def parts(self) -> AsyncIterator[Any]:
        """The machine's ``parts`` deque (a stream-mode ``Turn``), drained live in order until
        the machine is done. The final result or error is ``await run.result()``."""
        machine = self.machine
        while True:
            # Read anew after each wait: an idle turn lets its empty deque go.
            parts = machine.parts
            while parts:
                yield parts.popleft()
            if self.done:
                return
            await self.wait_changed()


class Driver:
    """Performs core actions on ``runtime`` for one client (see the module docstring).

    ``http_client``: a user-supplied ``httpx.AsyncClient`` is used as is (its timeouts and
    transport, D23) and never closed here; otherwise one is created with no read timeout and a
    30 s connect timeout and closed by ``aclose``. ``verify`` configures TLS for the stream
    sockets (and for the created HTTP client). ``sink`` receives the ``http:*`` events.
    """

    #: The runtime the driver performs on (each adapter's subclass names its own).
    runtime: ClassVar[AsyncRuntime]

    def __init__(
        self,
        *,
        base_url: str,
        token: str | None,
        http_client: httpx.AsyncClient | None = None,
        verify: VerifyTypes = True,
        sink: TransportEventSink | None = None,
        recorder: Recorder | None = None,
        selector: PrefixSelector | None = None,
    ) -> None:
        # Imported here, by the first driver, rather than with the adapter: a program that
        # imports the library pays for httpx when it makes a client.
        import httpx

        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise CoderAgentError(
                f"http_client must be an httpx.AsyncClient on the {self.runtime.name} adapter "
                f"(got {type(http_client).__name__})"
            )
        self.base_url = base_url
        self._ssl = ssl_context(verify)
        self.sink = sink if sink is not None else TransportEventSink()
        # The connection reports to this very sink, so a listener attached to it later (an
        # agent's observer, OpenTelemetry's HTTP spans) hears the connection's events too.
        self._connection = Connection(
            base_url=base_url,
            token=token,
            sink=self.sink,
            recorder=recorder,
            created_at=created_at,
            selector=selector,
        )
        runtime = self.runtime
        self._http_gate: Any = None
        if http_client is None:
            http_client = self._new_client()
            self._owns_client = True
            self._http_gate = runtime.semaphore(HTTP_CONCURRENCY)
        else:
            self._owns_client = False
        self.http_client = http_client
        # The loop the owned client's pooled connections belong to (set by the first request).
        self._client_loop: object = None
        #: D29: the total bound of a REST call the core sets no deadline for (``None``: none).
        self.http_timeout: float | None = HTTP_TIMEOUT
        #: D30: the largest response body read; a larger one fails the call.
        self.max_response_bytes: int = MAX_RESPONSE_BYTES
        self._tasks: set[Spawned] = set()
        self._tasks_done: Event | None = None
        self._timer = runtime.timer(self._on_timer)
        self._closed = False
        self._background_idle: Event | None = None

    def __repr__(self) -> str:
        return (
            f"<Driver {self.base_url} connections={self.open_connections} "
            f"background={self.background_jobs}>"
        )

    # -- public ------------------------------------------------------------------------------

    @property
    def recorder(self) -> Recorder | None:
        """Observes what crosses the wire (``coder_proto.transcript.Recorder``), or ``None``."""
        return self._connection.recorder

    @recorder.setter
    def recorder(self, value: Recorder | None) -> None:
        self._connection.recorder = value

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def open_connections(self) -> int:
        """Sockets currently open or connecting."""
        return self._connection.stats.open_connections

    @property
    def background_jobs(self) -> int:
        """Background jobs (D22) not finished yet."""
        return self._connection.stats.background_jobs

    def turn(
        self,
        core: AgentCore,
        messages: Sequence[Any],
        *,
        mode: str = "generate",
        edit_message_id: int | None = None,
        invoke: Invoker,
    ) -> TaskHandle[Any]:
        """Start a turn of the agent ``core`` (``Connection.start_turn``): ``"generate"``
        (its result the ``GenerateResult`` of the whole ladder), ``"stream"`` or
        ``"segment"`` (parts live in ``run.parts()``). ``invoke`` runs the invocations of its
        tool pauses. Must be called on the runtime's loop."""
        connection = self._connection
        task = connection.start_turn(
            core, messages, now=self._open_now(), mode=mode, edit_message_id=edit_message_id
        )
        return self._started(task, invoke)

    def call(
        self, call: Operation[T], *, data: Any = None, invoke: Invoker | None = None
    ) -> TaskHandle[T]:
        """Start a plain operation (``Connection.start_call``); ``data`` is what its upload
        read; ``invoke`` runs the invocations ``call.tools`` plans, if it pauses for tools.
        Its result is the operation's value."""
        task = self._connection.start_call(call, now=self._open_now(), data=data)
        return self._started(task, invoke)

    def watch(self, *, backoff: WatchBackoff | None = None) -> TaskHandle[None]:
        """Subscribe to the chat watch (``Connection.start_watch``): ``run.machine`` takes
        the events; cancelling the run stops it."""
        task = self._connection.start_watch(now=self._open_now(), backoff=backoff)
        return self._started(task)

    def durable(self, job: DurableWork | ProgramJob, *, invoke: Invoker) -> TaskHandle[Any]:
        """Start a durable job (``Connection.start_durable``): its store calls are performed
        with ``job.store``, the invocations of its tool pauses with ``invoke``."""
        return self._started(self._connection.start_durable(job, now=self._open_now()), invoke)

    def close_agent(self, core: AgentCore, *, archive: bool) -> TaskHandle[Any]:
        """Close the agent ``core`` (``Connection.start_close``): its dispose, or with
        ``archive=False`` only its paused stream closed; its session is forgotten once idle."""
        task = self._connection.start_close(core, now=self._open_now(), archive=archive)
        return self._started(task)

    def reset(self, core: AgentCore) -> None:
        """Start a fresh chat on the agent's next turn; a paused stream is closed."""
        self._connection.reset(core, now=time.monotonic())
        self._pump()

    @property
    def attached_sessions(self) -> int:
        """Sessions this driver keeps between their turns: one per open agent."""
        return self._connection.stats.attached_sessions

    def _open_now(self) -> float:
        if self._closed:
            raise CoderAgentError("this client is closed")
        return time.monotonic()

    def _started(self, task: Task, invoke: Invoker | None = None) -> TaskHandle[Any]:
        run: TaskHandle[Any] = TaskHandle(self, task, invoke)
        self._pump()
        return run

    @contextlib.contextmanager
    def locked(self) -> Iterator[float]:
        """``now``, for calling a session or agent method. The loop's thread is the only one
        stepping machines, so there is nothing to hold (the blocking driver holds its lock
        here)."""
        yield time.monotonic()

    def calling(self) -> contextlib.AbstractContextManager[None]:
        """The scope of one public call: nothing to do on an event loop (the blocking driver
        defers Ctrl-C to its blocking points there)."""
        return contextlib.nullcontext()

    async def wait_background(self, timeout: float = BACKGROUND_TASK_BOUND) -> bool:
        """Wait until every background job finished (``True``) or ``timeout`` passed
        (``False``)."""
        runtime = self.runtime
        deadline = time.monotonic() + timeout
        while self.background_jobs:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            event = self._background_idle = runtime.event()
            await runtime.wait(event, left)
        return True

    async def aclose(self, *, background_timeout: float = BACKGROUND_TASK_BOUND) -> None:
        """Close the driver (idempotent): await the background jobs for at most
        ``background_timeout`` seconds (D22), cancel what is left, close every socket, cancel
        every task and close the HTTP client if it was created here. Called from a task that
        is already cancelled, the closing still happens (bounded)."""
        if self._closed:
            return
        self._closed = True
        self._connection.close()
        runtime = self.runtime
        try:
            with runtime.finishing(background_timeout + _TASKS_GRACE):
                await self.wait_background(background_timeout)
        finally:
            self._connection.close(now=time.monotonic())
            self._pump()
            self._timer.close()
            # Sockets closing gracefully finish their close (what was written goes out);
            # every other task is cancelled now, the rest after the grace period.
            for task in list(self._tasks):
                if not task.lingering:
                    task.cancel()
            with runtime.shield(3 * _TASKS_GRACE):
                if self._tasks:
                    done = self._tasks_done = runtime.event()
                    await runtime.wait(done, CLOSE_GRACE + _TASKS_GRACE)
                for task in list(self._tasks):
                    task.cancel()
                if self._owns_client:
                    await self.http_client.aclose()

    # -- what the runtime's sockets report (``SocketHost``) -----------------------------------

    @property
    def ssl(self) -> ssl.SSLContext:
        """The TLS context of the stream sockets."""
        return self._ssl

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> Spawned:
        """Run ``fn(*args)`` in a task of the client (cancelled when it closes)."""
        task = self.runtime.spawn(fn, *args, done=self._task_done)
        self._tasks.add(task)
        return task

    def adopt(self, task: Spawned) -> Callable[[Spawned], None]:
        """Hold ``task``, started by the runtime on its own, as a task of the client."""
        self._tasks.add(task)
        return self._task_done

    def socket_made(self, conn: Conn) -> None:
        self._connection.socket_made(conn, now=time.monotonic())
        self._pump()

    def socket_data(self, conn: Conn, data: bytes) -> None:
        self._connection.socket_data(conn, data, now=time.monotonic())
        self._pump()

    def socket_lost(self, conn: Conn) -> None:
        self._connection.socket_closed(conn, now=time.monotonic())
        self._pump()

    def socket_failed(self, conn: Conn, error: BaseException) -> None:
        self._connection.socket_closed(conn, error, now=time.monotonic())
        self._pump()

    # -- performing the connection's commands --------------------------------------------------

    def _pump(self) -> None:
        """Perform every command the connection produced (and those performing them
        produced), re-arm the timer, wake the waiters."""
        connection = self._connection
        while commands := connection.commands():
            for command in commands:
                self._perform(command)
        self._timer.arm(connection.next_deadline())
        idle = self._background_idle
        if idle is not None and not connection.stats.background_jobs:
            idle.set()

    def _perform(self, command: ConnectionCommand) -> None:
        if isinstance(command, TaskMoved):
            command.task.io._wake()
        elif isinstance(command, WriteSocket):
            self.runtime.write_socket(command.conn, command.data)
        elif isinstance(command, StartHttp):
            command.call.io = self.spawn(self._http, command.call)
        elif isinstance(command, OpenSocket):
            self.runtime.open_socket(self, command.conn)
        elif isinstance(command, CloseSocket):
            self.runtime.close_socket(command.conn)
        elif isinstance(command, CancelHttp):
            command.call.io.cancel()
        elif isinstance(command, InvokeTools):
            self._start_tools(command.run)
        elif isinstance(command, CancelTools):
            command.run.io.cancel()
        elif isinstance(command, ApplyStore):
            command.call.io = self.spawn(self._apply_store, command.call)
        else:  # pragma: no cover - every command is handled above
            raise CoderAgentError(f"unknown command {command!r}")

    def _on_timer(self) -> None:
        self._connection.tick(now=time.monotonic())
        self._pump()

    def _cancel(self, task: Task, reason: BaseException | None) -> None:
        task.cancel(reason, now=time.monotonic())
        self._pump()

    def _task_done(self, task: Spawned) -> None:
        self._tasks.discard(task)
        if not self._tasks and self._tasks_done is not None:
            self._tasks_done.set()

    # -- REST --------------------------------------------------------------------------------

    def _new_client(self) -> httpx.AsyncClient:
        import httpx

        client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT),
            verify=self._ssl,
            limits=httpx.Limits(max_connections=HTTP_CONCURRENCY, max_keepalive_connections=20),
        )
        # Wire 1.1: the reference sends no Accept header.
        client.headers.pop("Accept", None)
        return client

    async def _client_of_this_loop(self) -> httpx.AsyncClient:
        """The client for a request on the running loop. An agent can outlive the loop it
        started on (one ``asyncio.run`` per call, as a framework's ``run_sync`` does): the
        connections its own pool kept belong to that loop and cannot carry a request on this
        one, so the pool is replaced (the old one closed as far as its dead loop allows)."""
        loop = self.runtime.current_loop()
        if self._client_loop is None or not self._owns_client:
            self._client_loop = loop
        elif self._client_loop is not loop:
            stale, self.http_client = self.http_client, self._new_client()
            self._client_loop = loop
            async with self.runtime.cut_after(CLOSE_GRACE):
                with contextlib.suppress(Exception):
                    await stale.aclose()
        return self.http_client

    async def _http(self, call: HttpExchange) -> None:
        gate = self._http_gate
        if gate is None:
            await self._exchange(call)
        else:
            async with gate:
                await self._exchange(call)

    async def _exchange(self, call: HttpExchange) -> None:
        """Send ``call`` and read its answer, all of it within the call's bound (D29) and
        at most ``max_response_bytes`` of body (D30)."""
        connection = self._connection
        runtime = self.runtime
        bound = self._bound(call)
        most = self.max_response_bytes
        failure: BaseException | None = None
        async with runtime.cut_after(bound) as cut:
            try:
                client = await self._client_of_this_loop()
                outgoing = client.build_request(
                    call.method, call.url, headers=call.headers, content=call.body
                )
                response = await client.send(outgoing, stream=True)
                try:
                    call.status_received(response.status_code, now=time.monotonic())
                    body = await _read_body(response, most)
                finally:
                    # A body left unread (too large, too slow) closes the connection.
                    with runtime.shield(CLOSE_GRACE):
                        await response.aclose()
            except _TooLarge:
                failure = CoderProtocolError(
                    f"the response to {call.method} {call.request.path} is larger than "
                    f"the {most}-byte limit (max_response_bytes)"
                )
            except Exception as exc:
                failure = exc
        if cut.expired:
            import httpx

            failure = httpx.ReadTimeout(
                f"the request did not finish within its deadline of {bound:g} s (http_timeout)"
            )
        if failure is not None:
            connection.http_finished(call, error=failure, now=time.monotonic())
        else:
            connection.http_finished(
                call,
                status=response.status_code,
                headers=response.headers.multi_items(),
                body=body,
                reason=response.reason_phrase,
                now=time.monotonic(),
            )
        # A cancelled request (CancelHttp) ends above with the runtime's cancellation: the
        # connection already reported it.
        self._pump()

    def _bound(self, call: HttpExchange) -> float | None:
        """The total deadline of ``call``, in seconds from now: ``http_timeout`` (D29),
        unless its machine abandons it at a deadline of its own (a turn's
        ``request_timeout``, C.3), which the connection's timer enforces (``CancelHttp``)."""
        return None if call.timed else self.http_timeout

    # -- tools -------------------------------------------------------------------------------

    def _start_tools(self, run: ToolBatch) -> None:
        invoke = run.task.io._invoke
        assert invoke is not None  # only turns and durable jobs pause for tools
        run.io = self.spawn(self._run_tools, run, invoke)

    async def _run_tools(self, run: ToolBatch, invoke: Invoker) -> None:
        """Run one tool pause's invocations; an invoker that raises is logged and every call
        gets an error result (D5). Cancelled (``CancelTools``), it ends with the runtime's
        cancellation and reports nothing."""
        connection = self._connection
        try:
            outcomes = await invoke(run.invocations)
        except Exception as exc:
            self.runtime.logger.warning(
                "the tool runner raised; the calls get error results",
                exc_info=(type(exc), exc, exc.__traceback__),
            )
            for invocation in run.pending:
                connection.tool_finished(run, invocation, error=exc, now=time.monotonic())
        else:
            for invocation, outcome in zip(run.invocations, outcomes, strict=True):
                connection.tool_finished(run, invocation, outcome=outcome, now=time.monotonic())
        self._pump()

    async def _apply_store(self, call: StoreRequest) -> None:
        """Perform a durable store call and report it: whatever the store raised (one that
        ends the process too, which the durable program lets through once its lease is
        released), except the runtime's cancellation of this task."""
        try:
            value = await call.runner(call.op)
        except self.runtime.cancelled:
            raise
        except BaseException as exc:
            self._connection.store_finished(call, error=exc, now=time.monotonic())
        else:
            self._connection.store_finished(call, value=value, now=time.monotonic())
        self._pump()
