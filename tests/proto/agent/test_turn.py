"""A whole turn: the client-tool loop over segments (state machines F.5, G; D4-D7,
D17, D22; C.5 retries), driven through the in-memory driver."""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import pytest

from coder_proto import (
    AssistantMessage,
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderProtocolError,
    CoderStreamError,
    Finish,
    InvokeTools,
    StreamStart,
    TextContent,
    TextDelta,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolResultContent,
    Usage,
    UserMessage,
)
from coder_proto._actions import ToolOutcome
from coder_proto._agent.segment import NO_PARTS
from coder_proto._agent.turn import MISSING_RESULT_MESSAGE, Turn, normalize_outcomes
from coder_proto._stream.reader import NO_EVENTS
from tests.core_driver import (
    CHAT,
    Harness,
    Respond,
    action_required,
    chat_stub,
    delta,
    error_event,
    message,
    status,
    tool_call_part,
    weather_tool,
)

INTERRUPT = "POST /api/v2/chats/chat-1/interrupt"
RESULTS = "POST /api/v2/chats/chat-1/tool-results"


def pause_frames(msg_id: int, *calls: tuple[str, str], seq: int = 1) -> list[dict[str, Any]]:
    """A step that calls client tools and pauses: status before action_required (wire 4.4)."""
    return [
        status("running"),
        delta(f"step {msg_id}", seq, hv=msg_id),
        message(
            msg_id,
            [{"type": "text", "text": f"step {msg_id}"}]
            + [tool_call_part(cid, name, args={"city": "Paris"}) for cid, name in calls],
            usage={"input_tokens": 10, "output_tokens": 2},
        ),
        status("requires_action"),
        action_required(*((cid, name, '{"city":"Paris"}') for cid, name in calls)),
    ]


def done_frames(msg_id: int, text: str = "It is 21.") -> list[dict[str, Any]]:
    return [
        status("running"),
        message(msg_id, text, usage={"input_tokens": 5, "output_tokens": 3}),
        status("waiting"),
    ]


def tooled(**kwargs: Any) -> Harness:
    kwargs.setdefault("tools", (weather_tool(),))
    return Harness(**kwargs)


def interrupts(h: Harness) -> int:
    h.driver.drain_background()
    return h.routes().count(INTERRUPT)


# -- the loop ------------------------------------------------------------------------------------------


def test_a_client_tool_round_trip_runs_the_tool_submits_and_resumes_on_one_socket() -> None:
    h = tooled()
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    assert h.driver.tool_runs == [
        (ToolCall(tool_call_id="c1", tool_name="get_weather", input='{"city":"Paris"}'),)
    ]
    assert h.bodies("submit_tool_results") == [
        {
            "results": [
                {"tool_call_id": "c1", "output": {"city": "Paris", "tempC": 21}, "is_error": False}
            ]
        }
    ]
    h.send(*done_frames(5))
    result = turn.result()
    assert len(h.driver.sockets) == 1 and not h.socket.open
    assert [s.finish_reason for s in result.steps] == ["tool-calls", "stop"]
    assert result.text == "It is 21." and result.finish_reason == "stop"
    first = result.steps[0]
    assert [c.tool_call_id for c in first.tool_calls] == ["c1"]
    assert [(r.tool_call_id, r.result, r.dynamic) for r in first.tool_results] == [
        ("c1", {"city": "Paris", "tempC": 21}, False)
    ]
    # F.5, D17: usage is summed over the steps; raw stays per step.
    assert (
        result.usage == Usage(input_tokens=15, no_cache_tokens=15, output_tokens=5)
        and result.usage.raw is None
    )
    assert first.usage.raw == {"input_tokens": 10, "output_tokens": 2}
    assert result.chat_id == CHAT and result.last_seen_message_id == 5
    assert h.session.submitted_tool_call_ids == {"c1"}


def test_the_loop_continues_over_several_pauses() -> None:
    h = tooled()
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    h.send(*pause_frames(5, ("c2", "get_weather"), seq=1))
    h.send(*done_frames(7))
    assert len(turn.result().steps) == 3
    assert [c[0].tool_call_id for c in h.driver.tool_runs] == ["c1", "c2"]


def test_a_second_pause_whose_statuses_collapsed_still_runs_its_tools() -> None:
    """Statuses are level-triggered (server-behaviour 3.4): when the server resumes and pauses
    again between two syncs, the socket sees no ``status`` at all, only the new tool call and
    its ``action_required``. That event is only ever sent while the chat waits for tool
    results, so the pause counts; the turn must not wait for a status that never comes."""
    h = tooled()
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    h.send(
        message(
            5,
            [{"type": "text", "text": "step 5"}, tool_call_part("c2", "get_weather")],
            usage={"input_tokens": 10, "output_tokens": 2},
        ),
        action_required(("c2", "get_weather", '{"city":"Oslo"}')),
    )
    assert [c[0].tool_call_id for c in h.driver.tool_runs] == ["c1", "c2"]
    h.send(*done_frames(7))
    result = turn.result()
    assert [s.finish_reason for s in result.steps] == ["tool-calls", "tool-calls", "stop"]
    assert result.text == "It is 21."


def test_a_replayed_action_required_for_answered_calls_does_not_pause_the_turn() -> None:
    """An ``action_required`` naming only calls already answered is stale: it settles
    nothing, and the turn keeps reading until the chat's real outcome."""
    h = tooled()
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    h.send(action_required(("c1", "get_weather", '{"city":"Paris"}')))
    assert not turn.done
    h.send(*done_frames(5))
    result = turn.result()
    assert [s.finish_reason for s in result.steps] == ["tool-calls", "stop"]


def test_a_tool_the_adapter_fails_is_submitted_as_an_error_result() -> None:
    """D5: a tool that raised or is unknown gets ``is_error: true`` with a string."""

    def tools(call: ToolCall) -> ToolOutcome:
        return ToolOutcome(tool_call_id=call.tool_call_id, output="ValueError: no", is_error=True)

    h = tooled(tools_fn=tools)
    h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    assert h.bodies("submit_tool_results")[0]["results"] == [
        {"tool_call_id": "c1", "output": "ValueError: no", "is_error": True}
    ]


def test_every_call_of_the_pause_gets_exactly_one_result_in_order() -> None:
    """D5: the adapter's outcomes are matched by id; a missing one becomes an error."""

    def tools(call: ToolCall) -> ToolOutcome:
        if call.tool_call_id == "c2":
            return ToolOutcome(tool_call_id="someone-else", output=1)
        return ToolOutcome(tool_call_id=call.tool_call_id, output=call.tool_call_id)

    h = tooled(tools_fn=tools)
    h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather"), ("c2", "get_weather"), ("c3", "get_weather")))
    assert h.bodies("submit_tool_results")[0]["results"] == [
        {"tool_call_id": "c1", "output": "c1", "is_error": False},
        {"tool_call_id": "c2", "output": MISSING_RESULT_MESSAGE, "is_error": True},
        {"tool_call_id": "c3", "output": "c3", "is_error": False},
    ]


def test_normalize_outcomes_deduplicates_and_guards_json() -> None:
    calls = [ToolCall(tool_call_id=i, tool_name="t", input="{}") for i in ("a", "b", "a", "c", "d")]
    outcomes = [
        ToolOutcome(tool_call_id="b", output=2, is_error=1),  # type: ignore[arg-type]
        ToolOutcome(tool_call_id="a", output=1),
        ToolOutcome(tool_call_id="a", output="second"),
        ToolOutcome(tool_call_id="c", output={1, 2}),
        "not an outcome",
    ]
    normalized = normalize_outcomes(calls, outcomes)  # type: ignore[arg-type]
    assert [(o.tool_call_id, o.output, o.is_error) for o in normalized] == [
        ("a", 1, False),
        ("b", 2, False),
        ("c", "the output of tool 't' is not JSON-serializable", True),
        ("d", MISSING_RESULT_MESSAGE, True),
    ]


def test_tool_results_outside_a_tool_run_are_ignored_and_a_single_outcome_is_accepted() -> None:
    h = tooled()
    turn = h.generate("weather?")
    turn.tool_results([ToolOutcome(tool_call_id="x", output=1)], h.now)
    assert turn.awaiting_tools is None and not turn.done
    h.driver.tools = lambda call: ToolOutcome(tool_call_id="ignored", output=0)
    original_perform = h.driver._perform_command

    def perform(command: Any) -> None:
        if isinstance(command, InvokeTools):
            assert turn.awaiting_tools == command.run.calls
            # One outcome, not a list, straight to the turn; the run's own answer then comes
            # outside the tool run (ignored) and lets the connection take on what the turn
            # does next.
            turn.tool_results(ToolOutcome(tool_call_id="c1", output="one"), h.now)
            run = command.run
            for invocation in run.invocations:
                h.driver.connection.tool_finished(run, invocation, value="late", now=h.now)
            return
        original_perform(command)

    h.driver._perform_command = perform  # type: ignore[method-assign]
    h.send(*pause_frames(3, ("c1", "get_weather")))
    assert h.bodies("submit_tool_results")[0]["results"][0]["output"] == "one"


def test_a_tool_running_past_the_servers_deadline_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """D6: the server cancels pending calls after 300 s; the late POST's 409 stays an
    ``CoderApiError`` and, being a 4xx, interrupts nothing (D4)."""
    h = tooled(rest={RESULTS: Respond(409, {"message": "Chat is not waiting for tool results."})})
    h.driver.tool_delay = 301.0
    turn = h.generate("weather?")
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        h.send(*pause_frames(3, ("c1", "get_weather")))
        h.advance(300.0)
        assert any("more than 300 s" in r.getMessage() for r in caplog.records)
        assert not turn.done
        h.advance(1.0)
    assert isinstance(turn.error, CoderApiError) and turn.error.status == 409
    assert interrupts(h) == 0


# -- the step limit (D7) and the valve -----------------------------------------------------------------


def test_the_step_limit_stops_before_running_a_new_pauses_tools_and_interrupts() -> None:
    """D7 with D4's follow-up: the paused chat answers ``running`` to the first interrupt."""
    h = tooled(
        max_steps=1,
        rest={
            INTERRUPT: [
                Respond(200, chat_stub(status="running")),
                Respond(200, chat_stub(status="interrupting")),
            ]
        },
    )
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    result = turn.result()
    assert result.finish_reason == "tool-calls"
    assert [c.tool_call_id for c in result.unexecuted_tool_calls] == ["c1"]
    assert h.driver.tool_runs == [] and h.count("submit_tool_results") == 0
    assert h.routes().count(INTERRUPT) == 2
    assert not h.socket.open and h.session.retained_stream is None


def test_a_failing_step_limit_interrupt_is_logged_and_the_result_still_returned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = tooled(max_steps=2, rest={INTERRUPT: Respond(500, {"message": "down"})})
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        h.send(*pause_frames(5, ("c2", "get_weather")))
    result = turn.result()
    assert len(result.steps) == 2 and [c[0].tool_call_id for c in h.driver.tool_runs] == ["c1"]
    assert any("could not interrupt" in r.getMessage() for r in caplog.records)


def test_a_pause_whose_tool_calls_never_arrive_is_interrupted() -> None:
    """The valve (G.3 step 11) without a client call: the loop cannot continue, so the chat
    is not left paused (D7)."""
    h = tooled()
    turn = h.generate("weather?")
    h.send(status("requires_action"), *[delta(str(i)) for i in range(201)])
    result = turn.result()
    assert result.finish_reason == "tool-calls" and result.unexecuted_tool_calls == ()
    assert interrupts(h) == 1


# -- cancellation (D22) --------------------------------------------------------------------------------


def test_cancel_while_tools_run_interrupts_the_paused_chat_in_the_background() -> None:
    h = tooled(
        rest={
            INTERRUPT: [
                Respond(200, chat_stub(status="running")),
                Respond(200, chat_stub(status="interrupting")),
            ]
        }
    )
    h.driver.tool_delay = 10.0
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    assert turn.awaiting_tools is not None
    h.driver.cancel()
    assert turn.cancelled and not h.socket.open
    assert interrupts(h) == 2  # D4 follow-up from the background job
    h.advance(10.0)  # the late outcome goes nowhere
    assert h.count("submit_tool_results") == 0


# -- retries (C.5) ----------------------------------------------------------------------------------


def drop_all(h: Harness) -> None:
    for _ in range(5):
        h.socket.drop(1006)
        h.driver.settle()
        h.advance(30.0)


def test_a_retryable_stream_failure_is_replayed_on_a_fresh_chat() -> None:
    h = Harness(
        max_retries=1,
        rest={
            "POST /api/v2/chats": [
                Respond(201, chat_stub("chat-1")),
                Respond(201, chat_stub("chat-2")),
            ]
        },
    )
    turn = h.generate("hi")
    drop_all(h)
    assert not turn.done and h.count("create_chat") == 2
    h.socket.send_events(
        [
            status("running", "chat-2"),
            {**message(2, "fresh", role="assistant"), "chat_id": "chat-2"},
            status("waiting", "chat-2"),
        ]
    )
    h.driver.settle()
    result = turn.result()
    assert result.text == "fresh" and result.chat_id == "chat-2" and len(result.steps) == 1
    assert h.session.stranded_chat_ids == ("chat-1",) and h.session.chat_id == "chat-2"


def test_retries_are_bounded_by_max_retries() -> None:
    h = Harness(max_retries=1)
    turn = h.generate("hi")
    drop_all(h)
    drop_all(h)
    assert isinstance(turn.error, CoderStreamError) and turn.error.retryable
    assert h.count("create_chat") == 2


@pytest.mark.parametrize("mode", ["stream", "generate-effectful"])
def test_no_retry_in_stream_mode_or_for_an_effectful_chat(mode: str) -> None:
    if mode == "stream":
        h = Harness(max_retries=3)
        turn = h.stream("hi")
    else:
        h = Harness(max_retries=3, workspace_id="ws-1")
        turn = h.generate("hi")
    drop_all(h)
    assert isinstance(turn.error, CoderStreamError) and h.count("create_chat") == 1


# -- stream mode and results ----------------------------------------------------------------------------


def test_stream_mode_delivers_parts_live_with_one_start_and_finish_per_segment() -> None:
    h = tooled()
    h.driver.tool_delay = 1.0
    turn = h.stream("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    live = list(turn.parts)  # the tools are running: the first segment's parts are all here
    assert isinstance(live[0], StreamStart) and isinstance(live[-1], Finish)
    h.advance(1.0)
    h.send(*done_frames(5))
    kinds = [type(p) for p in turn.parts]
    assert kinds.count(StreamStart) == 2 and kinds.count(Finish) == 2
    assert turn.result().text == "It is 21."


def test_stream_mode_delivers_client_tool_results_between_segments() -> None:
    """A stream consumer sees each client tool's outcome after the pause's finish and before
    the resumed segment (the tool loop's own parts; the translator never emits them, A.7)."""
    h = tooled()
    turn = h.stream("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    h.send(*done_frames(5))
    parts = list(turn.parts)
    results = [p for p in parts if isinstance(p, ToolResult)]
    assert [(r.tool_call_id, r.tool_name, r.dynamic) for r in results] == [
        ("c1", "get_weather", False)
    ]
    index = parts.index(results[0])
    assert isinstance(parts[index - 1], Finish) and isinstance(parts[index + 1], StreamStart)
    assert turn.result().steps[0].tool_results == (results[0],)


@pytest.mark.parametrize("observed", [True, False], ids=["transport-events", "bare"])
def test_an_idle_stream_turn_holds_no_empty_queue_and_delivers_what_comes_next(
    observed: bool,
) -> None:
    """An open, idle chat keeps no empty deque (each keeps a block of 64 slots): once the
    consumer took the parts and something other than live deltas came, ``turn.parts`` is the
    shared empty ``NO_PARTS`` and the reader's queue the shared ``NO_EVENTS``. What comes next
    arrives in fresh ones and the consumer, reading ``turn.parts`` anew, sees all of it in
    order; while deltas flow the reader keeps its queue."""
    h = Harness(observe=observed)
    turn = h.stream("hi")
    taken: list[Any] = []

    def take() -> None:
        while turn.parts:
            taken.append(turn.parts.popleft())

    take()
    assert taken == [StreamStart()]
    h.send(status("running"))
    assert turn.segment is not None and turn.segment.stream is not None
    reader = turn.segment.stream.reader
    assert turn.parts is NO_PARTS and reader.events is NO_EVENTS
    h.send(delta("Hel", 1))  # one delta in a frame: the reader's quick way when not observed
    assert turn.parts is not NO_PARTS and reader.events is not NO_EVENTS
    h.send(delta("lo", 2), delta("!", 3))
    assert reader.events is not NO_EVENTS  # deltas in full flow: the queue is kept
    take()
    h.send(message(50, "Hello!"), status("waiting"))
    take()
    assert [p.delta for p in taken if isinstance(p, TextDelta)] == ["Hel", "lo", "!"]
    assert isinstance(taken[0], StreamStart) and isinstance(taken[-1], Finish)
    assert turn.result().text == "Hello!"
    assert not NO_PARTS and not NO_EVENTS  # never written


def test_a_generate_turn_never_makes_a_parts_deque() -> None:
    h = Harness()
    turn = h.generate("hi")
    h.send(status("running"), delta("ok", 1), message(50, "ok"), status("waiting"))
    assert turn.result().text == "ok" and turn.parts is NO_PARTS


def test_stream_mode_reports_a_run_error_in_the_result_instead_of_raising() -> None:
    h = Harness()
    turn = h.stream("hi")
    h.send(error_event("bad", kind="overloaded"), status("error"))
    result = turn.result()
    assert result.finish_reason == "error"
    assert isinstance(result.error, CoderChatError) and result.error.kind == "overloaded"


def test_generate_mode_raises_a_run_error() -> None:
    h = Harness()
    turn = h.generate("hi")
    h.send(error_event("bad"), status("error"))
    assert isinstance(turn.error, CoderChatError) and str(turn.error) == "bad"
    with pytest.raises(CoderChatError):
        turn.result()


def test_results_carry_reasoning_server_tools_and_every_steps_sources() -> None:
    h = tooled()
    turn = h.generate("research")
    source = {"type": "source", "source_id": "s1", "url": "https://a.example", "title": "A"}
    h.send(
        status("running"),
        delta("think", 1, kind="reasoning"),
        message(
            3,
            [
                {"type": "reasoning", "text": "think"},
                tool_call_part("srv", "web_search", args={"q": "x"}, provider_executed=True),
                source,
                tool_call_part("c1", "get_weather", args={}),
            ],
        ),
        message(
            4,
            [
                {
                    "type": "tool-result",
                    "tool_call_id": "srv",
                    "tool_name": "web_search",
                    "result": {"n": 1},
                }
            ],
            role="tool",
        ),
        status("requires_action"),
        action_required(("c1", "get_weather", "{}")),
    )
    h.send(
        status("running"),
        message(
            6,
            [
                {"type": "text", "text": "done"},
                source,
                {"type": "source", "url": "https://b.example"},
            ],
        ),
        status("waiting"),
    )
    result = turn.result()
    first = result.steps[0]
    assert first.reasoning == "think"
    assert [(c.tool_call_id, c.provider_executed) for c in first.tool_calls] == [
        ("srv", True),
        ("c1", False),
    ]
    assert [(r.tool_call_id, r.dynamic) for r in first.tool_results] == [
        ("srv", True),
        ("c1", False),
    ]
    assert [s.id for s in result.sources] == ["s1", "https://b.example"]
    assert result.reasoning == "" and result.tool_calls == ()


def test_a_prompt_ending_in_tool_results_resumes_the_paused_chat() -> None:
    h = tooled()
    first = h.generate("weather?", tools=None)
    h.driver.tools = lambda call: ToolOutcome(tool_call_id=call.tool_call_id, output="x")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    h.send(*done_frames(5))
    first.result()
    prompt = [
        UserMessage((TextContent("weather?"),)),
        AssistantMessage(()),
        ToolMessage((ToolResultContent(tool_call_id="c9", output=1),)),
    ]
    turn = h.generate(prompt)
    assert h.bodies("submit_tool_results")[-1] == {
        "results": [{"tool_call_id": "c9", "output": 1, "is_error": False}]
    }
    assert not turn.done


def test_a_turn_needs_a_known_mode() -> None:
    h = Harness()
    with pytest.raises(CoderAgentError, match="mode"):
        Turn(h.session, "hi", now=h.now, mode="batch")
    assert "running" in repr(h.generate("hi"))


def test_a_turn_ending_leaves_the_session_to_the_turn_that_replaced_it() -> None:
    """A turn made on the session directly while another is open takes the session's single
    flight; the older one ending (here cancelled) hands the session back to nobody but it."""
    h = Harness()
    first = Turn(h.session, "one", now=h.now)
    second = Turn(h.session, "two", now=h.now)
    assert h.session.in_flight is second
    first.cancel(h.now)
    assert first.done and not second.done
    assert h.session.in_flight is second
    second.cancel(h.now)
    assert h.session.in_flight is None


# -- edges ----------------------------------------------------------------------------------------------


def test_a_socket_failure_during_a_turn_is_an_ordinary_connection_ending() -> None:
    """D12: TCP/TLS/DNS failures redial like any other ending."""
    h = Harness()
    turn = h.generate("hi")
    h.socket.fail("connection reset")
    h.driver.settle()
    h.advance(1.0)
    assert len(h.driver.sockets) == 2
    h.send(status("running"), message(2, "ok"), status("waiting"))
    assert turn.result().text == "ok"


def test_cancel_during_the_step_limit_interrupt_still_stops_the_chat() -> None:
    from tests.core_driver import Hang

    h = tooled(
        max_steps=1, rest={INTERRUPT: [Hang(), Respond(200, chat_stub(status="interrupting"))]}
    )
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    assert not turn.done and h.routes().count(INTERRUPT) == 1
    h.driver.cancel()
    assert turn.cancelled
    assert interrupts(h) == 2  # the hung one, then the background one


def test_cancel_while_tools_run_after_the_pause_was_lost_still_interrupts() -> None:
    h = tooled()
    h.driver.tool_delay = 5.0
    turn = h.generate("weather?")
    h.send(*pause_frames(3, ("c1", "get_weather")))
    h.session.close_paused_stream(h.now)
    h.driver.settle()
    h.driver.cancel()
    assert turn.cancelled and interrupts(h) == 1


# -- valid Unicode (D32) -------------------------------------------------------------------------------


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    if attrs.has(type(value)):
        return _strings(attrs.asdict(value, recurse=False))
    if isinstance(value, BaseException):
        return [str(value), *_strings(vars(value))]
    return []


def test_lone_surrogates_from_the_wire_reach_the_user_as_replacement_characters() -> None:
    """D32: text, reasoning, tool calls, sources and error messages handed to the user are
    valid Unicode; a lone surrogate the server spelled becomes U+FFFD (pairs stay)."""
    h = tooled()
    turn = h.stream("weather?")
    h.send(
        status("running"),
        delta("a\ud800b \U0001f600", 1),
        delta("think \udfff", 2, kind="reasoning"),
        message(
            3,
            [
                {"type": "reasoning", "text": "think \udfff"},
                {"type": "text", "text": "a\ud800b \U0001f600"},
                {"type": "source", "url": "https://x.example/\ud801", "title": "t\udc00"},
                tool_call_part("c1", "get_weather", args={"city": "P\ud800"}),
            ],
        ),
        status("requires_action"),
        action_required(("c1", "get_weather", '{"city":"P\\ud800"}')),
    )
    h.send(error_event("bad \ud800 thing"), status("error"))
    parts = list(turn.parts)
    strings = [s for p in parts for s in _strings(p)]
    assert strings
    for text in strings:
        text.encode("utf-8")  # raises on a lone surrogate
    assert any("a\ufffdb \U0001f600" in s for s in strings)
    assert any("bad \ufffd thing" in s for s in strings)
    (run,) = h.driver.tool_runs
    assert json.loads(run[0].input) == {"city": "P\ufffd"}
    turn.result().text.encode("utf-8")


@pytest.mark.parametrize("status_code", [201, 400])
def test_a_rest_body_nested_absurdly_deep_is_a_clear_library_error(status_code: int) -> None:
    """Not an internal ``RecursionError``: the body is simply not the JSON expected."""
    deep = b"[" * 200_000 + b"]" * 200_000
    h = Harness(rest={"POST /api/v2/chats": [Respond(status_code, deep)]})
    turn = h.generate("hi")
    assert isinstance(turn.error, CoderProtocolError | CoderApiError)
    assert "Recursion" not in str(turn.error) and "internal error" not in str(turn.error)
    assert f"({status_code})" in str(turn.error)


def test_a_rest_error_message_with_a_lone_surrogate_is_valid_unicode() -> None:
    body = b'{"message":"bad \\ud800 request","detail":"\\udfff"}'
    h = Harness(rest={"POST /api/v2/chats": [Respond(400, body)]})
    turn = h.generate("hi")
    error = turn.error
    assert isinstance(error, CoderApiError)
    assert error.server_message == "bad \ufffd request" and error.detail == "\ufffd"
    str(error).encode("utf-8")


def test_a_call_to_an_unregistered_tool_is_delivered_once_and_answered() -> None:
    """The server waits on a client tool this agent does not know: its snapshot looks like a
    server tool's call, its ``action_required`` like a client call. The user sees one call
    (exactly once), and the turn answers it with an error result instead of hanging."""
    h = tooled()
    turn = h.stream("weather?")
    h.send(
        status("running"),
        message(3, [tool_call_part("c9", "forgotten_tool", args={"x": 1})]),
        status("requires_action"),
        action_required(("c9", "forgotten_tool", '{"x":1}')),
    )
    h.send(*done_frames(5))
    result = turn.result()
    calls = [p for p in list(turn.parts) if isinstance(p, ToolCall)]
    assert [c.tool_call_id for c in calls] == ["c9"]
    assert [c.tool_call_id for s in result.steps for c in s.tool_calls] == ["c9"]
    (submitted,) = h.bodies("submit_tool_results")
    assert [r["tool_call_id"] for r in submitted["results"]] == ["c9"]
    assert [c[0].tool_call_id for c in h.driver.tool_runs] == ["c9"]
