"""One client's work without I/O: ``Connection``, with its routing, registries, events and
bookkeeping, and the handles and commands its embedder performs.

An embedder (an adapter's driver for asyncio, trio or blocking code, or a loop of your own)
runs core machines through a ``Connection`` by performing its commands and reporting the
outcomes. Everything in that job that does not touch a socket, a task or a clock lives here,
so the drivers differ only in how they perform I/O (docs/architecture.md "The adapters";
D12, D21-D24):

* **routing** (the reference driver ``tests/core_driver.py``): a machine started with
  ``session=`` shares the session's connections; their inputs go to the session's running
  ``Turn`` while it is not done, otherwise to the ``Session`` itself, which keeps reading a
  paused stream between turns (state machines H.6). A stream socket's bytes take the short
  way to the same place: the ``Conn`` keeps the reader of the session's stream that opened
  it, hands them to that reader and then steps the running turn (``resume``), as the turn
  and the session would have after passing them down. Every other machine receives the
  inputs of the connections it opened;
* **registries**: the connections per routing scope, the requests, tool run and store calls
  of each machine, the background jobs (``RunInBackground``, D22) and the standing sessions;
* **settling**: every pending action of an active machine that may have moved is turned into
  a command for the embedder, every due deadline ticked, until nothing moves. Only the
  routing scopes an input reached (and those whose deadline fell due) are visited, and
  deadlines wait in a heap, so one input costs the same whether the client drives one chat
  or a thousand;
* **REST bookkeeping**: the request to send (URL, headers with the session token), the
  ``http:request`` / ``http:response`` / ``http:error`` transport events with per-client ids,
  the request's ``op`` and durations in seconds (wire 11, D24; not for the requests
  ``coder_proto._rest.settings.emits_transport_events`` excludes, wire 9), the outcome turned into
  ``response_received`` / ``request_failed``, error messages scrubbed of the token;
* **tools**: a ``RunTools`` pause is planned by the machine's tool-call policy at once; what
  the policy cannot decide becomes an ``InvokeTools`` command (a machine started without a
  policy gets an empty outcome list, so the core reports every call as failed, D5);
* **transcripts**: every observation reported to a ``coder_proto.transcript.Recorder``; the
  stream connections as their readers decoded them (each session's ``ws_observer``).

The embedder's side of the contract is in ``Connection``'s docstring. A machine is visited
when an input reaches its routing scope or its deadline falls due, so a machine changes only
through the connection: actions a session method returns go through ``Connection._perform``,
never straight to a machine the connection runs.

Every handle (``Conn``, ``HttpExchange``, ``ToolBatch``, ``StoreRequest``, ``Task``) has an ``io``
slot for the embedder's own objects: a task, a socket, a cancel scope. Inputs for a handle
that is finished or closed are ignored, so a late outcome never reaches a machine twice.
Nothing here performs I/O, reads a clock or decides anything a machine should decide.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, TypeVar, cast

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
from ._agent.agent_core import AgentCore, GenerateCall
from ._agent.options import OPTION_NAMES, AgentOptions, resolve_options
from ._agent.prompt_plan import prepare_prompt
from ._agent.session import Session
from ._agent.session_calls import SessionArchive, SessionDispose, SessionInterrupt
from ._agent.tool_calls import ToolInvocation, ToolPlan
from ._agent.turn import Turn
from ._constants import SESSION_TOKEN_HEADER
from ._engine import CoreMachine
from ._errors import CoderAgentError, CoderProtocolError
from ._outputs import OutputPart, ToolCall
from ._redact import Redactor
from ._rest.http import HttpRequest, HttpResponse
from ._rest.prefix import PrefixSelector
from ._rest.settings import emits_transport_events
from ._shells.client_calls import ChatOperations, Operation
from ._stream.session_stream import ReaderLike, SessionStream
from ._stream.watch import WatchBackoff, WatchMachine
from ._stream.websocket import WsEvent
from ._transport_events import (
    HttpErrorEvent,
    HttpRequestEvent,
    HttpResponseEvent,
    TransportEvent,
    TransportEventSink,
)
from ._wire.chats import ChatWatchEvent

if TYPE_CHECKING:
    from ._recording import Recorder
    from .durable._program_job import ProgramJob
    from .durable._store import StoreCall, StoreOp
    from .durable._store_engine import DurableWork

__all__ = [
    "MAX_ROUNDS",
    "ApplyStore",
    "CancelHttp",
    "CancelTools",
    "CloseSocket",
    "Conn",
    "Connection",
    "ConnectionCommand",
    "ConnectionStats",
    "HttpCall",  # the earlier name of HttpExchange
    "HttpExchange",
    "InvokeTools",
    "Job",  # the earlier name of MachineSlot
    "MachineSlot",
    "OpenSocket",
    "Runnable",
    "StartHttp",
    "StoreRequest",
    "Task",
    "TaskMoved",
    "ToolBatch",
    "ToolRun",  # the earlier name of ToolBatch
    "WriteSocket",
    "describe_error",
    "scrub_token",
]

T_co = TypeVar("T_co", covariant=True)

#: Settling rounds per input before the adapter gets control back: a machine that keeps a
#: past deadline armed must not starve everything else (its timer fires again at once).
MAX_ROUNDS = 1_000

CANCELLED_MESSAGE = "request cancelled"
"""What a cancelled request reports as its ``http:error`` message (wire 11)."""


class Runnable(Protocol[T_co]):
    """A machine a driver can run: the ``Machine`` protocol of ``coder_proto._actions`` plus
    ``cancel`` and ``result`` (``CoreMachine`` and the watch machine satisfy it)."""

    @property
    def done(self) -> bool: ...

    def actions(self) -> list[Action]: ...

    def next_deadline(self) -> float | None: ...

    def tick(self, now: float) -> None: ...

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None: ...

    def request_failed(
        self, request_id: int, message: str | CoderAgentError, now: float
    ) -> None: ...

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
    """``message`` with the session token replaced by ``<redacted>`` (docs/architecture.md
    rule 6: a token never appears in an error, event or log): see ``Redactor.text``."""
    return Redactor(token).text(message)


# -- handles ---------------------------------------------------------------------------------------


class _Scope:
    """Where the inputs of a group of connections go (the routing rule), and the jobs that
    share them: a machine with its own connections, or a session with its turns, cleanup
    machines and their background jobs. An input to one of them can move any of them (they
    share the session's state), so a scope is the unit a settle visits."""

    __slots__ = ("jobs", "machine", "releasing", "session", "standing")

    def __init__(self, *, session: Session | None = None, machine: Any = None) -> None:
        self.session = session
        self.machine = machine
        #: The session was released (``Connection._release_session``): its standing job is dropped
        #: once the scope has no running job and no open connection.
        self.releasing = False
        #: The scope's running jobs (not the standing session's), oldest first.
        self.jobs: dict[MachineSlot, None] = {}
        #: The session's standing job (``Connection._session_job``), if any.
        self.standing: MachineSlot | None = None

    def members(self) -> list[MachineSlot]:
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


class MachineSlot:
    """A machine being driven, with what belongs to it. ``owner`` is the ``Task`` it runs
    for (``None`` for background work and standing sessions): a settle that visits the job
    issues that task's ``TaskMoved``."""

    __slots__ = (
        "background",
        "deadline",
        "machine",
        "owner",
        "requests",
        "retired",
        "scope",
        "standing",
        "stores",
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
        #: The tool-call policy of its ``RunTools`` pauses (``None``: every call fails, D5).
        self.tools = tools
        self.background = background
        self.standing = standing
        self.requests: dict[int, HttpExchange] = {}
        self.tool_batch: ToolBatch | None = None
        #: The durable store calls in flight (a durable job's, ``ApplyStore``), by call id
        #: (``None`` until its first one: most jobs never make one).
        self.stores: dict[int, StoreRequest] | None = None
        self.owner: Task | None = None
        #: The deadline the connection's heap holds for this job (``None``: none armed, inactive).
        self.deadline: float | None = None
        #: The connection no longer drives this job (finished and released, or shut down).
        self.retired = False

    def __repr__(self) -> str:
        return f"<MachineSlot {self.machine!r}>"

    def active(self) -> bool:
        if not self.standing:
            return True
        turn = self.machine.in_flight
        # While a turn runs it drives the session (its inputs, actions and deadlines).
        return turn is None or turn.done


Job = MachineSlot  # the earlier name, kept by coder_proto.adapter


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
        "route",
        "scope",
        "server_hostname",
        "tls",
    )

    def __init__(self, scope: _Scope, action: OpenConnection) -> None:
        self.scope = scope
        #: For a session's stream socket: the stream that opened it, its reader and the
        #: reader's id of the connection, so its bytes go straight to that reader (``None``:
        #: the inputs go to the machine that opened it).
        self.route: tuple[SessionStream, ReaderLike, int] | None = None
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

    @property
    def task(self) -> Any:
        """The ``Task`` whose machine hears this socket now (the machine that opened it, or
        its session's running turn), or ``None`` (a session between its turns)."""
        target = self.scope.target()
        return next((job.owner for job in self.scope.jobs if job.machine is target), None)


class HttpExchange:
    """One REST request to send (``SendRequest``): ``method``, ``url``, ``headers`` (the
    session token included) and ``body`` are what goes on the wire. Report its status line
    with ``status_received`` when it arrives, and its outcome with
    ``Connection.http_finished``."""

    __slots__ = (
        "_sink",
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
        job: MachineSlot,
        request_id: int,
        request: HttpRequest,
        *,
        url: str,
        headers: list[tuple[str, str]],
        sink: TransportEventSink | None,
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
        #: Where its ``http:*`` events go (``None``: it emits none, wire 9).
        self._sink = sink
        self.observed = sink is not None
        self.event_id = event_id
        self.started = started
        self.answered = False
        self.finished = False
        self.io: Any = None

    def __repr__(self) -> str:
        # Never the headers: they carry the token.
        return f"<HttpExchange {self.request.op} {self.method} {self.request.path}>"

    def status_received(self, status: int, *, now: float) -> None:
        """The status line arrived (optional: it times the ``http:response`` event, wire
        11; without it the event comes with ``Connection.http_finished``). Only the first
        report counts; a request already finished or cancelled ignores it."""
        if self.finished or self.answered:
            return
        self.answered = True
        sink = self._sink
        if sink is not None:
            request = self.request
            sink.emit(
                HttpResponseEvent(
                    id=self.event_id,
                    op=request.op,
                    method=request.method,
                    path=request.path,
                    status=status,
                    ok=200 <= status <= 299,
                    duration=now - self.started,
                    timestamp=sink.now(),
                )
            )

    @property
    def task(self) -> Any:
        """The ``Task`` whose work sent the request (``None`` for background work, D22)."""
        return self.job.owner

    @property
    def background(self) -> bool:
        """The request belongs to background work (D22: the interrupt of a cancelled turn's
        run), which no task waits for."""
        return self.job.background

    @property
    def deadline(self) -> float | None:
        """When the request's machine abandons it if it is still unanswered, or ``None``: the
        deadline it waits for it with or a turn's ``request_timeout`` (C.3), whichever comes
        first (``CoreMachine.request_deadline``); for background work, the work's own bound.
        A blocking embedder bounds the request by it, as an event loop's timer would cut it."""
        job = self.job
        machine = job.machine
        if job.background:
            due: object = machine.next_deadline()
        else:
            deadline_of = getattr(machine, "request_deadline", None)
            due = None if deadline_of is None else deadline_of(self.request_id)
        return due if isinstance(due, float | int) else None

    @property
    def timed(self) -> bool:
        """The request's machine cancels it at a deadline of its own (a turn's
        ``request_timeout``, C.3: ``CancelHttp`` when ``tick`` passes it), so an embedder with
        a timer sets no total bound of its own on it (D29)."""
        return isinstance(getattr(self.job.machine, "abort_deadline", None), float | int)


HttpCall = HttpExchange  # the earlier name, still exported


class ToolBatch:
    """The client tool calls of one pause, ready to run (``InvokeTools``): the core's tool-call
    policy already answered what it could decide (duplicates, unknown tools, tools without a
    function, invalid input, structured-output filings); each of ``invocations`` needs its
    function called (``invocation.call()``, awaited when ``invocation.is_async``) and the
    value or the exception reported with ``Connection.tool_finished``. ``finished`` is true
    once every invocation was reported or the run was cancelled (``CancelTools``). ``io`` is
    the embedder's slot."""

    __slots__ = (
        "_job",
        "_outcomes",
        "_results",
        "_waiting",
        "calls",
        "finished",
        "invocations",
        "io",
        "sent",
    )

    def __init__(
        self,
        job: MachineSlot,
        calls: tuple[ToolCall, ...],
        sent: float,
        outcomes: list[ToolOutcome],
        invocations: Iterable[ToolInvocation],
    ) -> None:
        self._job = job
        #: Every call of the pause, as the model made it (the ones the core answered too).
        self.calls = calls
        #: When the pause was handed out (the embedder's monotonic clock).
        self.sent = sent
        self._outcomes = outcomes
        self.invocations: tuple[ToolInvocation, ...] = tuple(invocations)
        self._waiting = {invocation.tool_call_id for invocation in self.invocations}
        #: The reported outcomes of ``invocations``, by tool call id.
        self._results: dict[str, ToolOutcome] = {}
        self.finished = False
        self.io: Any = None

    def __repr__(self) -> str:
        return f"<ToolBatch {[i.tool.name for i in self.invocations]}>"

    @property
    def task(self) -> Task:
        """The ``Task`` whose machine paused for the calls."""
        task = self._job.owner
        assert task is not None  # only a task's machine pauses for tools its embedder runs
        return task

    @property
    def pending(self) -> tuple[ToolInvocation, ...]:
        """The invocations not reported yet."""
        return tuple(i for i in self.invocations if i.tool_call_id in self._waiting)


ToolRun = ToolBatch  # the earlier name, still exported


class StoreRequest:
    """One call on the durable store a durable job asked for (its machine's ``StoreCall``):
    ``op`` (a ``coder_proto.durable.StoreOp``) to perform with ``runner`` (the job's
    ``store``: the adapter's own performer, a plain or a coroutine function of the
    ``StoreOp``). Hand its outcome back to ``Connection.store_finished``;
    ``finished`` is true once it was answered or its job ended. ``io`` is the embedder's
    slot."""

    __slots__ = ("call_id", "finished", "io", "job", "op", "runner")

    def __init__(self, job: MachineSlot, call_id: int, op: StoreOp, runner: Any) -> None:
        self.job = job
        self.call_id = call_id
        self.op = op
        self.runner = runner
        self.finished = False
        self.io: Any = None

    def __repr__(self) -> str:
        return f"<StoreRequest {self.op.method}>"

    @property
    def task(self) -> Any:
        """The ``Task`` of the durable job that asked for the call."""
        return self.job.owner


# -- commands: what the adapter performs ---------------------------------------------------------


@attrs.frozen
class OpenSocket:
    """Connect ``conn`` (see ``Connection``)."""

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

    call: HttpExchange


@attrs.frozen
class CancelHttp:
    """Abandon ``call``: its outcome is no longer wanted (already reported as cancelled)."""

    call: HttpExchange


@attrs.frozen
class ApplyStore:
    """Perform ``call.op`` on the durable store with ``call.runner`` and report the value or
    the exception (``Connection.store_finished``). Only a durable job
    (``coder_proto.durable.DurableWork``) started with ``Connection.start_durable`` asks for
    one. A store call is never abandoned halfway: once its job ended, what it reports is
    ignored.

    Performed on a loop of your own (a blocking store; await the value of an async one;
    ``now`` is your loop's monotonic time)::

        try:
            value = command.call.runner(command.op)
        except Exception as exc:
            conn.store_finished(command.call, error=exc, now=now)
        else:
            conn.store_finished(command.call, value=value, now=now)
    """

    call: StoreRequest

    @property
    def op(self) -> StoreOp:
        """The store call to perform."""
        return self.call.op

    @property
    def call_id(self) -> int:
        """The machine's id of the store call."""
        return self.call.call_id


@attrs.frozen
class InvokeTools:
    """Call the function of each of ``run.invocations`` and report every value or exception
    (``Connection.tool_finished``), in any order."""

    run: ToolBatch


@attrs.frozen
class CancelTools:
    """Stop the tool calls of ``run`` if possible; their outcomes are no longer wanted."""

    run: ToolBatch


@attrs.frozen
class TaskMoved:
    """``task`` moved (new output parts or events, or it finished): wake whoever waits on it."""

    task: Task


ConnectionCommand: TypeAlias = (
    OpenSocket
    | WriteSocket
    | CloseSocket
    | StartHttp
    | CancelHttp
    | InvokeTools
    | CancelTools
    | ApplyStore
    | TaskMoved
)
"""What ``Connection.commands`` hands the embedder."""


def _no_created_at() -> str:
    return ""


_GENERATE = "generate"
_STREAM = "stream"
_SEGMENT = "segment"
_TURN_MODES: Final = (_GENERATE, _STREAM, _SEGMENT)
_CALL = "call"
_WATCH = "watch"
_DURABLE = "durable"
_CLOSE = "close"
_MACHINE = "machine"
#: The tool runner of a ``_start_machine`` task: its pauses go to the embedder unplanned.
_RAW_TOOLS: Final = "raw"
#: A job the settle's last round did not see (``Connection._file_deadline``).
_UNSEEN: Final = object()


class _RecorderTap:
    """A session's ``WsObserver`` under a connection with a recorder: the upgrades its stream
    readers sent and the events their connections decoded go to that recorder (a transcript
    records what the core saw, not a second reading of the bytes). Without a recorder a
    session has no tap, and its readers report nothing."""

    __slots__ = ("_recorder",)

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def upgrade_sent(self, conn_id: int, target: str, now: float) -> None:
        self._recorder.upgrade_sent(conn_id, target, now)

    def ws_events(self, conn_id: int, events: Sequence[WsEvent], now: float) -> None:
        self._recorder.ws_events(conn_id, events, now)


class Task:
    """One piece of work a ``Connection`` runs: an agent turn (``generate`` with its whole
    client-tool loop and structured-output ladder, ``stream`` or ``segment``), a plain client
    call, the watch, a durable job or an agent's close. Poll it after a ``TaskMoved``
    command: ``done``, ``result()``, and the output parts (``take_parts``, a stream) or watch
    events (``take_events``) as they arrive; ``cancel`` it when your runtime cancels the
    call. ``io`` is the embedder's slot (a future, a waiter)."""

    __slots__ = (
        "_agent",
        "_connection",
        "_error",
        "_finish",
        "_generate",
        "_job",
        "_kind",
        "_parent",
        "_settled",
        "_value",
        "io",
    )

    def __init__(self, kind: str, *, agent: AgentCore | None = None) -> None:
        self._kind = kind
        self._agent = agent
        self._job: MachineSlot | None = None
        #: The durable job whose step turn this task is (``StartStepTurn``), if any.
        self._parent: MachineSlot | None = None
        self._generate: GenerateCall | None = None
        self._finish: Callable[[Any], Any] = _same
        self._settled = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._connection: Connection | None = None
        self.io: Any = None

    def __repr__(self) -> str:
        state = "done" if self._settled else "running"
        return f"<Task {self._kind} {state}>"

    def cancel(self, reason: BaseException | None, *, now: float) -> None:
        """Cancel the task: ``reason`` is the caller's cancellation (a turn then interrupts
        the server's run in the background), ``None`` a consumer that stopped reading. Does
        nothing once the task is done."""
        connection = self._connection
        if not self._settled and connection is not None:
            connection._cancel(self, reason, now)

    @property
    def kind(self) -> str:
        """``"generate"``, ``"stream"``, ``"segment"``, ``"call"``, ``"watch"``, ``"durable"``,
        ``"close"`` or ``"machine"``."""
        return self._kind

    @property
    def done(self) -> bool:
        """The task finished: ``result()`` returns its value or raises its error."""
        return self._settled

    @property
    def machine(self) -> Any:
        """The core machine running now (a turn, a call's job, the watch), for inspection."""
        job = self._job
        return None if job is None else job.machine

    def result(self) -> Any:
        """The task's value (a ``GenerateResult`` for a turn, the operation's value for a
        call, ``None`` for a watch a consumer stopped), or raise its error. Raises
        ``CoderAgentError`` while the task runs."""
        if not self._settled:
            raise CoderAgentError("the task has not finished yet")
        if self._error is not None:
            raise self._error
        return self._value

    def take_parts(self) -> list[OutputPart]:
        """The output parts a ``stream`` task delivered since the last call, in order (a
        ``generate`` task delivers none: its result holds the steps)."""
        machine = self.machine
        parts = getattr(machine, "parts", None)
        if not parts:
            return []
        out = list(parts)
        parts.clear()
        return out

    def take_events(self) -> list[ChatWatchEvent]:
        """The watch events received since the last call, in order."""
        machine = self.machine
        if not isinstance(machine, WatchMachine):
            return []
        return machine.take()

    def _settle(self, value: Any = None, error: BaseException | None = None) -> None:
        self._settled = True
        self._value = value
        self._error = error
        if self._agent is not None:
            self._agent.end()


def _same(value: Any) -> Any:
    return value


class ConnectionStats:
    """What a ``Connection`` holds now (``Connection.stats``), read when asked."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def __repr__(self) -> str:
        return (
            f"<ConnectionStats connections={self.open_connections} tasks={self.tasks} "
            f"background={self.background_jobs}>"
        )

    @property
    def open_connections(self) -> int:
        """Sockets open or connecting."""
        return len(self._connection._conns)

    @property
    def background_jobs(self) -> int:
        """Background work not finished yet (a cancelled turn's interrupt of the server's run)."""
        return self._connection._background

    @property
    def attached_sessions(self) -> int:
        """Sessions kept between their turns (one per open agent)."""
        return len(self._connection._sessions)

    @property
    def tasks(self) -> int:
        """Machines being driven, foreground and background."""
        return len(self._connection._jobs)

    @property
    def closed(self) -> bool:
        """``close`` was called: no new task starts."""
        return self._connection._closed


class Connection:
    """Everything one client does, without I/O (the embedder performs it): agent turns, plain
    client calls, the watch, durable workflow machines (``start_durable`` with a
    ``coder_proto.durable.DurableWork``) and an agent's close, over the sockets, HTTP requests,
    tool calls and durable store calls it asks for.

    Construction does no I/O. ``base_url`` prefixes every request path; ``token`` is sent
    as the session token and scrubbed from every message; ``on_event`` receives the transport
    events (``wall_clock`` stamps them); ``recorder`` observes what crosses the wire for a
    transcript; ``created_at`` returns the transcript header's wall-clock ISO timestamp.
    ``sink`` (an adapter's ``TransportEventSink``, instead of ``on_event`` and ``wall_clock``)
    receives the events itself, so a listener attached to it later hears them too.
    ``selector`` is the client's chat-prefix state (wire 1.4) when the embedder keeps one of
    its own.

    Start work with ``agent`` + ``start_turn`` (and ``reset`` / ``start_close`` for that
    agent), ``start_call`` (``calls`` builds the plain operations), ``start_watch`` or
    ``start_durable``: each returns a ``Task``. Then loop:

    1. perform every command of ``commands()`` in order:

       - ``OpenSocket(conn)``: connect to ``conn.host:conn.port`` (TLS when ``conn.tls``,
         verifying ``conn.server_hostname``); report ``socket_made`` (or ``socket_closed``
         with the error), then every chunk read with ``socket_data`` and the end with
         ``socket_closed`` (EOF, or ``error=`` when reading or writing failed);
       - ``WriteSocket(conn, data)``: write the bytes; ``CloseSocket(conn)``: close it after
         what was written (nothing more is reported for it);
       - ``StartHttp(call)``: send ``call.method`` ``call.url`` with ``call.headers`` and
         ``call.body``; report ``call.status_received`` when the status line arrived
         (optional), then ``http_finished`` with the answer or ``error=``; ``CancelHttp(call)``: abandon it
         (``call.deadline`` is when its machine abandons it anyway, ``call.timed`` whether
         its machine's own deadline bounds it);
       - ``InvokeTools(run)``: call each invocation's function and report
         ``tool_finished``; ``CancelTools(run)``: stop them if possible;
       - ``ApplyStore(call)``: perform ``call.op`` with ``call.runner`` (a durable job's
         store) and report ``store_finished``;
       - ``TaskMoved(task)``: wake whoever waits on ``task`` (parts, events, or done);
    2. arm one timer at ``next_deadline()`` and call ``tick`` when it fires.

    Every input takes ``now``, the embedder's monotonic clock in seconds. Inputs for a socket,
    request or tool run that is finished are ignored. ``task.cancel`` cancels a task; ``close``
    refuses new tasks, ``close(now=...)`` ends everything; ``stats`` counts what is held.
    """

    def __init__(
        self,
        *,
        base_url: str,
        token: str | None = None,
        on_event: Callable[[TransportEvent], object] | None = None,
        wall_clock: Callable[[], float] | None = None,
        recorder: Recorder | None = None,
        created_at: Callable[[], str] = _no_created_at,
        sink: TransportEventSink | None = None,
        selector: PrefixSelector | None = None,
    ) -> None:
        if sink is None:
            sink = (
                TransportEventSink(on_event)
                if wall_clock is None
                else TransportEventSink(on_event, wall_clock=wall_clock)
            )
        elif on_event is not None or wall_clock is not None:
            raise CoderAgentError("pass either sink or on_event and wall_clock, not both")
        self._base_url = base_url
        self._sink = sink
        self._recorder = recorder
        self._created_at = created_at
        self._recording = False
        self._token = token
        #: Server text enters the core through the connection: it leaves it without the token.
        self._redactor = Redactor(token)
        self._selector = selector if selector is not None else PrefixSelector()
        self._calls: ChatOperations | None = None
        self._stats = ConnectionStats(self)
        self._http_ids = itertools.count(1)
        #: Every job being driven except the standing sessions, oldest first.
        self._jobs: dict[MachineSlot, None] = {}
        self._background = 0
        self._sessions: dict[int, MachineSlot] = {}
        self._conns: dict[tuple[_Scope, int], Conn] = {}
        self._out: list[ConnectionCommand] = []
        #: The scopes the next settle visits (an input reached them, or a deadline fell due).
        self._touched: dict[_Scope, None] = {}
        #: The jobs with a task that a settle may have moved, for their ``TaskMoved``.
        self._moved: list[MachineSlot] = []
        #: ``(deadline, seq, job)``; an entry whose job now holds another deadline is stale.
        self._heap: list[tuple[float, int, MachineSlot]] = []
        self._heap_seq = itertools.count()
        #: Session scopes whose background work a durable job waits for (its step turn's
        #: closing, ``_step_turn_ended``) -> that job's scope, visited with them.
        self._waiters: dict[_Scope, _Scope] = {}
        self._dirty = False
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"<Connection {self._base_url} connections={len(self._conns)} tasks={len(self._jobs)}>"
        )

    # -- observation -------------------------------------------------------------------------

    @property
    def recorder(self) -> Recorder | None:
        """Observes what crosses the wire (``coder_proto.transcript.Recorder``), or ``None``."""
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: Recorder | None) -> None:
        self._recorder = recorder
        for job in self._sessions.values():
            job.machine.ws_observer = self._tap()

    def _tap(self) -> _RecorderTap | None:
        """What a session's stream readers report to: the recorder's tap, none without one."""
        recorder = self._recorder
        return None if recorder is None else _RecorderTap(recorder)

    @property
    def stats(self) -> ConnectionStats:
        """What the connection holds now: sockets, background work, kept sessions, tasks, and
        whether it is closed (a live view, read when asked)."""
        return self._stats

    @property
    def calls(self) -> ChatOperations:
        """The plain client operations (every ``CoderChatClient`` method): each returns a call
        for ``start_call``; ``calls.selector`` is the connection's chat-prefix state."""
        if self._calls is None:
            self._calls = ChatOperations(self._selector, self._base_url)
        return self._calls

    def commands(self) -> list[ConnectionCommand]:
        """Drain the commands produced by the inputs so far, in order."""
        out = self._out
        self._out = []
        return out

    def next_deadline(self, *, background: bool = False) -> float | None:
        """When to call ``tick`` (monotonic seconds), or ``None``. With ``background``, the
        earliest deadline of the background work alone (a cancelled turn's interrupt of the
        server's run): for an embedder that drives the background work on a thread of its
        own while no caller waits."""
        if background:
            due: float | None = None
            for job in self._jobs:
                if job.background:
                    deadline = job.machine.next_deadline()
                    if deadline is not None and (due is None or deadline < due):
                        due = deadline
            return due
        heap = self._heap
        while heap:
            deadline, _, job = heap[0]
            if job.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    # -- starting work -----------------------------------------------------------------------

    def agent(self, options: AgentOptions | None = None, **settings: Any) -> AgentCore:
        """The state of one agent on this connection (its chat, tools, structured output and
        settings): ``options`` (an ``AgentOptions``) and the keyword arguments of
        ``CoderAgent`` (an option keyword overrides the field of ``options``; ``chat_id``,
        ``last_seen_message_id`` and ``workspace_files`` resume a chat and name its
        workspace adapter). Does no I/O; raises ``CoderAgentError`` on bad settings."""
        given = {name: settings.pop(name) for name in list(settings) if name in OPTION_NAMES}
        return AgentCore(
            resolve_options(options, given),
            base_url=self._base_url,
            token=self._token,
            selector=self._selector,
            sink=self._sink,
            **settings,
        )

    def start_turn(
        self,
        agent: AgentCore,
        messages: Sequence[Any],
        *,
        now: float,
        mode: str = _GENERATE,
        edit_message_id: int | None = None,
    ) -> Task:
        """Run one turn of ``agent`` on the prompt ``messages``: ``mode="generate"`` runs
        the whole client-tool loop and the structured-output ladder (its result is a
        ``GenerateResult``); ``mode="stream"`` delivers the output parts live
        (``take_parts``), and with ``edit_message_id`` the prompt replaces that user message;
        ``mode="segment"`` streams one model round trip, leaving a pause's calls to the
        caller. A stream's or segment's result is a ``GenerateResult`` too. One turn per
        agent at a time (``CoderAgentError`` otherwise); the task's end leaves the agent free
        for the next one."""
        if mode not in _TURN_MODES:
            raise CoderAgentError(f"mode must be 'generate', 'stream' or 'segment', got {mode!r}")
        self._check_open()
        agent.begin()
        task = Task(mode, agent=agent)
        try:
            if mode == _GENERATE:
                call = agent.generate(messages, now=now)
                task._generate = call
                turn: Turn = call.turn
            elif mode == _SEGMENT:
                turn = agent.segment(messages, now=now)
            else:
                turn = agent.stream(messages, now=now, edit_message_id=edit_message_id)
        except BaseException:
            agent.end()
            raise
        self._run_turn(task, turn, now)
        self._check_done(task, now)
        return task

    def start_call(self, call: Operation[Any], *, now: float, data: bytes | None = None) -> Task:
        """Run one plain operation (a method of ``calls``, or an agent's operation).
        ``data`` is the content of the file an upload reads (``call.read``)."""
        self._check_open()
        if call.read is not None and data is None and call.read.data is None:
            raise CoderAgentError("this upload needs the file's bytes: pass them as data")
        task = Task(_CALL)
        task._finish = call.finish
        self._start_job(task, call.machine(now, data), now, session=call.session, tools=call.tools)
        self._check_done(task, now)
        return task

    def start_watch(self, *, now: float, backoff: WatchBackoff | None = None) -> Task:
        """Subscribe to the chat watch: its events arrive with ``take_events``; the task ends
        when ``cancel`` stops it (``result()`` is ``None``) or with a terminal error."""
        self._check_open()
        task = Task(_WATCH)
        machine = WatchMachine(
            self._selector,
            base_url=self._base_url,
            token=self._token,
            now=now,
            backoff=backoff,
        )
        self._start_job(task, machine, now)
        return task

    def start_durable(self, job: DurableWork | ProgramJob, *, now: float) -> Task:
        """Run a durable workflow machine wrapped in a ``coder_proto.durable.DurableWork`` (a
        step, an archive, a sweep, a recovery), or a whole durable call's effect program (a
        ``coder_proto.durable.ProgramJob``: ``run_turn``, ``archive_workflow``,
        ``sweep_orphans``, their lease renewed by a timer of the task): its requests are
        ordinary requests, its store calls come as ``ApplyStore`` (performed with the job's
        ``store``), and its tool pauses as ``InvokeTools`` planned with ``job.plan_tools``,
        answered like a turn's with ``tool_finished``. A step's agent turn runs as a task of
        the job's own, whose commands (``io``: the job's task's) are the job's: its tool
        pauses come as ``InvokeTools`` answered with ``tool_finished``, its ``TaskMoved``
        wakes whoever waits on the job. The task's result is the machine's (the program's)."""
        self._check_open()
        task = Task(_DURABLE)
        self._start_job(task, job, now, tools=job.plan_tools)
        self._check_done(task, now)
        return task

    def start_close(self, agent: AgentCore, *, now: float, archive: bool = True) -> Task:
        """Close ``agent`` (H.5): with ``archive``, its dispose (interrupt, then archive,
        bounded by ``settle_deadline``; it never fails: its result is the ``ArchiveResult``
        or ``None``); without, only its paused stream is closed and the chat is left as it
        is (the task is done at once). Either way the connection stops keeping the agent's
        session once its work is done and its sockets are closed."""
        self._check_open()
        session = agent.session
        task = Task(_CLOSE)
        if archive:
            self._start_job(task, session.dispose(now=now), now, session=session)
        else:
            self._perform(session.close_retained_stream(now), session=session, now=now)
            task._settle(None)
        self._release_session(session)
        self._check_done(task, now)
        return task

    def _start_machine(
        self, machine: Runnable[Any], *, now: float, session: Session | None = None
    ) -> Task:
        """Run a core machine built by hand (the transcript replay's turns and session
        calls): ``session`` shares that session's connections; its tool pauses come as
        ``InvokeTools`` with the raw ``run.calls`` and no invocations, answered with
        ``_tools_answered``. The task's result is the machine's."""
        self._check_open()
        task = Task(_MACHINE)
        self._start_job(task, machine, now, session=session, tools=_RAW_TOOLS)
        self._check_done(task, now)
        return task

    def _perform(self, actions: Iterable[Action], *, session: Session, now: float) -> None:
        """Take on the actions a session method returned (``reset_session``,
        ``close_retained_stream``) in that session's connection scope."""
        job = self._session_job(session)
        self._touched[job.scope] = None
        for action in actions:
            self._act(job, action, now)
        self._settle(now)

    def reset(self, agent: AgentCore, *, now: float) -> None:
        """Start a fresh chat on ``agent``'s next turn; a paused stream is closed."""
        session = agent.session
        recorder = self._recorder
        if recorder is not None:
            recorder.session_call("reset_session", now)
        self._perform(session.reset_session(now), session=session, now=now)

    # -- inputs ------------------------------------------------------------------------------

    def socket_made(self, conn: Conn, *, now: float) -> None:
        """``conn`` is connected (TLS included): the writes held meanwhile go out, then the
        machine hears ``connection_made``."""
        if conn.closed:
            return
        conn.connected = True
        for data in conn.pending:
            self._out.append(WriteSocket(conn, data))
        conn.pending.clear()
        self._touched[conn.scope] = None
        conn.scope.target().connection_made(conn.conn_id, now)
        self._settle(now)

    def socket_data(self, conn: Conn, data: bytes, *, now: float) -> None:
        """Bytes read from ``conn``. A session's stream socket hands them straight to the
        reader of the stream that opened it (its D6 pause limits checked while it is paused),
        then the session's running turn steps; any other socket's bytes go to its machine."""
        if conn.closed:
            return
        scope = conn.scope
        self._touched[scope] = None
        route = conn.route
        target = scope.target()
        if route is None:
            target.data_received(conn.conn_id, data, now)
        else:
            stream, reader, reader_conn = route
            due = reader.next_deadline()
            reader.data_received(reader_conn, data, now)
            if stream.paused_at is not None:
                stream.check_pause_limits(now)
            if target is not scope.session:
                target.resume(now)
                if target.quiet and self._settled_quietly(scope, stream, due, now):
                    return
        self._settle(now)

    def _settled_quietly(self, scope: _Scope, stream: Any, due: float | None, now: float) -> bool:
        """The settle of a text delta, in a few steps: the running turn only delivered parts
        of live deltas (``Turn.quiet``) and the stream's reader, the only other machine the
        bytes reached, has no action and kept its deadline (``due``, before the bytes), so
        nothing but the turn's task moved. False (a full settle follows) when any of that is
        not so, or a deadline fell due meanwhile: the reader's actions taken so far are
        taken on first."""
        heap = self._heap
        if stream.reader.next_deadline() != due or (heap and heap[0][0] <= now):
            return False
        taken = stream.reader.actions()
        if taken:
            # Connection actions: any job of the scope takes them on alike.
            job = next(iter(scope.jobs))
            for action in stream.relay(taken):
                self._act(job, action, now)
            return False
        self._touched.pop(scope, None)
        self._moved += [job for job in scope.jobs if job.owner is not None]
        self._wake(now)
        return True

    def socket_closed(
        self, conn: Conn, error: BaseException | str | None = None, *, now: float
    ) -> None:
        """``conn`` ended: the peer closed it (EOF), or with ``error`` connecting, TLS,
        reading or writing failed (the message is scrubbed). The socket is finished; the
        machine answers with ``CloseConnection``, which needs no command any more."""
        if conn.closed:
            return
        self._forget(conn)
        self._touched[conn.scope] = None
        target = conn.scope.target()
        recorder = self._recorder if conn.scope.session is not None else None
        if error is None:
            target.connection_lost(conn.conn_id, now)
            if recorder is not None:
                recorder.connection_lost(conn.conn_id, now)
        else:
            message = self._redactor.text(describe_error(error))
            target.connection_failed(conn.conn_id, message, now)
            if recorder is not None:
                recorder.connection_failed(conn.conn_id, message, now)
        self._settle(now)

    def http_finished(
        self,
        call: HttpExchange,
        *,
        status: int = 0,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        reason: str = "",
        error: BaseException | str | None = None,
        now: float,
    ) -> None:
        """``call`` was answered (``status``, ``headers``, ``reason`` and the whole ``body``):
        the machine hears ``response_received`` (header names lower-cased); or with ``error``
        it got no complete response: the ``http:error`` event when no status line came, then
        ``request_failed`` with the scrubbed message."""
        if call.finished:
            return
        if error is not None:
            self._http_failed(call, error, now)
            return
        call.status_received(status, now=now)
        self._finish_call(call)
        redactor = self._redactor
        ok = 200 <= status <= 299
        if redactor:
            # An error answer is error text all through; a success keeps its content and
            # loses the token from the error objects in it (docs/robustness.md).
            body = redactor.json_data(body) if ok else redactor.data(body)
            headers = redactor.headers(headers)
            reason = redactor.text(reason)
        answer = HttpResponse(
            status=status,
            body=body,
            headers=tuple((k.lower(), v) for k, v in headers),
            reason=reason,
        )
        job = call.job
        if self._recorder is not None:
            self._record_begin(job.scope.session, now)
            self._recorder.rest_exchange(call.request, answer, sent=call.started, now=now)
        self._touched[job.scope] = None
        job.machine.response_received(call.request_id, answer, now)
        self._settle(now)

    def tool_finished(
        self,
        run: ToolBatch,
        invocation: ToolInvocation,
        *,
        value: Any = None,
        error: BaseException | None = None,
        outcome: ToolOutcome | None = None,
        now: float,
    ) -> None:
        """``invocation``'s function returned ``value`` (awaited when it was awaitable) or
        raised ``error`` (the model gets it as an error result); ``outcome`` instead is the
        result the embedder made itself with ``invocation.succeeded`` / ``failed`` (after an
        observer's hook saw it). The run's calls go back to the model once every invocation
        was reported, in the order of ``run.invocations`` (missing outcomes become error
        results in the core, D5); a repeated or late report is ignored."""
        tool_call_id = invocation.tool_call_id
        if run.finished or tool_call_id not in run._waiting:
            return
        if outcome is None:
            outcome = invocation.failed(error) if error is not None else invocation.succeeded(value)
        run._waiting.discard(tool_call_id)
        run._results[tool_call_id] = outcome
        if not run._waiting:
            results = run._results
            outcomes = [*run._outcomes, *(results[i.tool_call_id] for i in run.invocations)]
            self._tools_done(run, outcomes, now)

    def _tools_answered(
        self, run: ToolBatch, outcomes: Sequence[ToolOutcome], *, now: float
    ) -> None:
        """The outcomes of a ``_start_machine`` task's pause, decided by the caller (a call
        without an outcome gets an error result; a run already finished or cancelled ignores
        them)."""
        if run.finished:
            return
        run._waiting.clear()
        self._tools_done(run, [*run._outcomes, *outcomes], now)

    def store_finished(
        self,
        call: StoreRequest,
        *,
        value: Any = None,
        error: BaseException | None = None,
        now: float,
    ) -> None:
        """The durable store call of an ``ApplyStore`` returned ``value`` (awaited when it was
        awaitable), or raised ``error`` (the job fails it as ``DurableStoreError``)."""
        if call.finished:
            return
        call.finished = True
        job = call.job
        stores = job.stores
        if stores is not None and stores.get(call.call_id) is call:
            del stores[call.call_id]
        self._touched[job.scope] = None
        if error is None:
            job.machine.store_result(call.call_id, value, now)
        else:
            job.machine.store_failed(call.call_id, error, now)
        self._settle(now)

    def tick(self, *, now: float) -> None:
        """The timer armed at ``next_deadline()`` fired: every due machine is ticked."""
        self._settle(now)

    def close(self, *, now: float | None = None) -> None:
        """Without ``now``: start no new task from now on (let the background work finish,
        then close again with ``now``). With ``now``: the end; every unfinished task is
        cancelled, each agent's paused stream closed cleanly, and every socket, request and
        tool run still open closed or cancelled. Idempotent."""
        self._closed = True
        if now is None:
            return
        touched = self._touched
        for job in list(self._jobs):
            touched[job.scope] = None
            if not job.machine.done:
                job.machine.cancel(now, None)
        for standing in list(self._sessions.values()):
            touched[standing.scope] = None
            for action in standing.machine.close_retained_stream(now):
                self._act(standing, action, now)
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
        self._waiters.clear()
        touched.clear()

    # -- tasks ---------------------------------------------------------------------------------

    def _cancel(self, task: Task, reason: BaseException | None, now: float) -> None:
        """Cancel ``task``'s machine (D22): ``reason`` is the caller's cancellation, or
        ``None`` for a consumer teardown. Its cleanup actions become commands at once;
        background work it starts is driven on."""
        job = task._job
        assert job is not None  # a task gets its connection with its job
        machine = job.machine
        if not machine.done:
            if self._recorder is not None and isinstance(machine, Turn):
                self._recorder.cancelled(reason, now)
            self._touched[job.scope] = None
            machine.cancel(now, reason)
            self._settle(now)
        self._check_done(task, now)

    def _check_open(self) -> None:
        if self._closed:
            raise CoderAgentError("this connection is closed")

    def _run_turn(self, task: Task, turn: Turn, now: float) -> None:
        agent = task._agent
        assert agent is not None
        self._start_job(task, turn, now, session=agent.session, tools=agent.plan_tools)

    def _start_job(
        self,
        task: Task,
        machine: Runnable[Any],
        now: float,
        *,
        session: Session | None = None,
        tools: Any = None,
    ) -> None:
        """Start driving ``machine`` (already started by its constructor) for ``task``. With
        ``session``, its connections are the session's and routed by the routing rule;
        ``tools`` is the tool-call policy of its ``RunTools`` pauses."""
        if self._closed:
            raise CoderAgentError("this client is closed")
        job = self._attach(machine, now, session=session, tools=tools)
        self._settle(now)
        self._own(job, task)

    def _attach(
        self,
        machine: Runnable[Any],
        now: float,
        *,
        session: Session | None = None,
        tools: Any = None,
    ) -> MachineSlot:
        """Drive ``machine`` from the next settle on, in ``session``'s scope or its own."""
        scope = self._session_job(session).scope if session is not None else None
        if self._recorder is not None and session is not None:
            self._record_start(machine, session, now)
        return self._add(MachineSlot(machine, scope or _Scope(machine=machine), tools=tools))

    def _own(self, job: MachineSlot, task: Task) -> None:
        job.owner = task
        task._job = job
        task._connection = self

    def _check_done(self, task: Task, now: float) -> None:
        """Settle ``task`` when its machine finished (a ``generate`` turn may start the
        next turn of its ladder instead)."""
        job = task._job
        if task._settled or job is None or not job.machine.done:
            return
        machine = job.machine
        if isinstance(machine, WatchMachine) and machine.cancelled:
            task._settle(None)
            return
        try:
            value = machine.result()
        except BaseException as exc:  # the machine's error, whatever its type
            task._settle(error=exc)
            return
        if task._kind == _GENERATE:
            call = task._generate
            assert call is not None
            try:
                step = call.advance(value, now=now)
            except CoderAgentError as exc:
                task._settle(error=exc)
                return
            if isinstance(step, Turn):
                self._run_turn(task, step, now)
                return
            task._settle(step)
        elif task._kind in (_STREAM, _SEGMENT):
            agent = task._agent
            assert agent is not None
            task._settle(agent.stream_result(value))
        elif task._kind == _CALL:
            try:
                task._settle(task._finish(value))
            except CoderAgentError as exc:
                task._settle(error=exc)
        else:
            task._settle(value)

    # -- internals -----------------------------------------------------------------------------

    def _http_failed(self, call: HttpExchange, error: BaseException | str, now: float) -> None:
        message = self._redactor.text(describe_error(error))
        # An answer the embedder refused (D30) fails the call with the library's own error.
        verdict: str | CoderAgentError = error if isinstance(error, CoderProtocolError) else message
        if call.observed and not call.answered:
            self._http_error(call, message, now)
        self._finish_call(call)
        job = call.job
        if self._recorder is not None:
            self._record_begin(job.scope.session, now)
            self._recorder.rest_exchange(
                call.request, None, sent=call.started, now=now, error=message
            )
        self._touched[job.scope] = None
        job.machine.request_failed(call.request_id, verdict, now)
        self._settle(now)

    def _tools_done(self, run: ToolBatch, outcomes: list[ToolOutcome], now: float) -> None:
        """Every call of ``run`` has its outcome: they go back to its machine."""
        run.finished = True
        job = run._job
        if job.tool_batch is run:
            job.tool_batch = None
        self._touched[job.scope] = None
        self._feed_tools(job, run.calls, outcomes, run.sent, now)
        self._settle(now)

    def _run_tools(self, job: MachineSlot, calls: tuple[ToolCall, ...], now: float) -> None:
        """A ``RunTools`` pause: the job's tool-call policy answers what it can decide; the
        calls that need their functions become an ``InvokeTools``."""
        policy = job.tools
        outcomes: list[ToolOutcome] = []
        invocations: Sequence[ToolInvocation] = ()
        if policy is not _RAW_TOOLS:
            if policy is not None:
                plan: ToolPlan = policy(calls)
                outcomes = list(plan.outcomes)
                invocations = plan.invocations
            if not invocations:
                # D5: every call still gets a result; the core reports the missing ones.
                self._feed_tools(job, calls, outcomes, now, now)
                self._dirty = True
                return
        run = ToolBatch(job, calls, now, outcomes, invocations)
        job.tool_batch = run
        self._out.append(InvokeTools(run))

    def _start_store(self, job: MachineSlot, action: StoreCall, now: float) -> None:
        runner = getattr(job.machine, "store", None)
        if runner is None:
            error = CoderAgentError("this machine was started without a durable store")
            job.machine.store_failed(action.call_id, error, now)
            self._dirty = True
            return
        call = StoreRequest(job, action.call_id, action.op, runner)
        if job.stores is None:
            job.stores = {}
        job.stores[action.call_id] = call
        self._out.append(ApplyStore(call))

    def _start_step_turn(self, job: MachineSlot, effect: Any, now: float) -> None:
        """A durable job's step turn (``StartStepTurn``): a ``generate`` task of the job's own,
        on an agent core the job builds on this connection. Its commands reach the embedder
        as the job's (``io`` is the job's task's): its tool pauses run with the job's
        invoker, and its ``TaskMoved`` wakes whoever waits on the job."""
        program = job.machine
        agent = program.turn_agent(
            effect,
            base_url=self._base_url,
            token=self._token,
            selector=self._selector,
            sink=self._sink,
        )
        agent.begin()
        task = Task(_GENERATE, agent=agent)
        task._parent = job
        owner = job.owner
        task.io = None if owner is None else owner.io
        call = agent.generate(prepare_prompt(effect.prompt).build(()), now=now)
        task._generate = call
        self._own(self._attach(call.turn, now, session=agent.session, tools=agent.plan_tools), task)
        program.turn = task
        self._dirty = True

    def _cancel_step_turn(self, job: MachineSlot, reason: BaseException | None, now: float) -> None:
        """Cancel a durable job's running step turn (``CancelStepTurn``), as ``_cancel`` does
        a task's, its settle left to the one running."""
        task = job.machine.turn
        turn = task._job
        machine = turn.machine
        if machine.done:
            # Ended meanwhile (the connection's end cancels every job): reported as it went.
            return
        if self._recorder is not None:
            self._recorder.cancelled(reason, now)
        self._touched[turn.scope] = None
        machine.cancel(now, reason)
        self._dirty = True

    def _step_turn_ended(self, task: Task, job: MachineSlot, now: float) -> None:
        """The step turn ``task`` of the durable job ``job`` ended: its agent is closed without
        archiving (archiving ends resumability: its paused stream closed, its session
        forgotten once idle) and the job told, with how to know that the session's
        background work (the interrupt a cut turn fired) is still running."""
        agent = task._agent
        assert agent is not None
        session = agent.session
        # As ``start_close`` without archiving does.
        self._perform(session.close_retained_stream(now), session=session, now=now)
        scope = self._session_job(session).scope
        self._release_session(session)
        try:
            value, error = task.result(), None
        except BaseException as exc:  # the turn's error, whatever its type
            value, error = None, exc

        waiters = self._waiters

        def closing() -> bool:
            if any(member.background and not member.machine.done for member in scope.jobs):
                waiters[scope] = job.scope
                return True
            waiters.pop(scope, None)
            return False

        self._touched[job.scope] = None
        job.machine.turn_ended(value, error, session, closing, now)
        self._settle(now)

    def _session_job(self, session: Session) -> MachineSlot:
        """The standing job of ``session``: the connection keeps driving it between turns
        (its paused stream keeps reading, H.6)."""
        job = self._sessions.get(id(session))
        if job is None or job.machine is not session:
            if job is not None:  # a session that was garbage-collected left its id behind
                job.retired = True
                job.deadline = None
            scope = _Scope(session=session)
            job = MachineSlot(session, scope, standing=True)
            scope.standing = job
            self._sessions[id(session)] = job
            # What the session's stream readers see goes to this connection's recorder.
            session.ws_observer = self._tap()
        job.scope.releasing = False
        return job

    def _release_session(self, session: Session) -> None:
        """Stop keeping ``session`` (its agent is closed): it is forgotten as soon as its
        turns, cleanup and background jobs are finished and its connections closed, at once
        when they already are. Starting work on it again keeps it. The session was taken on
        just before (its close or its dispose)."""
        scope = self._session_job(session).scope
        scope.releasing = True
        self._drop_released(scope)

    def _drop_released(self, scope: _Scope) -> None:
        """Forget a released session whose scope has nothing left to drive."""
        standing = scope.standing
        if standing is None or scope.jobs:
            return
        if any(conn.scope is scope for conn in self._conns.values()):
            return
        key = id(standing.machine)
        if self._sessions.get(key) is standing:
            del self._sessions[key]
        scope.releasing = False
        scope.standing = None
        standing.retired = True
        standing.deadline = None

    def _add(self, job: MachineSlot) -> MachineSlot:
        """Drive ``job`` from now on; the next settle visits its scope."""
        self._jobs[job] = None
        job.scope.jobs[job] = None
        if job.background:
            self._background += 1
        self._touched[job.scope] = None
        return job

    def _retire(self, job: MachineSlot) -> None:
        del self._jobs[job]
        job.scope.jobs.pop(job, None)
        if job.background:
            self._background -= 1
        job.retired = True
        job.deadline = None

    def _settle(self, now: float) -> None:
        """Take on every pending action and tick every due machine of the scopes that may
        have moved (the ones inputs reached, the ones whose deadline fell due) until nothing
        moves (at most ``MAX_ROUNDS`` rounds), then retire their finished jobs, file their
        next deadlines and wake their tasks."""
        touched = self._touched
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, job = heapq.heappop(heap)
            if job.deadline == deadline:
                # Filed again after the settle if it is still armed.
                job.deadline = None
                touched[job.scope] = None
        # The deadlines of the last round's jobs: a round in which nothing moved leaves them
        # as they are, and the jobs' deadlines are filed from them.
        seen: dict[MachineSlot, float | None] = {}
        for _ in range(MAX_ROUNDS):
            self._dirty = False
            busy = False
            seen.clear()
            waiters = self._waiters
            for scope in list(touched):
                if waiters:
                    waiter = waiters.get(scope)
                    if waiter is not None and waiter not in touched:
                        # A durable job waits for this session's background work.
                        touched[waiter] = None
                        self._dirty = True
                for job in scope.members():
                    if job.standing and not job.active():
                        seen[job] = None
                        continue
                    machine = job.machine
                    for action in machine.actions():
                        busy = True
                        self._act(job, action, now)
                    deadline = machine.next_deadline()
                    if deadline is not None and deadline <= now:
                        busy = True
                        machine.tick(now)
                    seen[job] = deadline
            if not busy and not self._dirty:
                break
        else:
            # Still moving after MAX_ROUNDS: what the last round saw is out of date.
            seen.clear()
        self._reap(now, seen)
        self._wake(now)

    def _wake(self, now: float) -> None:
        """A ``TaskMoved`` for each task whose machine a settle visited, its task settled
        first when the machine finished (a ``generate`` turn may start the next turn of its
        ladder instead, settling on its own)."""
        while self._moved:
            moved = self._moved
            self._moved = []
            for job in moved:
                task = job.owner
                if task is not None and task._job is job:
                    self._check_done(task, now)
                    parent = task._parent
                    if parent is not None and task._settled and parent.machine.turn is task:
                        self._step_turn_ended(task, parent, now)
                    self._out.append(TaskMoved(task))

    def _reap(self, now: float, seen: dict[MachineSlot, float | None]) -> None:
        moved = self._moved
        touched = self._touched
        for scope in touched:
            for job in list(scope.jobs):
                if job.owner is not None:
                    moved.append(job)
                if not job.machine.done:
                    continue
                if self._recorder is not None and isinstance(job.machine, Turn):
                    machine = job.machine
                    self._recorder.turn_finished(
                        machine.error if machine.error is not None else machine.result(), now
                    )
                self._release(job, now)
                self._retire(job)
            if scope.releasing:
                self._drop_released(scope)
            for job in scope.members():
                self._file_deadline(job, seen.get(job, _UNSEEN))
        touched.clear()

    def _file_deadline(self, job: MachineSlot, seen: object) -> None:
        """Record ``job``'s next deadline in the heap (none while it is inactive): the one the
        settle's last round saw, or (``_UNSEEN``) asked of its machine now."""
        deadline: float | None
        if seen is _UNSEEN:
            deadline = job.machine.next_deadline() if job.active() else None
        else:
            deadline = cast("float | None", seen)
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

    def _release(self, job: MachineSlot, now: float) -> None:
        """Cancel what a finished (or abandoned) job still has in flight."""
        for call in list(job.requests.values()):
            self._cancel_call(call, now)
        job.requests.clear()
        run = job.tool_batch
        if run is not None:
            run.finished = True
            job.tool_batch = None
            self._out.append(CancelTools(run))
        if job.stores:
            for store in job.stores.values():
                # Left to finish on its own (a store call is never cut halfway); ignored.
                store.finished = True
            job.stores.clear()

    def _act(self, job: MachineSlot, action: Action, now: float) -> None:
        if self._recorder is not None and job.scope.session is not None:
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
            session = job.scope.session
            if session is not None:
                conn.route = session.route(action.conn_id)
            self._conns[(job.scope, action.conn_id)] = conn
            self._out.append(OpenSocket(conn))
        elif isinstance(action, CloseConnection):
            conn = self._conns.get((job.scope, action.conn_id))
            if conn is not None:
                self._close_conn(conn)
        elif isinstance(action, RunTools):
            self._run_tools(job, action.calls, now)
        elif isinstance(action, RunInBackground):
            parent = job.scope
            scope = parent if parent.session is not None else _Scope(machine=action.job)
            self._add(MachineSlot(action.job, scope, background=True))
            self._dirty = True
        else:
            # Only durable jobs ask for these: their modules load with the first one.
            from .durable._program_job import CancelStepTurn, StartStepTurn
            from .durable._store import StoreCall

            if isinstance(action, StoreCall):
                self._start_store(job, action, now)
            elif isinstance(action, StartStepTurn):
                self._start_step_turn(job, action.effect, now)
            elif isinstance(action, CancelStepTurn):
                self._cancel_step_turn(job, action.reason, now)
            else:  # pragma: no cover - every action is above
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

    def _start_call(
        self, job: MachineSlot, request_id: int, request: HttpRequest, now: float
    ) -> None:
        sink = self._sink
        observed = sink.enabled and emits_transport_events(request)
        event_id = next(self._http_ids) if observed else 0
        headers = list(request.headers)
        if self._token:
            headers.append((SESSION_TOKEN_HEADER, self._token))
        call = HttpExchange(
            job,
            request_id,
            request,
            url=self._base_url + request.path,
            headers=headers,
            sink=sink if observed else None,
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

    def _finish_call(self, call: HttpExchange) -> None:
        call.finished = True
        requests = call.job.requests
        if requests.get(call.request_id) is call:
            del requests[call.request_id]

    def _cancel_call(self, call: HttpExchange, now: float) -> None:
        """Abandon ``call``, still in flight (its job's registry held it until now)."""
        if call.observed and not call.answered:
            self._http_error(call, CANCELLED_MESSAGE, now)
        self._finish_call(call)
        if self._recorder is not None:
            self._recorder.rest_exchange(call.request, None, sent=call.started, now=now)
        self._out.append(CancelHttp(call))

    def _http_error(self, call: HttpExchange, message: str, now: float) -> None:
        request = call.request
        sink = self._sink
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
        job: MachineSlot,
        calls: tuple[ToolCall, ...],
        outcomes: list[ToolOutcome],
        sent: float,
        now: float,
    ) -> None:
        if self._recorder is not None:
            self._recorder.tools_run(calls, outcomes, sent=sent, now=now)
        job.machine.tool_results(outcomes, now)

    # -- transcripts (docs/transcripts.md) -----------------------------------------------------

    def _record_begin(self, session: Session | None, now: float) -> None:
        recorder = self._recorder
        if recorder is not None and not self._recording:
            self._recording = True
            config = session.config if session is not None else None
            recorder.begin(
                base_url=self._base_url, config=config, created_at=self._created_at(), now=now
            )

    def _record_start(self, machine: Any, session: Session, now: float) -> None:
        recorder = self._recorder
        assert recorder is not None
        # A machine is started by its constructor, with the adapter's clock read then: its
        # deadlines count from that time, so the transcript starts it then too (a replay
        # arms them where the live run did).
        started = machine.now if isinstance(machine, CoreMachine) else now
        if started > now:
            started = now
        now = started
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
        recorder = self._recorder
        assert recorder is not None
        if isinstance(action, OpenConnection):
            recorder.connection_opened(action, now)
        elif isinstance(action, CloseConnection):
            recorder.connection_closed(action.conn_id, now)
