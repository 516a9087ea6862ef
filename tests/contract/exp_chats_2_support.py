"""Helpers of the contract cases restated from the second range of the server's
``coderd/exp_chats_test.go`` (``test_exp_chats_2a.py`` and ``test_exp_chats_2b.py``): chats
brought into the states the server's tests seed (settled, running for the whole case, failed,
failed with a queue), uploads, and reading the stream and watch sockets."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from coder_integrations.fake_server import FakeCoderServer
from coder_proto._constants import MAX_ATTACHMENTS_PER_CHAT
from coder_proto.fake import Script
from coder_proto.fake._script import Fail, Wait

from ..fake.netclients import SyncWs
from .conftest import CHATS, Contract

PNG = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) + bytes(64)
SETTLED = {"waiting", "error", "requires_action"}
HOLD = "hold the run"
FAIL = "fail the turn"
SLOW_FAIL = "slowly fail the turn"


WORKSPACE = "5f0b3f8e-2a8c-4c55-9a53-0c6f3d2a1b10"
MCP = "0c8f5a8e-1b7d-4e2a-9f3c-6d5e4c3b2a10"


@contextlib.contextmanager
def known_contract() -> Iterator[Contract]:
    """A served fake where one workspace and one MCP server exist."""
    with FakeCoderServer(
        chunk_delay=0, workspace_ids=(WORKSPACE,), mcp_server_ids=(MCP,)
    ) as served:
        headers = {"Coder-Session-Token": served.token}
        with httpx.Client(base_url=served.url, headers=headers, timeout=30) as http:
            yield Contract(served, http)


def add_scripts(server: FakeCoderServer) -> FakeCoderServer:
    """The served fake with three scripted prompts: one whose run never ends during a test,
    one whose turn fails at once and one whose turn fails after a short while."""
    server.config.scripts.add(HOLD, Script((Wait(60.0),)))
    server.config.scripts.add(SLOW_FAIL, Script((Wait(0.3), Fail(message="boom"))))
    server.config.scripts.add(FAIL, Script((Fail(message="context overflow"),)))
    return server


# -- helpers ---------------------------------------------------------------------------------------


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def chat_of(api: Contract, chat_id: str) -> dict[str, Any]:
    answer = api.request("GET", f"{CHATS}/{chat_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def wait_for(api: Contract, chat_id: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 10.0
    while True:
        chat = chat_of(api, chat_id)
        if done(chat):
            return chat
        assert time.monotonic() < deadline, f"chat stayed {chat['status']}"
        time.sleep(0.01)


def settle(api: Contract, chat_id: str) -> dict[str, Any]:
    return wait_for(api, chat_id, lambda c: c["status"] in SETTLED)


def settled_chat(api: Contract, prompt: str = "hello", **fields: Any) -> dict[str, Any]:
    chat = api.create_chat(prompt, **fields)
    return settle(api, chat["id"])


def messages(api: Contract, chat_id: str) -> dict[str, Any]:
    answer = api.request("GET", f"{CHATS}/{chat_id}/messages")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def first_user_message_id(api: Contract, chat_id: str) -> int:
    return int(next(m["id"] for m in messages(api, chat_id)["messages"] if m["role"] == "user"))


def send(api: Contract, chat_id: str, body: dict[str, Any]) -> httpx.Response:
    return api.request("POST", f"{CHATS}/{chat_id}/messages", body)


def patch(api: Contract, chat_id: str, body: dict[str, Any]) -> httpx.Response:
    return api.request("PATCH", f"{CHATS}/{chat_id}", body)


def edit(api: Contract, chat_id: str, message_id: Any, body: dict[str, Any]) -> httpx.Response:
    return api.request("PATCH", f"{CHATS}/{chat_id}/messages/{message_id}", body)


def model_ids(api: Contract) -> dict[str, str]:
    """The model configuration ids by model name (the default model first)."""
    answer = api.request("GET", f"/api/v2/organizations/{api.server.organization_id}/chats/models")
    assert answer.status_code == 200, answer.text
    return {m["model"]: m["id"] for m in answer.json()["models"]}


def default_and_other_model(api: Contract) -> tuple[str, str]:
    ids = model_ids(api)
    return ids["claude-sonnet-4-6"], ids["gpt-5"]


def upload(
    api: Contract,
    data: bytes,
    content_type: str = "image/png",
    name: str = "test.png",
    *,
    organization: str | None = None,
) -> httpx.Response:
    org = api.server.organization_id if organization is None else organization
    headers = {"Content-Type": content_type}
    if name:
        headers["Content-Disposition"] = f'attachment; filename="{name}"'
    return api.http.post(
        f"{CHATS}/files", params={"organization": org}, content=data, headers=headers
    )


def uploaded_id(
    api: Contract, data: bytes = PNG, content_type: str = "image/png", name: str = "test.png"
) -> str:
    answer = upload(api, data, content_type, name)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]  # type: ignore[no-any-return]


def held_chat(api: Contract, **fields: Any) -> dict[str, Any]:
    """A chat whose run is in progress for the whole test."""
    chat = api.create_chat(HOLD, **fields)
    return wait_for(api, chat["id"], lambda c: c["status"] == "running")


def queue(api: Contract, chat_id: str, value: str, **fields: Any) -> dict[str, Any]:
    answer = send(api, chat_id, {"content": text(value), "busy_behavior": "queue", **fields})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["queued"] is True, body
    return body  # type: ignore[no-any-return]


def errored_chat_with_queue(
    api: Contract, queued_text: str = "queued follow-up", **fields: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A chat in the error state with one queued message (the server's E1)."""
    chat = api.create_chat(SLOW_FAIL)
    queued = queue(api, chat["id"], queued_text, **fields)["queued_message"]
    return settle(api, chat["id"]), queued


def errored_chat(api: Contract) -> dict[str, Any]:
    """A chat with a user and an assistant message whose next turn failed."""
    chat = settled_chat(api, "question")
    assert send(api, chat["id"], {"content": text(FAIL)}).status_code == 200
    return wait_for(api, chat["id"], lambda c: c["status"] == "error")


def error_of(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return answer.json()  # type: ignore[no-any-return]


def has_text(parts: list[dict[str, Any]], want: str) -> bool:
    return any(p.get("type") == "text" and p.get("text") == want for p in parts)


def stream_events(
    server: FakeCoderServer, target: str, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    with SyncWs(server, target) as ws:
        raw = ws.wait(lambda r: done(_events(r.frames)))
        return _events(raw.frames)


def _events(frames: list[bytes]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for frame in frames:
        value = json.loads(frame)
        out.extend(value if isinstance(value, list) else [value])
    return out


def watch_event(ws: SyncWs, kind: str, chat_id: str) -> dict[str, Any]:
    def found(frames: list[bytes]) -> dict[str, Any] | None:
        for event in _events(frames):
            if event.get("kind") == kind and event.get("chat", {}).get("id") == chat_id:
                return event
        return None

    ws.wait(lambda r: found(r.frames) is not None)
    event = found(ws.raw.frames)
    assert event is not None
    return event


#: How many files a chat keeps linked (the server's default cap).
DEFAULT_ATTACHMENT_CAP = MAX_ATTACHMENTS_PER_CHAT


def upload_many(api: Contract, count: int, prefix: str) -> list[str]:
    """``count`` distinct PNG uploads."""
    return [
        uploaded_id(api, PNG + bytes([n % 256]), name=f"{prefix}-{n}.png") for n in range(count)
    ]


def file_parts(ids: list[str], label: str) -> list[dict[str, Any]]:
    """A text part, then a file part for each of ``ids``."""
    return [{"type": "text", "text": label}, *({"type": "file", "file_id": f} for f in ids)]
