"""Contract cases restated from the Coder server's ``coderd/exp_chats_test.go`` (commit
00b34a9a), second range: the top-level tests from ``TestPatchChat`` to
``TestChatFileDownloadURL``. This file holds ``TestPatchChatMessage`` to
``TestChatFileDownloadURL``; ``test_exp_chats_2a.py`` the first part.

Each case sends what the server's test sends and asserts what it asserts that a client can
see over HTTP or a WebSocket. Where the server's test seeds rows straight into its database (a
chat in a given state, a queued message), the case reaches the same state through the fake's
routes and scripts (a run held for the whole case, a failed turn, a message queued behind a
run that then fails).

Not restated
============

* TestPatchChatMessage/CrossOrgModelConfigRejected,
  .../HistoricalForeignModelFallsBackToLocalDefault,
  .../HistoricalForeignModelWithoutLocalDefaultReturnsGuidance: a second organization.
* TestPatchChatMessage/ProviderDisabledModelConfigID, .../ProviderDisabledPreservedModelRejected:
  provider administration.
* TestPatchChatMessage/CapEvictsOldestOnEdit with the limits 3 and 60: deployment
  configuration (the default limit is restated).
* TestCompactChat/UpdateDenied, TestClearChat/UpdateDenied, TestProposeChatTitle/UpdateDenied:
  a custom RBAC authorizer.
* TestProposeChatTitle/PasteOnlyChat, .../DoesNotBumpHistoryVersion, .../StoppedWorkspace,
  .../DoesNotPersistTitleOrBumpUpdatedAt, .../UsageLimitExhausted: a title model's answers,
  failures and quota (and database versions, workspace builds).
* TestProposeChatTitle/NoDefaultModelConfig: a deleted model configuration.
* TestManualTitleEndpointsPassOwnerSyntheticAPIKeyToAIGateway: the AI gateway.
* TestPostChatMessages_TitleGenerationForEmptyCreatedChat: the title request sent to the model
  provider (TestPostChats_AutomaticTitleGeneration and ...PasteOnly are restated for the
  create answer's fallback title only, for the same reason).
* TestGetChatDiffStatus/Success: a cached pull-request status row.
* TestGetChatDiffStatus/NotFoundForDifferentUser, TestGetChatDiffContents/NotFoundForDifferentUser:
  a second user.
* TestGetChatDiffContents/SuccessWithCachedRepositoryReference, .../DiscoveryWriteKeysStoredRef,
  .../DiscoveryWriteDoesNotReorderPrimary, .../RefSelectorFetchesThatRefsDiff: git references
  reported by a workspace agent, and a git provider.
* TestPromoteChatQueuedMessage/ForeignModelWithoutLocalDefaultReturnsGuidance: a second
  organization.
* TestPromoteChatQueuedMessage/MemberCanPromoteOwnQueuedMessage, TestPostChatFile/MemberCanUploadChatFile,
  TestGetChatFile/OtherUserForbidden, TestChatFileDownloadURL/NonOwnerCannotMint: a second user.
* TestChatFileDownloadURL/RevokedShareCannotRedeem: chat sharing (ACLs).
* TestChatFileDownloadURL/SuspendedUserCannotRedeem: user administration.
* TestChatFileDownloadURL/ExpiredToken: a token signed with the deployment's key.
* TestGetChatFile/AgentArtifactZipServedAsAttachment: a file written by the agent.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import Script
from coder_proto.fake._script import CallClientTool

from .conftest import CHATS, Contract
from .exp_chats_2_support import (
    DEFAULT_ATTACHMENT_CAP,
    MCP,
    PNG,
    add_scripts,
    chat_of,
    default_and_other_model,
    edit,
    error_of,
    errored_chat,
    errored_chat_with_queue,
    file_parts,
    first_user_message_id,
    has_text,
    held_chat,
    known_contract,
    messages,
    patch,
    queue,
    send,
    settle,
    settled_chat,
    stream_events,
    text,
    upload,
    upload_many,
    uploaded_id,
    wait_for,
)


@pytest.fixture
def known() -> Iterator[Contract]:
    with known_contract() as contract:
        yield contract


@pytest.fixture
def scripted(server: FakeCoderServer) -> FakeCoderServer:
    return add_scripts(server)


# -- TestPatchChatMessage --------------------------------------------------------------------------


def test_patch_chat_message__success(api: Contract) -> None:
    """TestPatchChatMessage/Success: an edit replaces the message under a new id."""
    chat = api.create_chat("hello before edit")
    message_id = first_user_message_id(api, chat["id"])
    edited = error_of(edit(api, chat["id"], message_id, {"content": text("hello after edit")}), 200)
    assert edited["message"]["id"] != message_id
    assert edited["message"]["role"] == "user"
    assert has_text(edited["message"]["content"], "hello after edit")
    users = [m for m in messages(api, chat["id"])["messages"] if m["role"] == "user"]
    assert any(has_text(m["content"], "hello after edit") for m in users)
    assert not any(has_text(m["content"], "hello before edit") for m in users)


def test_patch_chat_message__mcp_server_ids_applied(known: Contract) -> None:
    """TestPatchChatMessage/MCPServerIDsApplied: an edit's MCP servers are stored on the
    chat; an edit without the field keeps them."""
    chat = known.create_chat("before mcp edit")
    assert chat["mcp_server_ids"] == []
    message_id = first_user_message_id(known, chat["id"])
    edited = error_of(
        edit(
            known,
            chat["id"],
            message_id,
            {"content": text("edit enabling the mcp server"), "mcp_server_ids": [MCP]},
        ),
        200,
    )
    assert chat_of(known, chat["id"])["mcp_server_ids"] == [MCP]
    error_of(
        edit(
            known,
            chat["id"],
            edited["message"]["id"],
            {"content": text("edit without an mcp selection")},
        ),
        200,
    )
    assert chat_of(known, chat["id"])["mcp_server_ids"] == [MCP]


def test_patch_chat_message__mcp_server_ids_invalid_rejected(api: Contract) -> None:
    """TestPatchChatMessage/MCPServerIDsInvalidRejected."""
    chat = api.create_chat("before invalid mcp edit")
    message_id = first_user_message_id(api, chat["id"])
    unknown = str(uuid.uuid4())
    body = {"content": text("edit selecting an unknown mcp server"), "mcp_server_ids": [unknown]}
    error = error_of(edit(api, chat["id"], message_id, body), 400)
    assert error["message"] == "One or more MCP server IDs are invalid or disabled."
    assert error["detail"] == "Invalid IDs: " + unknown
    assert chat_of(api, chat["id"])["mcp_server_ids"] == []


@pytest.mark.parametrize(
    ("requested", "want"),
    [(None, "low"), ("high", "high")],
    ids=["PreservesByDefault", "Overrides"],
)
def test_patch_chat_message__reasoning_effort(
    api: Contract, requested: str | None, want: str
) -> None:
    """TestPatchChatMessage/ReasoningEffort: an edit keeps the chat's effort unless it names
    one."""
    chat = api.create_chat("before edit effort", reasoning_effort="low")
    message_id = first_user_message_id(api, chat["id"])
    body: dict[str, Any] = {"content": text("after edit effort")}
    if requested is not None:
        body["reasoning_effort"] = requested
    error_of(edit(api, chat["id"], message_id, body), 200)
    assert chat_of(api, chat["id"])["last_reasoning_effort"] == want


def test_patch_chat_message__rejects_invalid_reasoning_effort(api: Contract) -> None:
    """TestPatchChatMessage/RejectsInvalidReasoningEffort."""
    chat = api.create_chat("before invalid effort edit")
    message_id = first_user_message_id(api, chat["id"])
    body = {"content": text("after invalid effort edit"), "reasoning_effort": " HIGH "}
    error = error_of(edit(api, chat["id"], message_id, body), 400)
    assert error["message"] == "Invalid reasoning_effort value."
    assert 'Invalid value " HIGH "' in error["detail"]
    assert "must be one of none, minimal, low, medium, high, xhigh, max" in error["detail"]


def test_patch_chat_message__preserves_file_id(api: Contract) -> None:
    """TestPatchChatMessage/PreservesFileID: an edit keeps its file part by id, without
    bytes, in the answer and in the history."""
    file_id = uploaded_id(api)
    chat = api.create_chat(
        "x",
        content=[
            {"type": "text", "text": "before edit with file"},
            {"type": "file", "file_id": file_id},
        ],
    )
    message_id = first_user_message_id(api, chat["id"])
    content = [
        {"type": "text", "text": "after edit with file"},
        {"type": "file", "file_id": file_id},
    ]
    edited = error_of(edit(api, chat["id"], message_id, {"content": content}), 200)["message"]
    assert edited["id"] != message_id

    def check(parts: list[dict[str, Any]]) -> tuple[bool, bool]:
        files = [p for p in parts if p["type"] == "file" and p.get("file_id") == file_id]
        assert all(p.get("data") is None for p in files)
        return has_text(parts, "after edit with file"), bool(files)

    assert check(edited["content"]) == (True, True)
    users = [m for m in messages(api, chat["id"])["messages"] if m["role"] == "user"]
    found = [check(m["content"]) for m in users]
    assert any(t for t, _ in found) and any(f for _, f in found)


def test_patch_chat_message__message_not_found(api: Contract) -> None:
    """TestPatchChatMessage/MessageNotFound."""
    chat = api.create_chat("hello")
    error = error_of(edit(api, chat["id"], 999999, {"content": text("edited")}), 404)
    assert error["message"] == "Chat message not found."


def test_patch_chat_message__invalid_message_id(api: Contract) -> None:
    """TestPatchChatMessage/InvalidMessageID."""
    chat = api.create_chat("hello")
    error = error_of(edit(api, chat["id"], "not-an-int", {"content": text("ignored")}), 400)
    assert error["message"] == "Invalid chat message ID."


def test_patch_chat_message__files_linked_on_edit(api: Contract) -> None:
    """TestPatchChatMessage/FilesLinkedOnEdit: a file added by an edit is listed on the
    chat."""
    chat = api.create_chat("before file edit")
    file_id = uploaded_id(api, name="edit-linked.png")
    message_id = first_user_message_id(api, chat["id"])
    content = [{"type": "text", "text": "after file edit"}, {"type": "file", "file_id": file_id}]
    error_of(edit(api, chat["id"], message_id, {"content": content}), 200)
    (f,) = chat_of(api, chat["id"])["files"]
    assert (f["id"], f["name"], f["mime_type"]) == (file_id, "edit-linked.png", "image/png")


def test_patch_chat_message__cap_evicts_oldest_on_edit(api: Contract) -> None:
    """TestPatchChatMessage/CapEvictsOldestOnEdit (the default cap)."""
    ids = upload_many(api, DEFAULT_ATTACHMENT_CAP + 1, "cap")
    capped, extra = ids[:-1], ids[-1]
    chat = api.create_chat("fill to cap", content=file_parts(capped, "fill to cap"))
    assert len(chat["files"]) == DEFAULT_ATTACHMENT_CAP
    message_id = first_user_message_id(api, chat["id"])
    error_of(
        edit(api, chat["id"], message_id, {"content": file_parts([extra], "edit with extra file")}),
        200,
    )
    linked = [f["id"] for f in chat_of(api, chat["id"])["files"]]
    assert len(linked) == DEFAULT_ATTACHMENT_CAP
    assert extra in linked
    assert capped[0] not in linked


def test_patch_chat_message__archived_chat(api: Contract) -> None:
    """TestPatchChatMessage/ArchivedChat."""
    chat = settled_chat(api, "hello before edit")
    message_id = first_user_message_id(api, chat["id"])
    assert patch(api, chat["id"], {"archived": True}).status_code == 204
    error = error_of(edit(api, chat["id"], message_id, {"content": text("should fail")}), 400)
    assert "archived" in error["message"]


def test_patch_chat_message__changes_model(api: Contract) -> None:
    """TestPatchChatMessage/ChangesModel: an edit naming a model stamps the new message with
    it and moves the chat's last model."""
    a, b = default_and_other_model(api)
    chat = api.create_chat("hello before edit")
    assert chat["last_model_config_id"] == a
    settle(api, chat["id"])
    message_id = first_user_message_id(api, chat["id"])
    body = {"content": text("hello after edit with new model"), "model_config_id": b}
    edited = error_of(edit(api, chat["id"], message_id, body), 200)
    assert edited["message"]["model_config_id"] == b
    assert settle(api, chat["id"])["last_model_config_id"] == b


def test_patch_chat_message__invalid_model_config_id(api: Contract) -> None:
    """TestPatchChatMessage/InvalidModelConfigID."""
    chat = api.create_chat("hello")
    message_id = first_user_message_id(api, chat["id"])
    body = {"content": text("edited"), "model_config_id": str(uuid.uuid4())}
    error = error_of(edit(api, chat["id"], message_id, body), 400)
    assert error["message"] == "Invalid model_config_id: model config not found or disabled."


# -- TestStreamChat, TestInterruptChat -------------------------------------------------------------


def test_stream_chat__success(api: Contract) -> None:
    """TestStreamChat/Success: the stream sends the chat's first user message, no error."""
    initial = "stream chat route initial message"
    chat = api.create_chat(initial)

    def found(events: list[dict[str, Any]]) -> bool:
        return any(
            e["type"] == "message"
            and e["message"]["role"] == "user"
            and has_text(e["message"]["content"], initial)
            for e in events
        )

    events = stream_events(api.server, f"{CHATS}/{chat['id']}/stream", found)
    assert all(e["chat_id"] == chat["id"] for e in events)
    assert not any(e["type"] == "error" for e in events)


def test_stream_chat__unauthenticated(server: FakeCoderServer) -> None:
    """TestStreamChat/Unauthenticated: 401 without a session."""
    answer = httpx.get(f"{server.url}{CHATS}/{uuid.uuid4()}/stream")
    assert answer.status_code == 401


def test_interrupt_chat__success(api: Contract, scripted: FakeCoderServer) -> None:
    """TestInterruptChat/Success: interrupting a running chat answers it ``interrupting``."""
    chat = held_chat(api)
    interrupted = error_of(api.request("POST", f"{CHATS}/{chat['id']}/interrupt"), 200)
    assert interrupted["id"] == chat["id"]
    assert interrupted["status"] == "interrupting"


def test_interrupt_chat__chat_not_found(api: Contract) -> None:
    """TestInterruptChat/ChatNotFound."""
    error_of(api.request("POST", f"{CHATS}/{uuid.uuid4()}/interrupt"), 404)


# -- TestCompactChat -------------------------------------------------------------------------------


def test_compact_chat__requests_compaction(api: Contract) -> None:
    """TestCompactChat/RequestsCompaction: an idle chat with a finished turn starts
    compacting (``running``)."""
    chat = settled_chat(api, "question")
    compacted = error_of(api.request("POST", f"{CHATS}/{chat['id']}/compact"), 200)
    assert compacted["id"] == chat["id"]
    assert compacted["status"] == "running"


def test_compact_chat__nothing_to_compact(api: Contract) -> None:
    """TestCompactChat/NothingToCompact: 409 for a chat without a turn to summarize (here a
    chat created without a message), which stays ``waiting``."""
    chat = error_of(
        api.request("POST", CHATS, {"organization_id": api.server.organization_id}), 201
    )
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/compact"), 409)
    assert "Nothing to compact" in error["message"]
    assert chat_of(api, chat["id"])["status"] == "waiting"


def test_compact_chat__from_error_state(api: Contract, scripted: FakeCoderServer) -> None:
    """TestCompactChat/FromErrorState: compaction from the error state runs and clears
    ``last_error``."""
    chat = errored_chat(api)
    compacted = error_of(api.request("POST", f"{CHATS}/{chat['id']}/compact"), 200)
    assert compacted["id"] == chat["id"]
    assert compacted["status"] == "running"
    assert compacted.get("last_error") is None


def test_compact_chat__busy(api: Contract, scripted: FakeCoderServer) -> None:
    """TestCompactChat/Busy: 409 while the chat generates."""
    chat = held_chat(api)
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/compact"), 409)
    assert "Cannot compact the chat in its current state" in error["message"]
    assert "Compaction is not available while the chat is generating." in error["detail"]


def test_compact_chat__archived(api: Contract) -> None:
    """TestCompactChat/Archived."""
    chat = settled_chat(api, "question")
    assert patch(api, chat["id"], {"archived": True}).status_code == 204
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/compact"), 400)
    assert "archived" in error["message"]


def test_compact_chat__chat_not_found(api: Contract) -> None:
    """TestCompactChat/ChatNotFound."""
    error_of(api.request("POST", f"{CHATS}/{uuid.uuid4()}/compact"), 404)


# -- TestClearChat ---------------------------------------------------------------------------------


def test_clear_chat__clears_context(api: Contract) -> None:
    """TestClearChat/ClearsContext: clearing leaves the chat waiting; then there is nothing
    to clear or compact."""
    chat = settled_chat(api, "question")
    cleared = error_of(api.request("POST", f"{CHATS}/{chat['id']}/clear"), 200)
    assert cleared["id"] == chat["id"]
    assert cleared["status"] == "waiting"
    assert chat_of(api, chat["id"])["status"] == "waiting"
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/clear"), 409)
    assert "Nothing to clear" in error["message"]
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/compact"), 409)
    assert "Nothing to compact" in error["message"]


def test_clear_chat__nothing_to_clear(api: Contract) -> None:
    """TestClearChat/NothingToClear: a chat without messages has nothing to clear."""
    chat = error_of(
        api.request("POST", CHATS, {"organization_id": api.server.organization_id}), 201
    )
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/clear"), 409)
    assert "Nothing to clear" in error["message"]
    assert chat_of(api, chat["id"])["status"] == "waiting"


def test_clear_chat__from_error_state(api: Contract, scripted: FakeCoderServer) -> None:
    """TestClearChat/FromErrorState: clearing from the error state waits, without
    ``last_error``."""
    chat = errored_chat(api)
    cleared = error_of(api.request("POST", f"{CHATS}/{chat['id']}/clear"), 200)
    assert cleared["id"] == chat["id"]
    assert cleared["status"] == "waiting"
    assert cleared.get("last_error") is None


def test_clear_chat__busy(api: Contract, scripted: FakeCoderServer) -> None:
    """TestClearChat/Busy."""
    chat = held_chat(api)
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/clear"), 409)
    assert "Cannot clear the chat in its current state" in error["message"]


def test_clear_chat__error_with_queue(api: Contract, scripted: FakeCoderServer) -> None:
    """TestClearChat/ErrorWithQueue: an errored chat with a queue cannot be cleared."""
    chat, _queued = errored_chat_with_queue(api)
    assert chat["status"] == "error"
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/clear"), 409)
    assert "Cannot clear the chat in its current state" in error["message"]


def test_clear_chat__archived(api: Contract) -> None:
    """TestClearChat/Archived."""
    chat = settled_chat(api, "question")
    assert patch(api, chat["id"], {"archived": True}).status_code == 204
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/clear"), 400)
    assert "archived" in error["message"]


def test_clear_chat__chat_not_found(api: Contract) -> None:
    """TestClearChat/ChatNotFound."""
    error_of(api.request("POST", f"{CHATS}/{uuid.uuid4()}/clear"), 404)


# -- TestProposeChatTitle --------------------------------------------------------------------------


def test_propose_chat_title__chat_not_found(api: Contract) -> None:
    """TestProposeChatTitle/ChatNotFound."""
    error_of(api.request("POST", f"{CHATS}/{uuid.uuid4()}/title/propose"), 404)


def test_propose_chat_title__unauthenticated(api: Contract) -> None:
    """TestProposeChatTitle/Unauthenticated."""
    chat = api.create_chat("chat for unauthenticated proposal")
    answer = httpx.post(f"{api.server.url}{CHATS}/{chat['id']}/title/propose")
    assert answer.status_code == 401


# -- titles of a create ----------------------------------------------------------------------------


def test_post_chats__automatic_title_generation(api: Contract) -> None:
    """TestPostChats_AutomaticTitleGeneration: the create answer carries the fallback title
    taken from the message."""
    chat = api.create_chat("automatic title generation please")
    assert chat["title"] == "automatic title generation please"
    assert chat["title_source"] == "fallback"


def test_post_chats__user_title(api: Contract) -> None:
    """TestPostChats_UserTitle: a blank title is 400; a given title is trimmed, kept as the
    user's, and stays after the turn."""
    prompt = "automatic title generation please"
    body = {"organization_id": api.server.organization_id, "content": text(prompt)}
    error_of(api.request("POST", CHATS, {**body, "title": "   "}), 400)
    chat = error_of(api.request("POST", CHATS, {**body, "title": f"  {prompt}  "}), 201)
    assert chat["title"] == prompt
    assert chat["title_source"] == "user"
    settled = settle(api, chat["id"])
    assert settled["title"] == prompt
    assert settled["title_source"] == "user"


def test_post_chats__automatic_title_generation_paste_only(api: Contract) -> None:
    """TestPostChats_AutomaticTitleGenerationPasteOnly: the create answer of a chat whose only
    content is a pasted-text attachment carries a fallback title from the paste."""
    paste = b"panic: runtime error: invalid memory address or nil pointer dereference"
    file_id = uploaded_id(api, paste, "text/plain", "pasted-text-2026-01-02-03-04-05.txt")
    answer = api.request(
        "POST",
        CHATS,
        {
            "organization_id": api.server.organization_id,
            "content": [{"type": "file", "file_id": file_id}],
        },
    )
    assert error_of(answer, 201)["title"] == "panic: runtime error: invalid memory address…"


def test_post_chats__empty_content__create_idle_then_first_message(api: Contract) -> None:
    """TestPostChats_EmptyContent/CreateIdleThenFirstMessage: a chat created without content
    waits, titled "New Chat", without user messages; its first message is sent, not queued."""
    chat = error_of(
        api.request("POST", CHATS, {"organization_id": api.server.organization_id}), 201
    )
    assert chat["status"] == "waiting"
    assert chat["title"] == "New Chat"
    page = messages(api, chat["id"])
    assert not any(m["role"] == "user" for m in page["messages"])
    assert not page.get("queued_messages")
    body = error_of(send(api, chat["id"], {"content": text("hello")}), 200)
    assert body["queued"] is False
    assert body["message"] is not None


def test_post_chats__empty_content__archive_immediately(api: Contract) -> None:
    """TestPostChats_EmptyContent/ArchiveImmediately."""
    chat = error_of(
        api.request("POST", CHATS, {"organization_id": api.server.organization_id}), 201
    )
    assert chat["status"] == "waiting"
    assert patch(api, chat["id"], {"archived": True}).status_code == 204
    assert chat_of(api, chat["id"])["archived"] is True


def test_post_chat_messages__fallback_title_for_empty_created_chat(api: Contract) -> None:
    """TestPostChatMessages_FallbackTitleForEmptyCreatedChat: the first message of a chat
    created without one gives it the fallback title: the first six words and an ellipsis."""
    chat = error_of(
        api.request("POST", CHATS, {"organization_id": api.server.organization_id}), 201
    )
    prompt = "summarize the failing upload integration tests for me"
    error_of(send(api, chat["id"], {"content": text(prompt)}), 200)
    assert settle(api, chat["id"])["title"] == "summarize the failing upload integration tests…"


# -- TestGetChatDiffContents -----------------------------------------------------------------------


def test_get_chat_diff_contents__success_without_cached_reference(api: Contract) -> None:
    """TestGetChatDiffContents/SuccessWithoutCachedReference: a chat without a repository has
    an empty diff and no provider, origin, branch or pull request."""
    chat = api.create_chat("diff contents test")
    diff = error_of(api.request("GET", f"{CHATS}/{chat['id']}/diff"), 200)
    assert diff["chat_id"] == chat["id"]
    for key in ("provider", "remote_origin", "branch", "pull_request_url"):
        assert diff.get(key) is None
    assert not diff.get("diff")


def test_get_chat_diff_contents__partial_selector_is_rejected(api: Contract) -> None:
    """TestGetChatDiffContents/PartialSelectorIsRejected: a branch without an origin is 400."""
    chat = api.create_chat("partial selector test")
    error_of(
        api.request("GET", f"{CHATS}/{chat['id']}/diff", params={"branch": "feature/test"}), 400
    )


def test_get_chat_diff_contents__unmatched_selector_is_not_found(api: Contract) -> None:
    """TestGetChatDiffContents/UnmatchedSelectorIsNotFound: a complete selector naming no
    tracked reference is 404."""
    chat = api.create_chat("unmatched selector test")
    params = {"origin": "https://github.com/coder/coder.git", "branch": "does/not/exist"}
    error_of(api.request("GET", f"{CHATS}/{chat['id']}/diff", params=params), 404)


# -- queued messages -------------------------------------------------------------------------------


def test_delete_chat_queued_message__success(api: Contract, scripted: FakeCoderServer) -> None:
    """TestDeleteChatQueuedMessage/Success: 204, and the message leaves the queue."""
    chat, queued = errored_chat_with_queue(api, "queued message for delete route")
    answer = api.request("DELETE", f"{CHATS}/{chat['id']}/queue/{queued['id']}")
    assert answer.status_code == 204, answer.text
    assert queued["id"] not in [
        q["id"] for q in messages(api, chat["id"]).get("queued_messages") or []
    ]


def test_delete_chat_queued_message__invalid_queued_message_id(api: Contract) -> None:
    """TestDeleteChatQueuedMessage/InvalidQueuedMessageID."""
    chat = settled_chat(api, "delete queued invalid id")
    error = error_of(api.request("DELETE", f"{CHATS}/{chat['id']}/queue/not-an-int"), 400)
    assert error["message"] == "Invalid queued message ID."
    assert "invalid syntax" in error["detail"]


def test_promote_chat_queued_message__success(api: Contract, scripted: FakeCoderServer) -> None:
    """TestPromoteChatQueuedMessage/Success: 202 with a message; the promoted user message
    links its queued message, in the history and in a stream replay after an earlier
    message."""
    queued_text = "queued message for promote route"
    chat, queued = errored_chat_with_queue(api, queued_text)
    earlier = first_user_message_id(api, chat["id"])
    answer = api.request("POST", f"{CHATS}/{chat['id']}/queue/{queued['id']}/promote")
    assert error_of(answer, 202)["message"]
    page = messages(api, chat["id"])
    assert queued["id"] not in [q["id"] for q in page.get("queued_messages") or []]
    promoted = next(
        m for m in page["messages"] if m["role"] == "user" and has_text(m["content"], queued_text)
    )
    assert promoted["queued_message_id"] == queued["id"]
    assert promoted["id"] > earlier

    def replayed(events: list[dict[str, Any]]) -> bool:
        return any(e["type"] == "message" and e["message"]["id"] == promoted["id"] for e in events)

    events = stream_events(api.server, f"{CHATS}/{chat['id']}/stream?after_id={earlier}", replayed)
    sent = [e["message"] for e in events if e["type"] == "message"]
    assert earlier not in [m["id"] for m in sent]
    assert next(m for m in sent if m["id"] == promoted["id"])["queued_message_id"] == queued["id"]


def test_promote_chat_queued_message__send_to_errored_chat_links_promoted_head(
    api: Contract, scripted: FakeCoderServer
) -> None:
    """TestPromoteChatQueuedMessage/SendToErroredChatLinksPromotedHead: a queued send to an
    errored chat promotes the old head, which links its own queued message."""
    chat, head = errored_chat_with_queue(api, "queued head")
    body = queue(api, chat["id"], "new tail")
    assert body["queued_message"]["id"] != head["id"]
    users = [m for m in body.get("messages") or [] if m["role"] == "user"]
    assert len(users) == 1
    assert users[0]["queued_message_id"] == head["id"]


def test_promote_chat_queued_message__invalid_queued_message_id(api: Contract) -> None:
    """TestPromoteChatQueuedMessage/InvalidQueuedMessageID."""
    chat = settled_chat(api, "promote queued invalid id")
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/queue/not-an-int/promote"), 400)
    assert error["message"] == "Invalid queued message ID."
    assert "invalid syntax" in error["detail"]


def test_promote_chat_queued_message__archived_chat(
    api: Contract, scripted: FakeCoderServer
) -> None:
    """TestPromoteChatQueuedMessage/ArchivedChat."""
    chat, queued = errored_chat_with_queue(api, "queued")
    assert patch(api, chat["id"], {"archived": True}).status_code == 204
    error = error_of(api.request("POST", f"{CHATS}/{chat['id']}/queue/{queued['id']}/promote"), 400)
    assert "archived" in error["message"]


WEATHER = {
    "name": "my_dynamic_tool",
    "description": "a test dynamic tool",
    "inputSchema": {"type": "object"},
}


def test_promote_chat_queued_message__while_requires_action(api: Contract) -> None:
    """TestPromoteChatQueuedMessage/WhileRequiresAction: promoting while a client tool call
    waits answers the call with an error result before the promoted message."""
    api.server.config.scripts.add(
        "call the tool", Script((CallClientTool(name="my_dynamic_tool", args={"x": 1}),))
    )
    queued_text = "queued message for requires-action promote"
    chat = api.create_chat("call the tool", unsafe_dynamic_tools=[WEATHER])
    chat = wait_for(api, chat["id"], lambda c: c["status"] == "requires_action")
    queued = queue(api, chat["id"], queued_text)["queued_message"]
    answer = api.request("POST", f"{CHATS}/{chat['id']}/queue/{queued['id']}/promote")
    assert error_of(answer, 202)["message"]
    history = messages(api, chat["id"])
    synthetic = [
        m["id"]
        for m in history["messages"]
        if m["role"] == "tool"
        and any(p.get("type") == "tool-result" and p.get("is_error") for p in m["content"])
    ]
    promoted = [
        m["id"]
        for m in history["messages"]
        if m["role"] == "user" and has_text(m["content"], queued_text)
    ]
    assert synthetic and promoted
    assert synthetic[0] < promoted[0]
    assert queued["id"] not in [q["id"] for q in history.get("queued_messages") or []]


def test_promote_chat_queued_message__while_running(
    api: Contract, scripted: FakeCoderServer
) -> None:
    """TestPromoteChatQueuedMessage/WhileRunning: promoting during a run interrupts it and
    keeps the queued message, under the same id, until the run ends."""
    chat = held_chat(api)
    queued = queue(api, chat["id"], "running-promote")["queued_message"]
    answer = api.request("POST", f"{CHATS}/{chat['id']}/queue/{queued['id']}/promote")
    assert error_of(answer, 202)["message"]
    assert chat_of(api, chat["id"])["status"] == "interrupting"
    assert [q["id"] for q in messages(api, chat["id"])["queued_messages"]] == [queued["id"]]


# -- TestPostChatFile ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "name", "data"),
    [
        ("image/png", "test.png", PNG),
        ("text/plain", "test.txt", b"This is a test paste.\nWith multiple lines.\n"),
        ("text/plain", "pasted-text.txt", b'{"ok":true}'),
        ("text/plain", "pasted-text.txt", b"name,count\nwidgets,3\n"),
        (
            "image/svg+xml",
            "test.svg",
            b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        ),
        (
            "text/plain",
            "snippet.txt",
            b"<!DOCTYPE html>\n<html><body><p>Paste me as plain text.</p></body></html>\n",
        ),
    ],
    ids=[
        "Success/PNG",
        "Success/TextPlain",
        "Success/TextPlainRefinesToJSON",
        "Success/TextPlainRefinesToCSV",
        "Success/SVG",
        "Success/TextPlainHTMLLikeContent",
    ],
)
def test_post_chat_file__success(api: Contract, content_type: str, name: str, data: bytes) -> None:
    """TestPostChatFile/Success/PNG, /Success/TextPlain, /Success/TextPlainRefinesToJSON,
    /Success/TextPlainRefinesToCSV, /Success/SVG and /Success/TextPlainHTMLLikeContent: the
    upload is stored under a new id."""
    answer = error_of(upload(api, data, content_type, name), 201)
    assert answer["id"] != str(uuid.UUID(int=0))


@pytest.mark.parametrize(
    ("content_type", "name", "data", "stored"),
    [
        ("application/octet-stream", "test.png", PNG, "image/png"),
        (
            "application/octet-stream",
            "notes.md",
            b"# Markdown upload\n\nThis arrived as octet-stream.\n",
            "text/markdown",
        ),
        (
            "text/plain",
            "pasted-text-2026-01-01-00-00-00.txt",
            b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><rect/></svg>',
            "image/svg+xml",
        ),
    ],
    ids=["Success/OctetStreamPNG", "Success/OctetStreamMarkdown", "Success/SVGPastedAsText"],
)
def test_post_chat_file__stored_type(
    api: Contract, content_type: str, name: str, data: bytes, stored: str
) -> None:
    """TestPostChatFile/Success/OctetStreamPNG, /Success/OctetStreamMarkdown and
    /Success/SVGPastedAsText: the stored type is what the bytes are, and the bytes come back
    unchanged."""
    file_id = error_of(upload(api, data, content_type, name), 201)["id"]
    got = api.request("GET", f"{CHATS}/files/{file_id}")
    assert got.status_code == 200
    assert got.headers["content-type"] == stored
    assert got.content == data


def test_post_chat_file__missing_filename(api: Contract) -> None:
    """TestPostChatFile/MissingFilename."""
    error = error_of(upload(api, PNG, "image/png", ""), 400)
    assert "Filename is required" in error["message"]
    assert "Content-Disposition" in error["detail"]


@pytest.mark.parametrize(
    ("content_type", "name", "data", "phrase"),
    [
        ("application/octet-stream", "payload.zip", b"PK\x03\x04", "Unsupported file type"),
        ("application/zip", "test.zip", b"PK\x03\x04", ""),
        (
            "text/plain",
            "test.txt",
            bytes.fromhex(
                "89504e470d0a1a0a0000000d4948445200000001000000010804000000b51c0c02"
                "0000000b4944415478da63fcff1f0003030200ef9a1a2a0000000049454e44ae426082"
            ),
            "does not match",
        ),
        ("application/json", "payload.json", b"not actually json", "does not match"),
    ],
    ids=[
        "OctetStreamRejectsUnsupportedBytes",
        "UnsupportedContentType",
        "ContentSniffingRejectsPNGAsText",
        "ContentSniffingRejectsPlainTextAsJSON",
    ],
)
def test_post_chat_file__rejected(
    api: Contract, content_type: str, name: str, data: bytes, phrase: str
) -> None:
    """TestPostChatFile/OctetStreamRejectsUnsupportedBytes, /UnsupportedContentType,
    /ContentSniffingRejectsPNGAsText and /ContentSniffingRejectsPlainTextAsJSON: 400."""
    error = error_of(upload(api, data, content_type, name), 400)
    assert phrase in error["message"]


def test_post_chat_file__too_large(api: Contract) -> None:
    """TestPostChatFile/TooLarge: 10 MiB and one byte is refused."""
    data = bytearray(10 * 1024 * 1024 + 1)
    data[:8] = PNG[:8]
    assert upload(api, bytes(data)).status_code >= 400


def test_post_chat_file__missing_organization(api: Contract) -> None:
    """TestPostChatFile/MissingOrganization."""
    answer = api.http.post(f"{CHATS}/files", content=PNG, headers={"Content-Type": "image/png"})
    assert "Missing organization" in error_of(answer, 400)["message"]


def test_post_chat_file__invalid_organization(api: Contract) -> None:
    """TestPostChatFile/InvalidOrganization."""
    answer = api.http.post(
        f"{CHATS}/files",
        params={"organization": "not-a-uuid"},
        content=PNG,
        headers={"Content-Type": "image/png"},
    )
    assert "Invalid organization ID" in error_of(answer, 400)["message"]


def test_post_chat_file__wrong_organization(api: Contract) -> None:
    """TestPostChatFile/WrongOrganization: any error status."""
    assert upload(api, PNG, organization=str(uuid.uuid4())).status_code >= 400


def test_post_chat_file__unauthenticated(api: Contract) -> None:
    """TestPostChatFile/Unauthenticated."""
    answer = httpx.post(
        f"{api.server.url}{CHATS}/files",
        params={"organization": api.server.organization_id},
        content=PNG,
        headers={
            "Content-Type": "image/png",
            "Content-Disposition": 'attachment; filename="test.png"',
        },
    )
    assert answer.status_code == 401


# -- TestGetChatFile -------------------------------------------------------------------------------


def test_get_chat_file__success(api: Contract) -> None:
    """TestGetChatFile/Success."""
    got = api.request("GET", f"{CHATS}/files/{uploaded_id(api)}")
    assert got.status_code == 200
    assert got.headers["content-type"] == "image/png"
    assert got.content == PNG


def test_get_chat_file__cache_headers(api: Contract) -> None:
    """TestGetChatFile/CacheHeaders."""
    got = api.request("GET", f"{CHATS}/files/{uploaded_id(api)}")
    assert got.status_code == 200
    assert got.headers["cache-control"] == "private, max-age=31536000, immutable"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert "inline" in got.headers["content-disposition"]
    assert "test.png" in got.headers["content-disposition"]


def _disposition(value: str) -> tuple[str, dict[str, str]]:
    kind, _, rest = value.partition(";")
    params = {}
    for item in rest.split(";"):
        key, _, val = item.strip().partition("=")
        if key:
            params[key.lower()] = val.strip('"')
    if "filename*" in params:
        params["filename"] = unquote(params["filename*"].split("''", 1)[1])
    return kind.strip(), params


@pytest.mark.parametrize(
    ("content_type", "name", "data"),
    [
        ("application/pdf", "report.pdf", b"%PDF-1.7\n"),
        ("image/svg+xml", "icon.svg", b'<svg xmlns="http://www.w3.org/2000/svg"/>'),
    ],
    ids=["PDFServedAsAttachment", "SVGServedAsAttachment"],
)
def test_get_chat_file__served_as_attachment(
    api: Contract, content_type: str, name: str, data: bytes
) -> None:
    """TestGetChatFile/PDFServedAsAttachment and /SVGServedAsAttachment: downloaded, not shown
    inline."""
    got = api.request("GET", f"{CHATS}/files/{uploaded_id(api, data, content_type, name)}")
    assert got.status_code == 200
    assert got.headers["content-type"] == content_type
    assert got.headers["x-content-type-options"] == "nosniff"
    assert _disposition(got.headers["content-disposition"]) == ("attachment", {"filename": name})


def test_get_chat_file__long_filename(api: Contract) -> None:
    """TestGetChatFile/LongFilename: the name is cut to 255 bytes."""
    got = api.request("GET", f"{CHATS}/files/{uploaded_id(api, name='a' * 300 + '.png')}")
    assert got.status_code == 200
    disposition = got.headers["content-disposition"]
    assert "inline" in disposition
    assert "a" * 255 in disposition
    assert "a" * 256 not in disposition


def test_get_chat_file__unicode_filename(api: Contract) -> None:
    """TestGetChatFile/UnicodeFilename: a name sent RFC 5987-encoded comes back."""
    name = "スクリーンショット.png"

    answer = api.http.post(
        f"{CHATS}/files",
        params={"organization": api.server.organization_id},
        content=PNG,
        headers={
            "Content-Type": "image/png",
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}",
        },
    )
    file_id = error_of(answer, 201)["id"]
    got = api.request("GET", f"{CHATS}/files/{file_id}")
    assert got.status_code == 200
    kind, params = _disposition(got.headers["content-disposition"])
    assert kind == "inline"
    assert params["filename"] == name


def test_get_chat_file__not_found(api: Contract) -> None:
    """TestGetChatFile/NotFound."""
    error_of(api.request("GET", f"{CHATS}/files/{uuid.uuid4()}"), 404)


def test_get_chat_file__invalid_uuid(api: Contract) -> None:
    """TestGetChatFile/InvalidUUID."""
    error_of(api.request("GET", f"{CHATS}/files/not-a-uuid"), 400)


# -- TestChatFileDownloadURL -----------------------------------------------------------------------


def _mint(api: Contract, name: str) -> tuple[str, dict[str, Any]]:
    file_id = uploaded_id(api, name=name)
    return file_id, error_of(api.request("POST", f"{CHATS}/files/{file_id}/download-url"), 200)


def test_chat_file_download_url__mint_and_redeem(api: Contract) -> None:
    """TestChatFileDownloadURL/MintAndRedeem: the URL describes the file, expires in the
    future at a whole second, and downloads it without a session."""
    _file_id, download = _mint(api, "evidence.png")
    assert download["size_bytes"] == len(PNG)
    assert download["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert download["name"] == "evidence.png"
    assert download["mime_type"] == "image/png"
    assert "." not in download["expires_at"]
    got = httpx.get(download["url"])
    assert got.status_code == 200
    assert got.headers["content-type"] == "image/png"
    assert got.headers["cache-control"] == "no-store"
    assert got.content == PNG


def test_chat_file_download_url__tampered_token(api: Contract) -> None:
    """TestChatFileDownloadURL/TamperedToken."""
    _file_id, download = _mint(api, "tampered.png")
    parts = urlsplit(download["url"])
    token = parts.query.split("token=", 1)[1]
    first = "B" if token[0] == "A" else "A"
    got = httpx.get(f"{api.server.url}{parts.path}", params={"token": first + token[1:]})
    assert got.status_code == 404


def test_chat_file_download_url__token_file_mismatch(api: Contract) -> None:
    """TestChatFileDownloadURL/TokenFileMismatch: a token works for its own file only."""
    _a, download = _mint(api, "a.png")
    other = uploaded_id(api, name="b.png")
    token = urlsplit(download["url"]).query.split("token=", 1)[1]
    got = httpx.get(f"{api.server.url}{CHATS}/files/{other}/download", params={"token": token})
    assert got.status_code == 404


def test_chat_file_download_url__plain_get_requires_authentication(server: FakeCoderServer) -> None:
    """TestChatFileDownloadURL/PlainGetRequiresAuthentication."""
    assert httpx.get(f"{server.url}{CHATS}/files/{uuid.uuid4()}").status_code == 401
