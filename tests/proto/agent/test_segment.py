"""One model round trip: the segment driver (state machines C.3-C.5, D, E.5, G.2-G.7; wire
2.3, 5, 10, 11; D2-D4, D9, D12, D21, D22, D24).

Every test drives the real session, turn, segment, translator and stream reader through the
in-memory driver of ``tests/core_driver.py``: REST answers come from a scripted server (D25
defaults), WebSocket frames from wsproto server ends, time from a fake clock.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import (
    AssistantMessage,
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderStreamError,
    ErrorPart,
    FileContent,
    Finish,
    ReasoningDelta,
    Source,
    StreamStart,
    TextContent,
    TextDelta,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolResultContent,
    UserMessage,
)
from coder_proto._agent.segment import STREAM_CLOSED_MESSAGE, recover_pending_calls, timeout_message
from coder_proto._wire import ActionRequiredEvent, ChatMessage, MessageEvent
from tests.core_driver import (
    CHAT,
    Hang,
    Harness,
    Respond,
    action_required,
    delta,
    error_event,
    message,
    queue_update,
    status,
    tool_call_part,
    weather_tool,
)

MODEL_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
MESSAGES = "POST /api/v2/chats/chat-1/messages"
INTERRUPT = "POST /api/v2/chats/chat-1/interrupt"


def committed(message_id: int) -> dict[str, Any]:
    return {
        "message": {
            "id": message_id,
            "chat_id": CHAT,
            "role": "user",
            "created_at": "",
            "content": [{"type": "text", "text": "hi"}],
        },
        "queued": False,
    }


def settle_ok(h: Harness, *, message_id: int = 50, text: str = "ok") -> None:
    h.send(status("running"), message(message_id, text), status("waiting"))


def result_of(turn: Any) -> Any:
    assert turn.done, "the segment is still running"
    return turn.result()


def interrupts(h: Harness) -> int:
    h.driver.drain_background()
    return h.routes().count(INTERRUPT)


# -- G.5 recovery, as a pure function ----------------------------------------------------------------


def msg(message_id: int, role: str, *content: dict[str, Any]) -> ChatMessage:
    return ChatMessage.from_json(
        {"id": message_id, "role": role, "content": list(content), "chat_id": CHAT}
    )


def call(call_id: str, name: str = "get_weather", **extra: Any) -> dict[str, Any]:
    return tool_call_part(call_id, name, **extra)


def test_recovery_takes_the_last_assistant_messages_pending_client_calls() -> None:
    history = [
        msg(12, "tool", {"type": "tool-result", "tool_call_id": "a", "tool_name": "get_weather"}),
        msg(11, "assistant", call("a", args={"x": 1}), call("b", args={"city": "Paris", "n": 1.0})),
        msg(9, "assistant", call("old", args={})),
        msg(13, "assistant", call("c", args=None), call("d", args={"z": None})),
        msg(14, "user", {"type": "text", "text": "next"}),
    ]
    events = recover_pending_calls(
        history, turn_cursor=10, dynamic_tool_names={"get_weather"}, submitted_tool_call_ids=set()
    )
    assert [e.message.id for e in events[:-1]] == [11, 12, 13, 14]  # type: ignore[union-attr]
    last = events[-1]
    assert isinstance(last, ActionRequiredEvent)
    # Missing args give "{}"; args are JSON text in the D18 format.
    assert [(c.tool_call_id, c.args) for c in last.tool_calls] == [
        ("c", "{}"),
        ("d", '{"z":null}'),
    ]


def test_recovery_skips_handled_submitted_server_and_unknown_calls() -> None:
    history = [
        msg(
            21,
            "assistant",
            call("done"),
            call("sent"),
            call("server", provider_executed=True, args={}),
            call("other", name="search", args={}),
            call("", args={}),
            call("keep", args=[1, 2]),
        ),
        msg(
            22, "tool", {"type": "tool-result", "tool_call_id": "done", "tool_name": "get_weather"}
        ),
    ]
    events = recover_pending_calls(
        history, turn_cursor=0, dynamic_tool_names={"get_weather"}, submitted_tool_call_ids={"sent"}
    )
    assert isinstance(events[-1], ActionRequiredEvent)
    assert [(c.tool_call_id, c.args) for c in events[-1].tool_calls] == [("keep", "[1,2]")]


@pytest.mark.parametrize(
    "history",
    [
        [],
        [msg(5, "assistant", call("a", args={}))],  # at or below the cursor
        [msg(11, "user", {"type": "text", "text": "hi"})],  # no assistant message
        [msg(11, "assistant", {"type": "text", "text": "done"})],  # nothing pending
    ],
)
def test_recovery_finds_nothing(history: list[ChatMessage]) -> None:
    assert (
        recover_pending_calls(
            history,
            turn_cursor=5,
            dynamic_tool_names={"get_weather"},
            submitted_tool_call_ids=set(),
        )
        == []
    )


def test_recovered_events_are_snapshots_then_one_action_required() -> None:
    events = recover_pending_calls(
        [msg(3, "assistant", call("a", args={}))],
        turn_cursor=0,
        dynamic_tool_names={"get_weather"},
        submitted_tool_call_ids=frozenset(),
        chat_id=CHAT,
    )
    assert [type(e) for e in events] == [MessageEvent, ActionRequiredEvent]
    assert events[0].chat_id == CHAT


# -- REST phase (G.2, D.2, H.1, wire 2.1-2.3) --------------------------------------------------------


def test_the_first_turn_creates_the_chat_with_every_configured_field() -> None:
    h = Harness(
        instructions="Be kind.",
        tools=(weather_tool(),),
        model=MODEL_ID,
        reasoning_effort="low",
        workspace_id="ws-1",
        mcp_server_ids=("mcp-1",),
        plan_mode="plan",
    )
    turn = h.segment("Weather in Paris?")
    assert h.routes() == ["POST /api/v2/chats"]  # no seeding, no model listing for a UUID
    assert h.bodies("create_chat") == [
        {
            "organization_id": "org-1",
            "content": [{"type": "text", "text": "Weather in Paris?"}],
            "client_type": "api",
            "system_prompt": "Be kind.",
            "unsafe_dynamic_tools": [
                {
                    "name": "get_weather",
                    "description": "Get the weather.",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ],
            "model_config_id": MODEL_ID,
            "reasoning_effort": "low",
            "workspace_id": "ws-1",
            "mcp_server_ids": ["mcp-1"],
            "plan_mode": "plan",
        }
    ]
    # A fresh chat streams from the beginning (no after_id) with the token header.
    assert h.socket.request is not None and h.socket.request.target == "/api/v2/chats/chat-1/stream"
    assert h.socket.header("Coder-Session-Token") == "tok-secret"
    settle_ok(h)
    assert result_of(turn).chat_id == CHAT
    assert h.session.chat_id == CHAT and h.session.last_known_chat_id == CHAT


def test_unset_optional_fields_are_not_sent_at_creation() -> None:
    h = Harness()
    h.segment("hi")
    assert h.bodies("create_chat") == [
        {
            "organization_id": "org-1",
            "content": [{"type": "text", "text": "hi"}],
            "client_type": "api",
        }
    ]


ME = "/api/v2/users/me"


def test_d33_creation_without_an_organization_asks_users_me_for_the_first() -> None:
    h = Harness(organization_id=None, rest={f"GET {ME}": {"organization_ids": ["org-a", "org-b"]}})
    turn = h.segment("hi")
    settle_ok(h)
    assert result_of(turn).chat_id == CHAT
    assert h.routes()[:2] == [f"GET {ME}", "POST /api/v2/chats"]
    assert [b["organization_id"] for b in h.bodies("create_chat")] == ["org-a"]
    assert h.session.selector.default_organization_id == "org-a"


def test_d33_creation_for_a_user_with_no_organization_fails_before_creating() -> None:
    h = Harness(organization_id=None, rest={f"GET {ME}": {"organization_ids": []}})
    turn = h.segment("hi")
    assert isinstance(turn.error, CoderAgentError) and "organization_id" in str(turn.error)
    assert h.routes() == [f"GET {ME}"]


def test_later_turns_post_the_message_and_dial_after_the_committed_prompt() -> None:
    """H.1, D.2: content plus model, reasoning effort and busy behaviour; no system prompt or
    tools; the window opens after the turn's own committed user message."""
    h = Harness(
        chat_id=CHAT,
        last_seen_message_id=10,
        instructions="ignored now",
        tools=(weather_tool(),),
        model=MODEL_ID,
        reasoning_effort="high",
        busy_behavior="interrupt",
        rest={MESSAGES: committed(11)},
    )
    turn = h.segment("again")
    assert h.routes() == [MESSAGES]
    assert h.bodies("create_chat_message") == [
        {
            "content": [{"type": "text", "text": "again"}],
            "model_config_id": MODEL_ID,
            "reasoning_effort": "high",
            "busy_behavior": "interrupt",
        }
    ]
    assert h.socket.request.target == "/api/v2/chats/chat-1/stream?after_id=11"  # type: ignore[union-attr]
    h.send(
        message(10, "old"), message(11, "hi", role="user"), message(12, "new"), status("waiting")
    )
    assert result_of(turn).text == "new"
    assert h.session.last_seen_message_id == 12


def test_a_known_chat_without_a_cursor_seeds_it_from_its_newest_message() -> None:
    """D.1, wire 2.3: GET .../messages?limit=1 before the submission."""
    page = {"messages": [{"id": 40, "chat_id": CHAT, "role": "assistant"}], "has_more": True}
    h = Harness(chat_id=CHAT, rest={"getMessages(limit=1)": page, MESSAGES: committed(41)})
    h.segment("hi")
    assert h.routes() == ["GET /api/v2/chats/chat-1/messages?limit=1", MESSAGES]
    assert h.session.last_seen_message_id == 40


def test_an_empty_chat_seeds_no_cursor() -> None:
    h = Harness(chat_id=CHAT, rest={MESSAGES: {"queued": False}})
    h.segment("hi")
    assert h.session.last_seen_message_id is None
    assert h.socket.request.target == "/api/v2/chats/chat-1/stream"  # type: ignore[union-attr]


def test_a_send_answer_without_message_or_queue_keeps_the_cursor_and_owns_the_next_prompt() -> None:
    """K.13 with the D3 exemption: the first user message above the cursor is our own."""
    h = Harness(chat_id=CHAT, last_seen_message_id=10, rest={MESSAGES: {"queued": False}})
    turn = h.segment("hi")
    assert h.socket.request.target == "/api/v2/chats/chat-1/stream?after_id=10"  # type: ignore[union-attr]
    h.send(message(11, "hi", role="user"), message(12, "answer"), status("waiting"))
    result = result_of(turn)
    assert result.text == "answer" and result.settled_by is None


def test_a_queued_send_ignores_the_concurrent_run_until_its_prompt_materialises() -> None:
    """E.1-E.3: dial from the pre-turn cursor; the other run's output, usage and settle are
    not ours; the stamped promotion anchors the window."""
    queued = {
        "queued": True,
        "queued_message": {"id": 7, "chat_id": CHAT, "content": [{"type": "text", "text": "hi"}]},
    }
    h = Harness(chat_id=CHAT, last_seen_message_id=40, rest={MESSAGES: queued})
    turn = h.segment("hi")
    assert h.socket.request.target == "/api/v2/chats/chat-1/stream?after_id=40"  # type: ignore[union-attr]
    h.send(
        delta("old tail"),
        message(41, "old tail", usage={"input_tokens": 999}),
        status("waiting"),
    )
    assert not turn.done and list(turn.parts) == [StreamStart()]
    h.send(message(42, "hi", role="user", queued_message_id=7), status("running"))
    h.send(message(43, "mine", usage={"input_tokens": 5}), status("waiting"))
    result = result_of(turn)
    assert result.text == "mine" and result.usage.input_tokens == 5
    assert turn.segment is not None and turn.segment.translator is not None
    assert turn.segment.translator.turn_cursor == 42


def test_an_empty_prompt_is_refused_before_any_request() -> None:
    h = Harness(chat_id=CHAT, last_seen_message_id=3)
    turn = h.segment([TextContent("")])
    assert isinstance(turn.error, CoderAgentError) and "no content" in str(turn.error)
    assert h.routes() == []


def test_a_prompt_with_nothing_to_act_on_is_refused() -> None:
    """G.2: a ``noop`` classification."""
    h = Harness()
    turn = h.segment([UserMessage((TextContent("x"),)), AssistantMessage(())])
    assert isinstance(turn.error, CoderAgentError)
    assert "no user message or tool results" in str(turn.error)
    assert h.routes() == []


# -- model hints (wire 8, H.1) -------------------------------------------------------------------------

MODELS = "GET /api/v2/organizations/org-1/chats/models"
CATALOG = {
    "models": [
        {"id": "m-1", "model": "gpt-x", "ai_provider_id": "p1", "display_name": "GPT X"},
        {
            "id": "m-2",
            "model": "claude-sonnet-4-6",
            "ai_provider_id": "p2",
            "display_name": "Sonnet",
        },
    ],
    "providers": [{"id": "p1", "type": "openai"}, {"id": "p2", "type": "anthropic"}],
}


def test_a_model_hint_is_resolved_once_per_session_and_sent() -> None:
    h = Harness(model="anthropic:claude-sonnet-4-6", rest={MODELS: CATALOG})
    turn = h.segment("hi")
    assert h.routes() == [MODELS, "POST /api/v2/chats"]
    assert h.bodies("create_chat")[0]["model_config_id"] == "m-2"
    assert h.driver.requests()[0].op == "resolve_model_config_id"
    settle_ok(h)
    result_of(turn)
    h.segment("again")
    assert h.routes().count(MODELS) == 1
    assert h.bodies("create_chat_message")[0]["model_config_id"] == "m-2"


def test_an_unmatched_hint_is_cached_as_no_model_and_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(model="nothing-like-it", rest={MODELS: CATALOG})
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        h.segment("hi")
    assert "model_config_id" not in h.bodies("create_chat")[0]
    assert h.session.model_resolved and h.session.model_config_id is None
    assert any("matched no model" in r.getMessage() for r in caplog.records)


def test_a_failing_model_listing_fails_the_segment_and_is_not_cached() -> None:
    h = Harness(model="gpt", rest={MODELS: Respond(500, {"message": "down"})})
    turn = h.segment("hi")
    assert isinstance(turn.error, CoderApiError) and turn.error.status == 500
    assert not h.session.model_resolved
    assert h.routes() == [MODELS]


# -- uploads (P.3, wire 7, C.5) ----------------------------------------------------------------------


def test_files_with_bytes_are_uploaded_first_and_sent_by_id() -> None:
    h = Harness()
    h.segment(
        [
            TextContent("see"),
            FileContent(data=b"abc", media_type="text/plain", filename="a.txt"),
            FileContent(file_id="pre-uploaded"),
        ]
    )
    upload = h.driver.requests()[0]
    assert (upload.method, upload.path) == ("POST", "/api/v2/chats/files?organization=org-1")
    assert upload.body == b"abc" and ("Content-Type", "text/plain") in upload.headers
    assert h.bodies("create_chat")[0]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "file", "file_id": "file-1"},
        {"type": "file", "file_id": "pre-uploaded"},
    ]
    assert turn_segment(h).uploaded and turn_segment(h).effectful


def turn_segment(h: Harness) -> Any:
    turn = h.session.in_flight
    assert turn is not None and turn.segment is not None
    return turn.segment


def test_a_file_the_server_would_refuse_fails_before_any_request() -> None:
    h = Harness()
    turn = h.segment([FileContent(data=b"x", media_type="application/x-evil")])
    assert isinstance(turn.error, CoderAgentError)
    assert h.routes() == []


def test_a_failed_upload_fails_the_segment_before_the_submission() -> None:
    h = Harness(rest={"POST /api/v2/chats/files": Respond(413, {"message": "too big"})})
    turn = h.segment([FileContent(data=b"x", media_type="text/plain")])
    assert isinstance(turn.error, CoderApiError) and turn.error.status == 413
    assert h.count("create_chat") == 0 and interrupts(h) == 0


# -- resume (H.1, D.2, G.4) -------------------------------------------------------------------------


def pause(h: Harness, *call_ids: str) -> Any:
    turn = h.segment("weather?", tools=(weather_tool(),))
    ids = call_ids or ("c1",)
    h.send(
        status("running"),
        delta("Checking.", 1),
        message(2, [{"type": "text", "text": "Checking."}, *(call(i, args={}) for i in ids)]),
        status("requires_action"),
        action_required(*((i, "get_weather", "{}") for i in ids)),
    )
    result = result_of(turn)
    assert result.finish_reason == "tool-calls"
    return result


def resume_prompt(*results: tuple[str, Any]) -> list[Any]:
    return [
        UserMessage((TextContent("weather?"),)),
        AssistantMessage(()),
        ToolMessage(tuple(ToolResultContent(tool_call_id=i, output=o) for i, o in results)),
    ]


def test_a_healthy_pause_keeps_the_stream_and_the_resume_reads_it() -> None:
    """G.4, wire 5: one socket across requires_action -> resume -> settle."""
    h = Harness()
    pause(h)
    stream = h.session.retained_stream
    assert stream is not None and stream.reusable and h.socket.open
    turn = h.segment(resume_prompt(("c1", {"t": 21})), tools=(weather_tool(),))
    assert h.bodies("submit_tool_results") == [
        {"results": [{"tool_call_id": "c1", "output": {"t": 21}, "is_error": False}]}
    ]
    assert h.session.submitted_tool_call_ids == {"c1"}
    h.send(status("running"), message(4, "It is 21."), status("waiting"))
    assert result_of(turn).text == "It is 21."
    assert len(h.driver.sockets) == 1 and not h.socket.open


def test_only_results_not_yet_submitted_are_posted() -> None:
    h = Harness()
    pause(h, "c1", "c2")
    h.session.submitted_tool_call_ids = {"c1"}
    h.segment(resume_prompt(("c1", 1), ("c2", 2), ("c2", 3)), tools=(weather_tool(),))
    assert h.bodies("submit_tool_results") == [
        {"results": [{"tool_call_id": "c2", "output": 2, "is_error": False}]}
    ]


def test_an_empty_fresh_set_posts_nothing_and_still_streams() -> None:
    h = Harness()
    pause(h)
    h.session.submitted_tool_call_ids = {"c1"}
    turn = h.segment(resume_prompt(("c1", 1)), tools=(weather_tool(),))
    assert h.count("submit_tool_results") == 0
    h.send(status("running"), message(4, "done"), status("waiting"))
    assert result_of(turn).text == "done"


def test_a_resume_without_a_chat_is_refused() -> None:
    h = Harness()
    turn = h.segment(resume_prompt(("c1", 1)))
    assert isinstance(turn.error, CoderChatError) and turn.error.retryable is False
    assert str(turn.error) == "cannot submit tool results before a chat exists"


def test_a_resume_dials_fresh_with_the_session_cursor_when_the_pause_was_lost() -> None:
    """D12: a retained stream whose reader ended is never re-attached."""
    h = Harness()
    pause(h)
    h.session.close_retained_stream(h.now)
    h.driver.settle()
    h.segment(resume_prompt(("c1", 1)), tools=(weather_tool(),))
    assert len(h.driver.sockets) == 2
    assert h.socket.request.target == "/api/v2/chats/chat-1/stream?after_id=2"  # type: ignore[union-attr]


def test_a_new_turn_closes_a_paused_stream_and_dials_fresh() -> None:
    h = Harness(rest={MESSAGES: committed(3)})
    pause(h)
    first = h.driver.sockets[0]
    h.segment("something else")
    assert not first.open and first.client_close_codes == [1000]
    assert len(h.driver.sockets) == 2


def test_a_rest_failure_before_acquisition_closes_the_paused_stream() -> None:
    """H.6: the turn is dead, and a retry must dial fresh."""
    h = Harness(rest={MESSAGES: Respond(500, {"message": "boom"})})
    pause(h)
    turn = h.segment("again")
    assert isinstance(turn.error, CoderApiError)
    assert not h.driver.sockets[0].open and h.session.retained_stream is None


def test_the_prefix_is_preflighted_before_a_dial_when_still_unknown() -> None:
    """Wire 1.5: a resume that posts nothing has not locked the prefix yet."""
    h = Harness(chat_id=CHAT, last_seen_message_id=5)
    h.session.submitted_tool_call_ids = {"c1"}
    h.segment(resume_prompt(("c1", 1)), tools=(weather_tool(),))
    assert h.routes() == ["GET /api/v2/chats"]
    assert h.driver.requests()[0].op == "stream_events"
    assert h.session.selector.prefix == "/api/v2/chats"
    assert len(h.driver.sockets) == 1


def test_a_failed_preflight_fails_the_segment() -> None:
    h = Harness(
        chat_id=CHAT,
        last_seen_message_id=5,
        rest={"GET /api/v2/chats": Respond(401, {"message": "bad token"})},
    )
    h.session.submitted_tool_call_ids = {"c1"}
    turn = h.segment(resume_prompt(("c1", 1)))
    assert isinstance(turn.error, CoderApiError) and turn.error.status == 401
    assert h.driver.sockets == []


# -- the read loop (G.3, A.10, D1-D3) ----------------------------------------------------------------


@pytest.mark.parametrize("terminal", ["waiting", "completed"])
def test_a_terminal_status_settles_the_segment(terminal: str) -> None:
    h = Harness()
    turn = h.segment("hi")
    h.send(status("running"), message(2, "done"), status(terminal))
    result = result_of(turn)
    assert (result.finish_reason, result.raw_finish_reason) == ("stop", terminal)
    assert h.session.retained_stream is None and not h.socket.open


def test_a_non_terminal_status_clears_a_stale_terminal_one() -> None:
    """A.10, D1: an unknown status is non-terminal too."""
    h = Harness()
    turn = h.segment("hi")
    h.send(status("requires_action"), status("pending"), status("brand-new"), message(2, "x"))
    assert not turn.done
    h.send(status("waiting"))
    assert result_of(turn).raw_finish_reason == "waiting"


def test_the_lost_action_required_grace_and_recovery_happen_once_per_wait() -> None:
    """G.3, G.5: the grace timer arms once; a failed recovery recovers nothing and the
    segment keeps waiting on the stream without polling."""
    h = Harness(rest={"GET /api/v2/chats/chat-1/messages": Respond(500, {"message": "x"})})
    turn = h.segment("weather?", tools=(weather_tool(),))
    h.send(status("running"), status("requires_action"))
    h.advance(1.0)
    h.send(delta("unrelated"))  # more events do not postpone the grace
    h.advance(1.0)
    assert h.routes("GET") == ["GET /api/v2/chats/chat-1/messages?limit=200"]
    h.advance(30.0)
    assert h.routes("GET") == ["GET /api/v2/chats/chat-1/messages?limit=200"]
    h.send(action_required(("c1", "get_weather", "{}")))
    assert result_of(turn).tool_calls[0].tool_call_id == "c1"


def test_a_stale_requires_action_rearms_the_grace() -> None:
    """G.3 step 3: a non-terminal status after requires_action cancels the grace; a later
    requires_action starts a new one."""
    h = Harness()
    turn = h.segment("weather?", tools=(weather_tool(),))
    h.send(status("requires_action"))
    h.advance(1.5)
    h.send(status("running"))
    h.advance(1.0)
    assert h.routes("GET") == []
    h.send(status("requires_action"))
    h.advance(1.99)
    assert h.routes("GET") == []
    h.advance(0.01)
    assert h.routes("GET") == ["GET /api/v2/chats/chat-1/messages?limit=200"]
    assert not turn.done


def test_a_recovery_in_flight_is_abandoned_when_the_stream_wins() -> None:
    h = Harness(rest={"GET /api/v2/chats/chat-1/messages": Hang()})
    turn = h.segment("weather?", tools=(weather_tool(),))
    h.send(status("requires_action"))
    h.advance(2.0)
    h.send(status("running"))  # stale: the recovery is aborted at the re-arm
    assert h.driver.sent[-1].cancelled
    h.send(status("waiting"))
    assert result_of(turn).finish_reason == "stop"


def test_the_safety_valve_stops_waiting_for_tool_calls_after_200_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    turn = h.segment("weather?", tools=(weather_tool(),))
    h.send(status("requires_action"), *[delta(f"{i}") for i in range(199)])
    assert not turn.done
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        h.send(delta("200"), delta("201"))
    result = result_of(turn)
    assert (result.finish_reason, result.tool_calls) == ("tool-calls", ())
    assert h.session.retained_stream is None
    assert any("within 200 events" in r.getMessage() for r in caplog.records)


def test_events_after_the_settle_stay_unread() -> None:
    h = Harness()
    turn = h.segment("hi")
    h.send(message(2, "a"), status("waiting"), message(3, "next run"))
    assert result_of(turn).text == "a"
    assert h.session.last_seen_message_id == 2


def test_a_promotion_settles_the_finishing_turn() -> None:
    """D3, E.4: a user message above the cursor means the chat moved on: stop, no interrupt,
    stream closed, nothing of the next run attributed."""
    h = Harness(chat_id=CHAT, last_seen_message_id=4, rest={MESSAGES: committed(5)})
    turn = h.segment("hi")
    h.send(
        delta("partial"),
        message(6, "partial", usage={"output_tokens": 3}),
        message(7, "someone else", role="user"),
        message(8, "their answer", usage={"output_tokens": 99}),
    )
    result = result_of(turn)
    assert (result.finish_reason, result.raw_finish_reason) == ("stop", None)
    assert result.settled_by == "promotion" and result.text == "partial"
    assert result.usage.output_tokens == 3
    assert not h.socket.open and interrupts(h) == 0


def test_the_cursor_advances_to_the_largest_id_seen_even_below_the_window() -> None:
    """D.1, J.19."""
    h = Harness(chat_id=CHAT, last_seen_message_id=4, rest={MESSAGES: committed(20)})
    turn = h.segment("hi")
    h.send(message(3, "old"), message(21, "new"), status("waiting"))
    result_of(turn)
    assert h.session.last_seen_message_id == 21


# -- errors (C.4, D2) -----------------------------------------------------------------------------------


def test_stream_mode_reports_an_error_event_and_its_batched_status() -> None:
    """G.3.9 peek, D2: the terminal status batched behind the error is recorded, so no
    interrupt follows."""
    h = Harness()
    turn = h.segment("hi", mode="stream")
    h.send(error_event("overloaded", kind="overloaded", retryable=True), status("error"))
    result = result_of(turn)
    assert (result.finish_reason, result.raw_finish_reason) == ("error", "error")
    assert isinstance(result.error, CoderChatError) and result.error.kind == "overloaded"
    kinds = [type(p) for p in turn.parts]
    assert kinds == [StreamStart, ErrorPart, Finish]
    assert interrupts(h) == 0


def test_generate_mode_raises_the_error_payload() -> None:
    h = Harness()
    turn = h.segment("hi", mode="generate")
    h.send(
        status("error"),
        error_event("rate limited", detail="slow down", kind="rate_limit", status_code=429),
    )
    assert isinstance(turn.error, CoderChatError)
    assert str(turn.error) == "rate limited: slow down"
    assert (turn.error.kind, turn.error.status_code, turn.error.chat_id) == (
        "rate_limit",
        429,
        CHAT,
    )
    assert interrupts(h) == 0


def test_an_error_part_without_a_terminal_status_interrupts_the_run_once() -> None:
    """A reader that hands on an error event with no terminal status behind it (the real
    reader never does, D34): generate mode raises it, and the run, not known to be over, is
    interrupted once."""
    h = Harness(transport="scripted-client", stream_batches=[[error_event("rate limited")]])
    turn = h.segment("hi", mode="generate")
    assert isinstance(turn.error, CoderChatError) and str(turn.error) == "rate limited"
    assert interrupts(h) == 1


def test_d34_a_session_error_redials_and_the_turn_completes() -> None:
    """The server's stream session failed ("failed to load initial snapshot", no kind,
    not retryable) and it closed the socket: no error reaches the caller, the reader
    redials after the backoff and the turn ends normally on the new connection."""
    h = Harness()
    turn = h.segment("hi", mode="stream")
    h.send(error_event("failed to load initial snapshot", retryable=False))
    h.driver.sockets[-1].close(1000)
    assert not turn.done
    h.advance(1.0)
    h.send(status("running"), delta("hello"))
    settle_ok(h, text="hello")
    result = result_of(turn)
    assert (result.text, result.finish_reason, result.error) == ("hello", "stop", None)
    assert not [p for p in turn.parts if isinstance(p, ErrorPart)]
    assert len(h.driver.sockets) == 2
    assert interrupts(h) == 0


def test_d34_session_errors_past_the_budget_raise_the_servers_message() -> None:
    h = Harness()
    turn = h.segment("hi", mode="generate")
    for attempt in range(5):
        if attempt:
            h.advance(2.0**attempt)
        h.send(error_event("failed to subscribe to chat updates", retryable=False))
        h.driver.sockets[-1].close(1000)
    h.advance(0.0)
    assert isinstance(turn.error, CoderStreamError)
    assert turn.error.message.endswith(
        "the last one ended with the server's stream error: failed to subscribe to chat updates"
    )


def test_a_status_error_followed_by_its_error_event_raises_that_payload() -> None:
    """D2: the server sends status error before the error event, in one batch."""
    h = Harness()
    turn = h.segment("hi", mode="generate")
    h.send(status("error"), error_event("provider down", kind="overloaded"))
    assert isinstance(turn.error, CoderChatError) and turn.error.kind == "overloaded"
    assert interrupts(h) == 0


def test_a_status_error_without_an_error_event_fails_with_the_server_default() -> None:
    """D2: ``The chat request failed unexpectedly.``, kind generic, not retryable."""
    h = Harness()
    turn = h.segment("hi", mode="generate")
    h.send(status("error"))
    assert isinstance(turn.error, CoderChatError)
    assert (str(turn.error), turn.error.kind, turn.error.retryable) == (
        "The chat request failed unexpectedly.",
        "generic",
        False,
    )


def test_stream_mode_emits_the_default_error_part_before_finish() -> None:
    h = Harness()
    turn = h.segment("hi", mode="stream")
    h.send(delta("par"), status("error"))
    parts = list(turn.parts)
    assert isinstance(parts[-2], ErrorPart) and isinstance(parts[-1], Finish)
    assert parts[-2].error.kind == "generic"
    assert result_of(turn).finish_reason == "error"


def test_a_stream_that_ends_without_a_terminal_status_is_stream_closed() -> None:
    """C.4: the reader ended quietly with no terminal status and no error event."""
    h = Harness(
        transport="scripted-client",
        stream_batches=[[status("running"), delta("par")]],
        stream_then="end",
    )
    turn = h.segment("hi")
    assert isinstance(turn.error, CoderChatError)
    assert (str(turn.error), turn.error.kind, turn.error.retryable) == (
        STREAM_CLOSED_MESSAGE,
        "stream_closed",
        True,
    )
    assert interrupts(h) == 1


def test_an_error_event_without_a_status_before_the_end_still_finishes() -> None:
    """G.3 post-loop: with an error but no terminal status the finish is ``error``."""
    h = Harness(transport="scripted-client", stream_batches=[[error_event("x")]], stream_then="end")
    turn = h.segment("hi", mode="stream")
    result = result_of(turn)
    assert (result.finish_reason, result.raw_finish_reason) == ("error", None)
    assert interrupts(h) == 1


def test_disposing_the_stream_under_a_running_segment_ends_it() -> None:
    h = Harness()
    turn = h.segment("hi")
    h.send(delta("partial"))
    h.driver.close_stream()
    h.driver.settle()
    assert isinstance(turn.error, CoderChatError) and turn.error.kind == "stream_closed"


def test_an_unparseable_frame_is_a_retryable_stream_closed_error() -> None:
    h = Harness()
    turn = h.segment("hi")
    h.socket.send_text("{not json")
    h.driver.settle()
    assert isinstance(turn.error, CoderChatError) and turn.error.kind == "stream_closed"
    assert turn.error.retryable is True
    assert str(turn.error) == "Coder chat stream failed mid-turn: failed to parse chat stream frame"
    assert turn.error.__cause__ is not None


def test_a_terminal_upgrade_rejection_passes_through_as_an_api_error() -> None:
    h = Harness()
    h.driver.auto_accept = False
    turn = h.segment("hi")
    h.socket.reject(403, b'{"message": "forbidden"}')
    h.driver.settle()
    assert isinstance(turn.error, CoderApiError)
    assert (turn.error.status, turn.error.method) == (403, "GET")
    assert turn.error.path == "/api/v2/chats/chat-1/stream"


# -- stream failures and retryability (C.2, C.5, wire 10) ---------------------------------------------


def exhaust(h: Harness) -> None:
    """Five connection endings without progress (C.2): the redial budget runs out."""
    for _ in range(5):
        h.socket.drop(1006)
        h.driver.settle()
        h.advance(30.0)


def test_a_fresh_chat_without_effects_is_discarded_and_its_stream_error_retryable() -> None:
    """C.5: stranded first, then the session reset (after the interrupt and the cursor)."""
    h = Harness()
    turn = h.segment("hi")
    h.send(message(3, "partial"))
    exhaust(h)
    error = turn.error
    assert isinstance(error, CoderStreamError) and error.retryable is True
    assert error.reason == "redial-budget-exhausted" and error.chat_id == CHAT
    assert h.session.stranded_chat_ids == (CHAT,)
    assert h.session.chat_id is None and h.session.last_seen_message_id is None
    assert h.session.last_known_chat_id == CHAT
    assert interrupts(h) == 1
    assert len(h.driver.sockets) == 5


@pytest.mark.parametrize(
    ("config", "chat_fields"),
    [
        ({"workspace_id": "ws-1"}, {}),
        ({"mcp_server_ids": ("m1",)}, {}),
        ({}, {"workspace_id": "ws-by-server"}),
        ({}, {"mcp_server_ids": ["m-by-server"]}),
    ],
)
def test_a_fresh_chat_with_server_side_effects_is_not_retryable(
    config: dict[str, Any], chat_fields: dict[str, Any]
) -> None:
    from tests.core_driver import chat_stub

    h = Harness(rest={"POST /api/v2/chats": Respond(201, chat_stub(**chat_fields))}, **config)
    turn = h.segment("hi")
    exhaust(h)
    error = turn.error
    assert isinstance(error, CoderStreamError) and error.retryable is False
    assert "automatic retry is disabled because the turn has server-side effects" in str(error)
    assert isinstance(error.__cause__, CoderStreamError) and error.__cause__.retryable is True
    assert (error.url, error.chat_id) == (error.__cause__.url, CHAT)
    assert h.session.chat_id is None and h.session.stranded_chat_ids == (CHAT,)


def test_a_chat_with_prior_state_keeps_its_session_and_is_not_retryable() -> None:
    h = Harness(chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: committed(4)})
    turn = h.segment("hi")
    exhaust(h)
    error = turn.error
    assert isinstance(error, CoderStreamError) and error.retryable is False
    assert "the chat has prior state" in str(error)
    assert h.session.chat_id == CHAT and h.session.stranded_chat_ids == ()


def test_a_drop_with_untrackable_deltas_outstanding_is_terminal() -> None:
    """C.2.4, D14: deltas without episode coordinates cannot be deduplicated on a redial."""
    h = Harness()
    turn = h.segment("hi")
    h.send(delta("no coordinates"))
    h.socket.drop(1006)
    h.driver.settle()
    assert isinstance(turn.error, CoderStreamError)
    assert turn.error.reason == "untrackable-deltas" and turn.error.retryable is True


def test_a_redial_replay_is_deduplicated_and_the_turn_completes() -> None:
    """B.2, B.3: the redial reuses the original cursor; replayed deltas are suppressed."""
    h = Harness(chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: committed(4)})
    turn = h.segment("hi")
    h.send(status("running"), delta("Hel", 1), delta("lo", 2))
    h.socket.drop(1006)
    h.driver.settle()
    h.advance(1.0)
    assert h.socket.request.target == "/api/v2/chats/chat-1/stream?after_id=4"  # type: ignore[union-attr]
    h.send(status("running"), delta("Hel", 1), delta("lo", 2), delta(" world", 3))
    h.send(message(5, "Hello world"), status("waiting"))
    assert result_of(turn).text == "Hello world"
    assert interrupts(h) == 0


# -- request_timeout (C.3) --------------------------------------------------------------------------


def test_the_timeout_bounds_the_stream_and_interrupts_the_run() -> None:
    h = Harness(request_timeout=5)
    turn = h.segment("hi")
    h.send(status("running"), delta("slow", 1))
    h.advance(4.9)
    assert not turn.done
    h.advance(0.1)
    error = turn.error
    assert isinstance(error, CoderChatError)
    assert (error.kind, error.retryable, error.chat_id) == ("timeout", True, CHAT)
    assert (
        str(error)
        == timeout_message(5)
        == "Coder Agent turn exceeded its 5s request_timeout budget."
    )
    assert interrupts(h) == 1
    assert not h.socket.open


def test_the_timeout_covers_rest_calls_and_redials_without_resetting() -> None:
    h = Harness(request_timeout=2.5, chat_id=CHAT, rest={"getMessages(limit=1)": Hang()})
    start = h.now
    turn = h.segment("hi")
    h.advance(2.5)
    assert isinstance(turn.error, CoderChatError) and turn.error.kind == "timeout"
    assert h.now == start + 2.5
    # Nothing of ours was submitted: the chat is not interrupted.
    assert interrupts(h) == 0 and h.driver.sent[0].cancelled


def test_the_turns_abort_deadline_is_the_segments_request_timeout_c3() -> None:
    """``Turn.abort_deadline`` is what a blocking adapter cuts a request at: the segment's
    start plus ``request_timeout``, unchanged while it runs, gone once the segment ended."""
    h = Harness(request_timeout=6)
    start = h.now
    turn = h.segment("hi")
    assert turn.abort_deadline == start + 6
    h.send(status("running"), delta("slow", 1))
    h.advance(2.0)
    assert turn.abort_deadline == start + 6
    h.send(status("waiting"))
    assert turn.done and turn.error is None
    assert turn.abort_deadline is None


def test_redials_do_not_reset_the_timeout() -> None:
    h = Harness(request_timeout=6)
    start = h.now
    turn = h.segment("hi")
    for _ in range(3):
        h.socket.drop(1006)
        h.driver.settle()
        h.advance(2.0)
    assert isinstance(turn.error, CoderChatError) and turn.error.kind == "timeout"
    assert h.now == start + 6.0 and len(h.driver.sockets) == 3


def test_a_timeout_during_chat_creation_has_no_chat_to_interrupt() -> None:
    h = Harness(request_timeout=0.03, rest={"POST /api/v2/chats": Hang()})
    turn = h.segment("hi")
    h.advance(0.03)
    assert isinstance(turn.error, CoderChatError) and turn.error.kind == "timeout"
    assert interrupts(h) == 0


def test_a_timeout_with_the_message_post_in_flight_interrupts() -> None:
    """The submission may have been applied (G.6, wire 10)."""
    h = Harness(request_timeout=1, chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: Hang()})
    turn = h.segment("hi")
    h.advance(1.0)
    assert isinstance(turn.error, CoderChatError) and interrupts(h) == 1


def test_a_timeout_while_queued_withdraws_the_prompt_and_records_it() -> None:
    """E.5, D9: never interrupt the other run; the error records ``withdrawn``."""
    queued = {"queued": True, "queued_message": {"id": 7, "chat_id": CHAT, "content": []}}
    h = Harness(request_timeout=1, chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: queued})
    turn = h.segment("hi")
    h.send(status("running"))
    h.advance(1.0)
    error = turn.error
    assert isinstance(error, CoderChatError) and error.kind == "timeout"
    assert error.withdrawn is True
    assert h.routes("DELETE") == ["DELETE /api/v2/chats/chat-1/queue/7"]
    assert interrupts(h) == 0


@pytest.mark.parametrize(
    ("reply", "withdrawn"),
    [(Respond(404, {"message": "gone"}), False), (Respond(500, {"message": "x"}), None)],
)
def test_the_withdrawal_outcome_is_recorded_on_a_dead_end(
    reply: Respond, withdrawn: bool | None
) -> None:
    """E.2 dead end (our entry left the queue without a candidate), then E.5/D9."""
    queued = {"queued": True, "queued_message": {"id": 7, "chat_id": CHAT, "content": []}}
    h = Harness(
        chat_id=CHAT,
        last_seen_message_id=3,
        rest={MESSAGES: queued, "DELETE /api/v2/chats/chat-1/queue/7": reply},
    )
    h.session.selector._lock("/api/v2/chats")
    turn = h.segment("hi")
    h.send(queue_update())
    error = turn.error
    assert isinstance(error, CoderChatError) and error.kind == "queued_submission_lost"
    assert error.retryable is False and error.withdrawn is withdrawn
    assert interrupts(h) == 0


def test_an_error_while_queued_is_a_dead_end() -> None:
    """E.2: the server does not promote the queue after an error."""
    queued = {"queued": True, "queued_message": {"id": 7, "chat_id": CHAT, "content": []}}
    h = Harness(chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: queued})
    turn = h.segment("hi")
    h.send(status("error"), error_event("other run failed"))
    assert isinstance(turn.error, CoderChatError)
    assert turn.error.kind == "queued_submission_lost" and turn.error.withdrawn is True


# -- cancellation (D22, G.6) --------------------------------------------------------------------------


class CallerAbort(Exception):
    pass


def test_cancel_fires_one_background_interrupt_closes_the_socket_and_finishes_at_once() -> None:
    h = Harness(chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: committed(4)})
    turn = h.segment("hi")
    h.send(message(5, "partial"))
    h.driver.cancel(CallerAbort("stop"))
    assert turn.done and turn.cancelled
    assert not h.socket.open and h.socket.client_close_codes == [1000]
    assert h.session.last_seen_message_id == 5
    assert interrupts(h) == 1
    assert h.session.in_flight is None


def test_cancel_before_the_submission_interrupts_nothing() -> None:
    h = Harness(chat_id=CHAT, rest={"getMessages(limit=1)": Hang()})
    turn = h.segment("hi")
    h.driver.cancel()
    assert turn.cancelled and interrupts(h) == 0
    assert h.driver.sent[0].cancelled


def test_cancel_of_a_gated_queued_turn_withdraws_in_the_background() -> None:
    """J.20: a queued-and-gated turn never interrupts."""
    queued = {"queued": True, "queued_message": {"id": 9, "chat_id": CHAT, "content": []}}
    h = Harness(chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: queued})
    turn = h.segment("hi")
    h.driver.cancel()
    assert turn.cancelled
    h.driver.drain_background()
    assert h.routes("DELETE") == ["DELETE /api/v2/chats/chat-1/queue/9"]
    assert interrupts(h) == 0


def test_cancel_of_an_anchored_queued_turn_interrupts() -> None:
    """E.5: once anchored the run is ours."""
    queued = {"queued": True, "queued_message": {"id": 9, "chat_id": CHAT, "content": []}}
    h = Harness(chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: queued})
    turn = h.segment("hi")
    h.send(message(4, "", role="user", queued_message_id=9), status("running"))
    h.driver.cancel()
    assert turn.cancelled and interrupts(h) == 1 and h.routes("DELETE") == []


def test_an_interrupt_of_a_paused_run_sends_the_d4_follow_up() -> None:
    from tests.core_driver import chat_stub

    h = Harness(
        rest={
            INTERRUPT: [
                Respond(200, chat_stub(status="running")),
                Respond(200, chat_stub(status="interrupting")),
            ]
        }
    )
    turn = h.segment("weather?", tools=(weather_tool(),))
    h.send(status("running"), status("requires_action"))
    h.driver.cancel()
    assert turn.cancelled and interrupts(h) == 2


# -- D4: a refused submission is not applied --------------------------------------------------------


def test_a_tool_results_post_refused_with_a_4xx_does_not_interrupt() -> None:
    h = Harness(
        rest={
            "POST /api/v2/chats/chat-1/tool-results": Respond(
                400, {"message": "Missing tool result."}
            )
        }
    )
    pause(h)
    turn = h.segment(resume_prompt(("c1", 1)), tools=(weather_tool(),))
    assert isinstance(turn.error, CoderApiError) and turn.error.status == 400
    assert h.session.submitted_tool_call_ids == set()
    assert interrupts(h) == 0
    assert h.session.retained_stream is None  # the paused stream is closed (H.6)


@pytest.mark.parametrize(("status_code", "expected"), [(409, 0), (429, 0), (500, 1), (503, 1)])
def test_a_message_post_refused_with_a_4xx_does_not_interrupt(
    status_code: int, expected: int
) -> None:
    h = Harness(
        chat_id=CHAT,
        last_seen_message_id=3,
        rest={MESSAGES: Respond(status_code, {"message": "no"})},
    )
    turn = h.segment("hi")
    assert isinstance(turn.error, CoderApiError) and turn.error.status == status_code
    assert interrupts(h) == expected


def test_a_network_failure_of_the_post_interrupts_once() -> None:
    from tests.core_driver import NetworkError

    h = Harness(chat_id=CHAT, last_seen_message_id=3, rest={MESSAGES: NetworkError()})
    h.session.selector._lock("/api/v2/chats")
    turn = h.segment("hi")
    assert turn.error is not None and interrupts(h) == 1


# -- observability (G.7, wire 11, J.22) ---------------------------------------------------------------


def settles(h: Harness) -> list[Any]:
    return h.of("segment:settle")


def test_a_clean_segment_emits_one_start_and_one_settle() -> None:
    h = Harness()
    turn = h.segment("hi")
    settle_ok(h)
    result_of(turn)
    (start,) = h.of("segment:start")
    (settle,) = settles(h)
    assert (start.segment, start.chat_id) == (1, None)
    assert (settle.segment, settle.chat_id, settle.status, settle.finish_reason) == (
        1,
        CHAT,
        "waiting",
        "stop",
    )
    assert settle.error is None and settle.reader == h.session.new_reader_id() - 1
    assert settle.duration == 0.0


def test_a_pause_settles_requires_action_with_tool_calls() -> None:
    h = Harness()
    pause(h)
    (settle,) = settles(h)
    assert (settle.status, settle.finish_reason) == ("requires_action", "tool-calls")


def test_a_failed_segment_settles_with_its_error_and_status_but_no_finish_reason() -> None:
    h = Harness()
    turn = h.segment("hi", mode="generate")
    h.send(status("error"), error_event("bad"))
    assert turn.error is not None
    (settle,) = settles(h)
    assert settle.error == {"name": "CoderChatError", "message": "bad"}
    assert (settle.status, settle.finish_reason) == ("error", None)


def test_a_streamed_error_part_marks_the_settle_failed() -> None:
    h = Harness()
    turn = h.segment("hi", mode="stream")
    h.send(error_event("bad"), status("error"))
    result_of(turn)
    (settle,) = settles(h)
    assert settle.error == {"name": "CoderChatError", "message": "bad"}
    assert settle.finish_reason is None and settle.status == "error"


def test_a_consumer_teardown_settles_with_neither() -> None:
    h = Harness()
    turn = h.segment("hi")
    h.send(status("requires_action"))
    h.driver.cancel(None)
    assert turn.cancelled
    (settle,) = settles(h)
    assert (settle.status, settle.finish_reason, settle.error) == (None, None, None)


def test_a_caller_abort_settles_failed_with_its_reason() -> None:
    h = Harness()
    turn = h.segment("hi")
    h.driver.cancel(CallerAbort("stop it"))
    assert turn.cancelled
    (settle,) = settles(h)
    assert settle.error == {"name": "CallerAbort", "message": "stop it"}


def test_segments_are_numbered_per_session_and_only_when_observed() -> None:
    h = Harness()
    pause(h)
    turn = h.segment(resume_prompt(("c1", 1)), tools=(weather_tool(),))
    h.send(status("running"), message(4, "x"), status("waiting"))
    result_of(turn)
    assert [e.segment for e in h.of("segment:start")] == [1, 2]
    assert [e.chat_id for e in h.of("segment:start")] == [None, CHAT]
    quiet = Harness(observe=False)
    quiet.segment("hi")
    settle_ok(quiet)
    assert quiet.env.events == [] and quiet.session.next_segment_number() == 1


def test_stream_start_carries_the_warnings_and_opens_every_segment() -> None:
    h = Harness()
    turn = h.segment("hi", mode="stream", warnings=("unsupported: response_format",))
    settle_ok(h)
    parts = list(turn.parts)
    assert parts[0] == StreamStart(warnings=("unsupported: response_format",))
    assert isinstance(parts[-1], Finish)
    assert [p.delta for p in parts if isinstance(p, TextDelta)] == ["ok"]
    assert [p for p in parts if isinstance(p, ToolCall)] == []


# -- edges ----------------------------------------------------------------------------------------------


def test_a_recovery_that_cannot_reach_the_server_recovers_nothing() -> None:
    from tests.core_driver import NetworkError

    h = Harness(rest={"GET /api/v2/chats/chat-1/messages": NetworkError()})
    turn = h.segment("weather?", tools=(weather_tool(),))
    h.send(status("requires_action"))
    h.advance(2.0)
    assert h.routes("GET") == ["GET /api/v2/chats/chat-1/messages?limit=200"]
    assert not turn.done
    h.send(action_required(("c1", "get_weather", "{}")))
    assert result_of(turn).finish_reason == "tool-calls"


def test_the_first_streamed_error_part_is_the_settles_error() -> None:
    h = Harness()
    turn = h.segment("hi", mode="stream")
    h.send(error_event("first"), delta("x"), error_event("second"), status("error"))
    result = result_of(turn)
    assert str(result.error) == "second"
    (settle,) = settles(h)
    assert settle.error == {"name": "CoderChatError", "message": "first"}


def test_the_first_error_stays_the_settles_error_across_deliveries() -> None:
    """wire 11: ``segment:settle`` reports the first error part the consumer saw, also when
    a later delivery brings another (from a reader that hands on error events without their
    status; the real reader holds such events back, D34)."""
    h = Harness(
        transport="scripted-client",
        stream_batches=[
            [
                error_event("first"),
                status("requires_action"),  # ends the peek: "first" is delivered alone
                delta("x"),
                error_event("second"),
                status("error"),
            ]
        ],
    )
    turn = h.segment("hi", mode="stream")
    assert str(result_of(turn).error) == "second"
    (settle,) = settles(h)
    assert settle.error == {"name": "CoderChatError", "message": "first"}


def test_d34_an_error_the_connection_outlived_never_reaches_the_consumer() -> None:
    """A held error event followed by a later frame was neither the session's error nor
    the run's: dropped; the run's error is the one its status error comes with."""
    h = Harness()
    turn = h.segment("hi", mode="stream")
    h.send(error_event("first"))
    h.send(delta("x"))
    h.send(error_event("second"))
    h.send(status("error"))
    assert str(result_of(turn).error) == "second"
    (settle,) = settles(h)
    assert settle.error == {"name": "CoderChatError", "message": "second"}


def test_a_stream_error_without_a_chat_id_is_stamped_with_the_turns() -> None:
    """C.5 step 1."""
    failure = CoderStreamError("gone", url="wss://coder.test/x", chat_id=None)
    h = Harness(
        transport="scripted-client", stream_batches=[[status("running")]], stream_then=failure
    )
    turn = h.segment("hi")
    assert turn.error is failure and failure.chat_id == CHAT and failure.retryable


def test_a_created_chat_without_a_status_leaves_the_last_status_alone() -> None:
    h = Harness(rest={"POST /api/v2/chats": Respond(201, {"id": CHAT})})
    h.session.last_status = "waiting"
    h.segment("hi")
    assert h.session.last_status == "waiting" and h.session.chat_id == CHAT


def test_a_withdrawal_after_a_dead_end_is_not_cut_by_the_segments_timeout() -> None:
    """The teardown has its own 10 s bound (D22), independent of ``request_timeout``."""
    queued = {"queued": True, "queued_message": {"id": 7, "chat_id": CHAT, "content": []}}
    h = Harness(
        request_timeout=1,
        chat_id=CHAT,
        last_seen_message_id=3,
        rest={MESSAGES: queued, "DELETE /api/v2/chats/chat-1/queue/7": Respond(204, delay=3.0)},
    )
    turn = h.segment("hi")
    h.send(queue_update())
    h.advance(3.0)
    error = turn.error
    assert isinstance(error, CoderChatError) and error.kind == "queued_submission_lost"
    assert error.withdrawn is True


# -- the step's text, kept in runs (G.6) -------------------------------------------------------------


def test_a_long_segments_step_text_is_every_delta_in_order() -> None:
    """G.6: the step's ``text`` and ``reasoning`` are the segment's deltas joined in order,
    however many there are (the builder joins them in runs to save memory)."""
    h = Harness()
    turn = h.segment("hi")
    h.send(status("running"))
    words = [f"w{i} " for i in range(1000)]
    thoughts = [f"t{i}." for i in range(600)]
    for start in range(0, 600, 50):
        h.send(*(delta(t, kind="reasoning") for t in thoughts[start : start + 50]))
    for start in range(0, 1000, 50):
        h.send(*(delta(w) for w in words[start : start + 50]))
    h.send(status("waiting"))
    (step,) = result_of(turn).steps
    assert step.text == "".join(words)
    assert step.reasoning == "".join(thoughts)


_STEP_PARTS = st.one_of(
    st.builds(TextDelta, st.just("t"), st.text(max_size=4)),
    st.builds(ReasoningDelta, st.just("r"), st.text(max_size=4)),
    st.builds(
        ToolCall,
        tool_call_id=st.sampled_from(["a", "b"]),
        tool_name=st.just("x"),
        input=st.just("{}"),
    ),
    st.builds(ToolResult, tool_call_id=st.just("a"), tool_name=st.just("x"), result=st.integers()),
    st.builds(Source, id=st.sampled_from(["s1", "s2"]), url=st.just("https://example.test")),
)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(_STEP_PARTS, max_size=120),
    run=st.integers(min_value=1, max_value=8),
    batch=st.integers(min_value=1, max_value=40),
)
def test_joining_deltas_in_runs_never_changes_the_step(
    parts: list[Any], run: int, batch: int
) -> None:
    """G.6: a step built with deltas joined in runs of any length, delivered in batches of
    any size, equals the step built with every delta kept apart and delivered one by one
    (text, reasoning, calls, results and sources, in order)."""
    from coder_proto._agent import segment as module

    finish = Finish(finish_reason="stop", raw_finish_reason="waiting")

    def build(length: int, size: int) -> Any:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "PENDING_RUN", length)
            builder = module._StepBuilder()
            every = [*parts, finish]
            for start in range(0, len(every), size):
                assert builder.add_all(every[start : start + size], stop_at_error=False) is None
            return builder.build(CHAT)

    joined, apart = build(run, batch), build(10**9, 1)
    assert joined == apart
    assert joined.text == "".join(p.delta for p in parts if type(p) is TextDelta)
    assert joined.reasoning == "".join(p.delta for p in parts if type(p) is ReasoningDelta)
