"""Contract cases from the server's ``coderd/exp_chats_test.go``, first part: from
``TestPostChats`` to ``TestPatchChat``.

Each case sends what the server's test sends and asserts what it asserts over HTTP and the
watch WebSocket. The fake serves one user (the deployment's first user, an owner) in one
organization, so where a server test acts as an organization member the case acts as that
user when the point of the test does not depend on the role.

Not restated
------------

Needs more organizations than the fake's one:

* TestPostChats/SuccessNonDefaultOrgUsesOrgDefault: a second organization and its default model.
* TestPostChats/NonDefaultOrgDoesNotUseDeploymentDefault: a second organization.
* TestPostChats/DisabledLocalDefaultDoesNotUseDefaultOrgDefault: a second organization.
* TestPostChats/DefaultOrgExplicitModelRejectedForNonDefaultOrg: a second organization.
* TestPostChats/ThirdOrgExplicitModelRejected: three organizations.
* TestPostChats/MCPServerIDsCrossOrgRejected: MCP servers of a second organization.
* TestPostChats/MCPServerIDsThirdOrgRejected: MCP servers of a third organization.
* TestPostChats/CrossOrgWorkspaceMismatch: a workspace in a second organization.
* TestPostChats_OwnerID/OwnerNotInOrganization: a second organization.
* TestPatchChat/WorkspaceBinding/RejectsCrossOrgWorkspaceBinding: a second organization.
* TestListChatModels/NonDefaultOrgIncludesOnlyLocalModels: more organizations.
* TestListChatModels/IncludesOnlyDefaultOrganizationModels: a second organization.

Needs a second user, roles or sharing (the fake has one user):

* TestPostChats/MemberCanCreateChat, TestPostChats/AgentsAccessDefaultRole (roles).
* TestPostChats/WorkspaceNotAccessible, TestPostChats/WorkspaceAccessibleButNoSSH.
* TestPostChats/DeniedSameOrganizationDefaultIsRejected,
  TestPostChats/DeniedSameOrganizationExplicitModelIsRejected (model ACLs).
* TestPostChats_OwnerID/OwnerCreatesForMember, OwnerServiceAccountCreatesForMember,
  WorkspaceOwnedByMember, WorkspaceNotAccessibleToOwner, ModelConfigNotAccessibleToOwner,
  OrgAdminForbidden, MemberForbidden, OwnerSuspended, OwnerWithoutChatPermission,
  OwnerWithCreateOnlyChatPermission.
* TestListChats/SourceCreatedByMeAndSharedWithMeExcludesUnsharedReadableChats (sharing).
* TestListChats/OrgMemberCanAccessOwnChats (member role).
* TestListChatModels/DeniedSameOrganizationEnabledModelIsHidden (model ACLs).
* TestListChatModels/UserCredentialsAreCallerIsolated (two users' provider keys).
* TestListChatModelConfigs/OrganizationMemberSeesReadableModels (model ACLs).
* TestGetChat/NotFoundForDifferentUser, TestGetChatUserPrompts/NotFoundForOtherUsers.

Needs the AI provider and model configuration administration routes, which the fake does not
serve (it lists its configured models only):

* TestListChatModels/CopilotOnlyUnsupported, UserOnlyProviderRequiresUserKey,
  CentralAndUserWithFallback, SameTypeProvidersUseExactCredentialStatus,
  DisabledProvidersAndModelsRemainVisible.
* TestPostChats/ProviderDisabledModelConfigRejected, ProviderDisabledDefaultModelRejected.
* TestPostChats/MCPServerIDsDisabledConfigRejected,
  TestPostChats/MCPServerIDsPersistedDisabledStillSendable (MCP server administration).
* TestChats_ForceOnMCPServerEnforced (MCP server administration, ``force_on``).
* TestUserAIProviderKeys (all seven cases: user provider keys).
* TestListChatModelConfigs/BedrockDescriptorReportsEffectiveCredentials.
* TestGetChatModel (all four cases), TestCreateChatModelConfig (all cases),
  TestUpdateChatModel (all cases), TestDeleteChatModelConfig (all cases).

Asserts database rows or other internals only:

* TestPostChats/WithReasoningEffort, WithPerChatSystemPrompt, PerChatSystemPromptEmpty.
* TestGetChat/ToolCreatedFilesLinked.
* TestPatchChat/Title/RecordsUserSourceWithoutChangingUpdatedAt (rewrites rows with SQL).

Needs server features the fake does not model:

* TestListChats/DiffURLFilter (seven cases) and TestWatchChats/
  DiffStatusChangeIncludesDiffStatusAndOmitsInjectedContext: git diff status.
* TestListChats/AutomationFilter: automations.
* TestListChats_Search/MatchesTitleAndMessageBody, NoSearchableWordsReturnsEmpty,
  ComposesWithRepoFilterAndArchivedDefault: full-text search with stemming, stop words and
  repository filters (the fake ignores ``search:``).
* TestGetChatUserPrompts/NewestFirstFiltering: assistant, model-only, deleted and legacy
  message rows that the API cannot write.

Where the fake differs, left to the cases that specify the behaviour in full:

* TestPostChats/EmptyContent: the server creates an idle (``waiting``) chat from empty
  content; the fake refuses it ("Content is required."). TestPostChats_EmptyContent, later in
  the same server file, describes the whole behaviour.
* TestGetChatUserPrompts/EmptyResultIsJSONArray: needs a chat without messages (empty
  content, as above) and an assistant-only chat the API cannot write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import FakeModelSpec

from ..fake.netclients import SyncWs
from .conftest import CHATS, Contract

WATCH = f"{CHATS}/watch"
SETTLED = {"waiting", "error", "requires_action", "paused"}


@contextmanager
def served(**config: Any) -> Iterator[Contract]:
    """A ``Contract`` on a fake configured with ``config``."""
    with FakeCoderServer(chunk_delay=0, **config) as server:
        headers = {"Coder-Session-Token": server.token}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
            yield Contract(server, http)


def user_id(api: Contract) -> str:
    return str(api.server.model.user_id)


def default_model_id(api: Contract) -> str:
    models = api.request("GET", f"/api/v2/organizations/{api.server.organization_id}/chats/models")
    return next(str(m["id"]) for m in models.json()["models"] if m["is_default"])


def get_chat(api: Contract, chat_id: str) -> dict[str, Any]:
    answer = api.request("GET", f"{CHATS}/{chat_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def settle(api: Contract, chat_id: str) -> dict[str, Any]:
    """The chat once its turn is over (the server's tests wait the same way)."""
    deadline = time.monotonic() + 10
    while True:
        chat = get_chat(api, chat_id)
        if chat["status"] in SETTLED or time.monotonic() > deadline:
            return chat
        time.sleep(0.01)


def send(api: Contract, chat_id: str, text: str, **fields: Any) -> httpx.Response:
    body = {"content": [{"type": "text", "text": text}], **fields}
    return api.request("POST", f"{CHATS}/{chat_id}/messages", body)


def create_body(api: Contract, text: str = "hello", **fields: Any) -> dict[str, Any]:
    return {
        "organization_id": api.server.organization_id,
        "content": [{"type": "text", "text": text}],
        **fields,
    }


def spawn(api: Contract, root_id: str, prompt: str) -> str:
    return str(api.server.model.spawn_child(root_id, prompt, time.monotonic()).id)


def list_chats(api: Contract, **params: Any) -> list[dict[str, Any]]:
    answer = api.request("GET", CHATS, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def ids(chats: list[dict[str, Any]]) -> list[str]:
    return [str(c["id"]) for c in chats]


def error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return answer.json()  # type: ignore[no-any-return]


def watch_until(ws: SyncWs, found: Any) -> list[dict[str, Any]]:
    """Read watch events until ``found(events)`` holds; the events read so far."""
    ws.wait(lambda raw: found(raw.watch_events()))
    return ws.raw.watch_events()


# -- TestPostChats -------------------------------------------------------------------------


def test_post_chats__success(api: Contract) -> None:
    """TestPostChats/Success: a created chat belongs to the caller, runs the default model,
    is titled from its prompt, is its own root, and its prompt is among its messages."""
    chat = api.create_chat("hello from chats route tests")
    assert uuid.UUID(chat["id"]) != uuid.UUID(int=0)
    assert chat["owner_id"] == user_id(api)
    assert chat["last_model_config_id"] == default_model_id(api)
    assert chat["title"] == "hello from chats route tests"
    assert chat["created_at"] and chat["updated_at"]
    assert chat.get("workspace_id") is None
    assert chat["root_chat_id"] == chat["id"]
    assert get_chat(api, chat["id"])["id"] == chat["id"]
    messages = api.request("GET", f"{CHATS}/{chat['id']}/messages").json()["messages"]
    assert any(
        m["role"] == "user"
        and any(
            p["type"] == "text" and p.get("text") == "hello from chats route tests"
            for p in m["content"]
        )
        for m in messages
    )


def test_post_chats__mcp_server_ids_duplicates_normalized() -> None:
    """TestPostChats/MCPServerIDsDuplicatesNormalized: a repeated MCP server id is kept once,
    on create and on a later send."""
    mcp = str(uuid.uuid4())
    with served(mcp_server_ids=[mcp]) as api:
        chat = api.create_chat("chat with a duplicated MCP server ID", mcp_server_ids=[mcp, mcp])
        assert chat["mcp_server_ids"] == [mcp]
        settle(api, chat["id"])
        answer = send(
            api, chat["id"], "update to a duplicated MCP server ID", mcp_server_ids=[mcp, mcp]
        )
        assert answer.status_code in (200, 201, 202), answer.text
        assert get_chat(api, chat["id"])["mcp_server_ids"] == [mcp]


def test_post_chats__rejects_invalid_reasoning_effort(api: Contract) -> None:
    """TestPostChats/RejectsInvalidReasoningEffort: an effort outside the known values is
    refused, the detail naming the value and the allowed ones."""
    answer = api.request("POST", CHATS, create_body(api, reasoning_effort=" HIGH "))
    body = error(answer, 400)
    assert body["message"] == "Invalid reasoning_effort value."
    assert 'Invalid value " HIGH "' in body["detail"]
    assert "must be one of none, minimal, low, medium, high, xhigh, max" in body["detail"]


def test_post_chats__hides_system_prompt_messages(api: Contract) -> None:
    """TestPostChats/HidesSystemPromptMessages: no system message is listed."""
    chat = api.create_chat("verify hidden system prompt")
    settle(api, chat["id"])
    messages = api.request("GET", f"{CHATS}/{chat['id']}/messages").json()["messages"]
    assert messages
    assert all(m["role"] != "system" for m in messages)


def test_post_chats__disabled_model_config_rejected() -> None:
    """TestPostChats/DisabledModelConfigRejected: a disabled model config cannot be named."""
    models = (
        FakeModelSpec(model="gpt-4o", display_name="GPT-4o", is_default=True),
        FakeModelSpec(model="gpt-4o-disabled", display_name="Disabled", enabled=False),
    )
    with served(models=models) as api:
        listed = api.request(
            "GET", f"/api/v2/organizations/{api.server.organization_id}/chats/models"
        ).json()["models"]
        disabled = next(m["id"] for m in listed if not m["enabled"])
        answer = api.request("POST", CHATS, create_body(api, model_config_id=disabled))
        body = error(answer, 400)
        assert body["message"] == "Invalid model_config_id: model config not found or disabled."


def test_post_chats__workspace_not_found(api: Contract) -> None:
    """TestPostChats/WorkspaceNotFound: an unknown workspace is refused as inaccessible."""
    answer = api.request("POST", CHATS, create_body(api, workspace_id=str(uuid.uuid4())))
    body = error(answer, 400)
    assert body["message"] == "Workspace not found or you do not have access to this resource"


def test_post_chats__workspace_selects_first_agent() -> None:
    """TestPostChats/WorkspaceSelectsFirstAgent: a chat created on the caller's workspace is
    bound to it and runs the default model."""
    workspace = str(uuid.uuid4())
    with served(workspace_ids=[workspace]) as api:
        chat = api.create_chat("hello", workspace_id=workspace)
        assert chat["workspace_id"] == workspace
        assert chat["last_model_config_id"] == default_model_id(api)


def test_post_chats__missing_default_model_config() -> None:
    """TestPostChats/MissingDefaultModelConfig: with no model configured, a chat cannot be
    created, and the answer says whom to ask."""
    with served(models=()) as api:
        body = error(api.request("POST", CHATS, create_body(api)), 400)
        assert body["message"] == "No chat model is available in this organization."
        assert (
            body["detail"]
            == "Ask an organization administrator to configure and enable a chat model."
        )


def test_post_chats__empty_text(api: Contract) -> None:
    """TestPostChats/EmptyText: a text part of blanks is refused, naming the part."""
    answer = api.request("POST", CHATS, create_body(api, "   "))
    body = error(answer, 400)
    assert body["message"] == "Invalid input part."
    assert body["detail"] == "content[0].text cannot be empty."


def test_post_chats__unsupported_part_type(api: Contract) -> None:
    """TestPostChats/UnsupportedPartType: a part of an unknown type is refused, naming it."""
    body = create_body(api)
    body["content"] = [{"type": "image", "text": "hello"}]
    answer = error(api.request("POST", CHATS, body), 400)
    assert answer["message"] == "Invalid input part."
    assert answer["detail"] == 'content[0].type "image" is not supported.'


def test_post_chats__nil_organization_id(api: Contract) -> None:
    """TestPostChats/NilOrganizationID: the nil organization id is refused."""
    body = create_body(api, organization_id=str(uuid.UUID(int=0)))
    assert error(api.request("POST", CHATS, body), 400)["message"] == (
        "organization_id is required."
    )


def test_post_chats__non_member_organization(api: Contract) -> None:
    """TestPostChats/NonMemberOrganization: an organization the caller is not a member of is
    forbidden."""
    body = create_body(api, organization_id=str(uuid.uuid4()))
    assert error(api.request("POST", CHATS, body), 403)["message"] == (
        "You are not a member of the specified organization."
    )


# -- TestPostChats_OwnerID -----------------------------------------------------------------


def test_post_chats_owner_id__owner_id_nil(api: Contract) -> None:
    """TestPostChats_OwnerID/OwnerIDNil: the nil owner id is refused."""
    body = create_body(api, "hello on behalf of another user", owner_id=str(uuid.UUID(int=0)))
    assert error(api.request("POST", CHATS, body), 400)["message"] == (
        "Invalid owner_id: must be a user ID or omitted."
    )


def test_post_chats_owner_id__owner_id_is_caller(api: Contract) -> None:
    """TestPostChats_OwnerID/OwnerIDIsCaller: naming oneself as the owner is the same as
    naming no owner."""
    chat = api.create_chat("hello on behalf of another user", owner_id=user_id(api))
    assert chat["owner_id"] == user_id(api)


def test_post_chats_owner_id__owner_not_found(api: Contract) -> None:
    """TestPostChats_OwnerID/OwnerNotFound: an owner who is no user is refused as not an
    active member."""
    body = create_body(api, "hello on behalf of another user", owner_id=str(uuid.uuid4()))
    assert error(api.request("POST", CHATS, body), 400)["message"] == (
        "Chat owner must be an active member of the organization."
    )


# -- TestPostChats_ClientType --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        pytest.param(None, "api", id="default_is_api"),
        pytest.param("api", "api", id="explicit_api"),
        pytest.param("ui", "ui", id="explicit_ui"),
    ],
)
def test_post_chats_client_type(api: Contract, sent: str | None, expected: str) -> None:
    """TestPostChats_ClientType/DefaultIsAPI, ExplicitAPI, ExplicitUI: the client type is
    ``api`` unless ``ui`` is sent, on the created chat and when read back."""
    fields = {} if sent is None else {"client_type": sent}
    chat = api.create_chat("client type test", **fields)
    assert chat["client_type"] == expected
    assert get_chat(api, chat["id"])["client_type"] == expected


def test_post_chats_client_type__invalid_client_type(api: Contract) -> None:
    """TestPostChats_ClientType/InvalidClientType: an unknown client type is refused."""
    body = create_body(api, "bad client type", client_type="bogus")
    assert "Invalid client_type" in error(api.request("POST", CHATS, body), 400)["message"]


# -- TestListChats -------------------------------------------------------------------------


def test_list_chats__success(api: Contract) -> None:
    """TestListChats/Success: the caller's chats, each its own root with no parent or
    workspace, newest activity first (the other user's half needs a second user)."""
    first = api.create_chat("first owner chat")
    second = api.create_chat("second owner chat")
    chats = list_chats(api)
    assert len(chats) == 2
    by_id = {c["id"]: c for c in chats}
    for chat in chats:
        assert chat["owner_id"] == user_id(api)
        assert chat["last_model_config_id"] == default_model_id(api)
        assert chat["status"] in ("running", "error", "waiting")
        assert chat["created_at"] and chat["updated_at"]
        assert chat.get("parent_chat_id") is None
        assert chat.get("workspace_id") is None
        assert chat["root_chat_id"] == chat["id"]
        assert chat["diff_status"]["chat_id"] == chat["id"]
    assert by_id[first["id"]]["title"] == "first owner chat"
    assert by_id[second["id"]]["title"] == "second owner chat"
    stamps = [c["updated_at"] for c in chats]
    assert stamps == sorted(stamps, reverse=True)


def test_list_chats__unauthenticated(server: FakeCoderServer) -> None:
    """TestListChats/Unauthenticated: without a session the list is 401."""
    assert httpx.get(server.url + CHATS).status_code == 401


def _settled_chats(api: Contract, count: int, prefix: str) -> list[str]:
    made = []
    for i in range(count):
        chat = api.create_chat(f"{prefix}-{i}")
        settle(api, chat["id"])
        made.append(chat["id"])
    return made


def test_list_chats__pagination(api: Contract) -> None:
    """TestListChats/Pagination: pages of two by ``after_id`` cover the five chats once;
    ``offset`` skips; no limit lists them all."""
    created = _settled_chats(api, 5, "chat")
    page1 = list_chats(api, limit=2)
    assert len(page1) == 2
    page2 = list_chats(api, limit=2, after_id=page1[-1]["id"])
    assert len(page2) == 2
    assert not set(ids(page1)) & set(ids(page2))
    page3 = list_chats(api, limit=2, after_id=page2[-1]["id"])
    assert len(page3) == 1
    assert set(ids(page1 + page2 + page3)) == set(created)
    assert len(list_chats(api, offset=3, limit=2)) == 2
    assert len(list_chats(api)) == 5


def test_list_chats__pinned_on_first_page(api: Contract) -> None:
    """TestListChats/PinnedOnFirstPage: a pinned chat leads the first page even when newer
    chats would fill it."""
    pinned = api.create_chat("pinned-chat")["id"]
    for i in range(51):
        api.create_chat(f"filler-{i}")
    assert api.request("PATCH", f"{CHATS}/{pinned}", {"pin_order": 1}).status_code == 204
    page1 = list_chats(api, limit=50)
    assert page1[0]["id"] == pinned


def test_list_chats__cursor_with_pins(api: Contract) -> None:
    """TestListChats/CursorWithPins: paging by ``after_id`` through pinned and unpinned chats
    lists each once, the pinned first in pin order."""
    created = _settled_chats(api, 5, "cursor-pin-chat")
    for chat_id in created[:2]:
        assert api.request("PATCH", f"{CHATS}/{chat_id}", {"pin_order": 1}).status_code == 204
    listed: list[dict[str, Any]] = []
    after: str | None = None
    for _ in range(5 // 2 + 2):
        params: dict[str, Any] = {"limit": 2}
        if after is not None:
            params["after_id"] = after
        page = list_chats(api, **params)
        if not page:
            break
        listed += page
        after = page[-1]["id"]
    assert len(ids(listed)) == len(set(ids(listed))) == 5
    pins = [c["pin_order"] > 0 for c in listed]
    assert pins == sorted(pins, reverse=True)
    assert ids(listed)[:2] == created[:2]


def test_list_chats__child_chats_embedded_not_standalone(api: Contract) -> None:
    """TestListChats/ChildChatsEmbeddedNotStandalone: sub-agent chats are listed inside their
    root, newest first, and not on their own; a chat without any has an empty list."""
    parent = api.create_chat("root chat with children")["id"]
    child1 = spawn(api, parent, "child one")
    child2 = spawn(api, parent, "child two")
    standalone = api.create_chat("standalone root chat")["id"]
    chats = list_chats(api)
    assert all(c.get("parent_chat_id") is None for c in chats)
    assert {parent, standalone} <= set(ids(chats))
    assert child1 not in ids(chats) and child2 not in ids(chats)
    root = next(c for c in chats if c["id"] == parent)
    assert ids(root["children"]) == [child2, child1]
    for child in root["children"]:
        assert child["parent_chat_id"] == parent
        assert child["root_chat_id"] == parent
    assert next(c for c in chats if c["id"] == standalone)["children"] == []


def test_list_chats__pagination_counts_only_root_chats(api: Contract) -> None:
    """TestListChats/PaginationCountsOnlyRootChats: the limit counts root chats, each listed
    with its sub-agent chats."""
    for i in range(3):
        parent = api.create_chat(f"parent {i}")["id"]
        for j in range(2):
            spawn(api, parent, f"child {i}-{j}")
    chats = list_chats(api, limit=2)
    assert len(chats) == 2
    for chat in chats:
        assert chat.get("parent_chat_id") is None
        assert len(chat["children"]) == 2


# -- TestListChatModels, TestListChatModelConfigs ------------------------------------------


def _models(api: Contract) -> httpx.Response:
    return api.request("GET", f"/api/v2/organizations/{api.server.organization_id}/chats/models")


def test_list_chat_models__success(api: Contract) -> None:
    """TestListChatModels/Success: the default model is listed and its provider is
    available."""
    body = _models(api).json()
    model = next(m for m in body["models"] if m["is_default"])
    provider = next(p for p in body["providers"] if p["id"] == model["ai_provider_id"])
    assert provider["available"] is True


def test_list_chat_models__unauthenticated(server: FakeCoderServer) -> None:
    """TestListChatModels/Unauthenticated: without a session the listing is 401."""
    url = f"{server.url}/api/v2/organizations/{server.organization_id}/chats/models"
    assert httpx.get(url).status_code == 401


def test_list_chat_models__supported_provider_has_no_unsupported_entry(api: Contract) -> None:
    """TestListChatModels/SupportedProviderHasNoUnsupportedEntry: no unsupported provider is
    reported when every provider is supported."""
    assert _models(api).json()["unsupported_providers"] == []


def test_list_chat_models__central_only_provider_available(api: Contract) -> None:
    """TestListChatModels/CentralOnlyProviderAvailable: a provider with a deployment key is
    available to the caller."""
    body = _models(api).json()
    for model in body["models"]:
        provider = next(p for p in body["providers"] if p["id"] == model["ai_provider_id"])
        assert provider["available"] is True


def test_list_chat_model_configs__success(api: Contract) -> None:
    """TestListChatModelConfigs/Success: models and providers are listed, none unsupported,
    the default model with its provider, name and default mark."""
    body = _models(api).json()
    assert body["models"] and body["providers"]
    assert body["unsupported_providers"] == []
    default = [m for m in body["models"] if m["is_default"]]
    assert len(default) == 1
    assert default[0]["ai_provider_id"] in {p["id"] for p in body["providers"]}
    assert default[0]["model"]


def test_list_chat_model_configs__collection_includes_disabled_model_configs() -> None:
    """TestListChatModelConfigs/CollectionIncludesDisabledModelConfigs: a disabled model is
    still listed, marked disabled (the fake's model is configured, not created)."""
    models = (
        FakeModelSpec(model="gpt-4o", display_name="GPT-4o", is_default=True),
        FakeModelSpec(model="gpt-4o-disabled", display_name="GPT-4o Disabled", enabled=False),
    )
    with served(models=models) as api:
        listed = _models(api).json()["models"]
        assert any(m["model"] == "gpt-4o-disabled" and m["enabled"] is False for m in listed)


# -- TestListChats_Search ------------------------------------------------------------------


def test_list_chats_search__no_search_term_unchanged(api: Contract) -> None:
    """TestListChats_Search/NoSearchTermUnchanged: without a search term every chat is
    listed."""
    chat = api.create_chat("kubernetes upgrade notes")["id"]
    other = api.create_chat("unrelated chat")["id"]
    assert {chat, other} <= set(ids(list_chats(api)))


def test_list_chats_search__mutual_exclusion_with_title_returns_400(api: Contract) -> None:
    """TestListChats_Search/MutualExclusionWithTitleReturns400: ``search:`` and ``title:``
    together are refused, the one validation on ``search`` naming ``title``."""
    answer = api.request("GET", CHATS, params={"q": "search:alpha title:beta"})
    body = error(answer, 400)
    assert len(body["validations"]) == 1
    assert body["validations"][0]["field"] == "search"
    assert '"title"' in body["validations"][0]["detail"]


# -- TestWatchChats ------------------------------------------------------------------------


def test_watch_chats__success(api: Contract) -> None:
    """TestWatchChats/Success: a created chat is announced on the watch stream."""
    with SyncWs(api.server, WATCH) as ws:
        chat = api.create_chat("watch route created event")
        watch_until(
            ws,
            lambda events: any(
                e["kind"] == "created" and e["chat"]["id"] == chat["id"] for e in events
            ),
        )


def test_watch_chats__created_event_includes_all_chat_fields(api: Contract) -> None:
    """TestWatchChats/CreatedEventIncludesAllChatFields: the created event carries the chat
    as created, running."""
    with SyncWs(api.server, WATCH) as ws:
        chat = api.create_chat("watch route fields completeness test")
        events = watch_until(
            ws,
            lambda events: any(
                e["kind"] == "created" and e["chat"]["id"] == chat["id"] for e in events
            ),
        )
    got = next(e["chat"] for e in events if e["kind"] == "created")
    assert got["id"] == chat["id"]
    assert got["owner_id"] == chat["owner_id"]
    assert got["last_model_config_id"] == default_model_id(api)
    assert got["title"] == chat["title"]
    assert got["status"] == "running"
    assert got["root_chat_id"] == chat["id"]
    assert got["created_at"] and got["updated_at"]


def test_watch_chats__archive_and_unarchive_emit_events_for_descendants(api: Contract) -> None:
    """TestWatchChats/ArchiveAndUnarchiveEmitEventsForDescendants: archiving a root announces
    it and each sub-agent chat as deleted and archived; unarchiving as created and not."""
    parent = api.create_chat("watch root chat")["id"]
    children = [spawn(api, parent, "watch child 1"), spawn(api, parent, "watch child 2")]
    for chat_id in (parent, *children):
        settle(api, chat_id)
    family = {parent, *children}

    def announced(kind: str, events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {e["chat"]["id"]: e["chat"] for e in events if e["kind"] == kind}

    with SyncWs(api.server, WATCH) as ws:
        assert api.request("PATCH", f"{CHATS}/{parent}", {"archived": True}).status_code == 204
        events = watch_until(ws, lambda ev: set(announced("deleted", ev)) >= family)
        assert all(announced("deleted", events)[c]["archived"] is True for c in family)
        assert api.request("PATCH", f"{CHATS}/{parent}", {"archived": False}).status_code == 204
        events = watch_until(ws, lambda ev: set(announced("created", ev)) >= family)
        assert all(announced("created", events)[c]["archived"] is False for c in family)


def test_watch_chats__unauthenticated(server: FakeCoderServer) -> None:
    """TestWatchChats/Unauthenticated: the watch route without a session is 401."""
    assert httpx.get(server.url + WATCH).status_code == 401


# -- TestGetChat ---------------------------------------------------------------------------


def test_get_chat__success(api: Contract) -> None:
    """TestGetChat/Success: the chat reads back with its owner, model and title; its
    messages, none of them system ones, include the prompt, and nothing is queued."""
    created = api.create_chat("get chat route payload")
    chat = get_chat(api, created["id"])
    assert chat["id"] == created["id"]
    assert chat["owner_id"] == user_id(api)
    assert chat["last_model_config_id"] == default_model_id(api)
    assert chat["title"] == "get chat route payload"
    assert chat["created_at"] and chat["updated_at"]
    settle(api, created["id"])
    body = api.request("GET", f"{CHATS}/{created['id']}/messages").json()
    assert body["messages"]
    assert body["queued_messages"] == []
    assert all(m["chat_id"] == created["id"] for m in body["messages"])
    assert all(m["role"] != "system" for m in body["messages"])
    assert any(
        m["role"] == "user" and any(p.get("text") == "get chat route payload" for p in m["content"])
        for m in body["messages"]
    )


def test_get_chat__ai_gateway_disabled(api: Contract) -> None:
    """TestGetChat/AIGatewayDisabled: with the chat daemon off, a chat is still read (the
    fake's chat is created before the daemon is turned off, not seeded)."""
    created = api.create_chat("ai gateway disabled chat")
    settle(api, created["id"])
    model = default_model_id(api)
    api.server.faults.chatd_disabled = True
    chat = get_chat(api, created["id"])
    assert chat["id"] == created["id"]
    assert chat["owner_id"] == user_id(api)
    assert chat["last_model_config_id"] == model
    assert chat["title"] == "ai gateway disabled chat"


def test_get_chat__files_hydrated(api: Contract) -> None:
    """TestGetChat/FilesHydrated: a chat lists the files of its prompt with their
    metadata."""
    png = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) + bytes(64)
    uploaded = api.request(
        "POST",
        f"{CHATS}/files",
        params={"organization": api.server.organization_id},
        content=png,
        headers={
            "Content-Type": "image/png",
            "Content-Disposition": 'attachment; filename="hydrated.png"',
        },
    )
    assert uploaded.status_code == 201, uploaded.text
    file_id = uploaded.json()["id"]
    body = create_body(api, "check file hydration")
    body["content"].append({"type": "file", "file_id": file_id})
    created = api.request("POST", CHATS, body)
    assert created.status_code == 201, created.text
    files = get_chat(api, created.json()["id"])["files"]
    assert len(files) == 1
    assert files[0]["id"] == file_id
    assert files[0]["owner_id"] == user_id(api)
    assert uuid.UUID(files[0]["organization_id"]) != uuid.UUID(int=0)
    assert files[0]["mime_type"] == "image/png"
    assert files[0]["name"] == "hydrated.png"
    assert files[0]["created_at"]


def test_get_chat__get_chat_embeds_children(api: Contract) -> None:
    """TestGetChat/GetChatEmbedsChildren: a root chat embeds its sub-agent chat, which has
    none of its own; archived, the root still embeds its archived child."""
    parent = api.create_chat("parent for getChat")["id"]
    settle(api, parent)
    child = spawn(api, parent, "child for getChat")
    root = get_chat(api, parent)
    assert ids(root["children"]) == [child]
    assert root["children"][0]["parent_chat_id"] == parent
    assert get_chat(api, child)["children"] == []
    settle(api, child)
    assert api.request("PATCH", f"{CHATS}/{parent}", {"archived": True}).status_code == 204
    archived = get_chat(api, parent)
    assert archived["archived"] is True
    assert ids(archived["children"]) == [child]
    assert archived["children"][0]["archived"] is True


# -- TestGetChatUserPrompts ----------------------------------------------------------------


def test_get_chat_user_prompts__limit_clamps_results(api: Contract) -> None:
    """TestGetChatUserPrompts/LimitClampsResults: ``limit`` keeps the newest prompts, newest
    first."""
    chat = api.create_chat("prompt 0")["id"]
    settle(api, chat)
    for i in range(1, 5):
        assert send(api, chat, f"prompt {i}").status_code in (200, 201, 202)
        settle(api, chat)
    answer = api.request("GET", f"{CHATS}/{chat}/prompts", params={"limit": 2})
    assert [p["text"] for p in answer.json()["prompts"]] == ["prompt 4", "prompt 3"]


def test_get_chat_user_prompts__invalid_limit_rejected(api: Contract) -> None:
    """TestGetChatUserPrompts/InvalidLimitRejected: a limit over the maximum is refused."""
    chat = api.create_chat("prompts invalid limit test")["id"]
    answer = api.request("GET", f"{CHATS}/{chat}/prompts", params={"limit": 5000})
    assert answer.status_code == 400


# -- TestPatchChat -------------------------------------------------------------------------


def test_patch_chat__plan_mode__set_to_plan(api: Contract) -> None:
    """TestPatchChat/PlanMode/SetToPlan: plan mode is set."""
    chat = api.create_chat("set plan mode")["id"]
    assert api.request("PATCH", f"{CHATS}/{chat}", {"plan_mode": "plan"}).status_code == 204
    assert get_chat(api, chat)["plan_mode"] == "plan"


def test_patch_chat__plan_mode__clear(api: Contract) -> None:
    """TestPatchChat/PlanMode/Clear: the empty plan mode clears it."""
    chat = api.create_chat("clear plan mode")["id"]
    assert api.request("PATCH", f"{CHATS}/{chat}", {"plan_mode": "plan"}).status_code == 204
    assert api.request("PATCH", f"{CHATS}/{chat}", {"plan_mode": ""}).status_code == 204
    assert not get_chat(api, chat).get("plan_mode")


def test_patch_chat__plan_mode__rejects_invalid_value(api: Contract) -> None:
    """TestPatchChat/PlanMode/RejectsInvalidValue: an unknown plan mode is refused."""
    chat = api.create_chat("invalid plan mode")["id"]
    answer = api.request("PATCH", f"{CHATS}/{chat}", {"plan_mode": "invalid"})
    assert error(answer, 400)["message"] == "Invalid plan_mode value."


def test_patch_chat__workspace_binding__bind_existing_external_workspace() -> None:
    """TestPatchChat/WorkspaceBinding/BindExistingExternalWorkspace: a chat is bound to the
    caller's workspace."""
    workspace = str(uuid.uuid4())
    with served(workspace_ids=[workspace]) as api:
        chat = api.create_chat("bind workspace")["id"]
        answer = api.request("PATCH", f"{CHATS}/{chat}", {"workspace_id": workspace})
        assert answer.status_code == 204, answer.text
        assert get_chat(api, chat)["workspace_id"] == workspace


def test_patch_chat__workspace_binding__workspace_not_found(api: Contract) -> None:
    """TestPatchChat/WorkspaceBinding/WorkspaceNotFound: an unknown workspace is refused as
    inaccessible."""
    chat = api.create_chat("missing workspace")["id"]
    answer = api.request("PATCH", f"{CHATS}/{chat}", {"workspace_id": str(uuid.uuid4())})
    assert error(answer, 400)["message"] == (
        "Workspace not found or you do not have access to this resource"
    )


def test_patch_chat__workspace_binding__clear_workspace_binding() -> None:
    """TestPatchChat/WorkspaceBinding/ClearWorkspaceBinding: the nil workspace id unbinds the
    chat from its workspace, build and agent."""
    workspace = str(uuid.uuid4())
    with served(workspace_ids=[workspace]) as api:
        chat = api.create_chat("clear workspace binding")["id"]
        path = f"{CHATS}/{chat}"
        assert api.request("PATCH", path, {"workspace_id": workspace}).status_code == 204
        nil = str(uuid.UUID(int=0))
        assert api.request("PATCH", path, {"workspace_id": nil}).status_code == 204
        updated = get_chat(api, chat)
        assert updated.get("workspace_id") is None
        assert updated.get("build_id") is None
        assert updated.get("agent_id") is None


def test_patch_chat__title__rename(api: Contract) -> None:
    """TestPatchChat/Title/Rename: a settled chat is renamed."""
    chat = api.create_chat("original title")["id"]
    settle(api, chat)
    assert api.request("PATCH", f"{CHATS}/{chat}", {"title": "renamed title"}).status_code == 204
    assert get_chat(api, chat)["title"] == "renamed title"


def test_patch_chat__title__trims_whitespace(api: Contract) -> None:
    """TestPatchChat/Title/TrimsWhitespace: a new title is stored trimmed."""
    chat = api.create_chat("before trim")["id"]
    settle(api, chat)
    answer = api.request("PATCH", f"{CHATS}/{chat}", {"title": "   padded title   "})
    assert answer.status_code == 204
    assert get_chat(api, chat)["title"] == "padded title"


def test_patch_chat__title__rejects_empty(api: Contract) -> None:
    """TestPatchChat/Title/RejectsEmpty: a blank title is refused and the title kept."""
    chat = api.create_chat("keep original")
    assert api.request("PATCH", f"{CHATS}/{chat['id']}", {"title": "   "}).status_code == 400
    assert get_chat(api, chat["id"])["title"] == chat["title"]


@pytest.mark.parametrize(
    "invalid",
    [
        pytest.param({"labels": {"": "bad"}}, id="labels"),
        pytest.param({"archived": False}, id="archived"),
        pytest.param({"pin_order": -1}, id="pin_order"),
        pytest.param({"workspace_id": "6b1e2d1c-3f7a-4c55-9d7e-2f0b8a9c1d23"}, id="workspace_id"),
        pytest.param({"plan_mode": "invalid"}, id="plan_mode"),
    ],
)
def test_patch_chat__title__rejected_request_leaves_title_unchanged(
    api: Contract, invalid: dict[str, Any]
) -> None:
    """TestPatchChat/Title/RejectedRequestLeavesTitleUnchanged: a request refused for another
    field changes no title, whether it sends the same title or a new one."""
    chat = api.create_chat("stored title")
    settle(api, chat["id"])
    for title in (chat["title"], "new title"):
        answer = api.request("PATCH", f"{CHATS}/{chat['id']}", {**invalid, "title": title})
        assert answer.status_code == 400, answer.text
        assert get_chat(api, chat["id"])["title"] == chat["title"]


@pytest.mark.parametrize(
    ("title", "stored"),
    [
        pytest.param("a" * 200, "a" * 200, id="ExactlyMaxASCII"),
        pytest.param("a" * 201, None, id="OneOverMaxASCII"),
        pytest.param("é" * 200, "é" * 200, id="ExactlyMaxMultiByte"),
        pytest.param("é" * 201, None, id="OneOverMaxMultiByte"),
        pytest.param("   " + "a" * 200 + "   ", "a" * 200, id="TrimsDownToMax"),
    ],
)
def test_patch_chat__title__length_boundaries(
    api: Contract, title: str, stored: str | None
) -> None:
    """TestPatchChat/Title/LengthBoundaries: a title of up to 200 characters after trimming
    is stored; one longer is refused and the title kept."""
    chat = api.create_chat("boundary baseline")
    settle(api, chat["id"])
    answer = api.request("PATCH", f"{CHATS}/{chat['id']}", {"title": title})
    if stored is None:
        assert answer.status_code == 400
        assert get_chat(api, chat["id"])["title"] == chat["title"]
    else:
        assert answer.status_code == 204
        assert get_chat(api, chat["id"])["title"] == stored


def test_patch_chat__title__publishes_watch_event(api: Contract) -> None:
    """TestPatchChat/Title/PublishesWatchEvent: a rename is announced as a title change
    carrying the new title."""
    chat = api.create_chat("announce me")["id"]
    settle(api, chat)
    with SyncWs(api.server, WATCH) as ws:
        assert (
            api.request("PATCH", f"{CHATS}/{chat}", {"title": "announced name"}).status_code == 204
        )
        events = watch_until(
            ws,
            lambda events: any(
                e["kind"] == "title_change" and e["chat"]["id"] == chat for e in events
            ),
        )
    change = next(e for e in events if e["kind"] == "title_change")
    assert change["chat"]["title"] == "announced name"
