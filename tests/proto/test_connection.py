"""The embedder's object (``coder_proto.Connection``): one set of inputs, one set of commands.

An in-memory embedder (``Embedder``) performs the commands the way a real loop would: REST
answered by a D25 world (``tests.core_driver.CaseEnv``), sockets ending in wsproto server ends
(``tests.core_driver.FakeSocket``), tool invocations called inline, a fake monotonic clock.
What is asserted is what an embedder sees: the commands, the tasks' parts and results, and
what went to the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest

import coder_proto
from coder_proto import (
    CancelHttp,
    CancelTools,
    CloseSocket,
    CoderAgentError,
    CoderNetworkError,
    Connection,
    GenerateResult,
    HttpRequestEvent,
    InvokeTools,
    OpenSocket,
    StartHttp,
    StructuredOutputError,
    Task,
    TaskMoved,
    TextDelta,
    ToolBatch,
    tool,
)
from coder_proto._agent.structured_output import STRUCTURED_OUTPUT_TOOL
from coder_proto._rest.http import HttpRequest
from coder_proto._transport_events import TransportEventSink
from tests.core_driver import (
    CaseEnv,
    NetworkError,
    Respond,
    action_required,
    delta,
    message,
    status,
)
from tests.proto._connection_harness import NOW, ConnectionHarness

TOKEN = "tok-secret-4c1d"
BASE = "https://coder.test"


@tool
def get_weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "tempC": 21}


@tool
def broken(city: str) -> str:
    """Always fails."""
    raise RuntimeError(f"no forecast for {city}")


@attrs.frozen
class Answer:
    tempC: int


class Embedder(ConnectionHarness):
    """Performs a connection's commands in memory (``tests.proto._connection_harness``), tool
    functions called inline unless ``hold_tools``."""

    def __init__(self, conn: Connection, http: Callable[[HttpRequest], Any]) -> None:
        super().__init__(conn, http)
        self.hold_tools = False
        self.runs: list[ToolBatch] = []

    def invoke_tools(self, run: ToolBatch) -> None:
        self.runs.append(run)
        if not self.hold_tools:
            self.run_tools(run)

    def run_tools(self, run: ToolBatch) -> None:
        for invocation in run.invocations:
            try:
                value = invocation.call()
            except Exception as exc:
                self.conn.tool_finished(run, invocation, error=exc, now=self.now)
            else:
                self.conn.tool_finished(run, invocation, value=value, now=self.now)

    def bodies(self, op: str) -> list[Any]:
        return [
            json.loads(c.call.body or b"") for c in self.of(StartHttp) if c.call.request.op == op
        ]


def setup(
    *, rest: dict[str, Any] | None = None, on_event: Any = None, **options: Any
) -> tuple[Connection, Any, Embedder]:
    env = CaseEnv(rest=rest)
    conn = Connection(base_url=BASE, token=TOKEN, on_event=on_event)
    options.setdefault("organization_id", "org-1")
    agent = conn.agent(reader_factory=env.reader_factory, **options)
    return conn, agent, Embedder(conn, env.http)


WEATHER = ("t1", "get_weather", '{"city":"Paris"}')


# -- the surface -----------------------------------------------------------------------------------


def test_the_connection_and_its_vocabulary_are_public() -> None:
    for name in (
        "Connection",
        "Task",
        "ToolBatch",
        "ToolInvocation",
        "OpenSocket",
        "WriteSocket",
        "CloseSocket",
        "StartHttp",
        "CancelHttp",
        "InvokeTools",
        "CancelTools",
        "StoreRequest",
        "ApplyStore",
        "TaskMoved",
    ):
        assert name in coder_proto.__all__, name


def test_construction_does_no_io_and_hands_out_nothing() -> None:
    conn = Connection(base_url=BASE, token=TOKEN)
    assert conn.commands() == [] and conn.next_deadline() is None
    assert TOKEN not in repr(conn)


# -- agent turns -----------------------------------------------------------------------------------


def test_generate_runs_the_whole_client_tool_loop() -> None:
    """A generate turn: the pause's calls reach the embedder as ready invocations, the
    values it reports are submitted, the stream goes on and the task ends with the
    ``GenerateResult``; the embedder is woken with ``TaskMoved``."""
    conn, agent, e = setup(tools=[get_weather])
    task = conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    assert task.kind == "generate" and not task.done
    e.send(status("running"), action_required(WEATHER), status("requires_action"))
    (run,) = e.runs
    assert [i.tool.name for i in run.invocations] == ["get_weather"]
    assert run.invocations[0].kwargs == {"city": "Paris"}
    (submitted,) = e.bodies("submit_tool_results")
    assert submitted["results"][0]["output"] == {"city": "Paris", "tempC": 21}
    e.send(status("running"), message(60, "It is 21C."), status("waiting"))
    assert task.done
    result = task.result()
    assert isinstance(result, GenerateResult) and result.text == "It is 21C."
    assert any(isinstance(c, TaskMoved) and c.task is task for c in e.performed)
    assert not agent.busy


def test_the_tool_policy_runs_inside_duplicates_unknown_and_invalid_calls_are_answered() -> None:
    """Only runnable calls reach the embedder: a repeated id is dropped, an unknown tool
    and input that fails validation are answered with errors by the core."""
    conn, agent, e = setup(tools=[get_weather])
    conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    calls = (
        WEATHER,
        WEATHER,
        ("t2", "nope", "{}"),
        ("t3", "get_weather", '{"city": 5}'),
    )
    e.send(status("running"), action_required(*calls), status("requires_action"))
    (run,) = e.runs
    assert [i.tool_call_id for i in run.invocations] == ["t1"]
    (submitted,) = e.bodies("submit_tool_results")
    by_id = {r["tool_call_id"]: r for r in submitted["results"]}
    assert sorted(by_id) == ["t1", "t2", "t3"]
    assert by_id["t2"]["is_error"] is True and "unknown tool" in by_id["t2"]["output"]
    assert by_id["t3"]["is_error"] is True
    assert by_id["t1"].get("is_error") in (None, False)


def test_a_pause_with_nothing_to_run_is_answered_without_the_embedder() -> None:
    conn, agent, e = setup(tools=[get_weather])
    conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    e.send(status("running"), action_required(("t2", "nope", "{}")), status("requires_action"))
    assert e.runs == [] and e.of(InvokeTools) == []
    (submitted,) = e.bodies("submit_tool_results")
    assert submitted["results"][0]["is_error"] is True


def test_a_tool_that_raised_is_an_error_result_and_the_loop_goes_on() -> None:
    conn, agent, e = setup(tools=[broken])
    task = conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    e.send(status("running"), action_required(("t1", "broken", '{"city":"Oslo"}')))
    e.send(status("requires_action"))
    (submitted,) = e.bodies("submit_tool_results")
    (result,) = submitted["results"]
    assert result["is_error"] is True and "no forecast for Oslo" in result["output"]
    e.send(status("running"), message(60, "Sorry."), status("waiting"))
    assert task.result().text == "Sorry."


def test_outcomes_are_submitted_once_every_invocation_reported_and_late_reports_ignored() -> None:
    conn, agent, e = setup(tools=[get_weather])
    e.hold_tools = True
    conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    second = ("t2", "get_weather", '{"city":"Rome"}')
    e.send(status("running"), action_required(WEATHER, second), status("requires_action"))
    (run,) = e.runs
    first, last = run.invocations
    conn.tool_finished(run, last, value={"tempC": 30}, now=NOW)
    e.pump()
    assert e.bodies("submit_tool_results") == [] and run.pending == (first,)
    conn.tool_finished(run, first, value={"tempC": 20}, now=NOW)
    conn.tool_finished(run, first, value={"tempC": 99}, now=NOW)  # a late repeat: ignored
    e.pump()
    (submitted,) = e.bodies("submit_tool_results")
    assert [r["output"] for r in submitted["results"]] == [{"tempC": 20}, {"tempC": 30}]


def test_a_stream_delivers_parts_live_and_ends_with_its_result() -> None:
    conn, agent, e = setup()
    task = conn.start_turn(agent, "hi", mode="stream", now=NOW)
    e.pump()
    e.send(status("running"), delta("Hel"), delta("lo"))
    parts = task.take_parts()
    assert [p.delta for p in parts if isinstance(p, TextDelta)] == ["Hel", "lo"]
    assert task.take_parts() == []
    e.send(message(50, "Hello"), status("waiting"))
    assert task.done and task.result().text == "Hello"


def test_one_turn_per_agent_at_a_time() -> None:
    conn, agent, _e = setup()
    conn.start_turn(agent, "hi", now=NOW)
    with pytest.raises(CoderAgentError):
        conn.start_turn(agent, "again", now=NOW)


def test_an_unknown_mode_is_refused_and_leaves_the_agent_free() -> None:
    conn, agent, _e = setup()
    with pytest.raises(CoderAgentError, match="mode"):
        conn.start_turn(agent, "hi", mode="batch", now=NOW)
    assert not agent.busy


def test_a_failed_turn_raises_its_error_without_the_token() -> None:
    conn, agent, e = setup(rest={"POST /api/v2/chats": NetworkError(f"refused {TOKEN}")})
    task = conn.start_turn(agent, "hi", now=NOW)
    e.pump()
    assert task.done
    with pytest.raises(CoderNetworkError) as info:
        task.result()
    assert TOKEN not in str(info.value)
    assert not agent.busy


def test_structured_output_filing_is_answered_by_the_core() -> None:
    conn, agent, e = setup(output_type=Answer)
    task = conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    filing = ("s1", STRUCTURED_OUTPUT_TOOL, '{"tempC": 21}')
    e.send(status("running"), action_required(filing), status("requires_action"))
    assert e.runs == []
    (submitted,) = e.bodies("submit_tool_results")
    assert submitted["results"][0].get("is_error") in (None, False)
    e.send(status("running"), message(60, "Filed."), status("waiting"))
    assert task.result().output == Answer(tempC=21)


def test_a_missing_filing_nudges_the_idle_chat_once_then_fails() -> None:
    """The structured-output ladder: no filing -> one follow-up turn on the same chat ->
    still none -> ``StructuredOutputError``."""
    conn, agent, e = setup(output_type=Answer)
    task = conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    e.send(status("running"), message(60, "It is warm."), status("waiting"))
    assert not task.done
    assert len(e.bodies("create_chat_message")) == 1  # the nudge went to the same chat
    e.send(status("running"), message(62, "Still warm."), status("waiting"))
    assert task.done
    with pytest.raises(StructuredOutputError, match="after one nudge"):
        task.result()
    assert not agent.busy


def test_cancelling_a_turn_interrupts_the_run_in_the_background() -> None:
    conn, agent, e = setup()
    task = conn.start_turn(agent, "hi", now=NOW)
    e.pump()
    e.send(status("running"))
    reason = KeyboardInterrupt()
    task.cancel(reason, now=NOW)
    assert task.done
    with pytest.raises(CoderAgentError, match="cancelled"):
        task.result()
    e.pump()
    assert any(c.call.request.op == "interrupt_chat" for c in e.of(StartHttp))
    assert conn.stats.background_jobs == 0 and not agent.busy
    task.cancel(reason, now=NOW)  # done: nothing happens
    assert conn.commands() == []


def test_cancelling_during_a_tool_run_cancels_the_tools() -> None:
    conn, agent, e = setup(tools=[get_weather])
    e.hold_tools = True
    task = conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    e.send(status("running"), action_required(WEATHER), status("requires_action"))
    (run,) = e.runs
    task.cancel(None, now=NOW)
    e.pump()
    assert [c.run for c in e.of(CancelTools)] == [run] and run.finished
    conn.tool_finished(run, run.invocations[0], value={"tempC": 1}, now=NOW)  # too late: ignored
    e.pump()
    assert e.bodies("submit_tool_results") == []


# -- plain calls and the watch -----------------------------------------------------------------


def test_a_plain_call_runs_with_the_token_and_events() -> None:
    events: list[Any] = []
    conn, _agent, e = setup(on_event=events.append)
    task = conn.start_call(conn.calls.get_chat("chat-1"), now=NOW)
    (start,) = [c for c in conn.commands() if isinstance(c, StartHttp)]
    assert start.call.url == f"{BASE}/api/v2/chats/chat-1"
    assert ("Coder-Session-Token", TOKEN) in start.call.headers
    e.performed.append(start)
    e._perform(start)
    e.pump()
    assert task.done and task.result().id == "chat-1"
    assert [type(ev) for ev in events][:1] == [HttpRequestEvent]


def test_a_sink_of_the_embedders_own_gets_the_events_and_later_listeners() -> None:
    """``sink=``: the connection reports to that very object, so a listener attached to it
    after construction (an adapter's observer) hears the REST events too; ``sink`` with
    ``on_event`` or ``wall_clock`` is refused."""
    sink = TransportEventSink(wall_clock=lambda: 1234.5)
    env = CaseEnv()
    conn = Connection(base_url=BASE, token=TOKEN, sink=sink)
    e = Embedder(conn, env.http)
    events: list[Any] = []
    sink.callback = events.append
    sink.enabled = True
    task = conn.start_call(conn.calls.get_chat("chat-1"), now=NOW)
    e.pump()
    assert task.done
    assert [ev.type for ev in events] == ["http:request", "http:response"]
    assert {ev.timestamp for ev in events} == {1234.5}
    for bad in ({"on_event": events.append}, {"wall_clock": lambda: 0.0}):
        with pytest.raises(CoderAgentError, match="either sink"):
            Connection(base_url=BASE, token=TOKEN, sink=sink, **bad)


def test_a_failed_plain_call_raises_its_error() -> None:
    conn, _agent, e = setup(rest={"GET /api/v2/chats/chat-1": Respond(404, {"message": "no"})})
    task = conn.start_call(conn.calls.get_chat("chat-1"), now=NOW)
    e.pump()
    assert task.done
    with pytest.raises(CoderAgentError):
        task.result()


def test_an_upload_needs_the_files_bytes() -> None:
    conn, _agent, _e = setup()
    with pytest.raises(CoderAgentError, match="bytes"):
        conn.start_call(conn.calls.upload_chat_file("org-1", "a.png"), now=NOW)


def test_a_task_has_no_result_before_it_finishes() -> None:
    conn, _agent, _e = setup()
    task = conn.start_call(conn.calls.get_chat("chat-1"), now=NOW)
    assert isinstance(task, Task) and not task.done
    with pytest.raises(CoderAgentError, match="not finished"):
        task.result()
    task.cancel(None, now=NOW)
    assert [type(c) for c in conn.commands()].count(CancelHttp) == 1


def test_the_watch_is_a_task_a_cancel_ends_quietly() -> None:
    conn = Connection(base_url=BASE, token=TOKEN)
    task = conn.start_watch(now=NOW)
    first = conn.commands()
    assert first and all(isinstance(c, OpenSocket | StartHttp) for c in first)
    assert task.kind == "watch" and not task.done
    assert task.take_events() == []
    task.cancel(None, now=NOW)
    assert task.done and task.result() is None


# -- the end -------------------------------------------------------------------------------------


def test_a_closed_connection_starts_nothing() -> None:
    conn, agent, _e = setup()
    conn.close()
    assert conn.stats.closed
    with pytest.raises(CoderAgentError, match="closed"):
        conn.start_turn(agent, "hi", now=NOW)
    with pytest.raises(CoderAgentError, match="closed"):
        conn.start_call(conn.calls.get_chat("c"), now=NOW)
    with pytest.raises(CoderAgentError, match="closed"):
        conn.start_watch(now=NOW)


def test_shutdown_ends_every_task_and_closes_every_socket() -> None:
    conn, agent, e = setup(tools=[get_weather])
    e.hold_tools = True
    task = conn.start_turn(agent, "weather?", now=NOW)
    e.pump()
    e.send(status("running"), action_required(WEATHER), status("requires_action"))
    conn.close(now=NOW)
    commands = conn.commands()
    assert task.done
    assert any(isinstance(c, CloseSocket) for c in commands)
    assert any(isinstance(c, CancelTools) for c in commands)
    assert conn.stats.open_connections == 0


# -- a session's own machines ---------------------------------------------------------------------


def test_a_sessions_own_turn_runs_as_a_call_its_pause_planned_by_the_calls_tools() -> None:
    """``start_call`` with a session's own turn: its tool pause comes as ``InvokeTools`` with
    the invocations ``call.tools`` planned, and ``tool_finished(outcome=...)`` takes each
    outcome as the embedder decided it; a late repeat is ignored."""
    from coder_proto._actions import ToolOutcome
    from tests.core_driver import weather_tool
    from tests.machine_call import machine_call

    conn, agent, e = setup()
    e.hold_tools = True
    session = agent.session
    turn = session.generate("weather?", now=NOW, tools=[weather_tool()])
    task = conn.start_call(machine_call(turn, session=session, tools=True), now=NOW)
    e.pump()
    e.send(status("running"), action_required(WEATHER), status("requires_action"))
    (run,) = e.runs
    (invocation,) = run.invocations
    assert [c.tool_call_id for c in run.calls] == ["t1"] and invocation.tool_call_id == "t1"
    answer = ToolOutcome(tool_call_id="t1", output={"tempC": 5})
    conn.tool_finished(run, invocation, outcome=answer, now=NOW)
    late = ToolOutcome(tool_call_id="t1", output="late")
    conn.tool_finished(run, invocation, outcome=late, now=NOW)
    e.pump()
    (submitted,) = e.bodies("submit_tool_results")
    assert [r["output"] for r in submitted["results"]] == [{"tempC": 5}]
    e.send(status("running"), message(60, "5C."), status("waiting"))
    assert task.kind == "call" and task.result().text == "5C."


def test_reset_closes_a_paused_stream_with_1000() -> None:
    """A segment ends at the pause and leaves its stream open (read by the session between
    turns); ``reset`` closes it cleanly through the session's scope."""
    from tests.core_driver import weather_tool
    from tests.machine_call import machine_call

    conn, agent, e = setup()
    session = agent.session
    segment = session.segment("weather?", now=NOW, tools=[weather_tool()])
    task = conn.start_call(machine_call(segment, session=session), now=NOW)
    e.pump()
    e.send(status("running"), action_required(WEATHER), status("requires_action"))
    assert task.done and task.result().finish_reason == "tool-calls"
    assert conn.stats.open_connections == 1 and session.retained_stream is not None
    conn.reset(agent, now=NOW)
    e.pump()
    assert conn.stats.open_connections == 0 and session.retained_stream is None
    assert e.sockets[-1].client_close_codes == [1000]


def test_the_background_deadline_is_the_background_works_alone() -> None:
    """``next_deadline(background=True)``: what an embedder driving the background work on a
    thread of its own waits for; nothing before a cancel, the interrupt's bound after it."""
    conn, agent, e = setup()
    task = conn.start_turn(agent, "hi", now=NOW)
    e.pump()
    e.send(status("running"))
    assert conn.next_deadline(background=True) is None
    task.cancel(KeyboardInterrupt(), now=NOW)
    assert conn.stats.background_jobs == 1
    deadline = conn.next_deadline(background=True)
    assert deadline is not None and deadline > NOW
    e.pump()
    assert conn.stats.background_jobs == 0 and conn.next_deadline(background=True) is None


def test_a_session_stays_driven_between_turns() -> None:
    """A segment that paused leaves its stream to the session; the connection keeps the
    session from its first machine on and reads the stream between turns, and a reset
    closes it through the session's scope."""
    from tests.core_driver import weather_tool
    from tests.machine_call import machine_call

    conn, agent, e = setup()
    session = agent.session
    assert conn.stats.attached_sessions == 0 and conn.next_deadline() is None
    segment = session.segment("weather?", now=NOW, tools=[weather_tool()])
    task = conn.start_call(machine_call(segment, session=session), now=NOW)
    e.pump()
    e.send(status("running"), action_required(WEATHER), status("requires_action"))
    assert task.done
    stream = session.retained_stream
    assert stream is not None
    before = len(stream.events)
    assert conn.stats.attached_sessions == 1
    e.send(status("running"))  # read by the session between turns
    assert len(stream.events) == before + 1


def test_a_paused_stream_hearing_bytes_past_its_pause_limit_is_closed_d6() -> None:
    """The bytes of a session's stream socket go straight to its reader; a stream paused
    longer than the requires_action deadline plus the grace is closed (with 1000) when
    they arrive, and the resumed turn dials fresh."""
    from tests.core_driver import weather_tool
    from tests.machine_call import machine_call

    conn, agent, e = setup()
    session = agent.session
    segment = session.segment("weather?", now=NOW, tools=[weather_tool()])
    task = conn.start_call(machine_call(segment, session=session), now=NOW)
    e.pump()
    e.send(status("running"), action_required(WEATHER), status("requires_action"))
    assert task.done
    stream = session.retained_stream
    assert stream is not None and stream.paused_at == NOW
    e.send(status("running"))  # within the limit: read and kept
    assert not stream.closed
    e.now = NOW + 361.0
    e.send(status("running"))
    assert stream.closed and e.sockets[-1].client_close_codes == [1000]
    assert conn.stats.open_connections == 0


def test_stats_count_what_the_connection_holds() -> None:
    conn, agent, e = setup()
    stats = conn.stats
    assert (stats.tasks, stats.open_connections, stats.closed) == (0, 0, False)
    task = conn.start_turn(agent, "hi", now=NOW)
    e.pump()
    assert stats.tasks == 1 and stats.open_connections == 1
    assert "connections=1" in repr(stats) and "tasks=1" in repr(stats)
    e.send(status("running"), message(60, "hello"), status("waiting"))
    assert task.done and stats.tasks == 0
    conn.close()
    assert stats.closed


def test_closing_an_agent_without_archiving_is_done_at_once_and_forgets_its_session() -> None:
    """``start_close(archive=False)``: the paused stream is closed, the chat left as it is;
    the task is done at once (cancelling it does nothing) and the session is no longer kept
    once its sockets are closed."""
    conn, agent, e = setup()
    task = conn.start_turn(agent, "hi", now=NOW)
    e.pump()
    e.send(status("running"), message(60, "hello"), status("waiting"))
    assert task.done and conn.stats.attached_sessions == 1
    closing = conn.start_close(agent, now=NOW, archive=False)
    assert closing.kind == "close" and closing.done and closing.result() is None
    closing.cancel(KeyboardInterrupt(), now=NOW)
    assert closing.result() is None
    e.pump()
    assert conn.stats.attached_sessions == 0 and conn.stats.open_connections == 0
    assert e.bodies("archive_chat") == []


def test_the_embedders_surface_is_twenty_members_at_most() -> None:
    """Everything an embedder calls on a ``Connection`` fits on one page: what concerns one
    handle goes through the handle (``task.cancel``, ``call.status_received``)."""
    members = [name for name in dir(Connection) if not name.startswith("_")]
    assert len(members) <= 20, members
