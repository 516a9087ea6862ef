"""What the bridge sends, read by the AI SDK's own client code (``ai`` from npm, run with
Node.js): the request body its chat transport posts is the one ``ChatRequest`` reads, and the
response of a tool-loop turn whose stream dropped becomes the expected UI message."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from coder_integrations.ai_sdk import ChatBridge, ChatRequest, ChatRequestError, ChatSession
from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio import CoderAgent, tool
from coder_proto.fake import CallClientTool, CallServerTool, Cite, Fail, Say, Script, Think

from .conftest import AI_SDK_VERSION, RunNode


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


@pytest.fixture
def server(coder_fake: FakeCoder) -> Any:
    """The fake Coder server of the package's own pytest plugin."""
    return coder_fake.server


def make_app(server: Any) -> tuple[FastAPI, ChatBridge]:
    def make_agent(request: ChatRequest, session: ChatSession) -> CoderAgent:
        return CoderAgent(
            base_url=server.url,
            token=server.token,
            organization_id=server.organization_id,
            tools=[get_weather],
            request_timeout=30,
            **session.agent_kwargs(),
        )

    bridge = ChatBridge(make_agent)
    app = FastAPI()

    @app.post("/api/chat")
    async def chat(request: Request) -> Any:
        try:
            return bridge.response(await request.body())
        except ChatRequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return app, bridge


def post(client: TestClient, body: Any) -> dict[str, Any]:
    response = client.post("/api/chat", json=body)
    return {"status": response.status_code, "headers": dict(response.headers),
            "body": response.text}


def test_the_pinned_version_is_recorded() -> None:
    assert AI_SDK_VERSION == "7.0.173"


def test_the_request_body_the_ai_sdk_posts_is_read(ai_sdk_node: RunNode) -> None:
    data = base64.b64encode(b"line one\n").decode()
    body = ai_sdk_node(
        "request",
        {
            "chatId": "ui-chat-7",
            "text": "Summarize the notes.",
            "file": {"mediaType": "text/plain", "filename": "notes.txt",
                     "url": f"data:text/plain;base64,{data}"},
            "body": {"tenant": "acme"},
        },
    )
    request = ChatRequest.from_json(body)
    assert request.id == "ui-chat-7"
    assert request.trigger == "submit-message"
    assert request.body == {"tenant": "acme"}
    text, attachment = request.prompt
    assert text == "Summarize the notes."
    assert attachment.content == b"line one\n"
    assert attachment.media_type == "text/plain"
    assert attachment.filename == "notes.txt"


def test_a_tool_loop_turn_with_a_drop_becomes_the_expected_ui_message(
    server: Any, ai_sdk_node: RunNode
) -> None:
    server.config.scripts.add(
        r"weather",
        Script(
            [
                Think("Checking the forecast."),
                CallServerTool(name="web_search", args={"q": "paris weather"},
                               result={"hits": 1}),
                Cite(url="https://weather.example/paris", title="Paris weather"),
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                Say("It is 21 degrees in Paris.", chunk=4),
            ]
        ),
    )
    server.faults.drop_stream_at("message_part", occurrence=4)
    app, bridge = make_app(server)
    with TestClient(app) as client:
        response = post(client, {"id": "ui-1", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "weather in Paris?"}]}
        ], "trigger": "submit-message"})
    assert response["status"] == 200
    assert response["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    assert response["headers"]["content-type"].startswith("text/event-stream")
    assert response["body"].endswith("data: [DONE]\n\n")

    session = bridge.sessions.get("ui-1")
    assert session is not None and session.chat_id is not None
    assert server.counters.stream_dials[session.chat_id] >= 2  # the drop happened

    read = ai_sdk_node("read", response)
    assert read["errors"] == []
    message = read["message"]
    assert message["role"] == "assistant"
    assert message["id"].startswith("msg-")
    parts = message["parts"]
    assert [p["type"] for p in parts] == [
        "step-start",
        "reasoning",
        "dynamic-tool",
        "source-url",
        "tool-get_weather",
        "step-start",
        "text",
    ]
    reasoning, search, source, weather, text = (parts[i] for i in (1, 2, 3, 4, 6))
    assert reasoning["text"] == "Checking the forecast."
    assert reasoning["state"] == "done"
    assert search["toolName"] == "web_search"
    assert search["state"] == "output-available"
    assert search["providerExecuted"] is True
    assert search["input"] == {"q": "paris weather"}
    assert search["output"] == {"hits": 1}
    assert source["url"] == "https://weather.example/paris"
    assert source["title"] == "Paris weather"
    assert weather["state"] == "output-available"
    assert weather["input"] == {"city": "Paris"}
    assert weather["output"] == {"city": "Paris", "temp_c": 21}
    assert text == {"type": "text", "text": "It is 21 degrees in Paris.", "state": "done"}

    metadata = message["metadata"]
    assert metadata["finishReason"] == "stop"
    assert metadata["steps"] == 2
    assert metadata["usage"]["inputTokens"] > 0
    assert metadata["usage"]["totalTokens"] == (
        metadata["usage"]["inputTokens"] + metadata["usage"]["outputTokens"]
    )
    assert metadata["coder"] == {"chatId": session.chat_id,
                                 "lastSeenMessageId": session.last_seen_message_id}
    assert set(read["chunks"]) >= {
        "start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-end",
        "tool-input-start", "tool-input-available", "tool-output-available", "source-url",
        "finish-step", "text-start", "text-delta", "text-end", "finish",
    }


def test_the_next_request_continues_the_same_chat(server: Any) -> None:
    app, bridge = make_app(server)
    first = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hello"}]}
    second = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "Again"}]}
    with TestClient(app) as client:
        post(client, {"id": "ui-2", "messages": [first]})
        chat_id = bridge.sessions.get("ui-2").chat_id
        post(client, {"id": "ui-2", "messages": [first, {"id": "a1", "role": "assistant",
                                                         "parts": []}, second]})
        post(client, {"id": "ui-other", "messages": [first]})
    assert bridge.sessions.get("ui-2").chat_id == chat_id
    assert bridge.sessions.get("ui-other").chat_id != chat_id
    chat = server.model.chat(chat_id)
    prompts = [p["text"] for m in chat.messages if m.role == "user" for p in m.content
               if p.get("type") == "text"]
    assert prompts == ["Hello", "Again"]
    assert not chat.archived  # the bridge keeps the chat for the next request


def test_a_failed_run_reaches_the_ui_as_an_error(
    server: Any, ai_sdk_node: RunNode
) -> None:
    server.config.scripts.add(r"fail", Script([Say("Partial"), Fail(message="Upstream broke.")]))
    app, bridge = make_app(server)
    with TestClient(app) as client:
        response = post(client, {"id": "ui-3", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "please fail"}]}]})
    read = ai_sdk_node("read", response)
    assert read["errors"] == ["Upstream broke."]
    assert read["message"]["metadata"]["finishReason"] == "error"
    assert "error" in read["chunks"] and read["chunks"][-1] == "finish"
    assert bridge.sessions.get("ui-3").chat_id is not None


def test_a_bad_request_body_is_a_400(server: Any) -> None:
    app, _bridge = make_app(server)
    with TestClient(app) as client:
        response = client.post("/api/chat", json={"id": "x", "messages": []})
    assert response.status_code == 400
    assert "no user message" in response.json()["error"]


def test_every_chunk_the_bridge_sends_passes_the_ai_sdk_schema(ai_sdk_node: RunNode) -> None:
    """One message with every chunk type the mapping produces, parsed by the AI SDK's own
    reader (its schema rejects a malformed chunk as a stream error)."""
    from coder_integrations.ai_sdk import (
        SSE_DONE,
        UI_MESSAGE_STREAM_HEADERS,
        UIMessageStreamEncoder,
        encode_sse,
    )
    from coder_proto import (
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

    from .test_encoder import ChatError

    parts = [
        StreamStart(),
        ReasoningStart("reasoning-1"), ReasoningDelta("reasoning-1", "Hmm."),
        ReasoningEnd("reasoning-1"),
        ToolInputStart(tool_call_id="s1", tool_name="search", provider_executed=True,
                       dynamic=True),
        ToolInputEnd(tool_call_id="s1"),
        ToolCall(tool_call_id="s1", tool_name="search", input='{"q":"x"}',
                 provider_executed=True, dynamic=True),
        ToolResult(tool_call_id="s1", tool_name="search", result="quota", is_error=True),
        Source(id="src-1", url="https://docs.example/a", title="A"),
        Source(id="src-2", url="https://docs.example/b"),
        ToolInputStart(tool_call_id="c1", tool_name="broken"),
        ToolCall(tool_call_id="c1", tool_name="broken", input="{not json"),
        ToolInputStart(tool_call_id="c2", tool_name="lookup"),
        ToolCall(tool_call_id="c2", tool_name="lookup", input='{"k":1}'),
        Finish(finish_reason="tool-calls", usage=Usage(input_tokens=5, output_tokens=2)),
        ToolResult(tool_call_id="c2", tool_name="lookup", result="no such key", is_error=True,
                   dynamic=False),
        StreamStart(),
        TextStart("text-1"), TextDelta("text-1", "Sorry."), TextEnd("text-1"),
        ErrorPart(error=ChatError(message="The provider gave up.")),
        Finish(finish_reason="error", usage=Usage(input_tokens=7, output_tokens=1)),
    ]
    encoder = UIMessageStreamEncoder(message_id="msg-all")
    chunks = [*encoder.start({"startedBy": "test"}), *encoder.metadata({"coder": {"x": 1}})]
    for part in parts:
        chunks.extend(encoder.feed(part))
    chunks.extend(encoder.finish())
    body = b"".join(encode_sse(c) for c in chunks) + SSE_DONE
    read = ai_sdk_node(
        "read",
        {"status": 200, "headers": dict(UI_MESSAGE_STREAM_HEADERS), "body": body.decode()},
    )
    assert read["chunks"] == [c["type"] for c in chunks]
    assert read["errors"] == ["The provider gave up."]
    message = read["message"]
    assert message["id"] == "msg-all"
    assert message["metadata"]["startedBy"] == "test"
    assert message["metadata"]["coder"] == {"x": 1}
    assert message["metadata"]["finishReason"] == "error"
    assert message["metadata"]["usage"]["inputTokens"] == 12
    by_type: dict[str, list[dict[str, Any]]] = {}
    for part in message["parts"]:
        by_type.setdefault(part["type"], []).append(part)
    [search] = by_type["dynamic-tool"]
    assert search["state"] == "output-error" and search["errorText"] == "quota"
    [broken] = by_type["tool-broken"]
    assert broken["state"] == "output-error"
    assert broken["input"] == "{not json"
    [lookup] = by_type["tool-lookup"]
    assert lookup["state"] == "output-error" and lookup["errorText"] == "no such key"
    assert [s.get("title") for s in by_type["source-url"]] == ["A", None]
    assert by_type["text"][0]["text"] == "Sorry."
    assert by_type["reasoning"][0]["text"] == "Hmm."
    assert len(by_type["step-start"]) == 2
