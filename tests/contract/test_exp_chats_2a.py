"""Contract cases restated from the Coder server's ``coderd/exp_chats_test.go`` (commit
00b34a9a), second range: the top-level tests from ``TestPatchChat`` to
``TestChatFileDownloadURL``. This file holds ``TestPatchChat`` to ``TestChatMessageWithFiles``;
``test_exp_chats_2b.py`` the rest.

Each case sends what the server's test sends and asserts what it asserts that a client can
see over HTTP or a WebSocket. Where the server's test seeds rows straight into its database (a
chat in a given state, a sub-agent chat, a queued message), the case reaches the same state
through the fake's routes, scripts and ``spawn_child``.

Not restated
============

* TestPatchChat/WorkspaceBinding/RejectsCrossOrgWorkspaceBinding: a second organization.
* TestUnarchiveChat/AllowsChildChatWhenParentNotArchived: an archived sub-agent chat under an
  active root, a row no route produces.
* TestPostChatMessages/ProviderDisabledModelConfigRejected, .../ProviderDisabledDefaultFallbackRejected:
  provider administration, which the fake does not serve.
* TestPostChatMessages/CrossOrgModelConfigRejected,
  .../HistoricalForeignModelFallsBackToLocalDefault,
  .../HistoricalForeignModelWithoutLocalDefaultReturnsGuidance: a second organization.
* TestPostChatMessages/MemberCanCreateChatMessage: a second user.
* TestChatMessageWithFiles/UnsupportedPromptInputFileType: a file written by the agent.
* TestChatMessageWithFiles/FileCapEvictsOldest and /FileCapOnCreate with the limits 3 and 60:
  deployment configuration (the default limit is restated).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer

from ..fake.netclients import SyncWs
from .conftest import CHATS, Contract
from .exp_chats_2_support import (
    DEFAULT_ATTACHMENT_CAP,
    PNG,
    WORKSPACE,
    add_scripts,
    chat_of,
    default_and_other_model,
    error_of,
    errored_chat_with_queue,
    file_parts,
    has_text,
    held_chat,
    known_contract,
    messages,
    patch,
    queue,
    send,
    settle,
    settled_chat,
    text,
    upload_many,
    uploaded_id,
    watch_event,
)


@pytest.fixture
def known() -> Iterator[Contract]:
    with known_contract() as contract:
        yield contract


@pytest.fixture
def scripted(server: FakeCoderServer) -> FakeCoderServer:
    return add_scripts(server)


# -- TestPatchChat ---------------------------------------------------------------------------------


def test_patch_chat__plan_mode__set_to_plan(api: Contract) -> None:
    """TestPatchChat/PlanMode/SetToPlan: plan_mode "plan" is stored and read back."""
    chat = api.create_chat("set plan mode")
    assert patch(api, chat["id"], {"plan_mode": "plan"}).status_code == 204
    assert chat_of(api, chat["id"])["plan_mode"] == "plan"


def test_patch_chat__plan_mode__clear(api: Contract) -> None:
    """TestPatchChat/PlanMode/Clear: an empty plan_mode clears it."""
    chat = api.create_chat("clear plan mode")
    assert patch(api, chat["id"], {"plan_mode": "plan"}).status_code == 204
    assert patch(api, chat["id"], {"plan_mode": ""}).status_code == 204
    assert not chat_of(api, chat["id"]).get("plan_mode")


def test_patch_chat__plan_mode__rejects_invalid_value(api: Contract) -> None:
    """TestPatchChat/PlanMode/RejectsInvalidValue: 400 "Invalid plan_mode value."."""
    chat = api.create_chat("invalid plan mode")
    error = error_of(patch(api, chat["id"], {"plan_mode": "invalid"}), 400)
    assert error["message"] == "Invalid plan_mode value."


def test_patch_chat__workspace_binding__bind_existing_external_workspace(known: Contract) -> None:
    """TestPatchChat/WorkspaceBinding/BindExistingExternalWorkspace: a chat binds to a
    workspace the user has."""
    chat = settled_chat(known, "bind workspace")
    assert patch(known, chat["id"], {"workspace_id": WORKSPACE}).status_code == 204
    assert chat_of(known, chat["id"]).get("workspace_id") == WORKSPACE


def test_patch_chat__workspace_binding__workspace_not_found(api: Contract) -> None:
    """TestPatchChat/WorkspaceBinding/WorkspaceNotFound: 400 naming the workspace as not
    found."""
    chat = settled_chat(api, "missing workspace")
    error = error_of(patch(api, chat["id"], {"workspace_id": str(uuid.uuid4())}), 400)
    assert error["message"] == "Workspace not found or you do not have access to this resource"


def test_patch_chat__workspace_binding__clear_workspace_binding(known: Contract) -> None:
    """TestPatchChat/WorkspaceBinding/ClearWorkspaceBinding: the nil UUID unbinds the chat
    (no workspace, build or agent)."""
    chat = settled_chat(known, "clear workspace binding")
    assert patch(known, chat["id"], {"workspace_id": WORKSPACE}).status_code == 204
    assert patch(known, chat["id"], {"workspace_id": str(uuid.UUID(int=0))}).status_code == 204
    updated = chat_of(known, chat["id"])
    assert updated.get("workspace_id") is None
    assert updated.get("build_id") is None
    assert updated.get("agent_id") is None


def test_patch_chat__title__rename(api: Contract) -> None:
    """TestPatchChat/Title/Rename."""
    chat = settled_chat(api, "original title")
    assert patch(api, chat["id"], {"title": "renamed title"}).status_code == 204
    assert chat_of(api, chat["id"])["title"] == "renamed title"


def test_patch_chat__title__trims_whitespace(api: Contract) -> None:
    """TestPatchChat/Title/TrimsWhitespace."""
    chat = settled_chat(api, "before trim")
    assert patch(api, chat["id"], {"title": "   padded title   "}).status_code == 204
    assert chat_of(api, chat["id"])["title"] == "padded title"


def test_patch_chat__title__rejects_empty(api: Contract) -> None:
    """TestPatchChat/Title/RejectsEmpty: a blank title is 400 and the title stays."""
    chat = api.create_chat("keep original")
    error_of(patch(api, chat["id"], {"title": "   "}), 400)
    assert chat_of(api, chat["id"])["title"] == chat["title"]


@pytest.mark.parametrize(
    "field",
    [
        {"labels": {"": "bad"}},
        {"archived": False},
        {"pin_order": -1},
        {"workspace_id": "9a4f3c2e-0000-4000-8000-000000000001"},
        {"plan_mode": "invalid"},
    ],
    ids=["labels", "archived", "pin_order", "workspace_id", "plan_mode"],
)
def test_patch_chat__title__rejected_request_leaves_title_unchanged(
    api: Contract, field: dict[str, Any]
) -> None:
    """TestPatchChat/Title/RejectedRequestLeavesTitleUnchanged: a request refused for any
    other field changes neither the title nor its source nor its time."""
    chat = settled_chat(api, "stored title")
    assert chat["title_source"] == "fallback"
    for title in (chat["title"], "new title"):
        error_of(patch(api, chat["id"], {**field, "title": title}), 400)
        stored = chat_of(api, chat["id"])
        assert stored["title"] == chat["title"]
        assert stored["title_source"] == chat["title_source"]
        assert stored["title_updated_at"] == chat["title_updated_at"]


@pytest.mark.parametrize(
    ("title", "stored"),
    [
        ("a" * 200, "a" * 200),
        ("a" * 201, None),
        ("é" * 200, "é" * 200),
        ("é" * 201, None),
        ("   " + "a" * 200 + "   ", "a" * 200),
    ],
    ids=[
        "ExactlyMaxASCII",
        "OneOverMaxASCII",
        "ExactlyMaxMultiByte",
        "OneOverMaxMultiByte",
        "TrimsDownToMax",
    ],
)
def test_patch_chat__title__length_boundaries(
    api: Contract, title: str, stored: str | None
) -> None:
    """TestPatchChat/Title/LengthBoundaries: at most 200 characters after trimming."""
    chat = settled_chat(api, "boundary baseline")
    answer = patch(api, chat["id"], {"title": title})
    updated = chat_of(api, chat["id"])
    if stored is not None:
        assert answer.status_code == 204, answer.text
        assert updated["title"] == stored
    else:
        error_of(answer, 400)
        assert updated["title"] == chat["title"]


def test_patch_chat__title__records_user_source_without_changing_updated_at(api: Contract) -> None:
    """TestPatchChat/Title/RecordsUserSourceWithoutChangingUpdatedAt: a rename, even to the
    same text, records the user as the title's source and moves ``title_updated_at`` but not
    ``updated_at``."""
    chat = settled_chat(api, "steady title")
    assert patch(api, chat["id"], {"title": "steady title"}).status_code == 204
    updated = chat_of(api, chat["id"])
    assert updated["title"] == "steady title"
    assert updated["title_source"] == "user"
    assert updated["updated_at"] == chat["updated_at"]
    time.sleep(0.01)
    assert patch(api, chat["id"], {"title": "renamed in place"}).status_code == 204
    renamed = chat_of(api, chat["id"])
    assert renamed["title"] == "renamed in place"
    assert renamed["title_source"] == "user"
    assert renamed["title_updated_at"] > updated["title_updated_at"]
    assert renamed["updated_at"] == chat["updated_at"]


def test_patch_chat__title__publishes_watch_event(api: Contract) -> None:
    """TestPatchChat/Title/PublishesWatchEvent: a rename is a ``title_change`` watch event
    carrying the new title."""
    chat = settled_chat(api, "announce me")
    with SyncWs(api.server, f"{CHATS}/watch") as ws:
        assert patch(api, chat["id"], {"title": "announced name"}).status_code == 204
        event = watch_event(ws, "title_change", chat["id"])
    assert event["chat"]["title"] == "announced name"


# -- TestArchiveChat -------------------------------------------------------------------------------


def test_archive_chat__success(api: Contract) -> None:
    """TestArchiveChat/Success: the list hides archived chats unless ``archived:true`` asks
    for them."""
    to_archive = api.create_chat("archive me")
    to_keep = api.create_chat("keep me")
    settle(api, to_archive["id"])
    settle(api, to_keep["id"])
    assert len(api.request("GET", CHATS).json()) == 2
    assert patch(api, to_archive["id"], {"archived": True}).status_code == 204
    assert [c["id"] for c in api.request("GET", CHATS).json()] == [to_keep["id"]]
    active = api.request("GET", CHATS, params={"q": "archived:false"}).json()
    assert [(c["id"], c["archived"]) for c in active] == [(to_keep["id"], False)]
    archived = api.request("GET", CHATS, params={"q": "archived:true"}).json()
    assert [(c["id"], c["archived"]) for c in archived] == [(to_archive["id"], True)]


def test_archive_chat__not_found(api: Contract) -> None:
    """TestArchiveChat/NotFound."""
    error_of(patch(api, str(uuid.uuid4()), {"archived": True}), 404)


def _family(api: Contract, children: int) -> tuple[dict[str, Any], list[str]]:
    parent = settled_chat(api, "parent chat")
    kids = []
    for n in range(children):
        child = api.server.model.spawn_child(parent["id"], f"child {n + 1}", time.monotonic())
        kids.append(child.id)
    for kid in kids:
        settle(api, kid)
    return parent, kids


def test_archive_chat__archives_children(api: Contract) -> None:
    """TestArchiveChat/ArchivesChildren: archiving the root archives its sub-agent chats,
    which the archived list embeds under it."""
    parent, kids = _family(api, 2)
    assert patch(api, parent["id"], {"archived": True}).status_code == 204
    active = api.request("GET", CHATS, params={"q": "archived:false"}).json()
    assert not {parent["id"], *kids} & {c["id"] for c in active}
    for kid in kids:
        assert chat_of(api, kid)["archived"] is True
    archived = api.request("GET", CHATS, params={"q": "archived:true"}).json()
    found = next(c for c in archived if c["id"] == parent["id"])
    assert found["archived"] is True
    assert len(found["children"]) == 2
    assert all(c["archived"] for c in found["children"])
    assert {c["id"] for c in found["children"]} == set(kids)


def test_archive_chat__allows_child_chat_archive_individually(api: Contract) -> None:
    """TestArchiveChat/AllowsChildChatArchiveIndividually: archiving a sub-agent chat alone is
    400 and changes nothing."""
    parent, (kid,) = _family(api, 1)
    error_of(patch(api, kid, {"archived": True}), 400)
    assert chat_of(api, kid)["archived"] is False
    assert chat_of(api, parent["id"])["archived"] is False


# -- TestUnarchiveChat -----------------------------------------------------------------------------


def test_unarchive_chat__success(api: Contract) -> None:
    """TestUnarchiveChat/Success."""
    chat = settled_chat(api, "archive then unarchive me")
    assert patch(api, chat["id"], {"archived": True}).status_code == 204
    archived = api.request("GET", CHATS, params={"q": "archived:true"}).json()
    assert len(archived) == 1 and archived[0]["archived"] is True
    assert patch(api, chat["id"], {"archived": False}).status_code == 204
    active = api.request("GET", CHATS, params={"q": "archived:false"}).json()
    assert [(c["id"], c["archived"]) for c in active] == [(chat["id"], False)]
    assert api.request("GET", CHATS, params={"q": "archived:true"}).json() == []


def test_unarchive_chat__unarchives_children(api: Contract) -> None:
    """TestUnarchiveChat/UnarchivesChildren: unarchiving the root brings its sub-agent chats
    back, embedded under it and not listed on their own."""
    parent, kids = _family(api, 2)
    assert patch(api, parent["id"], {"archived": True}).status_code == 204
    assert patch(api, parent["id"], {"archived": False}).status_code == 204
    active = api.request("GET", CHATS, params={"q": "archived:false"}).json()
    assert not set(kids) & {c["id"] for c in active}
    found = next(c for c in active if c["id"] == parent["id"])
    assert found["archived"] is False
    assert len(found["children"]) == 2
    assert not any(c["archived"] for c in found["children"])
    assert {c["id"] for c in found["children"]} == set(kids)
    archived = api.request("GET", CHATS, params={"q": "archived:true"}).json()
    assert parent["id"] not in {c["id"] for c in archived}
    for chat_id in (parent["id"], *kids):
        assert chat_of(api, chat_id)["archived"] is False


def test_unarchive_chat__not_archived(api: Contract) -> None:
    """TestUnarchiveChat/NotArchived: unarchiving an active chat is 400."""
    chat = settled_chat(api, "not archived")
    error_of(patch(api, chat["id"], {"archived": False}), 400)


def test_unarchive_chat__rejects_child_chat_when_parent_archived(api: Contract) -> None:
    """TestUnarchiveChat/RejectsChildChatWhenParentArchived: a sub-agent chat cannot be
    unarchived on its own."""
    parent, (kid,) = _family(api, 1)
    assert patch(api, parent["id"], {"archived": True}).status_code == 204
    error_of(patch(api, kid, {"archived": False}), 400)
    assert chat_of(api, kid)["archived"] is True


def test_unarchive_chat__not_found(api: Contract) -> None:
    """TestUnarchiveChat/NotFound."""
    error_of(patch(api, str(uuid.uuid4()), {"archived": False}), 404)


# -- TestChatPinOrder ------------------------------------------------------------------------------


def test_chat_pin_order__pin_reorder_and_unpin(api: Contract) -> None:
    """TestChatPinOrder/PinReorderAndUnpin: pinning appends, moving to 1 shifts the others,
    unpinning closes the gap."""
    chats = [api.create_chat(f"{n} pinned chat")["id"] for n in ("first", "second", "third")]
    for chat_id in chats:
        assert patch(api, chat_id, {"pin_order": 1}).status_code == 204
    assert [chat_of(api, c)["pin_order"] for c in chats] == [1, 2, 3]
    assert patch(api, chats[2], {"pin_order": 1}).status_code == 204
    assert [chat_of(api, c)["pin_order"] for c in chats] == [2, 3, 1]
    assert patch(api, chats[0], {"pin_order": 0}).status_code == 204
    assert [chat_of(api, c)["pin_order"] for c in chats] == [0, 2, 1]


def test_chat_pin_order__archive_clears_pin_order(api: Contract) -> None:
    """TestChatPinOrder/ArchiveClearsPinOrder: archiving unpins the chat; the other pin keeps
    its position."""
    first = api.create_chat("pinned then archived")["id"]
    second = api.create_chat("stays pinned")["id"]
    settle(api, first)
    settle(api, second)
    assert patch(api, first, {"pin_order": 1}).status_code == 204
    assert patch(api, second, {"pin_order": 1}).status_code == 204
    assert patch(api, first, {"archived": True}).status_code == 204
    archived = chat_of(api, first)
    assert archived["pin_order"] == 0
    assert archived["archived"] is True
    assert chat_of(api, second)["pin_order"] == 2


def test_chat_pin_order__rejects_negative(api: Contract) -> None:
    """TestChatPinOrder/RejectsNegative."""
    chat = api.create_chat("negative pin order")
    error = error_of(patch(api, chat["id"], {"pin_order": -1}), 400)
    assert error["message"] == "Pin order must be non-negative."
    assert chat_of(api, chat["id"])["pin_order"] == 0


def test_chat_pin_order__rejects_child_chat(api: Contract) -> None:
    """TestChatPinOrder/RejectsChildChat."""
    _parent, (kid,) = _family(api, 1)
    error = error_of(patch(api, kid, {"pin_order": 1}), 400)
    assert error["message"] == "Cannot pin a child chat."
    assert chat_of(api, kid)["pin_order"] == 0


# -- TestPostChatMessages --------------------------------------------------------------------------


def test_post_chat_messages__success(api: Contract) -> None:
    """TestPostChatMessages/Success: the sent message comes back (sent or queued) and is
    then in the chat's messages or queue."""
    chat = api.create_chat("initial message for post route test")
    wanted = f"post message route success {uuid.uuid4()}"
    created = send(api, chat["id"], {"content": text(wanted)}).json()
    page = messages(api, chat["id"])
    if created["queued"]:
        assert created.get("message") is None
        queued = created["queued_message"]
        assert queued["chat_id"] == chat["id"] and queued["id"]
        assert has_text(queued["content"], wanted)
        assert any(q["id"] == queued["id"] for q in page["queued_messages"]) or any(
            m["role"] == "user" and has_text(m["content"], wanted) for m in page["messages"]
        )
    else:
        assert created.get("queued_message") is None
        message = created["message"]
        assert message["chat_id"] == chat["id"] and message["role"] == "user" and message["id"]
        assert has_text(message["content"], wanted)
        assert any(m["id"] == message["id"] for m in page["messages"])


def test_post_chat_messages__empty_text(api: Contract) -> None:
    """TestPostChatMessages/EmptyText."""
    chat = api.create_chat("initial message for validation test")
    error = error_of(send(api, chat["id"], {"content": text("   ")}), 400)
    assert error["message"] == "Invalid input part."
    assert error["detail"] == "content[0].text cannot be empty."


def test_post_chat_messages__chat_not_found(api: Contract) -> None:
    """TestPostChatMessages/ChatNotFound."""
    error_of(send(api, str(uuid.uuid4()), {"content": text("hello")}), 404)


def test_post_chat_messages__archived_chat(api: Contract) -> None:
    """TestPostChatMessages/ArchivedChat."""
    chat = settled_chat(api, "hello")
    assert patch(api, chat["id"], {"archived": True}).status_code == 204
    error = error_of(send(api, chat["id"], {"content": text("should fail")}), 400)
    assert "archived" in error["message"]


# -- model and reasoning effort of a send ----------------------------------------------------------


def test_send_message_with_model_override_updates_last_model_config_id(api: Contract) -> None:
    """TestSendMessageWithModelOverrideUpdatesLastModelConfigID: a send naming another model
    is stamped with it and moves the chat's last model."""
    _a, b = default_and_other_model(api)
    chat = settled_chat(api, "mid-chat model switch direct send")
    body = send(
        api, chat["id"], {"content": text("switch to model b"), "model_config_id": b}
    ).json()
    assert body["queued"] is False
    assert body["message"]["model_config_id"] == b
    assert chat_of(api, chat["id"])["last_model_config_id"] == b


def test_send_message_with_reasoning_effort_updates_last_reasoning_effort(api: Contract) -> None:
    """TestSendMessageWithReasoningEffortUpdatesLastReasoningEffort: the effort of a send
    becomes the chat's last effort; a later send without one leaves it."""
    chat = settled_chat(api, "per-turn reasoning effort")
    body = send(
        api, chat["id"], {"content": text("think hard about this"), "reasoning_effort": "high"}
    ).json()
    assert body["queued"] is False
    assert chat_of(api, chat["id"])["last_reasoning_effort"] == "high"
    answer = send(
        api, chat["id"], {"content": text("and another thing"), "busy_behavior": "interrupt"}
    )
    assert answer.status_code == 200, answer.text
    assert chat_of(api, chat["id"])["last_reasoning_effort"] == "high"


def test_send_message_rejects_invalid_reasoning_effort(api: Contract) -> None:
    """TestSendMessageRejectsInvalidReasoningEffort."""
    chat = settled_chat(api, "invalid reasoning effort")
    error = error_of(
        send(api, chat["id"], {"content": text("hello"), "reasoning_effort": " HIGH "}), 400
    )
    assert error["message"] == "Invalid reasoning_effort value."
    assert 'Invalid value " HIGH "' in error["detail"]
    assert "must be one of none, minimal, low, medium, high, xhigh, max" in error["detail"]


def test_send_message_queues_reasoning_effort(api: Contract, scripted: FakeCoderServer) -> None:
    """TestSendMessageQueuesReasoningEffort: a queued send keeps its effort on the queued
    message and leaves the chat's last effort unset."""
    chat = held_chat(api)
    body = queue(api, chat["id"], "queue this with effort", reasoning_effort="high")
    assert body["queued_message"] is not None
    (queued,) = messages(api, chat["id"])["queued_messages"]
    assert queued["reasoning_effort"] == "high"
    assert chat_of(api, chat["id"]).get("last_reasoning_effort") is None


def test_send_message_queues_effective_model_config_id(
    api: Contract, scripted: FakeCoderServer
) -> None:
    """TestSendMessageQueuesEffectiveModelConfigID: a queued send keeps its model and effort;
    the chat's last model and effort do not move."""
    a, b = default_and_other_model(api)
    chat = held_chat(api)
    body = queue(
        api, chat["id"], "queue this with model b", model_config_id=b, reasoning_effort="high"
    )
    assert body["queued_message"]["model_config_id"] == b
    (queued,) = messages(api, chat["id"])["queued_messages"]
    assert queued["model_config_id"] == b
    assert queued["reasoning_effort"] == "high"
    stored = chat_of(api, chat["id"])
    assert stored["last_model_config_id"] == a
    assert stored.get("last_reasoning_effort") is None


def test_queued_message_without_override_captures_enqueue_time_model(
    api: Contract, scripted: FakeCoderServer
) -> None:
    """TestQueuedMessageWithoutOverrideCapturesEnqueueTimeModel: a queued send without a model
    is stamped with the chat's model at the time it was queued."""
    a, _b = default_and_other_model(api)
    chat = held_chat(api)
    body = queue(api, chat["id"], "queue with stored model")
    assert body["queued_message"]["model_config_id"] == a
    (queued,) = messages(api, chat["id"])["queued_messages"]
    assert queued["model_config_id"] == a


def test_subsequent_send_without_override_uses_persisted_model(api: Contract) -> None:
    """TestSubsequentSendWithoutOverrideUsesPersistedModel: a send without a model uses the
    chat's last model."""
    _a, b = default_and_other_model(api)
    chat = settled_chat(api, "subsequent send uses persisted model", model_config_id=b)
    body = send(api, chat["id"], {"content": text("reuse the persisted model")}).json()
    assert body["queued"] is False
    assert body["message"]["model_config_id"] == b


def test_watch_chats_status_change_carries_updated_last_model_config_id__direct_send(
    api: Contract,
) -> None:
    """TestWatchChatsStatusChangeCarriesUpdatedLastModelConfigID/DirectSend: the first status
    change after a send naming another model carries that model."""
    _a, b = default_and_other_model(api)
    chat = settled_chat(api, "watch direct model switch")
    with SyncWs(api.server, f"{CHATS}/watch") as ws:
        answer = send(
            api,
            chat["id"],
            {"content": text("watch the direct send override"), "model_config_id": b},
        )
        assert answer.status_code == 200, answer.text
        event = watch_event(ws, "status_change", chat["id"])
    assert event["chat"]["last_model_config_id"] == b


def test_watch_chats_status_change_carries_updated_last_model_config_id__queued_promotion(
    api: Contract, scripted: FakeCoderServer
) -> None:
    """TestWatchChatsStatusChangeCarriesUpdatedLastModelConfigID/QueuedPromotion: promoting a
    queued message that names a model announces the chat with that model."""
    _a, b = default_and_other_model(api)
    chat, queued = errored_chat_with_queue(
        api, "queue the promoted model override", model_config_id=b
    )
    with SyncWs(api.server, f"{CHATS}/watch") as ws:
        answer = api.request("POST", f"{CHATS}/{chat['id']}/queue/{queued['id']}/promote")
        assert answer.status_code == 202, answer.text
        event = watch_event(ws, "status_change", chat["id"])
    assert event["chat"]["last_model_config_id"] == b


# -- TestChatMessageWithFileReferences -------------------------------------------------------------


def _stored_user_parts(
    api: Contract, chat_id: str, created: dict[str, Any]
) -> list[list[dict[str, Any]]]:
    page = messages(api, chat_id)
    parts = [m["content"] for m in page["messages"] if m["role"] == "user"]
    if created["queued"]:
        parts += [q["content"] for q in page["queued_messages"]]
    return parts


def _file_reference(name: str, start: int, end: int, content: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {
        "type": "file-reference",
        "file_name": name,
        "start_line": start,
        "end_line": end,
    }
    if content is not None:
        part["content"] = content
    return part


def _has_reference(
    parts: list[dict[str, Any]], name: str, start: int, end: int, content: str
) -> bool:
    return any(
        p.get("type") == "file-reference"
        and p.get("file_name") == name
        and p.get("start_line") == start
        and p.get("end_line") == end
        and (p.get("content") or "") == content
        for p in parts
    )


@pytest.mark.parametrize(
    ("name", "start", "end", "content"),
    [
        ("main.go", 10, 15, "func broken() {}"),
        ("lib/utils.ts", 42, 42, "const x = 1;"),
        ("README.md", 1, 1, None),
        ("server.go", 5, 8, "func main() {\n\tfmt.Println()\n}"),
    ],
    ids=[
        "FileReferenceOnly",
        "FileReferenceSingleLine",
        "FileReferenceWithoutContent",
        "FileReferenceWithCode",
    ],
)
def test_chat_message_with_file_references__single_reference(
    api: Contract, name: str, start: int, end: int, content: str | None
) -> None:
    """TestChatMessageWithFileReferences/FileReferenceOnly, /FileReferenceSingleLine,
    /FileReferenceWithoutContent and /FileReferenceWithCode: a file-reference part is stored
    as such, with its lines and code."""
    chat = api.create_chat("initial message")
    created = send(api, chat["id"], {"content": [_file_reference(name, start, end, content)]})
    assert created.status_code == 200, created.text
    stored = _stored_user_parts(api, chat["id"], created.json())
    assert any(_has_reference(parts, name, start, end, content or "") for parts in stored)


def test_chat_message_with_file_references__interleaved_text_and_file_references(
    api: Contract,
) -> None:
    """TestChatMessageWithFileReferences/InterleavedTextAndFileReferences: six parts stored in
    order with their types."""
    chat = api.create_chat("initial message")
    content = [
        {"type": "text", "text": "Please review these two issues:"},
        _file_reference("a.go", 1, 3, "line1\nline2\nline3"),
        {"type": "text", "text": "first issue"},
        {"type": "text", "text": "and also:"},
        _file_reference("b.go", 10, 10, "return nil"),
        {"type": "text", "text": "second issue"},
    ]
    created = send(api, chat["id"], {"content": content})
    assert created.status_code == 200, created.text

    def same(parts: list[dict[str, Any]]) -> bool:
        if len(parts) != len(content):
            return False
        for got, want in zip(parts, content, strict=True):
            if got["type"] != want["type"]:
                return False
            keys = (
                ("text",)
                if want["type"] == "text"
                else ("file_name", "start_line", "end_line", "content")
            )
            if any(got.get(k) != want[k] for k in keys):
                return False
        return True

    assert any(same(parts) for parts in _stored_user_parts(api, chat["id"], created.json()))


def test_chat_message_with_file_references__empty_file_name(api: Contract) -> None:
    """TestChatMessageWithFileReferences/EmptyFileName."""
    chat = api.create_chat("initial message")
    error = error_of(send(api, chat["id"], {"content": [_file_reference("", 1, 1)]}), 400)
    assert error["message"] == "Invalid input part."
    assert error["detail"] == "content[0].file_name cannot be empty for file-reference."


def test_chat_message_with_file_references__create_chat_with_file_reference(api: Contract) -> None:
    """TestChatMessageWithFileReferences/CreateChatWithFileReference: a chat may start with a
    file reference, and gets a title."""
    answer = api.request(
        "POST",
        CHATS,
        {
            "organization_id": api.server.organization_id,
            "content": [_file_reference("bug.py", 7, 7, "x = None")],
        },
    )
    chat = error_of(answer, 201)
    assert chat["id"] != str(uuid.UUID(int=0))
    assert chat["title"]


# -- TestChatMessageWithFiles ----------------------------------------------------------------------


def test_chat_message_with_files__file_only(api: Contract) -> None:
    """TestChatMessageWithFiles/FileOnly: a message of one file part is accepted."""
    file_id = uploaded_id(api)
    chat = api.create_chat("initial message")
    body = error_of(send(api, chat["id"], {"content": [{"type": "file", "file_id": file_id}]}), 200)
    if body["queued"]:
        assert body["queued_message"] is not None
    else:
        assert body["message"]["role"] == "user"


def test_chat_message_with_files__text_and_file(api: Contract) -> None:
    """TestChatMessageWithFiles/TextAndFile: file parts are returned by id, without their
    bytes."""
    file_id = uploaded_id(api)
    chat = api.create_chat("initial message")
    content = [{"type": "text", "text": "here is an image"}, {"type": "file", "file_id": file_id}]
    body = error_of(send(api, chat["id"], {"content": content}), 200)
    if body["queued"]:
        assert body["queued_message"] is not None
    else:
        assert body["message"]["role"] == "user"
    for message in messages(api, chat["id"])["messages"]:
        for part in message["content"]:
            if part["type"] == "file":
                assert part["file_id"] == file_id
                assert part.get("data") is None


def test_chat_message_with_files__file_only_on_create(api: Contract) -> None:
    """TestChatMessageWithFiles/FileOnlyOnCreate: a chat created with only a file is titled
    "New Chat" and lists the file."""
    file_id = uploaded_id(api)
    answer = api.request(
        "POST",
        CHATS,
        {
            "organization_id": api.server.organization_id,
            "content": [{"type": "file", "file_id": file_id}],
        },
    )
    chat = error_of(answer, 201)
    assert chat["title"] == "New Chat"
    (f,) = chat["files"]
    assert f["id"] == file_id
    assert f["owner_id"] == api.request("GET", "/api/v2/users/me").json()["id"]
    assert f["organization_id"] != str(uuid.UUID(int=0))
    assert f["mime_type"] == "image/png"
    assert f["size_bytes"] == len(PNG)
    assert f["name"] == "test.png"
    assert f["created_at"]


def test_chat_message_with_files__paste_only_on_create(api: Contract) -> None:
    """TestChatMessageWithFiles/PasteOnlyOnCreate: a chat created with only a pasted-text
    attachment takes its fallback title from the paste's first words."""
    file_id = uploaded_id(
        api,
        b"Fix the flaky test in coderd please",
        "text/plain",
        "pasted-text-2026-01-02-03-04-05.txt",
    )
    answer = api.request(
        "POST",
        CHATS,
        {
            "organization_id": api.server.organization_id,
            "content": [{"type": "file", "file_id": file_id}],
        },
    )
    assert error_of(answer, 201)["title"] == "Fix the flaky test in coderd…"


def test_chat_message_with_files__invalid_file_id(api: Contract) -> None:
    """TestChatMessageWithFiles/InvalidFileID."""
    chat = api.create_chat("initial message")
    error = error_of(
        send(api, chat["id"], {"content": [{"type": "file", "file_id": str(uuid.uuid4())}]}), 400
    )
    assert error["message"] == "Invalid input part."
    assert "does not exist" in error["detail"]


def test_chat_message_with_files__files_linked_on_send(api: Contract) -> None:
    """TestChatMessageWithFiles/FilesLinkedOnSend: a file sent in a message is listed on the
    chat."""
    chat = api.create_chat("no files yet")
    file_id = uploaded_id(api, name="linked.png")
    content = [{"type": "text", "text": "here is a file"}, {"type": "file", "file_id": file_id}]
    error_of(send(api, chat["id"], {"content": content}), 200)
    files = chat_of(api, chat["id"])["files"]
    assert [(f["id"], f["name"]) for f in files] == [(file_id, "linked.png")]


def test_chat_message_with_files__dedup_file_ids(api: Contract) -> None:
    """TestChatMessageWithFiles/DedupFileIDs: a file sent twice is listed once."""
    file_id = uploaded_id(api, name="dedup.png")
    chat = api.create_chat(
        "first mention",
        content=[{"type": "text", "text": "first mention"}, {"type": "file", "file_id": file_id}],
    )
    content = [{"type": "text", "text": "same file again"}, {"type": "file", "file_id": file_id}]
    error_of(send(api, chat["id"], {"content": content}), 200)
    assert [f["id"] for f in chat_of(api, chat["id"])["files"]] == [file_id]


def test_chat_message_with_files__file_cap_evicts_oldest(api: Contract) -> None:
    """TestChatMessageWithFiles/FileCapEvictsOldest (the default cap): linking one file past
    the cap drops the oldest; sending a linked file again changes nothing."""
    ids = upload_many(api, DEFAULT_ATTACHMENT_CAP + 1, "file")
    capped, extra = ids[:-1], ids[-1]
    chat = api.create_chat("max files", content=file_parts(capped, "max files"))
    assert len(chat["files"]) == DEFAULT_ATTACHMENT_CAP
    settle(api, chat["id"])
    error_of(send(api, chat["id"], {"content": file_parts([extra], "one too many")}), 200)
    linked = [f["id"] for f in chat_of(api, chat["id"])["files"]]
    assert len(linked) == DEFAULT_ATTACHMENT_CAP
    assert extra in linked
    assert capped[0] not in linked
    settle(api, chat["id"])
    error_of(
        send(api, chat["id"], {"content": file_parts([capped[1]], "re-reference existing")}), 200
    )
    assert [f["id"] for f in chat_of(api, chat["id"])["files"]] == linked


def test_chat_message_with_files__file_cap_on_create(api: Contract) -> None:
    """TestChatMessageWithFiles/FileCapOnCreate (the default cap): a create with more files
    than the cap is 400 and makes no chat."""
    ids = upload_many(api, DEFAULT_ATTACHMENT_CAP + 1, "create")
    answer = api.request(
        "POST",
        CHATS,
        {
            "organization_id": api.server.organization_id,
            "content": file_parts(ids, "over cap on create"),
        },
    )
    error = error_of(answer, 400)
    assert "attachment limit" in error["message"]
    assert f"at most {DEFAULT_ATTACHMENT_CAP} attachments" in error["detail"]
    assert api.request("GET", CHATS).json() == []
