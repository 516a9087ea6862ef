"""Offline replay: run a transcript through the core's machines with no sockets and no clock
(docs/architecture.md rule 2: the same inputs always give the same outputs).

``replay(transcript)`` builds a ``Session`` from the header's settings and drives it the way
``tests/core_driver.py`` and the adapters do (connection inputs go to the running ``Turn``,
else to the session; background jobs run beside it, D22), with the transcript standing in for
the world:

* each ``SendRequest`` is answered by the first unused recorded exchange with the same op,
  method and path (a recorded network error fails it, a recorded cancellation leaves it
  unanswered until the machine cancels it);
* the n-th ``OpenConnection`` replays the n-th recorded connection: the upgrade answer, every
  text frame (framed here, server side), the close frame, the ending;
* each ``RunTools`` is answered by the next recorded tool run;
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

from .._actions import (
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
from .._agent.session import Session
from .._agent.session_state import SessionConfig
from .._agent.turn import Turn, TurnResult
from .._errors import CoderAgentError
from .._outputs import OutputPart, ToolCall
from .._transport_events import TransportEventSink
from ._fields import TranscriptError
from ._format import Transcript
from ._outcomes import outcome_summary
from ._records import (
    Cancel,
    RestExchange,
    SessionCall,
    ToolRun,
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

#: The failure message of a request, connection or tool the transcript cannot answer.
NOT_RECORDED: Final = "not in the transcript"
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

    def _deliver(self, parts: list[OutputPart]) -> None:
        self.collected.extend(parts)
        super()._deliver(parts)


class _ServerConn:
    """The server end of one replayed connection: answers the upgrade from the recording and
    frames the recorded events."""

    def __init__(self, conn_id: int, records: list[Any] | None) -> None:
        self.conn_id = conn_id
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
        self._tools: deque[ToolRun] = deque()
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
            elif isinstance(record, ToolRun):
                self._tools.append(record)
            else:
                self._control.append(record)
        self.foreground: Turn | None = None
        self.background: list[Any] = []
        self.side: list[tuple[str, Any]] = []
        self.turns: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str | None]] = []
        self.stopped = False

    # -- the loop ----------------------------------------------------------------------------

    def _machines(self) -> list[tuple[Any, bool]]:
        out: list[tuple[Any, bool]] = []
        if self.foreground is not None:
            out.append((self.foreground, True))
        out += [(m, True) for m in self.background]
        out += [(m, True) for _, m in self.side]
        if self.foreground is None or self.foreground.done:
            out.append((self.session, False))
        return out

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
        if any(not m.done for m in self.background):
            return False
        return all(m.done for _, m in self.side)

    def _stop(self, why: str) -> None:
        turn = self.foreground
        if turn is not None and not turn.done:
            self.divergences.append(why)
            turn.cancel(self.now, None)
            self._collect_turn(turn, override=TranscriptError(why))
        # Whatever the machines would still do can no longer hear from the transcript.
        self.stopped = True

    def _next_time(self) -> float | None:
        times = [item[0] for item in self._inbox]
        for machine, _ in self._machines():
            deadline = machine.next_deadline()
            if deadline is not None:
                times.append(deadline)
        control = self._control[0] if self._control else None
        if control is not None and self._control_ready(control, ignore_time=True):
            times.append(control.t)
        if not times:
            return None
        return min(times)

    def _settle_once(self) -> bool:
        busy = False
        for machine, _owns in self._machines():
            for action in machine.actions():
                self._perform(machine, action)
                busy = True
            deadline = machine.next_deadline()
            if deadline is not None and deadline <= self.now:
                machine.tick(self.now)
                busy = True
        if busy:
            return True
        turn = self.foreground
        if turn is not None and turn.done and not getattr(turn, "_replay_collected", False):
            self._collect_turn(turn)
            return True
        if self._inbox and self._inbox[0][0] <= self.now:
            _, _, key, deliver = heapq.heappop(self._inbox)
            if key is None or key not in self._cancelled_keys:
                deliver()
            return True
        if self._control and self._control_ready(self._control[0], ignore_time=False):
            self._run_control(self._control.popleft())
            return True
        self.background = [m for m in self.background if not m.done]
        for entry in list(self.side):
            if entry[1].done:
                self.side.remove(entry)
                error = entry[1].error
                index = int(entry[0])
                name = self.calls[index][0]
                self.calls[index] = (name, str(error) if error is not None else None)
        return False

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
            turn = self.foreground
            if turn is not None and not turn.done:
                turn.cancel(self.now, None)
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
        entry["turn"] = turn
        self.foreground = turn

    def _collect_turn(self, turn: Turn, override: BaseException | None = None) -> None:
        turn._replay_collected = True  # type: ignore[attr-defined]
        for entry in self.turns:
            if entry.get("turn") is turn:
                if override is not None:
                    entry.update(result=None, error=override)
                else:
                    error = turn.error
                    entry.update(result=None if error is not None else turn.result(), error=error)
                entry["done"] = True

    def _session_call(self, record: SessionCall) -> None:
        session = self.session
        name = record.name
        try:
            if name == "reset_session":
                for action in session.reset_session(self.now):
                    self._perform(session, action)
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
        self.side.append((str(len(self.calls) - 1), machine))

    # -- actions -----------------------------------------------------------------------------

    def _schedule(self, due: float, key: Any, deliver: Callable[[], None]) -> None:
        heapq.heappush(self._inbox, (max(due, self.now), next(self._seq), key, deliver))

    def _conn_target(self) -> Any:
        turn = self.foreground
        if turn is not None and not turn.done:
            return turn
        return self.session

    def _perform(self, machine: Any, action: Action) -> None:
        if isinstance(action, SendRequest):
            self._request(machine, action)
        elif isinstance(action, CancelRequest):
            self._cancelled_keys.add((id(machine), action.request_id))
        elif isinstance(action, OpenConnection):
            self._open(action)
        elif isinstance(action, SendData):
            self._send(action)
        elif isinstance(action, CloseConnection):
            conn = self._conns.get(action.conn_id)
            if conn is not None:
                conn.closed = True
        elif isinstance(action, RunTools):
            self._run_tools(machine, action.calls)
        elif isinstance(action, RunInBackground):
            self.background.append(action.job)
        else:  # pragma: no cover - every action is handled above
            raise AssertionError(f"unknown action {action!r}")

    def _request(self, machine: Any, action: SendRequest) -> None:
        request = action.request
        key = (id(machine), action.request_id)
        queue = self._rest.get((request.op, request.method, request.path))
        request_id = action.request_id
        if not queue:
            self.divergences.append(
                f"{request.method} {request.path} ({request.op}) at {self.now:.3f}s: {NOT_RECORDED}"
            )
            self._schedule(
                self.now, key, lambda: machine.request_failed(request_id, NOT_RECORDED, self.now)
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
            self._schedule(
                record.t, key, lambda: machine.response_received(request_id, response, self.now)
            )
        elif record.error is not None:
            message = record.error
            self._schedule(
                record.t, key, lambda: machine.request_failed(request_id, message, self.now)
            )
        # A recorded cancellation: never answered (the machine cancels it again, or hangs).

    def _open(self, action: OpenConnection) -> None:
        conn_id = action.conn_id
        recorded = self._conn_order.popleft() if self._conn_order else None
        records = self._conn_records.get(recorded) if recorded is not None else None
        conn = _ServerConn(conn_id, records)
        self._conns[conn_id] = conn
        if records is None:
            self.divergences.append(f"connection {conn_id} at {self.now:.3f}s: {NOT_RECORDED}")
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
        target = self._conn_target()
        conn_id = conn.conn_id
        if kind == "made":
            target.connection_made(conn_id, self.now)
        elif kind == "data":
            target.data_received(conn_id, payload, self.now)
        elif kind == "lost":
            conn.ended = True
            target.connection_lost(conn_id, self.now)
        else:
            conn.ended = True
            target.connection_failed(conn_id, payload, self.now)

    def _send(self, action: SendData) -> None:
        conn = self._conns.get(action.conn_id)
        if conn is None or conn.requested or conn.closed or conn.ended:
            return
        try:
            conn.ws.receive_data(action.data)
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

    def _run_tools(self, machine: Any, calls: tuple[ToolCall, ...]) -> None:
        record = self._tools.popleft() if self._tools else None
        outcomes: list[ToolOutcome] = []
        by_id = {o.tool_call_id: o for o in record.outcomes} if record is not None else {}
        for call in calls:
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
        self._schedule(due, None, lambda: machine.tool_results(outcomes, self.now))

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
