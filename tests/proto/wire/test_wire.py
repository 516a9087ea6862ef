"""The wire model: tolerant parsing of server JSON (wire 2-4, 6, 8; D1, D8, D13, D14)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError, CoderChatError, CoderProtocolError
from coder_proto._wire import (
    MISSING,
    ActionRequiredEvent,
    Chat,
    ChatError,
    ChatMessage,
    ChatMessagesResponse,
    ChatMessageUsage,
    ChatQueuedMessage,
    ChatWatchEvent,
    ContextFilePart,
    CreateChatMessageRequest,
    CreateChatMessageResponse,
    CreateChatRequest,
    DynamicTool,
    ErrorEvent,
    FileInput,
    FilePart,
    FileReferenceInput,
    FileReferencePart,
    HistoryResetEvent,
    HookNoticePart,
    MessagePartEvent,
    ModelCatalog,
    PreviewResetEvent,
    QueueUpdateEvent,
    ReasoningPart,
    RetryEvent,
    SkillPart,
    SourcePart,
    StatusEvent,
    TextInput,
    TextPart,
    ToolCallPart,
    ToolResultInput,
    ToolResultPart,
    UnknownEvent,
    UnknownPart,
    events_from_json,
    parse_chat_list,
    parse_event,
    parse_frame,
    parse_part,
    parse_watch_frame,
    tool_results_body,
)
from coder_proto._wire.messages import parse_messages

# The real server serialises these zero values on every part (wire 3.5).
GO_ZERO_KEYS = {
    "text": "",
    "url": "",
    "media_type": "",
    "file_name": "",
    "start_line": 0,
    "end_line": 0,
    "content": "",
    "context_file_path": "",
    "skill_name": "",
}


def go_part(**fields: Any) -> dict[str, Any]:
    return {**GO_ZERO_KEYS, **fields}


def test_parts_branch_on_type_not_on_present_keys_wire_3_5() -> None:
    assert parse_part(go_part(type="text", text="hi")) == TextPart("hi")
    assert parse_part(go_part(type="reasoning", text="r", signature="s")) == ReasoningPart("r", "s")
    call = parse_part(go_part(type="tool-call", tool_call_id="c1", tool_name="t", args={"a": 1}))
    assert call == ToolCallPart(tool_call_id="c1", tool_name="t", args={"a": 1})
    src = parse_part(go_part(type="source", url="https://x", title=""))
    assert src == SourcePart(url="https://x", title="")
    assert parse_part(go_part(type="file", media_type="image/png", file_id="f")) == FilePart(
        media_type="image/png", file_id="f"
    )
    assert parse_part(
        go_part(type="file-reference", file_name="a.py", start_line=1, end_line=2, content="x")
    ) == FileReferencePart(file_name="a.py", start_line=1, end_line=2, content="x")
    assert parse_part(go_part(type="context-file", context_file_path="/p")) == ContextFilePart(
        context_file_path="/p"
    )
    assert parse_part(go_part(type="skill", skill_name="s")) == SkillPart(skill_name="s")
    assert parse_part(go_part(type="hook-notice", text="n")) == HookNoticePart(text="n")


def test_missing_args_and_result_differ_from_null_d19() -> None:
    assert parse_part({"type": "tool-call", "tool_call_id": "c", "tool_name": "t"}).args is MISSING  # type: ignore[union-attr]
    assert (
        parse_part({"type": "tool-call", "tool_call_id": "c", "tool_name": "t", "args": None}).args
        is None
    )  # type: ignore[union-attr]
    res = parse_part({"type": "tool-result", "tool_call_id": "c", "tool_name": "t"})
    assert isinstance(res, ToolResultPart) and res.result is MISSING and res.is_error is False
    res = parse_part(
        {
            "type": "tool-result",
            "tool_call_id": "c",
            "tool_name": "t",
            "result": None,
            "is_error": True,
        }
    )
    assert isinstance(res, ToolResultPart) and res.result is None and res.is_error is True
    assert repr(MISSING) == "MISSING" and not MISSING


def test_unknown_part_type_is_explicit_and_kept() -> None:
    part = parse_part({"type": "hologram", "x": 1})
    assert (
        isinstance(part, UnknownPart)
        and part.type == "hologram"
        and part.to_json() == {"type": "hologram", "x": 1}
    )
    assert parse_part({"text": "no type"}) == UnknownPart(type="")


@pytest.mark.parametrize(
    "bad",
    [
        "not an object",
        {"type": "text", "text": 5},
        {"type": "tool-call", "tool_name": 3},
        {"type": "tool-result", "is_error": "yes"},
        {"type": "file-reference", "start_line": "1"},
        {"type": "source", "url": ["x"]},
    ],
)
def test_structurally_wrong_parts_raise_protocol_error(bad: Any) -> None:
    with pytest.raises(CoderProtocolError):
        parse_part(bad)


def test_part_to_json_round_trips() -> None:
    parts = [
        TextPart("a"),
        ReasoningPart("r", "sig", "t0", "t1"),
        ToolCallPart(
            tool_call_id="c",
            tool_name="t",
            args={"x": 1},
            args_delta="{",
            provider_executed=True,
            mcp_server_config_id="m",
            parsed_commands=[["ls"]],
            hook_rewritten=True,
            created_at="t",
        ),
        ToolResultPart(
            tool_call_id="c",
            tool_name="t",
            result=[1],
            is_error=True,
            result_delta="d",
            result_reset=True,
            is_media=False,
            provider_executed=True,
            mcp_server_config_id="m",
            created_at="t",
        ),
        SourcePart(url="u", source_id="s", title="t"),
        FilePart(media_type="m", name="n", file_id="f", data="d", url="u"),
        FileReferencePart(file_name="f", start_line=1, end_line=2, content="c"),
        ContextFilePart(
            context_file_path="p", context_file_truncated=True, context_file_agent_id="a"
        ),
        SkillPart(skill_name="s", skill_description="d"),
        HookNoticePart(text="h"),
    ]
    for part in parts:
        assert parse_part(part.to_json()) == part
    assert ToolCallPart(tool_call_id="c", tool_name="t").to_json() == {
        "type": "tool-call",
        "tool_call_id": "c",
        "tool_name": "t",
    }
    assert "result" not in ToolResultPart(tool_call_id="c", tool_name="t").to_json()


def test_chat_message_parses_usage_stamp_and_keeps_raw() -> None:
    raw = {
        "id": 42,
        "chat_id": "c1",
        "created_at": "t",
        "role": "assistant",
        "created_by": "u",
        "model_config_id": "m",
        "content": [go_part(type="text", text="It is 21°C.")],
        "usage": {
            "input_tokens": 12,
            "output_tokens": 30.0,
            "cache_read_tokens": 1800,
            "future": "x",
            "total_tokens": "n/a",
        },
        "queued_message_id": 7,
        "brand_new_field": True,
    }
    msg = ChatMessage.from_json(raw)
    assert (msg.id, msg.role, msg.chat_id, msg.queued_message_id) == (42, "assistant", "c1", 7)
    assert msg.content == (TextPart("It is 21°C."),)
    assert (
        msg.usage is not None and msg.usage.output_tokens == 30 and msg.usage.total_tokens is None
    )
    assert msg.usage.raw["future"] == "x"
    assert msg.raw is raw and msg.to_json() == raw


def test_queued_message_id_other_than_int_is_ignored_d8() -> None:
    for stamp in ("7", 7.5, True, None):
        assert (
            ChatMessage.from_json(
                {"id": 1, "role": "user", "queued_message_id": stamp}
            ).queued_message_id
            is None
        )


def test_chat_message_without_raw_serialises_its_fields() -> None:
    msg = ChatMessage(
        id=3,
        role="user",
        content=(TextPart("x"),),
        chat_id="c",
        created_by="u",
        model_config_id="m",
        usage=ChatMessageUsage(input_tokens=1),
        queued_message_id=2,
    )
    assert ChatMessage.from_json(msg.to_json()) == msg
    assert ChatMessageUsage(input_tokens=1).to_json() == {"input_tokens": 1}


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "user"},
        {"id": "1", "role": "user"},
        {"id": True, "role": "user"},
        {"id": 1, "content": "x"},
        [],
    ],
)
def test_malformed_messages_raise_protocol_error(bad: Any) -> None:
    with pytest.raises(CoderProtocolError):
        ChatMessage.from_json(bad)


def test_integral_float_ids_are_accepted() -> None:
    assert ChatMessage.from_json({"id": 5.0, "role": "user"}).id == 5


def test_chat_error_parsing_and_exception_wire_3_8() -> None:
    err = ChatError.from_json(
        {
            "message": "Overloaded",
            "detail": "later",
            "kind": "overloaded",
            "retryable": True,
            "status_code": 529,
            "provider": "anthropic",
        }
    )
    exc = err.to_exception(chat_id="c1")
    assert (
        isinstance(exc, CoderChatError)
        and str(exc) == "Overloaded: later"
        and exc.kind == "overloaded"
    )
    assert (
        exc.retryable
        and exc.status_code == 529
        and exc.chat_id == "c1"
        and exc.provider == "anthropic"
    )
    assert ChatError.from_json(err.to_json()) == err
    assert ChatError.from_json({}).message == "The chat request failed unexpectedly."
    assert ChatError.default() == ChatError(kind="generic")
    assert ChatError().to_json() == {
        "message": "The chat request failed unexpectedly.",
        "retryable": False,
    }


def test_chat_tolerates_unknown_fields_and_statuses_d1() -> None:
    raw = {
        "id": "c1",
        "organization_id": "o",
        "owner_id": "u",
        "title": "t",
        "status": "hibernating",
        "workspace_id": None,
        "last_error": {"message": "x"},
        "archived": False,
        "mcp_server_ids": ["a", 3],
        "queued_for_capacity": True,
        "children": [],
        "labels": {"k": "v"},
        "client_type": "api",
    }
    chat = Chat.from_json(raw)
    assert chat.status == "hibernating" and chat.workspace_id is None and chat.queued_for_capacity
    assert chat.last_error == ChatError(message="x") and chat.mcp_server_ids == ("a",)
    assert chat.raw["labels"] == {"k": "v"} and chat.to_json() == raw
    built = Chat(
        id="c2",
        status="waiting",
        workspace_id="w",
        last_error=ChatError(),
        queued_for_capacity=True,
    )
    assert Chat.from_json(built.to_json()) == built
    assert parse_chat_list([raw]) == (chat,)
    with pytest.raises(CoderProtocolError):
        parse_chat_list({"chats": []})
    with pytest.raises(CoderProtocolError):
        Chat.from_json({"status": "waiting"})


def test_queued_message_content_presence_d8() -> None:
    assert ChatQueuedMessage.from_json({"id": 1}).content is None
    assert ChatQueuedMessage.from_json({"id": 1, "content": None}).content is None
    empty = ChatQueuedMessage.from_json({"id": 1, "content": []})
    assert empty.content == () and empty.raw_content == []
    q = ChatQueuedMessage.from_json(
        {
            "id": 2,
            "chat_id": "c",
            "content": [{"type": "text", "text": "hi"}],
            "created_at": "t",
            "model_config_id": "m",
        }
    )
    assert ChatQueuedMessage.from_json(q.to_json()) == q
    assert ChatQueuedMessage(id=3, content=(TextPart("x"),)).to_json()["content"] == [
        {"type": "text", "text": "x"}
    ]


def test_d35_queued_messages_carry_editing_since_and_their_effort() -> None:
    plain = ChatQueuedMessage.from_json({"id": 1, "editing_since": None})
    assert (plain.editing_since, plain.editing, plain.reasoning_effort) == (None, False, None)
    assert "editing_since" not in plain.to_json()
    q = ChatQueuedMessage.from_json(
        {
            "id": 2,
            "content": [{"type": "text", "text": "hi"}],
            "editing_since": "2026-01-01T00:00:00Z",
            "reasoning_effort": "high",
        }
    )
    assert q.editing and q.editing_since == "2026-01-01T00:00:00Z"
    assert q.reasoning_effort == "high"
    assert ChatQueuedMessage.from_json(q.to_json()) == q
    with pytest.raises(CoderProtocolError):
        ChatQueuedMessage.from_json({"id": 3, "editing_since": 5})


def test_d35_paused_is_terminal_and_settled() -> None:
    from coder_proto._constants import SETTLED_STATUSES, STATUS_PAUSED, TERMINAL_STATUSES

    assert STATUS_PAUSED in TERMINAL_STATUSES and STATUS_PAUSED in SETTLED_STATUSES


def test_create_message_response_shapes_wire_3_6() -> None:
    committed = CreateChatMessageResponse.from_json(
        {
            "message": {"id": 5, "role": "user"},
            "queued": False,
            "messages": [{"id": 5, "role": "user"}],
        }
    )
    assert committed.message is not None and committed.message.id == 5 and not committed.queued
    queued = CreateChatMessageResponse.from_json(
        {"queued": True, "queued_message": {"id": 9, "content": []}, "warnings": ["w"]}
    )
    assert (
        queued.queued
        and queued.queued_message is not None
        and queued.queued_message.id == 9
        and queued.warnings == ("w",)
    )
    assert CreateChatMessageResponse.from_json({}) == CreateChatMessageResponse()
    page = ChatMessagesResponse.from_json(
        {"messages": [{"id": 1, "role": "user"}], "queued_messages": [{"id": 1}], "has_more": True}
    )
    assert page.has_more and len(page.messages) == 1 and len(page.queued_messages) == 1
    assert parse_messages({}, "messages", "x") == ()


def test_requests_send_only_set_fields_h1() -> None:
    req = CreateChatRequest(
        organization_id="o",
        content=(
            TextInput("hi"),
            FileInput("f"),
            FileReferenceInput(file_name="a", start_line=1, end_line=2, content="c"),
        ),
    )
    assert req.to_json() == {
        "organization_id": "o",
        "client_type": "api",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "file", "file_id": "f"},
            {
                "type": "file-reference",
                "file_name": "a",
                "start_line": 1,
                "end_line": 2,
                "content": "c",
            },
        ],
    }
    full = CreateChatRequest(
        organization_id="o",
        content=(TextInput("hi"),),
        system_prompt="sys",
        unsafe_dynamic_tools=(
            DynamicTool(name="t", input_schema={"type": "object"}, description="d"),
        ),
        model_config_id="m",
        reasoning_effort="low",
        workspace_id="w",
        mcp_server_ids=("s",),
        plan_mode="plan",
        labels={"k": "v"},
    ).to_json()
    assert full["unsafe_dynamic_tools"] == [
        {"name": "t", "description": "d", "input_schema": {"type": "object"}}
    ]
    assert set(full) == {
        "organization_id",
        "content",
        "client_type",
        "system_prompt",
        "unsafe_dynamic_tools",
        "model_config_id",
        "reasoning_effort",
        "workspace_id",
        "mcp_server_ids",
        "plan_mode",
        "labels",
    }
    msg = CreateChatMessageRequest(
        content=(TextInput("x"),),
        model_config_id="m",
        reasoning_effort="high",
        busy_behavior="interrupt",
        mcp_server_ids=(),
        plan_mode="",
    )
    assert msg.to_json() == {
        "content": [{"type": "text", "text": "x"}],
        "model_config_id": "m",
        "reasoning_effort": "high",
        "busy_behavior": "interrupt",
        "mcp_server_ids": [],
        "plan_mode": "",
    }
    assert CreateChatMessageRequest(content=()).to_json() == {"content": []}
    assert tool_results_body([ToolResultInput(tool_call_id="c", output={"ok": 1})]) == {
        "results": [{"tool_call_id": "c", "output": {"ok": 1}, "is_error": False}]
    }


def test_model_catalog_joins_providers_wire_8() -> None:
    body = {
        "models": [
            {
                "id": "m1",
                "ai_provider_id": "p1",
                "model": "claude-sonnet-4-6",
                "display_name": "Claude",
                "enabled": True,
                "is_default": True,
                "context_limit": 200000,
                "reasoning_efforts": ["low", 3],
            },
            "junk",
            {"id": "m2", "ai_provider_id": "zz", "model": 7},
        ],
        "providers": [
            {
                "id": "p1",
                "type": "anthropic",
                "display_name": "Anthropic",
                "enabled": True,
                "available": True,
                "unavailable_reason": "",
            },
            5,
        ],
    }
    cat = ModelCatalog.from_json(body)
    assert [m.id for m in cat.models] == ["m1", "m2"]
    assert cat.models[0].provider == "anthropic" and cat.models[0].reasoning_efforts == ("low",)
    assert cat.models[1].provider is None and cat.models[1].model is None
    assert cat.providers[0].type == "anthropic"
    assert (
        ModelCatalog.from_json([]) == ModelCatalog()
        and ModelCatalog.from_json({"models": "x"}) == ModelCatalog()
    )
    legacy = ModelCatalog.from_legacy_json([{"id": "m", "model": "gpt", "provider": "openai"}, 1])
    assert legacy.models[0].provider == "openai"
    assert ModelCatalog.from_legacy_json({"x": 1}) == ModelCatalog()


# -- stream events ---------------------------------------------------------------------------


def delta(text: str, seq: Any = 1, **extra: Any) -> dict[str, Any]:
    return {
        "type": "message_part",
        "chat_id": "c1",
        "message_part": {
            "role": "assistant",
            "part": go_part(type="text", text=text),
            "history_version": 7,
            "generation_attempt": 1,
            "seq": seq,
            **extra,
        },
    }


def test_frame_is_an_array_with_trailing_newline_wire_4_2() -> None:
    frame = (
        json.dumps(
            [
                delta("It is ", 1),
                delta("21°C.", 2),
                {"type": "status", "chat_id": "c1", "status": {"status": "running"}},
            ]
        )
        + "\n"
    )
    events = parse_frame(frame)
    assert [type(e) for e in events] == [MessagePartEvent, MessagePartEvent, StatusEvent]
    first = events[0]
    assert (
        isinstance(first, MessagePartEvent)
        and first.part == TextPart("It is ")
        and first.coordinates == (7, 1, 1)
    )
    assert parse_frame(frame.encode()) == events


def test_single_object_frame_and_other_json_values() -> None:
    assert parse_frame('{"type":"preview_reset","chat_id":"c"}') == [PreviewResetEvent("c")]
    assert parse_frame("42") == [] and parse_frame('"x"') == [] and parse_frame("null") == []
    assert parse_frame('[1, "x", null, {"type": "history_reset"}]') == [HistoryResetEvent()]


def test_invalid_json_is_a_protocol_error_c_2_3() -> None:
    with pytest.raises(CoderProtocolError, match="failed to parse chat stream frame"):
        parse_frame("[{")
    with pytest.raises(CoderProtocolError):
        parse_frame(b"\xff\xfe")


@pytest.mark.parametrize(
    ("hv", "ga", "seq"), [(None, 1, 1), (1, "1", 1), (1, 1, True), (1, 1.0, 1)]
)
def test_coordinates_only_when_all_three_are_ints_d14(hv: Any, ga: Any, seq: Any) -> None:
    event = parse_event(
        {
            "type": "message_part",
            "message_part": {
                "role": "assistant",
                "part": {"type": "text", "text": "x"},
                "history_version": hv,
                "generation_attempt": ga,
                "seq": seq,
            },
        }
    )
    assert isinstance(event, MessagePartEvent) and event.coordinates is None


def test_every_event_type_parses_wire_4_3() -> None:
    events = events_from_json(
        [
            {
                "type": "message",
                "chat_id": "c",
                "message": {"id": 43, "role": "assistant", "content": []},
            },
            {"type": "status", "chat_id": "c", "status": {"status": "requires_action"}},
            {
                "type": "action_required",
                "chat_id": "c",
                "action_required": {
                    "tool_calls": [
                        {
                            "tool_call_id": "call_1",
                            "tool_name": "getWeather",
                            "args": '{"city":"Paris"}',
                        },
                        {"tool_call_id": "call_2", "tool_name": "t", "args": {"a": 1.0}},
                        {"tool_call_id": "call_3", "tool_name": "t"},
                    ]
                },
            },
            {"type": "error", "chat_id": "c", "error": {"message": "boom", "retryable": False}},
            {"type": "error", "chat_id": "c"},
            {"type": "queue_update", "chat_id": "c", "queued_messages": [{"id": 1, "content": []}]},
            {"type": "queue_update", "chat_id": "c"},
            {
                "type": "retry",
                "chat_id": "c",
                "retry": {
                    "attempt": 2,
                    "delay_ms": 1500,
                    "error": "overloaded",
                    "kind": "overloaded",
                    "status_code": 529,
                    "provider": "p",
                    "retrying_at": "t",
                },
            },
            {"type": "retry", "chat_id": "c"},
            {"type": "preview_reset", "chat_id": "c"},
            {"type": "history_reset", "chat_id": "c"},
            {"type": "sparkle", "chat_id": "c", "x": 1},
        ]
    )
    assert [e.type for e in events] == [
        "message",
        "status",
        "action_required",
        "error",
        "error",
        "queue_update",
        "queue_update",
        "retry",
        "retry",
        "preview_reset",
        "history_reset",
        "sparkle",
    ]
    action = events[2]
    assert isinstance(action, ActionRequiredEvent)
    assert [c.args for c in action.tool_calls] == ['{"city":"Paris"}', '{"a":1}', "{}"]
    assert (
        isinstance(events[3], ErrorEvent)
        and events[3].error is not None
        and events[4] == ErrorEvent(None, "c")
    )
    assert (
        isinstance(events[5], QueueUpdateEvent)
        and len(events[5].queued_messages) == 1
        and events[6].queued_messages == ()
    )  # type: ignore[union-attr]
    retry = events[7]
    assert isinstance(retry, RetryEvent) and retry.retry.delay == 1.5 and retry.retry.attempt == 2
    assert isinstance(events[11], UnknownEvent) and events[11].raw["x"] == 1
    for event in events:
        assert events_from_json([event.to_json()]) == [event]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "message_part", "message_part": "x"},
        {"type": "message_part", "message_part": {"part": None}},
        {"type": "message", "message": None},
        {"type": "status"},
        {"type": "status", "status": {"status": 1}},
        {"type": "action_required", "action_required": {"tool_calls": [{"tool_name": "t"}]}},
        {"type": "queue_update", "queued_messages": [{"content": []}]},
        {"type": "retry", "retry": {"attempt": "x"}},
    ],
)
def test_structurally_wrong_events_raise_protocol_error(bad: dict[str, Any]) -> None:
    with pytest.raises(CoderProtocolError):
        events_from_json([bad])
    with pytest.raises(CoderProtocolError):
        parse_event("not an object")


def test_legacy_envelopes_are_unwrapped_d13() -> None:
    assert events_from_json({"type": "data", "data": [delta("a"), delta("b", 2)]})[
        1
    ].part == TextPart("b")  # type: ignore[union-attr]
    assert events_from_json({"type": "data", "data": {"type": "preview_reset"}}) == [
        PreviewResetEvent()
    ]
    assert events_from_json(
        [{"type": "ping", "data": None}, {"type": "data", "data": {"type": "history_reset"}}]
    ) == [HistoryResetEvent()]
    err = events_from_json({"type": "error", "data": {"message": "gone"}})
    assert err == [ErrorEvent(ChatError(message="gone"))]
    with pytest.raises(CoderProtocolError):
        events_from_json({"type": "error", "data": {"nope": 1}})
    # An event that happens to carry a data key but also a chat_id is a real event.
    real = events_from_json(
        [{"type": "error", "chat_id": "c", "data": 1, "error": {"message": "m"}}]
    )
    assert real == [ErrorEvent(ChatError(message="m"), "c")]


def test_watch_frames_wire_6() -> None:
    event = {
        "kind": "action_required",
        "chat": {"id": "c1", "status": "requires_action"},
        "tool_calls": [{"tool_call_id": "t", "tool_name": "n", "args": "{}"}],
    }
    (parsed,) = parse_watch_frame(json.dumps(event))
    assert (
        isinstance(parsed, ChatWatchEvent)
        and parsed.kind == "action_required"
        and parsed.chat.id == "c1"
    )
    assert parse_watch_frame(json.dumps([event, 3])) == [parsed]
    assert parse_watch_frame("7") == []
    with pytest.raises(CoderProtocolError):
        parse_watch_frame("{")
    with pytest.raises(CoderProtocolError):
        parse_watch_frame('{"kind": "status_change"}')


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(
        [
            "message_part",
            "message",
            "status",
            "error",
            "queue_update",
            "retry",
            "action_required",
            "preview_reset",
            "history_reset",
            "data",
            "ping",
            "text",
            "tool-call",
        ]
    ),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "chat_id",
                    "message_part",
                    "part",
                    "message",
                    "status",
                    "error",
                    "queued_messages",
                    "retry",
                    "action_required",
                    "tool_calls",
                    "data",
                    "id",
                    "role",
                    "content",
                    "text",
                    "args",
                    "seq",
                    "usage",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(json_values)
def test_arbitrary_json_raises_only_library_errors(value: Any) -> None:
    try:
        events = events_from_json(value)
    except CoderAgentError:
        return
    for event in events:
        event.to_json()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_library_errors(data: bytes) -> None:
    try:
        parse_frame(data)
    except CoderAgentError:
        pass


def test_absurdly_deep_nesting_is_a_protocol_error() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(CoderProtocolError):
        parse_frame(deep)
    with pytest.raises(CoderProtocolError):
        parse_watch_frame(deep)
