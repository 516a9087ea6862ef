"""A browser that goes away mid-answer: the response is cancelled, the run is interrupted on
the server, and the chat stays mapped for the next request."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from coder_integrations.ai_sdk import ChatBridge, ChatRequest, ChatSession
from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio import CoderAgent
from coder_proto.fake import Say, Script, Wait


@pytest.fixture
def served(coder_fake: FakeCoder) -> Iterator[tuple[str, ChatBridge, Any]]:
    fake = coder_fake.server  # the fake of the package's own pytest plugin
    fake.config.scripts.add(r"slow", Script([Say("First words."), Wait(30), Say("never")]))

    def make_agent(request: ChatRequest, session: ChatSession) -> Any:
        return CoderAgent(base_url=fake.url, token=fake.token,
                          organization_id=fake.organization_id, **session.agent_kwargs())

    bridge = ChatBridge(make_agent)
    app = FastAPI()

    @app.post("/api/chat")
    async def chat(request: Request) -> Any:
        return bridge.response(await request.body())

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(1000):
            if server.started:
                break
            thread.join(0.01)
        assert server.started, "the app did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}", bridge, fake
    finally:
        server.should_exit = True
        thread.join(10)


def test_leaving_mid_answer_interrupts_the_run(
    served: tuple[str, ChatBridge, Any],
) -> None:
    url, bridge, fake = served
    body = {"id": "gone", "messages": [
        {"id": "u", "role": "user", "parts": [{"type": "text", "text": "slow please"}]}]}
    with httpx.Client(timeout=30) as client, client.stream(
        "POST", f"{url}/api/chat", json=body
    ) as response:
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        received = b""
        for data in response.iter_bytes():
            received += data
            if b'"words."' in received:
                break
    assert b"never" not in received
    deadline = time.monotonic() + 10
    interrupts: list[Any] = []
    while time.monotonic() < deadline and not interrupts:
        interrupts = [r for r in fake.counters.request_log if r.op == "interrupt_chat"]
        time.sleep(0.01)
    assert interrupts, "leaving the response did not interrupt the run"
    while time.monotonic() < deadline and bridge.sessions.get("gone") is None:
        time.sleep(0.01)
    [chat] = fake.model.chats.values()
    assert bridge.sessions.get("gone").chat_id == chat.id
    assert not chat.archived
