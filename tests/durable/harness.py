"""In-memory driving of the durable machines and programs against the pure fake server model.

``World`` holds a ``FakeCoderModel`` (the server, answered through ``handle_http`` with a
manual clock), a ``MemoryStore`` and the clocks: ``now`` (monotonic) and ``wall`` (epoch
seconds, ``now + offset``). ``World.drive`` is the adapter loop of ``tests/core_driver.py``
for a ``DurableMachine``: it performs ``SendRequest`` on the model, ``StoreCall`` on the
store (optionally failing), ``RunTools`` with a given runner, and advances the clock to the
next deadline of the machine or of the model's workers. Nothing here decides anything the
machines decide.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from typing import Any

import attrs

from coder_proto import ToolCall
from coder_proto._actions import CancelRequest, RunTools, SendRequest, ToolOutcome
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto.durable import MemoryStore
from coder_proto.durable._effects import Invoke, WallClock
from coder_proto.durable._step import RunAgentTurn, RunMachine
from coder_proto.durable._store import StoreCall, StoreOp
from coder_proto.durable._store_engine import DurableMachine
from coder_proto.fake import FakeCoderModel, FakeConfig, Script

V2 = "/api/v2/chats"
WALL_OFFSET = 1_800_000_000.0

Runner = Callable[[tuple[ToolCall, ...]], Sequence[ToolOutcome]]


@attrs.define
class Sent:
    op: str
    method: str
    path: str
    body: Any
    status: int
    at: float


class World:
    """The server model, the store and the clocks of one test."""

    def __init__(self, *, store: Any = None, **config: Any) -> None:
        config.setdefault("chunk_delay", 0.001)
        config.setdefault("interrupt_delay", 0.05)
        self.model = FakeCoderModel(FakeConfig(**config))
        self.store = store if store is not None else MemoryStore()
        self.now = 10.0
        self.selector = PrefixSelector()
        self.sent: list[Sent] = []
        self.store_ops: list[StoreOp] = []
        self.tool_runs: list[tuple[ToolCall, ...]] = []
        self.fail_store: Callable[[StoreOp], BaseException | None] = lambda op: None
        #: A network failure message for a request, or ``None`` to send it.
        self.fail_network: Callable[[HttpRequest], str | None] = lambda request: None
        self.model.tick(self.now)

    @property
    def wall(self) -> float:
        return self.now + WALL_OFFSET

    # -- the server, as the crashed process left it ------------------------------------------

    def http(self, method: str, path: str, body: Any = None) -> Any:
        data = b"" if body is None else json.dumps(body).encode()
        response = self.model.handle_http(
            method, V2 + path, {"Coder-Session-Token": self.model.token}, data, self.now
        )
        assert response.status < 300, (method, path, response.status, response.json())
        return response.json()

    def create_chat(self, text: str, *, script: Script | None = None, tools: Any = ()) -> str:
        if script is not None:
            self.model.config.scripts.push(script)
        body: dict[str, Any] = {
            "organization_id": self.model.organization_id,
            "content": [{"type": "text", "text": text}],
        }
        if tools:
            body["unsafe_dynamic_tools"] = list(tools)
        return str(self.http("POST", "", body)["id"])

    def send(self, chat_id: str, text: str, *, script: Script | None = None) -> Any:
        if script is not None:
            self.model.config.scripts.push(script)
        return self.http(
            "POST", f"/{chat_id}/messages", {"content": [{"type": "text", "text": text}]}
        )

    def status(self, chat_id: str) -> str:
        return str(self.model.chats[chat_id].status)

    def advance(self, seconds: float) -> None:
        """Let the server run for ``seconds``."""
        end = self.now + seconds
        while True:
            due = self.model.next_deadline()
            if due is None or due > end:
                break
            self.now = max(self.now, due)
            self.model.tick(self.now)
        self.now = end
        self.model.tick(self.now)

    def settle_server(self, chat_id: str, *, limit: float = 60.0) -> str:
        """Run the server until the chat is in a terminal status."""
        end = self.now + limit
        while self.status(chat_id) not in ("waiting", "error", "requires_action"):
            due = self.model.next_deadline()
            assert due is not None and due <= end, f"chat {chat_id} never settled"
            self.now = max(self.now, due)
            self.model.tick(self.now)
        return self.status(chat_id)

    def messages(self, chat_id: str) -> list[dict[str, Any]]:
        page = self.http("GET", f"/{chat_id}/messages?limit=200")
        return sorted(page["messages"], key=lambda m: m["id"])

    def user_texts(self, chat_id: str) -> list[str]:
        out = []
        for message in self.messages(chat_id):
            if message["role"] == "user":
                out.append("".join(p.get("text", "") for p in message["content"]))
        return out

    # -- the adapter loop --------------------------------------------------------------------

    def _respond(self, request: HttpRequest) -> HttpResponse:
        answer = self.model.handle_http(
            request.method,
            request.path,
            [*request.headers, ("Coder-Session-Token", self.model.token)],
            request.body or b"",
            self.now,
        )
        self.sent.append(
            Sent(request.op, request.method, request.path, request.json, answer.status, self.now)
        )
        return HttpResponse(status=answer.status, body=answer.body, headers=answer.headers)

    def _store(self, op: StoreOp) -> Any:
        self.store_ops.append(op)
        failure = self.fail_store(op)
        if failure is not None:
            raise failure
        return op.apply(self.store)

    def drive(
        self, machine: DurableMachine[Any], *, tools: Runner | None = None, limit: float = 3600.0
    ) -> Any:
        """Drive ``machine`` to completion; return its result or raise its error."""
        end = self.now + limit
        while True:
            busy = True
            while busy:
                busy = False
                for action in machine.actions():
                    busy = True
                    self._perform(machine, action, tools)
                deadline = machine.next_deadline()
                if deadline is not None and deadline <= self.now:
                    machine.tick(self.now)
                    busy = True
            if machine.done:
                return machine.result()
            times = [t for t in (machine.next_deadline(), self.model.next_deadline()) if t]
            assert times, f"{machine!r} is stuck: nothing left to wait for"
            due = min(times)
            assert due <= end, f"{machine!r} ran past the test's limit"
            self.now = max(self.now, due)
            self.model.tick(self.now)
            machine.tick(self.now)

    def _perform(self, machine: Any, action: Any, tools: Runner | None) -> None:
        if isinstance(action, SendRequest):
            failure = self.fail_network(action.request)
            if failure is not None:
                machine.request_failed(action.request_id, failure, self.now)
            else:
                machine.response_received(
                    action.request_id, self._respond(action.request), self.now
                )
        elif isinstance(action, StoreCall):
            try:
                value = self._store(action.op)
            except Exception as exc:
                machine.store_failed(action.call_id, exc, self.now)
            else:
                machine.store_result(action.call_id, value, self.now)
        elif isinstance(action, RunTools):
            self.tool_runs.append(action.calls)
            assert tools is not None, f"unexpected RunTools {action.calls!r}"
            outcomes = tools(action.calls)
            if not isinstance(outcomes, ToolOutcome):
                outcomes = list(outcomes)
            machine.tool_results(outcomes, self.now)
        elif isinstance(action, CancelRequest):
            pass
        else:  # pragma: no cover - the machines emit nothing else
            raise AssertionError(f"unexpected action {action!r}")

    # -- programs ----------------------------------------------------------------------------

    def run_program(
        self,
        program: Generator[Any, Any, Any],
        *,
        turn: Callable[[RunAgentTurn], Any] | None = None,
        invoke: Callable[[Invoke], Any] | None = None,
        tools: Runner | None = None,
    ) -> Any:
        """Perform a program's effects: store ops, the wall clock, machines, agent turns (the
        test's ``turn`` answers them) and tool invocations."""
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = program.throw(error) if error is not None else program.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                if isinstance(effect, StoreOp):
                    value = self._store(effect)
                elif isinstance(effect, WallClock):
                    value = self.wall
                elif isinstance(effect, RunMachine):
                    value = self.drive(
                        effect.build(self.selector, self.now, self.wall), tools=tools
                    )
                elif isinstance(effect, RunAgentTurn):
                    assert turn is not None, f"unexpected {effect!r}"
                    value = turn(effect)
                elif isinstance(effect, Invoke):
                    assert invoke is not None, f"unexpected {effect!r}"
                    value = invoke(effect)
                else:  # pragma: no cover
                    raise AssertionError(f"unexpected effect {effect!r}")
            except Exception as exc:
                error = exc

    # -- what happened -----------------------------------------------------------------------

    def ops(self) -> list[str]:
        return [s.op for s in self.sent]

    def bodies(self, op: str) -> list[Any]:
        return [s.body for s in self.sent if s.op == op]
