"""An in-memory driver for the core's machines: the reference for how an adapter drives them.

An adapter has one job: perform the commands of a ``coder_proto.Connection``, report the
outcomes with the current time, and call ``tick`` at ``next_deadline()``. ``Driver.settle`` is
that loop, with in-memory I/O instead of sockets and a fake monotonic clock instead of a real
one:

* ``StartHttp`` goes to ``http`` (a function from request to ``Respond`` / ``Hang`` /
  ``NetworkError``); the answer is reported after its delay, unless a ``CancelHttp`` came;
* ``OpenSocket`` creates a ``FakeSocket`` (the server end of a WebSocket, built from wsproto)
  whose bytes are reported with ``socket_data``;
* ``InvokeTools`` runs ``tools`` (a function from call to ``ToolOutcome``) on the call behind
  each of the pause's invocations and reports each with ``tool_finished``.

Every machine starts as a call (``Connection.start_call``, ``tests.machine_call``), in the
session's connection scope unless it is the watch; its tool pauses leave every call to
``tools``.

The connection routes every input (to the turn being driven, or to the session between turns,
so a paused stream keeps reading, H.6) and drives the background jobs (D22). Nothing here
decides anything a machine should decide.

The second half holds the scripted environments the conformance runners use (D25): REST
answers from a case's ``rest`` map with the unscripted defaults, and ``ScriptedReader``, the
stand-in stream of the ``scripted-client`` transport.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Message, Ping, RejectConnection, RejectData, Request
from wsproto.events import CloseConnection as WsCloseConnection

from coder_proto import (
    CancelHttp,
    CloseSocket,
    CoderAgentError,
    Conn,
    Connection,
    HttpExchange,
    InvokeTools,
    OpenSocket,
    StartHttp,
    Task,
    ToolCall,
    WriteSocket,
)
from coder_proto._actions import ToolOutcome
from coder_proto._agent.session import Session
from coder_proto._agent.turn import Turn
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._stream.watch import WatchMachine
from coder_proto._wire import events_from_json
from tests.machine_call import AgentOf, machine_call

# -- what the in-memory server answers ----------------------------------------------------------


@attrs.frozen
class Respond:
    """Answer with ``status`` and ``body`` (JSON unless bytes) after ``delay`` seconds."""

    status: int = 200
    body: Any = None
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()

    def response(self) -> HttpResponse:
        if self.body is None:
            data = b""
        elif isinstance(self.body, bytes):
            data = self.body
        else:
            data = json.dumps(self.body).encode()
        return HttpResponse(status=self.status, body=data, headers=self.headers)


@attrs.frozen
class Hang:
    """Never answer (until the request is cancelled)."""


@attrs.frozen
class NetworkError:
    """Fail without a response."""

    message: str = "connection refused"


Reply = Respond | Hang | NetworkError


@attrs.define
class Sent:
    """One request as the driver sent it (background jobs included)."""

    request_id: int
    request: HttpRequest
    at: float
    cancelled: bool = False


class FakeSocket:
    """The server end of one WebSocket connection (wsproto, in memory)."""

    def __init__(self, driver: Driver, conn_id: int, index: int, *, auto_accept: bool) -> None:
        self.driver = driver
        self.conn_id = conn_id
        self.index = index
        self.ws = WSConnection(ConnectionType.SERVER)
        self.request: Request | None = None
        self.auto_accept = auto_accept
        self.accepted = False
        self.ended = False  # the server side ended the connection
        self.closed_by_client = False
        self.client_close_codes: list[int] = []

    @property
    def open(self) -> bool:
        return not self.ended and not self.closed_by_client

    def from_client(self, data: bytes) -> None:
        if self.ended:
            return
        self.ws.receive_data(data)
        for event in self.ws.events():
            if isinstance(event, Request):
                self.request = event
                if self.auto_accept:
                    self.accept()
            elif isinstance(event, WsCloseConnection):
                self.client_close_codes.append(event.code)
            elif isinstance(event, Ping):
                self._to_client(self.ws.send(event.response()))

    def header(self, name: str) -> str | None:
        assert self.request is not None
        for key, value in self.request.extra_headers:
            if key.decode().lower() == name.lower():
                return value.decode()
        return None

    def _to_client(self, data: bytes) -> None:
        if data and self.open:
            self.driver.deliver_connection(self.conn_id, "data", data)

    def accept(self) -> None:
        if not self.accepted and self.request is not None and self.open:
            self.accepted = True
            self._to_client(self.ws.send(AcceptConnection()))

    def reject(self, status: int, body: bytes = b"") -> None:
        headers = [(b"content-length", str(len(body)).encode())]
        out = self.ws.send(RejectConnection(status_code=status, headers=headers, has_body=True))
        out += self.ws.send(RejectData(data=body, body_finished=True))
        self._to_client(out)
        self.eof()

    def send_events(self, events: Iterable[dict[str, Any]]) -> None:
        """One stream frame: a JSON array of events plus a newline (wire 4.2)."""
        self.send_text(json.dumps(list(events)) + "\n")

    def send_text(self, text: str) -> None:
        self.accept()
        self._to_client(self.ws.send(Message(data=text)))

    def close(self, code: int = 1000, reason: str = "") -> None:
        """A clean close from the server: a close frame, then EOF."""
        self.accept()
        self._to_client(self.ws.send(WsCloseConnection(code=code, reason=reason or None)))
        self.eof()

    def eof(self) -> None:
        if self.open:
            self.driver.deliver_connection(self.conn_id, "lost", None)
        self.ended = True

    def fail(self, message: str) -> None:
        """A socket error (TCP/TLS/DNS)."""
        if self.open:
            self.driver.deliver_connection(self.conn_id, "failed", message)
        self.ended = True

    def drop(self, code: int | None = 1006) -> None:
        """The server or network closed the connection (1006: no close frame)."""
        if code is None or code == 1006:
            self.accept()
            self.eof()
        else:
            self.close(code)


# -- the driver -------------------------------------------------------------------------------------

Tools = Callable[[ToolCall], ToolOutcome]


def _no_tools(call: ToolCall) -> ToolOutcome:
    return ToolOutcome(tool_call_id=call.tool_call_id, output="no such tool", is_error=True)


class Driver:
    """Drives a session's machines on a ``coder_proto.Connection`` against in-memory I/O with
    a fake clock: the connection routes every input and drives the background jobs; this
    performs its commands."""

    def __init__(
        self,
        session: Session,
        *,
        http: Callable[[HttpRequest], Reply],
        tools: Tools = _no_tools,
        now: float = 1000.0,
        auto_accept: bool = True,
        tool_delay: float = 0.0,
    ) -> None:
        self.session = session
        self.http = http
        self.tools = tools
        self.now = now
        self.auto_accept = auto_accept
        self.tool_delay = tool_delay
        # No token: requests reach ``http`` as the machines made them, messages unscrubbed.
        self.connection = Connection(base_url=session.config.base_url)
        self.foreground: Any = None
        #: Machines to drive beside the foreground one, in the session's scope (a test may
        #: add one; the connection's own background jobs are counted by ``background_jobs``).
        self.background: list[Any] = []
        self._tasks: dict[int, Task] = {}
        self.sent: list[Sent] = []
        self.sockets: list[FakeSocket] = []
        self.tool_runs: list[tuple[ToolCall, ...]] = []
        self._by_conn: dict[int, tuple[Conn, FakeSocket]] = {}
        self._sent_by_call: dict[int, Sent] = {}
        # (due, seq, key, deliver); key identifies a request for CancelHttp.
        self._inbox: list[tuple[float, int, Any, Callable[[], None]]] = []
        self._seq = 0

    # -- the loop an adapter would run -------------------------------------------------------

    def _scope(self, machine: Any) -> Session | None:
        """The watch has connections of its own; every other machine shares the session's."""
        return None if isinstance(machine, WatchMachine) else self.session

    def _adopt(self) -> bool:
        moved = False
        for machine in self.background:
            if id(machine) not in self._tasks:
                self._tasks[id(machine)] = self._start_call(machine)
                moved = True
        return moved

    def settle(self) -> None:
        """Perform every command and feed every outcome due by ``now``, until nothing moves."""
        connection = self.connection
        for _ in range(100_000):
            busy = self._adopt()
            for command in connection.commands():
                self._perform_command(command)
                busy = True
            deadline = connection.next_deadline()
            if deadline is not None and deadline <= self.now:
                connection.tick(now=self.now)
                busy = True
            due = [item for item in self._inbox if item[0] <= self.now]
            if due:
                item = min(due, key=lambda i: (i[0], i[1]))
                self._inbox.remove(item)
                item[3]()
                busy = True
            if not busy:
                return
        raise AssertionError("the machines never settled (a deadline that is never cleared?)")

    def _start_call(self, machine: Any) -> Task:
        call = machine_call(machine, session=self._scope(machine), tools=True)
        return self.connection.start_call(call, now=self.now)

    def reset(self) -> None:
        """The agent's ``reset_session`` (``Connection.reset``): a paused stream is closed;
        the commands it turned into are performed."""
        self.connection.reset(AgentOf(self.session), now=self.now)
        for command in self.connection.commands():
            self._perform_command(command)

    def close_stream(self) -> None:
        """The agent closes without archiving (``Connection.start_close`` with
        ``archive=False``): the session's stream is closed, a running segment's too."""
        self.connection.start_close(AgentOf(self.session), now=self.now, archive=False)
        for command in self.connection.commands():
            self._perform_command(command)

    def _perform_command(self, command: Any) -> None:
        connection = self.connection
        if isinstance(command, StartHttp):
            self._send(command.call)
        elif isinstance(command, CancelHttp):
            sent = self._sent_by_call.get(id(command.call))
            if sent is not None:
                sent.cancelled = True
            key = id(command.call)
            self._inbox = [i for i in self._inbox if i[2] != key]
        elif isinstance(command, OpenSocket):
            conn = command.conn
            sock = FakeSocket(self, conn.conn_id, len(self.sockets), auto_accept=self.auto_accept)
            self.sockets.append(sock)
            self._by_conn[conn.conn_id] = (conn, sock)
            self.deliver_connection(conn.conn_id, "made", None)
        elif isinstance(command, WriteSocket):
            entry = self._by_conn.get(command.conn.conn_id)
            if entry is not None and entry[0] is command.conn and entry[1].open:
                entry[1].from_client(command.data)
        elif isinstance(command, CloseSocket):
            entry = self._by_conn.get(command.conn.conn_id)
            if entry is not None and entry[0] is command.conn:
                entry[1].closed_by_client = True
        elif isinstance(command, InvokeTools):
            run = command.run
            self.tool_runs.append(run.calls)
            answers = [(i, self.tools(i.call_part)) for i in run.invocations]

            def answer() -> None:
                for invocation, outcome in answers:
                    connection.tool_finished(run, invocation, outcome=outcome, now=self.now)

            self._schedule(self.now + self.tool_delay, None, answer)
        # CancelTools: outcomes come back at once or not at all; TaskMoved: the loop looks
        # at its machines after every step.

    def _send(self, call: HttpExchange) -> None:
        sent = Sent(call.request_id, call.request, self.now)
        self.sent.append(sent)
        self._sent_by_call[id(call)] = sent
        reply = self.http(call.request)
        key = id(call)
        connection = self.connection
        if isinstance(reply, Respond):
            response = reply.response()
            self._schedule(
                self.now + reply.delay,
                key,
                lambda: connection.http_finished(
                    call,
                    status=response.status,
                    headers=response.headers,
                    body=response.body,
                    reason=response.reason,
                    now=self.now,
                ),
            )
        elif isinstance(reply, NetworkError):
            message = reply.message
            self._schedule(
                self.now, key, lambda: connection.http_finished(call, error=message, now=self.now)
            )

    def _schedule(self, due: float, key: Any, deliver: Callable[[], None]) -> None:
        self._seq += 1
        self._inbox.append((due, self._seq, key, deliver))

    def deliver_connection(self, conn_id: int, kind: str, payload: Any) -> None:
        """Queue a connection input; the connection routes it (the turn being driven, else
        the session)."""
        entry = self._by_conn.get(conn_id)
        if entry is None:
            return
        conn = entry[0]
        connection = self.connection

        def deliver() -> None:
            if kind == "made":
                connection.socket_made(conn, now=self.now)
            elif kind == "data":
                connection.socket_data(conn, payload, now=self.now)
            elif kind == "lost":
                connection.socket_closed(conn, now=self.now)
            else:
                connection.socket_closed(conn, payload, now=self.now)

        self._schedule(self.now, None, deliver)

    # -- time and control ----------------------------------------------------------------------

    def next_due(self) -> float | None:
        times = [i[0] for i in self._inbox]
        deadline = self.connection.next_deadline()
        if deadline is not None:
            times.append(deadline)
        return min(times) if times else None

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``, waking every deadline on the way."""
        target = self.now + seconds
        self.settle()
        while True:
            due = self.next_due()
            if due is None or due > target:
                break
            self.now = max(self.now, due)
            self.settle()
        self.now = target
        self.settle()

    def start(self, machine: Any) -> Any:
        self.foreground = machine
        self._tasks[id(machine)] = self._start_call(machine)
        self.settle()
        return machine

    def run(self, machine: Any, *, limit: float = 3600.0) -> Any:
        """Drive ``machine`` to completion (advancing the clock to each deadline) and return
        its result or raise its error."""
        self.start(machine)
        end = self.now + limit
        while not machine.done:
            due = self.next_due()
            if due is None or due > end:
                raise AssertionError(f"{machine!r} is stuck: nothing left to wait for")
            self.now = max(self.now, due)
            self.settle()
        return machine.result()

    def cancel(self, reason: BaseException | None = None) -> None:
        """The runtime cancelled the foreground call (D22)."""
        task = self._tasks.get(id(self.foreground))
        if task is not None:
            task.cancel(reason, now=self.now)
        self.settle()

    def drain_background(self, limit: float = 60.0) -> None:
        """Let background jobs finish (the agent closing awaits them, D22)."""
        end = self.now + limit
        while self.connection.stats.background_jobs or any(not m.done for m in self.background):
            due = self.next_due()
            if due is None or due > end:
                raise AssertionError("a background job never finished")
            self.now = max(self.now, due)
            self.settle()

    # -- what happened -------------------------------------------------------------------------

    def requests(self, *, include_cancelled: bool = True) -> list[HttpRequest]:
        return [s.request for s in self.sent if include_cancelled or not s.cancelled]

    def routes(self) -> list[str]:
        """``METHOD path?query`` of every request sent, in order."""
        return [f"{r.method} {r.path}" for r in self.requests()]


# -- scripted environments (conformance, D25) -----------------------------------------------------


class ScriptedReader:
    """The ``scripted-client`` stand-in stream (FORMAT 4.7): it serves batches of events and
    then stays open, ends, or fails with a bare agent error. It speaks the reader interface
    the segment uses and opens no connection."""

    def __init__(self, *, chat_id: str, reader_id: int, after_id: int | None) -> None:
        self.chat_id = chat_id
        self.reader_id = reader_id
        self.after_id = after_id
        self.events: collections.deque[Any] = collections.deque()
        self._done = False
        self._error: CoderAgentError | None = None

    @property
    def done(self) -> bool:
        return self._done

    @property
    def error(self) -> CoderAgentError | None:
        return self._error

    def push(self, events: Iterable[dict[str, Any]]) -> None:
        if not self._done:
            self.events.extend(events_from_json(list(events)))

    def end(self, error: CoderAgentError | None = None) -> None:
        if not self._done:
            self._done = True
            self._error = error

    def start(self, now: float) -> None:
        pass

    def connection_made(self, conn_id: int, now: float) -> None:
        pass

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        pass

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        pass

    def connection_lost(self, conn_id: int, now: float) -> None:
        pass

    def tick(self, now: float) -> None:
        pass

    def close(self, now: float) -> None:
        self._done = True

    def actions(self) -> list[Any]:
        return []

    def next_deadline(self) -> float | None:
        return None

    def release_events(self) -> None:
        pass  # the scripted stream keeps its queue


def chat_stub(chat_id: str = "chat-1", **fields: Any) -> dict[str, Any]:
    """The chat every unscripted route answers with (FORMAT 4.7, D25)."""
    chat = {
        "id": chat_id,
        "organization_id": "org-1",
        "owner_id": "u",
        "title": "t",
        "status": "running",
        "created_at": "",
        "updated_at": "",
        "archived": False,
    }
    chat.update(fields)
    return chat


def empty_page() -> dict[str, Any]:
    return {"messages": [], "queued_messages": [], "has_more": False}


# -- the conformance case environment (FORMAT 4.6-4.7, D25) ---------------------------------------

PREFIX = "/api/experimental/chats"


class AbortError(Exception):
    """The caller's abort reason in the cases (the runtime's own cancellation, D22)."""


def rewrite(path: str) -> str:
    """D25: compare and look up paths under the experimental prefix."""
    return path.replace("/api/v2/chats", PREFIX)


def _reply(value: Any, request: HttpRequest | None = None) -> Reply:
    """A scripted answer: a ``Reply``, a function of the request, ``{status, body}``,
    ``{delayMs, body}``, ``{hang: true}``, ``{hangUntilAbort: true}``, or a bare body (200)."""
    if isinstance(value, Respond | Hang | NetworkError):
        return value
    if callable(value):
        return _reply(value(request), request)
    if isinstance(value, dict):
        if value.get("hang") or value.get("hangUntilAbort"):
            return Hang()
        if isinstance(value.get("status"), int) or "delayMs" in value:
            return Respond(
                int(value.get("status", 200)),
                value.get("body"),
                delay=float(value.get("delayMs", 0)) / 1000.0,
            )
    return Respond(200, value)


def _ts_name(op: str) -> str:
    head, *rest = op.split("_")
    return head + "".join(word.capitalize() for word in rest)


class CaseEnv:
    """A case's world: the scripted REST of D25 and FORMAT 4.7, sockets driven by the
    timeline (``real-reader``) or the ``scripted-client`` stand-in stream, a fake clock, and a
    recording transport-event sink."""

    def __init__(
        self,
        *,
        rest: dict[str, Any] | None = None,
        transport: str = "real-reader",
        stream_batches: list[list[dict[str, Any]]] | None = None,
        stream_then: Any = None,
        tool_output: Callable[[dict[str, Any]], Any] | None = None,
        organization_id: str = "org-1",
    ) -> None:
        self.rest = {rewrite(k): v for k, v in (rest or {}).items()}
        self.transport = transport
        self.stream_batches = stream_batches or []
        self.stream_then = stream_then
        self.tool_output = tool_output or (lambda args: {**args, "tempC": 21})
        self.organization_id = organization_id
        self.events: list[Any] = []
        self.readers: list[ScriptedReader] = []
        self.dials: list[tuple[str, int | None]] = []
        self.ops: list[str] = []
        self.tool_inputs: list[Any] = []
        self._lists: dict[str, int] = {}
        self._next_message_id = 1
        self._batch_index = 0

    # -- pieces the session and driver take -------------------------------------------------

    def reader_factory(self, **kwargs: Any) -> Any:
        chat_id, after_id = kwargs["chat_id"], kwargs["after_id"]
        self.dials.append((chat_id, after_id))
        self.ops.append(
            f"streamEvents({chat_id}" + (f", afterId={after_id})" if after_id is not None else ")")
        )
        if self.transport != "scripted-client":
            from coder_proto._stream.reader import StreamReader

            return StreamReader(**kwargs)
        reader = ScriptedReader(chat_id=chat_id, reader_id=kwargs["reader_id"], after_id=after_id)
        self.readers.append(reader)
        if self._serve_next_batch(reader):
            then = self.stream_then
            if isinstance(then, CoderAgentError):
                reader.end(then)
            elif then == "end":
                reader.end()
            elif isinstance(then, dict) and "throw" in then:
                reader.end(CoderAgentError(str(then["throw"].get("message", ""))))
        return reader

    def tools(self, call: ToolCall) -> ToolOutcome:
        args = json.loads(call.input)
        self.tool_inputs.append(args)
        return ToolOutcome(tool_call_id=call.tool_call_id, output=self.tool_output(args))

    def sink(self, event: Any) -> None:
        self.events.append(event)

    # -- REST (D25) ------------------------------------------------------------------------------

    def http(self, request: HttpRequest) -> Reply:
        path = rewrite(request.path)
        route, _, query = path.partition("?")
        method = request.method
        self.ops.append(self._op_label(request, route, query))
        key = f"{method} {route}"
        if key in self.rest:
            value = self.rest[key]
            if isinstance(value, list):
                index = self._lists.get(key, 0)
                self._lists[key] = index + 1
                value = value[min(index, len(value) - 1)]
            return _reply(value, request)
        if method == "GET" and route.endswith("/messages"):
            if query == "limit=1" and "getMessages(limit=1)" in self.rest:
                return _reply(self.rest["getMessages(limit=1)"])
            if "GET messages" in self.rest:
                scripted = self.rest["GET messages"]
                if isinstance(scripted, dict) and ("delayMs" in scripted or "hang" in scripted):
                    return _reply(scripted)
                return Respond(200, scripted)
            return Respond(200, empty_page())
        if method == "POST" and route == PREFIX:
            if "createChat" in self.rest:
                return _reply(self.rest["createChat"])
            return Respond(201, chat_stub(organization_id=self.organization_id))
        if method == "POST" and route.endswith("/messages"):
            if "createChatMessage" in self.rest:
                return _reply(self.rest["createChatMessage"])
            return Respond(200, {"message": self._user_message(route, request), "queued": False})
        if method == "POST" and route.endswith("/interrupt"):
            return Respond(200, chat_stub(status="interrupting"))
        if method == "POST" and route.endswith("/tool-results"):
            if self.transport == "scripted-client" and self.readers:
                self._serve_next_batch(self.readers[-1])
            return Respond(204)
        if method == "POST" and route == f"{PREFIX}/files":
            return Respond(201, {"id": "file-1"})
        if method in ("DELETE", "PATCH"):
            return Respond(204)
        return Respond(200, chat_stub(organization_id=self.organization_id))

    def _serve_next_batch(self, reader: ScriptedReader) -> bool:
        """Each dial serves the next batch; a tool-result submission pushes the next one onto
        the live stream (FORMAT 4.7 ``scripted-client``)."""
        index = self._batch_index
        if index >= len(self.stream_batches):
            return False
        self._batch_index += 1
        reader.push(self.stream_batches[index])
        return True

    def _user_message(self, route: str, request: HttpRequest) -> dict[str, Any]:
        message_id = self._next_message_id
        self._next_message_id += 1
        chat_id = route[len(PREFIX) + 1 :].partition("/")[0]
        content = (request.json or {}).get("content", [])
        return {
            "id": message_id,
            "chat_id": chat_id,
            "role": "user",
            "created_at": "",
            "content": content,
        }

    def _op_label(self, request: HttpRequest, route: str, query: str) -> str:
        name = _ts_name(request.op)
        chat = route[len(PREFIX) + 1 :].partition("/")[0] if route.startswith(PREFIX + "/") else ""
        args = [a for a in (chat, query.replace("&", ", ")) if a]
        return f"{name}({', '.join(args)})"

    # -- what happened -----------------------------------------------------------------------

    def of(self, name: str) -> list[Any]:
        return [e for e in self.events if type(e).__name__ == name]


def ai_sdk_prompt(prompt: Any) -> Any:
    """An AI SDK prompt (FORMAT 4.7 ``calls[].prompt``) as our prompt messages."""
    import base64

    from coder_proto import (
        AssistantMessage,
        FileContent,
        SystemMessage,
        TextContent,
        ToolMessage,
        ToolResultContent,
        UserMessage,
    )
    from coder_proto._agent.prompt import tool_output_to_wire

    if isinstance(prompt, str):
        return prompt
    messages: list[Any] = []
    for message in prompt:
        role = message["role"]
        content = message.get("content")
        if role == "system":
            messages.append(SystemMessage(content if isinstance(content, str) else ""))
        elif role == "user":
            parts: list[Any] = []
            for part in content:
                if part["type"] == "text":
                    parts.append(TextContent(part.get("text", "")))
                elif part["type"] == "file":
                    data = part.get("data")
                    raw = (
                        base64.b64decode(data["base64"])
                        if isinstance(data, dict) and "base64" in data
                        else None
                    )
                    file_id = (part.get("providerOptions") or {}).get("coder", {}).get("fileId")
                    parts.append(
                        FileContent(
                            data=raw,
                            media_type=part.get("mediaType"),
                            filename=part.get("filename"),
                            file_id=file_id,
                        )
                    )
            messages.append(UserMessage(tuple(parts)))
        elif role == "assistant":
            messages.append(AssistantMessage(tuple(content or ())))
        elif role == "tool":
            results = []
            for part in content:
                output, is_error = tool_output_to_wire(part.get("output") or {})
                results.append(
                    ToolResultContent(
                        tool_call_id=part["toolCallId"],
                        tool_name=part.get("toolName", ""),
                        output=output,
                        is_error=is_error,
                    )
                )
            messages.append(ToolMessage(tuple(results)))
    return messages


# -- wire builders and a harness for unit tests --------------------------------------------------

CHAT = "chat-1"


def status(value: str, chat_id: str = CHAT) -> dict[str, Any]:
    return {"type": "status", "chat_id": chat_id, "status": {"status": value}}


def delta(
    text: str, seq: int | None = None, *, hv: int = 1, ga: int = 1, kind: str = "text"
) -> dict[str, Any]:
    payload: dict[str, Any] = {"role": "assistant", "part": {"type": kind, "text": text}}
    if seq is not None:
        payload.update(history_version=hv, generation_attempt=ga, seq=seq)
    return {"type": "message_part", "chat_id": CHAT, "message_part": payload}


def message(
    message_id: int,
    content: Any = "",
    *,
    role: str = "assistant",
    usage: dict[str, Any] | None = None,
    queued_message_id: int | None = None,
) -> dict[str, Any]:
    if isinstance(content, str):
        content = [{"type": "text", "text": content}] if content else []
    body: dict[str, Any] = {
        "id": message_id,
        "chat_id": CHAT,
        "role": role,
        "created_at": "",
        "content": content,
    }
    if usage is not None:
        body["usage"] = usage
    if queued_message_id is not None:
        body["queued_message_id"] = queued_message_id
    return {"type": "message", "chat_id": CHAT, "message": body}


def tool_call_part(call_id: str, name: str, args: Any = None, **extra: Any) -> dict[str, Any]:
    part = {"type": "tool-call", "tool_call_id": call_id, "tool_name": name, **extra}
    if args is not None:
        part["args"] = args
    return part


def action_required(*calls: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "type": "action_required",
        "chat_id": CHAT,
        "action_required": {
            "tool_calls": [
                {"tool_call_id": cid, "tool_name": name, "args": args} for cid, name, args in calls
            ]
        },
    }


def error_event(message_text: str = "boom", **fields: Any) -> dict[str, Any]:
    return {"type": "error", "chat_id": CHAT, "error": {"message": message_text, **fields}}


def queue_update(*entries: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "queue_update", "chat_id": CHAT}
    if entries:
        event["queued_messages"] = list(entries)
    return event


def weather_tool(name: str = "get_weather") -> Any:
    from coder_proto import DynamicTool

    return DynamicTool(
        name=name,
        description="Get the weather.",
        input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
    )


class Harness:
    """A session, its driver and a D25 world, for unit tests. ``config`` goes to
    ``SessionConfig``; ``rest`` overrides answers (v2 or experimental paths)."""

    def __init__(
        self,
        *,
        rest: dict[str, Any] | None = None,
        observe: bool = True,
        tool_output: Callable[[dict[str, Any]], Any] | None = None,
        tools_fn: Tools | None = None,
        transport: str = "real-reader",
        stream_batches: list[list[dict[str, Any]]] | None = None,
        stream_then: Any = None,
        **config: Any,
    ) -> None:
        from coder_proto._agent.session_state import SessionConfig
        from coder_proto._transport_events import TransportEventSink

        config.setdefault("base_url", "https://coder.test")
        config.setdefault("token", "tok-secret")
        config.setdefault("organization_id", "org-1")
        self.env = CaseEnv(
            rest=rest,
            tool_output=tool_output,
            transport=transport,
            stream_batches=stream_batches,
            stream_then=stream_then,
        )
        sink = TransportEventSink(self.env.sink, wall_clock=lambda: 0.0) if observe else None
        self.session = Session(
            SessionConfig(**config), sink=sink, reader_factory=self.env.reader_factory
        )
        self.driver = Driver(self.session, http=self.env.http, tools=tools_fn or self.env.tools)

    @property
    def now(self) -> float:
        return self.driver.now

    def generate(self, prompt: Any = "hi", **kwargs: Any) -> Turn:
        return self.driver.start(self.session.generate(prompt, now=self.now, **kwargs))

    def stream(self, prompt: Any = "hi", **kwargs: Any) -> Turn:
        return self.driver.start(self.session.stream(prompt, now=self.now, **kwargs))

    def segment(self, prompt: Any = "hi", **kwargs: Any) -> Turn:
        return self.driver.start(self.session.segment(prompt, now=self.now, **kwargs))

    @property
    def socket(self) -> FakeSocket:
        return self.driver.sockets[-1]

    def send(self, *events: dict[str, Any], socket: int = -1) -> None:
        self.driver.sockets[socket].send_events(events)
        self.driver.settle()

    def advance(self, seconds: float) -> None:
        self.driver.advance(seconds)

    def routes(self, method: str | None = None) -> list[str]:
        """Requests sent (v2 paths, query included), optionally of one method."""
        return [
            f"{r.method} {r.path}"
            for r in self.driver.requests()
            if method is None or r.method == method
        ]

    def ops(self) -> list[str]:
        return [r.op for r in self.driver.requests()]

    def bodies(self, op: str) -> list[Any]:
        return [r.json for r in self.driver.requests() if r.op == op]

    def count(self, op: str) -> int:
        return sum(1 for r in self.driver.requests() if r.op == op)

    def of(self, type_name: str) -> list[Any]:
        return [e for e in self.env.events if e.type == type_name]
