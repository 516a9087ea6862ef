"""A Hypothesis state machine: the stream reader and the turn translator against the pure
fake server model (state machines A-C; wire 5; server-behaviour 3).

The server is ``coder_proto.fake.FakeCoderModel`` running a scripted turn; its stream
subscriptions produce real frames. Rules let time pass (frames flow), drop the connection
(the reader redials after its backoff and the new subscription replays server style), and
split the bytes of a frame delivery. Invariants: only library errors; the text and reasoning
emitted so far are a prefix of what the model streams; at the end, exactly the committed
text, once, with the model's usage and every client tool call.

``tests/fuzz/test_fuzz_stateful.py`` runs it as a test; ``python -m fuzz`` runs it for a time
budget.
"""

from __future__ import annotations

from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coder_proto import CoderAgentError, Finish, ReasoningDelta, TextDelta, ToolCall
from coder_proto._actions import CloseConnection, OpenConnection, SendData
from coder_proto._constants import TERMINAL_STATUSES
from coder_proto._stream.reader import StreamReader
from coder_proto._stream.translator import TurnTranslator
from coder_proto._wire.events import StatusEvent
from coder_proto.fake import (
    CallClientTool,
    CallServerTool,
    FakeCoderModel,
    FakeConfig,
    Retry,
    Say,
    Script,
    StreamSubscription,
    Think,
)
from coder_proto.transcript._replay import text_frame

from .pipeline import handshake_response

__all__ = ["ReaderAgainstModel"]

_SCRIPTS = (
    Script([Say("Hello from the model, streamed in small chunks.", chunk=3)]),
    Script([Think("Reasoning first.", chunk=2), Say("Then the answer.", chunk=4)]),
    Script(
        [
            Say("Calling a tool.", chunk=5),
            CallServerTool(name="read_file", args={"p": "a"}, result={"ok": 1}),
            Say("Done reading.", chunk=2),
        ]
    ),
    Script([Say("Flaky", chunk=2), Retry(times=1), Say("Recovered text.", chunk=3)]),
    Script([Say("Need the client.", chunk=4), CallClientTool(name="get_weather", args={"c": 1})]),
)


class ReaderAgainstModel(RuleBasedStateMachine):
    """See the module docstring."""

    #: Steps run across every instance (``python -m fuzz`` reports it).
    steps_run: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.model: FakeCoderModel | None = None
        self.now = 0.0

    @rule(script=st.integers(0, len(_SCRIPTS) - 1), chunk_delay=st.sampled_from([0.005, 0.02]))
    @precondition(lambda self: self.model is None)
    def start(self, script: int, chunk_delay: float) -> None:
        model = FakeCoderModel(FakeConfig(chunk_delay=chunk_delay, retry_base_delay=0.01))
        model.config.scripts.push(_SCRIPTS[script])
        self.model = model
        body = {
            "organization_id": model.organization_id,
            "content": [{"type": "text", "text": "go"}],
            "unsafe_dynamic_tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        }
        chat = model.create_chat(body, self.now)
        self.chat_id = chat.id
        self.reader = StreamReader(
            chat_id=chat.id,
            base_url="http://fuzz.invalid",
            prefix="/api/v2/chats",
            after_id=None,
            token=None,
            reader_id=1,
        )
        self.translator = TurnTranslator(dynamic_tool_names=("get_weather",), chat_id=chat.id)
        self.sub: StreamSubscription | None = None
        self.conn = 0
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[str] = []
        self.finish: Finish | None = None
        self.settled = False
        self.reader.start(self.now)
        self._actions()

    # -- plumbing ------------------------------------------------------------------------------

    def _actions(self) -> None:
        assert self.model is not None
        for action in self.reader.actions():
            if isinstance(action, OpenConnection):
                self.conn = action.conn_id
                self.reader.connection_made(self.conn, self.now)
            elif isinstance(action, SendData) and action.conn_id == self.conn and self.sub is None:
                self.sub = self.model.open_stream(self.chat_id, 0, self.now)
                self._feed(handshake_response(action.data))
            elif isinstance(action, CloseConnection) and self.sub is not None:
                self.sub.close()
                self.sub = None

    def _feed(self, data: bytes, split: int = 0) -> None:
        pieces = [data] if split <= 0 else [data[i : i + split] for i in range(0, len(data), split)]
        for piece in pieces:
            self.reader.data_received(self.conn, piece, self.now)
        self._drain()

    def _drain(self) -> None:
        while self.reader.events and not self.settled:
            event = self.reader.events.popleft()
            for part in self.translator.ingest(event):
                if type(part) is TextDelta:
                    self.text.append(part.delta)
                elif type(part) is ReasoningDelta:
                    self.reasoning.append(part.delta)
                elif type(part) is ToolCall and not part.provider_executed:
                    self.calls.append(part.tool_call_id)
            if type(event) is StatusEvent and event.status in TERMINAL_STATUSES:
                self.settled = True

    def _pull(self, split: int = 0) -> None:
        if self.sub is None or self.model is None:
            return
        for frame in self.sub.pull(self.now):
            self._feed(text_frame(frame.decode("utf-8")), split)
            if self.sub is None:
                return
        if self.sub.closed:
            self._drop()

    def _drop(self) -> None:
        if self.sub is not None:
            self.sub.close()
            self.sub = None
            self.reader.connection_lost(self.conn, self.now)
            self._actions()

    # -- rules -----------------------------------------------------------------------------

    @rule(
        dt=st.sampled_from([0.0, 0.004, 0.01, 0.03, 0.2, 1.0, 2.5]),
        split=st.sampled_from([0, 0, 1, 5]),
    )
    @precondition(lambda self: self.model is not None and not self.settled)
    def advance(self, dt: float, split: int) -> None:
        ReaderAgainstModel.steps_run += 1
        self.now += dt
        deadline = self.reader.next_deadline()
        if deadline is not None and deadline <= self.now:
            self.reader.tick(self.now)
            self._actions()
        self._pull(split)

    @rule()
    @precondition(lambda self: self.model is not None and not self.settled)
    def drop(self) -> None:
        ReaderAgainstModel.steps_run += 1
        self._drop()

    # -- invariants --------------------------------------------------------------------------

    def _expected(self) -> tuple[str, str]:
        assert self.model is not None
        chat = self.model.chats[self.chat_id]
        text: list[str] = []
        reasoning: list[str] = []
        for message in chat.messages:
            if message.role != "assistant":
                continue
            for part in message.content:
                if part.get("type") == "text":
                    text.append(part.get("text") or "")
                elif part.get("type") == "reasoning":
                    reasoning.append(part.get("text") or "")
        return "".join(text), "".join(reasoning)

    @invariant()
    def only_library_errors(self) -> None:
        if self.model is None:
            return
        error = self.reader.error
        assert error is None or isinstance(error, CoderAgentError), error

    def teardown(self) -> None:
        if self.model is None or self.reader.done:
            return
        # Let the turn finish on a healthy connection, then compare with what was committed.
        for _ in range(2000):
            if self.settled or self.reader.done:
                break
            self.now += 0.05
            deadline = self.reader.next_deadline()
            if deadline is not None and deadline <= self.now:
                self.reader.tick(self.now)
                self._actions()
            self._pull()
        if not self.settled or self.reader.error is not None:
            return
        text, reasoning = self._expected()
        emitted = "".join(self.text)
        # Exactly once: every committed character, in order, never twice (A.1-A.5, B.2).
        assert emitted == text, (emitted, text)
        assert "".join(self.reasoning) == reasoning, ("".join(self.reasoning), reasoning)
        assert len(self.calls) == len(set(self.calls)), self.calls
