"""The runtime-independent half of every driver: routing, registries, events and bookkeeping.

An adapter's driver (asyncio, trio, blocking, or a loop of your own) runs core machines by
performing their actions and feeding the outcomes back (``coder_proto._actions``). Everything
in that job that does not touch a socket, a task or a clock lives here, in ``Drive``, so the
drivers differ only in how they perform I/O (DESIGN "The adapters"; D12, D21-D24):

* **routing** (the reference driver ``tests/core_driver.py``): a machine started with
  ``session=`` shares the session's connections; their inputs go to the session's running
  ``Turn`` while it is not done, otherwise to the ``Session`` itself, which keeps reading a
  paused stream between turns (state machines H.6). Every other machine receives the inputs
  of the connections it opened;
* **registries**: the connections per routing scope, the requests and the tool batch of each
  machine, the background jobs (``RunInBackground``, D22) and the standing sessions;
* **settling**: every pending action of an active machine that may have moved is turned into
  an I/O request for the adapter (a ``Command``), every due deadline ticked, until nothing
  moves. Only the routing scopes an input reached (and those whose deadline fell due) are
  visited, and deadlines wait in a heap, so one input costs the same whether the client
  drives one chat or a thousand;
* **REST bookkeeping**: the request to send (URL, headers with the session token), the
  ``http:request`` / ``http:response`` / ``http:error`` transport events with per-client ids,
  the request's ``op`` and durations in seconds (wire 11, D24; not for the requests
  ``coder_proto._rest.settings.emits_transport_events`` excludes, wire 9), the outcome turned into
  ``response_received`` / ``request_failed``, error messages scrubbed of the token;
* **tools**: ``RunTools`` becomes a ``RunToolBatch`` for the machine's tool runner (a machine
  started without one gets an empty outcome list at once, so the core reports every call as
  failed, D5); a runner that raised is logged and answered the same way;
* **transcripts**: every observation reported to a ``coder_proto.transcript.Recorder``.

The adapter's side of the contract (what a driver must do):

1. call an input method (``start``, ``cancel``, ``perform``, ``tick``, ``socket_*``,
   ``http_*``, ``tools_*``, ``shutdown``) with ``now`` read from the adapter's monotonic clock
   (seconds);
2. drain ``commands()`` and perform each, in order:

   - ``OpenSocket(conn)``: connect to ``conn.host:conn.port`` (TLS when ``conn.tls``, checking
     ``conn.server_hostname``) within ``CONNECT_TIMEOUT``; report ``socket_made`` or
     ``socket_failed``; then read until the end, reporting ``socket_data`` for each chunk and
     ``socket_lost`` (EOF) or ``socket_failed`` (an error);
   - ``WriteSocket(conn, data)``: write the bytes (only sent once ``socket_made`` was
     reported; earlier writes are held here and released by ``socket_made``);
   - ``CloseSocket(conn)``: close it after what was written, or abandon the connect; report
     nothing more for it;
   - ``StartHttp(call)``: send ``call.method`` ``call.url`` with ``call.headers`` and
     ``call.body``; report ``http_headers`` once the status line arrived (optional: it times
     the ``http:response`` event), then ``http_response`` with the whole body, or
     ``http_failed`` with the exception;
   - ``CancelHttp(call)``: abandon the request (its events and record are already done here);
   - ``RunToolBatch(batch)``: run ``batch.runner`` on ``batch.calls``; report
     ``tools_done(batch, outcomes)`` or ``tools_failed(batch, exc)``;
   - ``CancelToolBatch(batch)``: stop the tool run if it can (its outcome is ignored);
   - ``Wake(job)``: wake whoever waits on ``job`` (its machine moved or finished);
3. re-arm one timer at ``next_deadline()`` and call ``tick(now)`` when it fires.

A machine is visited when an input reaches its routing scope or its deadline falls due, so a
machine changes only through the drive: actions a session method returns go through
``perform``, never straight to a machine the drive runs.

Every handle (``Job``, ``Conn``, ``HttpCall``, ``ToolBatch``) has an ``io`` slot (and ``Job``
an ``owner`` slot) for the adapter's own objects: a task, a socket, a cancel scope. Inputs
for a handle that is finished or closed are ignored, so a late outcome never reaches a
machine twice. Nothing here performs I/O, reads a clock or decides anything a machine should
decide.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

import attrs

from ._actions import (
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
from ._agent.session import Session
from ._agent.session_calls import SessionArchive, SessionDispose, SessionInterrupt
from ._agent.turn import Turn
from ._constants import SESSION_TOKEN_HEADER
from ._errors import CoderAgentError, CoderProtocolError
from ._outputs import ToolCall
from ._rest.http import HttpRequest, HttpResponse
from ._rest.settings import emits_transport_events
from ._transport_events import (
    HttpErrorEvent,
    HttpRequestEvent,
    HttpResponseEvent,
    TransportEventSink,
)
from .transcript._recorder import Recorder

__all__ = [
    "MAX_ROUNDS",
    "CancelHttp",
    "CancelToolBatch",
    "CloseSocket",
    "Command",
    "Conn",
    "Drive",
    "HttpCall",
    "Job",
    "OpenSocket",
    "RunToolBatch",
    "Runnable",
    "StartHttp",
    "ToolBatch",
    "Wake",
    "WriteSocket",
    "describe_error",
    "scrub_token",
]

logger = logging.getLogger("coder_proto")

T_co = TypeVar("T_co", covariant=True)

#: Settling rounds per input before the adapter gets control back: a machine that keeps a
#: past deadline armed must not starve everything else (its timer fires again at once).
MAX_ROUNDS = 1_000

#: What an ``http_cancelled`` request reports as its ``http:error`` message (wire 11).
CANCELLED_MESSAGE = "request cancelled"


class Runnable(Protocol[T_co]):
    """A machine a driver can run: the ``Machine`` protocol of ``coder_proto._actions`` plus
    ``cancel`` and ``result`` (``CoreMachine`` and the watch machine satisfy it)."""

    @property
    def done(self) -> bool: ...

    def actions(self) -> list[Action]: ...

    def next_deadline(self) -> float | None: ...

    def tick(self, now: float) -> None: ...

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None: ...

    def request_failed(self, request_id: int, message: str | CoderAgentError, now: float) -> None: ...

    def cancel(self, now: float, reason: BaseException | None = None) -> None: ...

    def result(self) -> T_co: ...


def describe_error(error: BaseException | str) -> str:
    """An exception as one line: ``"Type: message"`` (or just the type name when the message
    is empty). A string is returned as is."""
    if isinstance(error, str):
        return error
    text = str(error)
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def scrub_token(message: str, token: str | None) -> str:
    """``message`` with every occurrence of the session token replaced by ``<redacted>``
    (DESIGN rule 6: a token never appears in an error, event or log)."""
    if token and token in message:
        return message.replace(token, "<redacted>")
    return message


# -- handles ---------------------------------------------------------------------------------------


class _Scope:
    """Where the inputs of a group of connections go (the routing rule), and the jobs that
    share them: a machine with its own connections, or a session with its turns, cleanup
    machines and their background jobs. An input to one of them can move any of them (they
    share the session's state), so a scope is the unit a settle visits."""

    __slots__ = ("jobs", "machine", "session", "standing")

    def __init__(self, *, session: Session | None = None, machine: Any = None) -> None:
        self.session = session
        self.machine = machine
        #: The scope's running jobs (not the standing session's), oldest first.
        self.jobs: dict[Job, None] = {}
        #: The session's standing job (``Drive.attach_session``), if any.
        self.standing: Job | None = None

    def members(self) -> list[Job]:
        """The scope's jobs, oldest first, the standing session last."""
        standing = self.standing
        if standing is None:
            return list(self.jobs)
        return [*self.jobs, standing]

    def target(self) -> Any:
        session = self.session
        if session is None:
            return self.machine
        turn = session.in_flight
        if turn is not None and not turn.done:
            return turn
        return session


class Job:
    """A machine being driven, with what belongs to it. ``owner`` is the adapter's (its
    ``Run``): ``Wake`` commands are issued for jobs that have one."""

    __slots__ = (
        "background",
        "deadline",
        "machine",
        "owner",
        "requests",
        "retired",
        "scope",
        "standing",
        "tool_batch",
        "tools",
    )

    def __init__(
        self,
        machine: Any,
        scope: _Scope,
        *,
        tools: Any = None,
        background: bool = False,
        standing: bool = False,
    ) -> None:
        self.machine = machine
        self.scope = scope
        #: The adapter's tool runner for ``RunTools`` (``None``: every call fails, D5).
        self.tools = tools
        self.background = background
        self.standing = standing
        self.requests: dict[int, HttpCall] = {}
        self.tool_batch: ToolBatch | None = None
        self.owner: Any = None
        #: The deadline the drive's heap holds for this job (``None``: none armed, inactive).
        self.deadline: float | None = None
        #: The drive no longer drives this job (finished and released, or shut down).
        self.retired = False

    def __repr__(self) -> str:
        return f"<Job {self.machine!r}>"

    @property
    def done(self) -> bool:
        return bool(self.machine.done)

    @property
    def session(self) -> Session | None:
        """The session whose connections this job shares (``None`` for a standalone job)."""
        return self.scope.session

    def active(self) -> bool:
        if not self.standing:
            return True
        turn = self.machine.in_flight
        # While a turn runs it drives the session (its inputs, actions and deadlines).
        return turn is None or turn.done


class Conn:
    """One socket a machine asked for (``OpenConnection``)."""

    __slots__ = (
        "closed",
        "conn_id",
        "connected",
        "host",
        "io",
        "pending",
        "port",
        "scope",
        "server_hostname",
        "tls",
    )

    def __init__(self, scope: _Scope, action: OpenConnection) -> None:
        self.scope = scope
        self.conn_id = action.conn_id
        self.host = action.host
        self.port = action.port
        self.tls = action.tls
        #: The name TLS verifies (the host unless the machine named another one).
        self.server_hostname = (action.server_hostname or action.host) if action.tls else None
        self.connected = False
        self.closed = False
        self.pending: list[bytes] = []
        self.io: Any = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open" if self.connected else "connecting"
        return f"<Conn {self.conn_id} {self.host}:{self.port} {state}>"


class HttpCall:
    """One REST request to send (``SendRequest``): ``method``, ``url``, ``headers`` (the
    session token included) and ``body`` are what goes on the wire."""

    __slots__ = (
        "answered",
        "body",
        "event_id",
        "finished",
        "headers",
        "io",
        "job",
        "method",
        "observed",
        "request",
        "request_id",
        "started",
        "url",
    )

    def __init__(
        self,
        job: Job,
        request_id: int,
        request: HttpRequest,
        *,
        url: str,
        headers: list[tuple[str, str]],
        observed: bool,
        event_id: int,
        started: float,
    ) -> None:
        self.job = job
        self.request_id = request_id
        self.request = request
        self.method = request.method
        self.url = url
        self.headers = headers
        self.body = request.body
        self.observed = observed
        self.event_id = event_id
        self.started = started
        self.answered = False
        self.finished = False
        self.io: Any = None

    def __repr__(self) -> str:
        # Never the headers: they carry the token.
        return f"<HttpCall {self.request.op} {self.method} {self.request.path}>"


class ToolBatch:
    """One ``RunTools`` batch for the job's tool runner (``runner``)."""

    __slots__ = ("calls", "finished", "io", "job", "runner", "sent")

    def __init__(self, job: Job, calls: tuple[ToolCall, ...], sent: float) -> None:
        self.job = job
        self.calls = calls
        self.runner: Any = job.tools
        self.sent = sent
        self.finished = False
        self.io: Any = None

    def __repr__(self) -> str:
        return f"<ToolBatch {[c.tool_name for c in self.calls]}>"


# -- commands: what the adapter performs ---------------------------------------------------------


@attrs.frozen
class OpenSocket:
    """Connect ``conn`` (see ``Drive``)."""

    conn: Conn


@attrs.frozen
class WriteSocket:
    """Write ``data`` on ``conn``."""

    conn: Conn
    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")


@attrs.frozen
class CloseSocket:
    """Close ``conn`` (after what was written) or abandon its connect; nothing more is
    reported for it."""

    conn: Conn


@attrs.frozen
class StartHttp:
    """Send ``call`` and report its outcome."""

    call: HttpCall


@attrs.frozen
class CancelHttp:
    """Abandon ``call``: its outcome is no longer wanted (already reported as cancelled)."""

    call: HttpCall


@attrs.frozen
class RunToolBatch:
    """Run ``batch.runner(batch.calls)`` and report the outcomes."""

    batch: ToolBatch


@attrs.frozen
class CancelToolBatch:
    """Stop the tool run of ``batch`` if possible; its outcome is ignored."""

    batch: ToolBatch


@attrs.frozen
class Wake:
    """``job`` moved (new parts, new events, done): wake whoever waits on it."""

    job: Job


Command: TypeAlias = (
    OpenSocket
    | WriteSocket
    | CloseSocket
    | StartHttp
    | CancelHttp
    | RunToolBatch
    | CancelToolBatch
    | Wake
)


def _no_created_at() -> str:
    return ""


# -- the drive -------------------------------------------------------------------------------------


class Drive:
    """The bookkeeping of one client's driver (see the module docstring for the contract).

    ``base_url`` prefixes every request path; ``token`` is added as ``Coder-Session-Token``
    (and scrubbed from every error message); ``sink`` receives the ``http:*`` events;
    ``recorder`` (settable later) observes what crosses the wire; ``created_at`` returns the
    wall-clock ISO timestamp of a transcript's header.
    """

    def __init__(
        self,
        *,
        base_url: str,
        token: str | None,
        sink: TransportEventSink | None = None,
        recorder: Recorder | None = None,
        created_at: Callable[[], str] = _no_created_at,
    ) -> None:
        self.base_url = base_url
        self.sink = sink if sink is not None else TransportEventSink()
        #: Observes what crosses the wire (``coder_proto.transcript.Recorder``), or ``None``.
        self.recorder = recorder
        self._created_at = created_at
        self._recording = False
        self._token = token
        self._http_ids = itertools.count(1)
        #: Every job being driven except the standing sessions, oldest first.
        self._jobs: dict[Job, None] = {}
        self._background = 0
        self._sessions: dict[int, Job] = {}
        self._conns: dict[tuple[_Scope, int], Conn] = {}
        self._out: list[Command] = []
        #: The scopes the next settle visits (an input reached them, or a deadline fell due).
        self._touched: dict[_Scope, None] = {}
        #: ``(deadline, seq, job)``; an entry whose job now holds another deadline is stale.
        self._heap: list[tuple[float, int, Job]] = []
        self._heap_seq = itertools.count()
        self._dirty = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<Drive {self.base_url} connections={len(self._conns)} jobs={len(self._jobs)}>"

    # -- observation -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """``close`` was called: ``start`` refuses new machines."""
        return self._closed

    @property
    def open_connections(self) -> int:
        """Sockets currently open or connecting."""
        return len(self._conns)

    @property
    def background_jobs(self) -> int:
        """Background jobs (D22) not finished yet."""
        return self._background

    @property
    def jobs(self) -> tuple[Job, ...]:
        """The machines being driven (foreground and background), oldest first."""
        return tuple(self._jobs)

    def commands(self) -> list[Command]:
        """Drain the I/O requests produced by the inputs so far, in order."""
        out = self._out
        self._out = []
        return out

    def next_deadline(self) -> float | None:
        """When the adapter must call ``tick`` (the earliest deadline of an active machine),
        or ``None``."""
        heap = self._heap
        while heap:
            deadline, _, job = heap[0]
            if job.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def scrub(self, message: str) -> str:
        """``message`` without the session token."""
        return scrub_token(message, self._token)

    # -- machines ----------------------------------------------------------------------------

    def start(
        self,
        machine: Runnable[Any],
        *,
        now: float,
        session: Session | None = None,
        tools: Any = None,
    ) -> Job:
        """Start driving ``machine`` (already started by its constructor). With ``session``,
        its connections are the session's and routed by the routing rule; ``tools`` is the
        adapter's runner for its ``RunTools`` batches. Raises ``CoderAgentError`` once the
        drive is closed."""
        if self._closed:
            raise CoderAgentError("this client is closed")
        scope = self._session_job(session).scope if session is not None else None
        if self.recorder is not None and session is not None:
            self._record_start(machine, session, now)
        job = self._add(Job(machine, scope or _Scope(machine=machine), tools=tools))
        self._settle(now)
        return job

    def attach_session(self, session: Session) -> Job:
        """Keep driving ``session`` between turns (its paused stream keeps reading, H.6).
        ``start(..., session=session)`` does this implicitly. The next settle visits it."""
        job = self._session_job(session)
        self._touched[job.scope] = None
        self._file_deadline(job)
        return job

    def perform(self, actions: Iterable[Action], *, session: Session, now: float) -> None:
        """Take on actions a session method returned (``reset_session``,
        ``close_retained_stream`` ...) in that session's connection scope."""
        job = self._session_job(session)
        self._touched[job.scope] = None
        for action in actions:
            self._perform(job, action, now)
        self._settle(now)

    def cancel(self, job: Job, reason: BaseException | None, now: float) -> None:
        """Cancel ``job``'s machine (D22): ``reason`` is the caller's cancellation, or
        ``None`` for a consumer teardown. Its cleanup actions become commands at once;
        background work it starts is driven on. Does nothing once the machine is done."""
        machine = job.machine
        if machine.done:
            return
        if self.recorder is not None and isinstance(machine, Turn):
            self.recorder.cancelled(reason, now)
        self._touched[job.scope] = None
        machine.cancel(now, reason)
        self._settle(now)

    def tick(self, now: float) -> None:
        """The timer fired: tick every due machine and settle."""
        self._settle(now)

    def close(self) -> None:
        """Refuse new machines from now on (the adapter then awaits the background jobs,
        bounded, and calls ``shutdown``). Idempotent."""
        self._closed = True

    def shutdown(self, now: float) -> None:
        """The end of the drive: every unfinished machine is cancelled (no reason), each
        session's paused stream closed with 1000 rather than dropped, the resulting actions
        taken on, then every socket, request and tool run still open is closed or
        cancelled. The drive is closed afterwards."""
        self._closed = True
        touched = self._touched
        for job in list(self._jobs):
            touched[job.scope] = None
            if not job.machine.done:
                job.machine.cancel(now, None)
        for standing in list(self._sessions.values()):
            touched[standing.scope] = None
            for action in standing.machine.close_retained_stream(now):
                self._perform(standing, action, now)
        self._settle(now)
        for conn in list(self._conns.values()):
            self._close_conn(conn)
        for job in self._jobs:
            self._release(job, now)
            job.retired = True
            job.deadline = None
            job.scope.jobs.pop(job, None)
        for standing in self._sessions.values():
            standing.retired = True
            standing.deadline = None
        self._jobs.clear()
        self._background = 0
        self._sessions.clear()
        self._heap.clear()
        touched.clear()

    # -- socket inputs -----------------------------------------------------------------------

    def socket_made(self, conn: Conn, now: float) -> None:
        """``conn`` is connected: the writes held meanwhile go out, then the machine hears
        ``connection_made``."""
        if conn.closed:
            return
        conn.connected = True
        for data in conn.pending:
            self._out.append(WriteSocket(conn, data))
        conn.pending.clear()
        self._touched[conn.scope] = None
        conn.scope.target().connection_made(conn.conn_id, now)
        self._settle(now)

    def socket_data(self, conn: Conn, data: bytes, now: float) -> None:
        """Bytes read from ``conn``."""
        if conn.closed:
            return
        if self.recorder is not None and conn.scope.session is not None:
            self.recorder.data_received(conn.conn_id, data, now)
        self._touched[conn.scope] = None
        conn.scope.target().data_received(conn.conn_id, data, now)
        self._settle(now)

    def socket_lost(self, conn: Conn, now: float) -> None:
        """``conn`` reached EOF. The socket is finished; the machine answers with
        ``CloseConnection`` (which needs no command any more)."""
        if conn.closed:
            return
        self._forget(conn)
        if self.recorder is not None and conn.scope.session is not None:
            self.recorder.connection_lost(conn.conn_id, now)
        self._touched[conn.scope] = None
        conn.scope.target().connection_lost(conn.conn_id, now)
        self._settle(now)

    def socket_failed(self, conn: Conn, error: BaseException | str, now: float) -> None:
        """Connecting, reading or TLS failed on ``conn`` (the message is scrubbed)."""
        if conn.closed:
            return
        self._forget(conn)
        message = self.scrub(describe_error(error))
        if self.recorder is not None and conn.scope.session is not None:
            self.recorder.connection_failed(conn.conn_id, message, now)
        self._touched[conn.scope] = None
        conn.scope.target().connection_failed(conn.conn_id, message, now)
        self._settle(now)

    # -- REST inputs ---------------------------------------------------------------------------

    def http_headers(self, call: HttpCall, status: int, now: float) -> None:
        """The status line of ``call`` arrived: the ``http:response`` event (wire 11)."""
        if call.finished or call.answered:
            return
        call.answered = True
        if call.observed:
            request = call.request
            sink = self.sink
            sink.emit(
                HttpResponseEvent(
                    id=call.event_id,
                    op=request.op,
                    method=request.method,
                    path=request.path,
                    status=status,
                    ok=200 <= status <= 299,
                    duration=now - call.started,
                    timestamp=sink.now(),
                )
            )

    def http_response(
        self,
        call: HttpCall,
        *,
        status: int,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        reason: str = "",
        now: float,
    ) -> None:
        """``call`` was answered (the whole body read): the machine hears
        ``response_received`` (header names lower-cased)."""
        if call.finished:
            return
        self.http_headers(call, status, now)
        self._finish_call(call)
        answer = HttpResponse(
            status=status,
            body=body,
            headers=tuple((k.lower(), v) for k, v in headers),
            reason=reason,
        )
        job = call.job
        if self.recorder is not None:
            self._record_begin(job.scope.session, now)
            self.recorder.rest_exchange(call.request, answer, sent=call.started, now=now)
        self._touched[job.scope] = None
        job.machine.response_received(call.request_id, answer, now)
        self._settle(now)

    def http_failed(self, call: HttpCall, error: BaseException | str, now: float) -> None:
        """``call`` failed without a (complete) response: the ``http:error`` event when no
        status line came, then ``request_failed`` with the scrubbed message."""
        if call.finished:
            return
        message = self.scrub(describe_error(error))
        # An answer the adapter refused (D30) fails the call with the library's own error.
        verdict: str | CoderAgentError = (
            error if isinstance(error, CoderProtocolError) else message
        )
        if call.observed and not call.answered:
            self._http_error(call, message, now)
        self._finish_call(call)
        job = call.job
        if self.recorder is not None:
            self._record_begin(job.scope.session, now)
            self.recorder.rest_exchange(
                call.request, None, sent=call.started, now=now, error=message
            )
        self._touched[job.scope] = None
        job.machine.request_failed(call.request_id, verdict, now)
        self._settle(now)

    # -- tool inputs ---------------------------------------------------------------------------

    def tools_done(self, batch: ToolBatch, outcomes: Sequence[ToolOutcome], now: float) -> None:
        """The tool runner answered ``batch`` (missing outcomes become error results in the
        core, D5)."""
        if batch.finished:
            return
        batch.finished = True
        job = batch.job
        if job.tool_batch is batch:
            job.tool_batch = None
        self._touched[job.scope] = None
        self._feed_tools(job, batch.calls, list(outcomes), batch.sent, now)
        self._settle(now)

    def tools_failed(self, batch: ToolBatch, error: BaseException, now: float) -> None:
        """The tool runner raised: logged, and every call still gets a result (D5)."""
        if batch.finished:
            return
        logger.warning(
            "the tool runner raised; the calls get error results",
            exc_info=(type(error), error, error.__traceback__),
        )
        self.tools_done(batch, (), now)

    # -- internals -----------------------------------------------------------------------------

    def _session_job(self, session: Session) -> Job:
        job = self._sessions.get(id(session))
        if job is None or job.machine is not session:
            if job is not None:  # a session that was garbage-collected left its id behind
                job.retired = True
                job.deadline = None
            scope = _Scope(session=session)
            job = Job(session, scope, standing=True)
            scope.standing = job
            self._sessions[id(session)] = job
        return job

    def _add(self, job: Job) -> Job:
        """Drive ``job`` from now on; the next settle visits its scope."""
        self._jobs[job] = None
        job.scope.jobs[job] = None
        if job.background:
            self._background += 1
        self._touched[job.scope] = None
        return job

    def _retire(self, job: Job) -> None:
        del self._jobs[job]
        job.scope.jobs.pop(job, None)
        if job.background:
            self._background -= 1
        job.retired = True
        job.deadline = None

    def _settle(self, now: float) -> None:
        """Take on every pending action and tick every due machine of the scopes that may
        have moved (the ones inputs reached, the ones whose deadline fell due) until nothing
        moves (at most ``MAX_ROUNDS`` rounds), then retire their finished jobs, wake their
        waiters and file their next deadlines."""
        touched = self._touched
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, job = heapq.heappop(heap)
            if job.deadline == deadline:
                # Filed again after the settle if it is still armed.
                job.deadline = None
                touched[job.scope] = None
        for _ in range(MAX_ROUNDS):
            self._dirty = False
            busy = False
            for scope in list(touched):
                for job in scope.members():
                    if not job.active():
                        continue
                    machine = job.machine
                    for action in machine.actions():
                        busy = True
                        self._perform(job, action, now)
                    deadline = machine.next_deadline()
                    if deadline is not None and deadline <= now:
                        busy = True
                        machine.tick(now)
            if not busy and not self._dirty:
                break
        self._reap(now)

    def _reap(self, now: float) -> None:
        out = self._out
        touched = self._touched
        for scope in touched:
            for job in list(scope.jobs):
                if job.owner is not None:
                    out.append(Wake(job))
                if not job.machine.done:
                    continue
                if self.recorder is not None and isinstance(job.machine, Turn):
                    machine = job.machine
                    self.recorder.turn_finished(
                        machine.error if machine.error is not None else machine.result(), now
                    )
                self._release(job, now)
                self._retire(job)
            for job in scope.members():
                self._file_deadline(job)
        touched.clear()

    def _file_deadline(self, job: Job) -> None:
        """Record ``job``'s next deadline in the heap (none while it is inactive)."""
        deadline = job.machine.next_deadline() if job.active() else None
        if deadline == job.deadline:
            return
        job.deadline = deadline
        if deadline is None:
            return
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._heap_seq), job))
        if len(heap) > 64 + 4 * (len(self._jobs) + len(self._sessions)):
            # Stale entries pile up when deadlines move often: rebuild from the live ones.
            live = [*self._jobs, *self._sessions.values()]
            self._heap = [
                (j.deadline, next(self._heap_seq), j) for j in live if j.deadline is not None
            ]
            heapq.heapify(self._heap)

    def _release(self, job: Job, now: float) -> None:
        """Cancel what a finished (or abandoned) job still has in flight."""
        for call in list(job.requests.values()):
            self._cancel_call(call, now)
        job.requests.clear()
        batch = job.tool_batch
        if batch is not None:
            batch.finished = True
            job.tool_batch = None
            self._out.append(CancelToolBatch(batch))

    def _perform(self, job: Job, action: Action, now: float) -> None:
        if self.recorder is not None and job.scope.session is not None:
            self._record_action(action, now)
        if isinstance(action, SendData):
            conn = self._conns.get((job.scope, action.conn_id))
            if conn is not None and not conn.closed:
                if conn.connected:
                    self._out.append(WriteSocket(conn, action.data))
                else:
                    conn.pending.append(action.data)
        elif isinstance(action, SendRequest):
            self._start_call(job, action.request_id, action.request, now)
        elif isinstance(action, CancelRequest):
            call = job.requests.pop(action.request_id, None)
            if call is not None:
                self._cancel_call(call, now)
        elif isinstance(action, OpenConnection):
            conn = Conn(job.scope, action)
            self._conns[(job.scope, action.conn_id)] = conn
            self._out.append(OpenSocket(conn))
        elif isinstance(action, CloseConnection):
            conn = self._conns.get((job.scope, action.conn_id))
            if conn is not None:
                self._close_conn(conn)
        elif isinstance(action, RunTools):
            if job.tools is None:
                # D5: every call still gets a result; the core reports the missing ones.
                self._feed_tools(job, action.calls, [], now, now)
                self._dirty = True
            else:
                batch = ToolBatch(job, action.calls, now)
                job.tool_batch = batch
                self._out.append(RunToolBatch(batch))
        elif isinstance(action, RunInBackground):
            parent = job.scope
            scope = parent if parent.session is not None else _Scope(machine=action.job)
            self._add(Job(action.job, scope, background=True))
            self._dirty = True
        else:  # pragma: no cover - every action is handled above
            raise CoderAgentError(f"unknown action {action!r}")

    def _forget(self, conn: Conn) -> None:
        conn.closed = True
        key = (conn.scope, conn.conn_id)
        if self._conns.get(key) is conn:
            del self._conns[key]

    def _close_conn(self, conn: Conn) -> None:
        self._forget(conn)
        conn.pending.clear()
        self._out.append(CloseSocket(conn))

    def _start_call(self, job: Job, request_id: int, request: HttpRequest, now: float) -> None:
        sink = self.sink
        observed = sink.enabled and emits_transport_events(request)
        event_id = next(self._http_ids) if observed else 0
        headers = list(request.headers)
        if self._token:
            headers.append((SESSION_TOKEN_HEADER, self._token))
        call = HttpCall(
            job,
            request_id,
            request,
            url=self.base_url + request.path,
            headers=headers,
            observed=observed,
            event_id=event_id,
            started=now,
        )
        job.requests[request_id] = call
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
        self._out.append(StartHttp(call))

    def _finish_call(self, call: HttpCall) -> None:
        call.finished = True
        requests = call.job.requests
        if requests.get(call.request_id) is call:
            del requests[call.request_id]

    def _cancel_call(self, call: HttpCall, now: float) -> None:
        """Abandon ``call``, still in flight (its job's registry held it until now)."""
        if call.observed and not call.answered:
            self._http_error(call, CANCELLED_MESSAGE, now)
        self._finish_call(call)
        if self.recorder is not None:
            self.recorder.rest_exchange(call.request, None, sent=call.started, now=now)
        self._out.append(CancelHttp(call))

    def _http_error(self, call: HttpCall, message: str, now: float) -> None:
        request = call.request
        sink = self.sink
        sink.emit(
            HttpErrorEvent(
                id=call.event_id,
                op=request.op,
                method=request.method,
                path=request.path,
                message=message,
                duration=now - call.started,
                timestamp=sink.now(),
            )
        )

    def _feed_tools(
        self,
        job: Job,
        calls: tuple[ToolCall, ...],
        outcomes: list[ToolOutcome],
        sent: float,
        now: float,
    ) -> None:
        if self.recorder is not None:
            self.recorder.tools_run(calls, outcomes, sent=sent, now=now)
        job.machine.tool_results(outcomes, now)

    # -- transcripts (docs/transcripts.md) -----------------------------------------------------

    def _record_begin(self, session: Session | None, now: float) -> None:
        recorder = self.recorder
        if recorder is not None and not self._recording:
            self._recording = True
            config = session.config if session is not None else None
            recorder.begin(
                base_url=self.base_url, config=config, created_at=self._created_at(), now=now
            )

    def _record_start(self, machine: Any, session: Session, now: float) -> None:
        recorder = self.recorder
        assert recorder is not None
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

    def _record_action(self, action: Action, now: float) -> None:
        recorder = self.recorder
        assert recorder is not None
        if isinstance(action, OpenConnection):
            recorder.connection_opened(action, now)
        elif isinstance(action, SendData):
            recorder.data_sent(action.conn_id, action.data, now)
        elif isinstance(action, CloseConnection):
            recorder.connection_closed(action.conn_id, now)
