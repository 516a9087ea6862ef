"""Offline replay: run a transcript through the core's machines with no sockets and no clock
(docs/architecture.md rule 2: the same inputs always give the same outputs).

``replay(transcript)`` builds a ``Session`` from the header's settings and runs its machines on
a ``Connection``, as the adapters do (the connection routes every input and drives the
background jobs, D22), with the transcript performing the connection's commands in place of
the world:

* each request (``StartHttp``) is answered by the first unused recorded exchange with the same op,
  method and path (a recorded network error fails it, a recorded cancellation leaves it
  unanswered until the machine cancels it);
* the n-th ``OpenSocket`` replays the n-th recorded connection: the upgrade answer, every
  text frame (framed here, server side), the close frame, the ending (a recorded protocol
  failure is a frame no client accepts, or, before the upgrade was answered, a 101 with a
  wrong ``Sec-WebSocket-Accept``);
* each tool pause (``InvokeTools``) is answered by the next recorded tool run;
* every input is fed at its recorded time (or as soon as it becomes possible, when the
  machine asked later than recorded), and ``now`` is the recorded relative time; the
  machines' own deadlines fire at their times.

Anything the transcript cannot answer is a *divergence*: the request fails with
``"not in the transcript"`` (a connection likewise, a tool with an error result), the
divergence is listed in the result, and the replay goes on, so a mutated or truncated
transcript still ends deterministically. A turn still running when nothing more can happen is
cancelled and reported with a ``TranscriptError``.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import attrs
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, RejectData, Request
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .._actions import ToolOutcome
from .._agent.session import Session
from .._agent.session_state import SessionConfig
from .._agent.turn import Turn, TurnResult
from .._connection import (
    CancelHttp,
    CloseSocket,
    Conn,
    Connection,
    ConnectionCommand,
    HttpExchange,
    InvokeTools,
    OpenSocket,
    StartHttp,
    Task,
    ToolBatch,
    WriteSocket,
)
from .._errors import CoderAgentError
from .._outputs import OutputPart
from .._transport_events import TransportEventSink
from ._fields import TranscriptError
from ._format import Transcript
from ._outcomes import outcome_summary
from ._records import (
    Cancel,
    RestExchange,
    SessionCall,
    ToolRunRecord,
    TurnEnd,
    TurnStarted,
    WsAccept,
    WsClose,
    WsEnd,
    WsError,
    WsFrame,
    WsOpenRecord,
    WsReject,
)

__all__ = [
    "NOT_RECORDED",
    "ReplayResult",
    "ReplayTurn",
    "replay",
    "text_frame",
]

NOT_RECORDED: Final = "not in the transcript"
"""The failure message of a request, connection or tool the transcript cannot answer."""
#: The base URL of a transcript whose header has none.
_FALLBACK_BASE_URL: Final = "http://transcript.invalid"
#: Bounds that keep a replay of any transcript finite.
_MAX_STEPS: Final = 2_000_000
_INCOMPLETE: Final = "the transcript ended before the turn finished"


def text_frame(text: str) -> bytes:
    """One unmasked, final WebSocket text frame carrying ``text`` (RFC 6455 5.2), as a server
    sends it. Text that is not valid Unicode (a lone surrogate) is sent as the bytes Python's
    ``surrogatepass`` gives, which a client must refuse (close 1007)."""
    payload = text.encode("utf-8", "surrogatepass")
    return _frame(0x81, payload)


def _frame(first: int, payload: bytes) -> bytes:
    size = len(payload)
    if size < 126:
        head = bytes((first, size))
    elif size < 1 << 16:
        head = bytes((first, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((first, 127)) + size.to_bytes(8, "big")
    return head + payload


def _close_frame(code: int, reason: str) -> bytes:
    payload = code.to_bytes(2, "big") + reason.encode("utf-8", "replace")[:123]
    return _frame(0x88, payload)


#: A frame with a reserved bit set: every client must fail the connection (RFC 6455 5.2).
_PROTOCOL_VIOLATION: Final = bytes((0xC1, 0x00))
#: A 101 whose ``Sec-WebSocket-Accept`` cannot match any key: every client fails the
#: handshake (RFC 6455 4.1).
_BAD_UPGRADE: Final = (
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Accept: not-the-key\r\n\r\n"
)


@attrs.frozen(kw_only=True)
class ReplayTurn:
    """One replayed turn: its ``result`` (or ``error``), every output part it produced, and
    the live outcome the transcript recorded for it (``recorded``, ``None`` when absent)."""

    mode: str
    result: TurnResult | None
    error: BaseException | None
    parts: tuple[OutputPart, ...]
    recorded: dict[str, Any] | None = None

    def summary(self) -> dict[str, Any]:
        """``outcome_summary`` of the replayed outcome (comparable with ``recorded``)."""
        return outcome_summary(self.error if self.error is not None else self.result)

    @property
    def matches_recording(self) -> bool | None:
        """Whether the replay reproduced the recorded outcome (``None``: none recorded)."""
        if self.recorded is None:
            return None
        return bool(_comparable(self.summary()) == _comparable(self.recorded))

    def to_json(self, *, parts: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, **self.summary()}
        if parts:
            out["parts"] = [_part_json(p) for p in self.parts]
        out["matches_recording"] = self.matches_recording
        return out


def _comparable(summary: dict[str, Any]) -> Any:
    # A JSON round trip makes tuples lists and keys strings, as a recorded summary has them.
    return json.loads(json.dumps(summary, default=repr))


def _part_json(part: OutputPart) -> dict[str, Any]:
    out = part.to_dict()
    return json.loads(json.dumps(out, default=repr))  # type: ignore[no-any-return]


@attrs.frozen(kw_only=True)
class ReplayResult:
    """What a replay produced: the turns in order, the session calls' outcomes
    (``(name, error message or None)``), the divergences from the transcript, and the
    recorded REST exchanges the replay never asked for."""

    turns: tuple[ReplayTurn, ...] = ()
    calls: tuple[tuple[str, str | None], ...] = ()
    divergences: tuple[str, ...] = ()
    unused_exchanges: tuple[str, ...] = ()
    chat_id: str | None = None
    last_seen_message_id: int | None = None

    @property
    def faithful(self) -> bool:
        """No divergence, and every turn with a recorded outcome reproduced it."""
        return not self.divergences and all(t.matches_recording is not False for t in self.turns)

    def to_json(self, *, parts: bool = True) -> dict[str, Any]:
        return {
            "turns": [t.to_json(parts=parts) for t in self.turns],
            "calls": [{"name": n, "error": e} for n, e in self.calls],
            "divergences": list(self.divergences),
            "unused_exchanges": list(self.unused_exchanges),
            "chat_id": self.chat_id,
            "last_seen_message_id": self.last_seen_message_id,
            "faithful": self.faithful,
        }


class _RecordingTurn(Turn):
    """A ``Turn`` that also keeps every part it produced, in either mode (a generate-mode turn
    otherwise only builds its steps from them)."""

    def __init__(self, session: Session, prompt: object, *, collected: list[OutputPart], **kw: Any):
        self.collected = collected
        super().__init__(session, prompt, **kw)

    def _hand_off(self) -> Callable[[list[OutputPart]], None]:
        hand_on = super()._hand_off() or self._put_parts
        collected = self.collected

        def deliver(parts: list[OutputPart]) -> None:
            collected.extend(parts)
            hand_on(parts)

        return deliver


class _ServerConn:
    """The server end of one replayed connection: answers the upgrade from the recording and
    frames the recorded events."""

    def __init__(self, conn: Conn, records: list[Any] | None) -> None:
        self.conn = conn
        self.conn_id = conn.conn_id
        self.records = records
        self.ws = WSConnection(ConnectionType.SERVER)
        self.requested = False
        self.accepted = False
        self.closed = False  # by the client
        self.ended = False  # by the server side (lost/failed)
        self.target: str | None = None


class _Replayer:
    def __init__(self, transcript: Transcript, *, sink: TransportEventSink | None) -> None:
        header = transcript.header
        base_url = header.base_url or _FALLBACK_BASE_URL
        try:
            config = SessionConfig(base_url=base_url, token=None, **header.settings.config_kwargs())
        except CoderAgentError as exc:
            raise TranscriptError(f"the header's settings are invalid: {exc.message}") from None
        self.session = Session(config, sink=sink)
        # The connection runs the machines (the routing rule, background jobs, deadlines);
        # the transcript performs its commands.
        self.connection = Connection(base_url=base_url)
        self.now = 0.0
        self.divergences: list[str] = []
        self._seq = itertools.count()
        self._inbox: list[tuple[float, int, Any, Callable[[], None]]] = []
        self._cancelled_keys: set[Any] = set()
        # REST: recorded exchanges by (op, method, path), in order.
        self._rest: dict[tuple[str, str, str], deque[RestExchange]] = {}
        self._rest_all: list[RestExchange] = []
        self._used: set[int] = set()
        # Connections: recorded ones in dial order, with their records.
        self._conn_records: dict[int, list[Any]] = {}
        self._conn_order: deque[int] = deque()
        self._conns: dict[int, _ServerConn] = {}
        self._tools: deque[ToolRunRecord] = deque()
        self._control: deque[Any] = deque()
        for record in transcript.records:
            if isinstance(record, RestExchange):
                key = (record.op, record.method, record.path)
                self._rest.setdefault(key, deque()).append(record)
                self._rest_all.append(record)
            elif isinstance(record, WsOpenRecord):
                if record.conn not in self._conn_records:
                    self._conn_order.append(record.conn)
                self._conn_records[record.conn] = [record]
            elif isinstance(record, WsAccept | WsFrame | WsClose | WsReject | WsError | WsEnd):
                recs = self._conn_records.get(record.conn)
                if recs is None:
                    self._conn_order.append(record.conn)
                    recs = self._conn_records[record.conn] = []
                recs.append(record)
            elif isinstance(record, ToolRunRecord):
                self._tools.append(record)
            else:
                self._control.append(record)
        self.foreground: Task | None = None
        self.side: list[tuple[int, Task]] = []
        self.turns: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str | None]] = []
        self.stopped = False

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        steps = 0
        while True:
            steps += 1
            if steps > _MAX_STEPS:
                self._stop("the replay did not settle (step budget exhausted)")
                return
            if self.stopped:
                return
            if self._settle_once():
                continue
            if self._finished():
                return
            due = self._next_time()
            if due is None:
                if self.foreground is not None and not self.foreground.done:
                    self._stop(_INCOMPLETE)
                    continue
                return
            self.now = max(self.now, due)

    def _finished(self) -> bool:
        if self._control or self._inbox:
            return False
        if self.foreground is not None and not self.foreground.done:
            return False
        if self.connection.stats.background_jobs:
            return False
        return all(task.done for _, task in self.side)

    def _stop(self, why: str) -> None:
        task = self.foreground
        if task is not None and not task.done:
            self.divergences.append(why)
            task.cancel(None, now=self.now)
            self._perform_commands()
            self._collect_turn(task, override=TranscriptError(why))
        # Whatever the machines would still do can no longer hear from the transcript.
        self.stopped = True

    def _next_time(self) -> float | None:
        times = [item[0] for item in self._inbox]
        deadline = self.connection.next_deadline()
        if deadline is not None:
            times.append(deadline)
        control = self._control[0] if self._control else None
        if control is not None and self._control_ready(control, ignore_time=True):
            times.append(control.t)
        if not times:
            return None
        return min(times)

    def _settle_once(self) -> bool:
        connection = self.connection
        busy = self._perform_commands()
        deadline = connection.next_deadline()
        if deadline is not None and deadline <= self.now:
            connection.tick(now=self.now)
            busy = True
        if busy:
            return True
        task = self.foreground
        if task is not None and task.done and not self._collected(task):
            self._collect_turn(task)
            return True
        if self._inbox and self._inbox[0][0] <= self.now:
            _, _, key, deliver = heapq.heappop(self._inbox)
            if key is None or key not in self._cancelled_keys:
                deliver()
            return True
        if self._control and self._control_ready(self._control[0], ignore_time=False):
            self._run_control(self._control.popleft())
            return True
        for entry in list(self.side):
            index, side = entry
            if side.done:
                self.side.remove(entry)
                error: BaseException | None = None
                try:
                    side.result()
                except BaseException as exc:  # the call's error, recorded as text
                    error = exc
                name = self.calls[index][0]
                self.calls[index] = (name, str(error) if error is not None else None)
        return False

    def _perform_commands(self) -> bool:
        commands = self.connection.commands()
        for command in commands:
            self._perform(command)
        return bool(commands)

    # -- control records -----------------------------------------------------------------------

    def _control_ready(self, record: Any, *, ignore_time: bool) -> bool:
        if not ignore_time and record.t > self.now:
            return False
        if isinstance(record, TurnStarted):
            return self.foreground is None or self.foreground.done
        return True

    def _run_control(self, record: Any) -> None:
        if isinstance(record, TurnStarted):
            self._start_turn(record)
        elif isinstance(record, TurnEnd):
            if self.turns and self.turns[-1].get("recorded") is None:
                self.turns[-1]["recorded"] = record.outcome
        elif isinstance(record, Cancel):
            task = self.foreground
            if task is not None and not task.done:
                task.cancel(None, now=self.now)
        else:
            assert isinstance(record, SessionCall)
            self._session_call(record)

    def _start_turn(self, record: TurnStarted) -> None:
        collected: list[OutputPart] = []
        entry: dict[str, Any] = {"mode": record.mode, "parts": collected, "recorded": None}
        self.turns.append(entry)
        try:
            turn = _RecordingTurn(
                self.session,
                list(record.prompt),
                collected=collected,
                now=self.now,
                mode=record.mode,
                tools=record.tools,
                single_segment=record.single_segment,
                warnings=record.warnings,
            )
        except CoderAgentError as exc:
            entry.update(result=None, error=exc, done=True)
            return
        task = self.connection._start_machine(turn, session=self.session, now=self.now)
        entry["task"] = task
        self.foreground = task

    def _collected(self, task: Task) -> bool:
        return any(entry.get("task") is task and entry.get("done") for entry in self.turns)

    def _collect_turn(self, task: Task, override: BaseException | None = None) -> None:
        for entry in self.turns:
            if entry.get("task") is task:
                if override is not None:
                    entry.update(result=None, error=override)
                else:
                    try:
                        entry.update(result=task.result(), error=None)
                    except BaseException as exc:  # the turn's error
                        entry.update(result=None, error=exc)
                entry["done"] = True

    def _session_call(self, record: SessionCall) -> None:
        session = self.session
        name = record.name
        try:
            if name == "reset_session":
                self.connection._perform(
                    session.reset_session(self.now), session=session, now=self.now
                )
                self.calls.append((name, None))
                return
            machine: Any
            if name == "interrupt":
                machine = session.interrupt(now=self.now, wait=record.wait, timeout=record.timeout)
            elif name == "archive":
                machine = session.archive(now=self.now)
            else:
                machine = session.dispose(now=self.now)
        except CoderAgentError as exc:
            self.calls.append((name, str(exc)))
            return
        # Calls are listed in the order they were made; the outcome is filled in when done.
        self.calls.append((name, None))
        task = self.connection._start_machine(machine, session=session, now=self.now)
        self.side.append((len(self.calls) - 1, task))

    # -- commands ------------------------------------------------------------------------------

    def _schedule(self, due: float, key: Any, deliver: Callable[[], None]) -> None:
        heapq.heappush(self._inbox, (max(due, self.now), next(self._seq), key, deliver))

    def _perform(self, command: ConnectionCommand) -> None:
        if isinstance(command, StartHttp):
            self._request(command.call)
        elif isinstance(command, CancelHttp):
            self._cancelled_keys.add(command.call)
        elif isinstance(command, OpenSocket):
            self._open(command.conn)
        elif isinstance(command, WriteSocket):
            self._send(command.conn, command.data)
        elif isinstance(command, CloseSocket):
            conn = self._conns.get(id(command.conn))
            if conn is not None:
                conn.closed = True
        elif isinstance(command, InvokeTools):
            self._run_tools(command.run)
        # CancelTools: a recorded run is answered at its time or not at all; TaskMoved: the
        # loop looks at its tasks after every step.

    def _request(self, call: HttpExchange) -> None:
        request = call.request
        connection = self.connection
        queue = self._rest.get((request.op, request.method, request.path))
        if not queue:
            self.divergences.append(
                f"{request.method} {request.path} ({request.op}) at {self.now:.3f}s: {NOT_RECORDED}"
            )
            self._schedule(
                self.now,
                call,
                lambda: connection.http_finished(call, error=NOT_RECORDED, now=self.now),
            )
            return
        record = queue.popleft()
        self._used.add(id(record))
        if (
            record.request is not None
            and request.json is not None
            and _comparable(record.request) != _comparable(request.json)
        ):
            self.divergences.append(
                f"{request.method} {request.path} ({request.op}) at {self.now:.3f}s: "
                "the request body differs from the recorded one"
            )
        response = record.http_response()
        if response is not None:
            answer = response
            self._schedule(
                record.t,
                call,
                lambda: connection.http_finished(
                    call,
                    status=answer.status,
                    headers=answer.headers,
                    body=answer.body,
                    reason=answer.reason,
                    now=self.now,
                ),
            )
        elif record.error is not None:
            message = record.error
            self._schedule(
                record.t, call, lambda: connection.http_finished(call, error=message, now=self.now)
            )
        # A recorded cancellation: never answered (the machine cancels it again, or hangs).

    def _open(self, handle: Conn) -> None:
        recorded = self._conn_order.popleft() if self._conn_order else None
        records = self._conn_records.get(recorded) if recorded is not None else None
        conn = _ServerConn(handle, records)
        self._conns[id(handle)] = conn
        if records is None:
            self.divergences.append(f"connection {conn.conn_id} at {self.now:.3f}s: {NOT_RECORDED}")
            self._schedule(self.now, None, lambda: self._conn_input(conn, "failed", NOT_RECORDED))
            return
        body = [r for r in records if not isinstance(r, WsOpenRecord)]
        if body and isinstance(body[0], WsEnd) and body[0].how == "failed":
            # The connection itself failed (TCP, TLS, DNS): no upgrade happened.
            end = body[0]
            self._schedule(end.t, None, lambda: self._conn_input(conn, "failed", end.message or ""))
            return
        self._schedule(self.now, None, lambda: self._conn_input(conn, "made", None))

    def _conn_input(self, conn: _ServerConn, kind: str, payload: Any) -> None:
        if conn.closed or conn.ended:
            return
        connection = self.connection
        handle = conn.conn
        if kind == "made":
            connection.socket_made(handle, now=self.now)
        elif kind == "data":
            connection.socket_data(handle, payload, now=self.now)
        elif kind == "lost":
            conn.ended = True
            connection.socket_closed(handle, now=self.now)
        else:
            conn.ended = True
            connection.socket_closed(handle, payload, now=self.now)

    def _send(self, handle: Conn, data: bytes) -> None:
        conn = self._conns.get(id(handle))
        if conn is None or conn.requested or conn.closed or conn.ended:
            return
        try:
            conn.ws.receive_data(data)
            events = list(conn.ws.events())
        except (LocalProtocolError, RemoteProtocolError):
            return
        for event in events:
            if isinstance(event, Request):
                conn.requested = True
                conn.target = event.target
                self._answer_upgrade(conn, event)
                return

    def _answer_upgrade(self, conn: _ServerConn, request: Request) -> None:
        records = conn.records or []
        opened = next((r for r in records if isinstance(r, WsOpenRecord)), None)
        if opened is not None and opened.url is not None:
            recorded_target = _target_of(opened.url)
            if recorded_target is not None and recorded_target != request.target:
                self.divergences.append(
                    f"connection {conn.conn_id}: dialled {request.target}, "
                    f"the transcript has {recorded_target}"
                )
        for record in records:
            if isinstance(record, WsOpenRecord):
                continue
            data = self._bytes_for(conn, record)
            if data is not None:
                self._schedule(record.t, None, _bind(self._conn_input, conn, "data", data))
            elif isinstance(record, WsEnd):
                if record.how == "lost":
                    self._schedule(record.t, None, lambda: self._conn_input(conn, "lost", None))
                elif record.how == "failed":
                    message = record.message or ""
                    self._schedule(record.t, None, _bind(self._conn_input, conn, "failed", message))
                return  # nothing is read after the ending

    def _bytes_for(self, conn: _ServerConn, record: Any) -> bytes | None:
        if isinstance(record, WsReject):
            if conn.accepted:
                return None
            conn.accepted = True  # the handshake is answered either way
            body = record.body_data()
            headers = [(b"content-length", str(len(body)).encode())]
            out = conn.ws.send(
                RejectConnection(status_code=record.status, headers=headers, has_body=True)
            )
            return out + conn.ws.send(RejectData(data=body, body_finished=True))
        if isinstance(record, WsEnd):
            return None
        if isinstance(record, WsError) and not conn.accepted:
            # The reader refused the upgrade's answer: answer it wrongly again.
            conn.accepted = True
            return _BAD_UPGRADE
        prefix = b""
        if not conn.accepted:
            conn.accepted = True
            prefix = conn.ws.send(AcceptConnection())
        if isinstance(record, WsAccept):
            return prefix
        if isinstance(record, WsFrame):
            return prefix + text_frame(record.text)
        if isinstance(record, WsClose):
            return prefix + _close_frame(record.code, record.reason)
        assert isinstance(record, WsError)
        return prefix + _PROTOCOL_VIOLATION

    def _run_tools(self, run: ToolBatch) -> None:
        record = self._tools.popleft() if self._tools else None
        outcomes: list[ToolOutcome] = []
        by_id = {o.tool_call_id: o for o in record.outcomes} if record is not None else {}
        for call in run.calls:
            outcome = by_id.get(call.tool_call_id)
            if outcome is None:
                self.divergences.append(
                    f"tool call {call.tool_call_id} ({call.tool_name}) at {self.now:.3f}s: "
                    f"{NOT_RECORDED}"
                )
                outcome = ToolOutcome(
                    tool_call_id=call.tool_call_id, output=NOT_RECORDED, is_error=True
                )
            outcomes.append(outcome)
        due = record.t if record is not None else self.now
        connection = self.connection
        self._schedule(due, None, lambda: connection._tools_answered(run, outcomes, now=self.now))

    # -- the result ----------------------------------------------------------------------------

    def result(self) -> ReplayResult:
        turns = []
        for entry in self.turns:
            turns.append(
                ReplayTurn(
                    mode=entry["mode"],
                    result=entry.get("result"),
                    error=entry.get("error"),
                    parts=tuple(entry["parts"]),
                    recorded=entry.get("recorded"),
                )
            )
        unused = tuple(
            f"{r.method} {r.path} ({r.op}) at {r.sent:.3f}s"
            for r in self._rest_all
            if id(r) not in self._used
        )
        return ReplayResult(
            turns=tuple(turns),
            calls=tuple(self.calls),
            divergences=tuple(self.divergences),
            unused_exchanges=unused,
            chat_id=self.session.chat_id,
            last_seen_message_id=self.session.last_seen_message_id,
        )


def _bind(fn: Callable[..., None], *args: Any) -> Callable[[], None]:
    return lambda: fn(*args)


def _target_of(url: str) -> str | None:
    _scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    slash = rest.find("/")
    return rest[slash:] if slash >= 0 else "/"


def replay(transcript: Transcript, *, sink: TransportEventSink | None = None) -> ReplayResult:
    """Run ``transcript`` through the core offline (see the module docstring) and return what
    it produced. Deterministic: the same transcript always gives the same result. Raises
    ``TranscriptError`` only when the header's settings are invalid; everything else the
    transcript lacks is a divergence in the result."""
    replayer = _Replayer(transcript, sink=sink)
    replayer.run()
    return replayer.result()
