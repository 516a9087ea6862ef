"""An in-memory world: the core's ``Session`` driven against the pure fake server model
(``coder_proto.fake.FakeCoderModel``) with a virtual clock and no sockets.

``ModelWorld`` is what ``coder_integrations.fake_server.FakeCoderServer`` plus an adapter do,
collapsed into one deterministic loop: the session's machines run on a ``coder_proto.Connection``
(each one a call in the session's scope, ``start_call``; its tool pauses leave every call to the
world's tool functions) whose commands the world performs (REST requests go to ``model.handle_http``, stream
connections to ``model.handle_upgrade``, framed server side with wsproto; client tools are
plain functions). The connection reports every observation to the ``Recorder`` exactly as it
does for an adapter, so the transcripts it records have the shape of live ones. The fuzzing harnesses use it for seed
transcripts and the replay tests use it to compare a live run with its replay.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Message, RejectConnection, RejectData, Request
from wsproto.events import CloseConnection as WsCloseConnection
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from coder_proto import (
    CancelHttp,
    CloseSocket,
    Conn,
    Connection,
    HttpExchange,
    InvokeTools,
    OpenSocket,
    StartHttp,
    Task,
    Tool,
    ToolBatch,
    ToolCall,
    ToolInvocation,
    WriteSocket,
)
from coder_proto._agent.session_state import SessionConfig
from coder_proto.adapter import (
    Operation,
    Session,
    ToolOutcome,
    ToolPlan,
)
from coder_proto.fake import FakeCoderModel, FakeConfig, FakeHttpResponse, StreamSubscription
from coder_proto.transcript import Recorder

__all__ = ["BASE_URL", "ModelWorld", "ToolFn"]

BASE_URL = "http://fake.test:8080"

ToolFn = Callable[[Mapping[str, Any]], Any]

#: What every planned invocation names: the world's tool functions decide the outcomes.
_ANY_TOOL = Tool(name="any_tool", description=None, input_schema={"type": "object"})


def _plan_every_call(calls: Sequence[ToolCall]) -> ToolPlan:
    return ToolPlan(invocations=tuple(ToolInvocation(call_part=c, tool=_ANY_TOOL) for c in calls))


class _Agent:
    """The agent side of the world's session: what ``Connection.reset`` reads."""

    def __init__(self, session: Session) -> None:
        self.session = session


class _Socket:
    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.conn_id = conn.conn_id
        self.ws = WSConnection(ConnectionType.SERVER)
        self.sub: StreamSubscription | None = None
        self.open = True  # neither side ended it
        self.ending = False  # the server side is ending it
        self.requested = False


class ModelWorld:
    """One agent session against a pure ``FakeCoderModel`` (see the module docstring).

    ``tool_fns`` maps tool names to functions of the parsed input; ``latency`` delays every REST
    answer; ``recorder`` (optional) observes everything, through the connection.
    """

    def __init__(
        self,
        *,
        config: FakeConfig | None = None,
        tool_fns: Mapping[str, ToolFn] | None = None,
        recorder: Recorder | None = None,
        latency: float = 0.001,
        tool_delay: float = 0.001,
        start: float = 100.0,
        created_at: str = "2026-01-01T00:00:00Z",
        **session: Any,
    ) -> None:
        self.model = FakeCoderModel(config or FakeConfig(chunk_delay=0.01))
        self.token = self.model.token
        self.tools = dict(tool_fns or {})
        self.recorder = recorder
        self.latency = latency
        self.tool_delay = tool_delay
        self.now = start
        session.setdefault("organization_id", self.model.organization_id)
        self.config = SessionConfig(base_url=BASE_URL, token=self.token, **session)
        self.session = Session(self.config)
        self.connection = Connection(
            base_url=BASE_URL, token=self.token, recorder=recorder, created_at=lambda: created_at
        )
        self.foreground: Task | None = None
        self._sockets: dict[int, _Socket] = {}
        self._inbox: list[tuple[float, int, Any, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cancelled: set[Any] = set()

    # -- driving -------------------------------------------------------------------------------

    def _schedule(self, due: float, key: Any, deliver: Callable[[], None]) -> None:
        heapq.heappush(self._inbox, (due, next(self._seq), key, deliver))

    def settle(self) -> None:
        connection = self.connection
        for _ in range(1_000_000):
            busy = False
            for command in connection.commands():
                self._perform(command)
                busy = True
            deadline = connection.next_deadline()
            if deadline is not None and deadline <= self.now:
                connection.tick(now=self.now)
                busy = True
            if self._pump():
                busy = True
            if self._inbox and self._inbox[0][0] <= self.now:
                _, _, key, deliver = heapq.heappop(self._inbox)
                if key is None or key not in self._cancelled:
                    deliver()
                busy = True
            if not busy:
                return
        raise AssertionError("the world never settled")

    def _next_due(self) -> float | None:
        times = [item[0] for item in self._inbox]
        deadline = self.connection.next_deadline()
        if deadline is not None:
            times.append(deadline)
        model_due = self.model.next_deadline()
        if model_due is not None:
            times.append(model_due)
        for sock in self._sockets.values():
            if sock.sub is not None and sock.open:
                due = sock.sub.next_deadline()
                if due is not None:
                    times.append(due)
        return min(times) if times else None

    def _start(self, machine: Any) -> Task:
        call = Operation(
            machine=lambda _now, _data: machine, session=self.session, tools=_plan_every_call
        )
        task = self.connection.start_call(call, now=self.now)
        self.foreground = task
        return task

    def _finish(self, task: Task, *, limit: float = 3600.0) -> Any:
        self.settle()
        end = self.now + limit
        while not task.done:
            due = self._next_due()
            if due is None or due > end:
                raise AssertionError(f"{task!r} is stuck")
            self.now = max(self.now, due)
            self.settle()
        return task.result()

    def run(self, machine: Any, *, limit: float = 3600.0) -> Any:
        """Drive ``machine`` to completion; its result, or raise its error."""
        return self._finish(self._start(machine), limit=limit)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass (background work, paused streams)."""
        target = self.now + seconds
        self.settle()
        while True:
            due = self._next_due()
            if due is None or due > target:
                break
            self.now = max(self.now, due)
            self.settle()
        self.now = target
        self.settle()

    def turn(
        self, prompt: Any = "hi", *, mode: str = "generate", **kwargs: Any
    ) -> tuple[Any, list[Any]]:
        """Run one turn; return ``(result or error, parts)`` (the connection records its start
        and end)."""
        start = self.session.stream if mode == "stream" else self.session.generate
        turn = start(prompt, now=self.now, **kwargs)
        outcome: Any
        try:
            outcome = self.run(turn)
        except Exception as exc:
            outcome = exc
        return outcome, list(turn.parts)

    def cancel_after(self, prompt: Any, seconds: float, *, mode: str = "generate") -> Any:
        """Start a turn and cancel it after ``seconds`` (the runtime's cancellation, D22)."""
        start = self.session.stream if mode == "stream" else self.session.generate
        task = self._start(start(prompt, now=self.now))
        self.advance(seconds)
        task.cancel(None, now=self.now)
        self.settle()
        try:
            return task.result()
        except Exception as exc:
            return exc

    def call(self, name: str, **kwargs: Any) -> Any:
        """A session call: ``interrupt``, ``archive``, ``dispose`` or ``reset_session``."""
        if name == "reset_session":
            self.connection.reset(_Agent(self.session), now=self.now)
            self.settle()
            return None
        machine = getattr(self.session, name)(now=self.now, **kwargs)
        try:
            return self.run(machine)
        except Exception as exc:
            return exc

    def drain(self, limit: float = 60.0) -> None:
        """Let background jobs finish (an agent closing awaits them, D22)."""
        end = self.now + limit
        while self.connection.stats.background_jobs:
            due = self._next_due()
            if due is None or due > end:
                break
            self.now = max(self.now, due)
            self.settle()

    # -- commands ----------------------------------------------------------------------------

    def _perform(self, command: Any) -> None:
        if isinstance(command, StartHttp):
            self._request(command.call)
        elif isinstance(command, CancelHttp):
            self._cancelled.add(command.call)
        elif isinstance(command, OpenSocket):
            sock = _Socket(command.conn)
            self._sockets[id(command.conn)] = sock
            self._schedule(
                self.now, None, lambda: self.connection.socket_made(sock.conn, now=self.now)
            )
        elif isinstance(command, WriteSocket):
            sock_ = self._sockets.get(id(command.conn))
            if sock_ is not None and sock_.open:
                self._from_client(sock_, command.data)
        elif isinstance(command, CloseSocket):
            sock_ = self._sockets.get(id(command.conn))
            if sock_ is not None and sock_.open:
                sock_.open = False
                if sock_.sub is not None:
                    sock_.sub.close()
        elif isinstance(command, InvokeTools):
            self._run_tools(command.run)
        # CancelTools: the tools ran already; TaskMoved: the loops look at their task.

    def _request(self, call: HttpExchange) -> None:
        headers = dict(call.headers)
        answer: FakeHttpResponse = self.model.handle_http(
            call.method, call.request.path, headers, call.body or b"", self.now
        )
        status, body, response_headers = answer.status, answer.body, list(answer.headers)

        def deliver() -> None:
            self.connection.http_finished(
                call, status=status, headers=response_headers, body=body, now=self.now
            )

        self._schedule(self.now + self.latency + answer.delay, call, deliver)

    def _run_tools(self, run: ToolBatch) -> None:
        outcomes = []
        for invocation in run.invocations:
            call = invocation.call_part
            fn = self.tools.get(call.tool_name)
            if fn is None:
                outcomes.append(
                    ToolOutcome(
                        tool_call_id=call.tool_call_id, output="no such tool", is_error=True
                    )
                )
                continue
            try:
                output = fn(json.loads(call.input or "{}"))
            except Exception as exc:
                outcomes.append(
                    ToolOutcome(tool_call_id=call.tool_call_id, output=str(exc), is_error=True)
                )
            else:
                outcomes.append(ToolOutcome(tool_call_id=call.tool_call_id, output=output))
        connection = self.connection

        def answer() -> None:
            for invocation, outcome in zip(run.invocations, outcomes, strict=True):
                connection.tool_finished(run, invocation, outcome=outcome, now=self.now)

        self._schedule(self.now + self.tool_delay, None, answer)

    # -- sockets -------------------------------------------------------------------------------

    def _to_client(self, sock: _Socket, data: bytes) -> None:
        if data and sock.open:
            self._schedule(self.now, None, lambda: self._data(sock, data))

    def _data(self, sock: _Socket, data: bytes) -> None:
        if sock.open:
            self.connection.socket_data(sock.conn, data, now=self.now)

    def _end(self, sock: _Socket) -> None:
        if sock.open and not sock.ending:
            sock.ending = True
            if sock.sub is not None:
                sock.sub.close()
            self._schedule(self.now, None, lambda: self._lost(sock))

    def _lost(self, sock: _Socket) -> None:
        if not sock.open:
            return
        sock.open = False
        self.connection.socket_closed(sock.conn, now=self.now)

    def _from_client(self, sock: _Socket, data: bytes) -> None:
        try:
            sock.ws.receive_data(data)
            events = list(sock.ws.events())
        except (LocalProtocolError, RemoteProtocolError):
            return
        for event in events:
            if isinstance(event, Request) and not sock.requested:
                sock.requested = True
                headers = [(k.decode(), v.decode()) for k, v in event.extra_headers]
                answer = self.model.handle_upgrade(event.target, headers, self.now)
                if isinstance(answer, FakeHttpResponse):
                    out = sock.ws.send(
                        RejectConnection(
                            status_code=answer.status,
                            headers=[(b"content-length", str(len(answer.body)).encode())],
                            has_body=True,
                        )
                    )
                    out += sock.ws.send(RejectData(data=answer.body, body_finished=True))
                    self._to_client(sock, out)
                    self._end(sock)
                    return
                assert isinstance(answer, StreamSubscription)
                sock.sub = answer
                self._to_client(sock, sock.ws.send(AcceptConnection()))

    def _pump(self) -> bool:
        """Frames the model has for each open stream, due by now."""
        moved = False
        due = self.model.next_deadline()
        if due is not None and due <= self.now:
            self.model.tick(self.now)
        for sock in list(self._sockets.values()):
            sub = sock.sub
            if sub is None or not sock.open or sock.ending:
                continue
            frames = sub.pull(self.now)
            for frame in frames:
                self._to_client(sock, sock.ws.send(Message(data=frame.decode("utf-8"))))
                moved = True
            if sub.closed:
                code = sub.close_code
                if code is not None:
                    self._to_client(sock, sock.ws.send(WsCloseConnection(code=code)))
                self._end(sock)
                moved = True
        return moved
