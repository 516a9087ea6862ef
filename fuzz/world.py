"""An in-memory world: the core's ``Session`` driven against the pure fake server model
(``coder_proto.fake.FakeCoderModel``) with a virtual clock and no sockets.

``ModelWorld`` is what ``coder_io_asyncio.fake_server.FakeCoderServer`` plus an adapter do,
collapsed into one deterministic loop: REST requests go to ``model.handle_http``, stream
connections to ``model.handle_upgrade`` (framed server side with wsproto), client tools are
plain functions. It reports every observation to a ``Recorder`` exactly where an adapter
would (one call per REST exchange, per chunk of received bytes, per tool run...), so the
transcripts it records have the shape of live ones. The fuzzing harnesses use it for seed
transcripts and the replay tests use it to compare a live run with its replay.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Message, RejectConnection, RejectData, Request
from wsproto.events import CloseConnection as WsCloseConnection
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from coder_proto import ToolCall
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
from coder_proto._agent.turn import Turn
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto.fake import FakeCoderModel, FakeConfig, FakeHttpResponse, StreamSubscription
from coder_proto.transcript import Recorder

__all__ = ["BASE_URL", "ModelWorld", "ToolFn"]

BASE_URL = "http://fake.test:8080"

ToolFn = Callable[[Mapping[str, Any]], Any]


class _Socket:
    def __init__(self, conn_id: int, scope: Any) -> None:
        self.conn_id = conn_id
        self.scope = scope
        self.ws = WSConnection(ConnectionType.SERVER)
        self.sub: StreamSubscription | None = None
        self.open = True  # neither side ended it
        self.ending = False  # the server side is ending it
        self.requested = False


class ModelWorld:
    """One agent session against a pure ``FakeCoderModel`` (see the module docstring).

    ``tool_fns`` maps tool names to functions of the parsed input; ``latency`` delays every REST
    answer; ``recorder`` (optional) observes everything.
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
        self.foreground: Any = None
        self.background: list[Any] = []
        self._sockets: dict[int, _Socket] = {}
        self._inbox: list[tuple[float, int, Any, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cancelled: set[Any] = set()
        self._sent_at: dict[Any, tuple[HttpRequest, float]] = {}
        if recorder is not None:
            recorder.begin(base_url=BASE_URL, config=self.config, created_at=created_at, now=start)

    # -- driving -------------------------------------------------------------------------------

    def _machines(self) -> list[Any]:
        machines = [m for m in (self.foreground, *self.background) if m is not None]
        if not isinstance(self.foreground, Turn) or self.foreground.done:
            machines.append(self.session)
        return machines

    def _schedule(self, due: float, key: Any, deliver: Callable[[], None]) -> None:
        heapq.heappush(self._inbox, (due, next(self._seq), key, deliver))

    def settle(self) -> None:
        for _ in range(1_000_000):
            busy = False
            for machine in self._machines():
                for action in machine.actions():
                    self._perform(machine, action)
                    busy = True
                deadline = machine.next_deadline()
                if deadline is not None and deadline <= self.now:
                    machine.tick(self.now)
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
        times += [d for d in (m.next_deadline() for m in self._machines()) if d is not None]
        model_due = self.model.next_deadline()
        if model_due is not None:
            times.append(model_due)
        for sock in self._sockets.values():
            if sock.sub is not None and sock.open:
                due = sock.sub.next_deadline()
                if due is not None:
                    times.append(due)
        return min(times) if times else None

    def run(self, machine: Any, *, limit: float = 3600.0) -> Any:
        """Drive ``machine`` to completion; its result, or raise its error."""
        self.foreground = machine
        self.settle()
        end = self.now + limit
        while not machine.done:
            due = self._next_due()
            if due is None or due > end:
                raise AssertionError(f"{machine!r} is stuck")
            self.now = max(self.now, due)
            self.settle()
        return machine.result()

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
        """Run one turn; return ``(result or error, parts)`` and record its start and end."""
        if self.recorder is not None:
            self.recorder.turn_started(mode=mode, prompt=prompt, now=self.now, **kwargs)
        start = self.session.stream if mode == "stream" else self.session.generate
        turn = start(prompt, now=self.now, **kwargs)
        outcome: Any
        try:
            outcome = self.run(turn)
        except Exception as exc:
            outcome = exc
        if self.recorder is not None:
            self.recorder.turn_finished(outcome, self.now)
        return outcome, list(turn.parts)

    def cancel_after(self, prompt: Any, seconds: float, *, mode: str = "generate") -> Any:
        """Start a turn and cancel it after ``seconds`` (the runtime's cancellation, D22)."""
        if self.recorder is not None:
            self.recorder.turn_started(mode=mode, prompt=prompt, now=self.now)
        start = self.session.stream if mode == "stream" else self.session.generate
        turn = start(prompt, now=self.now)
        self.foreground = turn
        self.advance(seconds)
        if not turn.done:
            if self.recorder is not None:
                self.recorder.cancelled(None, self.now)
            turn.cancel(self.now, None)
            self.settle()
        outcome: Any = turn.error if turn.error is not None else turn.result()
        if self.recorder is not None:
            self.recorder.turn_finished(outcome, self.now)
        return outcome

    def call(self, name: str, **kwargs: Any) -> Any:
        """A session call: ``interrupt``, ``archive``, ``dispose`` or ``reset_session``."""
        if self.recorder is not None:
            self.recorder.session_call(name, self.now, **kwargs)
        if name == "reset_session":
            for action in self.session.reset_session(self.now):
                self._perform(self.session, action)
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
        while any(not job.done for job in self.background):
            due = self._next_due()
            if due is None or due > end:
                break
            self.now = max(self.now, due)
            self.settle()

    # -- actions -----------------------------------------------------------------------------

    def _perform(self, machine: Any, action: Any) -> None:
        if isinstance(action, SendRequest):
            self._request(machine, action.request_id, action.request)
        elif isinstance(action, CancelRequest):
            key = (id(machine), action.request_id)
            self._cancelled.add(key)
            sent = self._sent_at.pop(key, None)
            if sent is not None and self.recorder is not None:
                self.recorder.rest_exchange(sent[0], None, sent=sent[1], now=self.now)
        elif isinstance(action, OpenConnection):
            sock = _Socket(action.conn_id, None)
            self._sockets[action.conn_id] = sock
            if self.recorder is not None:
                self.recorder.connection_opened(action, self.now)
            self._schedule(self.now, None, lambda: self._deliver(sock, "made", None))
        elif isinstance(action, SendData):
            sock_ = self._sockets.get(action.conn_id)
            if sock_ is not None and sock_.open:
                if self.recorder is not None:
                    self.recorder.data_sent(action.conn_id, action.data, self.now)
                self._from_client(sock_, action.data)
        elif isinstance(action, CloseConnection):
            sock_ = self._sockets.get(action.conn_id)
            if sock_ is not None and sock_.open:
                sock_.open = False
                if sock_.sub is not None:
                    sock_.sub.close()
                if self.recorder is not None:
                    self.recorder.connection_closed(action.conn_id, self.now)
        elif isinstance(action, RunTools):
            self._run_tools(machine, action.calls)
        elif isinstance(action, RunInBackground):
            self.background.append(action.job)
        else:  # pragma: no cover
            raise AssertionError(f"unknown action {action!r}")

    def _request(self, machine: Any, request_id: int, request: HttpRequest) -> None:
        headers = {"Coder-Session-Token": self.token}
        for name, value in request.headers:
            headers[name] = value
        answer: FakeHttpResponse = self.model.handle_http(
            request.method, request.path, headers, request.body or b"", self.now
        )
        key = (id(machine), request_id)
        self._sent_at[key] = (request, self.now)
        response = HttpResponse(
            status=answer.status,
            body=answer.body,
            headers=tuple((k.lower(), v) for k, v in answer.headers),
        )

        def deliver() -> None:
            sent = self._sent_at.pop(key, None)
            if self.recorder is not None and sent is not None:
                self.recorder.rest_exchange(request, response, sent=sent[1], now=self.now)
            machine.response_received(request_id, response, self.now)

        self._schedule(self.now + self.latency + answer.delay, key, deliver)

    def _run_tools(self, machine: Any, calls: tuple[ToolCall, ...]) -> None:
        sent = self.now
        outcomes = []
        for call in calls:
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

        def deliver() -> None:
            if self.recorder is not None:
                self.recorder.tools_run(calls, outcomes, sent=sent, now=self.now)
            machine.tool_results(outcomes, self.now)

        self._schedule(self.now + self.tool_delay, None, deliver)

    # -- sockets -------------------------------------------------------------------------------

    def _target(self) -> Any:
        if isinstance(self.foreground, Turn) and not self.foreground.done:
            return self.foreground
        return self.session

    def _deliver(self, sock: _Socket, kind: str, payload: Any) -> None:
        if kind != "made" and not sock.open and kind != "lost":
            return
        target = self._target()
        recorder = self.recorder
        if kind == "made":
            target.connection_made(sock.conn_id, self.now)
        elif kind == "data":
            if recorder is not None:
                recorder.data_received(sock.conn_id, payload, self.now)
            target.data_received(sock.conn_id, payload, self.now)

    def _to_client(self, sock: _Socket, data: bytes) -> None:
        if data and sock.open:
            self._schedule(self.now, None, lambda: self._deliver(sock, "data", data))

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
        target = self._target()
        if self.recorder is not None:
            self.recorder.connection_lost(sock.conn_id, self.now)
        target.connection_lost(sock.conn_id, self.now)

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
