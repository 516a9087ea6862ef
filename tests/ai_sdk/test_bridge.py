"""The chat bridge on every runtime, the request body's checks and the session map."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

import coder_io_sync
import coder_io_trio
from coder_integrations.ai_sdk import (
    SSE_DONE,
    ChatBridge,
    ChatRequest,
    ChatRequestError,
    ChatSession,
    MemorySessionMap,
    SessionMap,
)
from coder_integrations.pytest_plugin import FakeCoder
from coder_proto import CoderAgentError
from coder_proto.fake import CallClientTool, Say, Script


def lookup(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 19}


def user(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


def chunks_of(frames: list[bytes]) -> list[dict[str, Any]]:
    assert frames[-1] == SSE_DONE
    body = b"".join(frames[:-1]).decode()
    events = body.split("\n\n")
    assert events[-1] == ""
    out = []
    for event in events[:-1]:
        assert event.startswith("data: ")
        out.append(json.loads(event[len("data: ") :]))
    return out


@pytest.fixture
def server(coder_fake: FakeCoder) -> Any:
    """The fake Coder server of the package's own pytest plugin, scripted for a tool loop."""
    fake = coder_fake.server
    fake.config.scripts.add(
        r"weather",
        Script([CallClientTool(name="lookup", args={"city": "Oslo"}),
                Say("Oslo has {tool_result}.")]),
    )
    return fake


def check_turn(chunks: list[dict[str, Any]], server: Any) -> None:
    types = [c["type"] for c in chunks]
    assert types[0] == "start" and types[-1] == "finish"
    assert types.count("start-step") == 2 and types.count("finish-step") == 2
    [call] = [c for c in chunks if c["type"] == "tool-input-available"]
    assert call["toolName"] == "lookup" and call["input"] == {"city": "Oslo"}
    [output] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert output["toolCallId"] == call["toolCallId"]
    assert output["output"] == {"city": "Oslo", "temp_c": 19}
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text == 'Oslo has {"city":"Oslo","temp_c":19}.'
    assert chunks[-1]["finishReason"] == "stop"


def test_blocking_bridge(server: Any) -> None:
    closed: list[Any] = []

    def make_agent(request: ChatRequest, session: ChatSession) -> Any:
        agent = coder_io_sync.CoderAgent(
            base_url=server.url, token=server.token, organization_id=server.organization_id,
            tools=[lookup], **session.agent_kwargs(),
        )
        closed.append(agent)
        return agent

    bridge = ChatBridge(make_agent)
    frames = list(bridge.stream_sync({"id": "s1", "messages": [user("weather?")]}))
    check_turn(chunks_of(frames), server)
    session = bridge.sessions.get("s1")
    assert session.chat_id == closed[0].chat_id
    assert not server.model.chat(session.chat_id).archived
    # The next request resumes from the stored cursor.
    list(bridge.stream_sync({"id": "s1", "messages": [user("weather?"), user("more", "u2")]}))
    assert closed[1].chat_id == session.chat_id
    assert bridge.sessions.get("s1").last_seen_message_id > session.last_seen_message_id


def test_trio_bridge_with_an_async_session_map(server: Any) -> None:
    class AsyncSessions:
        def __init__(self) -> None:
            self.rows: dict[str, ChatSession] = {}

        async def get(self, ui_chat_id: str) -> ChatSession | None:
            await trio.sleep(0)
            return self.rows.get(ui_chat_id)

        async def put(self, ui_chat_id: str, session: ChatSession) -> None:
            await trio.sleep(0)
            self.rows[ui_chat_id] = session

    sessions = AsyncSessions()
    assert isinstance(sessions, SessionMap)

    def make_agent(request: ChatRequest, session: ChatSession) -> Any:
        return coder_io_trio.CoderAgent(
            base_url=server.url, token=server.token, organization_id=server.organization_id,
            tools=[lookup], **session.agent_kwargs(),
        )

    bridge = ChatBridge(make_agent, sessions=sessions)

    async def main() -> list[bytes]:
        return [frame async for frame in bridge.stream({"id": "t1", "messages": [user("weather")]})]

    check_turn(chunks_of(trio.run(main)), server)
    assert sessions.rows["t1"].chat_id is not None


def test_message_metadata_hook_and_error_text(server: Any) -> None:
    def make_agent(request: ChatRequest, session: ChatSession) -> Any:
        return coder_io_sync.CoderAgent(
            base_url=server.url, token="wrong-token", organization_id=server.organization_id,
            **session.agent_kwargs(),
        )

    bridge = ChatBridge(
        make_agent,
        message_metadata=lambda request, session: {"tenant": request.body["tenant"]},
        on_error=lambda exc: f"{type(exc).__name__}",
    )
    chunks = chunks_of(list(bridge.stream_sync(
        {"id": "e1", "messages": [user("hi")], "tenant": "acme"}
    )))
    types = [c["type"] for c in chunks]
    assert types[0] == "start" and types[-2:] == ["error", "finish"]
    assert not {"text-start", "tool-input-available"} & set(types)
    assert chunks[-2]["errorText"] == "CoderApiError"
    assert chunks[-1]["messageMetadata"]["tenant"] == "acme"
    assert chunks[-1]["finishReason"] == "error"
    assert "wrong-token" not in json.dumps(chunks)
    # No chat was created: the session stays empty.
    assert bridge.sessions.get("e1") == ChatSession()


def test_stream_sync_refuses_an_async_session_map() -> None:
    class AsyncSessions:
        async def get(self, ui_chat_id: str) -> None:
            return None

        async def put(self, ui_chat_id: str, session: ChatSession) -> None:
            return None

    bridge = ChatBridge(lambda request, session: None, sessions=AsyncSessions())
    with pytest.raises(Exception, match="plain methods"):
        list(bridge.stream_sync({"id": "x", "messages": [user("hi")]}))


# -- the request body ------------------------------------------------------------------------------


def test_request_reads_the_last_user_message() -> None:
    request = ChatRequest.from_json({
        "id": "c", "trigger": "regenerate-message", "messageId": "a1",
        "messages": [user("first"), {"id": "a", "role": "assistant", "parts": []},
                     {"id": "u2", "role": "user", "parts": [
                         {"type": "text", "text": "second"},
                         {"type": "step-start"},
                         {"type": "text", "text": ""},
                         {"type": "file", "mediaType": "text/plain",
                          "url": "data:text/plain,a%20b"}]}],
    })
    assert request.trigger == "regenerate-message"
    assert request.message_id == "a1"
    text, attachment = request.prompt
    assert text == "second"
    assert attachment.content == b"a b"
    assert len(request.messages) == 3
    # A regenerate replaces the last user message; so does a message sent with its own id.
    assert (request.user_message_id, request.replaces) == ("u2", "u2")
    edit = ChatRequest.from_json({"id": "c", "messageId": "u1", "messages": [user("x")]})
    assert edit.replaces == "u1"
    new = ChatRequest.from_json({"id": "c", "messageId": "a1", "messages": [user("x")]})
    assert (new.user_message_id, new.replaces) == ("u1", None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "JSON object"),
        ({"messages": []}, "non-empty string id"),
        ({"id": "c"}, "messages"),
        ({"id": "c", "messages": [1]}, "messages"),
        ({"id": "c", "messages": [user("x")], "trigger": "resume"}, "unknown trigger"),
        ({"id": "c", "messages": [user("x")], "messageId": 3}, "messageId"),
        ({"id": "c", "messages": [{"role": "assistant", "parts": []}]}, "no user message"),
        ({"id": "c", "messages": [{"role": "user"}]}, "list of parts"),
        ({"id": "c", "messages": [{"id": 7, "role": "user", "parts": [
            {"type": "text", "text": "x"}]}]}, "message id must be a string"),
        ({"id": "c", "messages": [{"role": "user", "parts": ["x"]}]}, "must be an object"),
        ({"id": "c", "messages": [{"role": "user", "parts": [{"type": "text"}]}]}, "string text"),
        ({"id": "c", "messages": [{"role": "user", "parts": []}]}, "no text or file"),
        ({"id": "c", "messages": [{"role": "user", "parts": [
            {"type": "file", "mediaType": "image/png", "url": "https://e.x/a.png"}]}]},
         "data: URL"),
        ({"id": "c", "messages": [{"role": "user", "parts": [
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,@@"}]}]},
         "malformed"),
        ({"id": "c", "messages": [{"role": "user", "parts": [{"type": "file"}]}]},
         "url and mediaType"),
        ({"id": "c", "messages": [{"role": "user", "parts": [
            {"type": "file", "mediaType": "application/zip", "url": "data:application/zip,PK"}]}]},
         "cannot be attached"),
    ],
)
def test_request_errors(body: Any, message: str) -> None:
    with pytest.raises(ChatRequestError, match=message):
        ChatRequest.from_json(body)


def test_bridge_parse_accepts_bytes_and_text() -> None:
    bridge = ChatBridge(lambda request, session: None)
    body = {"id": "c", "messages": [user("hi")]}
    assert bridge.parse(json.dumps(body).encode()).prompt == ("hi",)
    assert bridge.parse(json.dumps(body)).id == "c"
    with pytest.raises(ChatRequestError, match="not JSON"):
        bridge.parse(b"{")


def test_memory_session_map() -> None:
    sessions = MemorySessionMap()
    assert isinstance(sessions, SessionMap)
    assert sessions.get("a") is None
    sessions.put("a", ChatSession("chat-1", 4))
    assert sessions.get("a") == ChatSession("chat-1", 4)
    assert len(sessions) == 1
    assert ChatSession("chat-1", 4).agent_kwargs() == {
        "chat_id": "chat-1", "last_seen_message_id": 4
    }
    assert ChatSession().agent_kwargs() == {"chat_id": None, "last_seen_message_id": None}


class RefusingAgent:
    """An agent whose stream cannot even start (a prompt it refuses)."""

    chat_id = None
    last_seen_message_id = None

    def __init__(self) -> None:
        self.closed: list[bool] = []

    def stream(self, prompt: Any) -> Any:
        agent = self

        class Refused:
            def __enter__(self) -> Any:
                raise CoderAgentError("the prompt was refused")

            def __exit__(self, *exc: Any) -> None:
                raise AssertionError("never entered")

            async def __aenter__(self) -> Any:
                return self.__enter__()

            async def __aexit__(self, *exc: Any) -> None:
                raise AssertionError("never entered")

        del agent
        return Refused()

    def close(self, *, archive: bool = True) -> None:
        self.closed.append(archive)

    async def aclose(self, *, archive: bool = True) -> None:
        self.closed.append(archive)


def test_a_stream_that_cannot_start_is_an_error_chunk_on_both_paths() -> None:
    body = {"id": "r1", "messages": [user("hi")]}
    agents: list[RefusingAgent] = []

    def make_agent(request: ChatRequest, session: ChatSession) -> RefusingAgent:
        agents.append(RefusingAgent())
        return agents[-1]

    bridge = ChatBridge(make_agent)
    sync_chunks = chunks_of(list(bridge.stream_sync(body)))

    async def collect() -> list[bytes]:
        return [frame async for frame in bridge.stream(body)]

    async_chunks = chunks_of(trio.run(collect))
    for chunks in (sync_chunks, async_chunks):
        assert [c["type"] for c in chunks] == ["start", "error", "finish"]
        assert chunks[1]["errorText"] == "the prompt was refused"
    assert [a.closed for a in agents] == [[False], [False]]
