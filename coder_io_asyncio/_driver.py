"""The asyncio driver: runs any core machine to completion by performing its actions.

One ``Driver`` belongs to one client (``CoderChatClient``, or the agent through its client). It
owns the I/O the core asks for and nothing else (DESIGN "The adapters"; D12, D21-D24):

* ``SendRequest`` -> an ``httpx.AsyncClient`` request (adding ``Coder-Session-Token``), fed back
  as ``response_received`` or ``request_failed``; ``http:*`` transport events with per-client
  ids, the request's ``op`` and durations in seconds (wire 11, D24), except for the requests
  ``coder_proto.client.emits_transport_events`` excludes (wire 9);
* ``CancelRequest`` -> the request's task is cancelled;
* ``OpenConnection`` -> ``asyncio.open_connection`` (TLS with the context built from ``verify``,
  the same choices httpx offers); one task reads each socket and feeds ``connection_made``,
  ``data_received``, ``connection_lost`` or ``connection_failed``;
* ``SendData`` / ``CloseConnection`` -> write / close the socket;
* ``RunTools`` -> the caller's async tool runner, fed back as ``tool_results``;
* ``RunInBackground`` -> the job is driven beside the others and awaited (bounded) by
  ``aclose`` (D22);
* ``tick`` at every machine's ``next_deadline()``.

The driver is event-driven: every input (a response, bytes, a timer) is fed to its machine and
followed by ``_settle``, which performs every pending action of every machine and re-arms the
one timer, until nothing moves. Nothing here decides anything a machine should decide.

Routing (the reference driver ``tests/core_driver.py``): a machine started with ``session=``
shares the session's connections. Their inputs go to the session's running ``Turn`` while it
is not done, otherwise to the ``Session`` itself, which keeps reading a paused stream between
turns (H.6). Every other machine receives the inputs of the connections it opened.

Cancellation (D22): when the task awaiting a ``Run`` is cancelled, the driver calls
``machine.cancel(now, reason)``, performs the resulting actions (background interrupts are
started, sockets closed, requests cancelled) and re-raises the ``asyncio.CancelledError``
unwrapped, without waiting for the background work. A caller's ``asyncio.timeout`` therefore
surfaces as the builtin ``TimeoutError``.

Interface for the adapters' public classes (stable; changes are announced here):

* ``Driver(base_url=..., token=..., http_client=None, verify=True, sink=None)``;
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
* ``recorder`` (a ``coder_proto.transcript.Recorder`` or ``None``): told about every turn, REST
  exchange, chunk read from a session's stream socket, tool run, cancellation and session
  call, with the ``now`` fed to the machine (transcripts, ``docs/transcripts.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import itertools
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeAlias, TypeVar

import httpx

from coder_proto.actions import (
    Action,
    CancelRequest,
    CloseConnection,
    OpenConnection,
    RunInBackground,
    RunTools,
    SendData,
    SendRequest,
    ToolOutcome,
)
from coder_proto.cleanup import SessionArchive, SessionDispose, SessionInterrupt
from coder_proto.client import CONNECT_TIMEOUT, emits_transport_events
from coder_proto.constants import BACKGROUND_TASK_BOUND, SESSION_TOKEN_HEADER
from coder_proto.errors import CoderAgentError
from coder_proto.parts import ToolCall
from coder_proto.rest import HttpRequest, HttpResponse
from coder_proto.session import Session
from coder_proto.transcript import Recorder
from coder_proto.transport_events import (
    HttpErrorEvent,
    HttpRequestEvent,
    HttpResponseEvent,
    TransportEventSink,
)
from coder_proto.turn import Turn

__all__ = [
    "Driver",
    "Run",
    "Runnable",
    "ToolRunner",
    "VerifyTypes",
    "ssl_context",
    "transport_sink",
]

logger = logging.getLogger("coder_io_asyncio")

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: What ``verify`` accepts, as in httpx: on/off, a CA bundle (file or directory), a context.
VerifyTypes: TypeAlias = bool | str | os.PathLike[str] | ssl.SSLContext
#: Runs one ``RunTools`` batch and returns one outcome per call (D5; missing ones become error
#: results in the core).
ToolRunner: TypeAlias = Callable[[tuple[ToolCall, ...]], Awaitable[Sequence[ToolOutcome]]]

_READ_CHUNK = 65_536
#: Rounds of ``_settle`` before yielding to the event loop (a machine that keeps a past
#: deadline armed must not starve everything else).
_MAX_ROUNDS = 1_000


class Runnable(Protocol[T_co]):
    """A machine the driver can run: the ``Machine`` protocol of ``coder_proto.actions`` plus
    ``cancel`` and ``result`` (``CoreMachine`` and the watch machine satisfy it)."""

    @property
    def done(self) -> bool: ...

    def actions(self) -> list[Action]: ...

    def next_deadline(self) -> float | None: ...

    def tick(self, now: float) -> None: ...

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None: ...

    def request_failed(self, request_id: int, message: str, now: float) -> None: ...

    def cancel(self, now: float, reason: BaseException | None = None) -> None: ...

    def result(self) -> T_co: ...


def ssl_context(verify: VerifyTypes = True) -> ssl.SSLContext:
    """The TLS context for ``verify``, with httpx's meaning: ``True`` verifies against
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's bundle (the system store when
    certifi is missing); ``False`` disables verification; a path is a CA bundle file or
    directory; an ``ssl.SSLContext`` is used as is. Anything else, or an unreadable bundle, is
    a local configuration error: ``CoderAgentError`` (D12)."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is True:
        cafile = os.environ.get("SSL_CERT_FILE")
        capath = os.environ.get("SSL_CERT_DIR")
        if cafile:
            return _load_bundle(cafile, None)
        if capath:
            return _load_bundle(None, capath)
        try:
            import certifi
        except ImportError:  # pragma: no cover - httpx depends on certifi
            return ssl.create_default_context()
        return _load_bundle(certifi.where(), None)
    if verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str | os.PathLike) and not isinstance(verify, bool):
        path = os.fspath(verify)
        if os.path.isdir(path):
            return _load_bundle(None, path)
        return _load_bundle(path, None)
    raise CoderAgentError(
        f"verify must be True, False, a CA bundle path or an ssl.SSLContext, got {verify!r}"
    )


def _load_bundle(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise CoderAgentError(
            f"cannot load the CA bundle {cafile or capath!r} for TLS verification: {exc}"
        ) from exc


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


def _describe(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


class _Scope:
    """Where the inputs of a group of connections go (the routing rule)."""

    __slots__ = ("machine", "session")

    def __init__(self, *, session: Session | None = None, machine: Any = None) -> None:
        self.session = session
        self.machine = machine

    def target(self) -> Any:
        session = self.session
        if session is None:
            return self.machine
        turn = session.in_flight
        if turn is not None and not turn.done:
            return turn
        return session


class _Conn:
    """One socket a machine asked for."""

    __slots__ = ("closed", "conn_id", "pending", "scope", "task", "writer")

    def __init__(self, scope: _Scope, conn_id: int) -> None:
        self.scope = scope
        self.conn_id = conn_id
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.pending: list[bytes] = []
        self.closed = False


class _Entry:
    """A machine being driven, with what belongs to it."""

    __slots__ = (
        "background",
        "machine",
        "requests",
        "run",
        "scope",
        "standing",
        "tool_task",
        "tools",
    )

    def __init__(
        self,
        machine: Any,
        scope: _Scope,
        *,
        tools: ToolRunner | None = None,
        background: bool = False,
        standing: bool = False,
    ) -> None:
        self.machine = machine
        self.scope = scope
        self.tools = tools
        self.background = background
        self.standing = standing
        self.requests: dict[int, asyncio.Task[None]] = {}
        self.tool_task: asyncio.Task[None] | None = None
        self.run: Run[Any] | None = None

    def active(self) -> bool:
        if not self.standing:
            return True
        turn = self.machine.in_flight
        # While a turn runs it drives the session (its inputs, actions and deadlines).
        return turn is None or turn.done


class Run(Generic[T]):
    """A machine started with ``Driver.start``: await its result, or follow its progress."""

    def __init__(self, driver: Driver, entry: _Entry) -> None:
        self._driver = driver
        self._entry = entry
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"<Run {self._entry.machine!r}>"

    @property
    def machine(self) -> Any:
        """The machine being run."""
        return self._entry.machine

    @property
    def done(self) -> bool:
        return bool(self._entry.machine.done)

    def cancel(self, reason: BaseException | None = None) -> None:
        """Cancel the machine now (D22): ``reason`` is the caller's cancellation, or ``None``
        for a consumer teardown. Its cleanup actions are performed at once; background work
        it starts is not waited for. Does nothing once the machine is done."""
        self._driver._cancel(self._entry, reason)

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
        result: T = self._entry.machine.result()
        return result

    async def parts(self) -> AsyncIterator[Any]:
        """The machine's ``parts`` deque (a stream-mode ``Turn``), drained live in order until
        the machine is done. The final result or error is ``await run.result()``."""
        parts = self._entry.machine.parts
        while True:
            while parts:
                yield parts.popleft()
            if self.done:
                return
            await self.wait_changed()


class _Recording:
    """The driver's recorder calls (``Driver.recorder``; docs/transcripts.md)."""

    base_url: str
    recorder: Recorder | None
    _recording: bool

    def _record_begin(self, session: Session | None, now: float) -> None:
        recorder = self.recorder
        if recorder is not None and not self._recording:
            self._recording = True
            created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            config = session.config if session is not None else None
            recorder.begin(base_url=self.base_url, config=config, created_at=created, now=now)

    def _record_start(self, machine: Any, session: Session) -> None:
        recorder = self.recorder
        assert recorder is not None
        now = time.monotonic()
        self._record_begin(session, now)
        if isinstance(machine, Turn):
            recorder.turn_started(
                mode=machine.mode,
                prompt=list(machine._messages),
                now=now,
                tools=machine.tools if machine.tools != session.config.tools else None,
                warnings=machine.warnings,
                single_segment=machine.single_segment,
            )
        elif isinstance(machine, SessionInterrupt):
            recorder.session_call(
                "interrupt", now, wait=machine._wait_for_settle, timeout=machine._timeout
            )
        elif isinstance(machine, SessionArchive):
            recorder.session_call("archive", now)
        elif isinstance(machine, SessionDispose):
            recorder.session_call("dispose", now)

    def _record_action(self, action: Action) -> None:
        recorder = self.recorder
        assert recorder is not None
        if isinstance(action, OpenConnection):
            recorder.connection_opened(action, time.monotonic())
        elif isinstance(action, SendData):
            recorder.data_sent(action.conn_id, action.data, time.monotonic())
        elif isinstance(action, CloseConnection):
            recorder.connection_closed(action.conn_id, time.monotonic())


class Driver(_Recording):
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
        #: Observes what crosses the wire (``coder_proto.transcript.Recorder``), or ``None``.
        self.recorder = recorder
        self._recording = False
        self._token = token
        self._ssl = ssl_context(verify)
        self.sink = sink if sink is not None else TransportEventSink()
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
        self._http_ids = itertools.count(1)
        self._entries: list[_Entry] = []
        self._sessions: dict[int, _Entry] = {}
        self._conns: dict[tuple[_Scope, int], _Conn] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: float | None = None
        self._settling = False
        self._dirty = False
        self._closed = False
        self._background_idle: asyncio.Event | None = None

    def __repr__(self) -> str:
        return (
            f"<Driver {self.base_url} connections={len(self._conns)} machines={len(self._entries)}>"
        )

    # -- public ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def open_connections(self) -> int:
        """Sockets currently open or connecting."""
        return len(self._conns)

    @property
    def background_jobs(self) -> int:
        """Background jobs (D22) not finished yet."""
        return sum(1 for e in self._entries if e.background)

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
        scope = self._session_entry(session).scope if session is not None else None
        if self.recorder is not None and session is not None:
            self._record_start(machine, session)
        entry = _Entry(machine, scope or _Scope(machine=machine), tools=tools)
        run: Run[T] = Run(self, entry)
        entry.run = run
        self._entries.append(entry)
        self._settle()
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
        self._session_entry(session)

    def perform(self, actions: Iterable[Action], *, session: Session) -> None:
        """Perform actions a session method returned (``reset_session``,
        ``close_retained_stream`` ...) in that session's connection scope."""
        entry = self._session_entry(session)
        for action in actions:
            self._perform(entry, action)
        self._settle()

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
        try:
            await self.wait_background(background_timeout)
        finally:
            now = time.monotonic()
            for entry in list(self._entries):
                if not entry.machine.done:
                    entry.machine.cancel(now, None)
            for standing in list(self._sessions.values()):
                # A paused stream still open is closed with 1000 rather than dropped.
                for action in standing.machine.close_retained_stream(now):
                    self._perform(standing, action)
            self._settle()
            for conn in list(self._conns.values()):
                self._close_conn(conn)
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._entries.clear()
            self._sessions.clear()
            if self._owns_client:
                await self.http_client.aclose()

    # -- the loop ----------------------------------------------------------------------------

    def _session_entry(self, session: Session) -> _Entry:
        entry = self._sessions.get(id(session))
        if entry is None or entry.machine is not session:
            entry = _Entry(session, _Scope(session=session), standing=True)
            self._sessions[id(session)] = entry
        return entry

    def _active(self) -> list[_Entry]:
        entries = [e for e in self._entries if e.active()]
        entries.extend(e for e in self._sessions.values() if e.active())
        return entries

    def _settle(self) -> None:
        """Perform every pending action and every due tick until nothing moves, then re-arm
        the timer and wake the waiters."""
        if self._settling:
            self._dirty = True
            return
        self._settling = True
        try:
            for _ in range(_MAX_ROUNDS):
                self._dirty = False
                busy = False
                for entry in self._active():
                    machine = entry.machine
                    for action in machine.actions():
                        busy = True
                        self._perform(entry, action)
                    deadline = machine.next_deadline()
                    if deadline is not None:
                        now = time.monotonic()
                        if deadline <= now:
                            busy = True
                            machine.tick(now)
                if not busy and not self._dirty:
                    break
            self._reap()
            self._arm_timer()
        finally:
            self._settling = False

    def _reap(self) -> None:
        keep: list[_Entry] = []
        for entry in self._entries:
            if entry.run is not None:
                entry.run._changed.set()
            if not entry.machine.done:
                keep.append(entry)
                continue
            if self.recorder is not None and isinstance(entry.machine, Turn):
                machine = entry.machine
                self.recorder.turn_finished(
                    machine.error if machine.error is not None else machine.result(),
                    time.monotonic(),
                )
            for task in entry.requests.values():
                task.cancel()
            entry.requests.clear()
            if entry.tool_task is not None:
                entry.tool_task.cancel()
                entry.tool_task = None
        self._entries = keep
        idle = self._background_idle
        if idle is not None and not any(e.background for e in keep):
            idle.set()

    def _arm_timer(self) -> None:
        if self._closed and not self._entries:
            return
        deadlines = [
            d for d in (e.machine.next_deadline() for e in self._active()) if d is not None
        ]
        due = min(deadlines) if deadlines else None
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
        self._settle()

    def _cancel(self, entry: _Entry, reason: BaseException | None) -> None:
        if entry.machine.done:
            return
        now = time.monotonic()
        if self.recorder is not None and isinstance(entry.machine, Turn):
            self.recorder.cancelled(reason, now)
        entry.machine.cancel(now, reason)
        self._settle()

    # -- actions -----------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _perform(self, entry: _Entry, action: Action) -> None:
        if self.recorder is not None and entry.scope.session is not None:
            self._record_action(action)
        if isinstance(action, SendData):
            conn = self._conns.get((entry.scope, action.conn_id))
            if conn is not None and not conn.closed:
                if conn.writer is not None:
                    conn.writer.write(action.data)
                else:
                    conn.pending.append(action.data)
        elif isinstance(action, SendRequest):
            entry.requests[action.request_id] = self._spawn(
                self._http(entry, action.request_id, action.request)
            )
        elif isinstance(action, CancelRequest):
            task = entry.requests.pop(action.request_id, None)
            if task is not None:
                task.cancel()
        elif isinstance(action, OpenConnection):
            conn = _Conn(entry.scope, action.conn_id)
            self._conns[(entry.scope, action.conn_id)] = conn
            conn.task = self._spawn(self._socket(conn, action))
        elif isinstance(action, CloseConnection):
            conn = self._conns.get((entry.scope, action.conn_id))
            if conn is not None:
                self._close_conn(conn)
        elif isinstance(action, RunTools):
            entry.tool_task = self._spawn(self._run_tools(entry, action.calls))
        elif isinstance(action, RunInBackground):
            parent = entry.scope
            scope = parent if parent.session is not None else _Scope(machine=action.job)
            self._entries.append(_Entry(action.job, scope, background=True))
            self._dirty = True
        else:  # pragma: no cover - every action is handled above
            raise CoderAgentError(f"unknown action {action!r}")

    def _close_conn(self, conn: _Conn) -> None:
        """Close a socket after what was written (``CloseConnection``); no input follows."""
        conn.closed = True
        if self._conns.get((conn.scope, conn.conn_id)) is conn:
            del self._conns[(conn.scope, conn.conn_id)]
        if conn.writer is not None:
            conn.writer.close()
        if conn.task is not None:
            conn.task.cancel()

    # -- REST --------------------------------------------------------------------------------

    async def _http(self, entry: _Entry, request_id: int, request: HttpRequest) -> None:
        sink = self.sink
        observed = sink.enabled and emits_transport_events(request)
        event_id = next(self._http_ids) if observed else 0
        started = time.monotonic()
        if observed:
            sink.emit(
                HttpRequestEvent(
                    id=event_id,
                    op=request.op,
                    method=request.method,
                    path=request.path,
                    timestamp=sink.now(),
                )
            )
        headers = list(request.headers)
        if self._token:
            headers.append((SESSION_TOKEN_HEADER, self._token))
        answered = False
        try:
            client = self.http_client
            outgoing = client.build_request(
                request.method, self.base_url + request.path, headers=headers, content=request.body
            )
            response = await client.send(outgoing, stream=True)
            try:
                answered = True
                if observed:
                    sink.emit(
                        HttpResponseEvent(
                            id=event_id,
                            op=request.op,
                            method=request.method,
                            path=request.path,
                            status=response.status_code,
                            ok=200 <= response.status_code <= 299,
                            duration=time.monotonic() - started,
                            timestamp=sink.now(),
                        )
                    )
                body = await response.aread()
            finally:
                await response.aclose()
        except asyncio.CancelledError:
            if observed and not answered:
                self._http_error(event_id, request, "request cancelled", started)
            if self.recorder is not None:
                self.recorder.rest_exchange(request, None, sent=started, now=time.monotonic())
            raise
        except Exception as exc:
            message = self._scrub(_describe(exc))
            if observed and not answered:
                self._http_error(event_id, request, message, started)
            self._finish_request(entry, request_id)
            now = time.monotonic()
            if self.recorder is not None:
                self._record_begin(entry.scope.session, now)
                self.recorder.rest_exchange(request, None, sent=started, now=now, error=message)
            entry.machine.request_failed(request_id, message, now)
            self._settle()
            return
        self._finish_request(entry, request_id)
        answer = HttpResponse(
            status=response.status_code,
            body=body,
            headers=tuple((k.lower(), v) for k, v in response.headers.multi_items()),
            reason=response.reason_phrase,
        )
        now = time.monotonic()
        if self.recorder is not None:
            self._record_begin(entry.scope.session, now)
            self.recorder.rest_exchange(request, answer, sent=started, now=now)
        entry.machine.response_received(request_id, answer, now)
        self._settle()

    def _finish_request(self, entry: _Entry, request_id: int) -> None:
        if entry.requests.get(request_id) is asyncio.current_task():
            del entry.requests[request_id]

    def _http_error(
        self, event_id: int, request: HttpRequest, message: str, started: float
    ) -> None:
        sink = self.sink
        sink.emit(
            HttpErrorEvent(
                id=event_id,
                op=request.op,
                method=request.method,
                path=request.path,
                message=message,
                duration=time.monotonic() - started,
                timestamp=sink.now(),
            )
        )

    def _scrub(self, message: str) -> str:
        token = self._token
        if token and token in message:
            return message.replace(token, "<redacted>")
        return message

    # -- sockets -----------------------------------------------------------------------------

    async def _socket(self, conn: _Conn, action: OpenConnection) -> None:
        """Open the connection, then read it until it ends; every outcome is one input."""
        writer: asyncio.StreamWriter | None = None
        try:
            try:
                reader, opened = await asyncio.wait_for(
                    asyncio.open_connection(
                        action.host,
                        action.port,
                        ssl=self._ssl if action.tls else None,
                        server_hostname=(action.server_hostname or action.host)
                        if action.tls
                        else None,
                    ),
                    CONNECT_TIMEOUT,
                )
            except (OSError, TimeoutError, ValueError, ssl.SSLError) as exc:
                self._deliver(conn, "failed", self._scrub(_describe(exc)))
                return
            writer = opened
            if conn.closed:
                return
            conn.writer = opened
            for data in conn.pending:
                opened.write(data)
            conn.pending.clear()
            self._deliver(conn, "made")
            while not conn.closed:
                try:
                    data = await reader.read(_READ_CHUNK)
                except (OSError, ssl.SSLError) as exc:
                    self._deliver(conn, "failed", self._scrub(_describe(exc)))
                    return
                if not data:
                    self._deliver(conn, "lost")
                    return
                self._deliver(conn, "data", data)
        finally:
            if writer is not None:
                writer.close()
            if self._conns.get((conn.scope, conn.conn_id)) is conn and conn.closed:
                del self._conns[(conn.scope, conn.conn_id)]

    def _deliver(self, conn: _Conn, kind: str, payload: Any = None) -> None:
        if conn.closed:
            return
        target = conn.scope.target()
        now = time.monotonic()
        recorder = self.recorder
        if recorder is not None and conn.scope.session is not None:
            if kind == "data":
                recorder.data_received(conn.conn_id, payload, now)
            elif kind == "lost":
                recorder.connection_lost(conn.conn_id, now)
            elif kind == "failed":
                recorder.connection_failed(conn.conn_id, payload, now)
        if kind == "data":
            target.data_received(conn.conn_id, payload, now)
        elif kind == "made":
            target.connection_made(conn.conn_id, now)
        else:
            # The socket is finished either way; the machine answers with CloseConnection.
            conn.closed = True
            if self._conns.get((conn.scope, conn.conn_id)) is conn:
                del self._conns[(conn.scope, conn.conn_id)]
            if kind == "lost":
                target.connection_lost(conn.conn_id, now)
            else:
                target.connection_failed(conn.conn_id, payload, now)
        self._settle()

    # -- tools -------------------------------------------------------------------------------

    async def _run_tools(self, entry: _Entry, calls: tuple[ToolCall, ...]) -> None:
        sent = time.monotonic()
        outcomes: Sequence[ToolOutcome] = ()
        if entry.tools is not None:
            try:
                outcomes = await entry.tools(calls)
            except asyncio.CancelledError:
                raise
            except Exception:
                # D5: every call still gets a result; the core reports the missing ones.
                logger.warning("the tool runner raised; the calls get error results", exc_info=True)
                outcomes = ()
        if entry.tool_task is asyncio.current_task():
            entry.tool_task = None
        now = time.monotonic()
        if self.recorder is not None:
            self.recorder.tools_run(calls, list(outcomes), sent=sent, now=now)
        entry.machine.tool_results(list(outcomes), now)
        self._settle()
