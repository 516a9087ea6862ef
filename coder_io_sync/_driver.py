"""The blocking driver: runs core machines by performing their I/O in the calling thread.

One ``Driver`` belongs to one client (``CoderChatClient``, or an agent through its client). The
bookkeeping (routing, registries, ``http:*`` events, token scrubbing, tool pauses,
transcripts) is ``coder_proto.Connection``; this module performs the commands it gives, with
no event loop anywhere (docs/architecture.md "The adapters"; D12, D21-D24):

* ``StartHttp`` -> a blocking ``httpx.Client`` request (no read timeout on a client created
  here, 30 s to connect; a user-supplied client keeps its own timeouts, D23), performed by
  the thread that waits for the machine that sent it. A request in flight is cut at the
  caller's deadline and at the moment its machine would abandon it (the deadline the
  machine waits for it with, such as a cleanup's ``settle_deadline``, or a turn's
  ``request_timeout``, C.3), the deadlines that abandon it anyway, as an event loop's timer
  would;
* ``OpenSocket`` -> ``socket.create_connection`` within ``CONNECT_TIMEOUT``, then ``ssl`` with
  the context built from ``verify`` (the same choices httpx offers; verification on by
  default); the socket is non-blocking from then on;
* reading: the thread that leads waits on every open socket with ``selectors``, with a
  timeout equal to the next deadline of any machine (or the caller's deadline), and feeds
  what it reads; bytes that arrive while a REST request is in flight wait in the kernel
  buffer. Nothing reads a socket while no thread is waiting on the driver (between calls a
  paused stream is left unread, which the session allows, H.6);
* ``WriteSocket`` / ``CloseSocket`` -> non-blocking writes (the rest is flushed when the
  socket is writable) and closes;
* ``InvokeTools`` -> the run's invoker (``Invoker``) on the pause's invocations in a daemon
  thread of its own, so the stream keeps being read (and a caller's deadline keeps running)
  while a tool works; each outcome answered with ``tool_finished``;
* ``ApplyStore`` -> the durable store call, performed with the lock released by the thread
  that leads (the durable call's own, or the agent turn's it waits on);
* background jobs (interrupts and withdrawals, D22) -> the driver's worker thread, started
  when one appears and ending when none is left; each request is bounded by the job's own
  deadline (10 s), and ``close`` waits for the jobs at most ``background_timeout`` seconds
  and joins the worker.

Threads: every method may be called from any thread. One lock guards the machines; it is
released around every blocking operation. Each thread performs the requests and connects of
the calls it waits for; one waiting thread at a time (the *leader*) reads the sockets and
ticks the deadlines for everyone, the others sleep on a condition until their machine moves
or the leader leaves. Transport-event callbacks run with the lock held: they must not call
back into the same client.

Cancellation (D22): a caller's deadline (``Deadline``, the ``timeout=`` of ``generate`` and
``stream``) and an exception raised while waiting (``KeyboardInterrupt``) cancel the machine
(``machine.cancel(now, reason)``), perform its cleanup at once (sockets closed, the background
interrupt handed to the worker) and raise: the builtin ``TimeoutError`` for a deadline, the
exception itself otherwise, without waiting for the background work. While the main thread
waits, Ctrl-C is deferred to the next blocking point (never inside a machine's step) when
the default SIGINT handler is installed; a blocking wait, request or connect is interrupted
at once.

Interface for the adapter's public classes:

* ``Driver(base_url=..., token=..., http_client=None, verify=True, sink=None, recorder=None)``;
* ``driver.turn(core, messages, *, mode, edit_message_id=None, invoke) -> TaskHandle`` (an agent's
  turn: ``"generate"`` with its whole ladder, ``"stream"`` or ``"segment"``),
  ``driver.call(call, *, data=None)`` (a plain operation), ``driver.watch(backoff=...)``,
  ``driver.durable(job, *, invoke)`` (a ``DurableWork`` or a ``ProgramJob``),
  ``driver.close_agent(core, *,
  archive)`` and ``driver.reset(core)``, each over the ``Connection``'s start of the same
  work; ``with driver.locked() as now:`` to read a session's state (which the running
  machines share) under the driver's lock;
* ``run.machine``, ``run.done``, ``run.result(deadline)``, ``run.parts(deadline)`` (an
  iterator draining ``machine.parts`` live), ``run.wait_until(predicate, deadline)``,
  ``run.cancel(reason)``;
* ``driver.closed``, ``driver.open_connections``, ``driver.background_jobs``,
  ``driver.recorder``, ``driver.worker_alive``;
* ``driver.wait_background(timeout)`` and ``driver.close(background_timeout=...)``;
* ``transport_sink(on_transport_event)``, ``ssl_context(verify)``, ``Deadline``.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import math
import selectors
import signal
import socket
import ssl
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
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
    MAX_UNSENT,
    ConnectionCommand,
    Operation,
    PrefixSelector,
    ToolOutcome,
    TransportEventSink,
)

from ._call_deadline import CALL_DEADLINE
from ._runtime import BlockingRuntime

if TYPE_CHECKING:
    import httpx

    from coder_proto.adapter import ProgramJob
    from coder_proto.durable import DurableWork
    from coder_proto.transcript import Recorder

__all__ = [
    "Deadline",
    "Driver",
    "Invoker",
    "TaskHandle",
    "VerifyTypes",
    "ssl_context",
    "transport_sink",
]

logger = logging.getLogger("coder_io_sync")

T = TypeVar("T")

#: Runs the invocations of one tool pause (the core planned them, D5), in a thread of its own,
#: and returns one outcome per invocation, in order (``invocation.succeeded`` / ``failed``).
Invoker: TypeAlias = Callable[[Sequence[ToolInvocation]], Sequence[ToolOutcome]]

_READ_CHUNK = 65_536
#: Chunks read per readiness (each handed to the machines as it arrives) before their commands
#: are performed and the sockets selected again: a fast sender cannot starve the others.
_READ_BATCH = 16
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def _now() -> float:
    return time.monotonic()


# -- configuration -------------------------------------------------------------------------------


def transport_sink(
    callback: Callable[[Any], object] | None, runtime: object = None
) -> TransportEventSink:
    """The sink for a user's ``on_transport_event`` (wire 11, D24): wall-clock timestamps from
    ``time.time``; what the callback raises is swallowed. The blocking adapter calls plain
    functions: a coroutine function is refused at once (``CoderAgentError``). ``runtime`` is
    the async driver's argument (where an awaitable result runs), unused here."""
    if callback is None:
        return event_sink()
    if inspect.iscoroutinefunction(callback):
        raise CoderAgentError(
            "on_transport_event must be a plain function on the blocking adapter "
            "(coder_io_sync); got a coroutine function"
        )
    if not callable(callback):
        raise CoderAgentError(f"on_transport_event must be callable, got {callback!r}")
    return event_sink(callback)


class Deadline:
    """A caller's deadline: ``seconds`` from its creation (the ``timeout=`` of ``generate``
    and ``stream``). When it passes, the call is cancelled like any cancellation (D22) and
    the builtin ``TimeoutError`` raised."""

    __slots__ = ("at", "seconds")

    def __init__(self, seconds: float, *, now: float | None = None) -> None:
        self.seconds = seconds
        self.at = (_now() if now is None else now) + seconds

    def __repr__(self) -> str:
        return f"<Deadline {self.seconds:g} s>"

    @staticmethod
    def check(seconds: object) -> float | None:
        """``seconds`` as a timeout: ``None`` (no deadline, as is infinity) or a number of
        seconds, zero or more. Anything else is ``CoderAgentError``."""
        if seconds is None:
            return None
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise CoderAgentError(f"timeout must be a number of seconds, got {seconds!r}")
        value = float(seconds)
        if math.isnan(value) or value < 0:
            raise CoderAgentError(f"timeout must be zero or more seconds, got {seconds!r}")
        return None if math.isinf(value) else value

    @classmethod
    def after(cls, seconds: object) -> Deadline | None:
        """The deadline ``seconds`` from now (``check``), or ``None`` for no deadline."""
        value = cls.check(seconds)
        return None if value is None else cls(value)

    def remaining(self) -> float:
        return max(0.0, self.at - _now())

    def error(self) -> TimeoutError:
        return TimeoutError(f"the call did not finish within its timeout of {self.seconds:g} s")


class _Expired(Exception):
    """The caller's deadline passed while waiting."""


class _CallerDeadline(threading.local):
    """The caller's deadline of the public call the current thread is in
    (``Driver.deadline``); the runs it starts are bound by it."""

    deadline: Deadline | None = None


_CALLER = _CallerDeadline()


# -- Ctrl-C ----------------------------------------------------------------------------------------


class _SigintGuard:
    """Defers ``KeyboardInterrupt`` to the main thread's blocking points while it drives.

    With the default SIGINT handler installed, a ``KeyboardInterrupt`` could land in the
    middle of a machine's step and leave it half-updated (no interrupt of the server's run
    would follow). While the main thread is inside ``active()``, Ctrl-C raises at once only
    when the thread is blocked (``blocking()``: a socket wait, a request, a connect, a
    condition wait); otherwise it is remembered and raised at the next blocking point, or on
    leaving ``active()``. A handler the program installed itself is left alone.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._installed = False
        self._previous: Any = None
        self._blocking = False
        self._pending = False

    @staticmethod
    def _main() -> bool:
        return threading.current_thread() is threading.main_thread()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        if not self._main():
            yield
            return
        if self._depth == 0:
            self._pending = False
            try:
                if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                    self._previous = signal.signal(signal.SIGINT, self._handler)
                    self._installed = True
            except ValueError:  # pragma: no cover - not the main interpreter
                pass
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and self._installed:
                self._installed = False
                signal.signal(signal.SIGINT, self._previous)
                if self._pending:
                    self._pending = False
                    raise KeyboardInterrupt

    @contextlib.contextmanager
    def blocking(self) -> Iterator[None]:
        if not self._main() or not self._installed:
            yield
            return
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt
        self._blocking = True
        try:
            yield
        finally:
            self._blocking = False

    def _handler(self, signum: int, frame: types.FrameType | None) -> None:
        if self._blocking:
            # Once only: a second Ctrl-C while the lock is re-acquired must wait its turn.
            self._blocking = False
            raise KeyboardInterrupt
        self._pending = True


_SIGINT = _SigintGuard()


def sigint_deferred() -> contextlib.AbstractContextManager[None]:
    """Defer Ctrl-C to the driver's blocking points for the duration of a public call (the
    agent wraps ``generate`` in it, so a ``KeyboardInterrupt`` never lands between a turn's
    creation and its driving)."""
    return _SIGINT.active()


def blocking_sleep(seconds: float) -> None:
    """``time.sleep`` that a deferred Ctrl-C interrupts at once (a blocking point)."""
    if seconds > 0:
        with _SIGINT.blocking():
            time.sleep(seconds)


#: The one blocking runtime (``Driver.runtime``).
BLOCKING = BlockingRuntime(blocking_sleep)


# -- sockets ---------------------------------------------------------------------------------------


def _selector() -> selectors.BaseSelector:
    # A fresh selector per wait: poll(2) needs no kernel object, so building one is cheap, and
    # a socket another thread closes meanwhile is simply not in the next one.
    if hasattr(selectors, "PollSelector"):
        return selectors.PollSelector()
    return selectors.SelectSelector()  # pragma: no cover - Windows


def _open_socket(
    conn: Conn, context: ssl.SSLContext, timeout: float
) -> socket.socket | ssl.SSLSocket:
    """Connect (and handshake TLS) within ``timeout`` seconds per step; non-blocking after."""
    sock: socket.socket = socket.create_connection((conn.host, conn.port), timeout=timeout)
    try:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if conn.tls:
            sock = context.wrap_socket(sock, server_hostname=conn.server_hostname)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _discard(data: bytes) -> None:
    """What a closing socket's last unread bytes are handed to."""


class _Socket:
    """The I/O side of one open ``Conn``: a non-blocking socket and what is left to write."""

    __slots__ = ("out", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        self.out += data
        self.flush()

    def flush(self) -> None:
        """Write what the socket takes now (raises ``OSError`` when it failed)."""
        out = self.out
        while out:
            try:
                sent = self.sock.send(out)
            except _WOULD_BLOCK:
                return
            del out[:sent]

    def read(self, feed: Callable[[bytes], object]) -> tuple[bool, OSError | None]:
        """Read until the socket would block, handing each chunk to ``feed`` as it arrives
        (one chunk is held at a time, not a batch of them): whether the peer closed, and the
        error that ended the reading, if any. TLS is read to the end too: decrypted bytes
        can wait inside the SSL object where ``select`` cannot see them."""
        sock = self.sock
        count = 0
        while True:
            try:
                data = sock.recv(_READ_CHUNK)
            except _WOULD_BLOCK:
                return False, None
            except OSError as exc:
                return False, exc
            if not data:
                return True, None
            feed(data)
            del data
            count += 1
            if count >= _READ_BATCH and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                # What is left is in the kernel, where the next select sees it.
                return False, None

    def close(self) -> None:
        """Close after a last attempt to write what is queued (a close frame is a few bytes).
        What the peer sent and nobody read is drained first: a socket closed with unread
        bytes is reset, and the reset can discard the close frame just written."""
        with contextlib.suppress(OSError):
            self.flush()
        with contextlib.suppress(OSError):
            self.read(_discard)
        with contextlib.suppress(OSError):
            self.sock.close()


# -- total deadlines for REST calls (D29) ---------------------------------------------------------


class _TooLarge(Exception):
    """A response body past ``max_response_bytes``."""


def _bounded(timeout: httpx.Timeout, seconds: float) -> httpx.Timeout:
    import httpx

    def bound(value: float | None) -> float:
        return seconds if value is None else min(value, seconds)

    return httpx.Timeout(
        connect=bound(timeout.connect),
        read=bound(timeout.read),
        write=bound(timeout.write),
        pool=bound(timeout.pool),
    )


# -- runs ------------------------------------------------------------------------------------------


class TaskHandle(Generic[T]):
    """A machine started with ``Driver.start``: wait for its result, or follow its parts.

    The thread that waits on a run performs its requests and connects; use a run from one
    thread at a time."""

    def __init__(self, driver: Driver, task: Task, invoke: Invoker | None) -> None:
        self._driver = driver
        self._task = task
        #: The caller's deadline the run was started under (``Driver.deadline``), if any: the
        #: waits that name none are bound by it.
        self._deadline = _CALLER.deadline
        #: Runs the tool pauses' invocations (a turn's or a durable job's).
        self._invoke = invoke
        #: Requests and connects of this run, performed by the thread that waits on it.
        self._owned: collections.deque[ConnectionCommand] = collections.deque()

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
        for a consumer teardown. Its cleanup is performed at once; background work it starts
        goes to the worker thread. Does nothing once the machine is done."""
        self._driver._cancel(self, reason)

    def result(self, deadline: Deadline | None = None) -> T:
        """Drive until the machine finished and return its result (or raise its error). At
        ``deadline`` the machine is cancelled and ``TimeoutError`` raised."""
        self._driver._wait(self, lambda: self.done, deadline or self._deadline)
        value: T = self._task.result()
        return value

    def wait_changed(self) -> None:
        """Drive until the run has something new for its consumer: a part in its ``parts``
        deque (a stream-mode ``Turn``), an event in its ``events`` (a watch), or its end. At
        the run's deadline the machine is cancelled and ``TimeoutError`` raised."""
        machine = self.machine
        if hasattr(machine, "parts"):
            # Read anew each time: an idle turn lets its empty deque go.
            self._driver._wait(self, lambda: bool(machine.parts) or self.done, self._deadline)
        else:
            queue = machine.events
            self._driver._wait(self, lambda: bool(queue) or self.done, self._deadline)

    def wait_until(self, predicate: Callable[[], bool], deadline: Deadline | None = None) -> None:
        """Drive until ``predicate()`` (called with the driver's lock held) is true or the
        machine is done. At ``deadline`` the machine is cancelled and ``TimeoutError``
        raised."""
        self._driver._wait(self, lambda: predicate() or self.done, deadline or self._deadline)

    def parts(self, deadline: Deadline | None = None) -> Iterator[Any]:
        """The machine's ``parts`` deque (a stream-mode ``Turn``), drained live in order until
        the machine is done; the consumer's code runs between parts with nothing held. The
        final result or error is ``run.result()``."""
        machine = self.machine
        take = self._driver._take
        deadline = deadline or self._deadline
        while True:
            # One part at a time: a part this iterator has not yielded stays in the deque for
            # whichever lens reads next. A part that is there is taken without the lock (a
            # deque's ``popleft`` is atomic); the lock is for the question that needs it,
            # whether an empty deque means the machine is done. The deque is read anew each
            # time: an idle turn lets an empty one go (and puts nothing in it afterwards).
            try:
                part = machine.parts.popleft()
            except IndexError:
                part, finished = take(machine, self)
                if part is None:
                    if finished:
                        return
                    self._driver._wait(self, lambda: bool(machine.parts) or self.done, deadline)
                    continue
            yield part


def _run_of(task: Any) -> TaskHandle[Any] | None:
    """The run of the connection's task ``task`` (``None`` for none: background work)."""
    run = task.io if isinstance(task, Task) else None
    return run if isinstance(run, TaskHandle) else None


# -- the driver ------------------------------------------------------------------------------------


class Driver:
    """Performs core actions with blocking I/O for one client (see the module docstring).

    ``http_client``: a user-supplied ``httpx.Client`` is used as is (its timeouts, transport
    and thread-safety, D23) and never closed here; otherwise one is created with no read
    timeout and a 30 s connect timeout and closed by ``close``. ``verify`` configures TLS for
    the stream sockets (and for the created HTTP client). ``sink`` receives the ``http:*``
    events.
    """

    #: What the generated layer calls its runtime (``coder_io_sync._runtime``).
    runtime: ClassVar[BlockingRuntime] = BLOCKING

    def __init__(
        self,
        *,
        base_url: str,
        token: str | None,
        http_client: httpx.Client | None = None,
        verify: VerifyTypes = True,
        sink: TransportEventSink | None = None,
        recorder: Recorder | None = None,
        selector: PrefixSelector | None = None,
    ) -> None:
        # Imported here, by the first driver, rather than with the adapter: a program that
        # imports the library pays for httpx when it makes a client.
        import httpx

        if http_client is not None and not isinstance(http_client, httpx.Client):
            raise CoderAgentError(
                "http_client must be an httpx.Client on the blocking adapter "
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
        #: D29: the bound of a REST call no caller or core deadline bounds (``None``: none).
        self.http_timeout: float | None = HTTP_TIMEOUT
        #: D30: the largest response body read; a larger one fails the call.
        self.max_response_bytes: int = MAX_RESPONSE_BYTES
        if http_client is None:
            from ._transport import bounded_transport

            http_client = httpx.Client(
                timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT),
                verify=self._ssl,
                transport=bounded_transport(self._ssl),
            )
            # Wire 1.1: the reference sends no Accept header.
            http_client.headers.pop("Accept", None)
            self._owns_client = True
        else:
            self._owns_client = False
        self.http_client = http_client
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._leader: int | None = None
        self._sockets: dict[Conn, _Socket] = {}
        self._runs: dict[Task, TaskHandle[Any]] = {}
        #: Requests and connects no waiting run owns (a session's redial between turns).
        self._general: collections.deque[ConnectionCommand] = collections.deque()
        #: Requests of background jobs, for the worker thread.
        self._background: collections.deque[HttpExchange] = collections.deque()
        self._worker: threading.Thread | None = None
        self._tool_threads: set[threading.Thread] = set()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"<Driver {self.base_url} connections={self.open_connections} "
            f"background={self.background_jobs}>"
        )

    # -- public ------------------------------------------------------------------------------

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

    @property
    def worker_alive(self) -> bool:
        """Whether the worker thread that drives background jobs is running."""
        worker = self._worker
        return worker is not None and worker.is_alive()

    @property
    def recorder(self) -> Recorder | None:
        """Observes what crosses the wire (``coder_proto.transcript.Recorder``), or ``None``."""
        return self._connection.recorder

    @recorder.setter
    def recorder(self, value: Recorder | None) -> None:
        self._connection.recorder = value

    @contextlib.contextmanager
    def locked(self) -> Iterator[float]:
        """Hold the driver's lock and get ``now``: create machines from a session (or call a
        session method) while no other thread steps the machines that share its state."""
        with self._lock:
            yield _now()

    @contextlib.contextmanager
    def deadline(self, seconds: object) -> Iterator[Deadline | None]:
        """A caller's deadline ``seconds`` from now (``Deadline.after``: ``None`` for none;
        anything but a number of seconds is ``CoderAgentError``) for the block: the runs this
        thread starts inside it are cut there (D22), the builtin ``TimeoutError`` raised. The
        ``timeout=`` of the blocking adapter's public calls."""
        deadline = Deadline.after(seconds)
        previous = _CALLER.deadline
        _CALLER.deadline = deadline
        try:
            yield deadline
        finally:
            _CALLER.deadline = previous

    def calling(self) -> contextlib.AbstractContextManager[None]:
        """The scope of one public call: Ctrl-C is deferred to the driver's blocking points
        (``sigint_deferred``), so a ``KeyboardInterrupt`` never lands between a machine's
        creation and its driving."""
        return _SIGINT.active()

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
        tool pauses (in a thread of its own). Nothing is performed until a thread waits on
        the run."""
        with self._lock:
            task = self._connection.start_turn(
                core, messages, now=self._open_now(), mode=mode, edit_message_id=edit_message_id
            )
            return self._started(task, invoke)

    def call(
        self, call: Operation[T], *, data: Any = None, invoke: Invoker | None = None
    ) -> TaskHandle[T]:
        """Start a plain operation (``Connection.start_call``); ``data`` is what its upload
        read; ``invoke`` runs the invocations ``call.tools`` plans, if it pauses for tools.
        Its result is the operation's value."""
        with self._lock:
            task = self._connection.start_call(call, now=self._open_now(), data=data)
            return self._started(task, invoke)

    def watch(self, *, backoff: WatchBackoff | None = None) -> TaskHandle[None]:
        """Subscribe to the chat watch (``Connection.start_watch``): ``run.machine`` takes
        the events; cancelling the run stops it."""
        with self._lock:
            task = self._connection.start_watch(now=self._open_now(), backoff=backoff)
            return self._started(task)

    def durable(self, job: DurableWork | ProgramJob, *, invoke: Invoker) -> TaskHandle[Any]:
        """Start a durable job (``Connection.start_durable``): its store calls are performed
        with ``job.store``, the invocations of its tool pauses with ``invoke``."""
        with self._lock:
            task = self._connection.start_durable(job, now=self._open_now())
            return self._started(task, invoke)

    def close_agent(self, core: AgentCore, *, archive: bool) -> TaskHandle[Any]:
        """Close the agent ``core`` (``Connection.start_close``): its dispose, or with
        ``archive=False`` only its paused stream closed; its session is forgotten once idle."""
        with self._lock:
            task = self._connection.start_close(core, now=self._open_now(), archive=archive)
            run = self._started(task)
            self._wake_leader()
            return run

    def reset(self, core: AgentCore) -> None:
        """Start a fresh chat on the agent's next turn; a paused stream is closed."""
        with self._lock:
            self._connection.reset(core, now=_now())
            self._absorb()
            self._wake_leader()

    @property
    def attached_sessions(self) -> int:
        """Sessions this driver keeps between their turns: one per open agent."""
        return self._connection.stats.attached_sessions

    def _open_now(self) -> float:
        if self._closed:
            raise CoderAgentError("this client is closed")
        return _now()

    def _started(self, task: Task, invoke: Invoker | None = None) -> TaskHandle[Any]:
        """Lock held."""
        run: TaskHandle[Any] = TaskHandle(self, task, invoke)
        task.io = run
        self._runs[task] = run
        self._absorb()
        return run

    def wait_background(self, timeout: float = BACKGROUND_TASK_BOUND) -> bool:
        """Wait until every background job finished (``True``) or ``timeout`` passed
        (``False``)."""
        end = _now() + timeout
        with self._lock:
            while self._connection.stats.background_jobs:
                self._ensure_worker()
                left = end - _now()
                if left <= 0:
                    return False
                with _SIGINT.blocking():
                    self._cond.wait(left)
            return True

    def close(self, *, background_timeout: float = BACKGROUND_TASK_BOUND) -> None:
        """Close the driver (idempotent): wait for the background jobs at most
        ``background_timeout`` seconds (D22), cancel what is left, close every socket, join
        the worker thread and close the HTTP client if it was created here."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._connection.close()
        end = _now() + background_timeout
        try:
            self.wait_background(background_timeout)
        finally:
            with self._lock:
                self._connection.close(now=_now())
                self._absorb()
                for sock in self._sockets.values():
                    sock.close()
                self._sockets.clear()
                self._general.clear()
                self._background.clear()
                self._runs.clear()
                self._cond.notify_all()
                worker = self._worker
            if worker is not None and worker is not threading.current_thread():
                worker.join(max(0.0, end - _now()))
            self._wake_r.close()
            self._wake_w.close()
            if self._owns_client:
                self.http_client.close()

    # -- waiting -----------------------------------------------------------------------------

    def _take(self, machine: Any, run: TaskHandle[Any]) -> tuple[Any, bool]:
        """The next part of ``machine`` (``None`` when there is none yet) and whether the run
        is done."""
        with self._lock:
            parts = machine.parts
            if parts:
                return parts.popleft(), False
            return None, run.done

    def _wait(
        self, run: TaskHandle[Any], stop: Callable[[], bool], deadline: Deadline | None
    ) -> None:
        """Drive until ``stop()`` holds (checked with the lock held). A deadline or an
        exception cancels ``run`` (D22) before it propagates."""
        with self._lock:
            try:
                with _SIGINT.active():
                    self._drive_until(run, stop, deadline)
            except _Expired:
                assert deadline is not None
                error = deadline.error()
                self._cancel_locked(run, error)
                raise error from None
            except BaseException as exc:
                self._cancel_locked(run, exc)
                raise
            finally:
                if run.done:
                    self._retire(run)

    def _drive_until(
        self, run: TaskHandle[Any], stop: Callable[[], bool], deadline: Deadline | None
    ) -> None:
        me = threading.get_ident()
        try:
            while True:
                if stop():
                    return
                if deadline is not None and _now() >= deadline.at:
                    raise _Expired
                if run._owned:
                    self._perform_owned(run._owned.popleft(), run, deadline)
                    continue
                if self._leader is None or self._leader == me:
                    self._leader = me
                    if self._general:
                        self._perform_owned(self._general.popleft(), None, None)
                        continue
                    self._lead(deadline)
                else:
                    with _SIGINT.blocking():
                        self._cond.wait(None if deadline is None else deadline.remaining())
        finally:
            if self._leader == me:
                self._leader = None
                self._cond.notify_all()

    def _lead(self, deadline: Deadline | None) -> None:
        """One round of the leader: tick due machines, or wait on every socket (and the wake
        socket) until the next deadline and feed what arrived."""
        now = _now()
        due = self._connection.next_deadline()
        if due is not None and due <= now:
            self._connection.tick(now=now)
            self._absorb()
            return
        if deadline is not None:
            due = deadline.at if due is None else min(due, deadline.at)
        timeout = None if due is None else max(0.0, due - now)
        selector = _selector()
        try:
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            for watched, io in self._sockets.items():
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if io.out else 0)
                selector.register(io.sock, events, watched)
            with self._unlocked():
                ready = selector.select(timeout)
        finally:
            selector.close()
        for key, mask in ready:
            conn = key.data
            if conn is None:
                self._drain_wake()
                continue
            sock = self._sockets.get(conn)
            if sock is None or conn.closed:
                continue  # closed meanwhile
            if mask & selectors.EVENT_WRITE:
                try:
                    sock.flush()
                except OSError as exc:
                    self._socket_failed(conn, exc)
                    continue
            if mask & selectors.EVENT_READ:
                self._read(conn, sock)

    def _read(self, conn: Conn, sock: _Socket) -> None:
        connection = self._connection

        def feed(chunk: bytes) -> None:
            connection.socket_data(conn, chunk, now=_now())

        eof, error = sock.read(feed)
        if error is not None:
            self._socket_failed(conn, error)
        elif eof:
            self._drop(conn)
            connection.socket_closed(conn, now=_now())
        self._absorb()

    @contextlib.contextmanager
    def _unlocked(self) -> Iterator[None]:
        """Release the lock around a blocking operation (Ctrl-C may interrupt it)."""
        self._lock.release()
        try:
            with _SIGINT.blocking():
                yield
        finally:
            self._lock.acquire()

    def _wake_leader(self) -> None:
        if self._leader is not None and self._leader != threading.get_ident():
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass

    # -- commands ----------------------------------------------------------------------------

    def _absorb(self) -> None:
        """Take the connection's commands: non-blocking ones are performed at once, requests
        and connects go to the thread that owns them (the run waiting for them, the worker
        for background jobs, else the leader). Lock held."""
        connection = self._connection
        while True:
            commands = connection.commands()
            if not commands:
                break
            for command in commands:
                self._route(command)
        if connection.stats.background_jobs:
            self._ensure_worker()

    def _route(self, command: ConnectionCommand) -> None:
        if isinstance(command, StartHttp):
            call = command.call
            if call.background:
                self._background.append(call)
                self._ensure_worker()
                self._cond.notify_all()
                return
            self._hand_over(command, _run_of(call.task))
        elif isinstance(command, OpenSocket):
            self._hand_over(command, _run_of(command.conn.task))
        elif isinstance(command, ApplyStore):
            # Whichever thread leads performs it: a durable call's lease renewals go on while
            # its thread waits on an agent turn of the same client.
            self._hand_over(command, None)
        elif isinstance(command, WriteSocket):
            self._write(command.conn, command.data)
        elif isinstance(command, CloseSocket):
            sock = self._sockets.pop(command.conn, None)
            if sock is not None:
                sock.close()
        elif isinstance(command, InvokeTools):
            self._start_tools(command.run)
        elif isinstance(command, TaskMoved):
            self._cond.notify_all()
        elif isinstance(command, CancelHttp | CancelTools):
            # A blocking request or a tool thread cannot be stopped from here; the connection
            # ignores what they report later.
            pass
        else:  # pragma: no cover - every command is handled above
            raise CoderAgentError(f"unknown command {command!r}")

    def _hand_over(self, command: ConnectionCommand, owner: Any) -> None:
        if (
            isinstance(owner, TaskHandle)
            and not owner.done
            and self._runs.get(owner._task) is owner
        ):
            owner._owned.append(command)
        else:
            self._general.append(command)
        self._cond.notify_all()
        self._wake_leader()

    def _perform_owned(
        self, command: ConnectionCommand, run: TaskHandle[Any] | None, deadline: Deadline | None
    ) -> None:
        if isinstance(command, StartHttp):
            call = command.call
            self._http(call, run, deadline, bound=call.deadline)
        elif isinstance(command, OpenSocket):
            self._connect(command.conn, deadline)
        elif isinstance(command, ApplyStore):
            self._apply_store(command.call)
        else:  # pragma: no cover - only requests, connects and store calls are handed over
            self._route(command)

    def _apply_store(self, call: StoreRequest) -> None:
        """Perform a durable store call with the lock released (Ctrl-C stays deferred: a
        store call is never cut halfway), then report it."""
        if call.finished:
            return
        error: Exception | None = None
        self._lock.release()
        try:
            value = call.runner(call.op)
        except Exception as exc:
            error = exc
        finally:
            self._lock.acquire()
        if error is not None:
            self._connection.store_finished(call, error=error, now=_now())
        else:
            self._connection.store_finished(call, value=value, now=_now())
        self._absorb()

    # -- REST --------------------------------------------------------------------------------

    def _http(
        self,
        call: HttpExchange,
        run: TaskHandle[Any] | None,
        deadline: Deadline | None,
        *,
        bound: float | None = None,
    ) -> None:
        """Send ``call`` for ``run`` with the lock released. ``deadline`` (the caller's) and
        ``bound`` (when the machine abandons the request) cut it short: the caller's deadline
        is then handled by its waiter; at ``bound`` the machine is ticked, and if it still
        wants the answer, the request failed."""
        if call.finished:
            return
        limit = bound
        if deadline is not None:
            limit = deadline.at if limit is None else min(limit, deadline.at)
        if limit is None and self.http_timeout is not None:
            limit = _now() + self.http_timeout  # D29: never unbounded
        client = self.http_client
        try:
            extra: dict[str, Any] = {}
            if limit is not None:
                extra["timeout"] = _bounded(client.timeout, max(0.001, limit - _now()))
            outgoing = client.build_request(
                call.method, call.url, headers=call.headers, content=call.body, **extra
            )
        except Exception as exc:
            self._connection.http_finished(call, error=exc, now=_now())
            self._absorb()
            return
        status = 0
        answered = 0.0
        most = self.max_response_bytes
        try:
            with self._unlocked():
                CALL_DEADLINE.at = limit
                try:
                    response = client.send(outgoing, stream=True)
                    try:
                        answered = _now()
                        status = response.status_code
                        body = self._read_body(response, limit, most)
                    finally:
                        # A body left unread (too large, too slow) closes the connection.
                        response.close()
                finally:
                    CALL_DEADLINE.at = None
        except _TooLarge:
            error = CoderProtocolError(
                f"the response to {call.method} {call.request.path} is larger than "
                f"the {most}-byte limit (max_response_bytes)"
            )
            self._connection.http_finished(call, error=error, now=_now())
            self._absorb()
            return
        except Exception as exc:
            import httpx

            now = _now()
            if limit is not None and now >= limit and isinstance(exc, httpx.TimeoutException):
                if deadline is not None and now >= deadline.at:
                    return  # the caller's deadline: its waiter cancels the machine
                self._connection.tick(now=now)
                self._absorb()
                if call.finished:
                    return  # the job abandoned the request at its deadline
            self._connection.http_finished(call, error=exc, now=now)
            self._absorb()
            return
        except BaseException:
            # Our own call is released when the run is cancelled; anyone else's must not wait
            # for an answer that will never be reported.
            if not call.finished and _run_of(call.task) is not run:
                self._connection.http_finished(
                    call, error="the request was interrupted", now=_now()
                )
                self._absorb()
            raise
        connection = self._connection
        call.status_received(status, now=answered)
        connection.http_finished(
            call,
            status=status,
            headers=response.headers.multi_items(),
            body=body,
            reason=response.reason_phrase,
            now=_now(),
        )
        self._absorb()

    @staticmethod
    def _read_body(response: httpx.Response, limit: float | None, most: int) -> bytes:
        """The body, read up to ``most`` bytes (``_TooLarge`` past it, D30) and by ``limit``
        (``httpx.ReadTimeout`` past it, D29, also for a client supplied without our
        transport: checked between chunks)."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > most:
                raise _TooLarge
            chunks.append(chunk)
            if limit is not None and _now() >= limit:
                import httpx

                raise httpx.ReadTimeout("the response body did not end within its deadline")
        return b"".join(chunks)

    # -- sockets -----------------------------------------------------------------------------

    def _connect(self, conn: Conn, deadline: Deadline | None) -> None:
        if conn.closed:
            return
        timeout = CONNECT_TIMEOUT
        if deadline is not None:
            timeout = max(0.001, min(timeout, deadline.remaining()))
        try:
            with self._unlocked():
                sock = _open_socket(conn, self._ssl, timeout)
        except (OSError, ValueError, UnicodeError) as exc:
            if deadline is not None and _now() >= deadline.at and isinstance(exc, TimeoutError):
                return  # the caller's deadline: its waiter cancels the machine
            self._connection.socket_closed(conn, exc, now=_now())
            self._absorb()
            return
        if conn.closed:
            with contextlib.suppress(OSError):
                sock.close()
            return
        self._sockets[conn] = _Socket(sock)
        self._connection.socket_made(conn, now=_now())
        self._absorb()
        self._wake_leader()

    def _write(self, conn: Conn, data: bytes) -> None:
        sock = self._sockets.get(conn)
        if sock is None:
            return
        waiting = len(sock.out)
        try:
            sock.write(data)
        except OSError as exc:
            self._socket_failed(conn, exc)
            return
        if waiting > MAX_UNSENT:
            # D30: more than the bound was still unsent before this write: the peer sends
            # (pings ...) but reads nothing, and the replies would pile up. One large write
            # to a slow reader is not that: it is flushed as the socket becomes writable.
            self._socket_failed(
                conn,
                OSError(f"more than {MAX_UNSENT} bytes wait to be sent: the peer reads nothing"),
            )
            return
        if sock.out:
            self._wake_leader()  # the leader waits for it to be writable

    def _drop(self, conn: Conn) -> None:
        sock = self._sockets.pop(conn, None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.sock.close()

    def _socket_failed(self, conn: Conn, error: BaseException) -> None:
        self._drop(conn)
        self._connection.socket_closed(conn, error, now=_now())
        self._absorb()

    # -- tools -------------------------------------------------------------------------------

    def _start_tools(self, run: ToolBatch) -> None:
        owner = _run_of(run.task)
        invoke = None if owner is None else owner._invoke
        assert invoke is not None  # only turns and durable jobs pause for tools
        thread = threading.Thread(
            target=self._tools_main, args=(run, invoke), name="coder-io-sync-tools", daemon=True
        )
        run.io = thread
        self._tool_threads.add(thread)
        thread.start()

    def _tools_main(self, run: ToolBatch, invoke: Invoker) -> None:
        error: BaseException | None = None
        outcomes: Sequence[ToolOutcome] = ()
        try:
            outcomes = invoke(run.invocations)
        except BaseException as exc:
            # Even a ``SystemExit`` in a tool ends only this thread: the turn still gets an
            # answer for every call (D5) instead of waiting forever.
            error = exc
        connection = self._connection
        with self._lock:
            self._tool_threads.discard(threading.current_thread())
            if error is not None:
                if not run.finished:
                    logger.warning(
                        "the tool runner raised; the calls get error results",
                        exc_info=(type(error), error, error.__traceback__),
                    )
                for invocation in run.pending:
                    connection.tool_finished(run, invocation, error=error, now=_now())
            else:
                for invocation, outcome in zip(run.invocations, outcomes, strict=True):
                    connection.tool_finished(run, invocation, outcome=outcome, now=_now())
            self._absorb()
            self._cond.notify_all()
            self._wake_leader()

    # -- cancellation ------------------------------------------------------------------------

    def _cancel(self, run: TaskHandle[Any], reason: BaseException | None) -> None:
        with self._lock:
            self._cancel_locked(run, reason)

    def try_cancel(self, run: TaskHandle[Any]) -> bool:
        """Cancel ``run`` (a consumer teardown) if the lock is free now; ``False`` when it is
        held (a finalizer running inside the driver must not wait for itself)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._cancel_locked(run, None)
        finally:
            self._lock.release()
        return True

    def _cancel_locked(self, run: TaskHandle[Any], reason: BaseException | None) -> None:
        if not run.done:
            run._task.cancel(reason, now=_now())
            self._absorb()
        self._retire(run)
        self._cond.notify_all()
        self._wake_leader()

    def _retire(self, run: TaskHandle[Any]) -> None:
        """A finished run's leftovers: its own requests are moot (the connection released them);
        a connect for the session (a redial) goes to whoever leads next."""
        if self._runs.get(run._task) is run:
            del self._runs[run._task]
        while run._owned:
            command = run._owned.popleft()
            live = (isinstance(command, OpenSocket) and not command.conn.closed) or (
                isinstance(command, StartHttp) and not command.call.finished
            )
            if live:
                self._general.append(command)

    # -- the worker (D22) --------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        if self._worker is None and not self._closed_for_good():
            worker = threading.Thread(
                target=self._worker_main, name="coder-io-sync-background", daemon=True
            )
            self._worker = worker
            worker.start()

    def _closed_for_good(self) -> bool:
        return self._closed and not self._connection.stats.background_jobs and not self._background

    def _worker_main(self) -> None:
        """Drive the background jobs: their requests (each bounded by the job's deadline)
        and their deadlines, until none is left."""
        with self._lock:
            try:
                while True:
                    if self._background:
                        call = self._background.popleft()
                        if not call.finished:
                            self._http(call, None, None, bound=call.deadline)
                        continue
                    now = _now()
                    due = self._connection.next_deadline(background=True)
                    if due is not None and due <= now:
                        self._connection.tick(now=now)
                        self._absorb()
                        continue
                    if not self._connection.stats.background_jobs:
                        return
                    self._cond.wait(None if due is None else due - now)
            except BaseException:  # pragma: no cover - a bug must not kill silently
                logger.exception("the background worker failed")
            finally:
                self._worker = None
                self._cond.notify_all()
