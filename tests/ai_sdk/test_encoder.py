"""The mapping of output parts to UI message stream chunks, part type by part type."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from coder_integrations.ai_sdk import (
    SSE_DONE,
    UI_MESSAGE_STREAM_HEADERS,
    UIMessageStreamEncoder,
    encode_sse,
    sse_stream_sync,
    ui_message_chunks,
    ui_message_chunks_sync,
    usage_metadata,
)
from coder_proto import (
    ChatError,
    CoderAgentError,
    CoderStreamError,
    ErrorPart,
    Finish,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Source,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputEnd,
    ToolInputStart,
    ToolResult,
    Usage,
)


def started(**kwargs: Any) -> UIMessageStreamEncoder:
    """An encoder inside its first round trip, whose step was opened by a first source."""
    encoder = UIMessageStreamEncoder(**kwargs)
    encoder.start()
    encoder.feed(StreamStart())
    assert encoder.feed(Source(id="first", url="https://e.x/")) == [
        {"type": "start-step"},
        {"type": "source-url", "sourceId": "first", "url": "https://e.x/"},
    ]
    return encoder


def test_start_carries_message_id_and_metadata() -> None:
    encoder = UIMessageStreamEncoder(message_id="msg-1")
    assert encoder.start({"a": 1}) == [
        {"type": "start", "messageId": "msg-1", "messageMetadata": {"a": 1}}
    ]
    with pytest.raises(CoderAgentError):
        encoder.start()
    assert UIMessageStreamEncoder().start() == [{"type": "start"}]


def test_a_round_trip_opens_its_step_with_its_first_content_and_finish_closes_it() -> None:
    encoder = UIMessageStreamEncoder()
    encoder.start()
    assert encoder.feed(StreamStart()) == []
    assert encoder.feed(TextDelta("text-1", "a")) == [
        {"type": "start-step"},
        {"type": "text-delta", "id": "text-1", "delta": "a"},
    ]
    assert encoder.feed(Finish(finish_reason="tool-calls")) == [{"type": "finish-step"}]
    assert encoder.feed(StreamStart()) == []
    assert encoder.feed(TextDelta("text-1", "b"))[0] == {"type": "start-step"}
    assert encoder.steps == 2


def test_a_round_trip_that_shows_nothing_sends_no_empty_step() -> None:
    encoder = UIMessageStreamEncoder()
    encoder.start()
    assert encoder.feed(StreamStart()) == []
    part = ErrorPart(error=ChatError(message="The provider failed.", kind="generic"))
    assert encoder.feed(part) == [{"type": "error", "errorText": "The provider failed."}]
    assert encoder.feed(Finish(finish_reason="error")) == []
    assert [c["type"] for c in encoder.finish()] == ["finish"]
    assert encoder.steps == 0
    failed = UIMessageStreamEncoder()
    failed.start()
    failed.feed(StreamStart())
    assert failed.error("lost") == [{"type": "error", "errorText": "lost"}]
    assert [c["type"] for c in failed.finish()] == ["finish"]


def test_text_block() -> None:
    encoder = started()
    assert encoder.feed(TextStart("text-1")) == [{"type": "text-start", "id": "text-1"}]
    assert encoder.feed(TextDelta("text-1", "Hel")) == [
        {"type": "text-delta", "id": "text-1", "delta": "Hel"}
    ]
    assert encoder.feed(TextEnd("text-1")) == [{"type": "text-end", "id": "text-1"}]


def test_reasoning_block() -> None:
    encoder = started()
    assert encoder.feed(ReasoningStart("reasoning-1")) == [
        {"type": "reasoning-start", "id": "reasoning-1"}
    ]
    assert encoder.feed(ReasoningDelta("reasoning-1", "hmm")) == [
        {"type": "reasoning-delta", "id": "reasoning-1", "delta": "hmm"}
    ]
    assert encoder.feed(ReasoningEnd("reasoning-1")) == [
        {"type": "reasoning-end", "id": "reasoning-1"}
    ]


def test_block_ids_of_later_steps_are_distinct() -> None:
    encoder = started()
    first = encoder.feed(TextStart("text-1"))[0]["id"]
    encoder.feed(TextEnd("text-1"))
    encoder.feed(Finish(finish_reason="tool-calls"))
    encoder.feed(StreamStart())
    second = encoder.feed(TextStart("text-1"))[-1]["id"]
    assert encoder.feed(TextDelta("text-1", "x"))[0]["id"] == second
    assert first != second


def test_client_tool_call_and_its_outcome() -> None:
    encoder = started()
    assert encoder.feed(ToolInputStart(tool_call_id="c1", tool_name="get_weather")) == [
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "get_weather"}
    ]
    assert encoder.feed(ToolInputEnd(tool_call_id="c1")) == []
    assert encoder.feed(
        ToolCall(tool_call_id="c1", tool_name="get_weather", input='{"city":"Paris"}')
    ) == [
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "get_weather",
            "input": {"city": "Paris"},
        }
    ]
    encoder.feed(Finish(finish_reason="tool-calls"))
    # The outcome arrives between the steps and belongs to none.
    assert encoder.feed(
        ToolResult(tool_call_id="c1", tool_name="get_weather", result={"t": 21}, dynamic=False)
    ) == [{"type": "tool-output-available", "toolCallId": "c1", "output": {"t": 21}}]


def test_client_tool_error_outcome() -> None:
    encoder = started()
    encoder.feed(ToolCall(tool_call_id="c1", tool_name="f", input="{}"))
    assert encoder.feed(
        ToolResult(tool_call_id="c1", tool_name="f", result="boom", is_error=True, dynamic=False)
    ) == [{"type": "tool-output-error", "toolCallId": "c1", "errorText": "boom"}]
    encoder.feed(ToolCall(tool_call_id="c2", tool_name="f", input="{}"))
    [chunk] = encoder.feed(
        ToolResult(
            tool_call_id="c2", tool_name="f", result={"error": "no city"}, is_error=True,
            dynamic=False,
        )
    )
    assert chunk["errorText"] == "no city"
    encoder.feed(ToolCall(tool_call_id="c3", tool_name="f", input="{}"))
    [chunk] = encoder.feed(
        ToolResult(tool_call_id="c3", tool_name="f", result=[1], is_error=True, dynamic=False)
    )
    assert chunk["errorText"] == "[1]"


def test_server_tool_is_provider_executed_and_dynamic() -> None:
    encoder = started()
    start = ToolInputStart(
        tool_call_id="s1", tool_name="web_search", provider_executed=True, dynamic=True
    )
    assert encoder.feed(start) == [
        {
            "type": "tool-input-start",
            "toolCallId": "s1",
            "toolName": "web_search",
            "providerExecuted": True,
            "dynamic": True,
        }
    ]
    call = ToolCall(
        tool_call_id="s1", tool_name="web_search", input='{"q":"x"}', provider_executed=True,
        dynamic=True,
    )
    assert encoder.feed(call) == [
        {
            "type": "tool-input-available",
            "toolCallId": "s1",
            "toolName": "web_search",
            "input": {"q": "x"},
            "providerExecuted": True,
            "dynamic": True,
        }
    ]
    assert encoder.feed(ToolResult(tool_call_id="s1", tool_name="web_search", result=[1])) == [
        {
            "type": "tool-output-available",
            "toolCallId": "s1",
            "output": [1],
            "providerExecuted": True,
            "dynamic": True,
        }
    ]
    encoder.feed(ToolCall(tool_call_id="s2", tool_name="w", input="{}", provider_executed=True))
    assert encoder.feed(
        ToolResult(tool_call_id="s2", tool_name="w", result="denied", is_error=True)
    ) == [
        {
            "type": "tool-output-error",
            "toolCallId": "s2",
            "errorText": "denied",
            "providerExecuted": True,
            "dynamic": True,
        }
    ]


def test_tool_input_that_is_not_json_is_an_input_error() -> None:
    encoder = started()
    [chunk] = encoder.feed(ToolCall(tool_call_id="c1", tool_name="f", input="{city"))
    assert chunk["type"] == "tool-input-error"
    assert chunk["toolCallId"] == "c1"
    assert chunk["toolName"] == "f"
    assert chunk["input"] == "{city"
    assert "not valid JSON" in chunk["errorText"]
    [empty] = encoder.feed(ToolCall(tool_call_id="c2", tool_name="f", input=""))
    assert empty["type"] == "tool-input-available"
    assert empty["input"] == {}


def test_source() -> None:
    encoder = started()
    assert encoder.feed(Source(id="s", url="https://e.x/a", title="A")) == [
        {"type": "source-url", "sourceId": "s", "url": "https://e.x/a", "title": "A"}
    ]
    assert encoder.feed(Source(id="t", url="https://e.x/b")) == [
        {"type": "source-url", "sourceId": "t", "url": "https://e.x/b"}
    ]


def test_error_part() -> None:
    encoder = started()
    part = ErrorPart(error=ChatError(message="The provider failed.", kind="generic"))
    assert encoder.feed(part) == [{"type": "error", "errorText": "The provider failed."}]
    encoder.feed(Finish(finish_reason="error"))
    assert encoder.finish()[-1]["finishReason"] == "error"


def test_finish_sums_usage_into_message_metadata() -> None:
    encoder = started()
    encoder.feed(
        Finish(
            finish_reason="tool-calls",
            usage=Usage(input_tokens=10, no_cache_tokens=8, cache_read_tokens=2, output_tokens=3),
        )
    )
    encoder.feed(StreamStart())
    encoder.feed(TextDelta("text-1", "ok"))
    encoder.feed(
        Finish(
            finish_reason="stop",
            usage=Usage(input_tokens=20, no_cache_tokens=20, output_tokens=4, reasoning_tokens=1),
        )
    )
    chunks = encoder.finish({"coder": {"chatId": "c"}})
    assert chunks == [
        {
            "type": "finish",
            "finishReason": "stop",
            "messageMetadata": {
                "finishReason": "stop",
                "steps": 2,
                "usage": {
                    "inputTokens": 30,
                    "inputTokenDetails": {"noCacheTokens": 28, "cacheReadTokens": 2},
                    "outputTokens": 7,
                    "outputTokenDetails": {"reasoningTokens": 1},
                    "totalTokens": 37,
                },
                "coder": {"chatId": "c"},
            },
        }
    ]
    assert encoder.finish() == []
    with pytest.raises(CoderAgentError):
        encoder.feed(TextStart("text-9"))


def test_finish_closes_an_open_step_and_maps_unknown_reasons() -> None:
    encoder = started()
    encoder.feed(Finish(finish_reason="tool-calls"))
    encoder.feed(StreamStart())
    encoder.feed(TextDelta("text-1", "cut short"))
    chunks = encoder.finish()
    assert [c["type"] for c in chunks] == ["finish-step", "finish"]
    assert chunks[-1]["finishReason"] == "tool-calls"
    odd = started()
    odd.feed(Finish(finish_reason="something-new"))
    assert odd.finish()[-1]["finishReason"] == "other"


def test_usage_metadata_leaves_unknown_counts_out() -> None:
    assert usage_metadata(None) == {}
    assert usage_metadata(Usage()) == {}
    assert usage_metadata(Usage(output_tokens=2, text_tokens=2)) == {
        "outputTokens": 2,
        "outputTokenDetails": {"textTokens": 2},
    }


def test_metadata_chunk() -> None:
    assert UIMessageStreamEncoder().metadata({"k": 1}) == [
        {"type": "message-metadata", "messageMetadata": {"k": 1}}
    ]


def test_parts_before_a_stream_start_still_sit_in_a_step() -> None:
    encoder = UIMessageStreamEncoder()
    encoder.start()
    assert encoder.feed(TextStart("text-1")) == [
        {"type": "start-step"},
        {"type": "text-start", "id": "text-1"},
    ]


def test_not_a_part() -> None:
    encoder = UIMessageStreamEncoder()
    encoder.start()
    with pytest.raises(TypeError):
        encoder.feed({"type": "text-delta"})


# -- SSE ----------------------------------------------------------------------------------------


def test_sse_framing() -> None:
    assert encode_sse({"type": "text-delta", "id": "t", "delta": "é\n"}) == (
        b'data: {"type":"text-delta","id":"t","delta":"\\u00e9\\n"}\n\n'
    )
    assert SSE_DONE == b"data: [DONE]\n\n"
    assert list(sse_stream_sync([{"type": "start"}])) == [b'data: {"type":"start"}\n\n', SSE_DONE]
    assert UI_MESSAGE_STREAM_HEADERS["x-vercel-ai-ui-message-stream"] == "v1"
    assert UI_MESSAGE_STREAM_HEADERS["content-type"] == "text/event-stream"


def test_sse_survives_values_json_cannot_hold() -> None:
    frame = encode_sse({"type": "tool-output-available", "output": {"x": float("nan"), "y": "\ud800"}})
    assert json.loads(frame[len(b"data: ") :]) == {
        "type": "tool-output-available",
        "output": {"x": None, "y": "\ud800"},
    }
    frame = encode_sse({"output": {1, 2} and object()})
    assert frame.startswith(b'data: {"output":"<object object')


# -- running over a stream ----------------------------------------------------------------------

TURN = [
    StreamStart(),
    TextStart("text-1"),
    TextDelta("text-1", "Hi"),
    TextEnd("text-1"),
    Finish(finish_reason="stop", usage=Usage(input_tokens=1, output_tokens=1)),
]


def test_chunks_of_a_whole_turn_sync() -> None:
    chunks = list(ui_message_chunks_sync(TURN, message_id="m", finish_metadata=lambda: {"x": 1}))
    assert [c["type"] for c in chunks] == [
        "start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish",
    ]
    assert chunks[0] == {"type": "start", "messageId": "m"}
    assert chunks[-1]["messageMetadata"]["x"] == 1


def test_chunks_of_a_whole_turn_async() -> None:
    async def parts() -> Any:
        for part in TURN:
            yield part

    async def collect() -> list[dict[str, Any]]:
        return [c async for c in ui_message_chunks(parts())]

    chunks = asyncio.run(collect())
    assert chunks == list(ui_message_chunks_sync(TURN))


def failing(exc: BaseException) -> Any:
    yield StreamStart()
    yield TextStart("text-1")
    raise exc


def test_a_library_failure_becomes_an_error_chunk_and_a_finish() -> None:
    chunks = list(ui_message_chunks_sync(failing(CoderStreamError("the stream was lost"))))
    assert [c["type"] for c in chunks] == ["start", "start-step", "text-start", "finish-step",
                                           "error", "finish"]
    assert chunks[-2]["errorText"] == "the stream was lost"
    assert chunks[-1]["finishReason"] == "error"


def test_an_unexpected_failure_shows_a_generic_text_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="coder_integrations.ai_sdk"):
        chunks = list(ui_message_chunks_sync(failing(RuntimeError("secret internals"))))
    assert chunks[-2] == {"type": "error", "errorText": "An error occurred."}
    assert "secret internals" not in json.dumps(chunks)
    assert any("secret internals" in (r.exc_text or "") or r.exc_info for r in caplog.records)
    custom = list(ui_message_chunks_sync(failing(RuntimeError("x")), on_error=lambda e: f"E:{e}"))
    assert custom[-2]["errorText"] == "E:x"


def test_cancellation_is_not_turned_into_a_chunk() -> None:
    with pytest.raises(KeyboardInterrupt):
        list(ui_message_chunks_sync(failing(KeyboardInterrupt())))
