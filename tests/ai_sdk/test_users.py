"""The bridge behind a web route, over loopback against the fake Coder server: each chat
bound to the user the ``authorize`` hook names, chats continued from the messages' metadata
after a restart, the resume route, and the answers to requests that cannot run."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, HTTPException, Request

from coder_integrations.ai_sdk import (
    OWNER_LABEL,
    SSE_DONE,
    ChatBridge,
    ChatNotFoundError,
    ChatRequest,
    ChatSession,
    ChatUnauthorizedError,
    MemorySessionMap,
    owner_label_value,
)
from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio import CoderAgent
from coder_proto import CoderAgentError, CoderApiError
from coder_proto.fake import Say, Script, Wait

UNKNOWN_CHAT = "0b7e4d8a-3f0c-4a55-9d7e-1c2b3a4d5e6f"


def user_message(text: str, id: str = "u1", metadata: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}
    if metadata is not None:
        message["metadata"] = metadata
    return message


def chunks_of(body: bytes) -> list[dict[str, Any]]:
    assert body.endswith(SSE_DONE)
    events = body[: -len(SSE_DONE)].decode().split("\n\n")
    assert events[-1] == ""
    return [json.loads(event.removeprefix("data: ")) for event in events[:-1]]


class Served:
    """An app on the bridge, served on loopback by uvicorn in a thread."""

    def __init__(self, bridge: ChatBridge) -> None:
        self.bridge = bridge
        app = FastAPI()

        @app.post("/api/chat")
        async def chat(request: Request) -> Any:
            return await bridge.handle(request)

        @app.get("/api/chat/{chat_id}/stream")
        async def resume(request: Request, chat_id: str) -> Any:
            return await bridge.handle_resume(request, chat_id)

        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        for _ in range(1000):
            if self.server.started:
                break
            self.thread.join(0.01)
        assert self.server.started, "the app did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def header_user(request: Request) -> str:
    """The test's sign-in: the ``x-user`` header (a real app reads its session)."""
    user = request.headers.get("x-user")
    if user is None:
        raise HTTPException(401, "sign in first")
    return user


@pytest.fixture
def fake(coder_fake: FakeCoder) -> Any:
    server = coder_fake.server
    server.config.scripts.add(r"slow", Script([Say("First words."), Wait(30), Say("never")]))
    return server


@pytest.fixture
def make_bridge(fake: Any) -> Callable[..., ChatBridge]:
    def make(*, blocking: bool = False, **kwargs: Any) -> ChatBridge:
        """A bridge whose agents talk to ``fake``: asyncio ones, or blocking ones."""
        import coder_io_sync

        agent_class = coder_io_sync.CoderAgent if blocking else CoderAgent

        def make_agent(request: ChatRequest, session: ChatSession) -> Any:
            return agent_class(
                base_url=fake.url,
                token=fake.token,
                organization_id=fake.organization_id,
                **session.agent_kwargs(),
            )

        return ChatBridge(make_agent, **kwargs)

    return make


def chat_prompts(fake: Any, chat_id: str) -> Any:
    """The chat's prompts as Coder lists them, newest first."""
    import coder_io_sync

    with coder_io_sync.CoderChatClient(fake.url, fake.token) as client:
        return client.get_chat_prompts(chat_id)


def post(client: httpx.Client, url: str, user: str | None, body: Any) -> httpx.Response:
    headers = {} if user is None else {"x-user": user}
    return client.post(f"{url}/api/chat", json=body, headers=headers)


def test_each_chat_belongs_to_the_user_who_made_it(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    sessions = MemorySessionMap()
    bridge = make_bridge(authorize=header_user, sessions=sessions)
    with Served(bridge) as url, httpx.Client(timeout=30) as client:
        answer = post(client, url, "alice", {"id": "a1", "messages": [user_message("hello")]})
        assert answer.status_code == 200
        finish = chunks_of(answer.content)[-1]
        [chat] = fake.model.chats.values()
        assert finish["messageMetadata"]["coder"]["chatId"] == chat.id
        # The session records the owner and which Coder message the UI's "u1" became.
        [prompt] = chat_prompts(fake, chat.id)
        assert sessions.get("a1") == ChatSession(
            chat.id,
            finish["messageMetadata"]["coder"]["lastSeenMessageId"],
            "alice",
            {"u1": prompt.id},
        )
        assert chat.labels == {OWNER_LABEL: owner_label_value("alice")}
        assert "alice" not in json.dumps(chat.labels)
        # Alice's next message goes on in her chat.
        again = post(
            client,
            url,
            "alice",
            {"id": "a1", "messages": [user_message("hello"), user_message("again", "u2")]},
        )
        assert again.status_code == 200
        assert len(fake.model.chats) == 1
        # Bob reaches none of it, whichever way he names it, and learns nothing: his
        # answer for Alice's chat is the one for a chat that does not exist.
        denied = [
            post(client, url, "bob", {"id": "a1", "messages": [user_message("mine?")]}),
            post(
                client,
                url,
                "bob",
                {
                    "id": "b1",
                    "messages": [user_message("mine?", metadata={"coder": {"chatId": chat.id}})],
                },
            ),
            post(
                client,
                url,
                "bob",
                {
                    "id": "b2",
                    "messages": [
                        user_message("mine?", metadata={"coder": {"chatId": UNKNOWN_CHAT}})
                    ],
                },
            ),
            post(
                client,
                url,
                "bob",
                {
                    "id": "b3",
                    "messages": [
                        user_message("mine?", metadata={"coder": {"chatId": "not-a-uuid"}})
                    ],
                },
            ),
        ]
        assert [(r.status_code, r.text) for r in denied] == [(404, "chat not found")] * 4
        assert len(fake.model.chats) == 1
        # Without a signed-in user the hook's own 401 answers.
        assert (
            post(client, url, None, {"id": "a1", "messages": [user_message("x")]}).status_code
            == 401
        )


def test_a_chat_the_backend_forgot_continues_for_its_owner_only(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    first = make_bridge(authorize=header_user)
    with Served(first) as url, httpx.Client(timeout=30) as client:
        answer = post(client, url, "alice", {"id": "a1", "messages": [user_message("hello")]})
        metadata = chunks_of(answer.content)[-1]["messageMetadata"]
    [chat] = fake.model.chats.values()
    # The backend restarts: a new bridge with an empty session map.
    restarted = make_bridge(authorize=header_user)
    history = [
        user_message("hello"),
        {"id": "m1", "role": "assistant", "parts": [], "metadata": metadata},
    ]
    with Served(restarted) as url, httpx.Client(timeout=30) as client:
        stranger = post(
            client, url, "bob", {"id": "a1", "messages": [*history, user_message("and now?", "u2")]}
        )
        assert (stranger.status_code, stranger.text) == (404, "chat not found")
        answer = post(
            client,
            url,
            "alice",
            {"id": "a1", "messages": [*history, user_message("and now?", "u2")]},
        )
        assert answer.status_code == 200
        assert chunks_of(answer.content)[-1]["messageMetadata"]["coder"]["chatId"] == chat.id
        assert len(fake.model.chats) == 1
        session = restarted.sessions.get("a1")
        assert session is not None
        newest = chat_prompts(fake, chat.id)[0]
        assert session == ChatSession(
            chat.id, session.last_seen_message_id, "alice", {"u2": newest.id}
        )


def test_without_a_hook_one_user_continues_any_chat_of_the_token(
    fake: Any, make_bridge: Callable[..., ChatBridge], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coder_integrations.ai_sdk")
    with Served(make_bridge()) as url, httpx.Client(timeout=30) as client:
        answer = post(client, url, None, {"id": "s1", "messages": [user_message("hello")]})
        metadata = chunks_of(answer.content)[-1]["messageMetadata"]
        [chat] = fake.model.chats.values()
        assert chat.labels == {}
        again = post(
            client, url, None, {"id": "s2", "messages": [user_message("more", metadata=metadata)]}
        )
        assert chunks_of(again.content)[-1]["messageMetadata"]["coder"]["chatId"] == chat.id
        gone = post(
            client,
            url,
            None,
            {
                "id": "s3",
                "messages": [user_message("more", metadata={"coder": {"chatId": UNKNOWN_CHAT}})],
            },
        )
        assert (gone.status_code, gone.text) == (404, "chat not found")
    said = [r.getMessage() for r in caplog.records if "no authorize hook" in r.getMessage()]
    assert len(said) == 1


def test_requests_that_cannot_run_answer_in_plain_text(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    with Served(make_bridge(authorize=lambda request: "")) as url, httpx.Client() as client:
        refused = post(client, url, None, {"id": "x", "messages": [user_message("hi")]})
        assert (refused.status_code, refused.text) == (401, "the request names no signed-in user")
        resume = client.get(f"{url}/api/chat/x/stream")
        assert (resume.status_code, resume.text) == (401, "the request names no signed-in user")
    with Served(make_bridge(authorize=header_user)) as url, httpx.Client() as client:
        bad = post(client, url, "alice", {"id": "x", "messages": []})
        assert bad.status_code == 400
        assert bad.headers["content-type"].startswith("text/plain")
        assert bad.text == "the chat request has no user message to send"
        odd = post(
            client,
            url,
            "alice",
            {"id": "x", "messages": [user_message("hi", metadata={"coder": {"chatId": 7}})]},
        )
        assert (odd.status_code, odd.text) == (
            400,
            "metadata.coder must be an object with a string chatId",
        )
        cursor = post(
            client,
            url,
            "alice",
            {
                "id": "x",
                "messages": [
                    user_message(
                        "hi", metadata={"coder": {"chatId": UNKNOWN_CHAT, "lastSeenMessageId": "3"}}
                    )
                ],
            },
        )
        assert cursor.status_code == 400
        fake.faults.fail_requests("get_chat", 503, message="Try again later.")
        down = post(
            client,
            url,
            "alice",
            {
                "id": "x",
                "messages": [user_message("hi", metadata={"coder": {"chatId": UNKNOWN_CHAT}})],
            },
        )
        assert (down.status_code, down.text) == (502, "Try again later.")
    assert fake.token not in bad.text + down.text


def test_a_coder_error_before_any_content_is_a_readable_error_and_logged(
    fake: Any, make_bridge: Callable[..., ChatBridge], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coder_integrations.ai_sdk")
    fake.faults.fail_requests("create_chat", 400, message="Model config is disabled.")
    with Served(make_bridge(authorize=header_user)) as url, httpx.Client(timeout=30) as client:
        answer = post(client, url, "alice", {"id": "e1", "messages": [user_message("hi")]})
    chunks = chunks_of(answer.content)
    assert [c["type"] for c in chunks] == ["start", "error", "finish"]
    assert chunks[1]["errorText"] == "Model config is disabled."
    [logged] = [r for r in caplog.records if "chat turn failed" in r.getMessage()]
    assert "Model config is disabled." in logged.getMessage()
    assert "'e1'" in logged.getMessage()
    assert fake.token not in caplog.text


def test_an_error_of_the_run_is_logged_with_its_chat(
    fake: Any, make_bridge: Callable[..., ChatBridge], caplog: pytest.LogCaptureFixture
) -> None:
    from coder_proto.fake import Fail

    caplog.set_level(logging.WARNING, logger="coder_integrations.ai_sdk")
    fake.config.scripts.add(r"break", Script([Fail(message="The provider failed.")]))
    with Served(make_bridge(authorize=header_user)) as url, httpx.Client(timeout=30) as client:
        answer = post(client, url, "alice", {"id": "e2", "messages": [user_message("break")]})
    chunks = chunks_of(answer.content)
    assert "start-step" not in [c["type"] for c in chunks]
    assert [c["errorText"] for c in chunks if c["type"] == "error"] == ["The provider failed."]
    [chat] = fake.model.chats.values()
    [logged] = [r for r in caplog.records if "chat turn failed" in r.getMessage()]
    assert chat.id in logged.getMessage()


def read_until(chunks: Iterator[bytes], marker: bytes) -> bytes:
    """Read until ``marker`` came, leaving the response open (closing the iterator would
    close the connection)."""
    received = b""
    while marker not in received:
        received += next(chunks)
    return received


def test_the_resume_route_follows_the_turn_in_flight(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    bridge = make_bridge(authorize=header_user)
    body = {"id": "r1", "messages": [user_message("slow please")]}
    alice = {"x-user": "alice"}
    with Served(bridge) as url, httpx.Client(timeout=30) as client:
        # The page asks on every load, also before its chat ever ran: nothing runs.
        assert client.get(f"{url}/api/chat/r1/stream", headers=alice).status_code == 204
        with client.stream("POST", f"{url}/api/chat", json=body, headers=alice) as turn:
            answer = turn.iter_bytes()  # kept: a dropped iterator closes the connection
            read_until(answer, b"words.")
            # Another user learns nothing: for him no turn runs there, and posting is refused
            # even while the chat's first turn has not yet recorded it.
            bob = client.get(f"{url}/api/chat/r1/stream", headers={"x-user": "bob"})
            assert (bob.status_code, bob.content) == (204, b"")
            bob_posts = post(client, url, "bob", body)
            assert (bob_posts.status_code, bob_posts.text) == (404, "chat not found")
            with client.stream("GET", f"{url}/api/chat/r1/stream", headers=alice) as resumed:
                assert resumed.status_code == 200
                assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
                replay = resumed.iter_bytes()
                replayed = read_until(replay, b"words.")
            assert replayed.startswith(b'data: {"type":"start"')
            assert chunks_of(replayed + SSE_DONE)[-2:] == [
                {"type": "text-delta", "id": "text-1", "delta": "First "},
                {"type": "text-delta", "id": "text-1", "delta": "words."},
            ]
        # The POST was left: the run is interrupted and the turn is over.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and bridge.sessions.get("r1") is None:
            time.sleep(0.01)
        idle = client.get(f"{url}/api/chat/r1/stream", headers=alice)
        assert idle.status_code == 204


def test_the_blocking_path_binds_users_continues_and_resumes(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    bridge = make_bridge(blocking=True, authorize=lambda request: request["user"])
    alice = bridge.user_of_sync({"user": "alice"})
    frames = list(bridge.stream_sync({"id": "a1", "messages": [user_message("hello")]}, user=alice))
    metadata = chunks_of(b"".join(frames))[-1]["messageMetadata"]
    [chat] = fake.model.chats.values()
    assert chat.labels == {OWNER_LABEL: owner_label_value("alice")}
    assert bridge.resume_sync("a1", user="alice") is None
    with pytest.raises(ChatNotFoundError):
        list(bridge.stream_sync({"id": "a1", "messages": [user_message("x")]}, user="bob"))
    # After a restart: continued for Alice from the metadata, not found for Bob.
    restarted = make_bridge(blocking=True, authorize=lambda request: request["user"])
    moved = {"id": "a2", "messages": [user_message("more", metadata=metadata)]}
    with pytest.raises(ChatNotFoundError):
        restarted.open_stream_sync(moved, user="bob")
    with pytest.raises(ChatNotFoundError):
        restarted.open_stream_sync(
            {
                "id": "a3",
                "messages": [user_message("more", metadata={"coder": {"chatId": UNKNOWN_CHAT}})],
            },
            user="alice",
        )
    fake.faults.fail_requests("get_chat", 503)
    with pytest.raises(CoderApiError):
        restarted.open_stream_sync(moved, user="alice")
    turn = restarted.open_stream_sync(moved, user="alice")
    first = next(turn)
    assert restarted.resume_sync("a2", user="bob") is None
    # While the turn runs, a resumed reader replays it from its start and follows it.
    replay = restarted.resume_sync("a2", user="alice")
    assert replay is not None
    rest = b"".join(turn)
    assert b"".join(replay) == first + rest
    assert chunks_of(first + rest)[-1]["messageMetadata"]["coder"]["chatId"] == chat.id
    assert len(fake.model.chats) == 1
    # The hook must name a user, and the blocking path needs a plain one.
    with pytest.raises(ChatUnauthorizedError):
        bridge.user_of_sync({"user": None})

    async def later(request: Any) -> str:
        return "alice"

    with pytest.raises(CoderAgentError, match="plain authorize"):
        make_bridge(blocking=True, authorize=later).user_of_sync({})
    assert make_bridge(blocking=True).user_of_sync({}) is None


def test_a_chat_that_cannot_be_labelled_still_belongs_to_its_user(
    fake: Any, make_bridge: Callable[..., ChatBridge], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coder_integrations.ai_sdk")
    fake.faults.fail_requests("update_chat", 500, times=2)
    bridge = make_bridge(authorize=header_user)
    with Served(bridge) as url, httpx.Client(timeout=30) as client:
        answer = post(client, url, "alice", {"id": "a1", "messages": [user_message("hello")]})
        assert chunks_of(answer.content)[-1]["finishReason"] == "stop"
        denied = post(client, url, "bob", {"id": "a1", "messages": [user_message("x")]})
        assert denied.status_code == 404

    blocking = make_bridge(blocking=True)
    list(blocking.stream_sync({"id": "b1", "messages": [user_message("hello")]}, user="alice"))
    assert blocking.sessions.get("b1").owner == "alice"
    assert all(chat.labels == {} for chat in fake.model.chats.values())
    unlabelled = [r for r in caplog.records if "could not be labelled" in r.getMessage()]
    assert len(unlabelled) == 2


def test_two_turns_of_one_chat_at_once_keep_the_later_one_resumable(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    bridge = make_bridge(blocking=True)
    body = {"id": "c1", "messages": [user_message("hello")]}
    first = bridge.open_stream_sync(body)
    next(first)
    second = bridge.open_stream_sync(body)
    head = next(second)
    b"".join(first)
    replay = bridge.resume_sync("c1")
    assert replay is not None
    rest = b"".join(second)
    assert b"".join(replay) == head + rest
    assert bridge.resume_sync("c1") is None
    response = bridge.response_sync(body)
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"


def test_a_resumed_reader_on_asyncio_follows_the_turn_to_its_end(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    import asyncio

    bridge = make_bridge()

    async def main() -> tuple[bytes, bytes]:
        turn = bridge.stream({"id": "q1", "messages": [user_message("hello")]})
        head = await turn.__anext__()
        replay = await bridge.resume("q1")
        assert replay is not None

        async def drain(frames: Any) -> bytes:
            return b"".join([frame async for frame in frames])

        rest, replayed = await asyncio.gather(drain(turn), drain(replay))
        assert await bridge.resume("q1") is None
        return head + rest, replayed

    whole, replayed = asyncio.run(main())
    assert replayed == whole
    assert chunks_of(whole)[-1]["finishReason"] == "stop"


def test_the_blocking_path_refuses_any_awaitable_hook() -> None:
    class Later:
        def __await__(self) -> Any:
            yield from ()
            return "alice"

    bridge = ChatBridge(lambda request, session: None, authorize=lambda request: Later())
    with pytest.raises(CoderAgentError, match="plain authorize"):
        bridge.user_of_sync({})


# -- regenerate and edit --------------------------------------------------------------------------


def assistant(text: str, id: str, metadata: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": id,
        "role": "assistant",
        "parts": [{"type": "text", "text": text}],
    }
    if metadata is not None:
        message["metadata"] = metadata
    return message


def answer_text(body: bytes) -> str:
    return "".join(c["delta"] for c in chunks_of(body) if c["type"] == "text-delta")


def test_regenerate_and_edit_replace_the_coder_message(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    bridge = make_bridge(authorize=header_user)
    with Served(bridge) as url, httpx.Client(timeout=30) as client:
        first = post(client, url, "alice", {"id": "c1", "messages": [user_message("ping")]})
        assert answer_text(first.content) == "You said: ping"
        [chat] = fake.model.chats.values()
        history = [
            user_message("ping"),
            assistant("You said: ping", "a1"),
            user_message("more", "u2"),
        ]
        post(client, url, "alice", {"id": "c1", "messages": history})
        assert [p.text for p in chat_prompts(fake, chat.id)] == ["more", "ping"]
        # Regenerate the last answer: useChat drops it and resends up to the user message.
        again = post(
            client,
            url,
            "alice",
            {"id": "c1", "messages": history, "trigger": "regenerate-message", "messageId": "a2"},
        )
        assert answer_text(again.content) == "You said: more"
        assert [p.text for p in chat_prompts(fake, chat.id)] == ["more", "ping"]
        # Edit the first message: useChat resends it, rewritten, with its own id.
        edited = post(
            client,
            url,
            "alice",
            {"id": "c1", "messageId": "u1", "messages": [user_message("ping again")]},
        )
        assert answer_text(edited.content) == "You said: ping again"
        assert [p.text for p in chat_prompts(fake, chat.id)] == ["ping again"]
        # The edited message is recorded again: a regenerate of it edits it once more.
        post(
            client,
            url,
            "alice",
            {"id": "c1", "trigger": "regenerate-message", "messages": [user_message("ping again")]},
        )
        assert [p.text for p in chat_prompts(fake, chat.id)] == ["ping again"]
        # An edit of a message the backend never sent is refused in words.
        unknown = post(
            client,
            url,
            "alice",
            {
                "id": "c1",
                "messageId": "u9",
                "messages": [
                    user_message("ping again"),
                    assistant("You said: ping again", "a3"),
                    user_message("what?", "u9"),
                ],
            },
        )
        [error] = [c for c in chunks_of(unknown.content) if c["type"] == "error"]
        assert error["errorText"] == (
            "the edited message is not one this backend sent: send it as a new message"
        )
        assert [p.text for p in chat_prompts(fake, chat.id)] == ["ping again"]
    assert len(fake.model.chats) == 1


def test_a_regenerate_after_a_restart_replaces_the_newest_prompt(
    fake: Any, make_bridge: Callable[..., ChatBridge], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="coder_integrations.ai_sdk")
    with Served(make_bridge(authorize=header_user)) as url, httpx.Client(timeout=30) as client:
        # Reading the prompt back fails: the turn is fine, only the record is missing.
        fake.faults.fail_requests("get_chat_prompts", 500)
        first = post(client, url, "alice", {"id": "c1", "messages": [user_message("ping")]})
        metadata = chunks_of(first.content)[-1]["messageMetadata"]
    assert any("could not be read back" in r.getMessage() for r in caplog.records)
    [chat] = fake.model.chats.values()
    restarted = make_bridge(authorize=header_user)
    with Served(restarted) as url, httpx.Client(timeout=30) as client:
        again = post(
            client,
            url,
            "alice",
            {
                "id": "c1",
                "trigger": "regenerate-message",
                "messages": [user_message("ping", metadata=metadata)],
            },
        )
        assert answer_text(again.content) == "You said: ping"
    [prompt] = chat_prompts(fake, chat.id)
    assert prompt.text == "ping"
    assert restarted.sessions.get("c1").message_ids == {"u1": prompt.id}


def test_the_blocking_path_regenerates_and_edits_too(
    fake: Any, make_bridge: Callable[..., ChatBridge]
) -> None:
    bridge = make_bridge(blocking=True)
    list(bridge.stream_sync({"id": "c1", "messages": [user_message("ping")]}))
    [chat] = fake.model.chats.values()
    again = b"".join(
        bridge.stream_sync(
            {"id": "c1", "trigger": "regenerate-message", "messages": [user_message("ping")]}
        )
    )
    assert answer_text(again) == "You said: ping"
    edited = b"".join(
        bridge.stream_sync({"id": "c1", "messageId": "u1", "messages": [user_message("pong")]})
    )
    assert answer_text(edited) == "You said: pong"
    assert [p.text for p in chat_prompts(fake, chat.id)] == ["pong"]
    # Without a record (a fresh bridge) a regenerate replaces the newest prompt.
    fresh = make_bridge(blocking=True)
    fresh.sessions.put("c1", ChatSession(chat.id, None))
    b"".join(
        fresh.stream_sync(
            {"id": "c1", "trigger": "regenerate-message", "messages": [user_message("pong")]}
        )
    )
    assert [p.text for p in chat_prompts(fake, chat.id)] == ["pong"]
    fake.faults.fail_requests("get_chat_prompts", 500)
    list(
        fresh.stream_sync({"id": "c1", "messages": [user_message("pong"), user_message("x", "u2")]})
    )
    assert fresh.sessions.get("c1").message_ids == {"u1": chat_prompts(fake, chat.id)[1].id}
