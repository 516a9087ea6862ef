"""How a ``Connection`` drives core machines, seen from its embedder: the routing rule of
``tests/core_driver.py`` (state machines H.6), the connection, request, tool and background
registries (D5, D22), the ``http:*`` transport events (wire 9, 11; D24), token scrubbing
(docs/architecture.md rule 6), transcripts (``docs/transcripts.md``) and settling (only the
scopes an input reached are visited; deadlines wait in a heap).

Two kinds of machines are driven here, each started as a plain call (``Operation``) on the
connection. ``Probe`` is a machine that does what the test tells it and records every input,
for the connection's mechanics. The real ``Session`` / ``Turn`` run against ``Adapter``, an
in-memory embedder performing the connection's commands: REST answered by a D25 world
(``tests.core_driver.CaseEnv``), sockets ending in wsproto server ends
(``tests.core_driver.FakeSocket``), a fake monotonic clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from wsproto.events import Ping

from coder_proto import (
    CancelHttp,
    CancelTools,
    CloseSocket,
    CoderAgentError,
    CoderNetworkError,
    Connection,
    HttpErrorEvent,
    HttpRequestEvent,
    HttpResponseEvent,
    InvokeTools,
    OpenSocket,
    StartHttp,
    Task,
    TaskMoved,
    TextDelta,
    ToolBatch,
    ToolCall,
    WriteSocket,
    tool,
)
from coder_proto._actions import (
    CancelRequest,
    CloseConnection,
    OpenConnection,
    RunInBackground,
    RunTools,
    SendData,
    SendRequest,
    ToolOutcome,
)
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._agent.tool_calls import ToolPlan, plan_tool_calls
from coder_proto._connection import MAX_ROUNDS, describe_error, scrub_token
from coder_proto._constants import SESSION_TOKEN_HEADER
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.routes import build_get_chat
from coder_proto._shells.client_calls import Operation
from coder_proto._stream.websocket import WsText
from coder_proto.transcript import TranscriptRecorder
from tests.core_driver import (
    CaseEnv,
    Hang,
    NetworkError,
    Respond,
    action_required,
    delta,
    message,
    status,
    weather_tool,
)
from tests.machine_call import plan_every_call
from tests.proto._connection_harness import NOW, ConnectionHarness

TOKEN = "tok-secret-4c1d"
BASE = "https://coder.test"


# -- a machine that does what the test says --------------------------------------------------------


class Probe:
    """A driveable machine: its first actions and deadline are given, every input is recorded
    in ``inputs`` and ``react`` is called after each one (to emit more, move the deadline or
    finish). Like a real machine it moves only in answer to an input: with ``heartbeat`` it
    keeps a deadline armed that often, and ``wake`` hands it actions at its next tick."""

    def __init__(
        self, *actions: Any, deadline: float | None = None, heartbeat: float | None = None
    ) -> None:
        self.outbox: list[Any] = list(actions)
        self.heartbeat = heartbeat
        self.deadline = deadline if heartbeat is None else NOW + heartbeat
        self.scheduled: list[Any] = []
        self.finish_at_tick = False
        self.inputs: list[tuple[Any, ...]] = []
        self.polls = 0
        self.ticks = 0
        self.value: Any = "done"
        self.react: Callable[[Probe, tuple[Any, ...]], None] | None = None
        self._done = False
        self.cancelled = False
        self.keep_past_deadline = False

    def __repr__(self) -> str:
        return "<Probe>"

    # the Runnable protocol
    @property
    def done(self) -> bool:
        return self._done

    def actions(self) -> list[Any]:
        self.polls += 1
        out, self.outbox = self.outbox, []
        return out

    def next_deadline(self) -> float | None:
        return None if self._done else self.deadline

    def tick(self, now: float) -> None:
        self.ticks += 1
        if self.deadline is not None and now >= self.deadline and not self.keep_past_deadline:
            self.deadline = None if self.heartbeat is None else now + self.heartbeat
        self.outbox.extend(self.scheduled)
        self.scheduled.clear()
        if self.finish_at_tick:
            self._done = True
        self._input("tick", now)

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None:
        self._input("response", request_id, response, now)

    def request_failed(self, request_id: int, message: str, now: float) -> None:
        self._input("failed", request_id, message, now)

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        self.cancelled = True
        self._input("cancel", reason, now)
        self._done = True

    def result(self) -> Any:
        return self.value

    # connection and tool inputs
    def connection_made(self, conn_id: int, now: float) -> None:
        self._input("made", conn_id, now)

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        self._input("conn_failed", conn_id, message, now)

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self._input("data", conn_id, data, now)

    def connection_lost(self, conn_id: int, now: float) -> None:
        self._input("lost", conn_id, now)

    def tool_results(self, outcomes: Any, now: float) -> None:
        self._input("tools", list(outcomes), now)

    # test controls
    def emit(self, *actions: Any) -> None:
        self.outbox.extend(actions)

    def finish(self, value: Any = "done") -> None:
        self.value = value
        self._done = True

    def kinds(self) -> list[Any]:
        return [i[0] for i in self.inputs if i[0] != "tick"]

    def _input(self, *record: Any) -> None:
        self.inputs.append(record)
        if self.react is not None:
            self.react(self, record)


class FakeSession:
    """What the drive needs of a session: ``in_flight`` (the turn driving it, if any), its
    own actions and deadline, ``close_retained_stream``, its connection inputs, ``route``
    (no stream reader of its own here: the inputs go to the machines) and the
    ``ws_observer`` slot."""

    def __init__(self) -> None:
        self.in_flight: Any = None
        self.config = SessionConfig(base_url=BASE)
        self.outbox: list[Any] = []
        self.deadline: float | None = None
        self.inputs: list[tuple[Any, ...]] = []
        self.closing: list[Any] = []
        #: What ``reset_session`` hands over (the connection takes it on in the session's scope).
        self.resetting: list[Any] = []
        self.polls = 0
        #: Set by the drive: where its stream readers report what they decode.
        self.ws_observer: Any = None

    def actions(self) -> list[Any]:
        self.polls += 1
        out, self.outbox = self.outbox, []
        return out

    def next_deadline(self) -> float | None:
        return self.deadline

    def tick(self, now: float) -> None:
        self.inputs.append(("tick", now))
        self.deadline = None

    def close_retained_stream(self, now: float) -> list[Any]:
        out, self.closing = self.closing, []
        return out

    def route(self, conn_id: int) -> None:
        return None

    def reset_session(self, now: float) -> list[Any]:
        out, self.resetting = self.resetting, []
        return out

    def connection_made(self, conn_id: int, now: float) -> None:
        self.inputs.append(("made", conn_id))

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self.inputs.append(("data", conn_id, data))

    def connection_lost(self, conn_id: int, now: float) -> None:
        self.inputs.append(("lost", conn_id))

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        self.inputs.append(("conn_failed", conn_id, message))


class Agent:
    """What ``Connection.reset`` and ``start_close`` need of an agent: its session."""

    def __init__(self, session: FakeSession) -> None:
        self.session = session


def agent_of(session: FakeSession) -> Any:
    return Agent(session)


class Events:
    """A recording ``on_transport_event``."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if type(e) is kind]


def drive(*, sink: Any = None, recorder: Any = None, token: str | None = TOKEN) -> Connection:
    return Connection(
        base_url=BASE,
        token=token,
        on_event=sink,
        wall_clock=lambda: 1.5e9,
        recorder=recorder,
        created_at=lambda: "2026-01-01T00:00:00+00:00",
    )


def start(
    d: Connection,
    machine: Any,
    *,
    now: float = NOW,
    session: Any = None,
    tools: Callable[[tuple[ToolCall, ...]], ToolPlan] | None = None,
) -> Task:
    """Run ``machine`` as a plain call (``session``: sharing that session's connections;
    ``tools``: the tool-call policy of its pauses)."""
    call: Operation[Any] = Operation(
        machine=lambda _now, _data: machine, session=session, tools=tools
    )
    return d.start_call(call, now=now)


def get_chat(request_id: int = 1) -> SendRequest:
    return SendRequest(request_id=request_id, request=build_get_chat("chat-1"))


def commands(d: Connection, kind: type | None = None) -> list[Any]:
    """The commands so far, of ``kind``, or all but the ``TaskMoved`` wake-ups."""
    out = d.commands()
    if kind is None:
        return [c for c in out if type(c) is not TaskMoved]
    return [c for c in out if type(c) is kind]


def only(d: Connection, kind: type) -> Any:
    (command,) = commands(d, kind)
    return command


def wake(d: Connection, probe: Probe, *actions: Any, finish: bool = False) -> float:
    """``probe`` (with a heartbeat) produces ``actions`` (and finishes) at its next tick,
    which the connection is told about; returns the time of that tick."""
    probe.scheduled.extend(actions)
    probe.finish_at_tick = finish
    at = probe.deadline
    assert at is not None
    d.tick(now=at)
    return at


# -- small functions ---------------------------------------------------------------------------------


def test_describe_error_is_type_and_message_or_the_string_itself() -> None:
    assert describe_error(ConnectionResetError("peer reset")) == "ConnectionResetError: peer reset"
    assert describe_error(TimeoutError()) == "TimeoutError"
    assert describe_error("already a message") == "already a message"


def test_scrub_token_redacts_every_occurrence_design_rule_6() -> None:
    assert scrub_token(f"a {TOKEN} b {TOKEN}", TOKEN) == "a <redacted> b <redacted>"
    assert scrub_token("nothing secret", TOKEN) == "nothing secret"
    assert scrub_token(f"no token set {TOKEN}", None) == f"no token set {TOKEN}"


def test_scrub_token_leaves_words_alone_when_the_token_is_short() -> None:
    # A token under 8 characters is no real session token: only whole-token occurrences are
    # redacted, so a one-letter token never mangles the words around it.
    message = "ConnectionRefusedError: [Errno 111] Connection refused"
    assert scrub_token(message, "t") == message
    assert scrub_token(message, "Error") == message
    assert scrub_token("token t in ?coder_session_token=t&x=1", "t") == (
        "token <redacted> in ?coder_session_token=<redacted>&x=1"
    )
    assert scrub_token("t", "t") == "<redacted>"
    assert scrub_token("a.b? a.b", "a.b") == "<redacted>? <redacted>"
    # From 8 characters on every occurrence goes, inside a word too.
    assert scrub_token("xabcd1234y abcd1234", "abcd1234") == "x<redacted>y <redacted>"


# -- starting, closing ------------------------------------------------------------------------------


def test_start_takes_the_machines_first_actions_at_once() -> None:
    d = drive()
    probe = Probe(get_chat())
    task = start(d, probe, now=NOW)
    assert task.machine is probe and d.stats.tasks == 1 and not task.done
    request = only(d, StartHttp)
    assert request.call.task is task and request.call.request_id == 1
    assert "tasks=1" in repr(d) and repr(request.call.job) == "<MachineSlot <Probe>>"
    assert repr(task) == "<Task call running>" and task.take_events() == []
    finished = Probe()
    finished.finish()
    assert repr(start(d, finished)) == "<Task call done>"  # settled as it starts


def test_a_closed_connection_refuses_new_machines() -> None:
    d = drive()
    assert not d.stats.closed
    d.close()
    d.close()
    assert d.stats.closed
    with pytest.raises(CoderAgentError, match="closed"):
        start(d, Probe(), now=NOW)


# -- REST: the request on the wire and its events (wire 11, D24) -------------------------------------


def test_a_request_goes_out_with_the_base_url_and_the_session_token() -> None:
    d = drive()
    start(d, Probe(get_chat()), now=NOW)
    call = only(d, StartHttp).call
    assert (call.method, call.url, call.body) == ("GET", f"{BASE}/api/v2/chats/chat-1", None)
    assert (SESSION_TOKEN_HEADER, TOKEN) in call.headers
    # The token never shows in a repr (docs/architecture.md rule 6).
    assert TOKEN not in repr(call) and "get_chat GET /api/v2/chats/chat-1" in repr(call)


def test_without_a_token_no_token_header_is_sent() -> None:
    d = drive(token=None)
    start(d, Probe(get_chat()), now=NOW)
    call = only(d, StartHttp).call
    assert all(name != SESSION_TOKEN_HEADER for name, _ in call.headers)


def test_http_request_then_http_response_with_per_client_ids_and_durations_wire_11() -> None:
    events = Events()
    d = drive(sink=events)
    probe = Probe(get_chat(1), get_chat(2))
    start(d, probe, now=NOW)
    first, second = (c.call for c in commands(d, StartHttp))
    assert [(e.id, e.op, e.method, e.path, e.timestamp) for e in events.of(HttpRequestEvent)] == [
        (1, "get_chat", "GET", "/api/v2/chats/chat-1", 1.5e9),
        (2, "get_chat", "GET", "/api/v2/chats/chat-1", 1.5e9),
    ]
    first.status_received(200, now=NOW + 0.25)
    first.status_received(200, now=NOW + 0.5)  # reported once
    (response,) = events.of(HttpResponseEvent)
    assert (response.id, response.status, response.ok, response.duration) == (1, 200, True, 0.25)
    assert probe.kinds() == []  # the body is not there yet
    d.http_finished(
        first,
        status=200,
        headers=[("Content-Type", "application/json")],
        body=b"{}",
        reason="OK",
        now=NOW + 0.5,
    )
    kind, request_id, answer, _ = probe.inputs[-1]
    assert (kind, request_id, answer.status, answer.body, answer.reason) == (
        "response",
        1,
        200,
        b"{}",
        "OK",
    )
    assert answer.headers == (("content-type", "application/json"),)
    # A response without a separate status line still gets its http:response event.
    d.http_finished(second, status=404, headers=(), body=b"", now=NOW + 1.0)
    assert [(e.id, e.status, e.ok, e.duration) for e in events.of(HttpResponseEvent)] == [
        (1, 200, True, 0.25),
        (2, 404, False, 1.0),
    ]
    assert events.of(HttpErrorEvent) == []


@pytest.mark.parametrize(
    ("status_code", "ok"), [(199, False), (200, True), (299, True), (300, False)]
)
def test_ok_is_a_2xx_status_wire_11(status_code: int, ok: bool) -> None:
    events = Events()
    d = drive(sink=events)
    start(d, Probe(get_chat()), now=NOW)
    only(d, StartHttp).call.status_received(status_code, now=NOW)
    assert events.of(HttpResponseEvent)[0].ok is ok


def test_a_failure_before_any_status_is_an_http_error_with_the_token_scrubbed() -> None:
    events = Events()
    d = drive(sink=events)
    probe = Probe(get_chat())
    start(d, probe, now=NOW)
    call = only(d, StartHttp).call
    d.http_finished(call, error=ConnectionRefusedError(f"refused for {TOKEN}"), now=NOW + 2.0)
    (error,) = events.of(HttpErrorEvent)
    assert (error.id, error.op, error.duration) == (1, "get_chat", 2.0)
    assert error.message == "ConnectionRefusedError: refused for <redacted>"
    assert probe.inputs[-1][:3] == ("failed", 1, "ConnectionRefusedError: refused for <redacted>")
    assert all(TOKEN not in repr(e) for e in events.events)


def test_an_error_answer_echoing_the_token_reaches_the_machine_and_transcript_without_it() -> None:
    lines: list[str] = []
    d = drive(recorder=TranscriptRecorder(lines.append))
    probe = Probe(get_chat())
    start(d, probe, now=NOW)
    call = only(d, StartHttp).call
    body = json.dumps({"message": f"bad {TOKEN}", "detail": quote(TOKEN, safe="")}).encode()
    d.http_finished(
        call,
        status=401,
        headers=[("X-Echo", TOKEN), ("Content-Type", "application/json")],
        body=body,
        reason=f"Nope {TOKEN}",
        now=NOW + 1.0,
    )
    answer = probe.inputs[-1][2]
    assert json.loads(answer.body) == {"message": "bad <redacted>", "detail": "<redacted>"}
    assert answer.header("x-echo") == "<redacted>" and answer.reason == "Nope <redacted>"
    assert lines and not any(TOKEN in line for line in lines)


def test_a_success_keeps_its_content_and_loses_the_token_from_its_error_objects() -> None:
    d = drive()
    probe = Probe(get_chat())
    start(d, probe, now=NOW)
    call = only(d, StartHttp).call
    chat = {"id": "chat-1", "title": f"about {TOKEN}", "last_error": {"message": f"x {TOKEN}"}}
    d.http_finished(call, status=200, headers=(), body=json.dumps(chat).encode(), now=NOW)
    answer = probe.inputs[-1][2]
    assert answer.json() == {**chat, "last_error": {"message": "x <redacted>"}}


def test_without_a_token_an_answer_is_passed_on_as_it_came() -> None:
    d = drive(token=None)
    probe = Probe(get_chat())
    start(d, probe, now=NOW)
    call = only(d, StartHttp).call
    d.http_finished(call, status=401, headers=(), body=TOKEN.encode(), now=NOW)
    assert probe.inputs[-1][2].body == TOKEN.encode()


def test_a_failure_after_the_status_line_is_no_http_error_but_still_a_failure() -> None:
    events = Events()
    d = drive(sink=events)
    probe = Probe(get_chat())
    start(d, probe, now=NOW)
    call = only(d, StartHttp).call
    call.status_received(200, now=NOW)
    d.http_finished(call, error="body cut short", now=NOW)
    assert events.of(HttpErrorEvent) == []
    assert probe.inputs[-1][:3] == ("failed", 1, "body cut short")


def test_workspace_helper_requests_emit_no_http_events_wire_9() -> None:
    events = Events()
    d = drive(sink=events)
    helper = HttpRequest(op="get_workspace", method="GET", path="/api/v2/workspaces/w")
    start(d, Probe(SendRequest(request_id=1, request=helper), get_chat(2)), now=NOW)
    unobserved, observed = (c.call for c in commands(d, StartHttp))
    d.http_finished(unobserved, error="down", now=NOW)
    assert unobserved.observed is False and observed.observed is True
    # Ids count the observed requests only: the first observed one is 1.
    assert [(type(e), e.id) for e in events.events] == [(HttpRequestEvent, 1)]


def test_without_a_callback_nothing_is_emitted_and_no_id_is_used() -> None:
    d = drive()
    start(d, Probe(get_chat()), now=NOW)
    call = only(d, StartHttp).call
    assert (call.observed, call.event_id) == (False, 0)
    call.status_received(500, now=NOW)
    assert call.answered


def test_a_cancelled_request_reports_request_cancelled_and_its_late_answer_is_dropped() -> None:
    events = Events()
    d = drive(sink=events)
    probe = Probe(get_chat(), heartbeat=1.0)
    start(d, probe, now=NOW)
    call = only(d, StartHttp).call
    wake(d, probe, CancelRequest(request_id=1))
    assert only(d, CancelHttp).call is call
    (error,) = events.of(HttpErrorEvent)
    assert (error.message, error.duration) == ("request cancelled", 1.0)
    call.status_received(200, now=NOW + 1.5)
    d.http_finished(call, status=200, headers=(), body=b"{}", now=NOW + 1.5)
    d.http_finished(call, error="late", now=NOW + 1.5)
    assert probe.kinds() == []
    assert events.of(HttpResponseEvent) == []
    # Cancelling an unknown or finished request does nothing.
    wake(d, probe, CancelRequest(request_id=1), CancelRequest(request_id=99))
    assert commands(d, CancelHttp) == []


def test_a_request_cancelled_after_its_status_line_emits_no_http_error() -> None:
    events = Events()
    d = drive(sink=events)
    probe = Probe(get_chat(), heartbeat=1.0)
    start(d, probe, now=NOW)
    call = only(d, StartHttp).call
    call.status_received(200, now=NOW)
    wake(d, probe, CancelRequest(request_id=1))
    assert only(d, CancelHttp).call is call
    assert events.of(HttpErrorEvent) == []


def test_a_finished_machines_requests_are_cancelled() -> None:
    events = Events()
    d = drive(sink=events)
    probe = Probe(get_chat(1), get_chat(2))
    start(d, probe, now=NOW)
    first, second = (c.call for c in commands(d, StartHttp))

    def finish_on_answer(p: Probe, record: tuple[Any, ...]) -> None:
        if record[0] == "response":
            p.finish()

    probe.react = finish_on_answer
    d.http_finished(first, status=200, headers=(), body=b"", now=NOW)
    assert [c.call for c in commands(d, CancelHttp)] == [second]
    assert d.stats.tasks == 0
    assert [e.message for e in events.of(HttpErrorEvent)] == ["request cancelled"]


# -- sockets ---------------------------------------------------------------------------------------


def open_conn(conn_id: int = 1, *, tls: bool = True, name: str | None = None) -> OpenConnection:
    return OpenConnection(
        conn_id=conn_id, host="coder.test", port=443, tls=tls, server_hostname=name
    )


def test_an_opened_connection_is_an_open_socket_command_with_its_tls_name() -> None:
    d = drive()
    start(d, Probe(open_conn(1), open_conn(2, tls=False), open_conn(3, name="other.test")), now=NOW)
    conns = [c.conn for c in commands(d, OpenSocket)]
    assert [(c.conn_id, c.host, c.port, c.tls, c.server_hostname) for c in conns] == [
        (1, "coder.test", 443, True, "coder.test"),
        (2, "coder.test", 443, False, None),
        (3, "coder.test", 443, True, "other.test"),
    ]
    assert d.stats.open_connections == 3
    assert repr(conns[0]) == "<Conn 1 coder.test:443 connecting>"


def test_writes_before_the_connect_are_held_and_released_in_order() -> None:
    d = drive()
    probe = Probe(
        open_conn(),
        SendData(conn_id=1, data=b"upgrade"),
        SendData(conn_id=1, data=b"x"),
        heartbeat=1.0,
    )
    start(d, probe, now=NOW)
    conn = only(d, OpenSocket).conn
    d.socket_made(conn, now=NOW)
    writes = commands(d)
    assert [type(c) for c in writes] == [WriteSocket, WriteSocket]
    assert [c.data for c in writes] == [b"upgrade", b"x"]
    assert "<7 bytes>" in repr(writes[0])
    assert probe.kinds() == ["made"]
    assert repr(conn) == "<Conn 1 coder.test:443 open>"
    wake(d, probe, SendData(conn_id=1, data=b"later"), SendData(conn_id=9, data=b"nowhere"))
    assert [c.data for c in commands(d, WriteSocket)] == [b"later"]


def test_socket_inputs_reach_the_machine_and_end_the_socket() -> None:
    d = drive()
    probe = Probe(open_conn(1), open_conn(2))
    start(d, probe, now=NOW)
    one, two = (c.conn for c in commands(d, OpenSocket))
    d.socket_made(one, now=NOW)
    d.socket_data(one, b"frame", now=NOW)
    d.socket_closed(one, now=NOW)
    d.socket_closed(two, OSError(f"tls failure near {TOKEN}"), now=NOW)
    assert probe.inputs == [
        ("made", 1, NOW),
        ("data", 1, b"frame", NOW),
        ("lost", 1, NOW),
        ("conn_failed", 2, "OSError: tls failure near <redacted>", NOW),
    ]
    assert d.stats.open_connections == 0 and repr(one).endswith("closed>")
    # Nothing more is reported for a finished socket.
    for conn in (one, two):
        d.socket_made(conn, now=NOW)
        d.socket_data(conn, b"late", now=NOW)
        d.socket_closed(conn, now=NOW)
        d.socket_closed(conn, "late", now=NOW)
    assert len(probe.inputs) == 4


def test_close_connection_closes_the_socket_and_drops_held_writes() -> None:
    d = drive()
    probe = Probe(open_conn(), SendData(conn_id=1, data=b"held"), heartbeat=1.0)
    start(d, probe, now=NOW)
    conn = only(d, OpenSocket).conn
    wake(d, probe, CloseConnection(conn_id=1), CloseConnection(conn_id=7))
    assert only(d, CloseSocket).conn is conn
    assert conn.pending == [] and d.stats.open_connections == 0
    d.socket_made(conn, now=NOW)  # a connect that completed anyway
    assert commands(d) == [] and probe.kinds() == []


def test_a_reused_connection_id_does_not_unregister_its_successor() -> None:
    d = drive()
    probe = Probe(open_conn(1), heartbeat=1.0)
    start(d, probe, now=NOW)
    old = only(d, OpenSocket).conn
    at = wake(d, probe, open_conn(1))  # the id is reused before the old socket ended
    new = only(d, OpenSocket).conn
    d.socket_closed(old, now=at)
    assert d.stats.open_connections == 1
    probe.emit(SendData(conn_id=1, data=b"to the new one"))
    d.socket_made(new, now=at)
    assert [c.conn for c in commands(d, WriteSocket)] == [new]


# -- the routing rule (tests/core_driver.py; H.6) ----------------------------------------------------


def test_a_standalone_machine_hears_its_own_connections_only() -> None:
    d = drive()
    first, second = Probe(open_conn(1)), Probe(open_conn(1))
    start(d, first, now=NOW)
    start(d, second, now=NOW)
    _conn_a, conn_b = (c.conn for c in commands(d, OpenSocket))
    d.socket_data(conn_b, b"for the second", now=NOW)
    assert first.inputs == [] and second.inputs == [("data", 1, b"for the second", NOW)]


def test_session_connections_go_to_the_running_turn_then_to_the_session_h6() -> None:
    d = drive()
    session = FakeSession()
    turn = Probe(open_conn(1))
    session.in_flight = turn
    task = start(d, turn, session=session, now=NOW)
    conn = only(d, OpenSocket).conn
    assert conn.task is task  # the running turn hears the socket
    turn.react = lambda p, r: p.finish() if r[2] == b"last" else None
    d.socket_data(conn, b"while running", now=NOW)
    d.socket_data(conn, b"last", now=NOW)
    assert session.inputs == [] and turn.done
    assert conn.task is None  # between turns the session hears it, for no task
    d.socket_data(conn, b"paused stream", now=NOW)
    d.socket_closed(conn, now=NOW)
    assert session.inputs == [("data", 1, b"paused stream"), ("lost", 1)]
    assert turn.inputs == [("data", 1, b"while running", NOW), ("data", 1, b"last", NOW)]


def test_machines_started_with_the_same_session_share_its_connections() -> None:
    d = drive()
    session = FakeSession()
    opener = Probe(open_conn(1))
    start(d, opener, session=session, now=NOW)
    conn = only(d, OpenSocket).conn
    d.socket_made(conn, now=NOW)
    writer = Probe(SendData(conn_id=1, data=b"same socket"))
    start(d, writer, session=session, now=NOW)
    assert only(d, WriteSocket).conn is conn


def test_the_standing_session_is_driven_only_while_no_turn_runs() -> None:
    d = drive()
    session = FakeSession()
    session.deadline = NOW + 5.0
    first = Probe()
    first.finish()
    start(d, first, session=session)  # the session stays driven after its machine ended
    assert d.stats.attached_sessions == 1 and d.stats.tasks == 0
    assert d.next_deadline() == NOW + 5.0
    turn = Probe(deadline=NOW + 9.0)
    session.in_flight = turn
    start(d, turn, session=session)
    assert d.stats.attached_sessions == 1
    assert d.next_deadline() == NOW + 9.0  # the turn drives the session meanwhile
    polls = session.polls
    d.tick(now=NOW + 6.0)
    assert session.polls == polls and session.inputs == []
    turn.react = lambda p, r: p.finish()
    d.tick(now=NOW + 9.0)
    assert session.inputs == [("tick", NOW + 9.0)]
    assert d.next_deadline() is None


def test_a_session_methods_actions_are_taken_on_in_its_scope() -> None:
    d = drive()
    session = FakeSession()
    session.resetting.append(open_conn(4))
    d.reset(agent_of(session), now=NOW)
    conn = only(d, OpenSocket).conn
    d.socket_data(conn, b"hello", now=NOW)
    assert session.inputs == [("data", 4, b"hello")]
    session.resetting.append(CloseConnection(conn_id=4))
    d.reset(agent_of(session), now=NOW)
    assert only(d, CloseSocket).conn is conn


def test_a_session_is_visited_at_once_when_it_is_taken_on() -> None:
    d = drive()
    session = FakeSession()
    session.outbox.append(open_conn(2))
    d.reset(agent_of(session), now=NOW)
    assert only(d, OpenSocket).conn.conn_id == 2


def test_a_session_whose_id_was_reused_gets_a_fresh_standing_job() -> None:
    d = drive()
    gone, new = FakeSession(), FakeSession()
    d.reset(agent_of(gone), now=NOW)
    old = d._sessions[id(gone)]
    # What a garbage-collected session leaves behind: its id now names another object.
    d._sessions[id(new)] = d._sessions.pop(id(gone))
    new.resetting.append(open_conn(3))
    d.reset(agent_of(new), now=NOW)
    conn = only(d, OpenSocket).conn
    d.socket_data(conn, b"to the new one", now=NOW)
    assert new.inputs == [("data", 3, b"to the new one")] and gone.inputs == []
    assert old.retired and d.stats.attached_sessions == 1


def test_a_closed_agents_session_is_forgotten_once_its_work_and_connections_are_done() -> None:
    d = drive()
    idle = FakeSession()
    d.reset(agent_of(idle), now=NOW)
    closing = d.start_close(agent_of(idle), now=NOW, archive=False)
    assert closing.done and closing.result() is None
    assert d.stats.attached_sessions == 0
    # Closing again, or an agent whose session was never driven, changes nothing.
    d.start_close(agent_of(idle), now=NOW, archive=False)
    d.start_close(agent_of(FakeSession()), now=NOW, archive=False)
    assert d.stats.attached_sessions == 0
    busy = FakeSession()
    busy.resetting.append(open_conn(4))
    d.reset(agent_of(busy), now=NOW)
    conn = only(d, OpenSocket).conn
    cleanup = Probe(deadline=NOW + 1.0)
    start(d, cleanup, session=busy)
    d.start_close(agent_of(busy), now=NOW, archive=False)
    assert d.stats.attached_sessions == 1  # a job runs and a connection is open
    cleanup.react = lambda p, r: p.finish()
    d.tick(now=NOW + 1.0)
    assert cleanup.done and d.stats.attached_sessions == 1  # the connection is still open
    d.socket_data(conn, b"hi", now=NOW + 1.0)
    assert busy.inputs[-1] == ("data", 4, b"hi") and d.stats.attached_sessions == 1
    busy.outbox.append(CloseConnection(conn_id=4))  # its answer to the next input
    d.socket_data(conn, b"bye", now=NOW + 2.0)
    assert d.stats.attached_sessions == 0 and d.stats.open_connections == 0
    # Taking it on again (a reset, a turn) keeps a session until it is closed again.
    d.reset(agent_of(busy), now=NOW)
    d.start_close(agent_of(busy), now=NOW, archive=False)
    d.reset(agent_of(busy), now=NOW)
    assert d.stats.attached_sessions == 1


# -- tools (D5) --------------------------------------------------------------------------------------


CALL = ToolCall(tool_call_id="t1", tool_name="get_weather", input="{}")


@tool
def get_weather() -> dict[str, int]:
    """The weather."""
    return {"tempC": 21}


def policy(calls: tuple[ToolCall, ...]) -> ToolPlan:
    """The tool-call policy of a machine whose client tool is ``get_weather`` (D5)."""
    return plan_tool_calls(calls, {"get_weather": get_weather})


def test_without_a_tool_policy_every_call_is_answered_with_no_outcome_d5() -> None:
    d = drive()
    probe = Probe(RunTools(calls=(CALL,)))
    start(d, probe)
    assert probe.inputs == [("tools", [], NOW)]
    assert commands(d, InvokeTools) == []


def test_what_the_policy_decides_is_answered_without_the_embedder_d5() -> None:
    d = drive()
    unknown = ToolCall(tool_call_id="t2", tool_name="nope", input="{}")
    probe = Probe(RunTools(calls=(unknown,)))
    start(d, probe, tools=policy)
    assert commands(d, InvokeTools) == []
    ((kind, (outcome,), now),) = probe.inputs
    assert (kind, outcome.tool_call_id, outcome.is_error, now) == ("tools", "t2", True, NOW)


def test_a_tool_run_goes_to_the_embedder_and_its_outcomes_to_the_machine() -> None:
    d = drive()
    probe = Probe(RunTools(calls=(CALL,)))
    task = start(d, probe, tools=policy)
    run = only(d, InvokeTools).run
    assert isinstance(run, ToolBatch) and run.calls == (CALL,) and run.task is task
    assert run.sent == NOW and "get_weather" in repr(run)
    (invocation,) = run.pending
    outcome = ToolOutcome(tool_call_id="t1", output={"tempC": 21})
    d.tool_finished(run, invocation, outcome=outcome, now=NOW + 1.0)
    d.tool_finished(run, invocation, value="again", now=NOW + 2.0)  # a second answer is ignored
    assert probe.inputs == [("tools", [outcome], NOW + 1.0)]
    assert run.finished and run.pending == ()


def test_a_machine_that_finishes_during_its_tool_run_cancels_it() -> None:
    d = drive()
    probe = Probe(RunTools(calls=(CALL,)))
    task = start(d, probe, tools=policy)
    run = only(d, InvokeTools).run
    task.cancel(None, now=NOW)
    assert only(d, CancelTools).run is run and run.finished
    d.tool_finished(run, run.invocations[0], value={"tempC": 21}, now=NOW)
    assert probe.kinds() == ["cancel"]


def test_a_stale_run_answer_does_not_clear_the_newer_run() -> None:
    d = drive()
    probe = Probe(RunTools(calls=(CALL,)), heartbeat=1.0)
    task = start(d, probe, tools=policy)
    first = only(d, InvokeTools).run
    wake(d, probe, RunTools(calls=(CALL,)))
    second = only(d, InvokeTools).run
    d.tool_finished(first, first.invocations[0], value={"tempC": 1}, now=NOW)
    # The newer run is still the machine's: a cancel stops it.
    task.cancel(None, now=NOW)
    assert only(d, CancelTools).run is second


# -- background jobs (D22) ---------------------------------------------------------------------------


def test_a_background_job_is_driven_beside_its_parent_and_counted_d22() -> None:
    d = drive()
    interrupt = Probe(get_chat())
    parent = Probe(RunInBackground(job=interrupt), heartbeat=1.0)
    start(d, parent, now=NOW)
    call = only(d, StartHttp).call
    assert call.background and call.task is None  # no task waits for background work
    assert d.stats.background_jobs == 1 and d.stats.tasks == 2
    wake(d, parent, finish=True)
    assert d.stats.background_jobs == 1 and d.stats.tasks == 1  # it outlives its parent

    def done(p: Probe, record: tuple[Any, ...]) -> None:
        p.finish()

    interrupt.react = done
    d.http_finished(call, status=200, headers=(), body=b"", now=NOW)
    assert d.stats.background_jobs == 0 and d.stats.tasks == 0


def test_a_session_background_job_shares_the_sessions_connections() -> None:
    d = drive()
    session = FakeSession()
    turn = Probe(open_conn(1), heartbeat=1.0)
    start(d, turn, session=session, now=NOW)
    conn = only(d, OpenSocket).conn
    d.socket_made(conn, now=NOW)
    wake(d, turn, RunInBackground(job=Probe(SendData(conn_id=1, data=b"bg"))))
    assert only(d, WriteSocket).conn is conn


def test_a_standalone_parents_background_job_has_its_own_connections() -> None:
    d = drive()
    parent = Probe(open_conn(1), heartbeat=1.0)
    start(d, parent, now=NOW)
    conn = only(d, OpenSocket).conn
    d.socket_made(conn, now=NOW)
    wake(d, parent, RunInBackground(job=Probe(SendData(conn_id=1, data=b"bg"))))
    assert commands(d, WriteSocket) == []


def test_a_requests_deadline_is_its_machines_or_its_background_works_own() -> None:
    d = drive()
    probe = Probe(get_chat(), deadline=NOW + 5.0)
    start(d, probe)
    call = only(d, StartHttp).call
    # A machine without request deadlines bounds none of its requests itself.
    assert call.deadline is None and not call.timed
    probe.request_deadline = lambda request_id: NOW + 3.0  # type: ignore[attr-defined]
    probe.abort_deadline = NOW + 3.0  # type: ignore[attr-defined]
    assert call.deadline == NOW + 3.0 and call.timed
    start(d, Probe(RunInBackground(job=Probe(get_chat(), deadline=NOW + 7.0))))
    work = only(d, StartHttp).call
    assert work.background and work.task is None and work.deadline == NOW + 7.0


def test_the_background_deadline_is_the_earliest_of_the_background_work() -> None:
    d = drive()
    start(d, Probe(deadline=NOW + 1.0))
    late, early, idle = (Probe(get_chat(), deadline=NOW + t) for t in (9.0, 7.0, 8.0))
    idle.deadline = None
    start(
        d, Probe(RunInBackground(job=late), RunInBackground(job=early), RunInBackground(job=idle))
    )
    assert d.next_deadline() == NOW + 1.0
    assert d.next_deadline(background=True) == NOW + 7.0


# -- cancelling and shutting down (D22) ------------------------------------------------------------


def test_cancel_runs_the_machines_cleanup_at_once_and_only_once() -> None:
    d = drive()
    probe = Probe()

    def cleanup(p: Probe, record: tuple[Any, ...]) -> None:
        if record[0] == "cancel":
            p.emit(RunInBackground(job=Probe(get_chat())))

    probe.react = cleanup
    task = start(d, probe, now=NOW)
    reason = TimeoutError("caller's deadline")
    task.cancel(reason, now=NOW)
    assert probe.inputs == [("cancel", reason, NOW)] and task.done
    # A finished machine still hands over its cleanup: the background interrupt runs.
    assert only(d, StartHttp).call.background and d.stats.background_jobs == 1
    task.cancel(None, now=NOW)
    assert len(probe.inputs) == 1
    # A machine that finished before the cancel arrived is not cancelled: its result stands.
    finished = Probe()
    late = start(d, finished)
    finished.finish("kept")
    late.cancel(None, now=NOW)
    assert finished.inputs == [] and late.result() == "kept"


def test_shutdown_cancels_everything_and_closes_every_socket_request_and_tool_run() -> None:
    d = drive()
    session = FakeSession()
    session.closing.append(CloseConnection(conn_id=1))
    turn = Probe(open_conn(1), get_chat(), RunTools(calls=(CALL,)))
    start(d, turn, session=session, now=NOW, tools=policy)
    standalone = Probe(open_conn(1), get_chat(2))
    start(d, standalone, now=NOW)
    done_early = Probe()
    start(d, done_early, now=NOW)
    done_early.finish()
    d.commands()
    d.close(now=NOW + 1.0)
    out = d.commands()
    assert turn.cancelled and standalone.cancelled and not done_early.cancelled
    assert sum(1 for c in out if type(c) is CloseSocket) == 2
    assert sum(1 for c in out if type(c) is CancelHttp) == 2
    assert sum(1 for c in out if type(c) is CancelTools) == 1
    stats = d.stats
    assert stats.closed and stats.tasks == 0 and stats.open_connections == 0
    assert stats.background_jobs == 0 and stats.attached_sessions == 0
    assert d.next_deadline() is None
    with pytest.raises(CoderAgentError):
        start(d, Probe(), now=NOW)


def test_closing_retires_a_job_whose_cancel_leaves_it_running() -> None:
    d = drive()
    stubborn = Probe(get_chat())
    stubborn.cancel = lambda now, reason=None: None  # type: ignore[method-assign]
    task = start(d, stubborn, now=NOW)
    d.commands()
    d.close(now=NOW)
    assert only(d, CancelHttp).call.task is task and d.stats.tasks == 0
    assert not task.done and d.next_deadline() is None


# -- settling: rounds, deadlines, wake-ups -----------------------------------------------------------


def test_due_deadlines_are_ticked_and_the_next_one_is_reported() -> None:
    d = drive()
    early, late = Probe(deadline=NOW + 1.0), Probe(deadline=NOW + 3.0)
    start(d, early, now=NOW)
    start(d, late, now=NOW)
    assert d.next_deadline() == NOW + 1.0
    d.tick(now=NOW + 1.0)
    assert (early.ticks, late.ticks) == (1, 0)
    assert d.next_deadline() == NOW + 3.0
    d.tick(now=NOW + 3.0)
    assert (early.ticks, late.ticks) == (1, 1) and d.next_deadline() is None


def test_a_deadline_moved_by_an_input_replaces_the_old_one() -> None:
    d = drive()
    probe = Probe(open_conn(), deadline=NOW + 10.0)
    start(d, probe, now=NOW)
    conn = only(d, OpenSocket).conn

    def move(p: Probe, record: tuple[Any, ...]) -> None:
        if record[0] == "data":
            p.deadline = NOW + float(record[2].decode())

    probe.react = move
    d.socket_data(conn, b"20", now=NOW)
    assert d.next_deadline() == NOW + 20.0
    d.socket_data(conn, b"5", now=NOW)
    assert d.next_deadline() == NOW + 5.0
    d.tick(now=NOW + 10.0)  # the old deadline is gone; the machine is ticked once, at 5
    assert probe.ticks == 1
    # Many moves: the earliest live deadline is still the one reported.
    for step in range(300):
        d.socket_data(conn, str(1000 - step).encode(), now=NOW + 10.0)
    assert d.next_deadline() == NOW + 701.0


def test_a_deadline_the_machine_moved_away_from_does_not_tick_it() -> None:
    d = drive()
    probe = Probe(open_conn(), deadline=NOW + 10.0)
    start(d, probe, now=NOW)
    conn = only(d, OpenSocket).conn
    probe.react = lambda p, r: setattr(p, "deadline", NOW + 20.0) if r[0] == "data" else None
    d.socket_data(conn, b"later", now=NOW)
    d.tick(now=NOW + 10.0)
    assert probe.ticks == 0 and d.next_deadline() == NOW + 20.0


def test_a_past_deadline_kept_armed_yields_after_max_rounds() -> None:
    d = drive()
    stuck = Probe(deadline=NOW)
    stuck.keep_past_deadline = True
    start(d, stuck, now=NOW)
    assert stuck.ticks == MAX_ROUNDS
    # The adapter's timer fires again at once.
    assert d.next_deadline() == NOW
    d.tick(now=NOW)
    assert stuck.ticks == 2 * MAX_ROUNDS


def test_an_input_visits_only_its_own_scope_however_many_machines_run() -> None:
    """One input costs the same with one chat or a fleet: the machines of other scopes are
    neither polled nor woken (and their deadlines are not rescanned)."""
    d = drive()
    fleet = [Probe(open_conn(), deadline=NOW + 60.0) for _ in range(50)]
    tasks = [start(d, p, now=NOW) for p in fleet]
    conns = [c.conn for c in commands(d, OpenSocket)]
    before = [p.polls for p in fleet]
    d.socket_data(conns[7], b"x", now=NOW)
    assert [p.polls - b for p, b in zip(fleet, before, strict=True)] == [
        1 if i == 7 else 0 for i in range(50)
    ]
    assert [c.task for c in commands(d, TaskMoved)] == [tasks[7]]
    assert d.next_deadline() == NOW + 60.0


def test_waiters_are_woken_when_their_machine_moves_or_finishes() -> None:
    d = drive()
    probe = Probe(get_chat(), heartbeat=1.0)
    task = start(d, probe, now=NOW)
    assert not task.done
    out = d.commands()
    assert [type(c) for c in out] == [StartHttp]  # the starter knows the task moved
    (request,) = out
    assert isinstance(request, StartHttp)
    wake(d, probe)
    assert only(d, TaskMoved).task is task and not task.done
    probe.react = lambda p, r: p.finish()
    d.http_finished(request.call, status=200, headers=(), body=b"", now=NOW)
    assert only(d, TaskMoved).task is task and task.done and d.stats.tasks == 0
    assert task.result() == "done"


# -- transcripts (docs/transcripts.md) ---------------------------------------------------------------


class Recording:
    """A ``coder_proto.transcript.Recorder`` that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, (args, kwargs)))

        return record

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def first(self, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        value: tuple[tuple[Any, ...], dict[str, Any]] = next(
            value for n, value in self.calls if n == name
        )
        return value


def test_standalone_requests_are_recorded_but_not_their_sockets() -> None:
    recorder = Recording()
    d = drive(recorder=recorder)
    probe = Probe(get_chat(), open_conn(), SendData(conn_id=1, data=b"x"))
    start(d, probe, now=NOW)
    out = d.commands()
    call = next(c.call for c in out if type(c) is StartHttp)
    conn = next(c.conn for c in out if type(c) is OpenSocket)
    d.socket_made(conn, now=NOW)
    d.socket_data(conn, b"y", now=NOW)
    d.socket_closed(conn, now=NOW)
    d.http_finished(call, status=200, headers=(), body=b"{}", now=NOW + 1.0)
    assert recorder.names() == ["begin", "rest_exchange"]
    args, kwargs = recorder.first("begin")
    assert kwargs == {
        "base_url": BASE,
        "config": None,
        "created_at": "2026-01-01T00:00:00+00:00",
        "now": NOW + 1.0,
    }
    args, kwargs = recorder.first("rest_exchange")
    assert args[0] is call.request and args[1].status == 200
    assert kwargs == {"sent": NOW, "now": NOW + 1.0}


def test_failed_and_cancelled_requests_are_recorded_without_an_answer() -> None:
    recorder = Recording()
    d = drive(recorder=recorder)
    probe = Probe(get_chat(1), get_chat(2), heartbeat=1.0)
    start(d, probe, now=NOW)
    first, _second = (c.call for c in commands(d, StartHttp))
    d.http_finished(first, error=f"refused {TOKEN}", now=NOW)
    wake(d, probe, CancelRequest(request_id=2))
    exchanges = [value for name, value in recorder.calls if name == "rest_exchange"]
    assert [(a[1], k) for a, k in exchanges] == [
        (None, {"sent": NOW, "now": NOW, "error": "refused <redacted>"}),
        (None, {"sent": NOW, "now": NOW + 1.0}),
    ]


def test_session_sockets_and_tool_runs_are_recorded() -> None:
    recorder = Recording()
    d = drive(recorder=recorder)
    session = FakeSession()
    probe = Probe(
        open_conn(3), SendData(conn_id=3, data=b"up"), RunTools(calls=(CALL,)), heartbeat=1.0
    )
    start(d, probe, session=session, now=NOW)
    conn = only(d, OpenSocket).conn
    d.socket_made(conn, now=NOW)
    d.socket_data(conn, b"frame", now=NOW)  # the session's readers report what they decode
    session.ws_observer.upgrade_sent(3, "/stream", NOW)
    session.ws_observer.ws_events(3, [WsText("frame")], NOW)
    d.socket_closed(conn, f"reset {TOKEN}", now=NOW)
    wake(
        d, probe, OpenConnection(conn_id=4, host="h", port=1, tls=False), CloseConnection(conn_id=4)
    )
    four = only(d, OpenSocket).conn
    session.resetting.append(open_conn(5))
    d.reset(agent_of(session), now=NOW)
    five = only(d, OpenSocket).conn
    d.socket_closed(five, now=NOW)
    assert four.closed
    assert recorder.names() == [
        "begin",
        "connection_opened",
        "tools_run",
        "upgrade_sent",
        "ws_events",
        "connection_failed",
        "connection_opened",
        "connection_closed",
        "session_call",
        "connection_opened",
        "connection_lost",
    ]
    assert recorder.first("begin")[1]["config"] is session.config
    assert recorder.first("connection_failed")[0] == (3, "reset <redacted>", NOW)
    assert recorder.first("tools_run") == (((CALL,), []), {"sent": NOW, "now": NOW})


def test_a_recorder_set_while_a_session_runs_hears_its_readers_until_it_is_removed() -> None:
    d = drive()
    session = FakeSession()
    start(d, Probe(), session=session, now=NOW)
    # Without a recorder the session's readers report to nothing.
    assert session.ws_observer is None
    recorder = Recording()
    d.recorder = recorder
    tap: Any = session.ws_observer
    tap.upgrade_sent(3, "/stream", NOW)
    tap.ws_events(3, [WsText("frame")], NOW)
    assert recorder.names() == ["upgrade_sent", "ws_events"]
    d.recorder = None
    assert session.ws_observer is None


def test_cancelling_a_probe_records_nothing_but_the_cancel_of_a_turn_is_recorded() -> None:
    recorder = Recording()
    d = drive(recorder=recorder)
    task = start(d, Probe(), now=NOW)
    task.cancel(None, now=NOW)
    assert recorder.names() == []


# -- the real machines on an in-memory adapter -----------------------------------------------------


class Adapter(ConnectionHarness):
    """Performs a connection's commands in memory (``tests.proto._connection_harness``), tool
    runs answered by ``tools`` (none: they stay pending)."""

    def __init__(
        self,
        d: Connection,
        http: Callable[[HttpRequest], Any],
        *,
        tools: Callable[[tuple[ToolCall, ...]], list[ToolOutcome]] | None = None,
    ) -> None:
        super().__init__(d, http)
        self.tools = tools

    def invoke_tools(self, run: ToolBatch) -> None:
        if self.tools is None:
            return
        d = self.conn
        outcomes = self.tools(tuple(i.call_part for i in run.invocations))
        for invocation, outcome in zip(run.invocations, outcomes, strict=True):
            self.inbox.append(
                lambda i=invocation, o=outcome: d.tool_finished(run, i, outcome=o, now=self.now)
            )

    def routes(self) -> list[str]:
        return [
            f"{c.call.method} {c.call.request.path}"
            for c in self.performed
            if isinstance(c, StartHttp)
        ]


def world(
    *,
    rest: dict[str, Any] | None = None,
    sink: Any = None,
    recorder: Any = None,
    tools: Any = None,
    **config: Any,
) -> tuple[Session, Connection, Adapter, CaseEnv]:
    env = CaseEnv(rest=rest)
    config.setdefault("organization_id", "org-1")
    session = Session(
        SessionConfig(base_url=BASE, token=TOKEN, **config), reader_factory=env.reader_factory
    )
    d = drive(sink=sink, recorder=recorder)
    return session, d, Adapter(d, env.http, tools=tools), env


def test_a_streamed_turn_end_to_end_through_the_drive() -> None:
    """A real stream-mode turn: the chat is created over REST (with the token, wire 1.1),
    the stream socket dials the base URL's host with TLS, frames reach the running turn
    (the routing rule), its waiter is woken, and nothing is left once it settled."""
    events = Events()
    session, d, adapter, _env = world(sink=events)
    turn = session.stream("hi", now=NOW)
    task = start(d, turn, session=session, now=NOW)
    adapter.pump()
    assert adapter.routes()[0] == "POST /api/v2/chats"
    (open_socket,) = [c for c in adapter.performed if isinstance(c, OpenSocket)]
    assert (open_socket.conn.host, open_socket.conn.port, open_socket.conn.tls) == (
        "coder.test",
        443,
        True,
    )
    assert adapter.sockets[-1].header(SESSION_TOKEN_HEADER) == TOKEN
    adapter.send(status("running"), delta("Hel"), delta("lo"))
    assert [p.delta for p in turn.parts if isinstance(p, TextDelta)] == ["Hel", "lo"]
    adapter.send(message(50, "Hello"), status("waiting"))
    assert turn.done and turn.result().text == "Hello"
    assert any(isinstance(c, TaskMoved) and c.task is task for c in adapter.performed)
    assert d.stats.tasks == 0 and d.stats.background_jobs == 0
    (create,) = events.of(HttpRequestEvent)
    assert (create.op, create.path) == ("create_chat", "/api/v2/chats")


def test_a_ping_between_deltas_is_answered_and_the_deltas_still_reach_the_turn() -> None:
    session, d, adapter, _env = world()
    turn = session.stream("hi", now=NOW)
    start(d, turn, session=session, now=NOW)
    adapter.pump()
    adapter.send(status("running"), delta("Hel"))
    sock = adapter.sockets[-1]
    writes = len(adapter.of(WriteSocket))
    sock._to_client(sock.ws.send(Ping(b"are you there")))  # the server's ping (RFC 6455 5.5.2)
    adapter.pump()
    assert len(adapter.of(WriteSocket)) == writes + 1  # the pong
    adapter.send(delta("lo"))
    assert [p.delta for p in turn.parts if isinstance(p, TextDelta)] == ["Hel", "lo"]


def test_a_deadline_due_when_a_delta_arrives_is_ticked_by_that_input() -> None:
    session, d, adapter, _env = world()
    turn = session.stream("hi", now=NOW)
    start(d, turn, session=session, now=NOW)
    probe = Probe(heartbeat=5.0)
    start(d, probe, now=NOW)
    adapter.pump()
    adapter.send(status("running"), delta("Hel"))
    adapter.now = NOW + 6.0  # past the probe's deadline: no timer fired yet
    adapter.send(delta("lo"))
    assert ("tick", NOW + 6.0) in probe.inputs
    assert [p.delta for p in turn.parts if isinstance(p, TextDelta)] == ["Hel", "lo"]


def test_a_paused_stream_is_read_by_the_session_between_turns_h6() -> None:
    session, d, adapter, _env = world(tools=[weather_tool()])
    turn = session.segment("weather?", now=NOW)
    start(d, turn, session=session, now=NOW)
    adapter.pump()
    call = ("t1", "get_weather", '{"city":"Paris"}')
    adapter.send(status("running"), action_required(call), status("requires_action"))
    assert turn.done and turn.result().finish_reason == "tool-calls"
    stream = session.retained_stream
    assert stream is not None
    before = len(stream.events)
    adapter.send(status("running"))  # arrives between turns: the session reads it
    assert len(stream.events) == before + 1
    assert adapter.sockets[-1].open and d.stats.open_connections == 1


def test_tool_calls_without_a_runner_are_submitted_as_errors_d5() -> None:
    session, d, adapter, _env = world(tools=[weather_tool()])
    turn = session.generate("weather?", now=NOW)
    start(d, turn, session=session, now=NOW)
    adapter.pump()
    call = ("t1", "get_weather", '{"city":"Paris"}')
    adapter.send(status("running"), action_required(call), status("requires_action"))
    (body,) = [
        json.loads(c.call.body or b"")
        for c in adapter.performed
        if isinstance(c, StartHttp) and c.call.request.op == "submit_tool_results"
    ]
    (result,) = body["results"]
    assert result["tool_call_id"] == "t1" and result["is_error"] is True
    adapter.send(message(60, "Sorry."), status("waiting"))
    assert turn.done and turn.result().text == "Sorry."


def test_the_embedders_tool_outcomes_answer_the_turns_calls() -> None:
    def run(calls: tuple[ToolCall, ...]) -> list[ToolOutcome]:
        return [ToolOutcome(tool_call_id=c.tool_call_id, output={"tempC": 21}) for c in calls]

    session, d, adapter, _env = world(tools=[weather_tool()])
    adapter.tools = run
    turn = session.generate("weather?", now=NOW)
    start(d, turn, session=session, now=NOW, tools=plan_every_call)
    adapter.pump()
    call = ("t1", "get_weather", '{"city":"Paris"}')
    adapter.send(status("running"), action_required(call), status("requires_action"))
    (body,) = [
        json.loads(c.call.body or b"")
        for c in adapter.performed
        if isinstance(c, StartHttp) and c.call.request.op == "submit_tool_results"
    ]
    assert body["results"][0]["output"] == {"tempC": 21}
    assert body["results"][0].get("is_error") in (None, False)


def test_a_network_failure_reaches_the_turn_without_the_token() -> None:
    events = Events()
    session, d, adapter, _env = world(
        sink=events, rest={"POST /api/v2/chats": NetworkError(f"refused with {TOKEN}")}
    )
    turn = session.generate("hi", now=NOW)
    start(d, turn, session=session, now=NOW)
    adapter.pump()
    assert turn.done
    with pytest.raises(CoderNetworkError) as info:
        turn.result()
    assert TOKEN not in str(info.value) and "<redacted>" in str(info.value)
    assert all(TOKEN not in e.message for e in events.of(HttpErrorEvent))


def test_shutdown_closes_a_paused_stream_with_1000() -> None:
    session, d, adapter, _env = world(tools=[weather_tool()])
    start(d, session.segment("weather?", now=NOW), session=session, now=NOW)
    adapter.pump()
    call = ("t1", "get_weather", "{}")
    adapter.send(status("running"), action_required(call), status("requires_action"))
    sock = adapter.sockets[-1]
    d.close(now=NOW)
    adapter.pump()
    assert sock.client_close_codes == [1000] and sock.closed_by_client
    assert d.stats.open_connections == 0


def test_a_turn_is_recorded_from_start_to_finish() -> None:
    recorder = Recording()
    session, d, adapter, _env = world(recorder=recorder)
    tools = (weather_tool("other"),)
    turn = session.stream("hi", now=NOW, tools=tools, warnings=("careful",))
    start(d, turn, session=session, now=NOW)
    adapter.pump()
    adapter.send(status("running"), message(50, "ok"), status("waiting"))
    names = recorder.names()
    assert names[:3] == ["begin", "turn_started", "rest_exchange"]
    assert names[-1] == "turn_finished"
    assert {"connection_opened", "upgrade_sent", "ws_events"} <= set(names)
    _, started = recorder.first("turn_started")
    assert started["mode"] == "stream" and started["tools"] == tools
    assert started["warnings"] == ("careful",) and started["single_segment"] is False
    (outcome, _now), _ = recorder.first("turn_finished")
    assert outcome is turn.result()


def test_a_turn_is_recorded_from_the_time_it_was_built_not_when_the_drive_took_it() -> None:
    """Regression: an adapter that builds a turn, then awaits something before handing it to
    the drive, recorded the turn as starting later than it did; a replay then armed the
    turn's request_timeout later than the live run and let a later record (a dispose call)
    overtake it."""
    recorder = Recording()
    session, d, adapter, _env = world(recorder=recorder)
    turn = session.stream("hi", now=NOW)
    start(d, turn, session=session, now=NOW + 0.25)
    adapter.pump()
    assert recorder.first("begin")[1]["now"] == NOW
    assert recorder.first("turn_started")[1]["now"] == NOW
    archive = session.archive(now=NOW + 0.5)
    start(d, archive, session=session, now=NOW + 0.75)
    assert recorder.first("session_call")[0] == ("archive", NOW + 0.5)


def test_a_turn_with_the_sessions_own_tools_records_no_tools_and_a_failure_its_error() -> None:
    recorder = Recording()
    session, d, adapter, _env = world(
        recorder=recorder, rest={"POST /api/v2/chats": Respond(403, {"message": "no"})}
    )
    turn = session.generate("hi", now=NOW)
    start(d, turn, session=session, now=NOW)
    adapter.pump()
    assert recorder.first("turn_started")[1]["tools"] is None
    (outcome, _now), _ = recorder.first("turn_finished")
    assert outcome is turn.error and outcome is not None


def test_a_cancelled_turn_and_cleanup_calls_are_recorded() -> None:
    recorder = Recording()
    session, d, adapter, _env = world(recorder=recorder, rest={"POST /api/v2/chats": Hang()})
    turn = session.generate("hi", now=NOW)
    task = start(d, turn, session=session, now=NOW)
    adapter.pump()
    reason = TimeoutError("deadline")
    task.cancel(reason, now=NOW)
    assert recorder.first("cancelled") == ((reason, NOW), {})
    start(d, session.interrupt(now=NOW, wait=True, timeout=3.0), session=session, now=NOW)
    start(d, session.archive(now=NOW), session=session, now=NOW)
    start(d, session.dispose(now=NOW), session=session, now=NOW)
    calls = [value for name, value in recorder.calls if name == "session_call"]
    assert calls == [
        (("interrupt", NOW), {"wait": True, "timeout": 3.0}),
        (("archive", NOW), {}),
        (("dispose", NOW), {}),
    ]
    assert recorder.names().count("begin") == 1


def test_without_a_wall_clock_the_transcript_header_has_no_creation_time() -> None:
    recorder = Recording()
    d = Connection(base_url=BASE, token=TOKEN, recorder=recorder)
    start(d, Probe(), session=FakeSession(), now=NOW)
    assert recorder.first("begin")[1]["created_at"] == ""


def test_a_session_machine_that_is_not_a_turn_or_cleanup_call_records_only_the_header() -> None:
    recorder = Recording()
    session, d, _adapter, _env = world(recorder=recorder)
    start(d, Probe(), session=session, now=NOW)
    assert recorder.names() == ["begin"]


def test_a_call_whose_answer_is_refused_by_its_finish_fails_with_that_error() -> None:
    d = drive()

    def refuse(value: Any) -> Any:
        raise CoderAgentError(f"cannot use {value!r}")

    machine = Probe()
    machine.finish("an odd answer")
    task = d.start_call(Operation(machine=lambda _now, _data: machine, finish=refuse), now=NOW)
    with pytest.raises(CoderAgentError, match="cannot use 'an odd answer'"):
        task.result()


def test_a_recorder_attached_later_hears_what_follows_and_the_calls_are_built_once() -> None:
    d = drive()
    assert d.recorder is None and d.calls is d.calls
    recorder = Recording()
    d.recorder = recorder  # type: ignore[assignment]
    assert d.recorder is recorder
    start(d, Probe(get_chat()), session=FakeSession())
    assert recorder.names() == ["begin"]
