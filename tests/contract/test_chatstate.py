"""Contract cases from the server's ``coderd/exp_chats_chatstate_test.go``: the chat state
machine as the endpoints show it.

The server's tests stop its chat worker and move chats between states by hand. Here the
fake's scripted model holds them there instead: a turn that waits keeps a chat ``running``,
a turn that ends leaves it ``waiting``, a client tool call leaves it in ``requires_action``.

Top-level server tests: 18 (one with 2 subtests); 15 restated (16 cases), 3 not restated.

Not restated:

- TestPostChatMessagesInvalidStateReturnsSharedResponse: needs a chat forced into an invalid
  state (waiting with a queue) by a database write; the fake never holds one.
- TestPostChatToolResultsInvalidStateReturnsSharedResponse: the same invalid-state fixture.
- TestReconcileInvalidChatStateSucceeds: the same invalid-state fixture.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, Say, Script, Wait

from .conftest import CHATS, Contract

#: A prompt whose turn does not end while a test runs: the chat stays ``running``.
BUSY = "stay busy"
#: A prompt whose turn calls the client tool ``echo``: the chat waits in ``requires_action``.
TOOL = "call echo"


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    # A long interrupt wind-down, so that a chat seen ``interrupting`` stays so.
    with FakeCoderServer(chunk_delay=0, interrupt_delay=60.0) as served:
        served.config.scripts.add(BUSY, Script((Wait(60.0),)))
        served.config.scripts.add(TOOL, Script((Say("dispatching"), CallClientTool(name="echo"))))
        yield served


def _chat(api: Contract, chat_id: str) -> dict[str, Any]:
    answer = api.request("GET", f"{CHATS}/{chat_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _settle(api: Contract, chat_id: str, status: str) -> dict[str, Any]:
    """The chat once its status is ``status`` (the fake's worker gets it there)."""
    deadline = time.monotonic() + 10
    while True:
        chat = _chat(api, chat_id)
        if chat["status"] == status or time.monotonic() > deadline:
            assert chat["status"] == status, chat
            return chat
        time.sleep(0.01)


def _idle_chat(api: Contract, text: str = "hello") -> dict[str, Any]:
    """A chat whose first turn has ended: ``waiting``."""
    chat = api.create_chat(text)
    return _settle(api, chat["id"], "waiting")


def _queue_send(api: Contract, chat_id: str, text: str, behaviour: str) -> dict[str, Any]:
    body = {"content": [{"type": "text", "text": text}], "busy_behavior": behaviour}
    answer = api.request("POST", f"{CHATS}/{chat_id}/messages", body)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _archive(api: Contract, chat_id: str, archived: bool = True) -> int:
    return api.request("PATCH", f"{CHATS}/{chat_id}", {"archived": archived}).status_code


def test_post_chats_starts_running(api: Contract) -> None:
    """TestPostChatsStartsRunning: a new chat is ``running``, and reads back so."""
    chat = api.create_chat(BUSY)
    assert chat["status"] == "running"
    assert _chat(api, chat["id"])["status"] == "running"


def test_archive_chat_state_transitions__idle_succeeds(api: Contract) -> None:
    """TestArchiveChatStateTransitions/IdleSucceeds: a waiting chat can be archived."""
    chat = _idle_chat(api, "archive me")
    assert _archive(api, chat["id"]) == 204
    assert _chat(api, chat["id"])["archived"] is True


def test_archive_chat_state_transitions__active_chat_returns_conflict(api: Contract) -> None:
    """TestArchiveChatStateTransitions/ActiveChatReturnsConflict: archiving a running chat is
    a 409 and leaves it unarchived."""
    chat = api.create_chat(f"{BUSY}: no archive")
    assert _archive(api, chat["id"]) == 409
    assert _chat(api, chat["id"])["archived"] is False


def test_post_chat_messages_busy_interrupt(api: Contract) -> None:
    """TestPostChatMessagesBusyInterrupt: a send with ``busy_behavior: interrupt`` to a
    running chat is queued and leaves the chat ``interrupting``."""
    chat = api.create_chat(BUSY)
    assert chat["status"] == "running"
    sent = _queue_send(api, chat["id"], "stop", "interrupt")
    assert sent["queued"] is True
    assert sent["queued_message"] is not None
    assert _chat(api, chat["id"])["status"] == "interrupting"


def test_delete_chat_queued_message_missing_returns404(api: Contract) -> None:
    """TestDeleteChatQueuedMessageMissingReturns404: with a queued message, deleting an id
    that is not queued is a 404."""
    chat = api.create_chat(BUSY)
    _queue_send(api, chat["id"], "queued", "queue")
    answer = api.request("DELETE", f"{CHATS}/{chat['id']}/queue/99999999")
    assert answer.status_code == 404, answer.text


def test_delete_chat_queued_message_empty_queue_returns_conflict(api: Contract) -> None:
    """TestDeleteChatQueuedMessageEmptyQueueReturnsConflict: deleting from an empty queue is
    a 409."""
    chat = api.create_chat(BUSY)
    answer = api.request("DELETE", f"{CHATS}/{chat['id']}/queue/99999999")
    assert answer.status_code == 409, answer.text


def test_promote_chat_queued_message_missing_returns404(api: Contract) -> None:
    """TestPromoteChatQueuedMessageMissingReturns404: with a queued message, promoting an id
    that is not queued is a 404."""
    chat = api.create_chat(BUSY)
    _queue_send(api, chat["id"], "queued", "queue")
    answer = api.request("POST", f"{CHATS}/{chat['id']}/queue/99999999/promote")
    assert answer.status_code == 404, answer.text


def test_promote_chat_queued_message_empty_queue_returns_conflict(api: Contract) -> None:
    """TestPromoteChatQueuedMessageEmptyQueueReturnsConflict: promoting from an empty queue
    is a 409."""
    chat = api.create_chat(BUSY)
    answer = api.request("POST", f"{CHATS}/{chat['id']}/queue/99999999/promote")
    assert answer.status_code == 409, answer.text


def test_interrupt_chat_idle_returns_conflict(api: Contract) -> None:
    """TestInterruptChatIdleReturnsConflict: interrupting a waiting chat is a 409."""
    chat = _idle_chat(api, "interrupt me")
    answer = api.request("POST", f"{CHATS}/{chat['id']}/interrupt")
    assert answer.status_code == 409, answer.text


def test_submit_tool_results_wrong_state_returns_conflict(api: Contract) -> None:
    """TestSubmitToolResultsWrongStateReturnsConflict: tool results for a running chat are a
    409."""
    chat = api.create_chat(BUSY)
    assert chat["status"] == "running"
    body = {"results": [{"tool_call_id": "unknown-call", "output": {}}]}
    answer = api.request("POST", f"{CHATS}/{chat['id']}/tool-results", body)
    assert answer.status_code == 409, answer.text


def test_submit_tool_results_requires_action_succeeds(api: Contract) -> None:
    """TestSubmitToolResultsRequiresActionSucceeds: the result of the pending dynamic tool
    call is a 204, and the chat's history then shows it in a ``tool`` message."""
    tools = [{"name": "echo", "description": "test echo tool", "input_schema": {"type": "object"}}]
    chat = api.create_chat(TOOL, unsafe_dynamic_tools=tools)
    _settle(api, chat["id"], "requires_action")
    history = api.request("GET", f"{CHATS}/{chat['id']}/messages").json()["messages"]
    calls = [
        part["tool_call_id"]
        for message in history
        for part in message.get("content") or []
        if part["type"] == "tool-call"
    ]
    assert len(calls) == 1, history
    body = {"results": [{"tool_call_id": calls[0], "output": {"ok": True}}]}
    answer = api.request("POST", f"{CHATS}/{chat['id']}/tool-results", body)
    assert answer.status_code == 204, answer.text
    history = api.request("GET", f"{CHATS}/{chat['id']}/messages").json()["messages"]
    assert any(
        part["type"] == "tool-result" and part.get("tool_call_id") == calls[0]
        for message in history
        if message["role"] == "tool"
        for part in message.get("content") or []
    ), history


def _family(api: Contract, server: FakeCoderServer) -> tuple[str, str, str]:
    """A waiting root chat with two waiting sub-agent chats."""
    root = _idle_chat(api, "root")
    children = []
    for name in ("child-a", "child-b"):
        child = server.model.spawn_child(root["id"], name, time.monotonic())
        children.append(child.id)
        _settle(api, child.id, "waiting")
    _settle(api, root["id"], "waiting")
    return root["id"], children[0], children[1]


def test_patch_chat_archive_child_rejected(api: Contract, server: FakeCoderServer) -> None:
    """TestPatchChatArchiveChildRejected: archiving a sub-agent chat alone is a 400, and no
    member of its family is archived."""
    family = _family(api, server)
    assert _archive(api, family[1]) == 400
    for chat_id in family:
        assert _chat(api, chat_id)["archived"] is False


def test_patch_chat_unarchive_child_rejected(api: Contract, server: FakeCoderServer) -> None:
    """TestPatchChatUnarchiveChildRejected: archiving the root archives its family;
    unarchiving a sub-agent chat alone is then a 400, and the whole family stays archived."""
    family = _family(api, server)
    assert _archive(api, family[0]) == 204
    for chat_id in family:
        assert _chat(api, chat_id)["archived"] is True
    assert _archive(api, family[1], False) == 400
    for chat_id in family:
        assert _chat(api, chat_id)["archived"] is True


def test_patch_chat_archive_root_rolls_back_when_child_cannot_archive(
    api: Contract, server: FakeCoderServer
) -> None:
    """TestPatchChatArchiveRootRollsBackWhenChildCannotArchive: archiving a waiting root
    whose sub-agent chat is running is a 409, and neither is archived."""
    root = _idle_chat(api, "root")
    child = server.model.spawn_child(root["id"], BUSY, time.monotonic()).id
    assert _chat(api, child)["status"] == "running"
    assert _chat(api, root["id"])["status"] == "waiting"
    assert _archive(api, root["id"]) == 409
    for chat_id in (root["id"], child):
        assert _chat(api, chat_id)["archived"] is False


def test_reconcile_invalid_chat_state_not_invalid_returns_conflict(api: Contract) -> None:
    """TestReconcileInvalidChatStateNotInvalidReturnsConflict: reconciling a chat in a valid
    state (a new, running chat) is a 409 "Chat is not in an invalid state."."""
    chat = api.create_chat(BUSY)
    assert chat["status"] == "running"
    answer = api.request("POST", f"{CHATS}/{chat['id']}/reconcile-invalid")
    assert answer.status_code == 409, answer.text
    assert answer.json()["message"] == "Chat is not in an invalid state."


def test_reconcile_invalid_chat_state_not_found(api: Contract) -> None:
    """TestReconcileInvalidChatStateNotFound: reconciling a chat that does not exist is a
    404."""
    answer = api.request("POST", f"{CHATS}/{uuid.uuid4()}/reconcile-invalid")
    assert answer.status_code == 404, answer.text
