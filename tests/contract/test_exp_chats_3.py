"""Cases restated from the server's ``coderd/exp_chats_test.go`` (``coder/coder`` at
00b34a9a6ed7c93bdc518fef9efe54c4e4c584d1), its third part: the tests from ``TestGetChatCost``
to ``TestChatReadState``.

The fake has one user and no deployment settings, so most of this part (the ``/chats/config``
routes, debug runs, sharing and roles) has nothing to send to. Where a test mixes cases, the
subtests the fake can answer are restated and the others are listed below.

Not restated
------------

* TestGetChatCost (UnpricedRequests, PartiallyPricedRequest, ZeroCostRequests,
  RequestWithoutUsage, ExcludesUnattributedUsageFromCost,
  ExcludesForeignAndUnfinishedRequests): the spend is seeded as AI gateway interceptions in
  the database, priced or not; the fake prices every model step of its own.
* TestGetChatCost/MemberCanReadOwnChat, MemberCannotReadOtherUsersChat: a second user.
* TestWatchChatDesktop: the desktop stream (experimental prefix only) is not served.
* TestWatchChatGitAuthz: workspace agents and role demotion.
* TestChatSystemPrompt: the system prompt settings route is not served.
* TestChatPlanModeInstructions: the plan-mode instructions settings route is not served.
* TestChatModelOverrides (every subtest but LegacyRoutesRemoved): organization model
  overrides are not served.
* TestChatPersonalModelOverridesAdminSettings: deployment settings route, not served.
* TestUserChatPersonalModelOverrides (every subtest but LegacyRouteRemoved): personal model
  overrides are not served.
* TestCreateChatPersonalModelOverrideRoot: personal model overrides and AI providers.
* TestChatComputerUseProvider: deployment settings route, not served.
* TestChatDebugLoggingSettings: deployment settings route, not served.
* TestChatDebugRuns, TestChatDebugRun: debug runs are not recorded or served.
* TestChatAdvisorConfig_GetDefault, _Update, _MemberCannotWriteButCanRead,
  _NegativeValuesRejected, _StaleModelWriteRejected, _RoundTripZeroValues,
  _OverwriteClearsPreviousValues, _EnabledReflectsExperiment, _ClampsNegativeStoredValues,
  _IgnoresLegacyReasoningEffort, _CorruptStoredJSONReturnsError, _UnauthenticatedFails:
  the advisor settings route is not served.
* TestChatWorkspaceTTL: deployment settings route, not served.
* TestChatOperationalSettingsAuditDeniedWrites: settings routes, roles and audit logs.
* TestChatRetentionDays_AuditNoOpSkipsWrite,
  TestChatRetentionDays_AuditInfrastructureFailureRejectsWrite,
  TestChatRetentionDays_AuditConcurrentIdenticalWritesSingleEntry: audit logs and database
  failure injection on a settings route.
* TestChatRetentionDays, TestChatDebugRetentionDays, TestChatAutoArchiveDays: deployment
  settings routes, not served.
* TestUserChatCompactionThresholds: the user compaction-threshold route is not served.
* TestSubmitToolResults/NotFoundForDifferentUser, MemberCanSubmitToolResults: a second user.
* TestChatLimitsFromDeploymentConfig/MaxPromptBytes: the prompt settings routes are not
  served.
* TestChatLimitsFromDeploymentConfig/MaxPromptBytesDoesNotBoundChatCreation: the prompt-size
  deployment option has no counterpart in the fake.
* TestPostChats_DynamicToolValidation/CallerSuppliedToolsDisabled: a deployment option the
  fake does not have.
* TestChatStartWorkspace_RequireActiveVersion, TestChatStopWorkspace_BypassesRequireActiveVersion:
  internal functions over templates and workspace builds, no route.
* TestChatReadOnlySharedWriteHandlers: chat sharing with a second user.
* TestChatOwnerOnlyWriteHandlers (every subtest but OwnerCanSendMessages): an organization
  admin.
* TestChatReadState/NonOwnerForbidden: a second user.
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
from coder_proto._constants import MAX_QUEUE_SIZE
from coder_proto.fake import CallClientTool, Script, Wait

from .conftest import CHATS, Contract

SETTLED = frozenset({"waiting", "error", "requires_action"})
TOOL = "my_dynamic_tool"


@contextmanager
def served(**config: Any) -> Iterator[Contract]:
    """A contract client for a fake served with ``config``."""
    with FakeCoderServer(chunk_delay=0, **config) as server:
        headers = {"Coder-Session-Token": server.token}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
            yield Contract(server, http)


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


def wait_status(api: Contract, chat_id: str, statuses: frozenset[str] = SETTLED) -> dict[str, Any]:
    """The chat, once its status is one of ``statuses``."""
    deadline = time.monotonic() + 10
    while True:
        chat: dict[str, Any] = api.request("GET", f"{CHATS}/{chat_id}").json()
        if chat["status"] in statuses:
            return chat
        assert time.monotonic() < deadline, chat["status"]
        time.sleep(0.005)


def send(api: Contract, chat_id: str, value: str, **fields: Any) -> httpx.Response:
    return api.request("POST", f"{CHATS}/{chat_id}/messages", {"content": text(value), **fields})


def hold_next_turn(api: Contract) -> None:
    """The next turn keeps the chat running for the rest of the test."""
    api.server.config.scripts.push(Script([Wait(60)]))


def message_ids(api: Contract, chat_id: str) -> list[int]:
    """Every message id of the chat, oldest first."""
    page = api.request("GET", f"{CHATS}/{chat_id}/messages", params={"limit": 200}).json()
    return sorted(m["id"] for m in page["messages"])


def seed_chat(api: Contract, count: int, *, queued: bool = False) -> tuple[str, list[int]]:
    """A chat with ``count`` messages (finished turns, and a last user message whose turn is
    still running when ``count`` is odd), and one queued message behind it when ``queued``.
    Returns the chat id and the message ids, oldest first."""
    assert count % 2 == 1 or not queued
    chat_id = ""
    for i in range(0, count, 2):
        last = i == count - 1
        if last:
            hold_next_turn(api)
        if i == 0:
            chat_id = api.create_chat(f"msg {i}")["id"]
        else:
            assert send(api, chat_id, f"msg {i}").status_code == 200
        if last:
            wait_status(api, chat_id, frozenset({"running"}))
        else:
            assert wait_status(api, chat_id)["status"] == "waiting"
    if queued:
        answer = send(api, chat_id, "queued", busy_behavior="queue")
        assert answer.json()["queued"] is True
    ids = message_ids(api, chat_id)
    assert len(ids) == count
    return chat_id, ids


def page_ids(answer: httpx.Response) -> list[int]:
    assert answer.status_code == 200, answer.text
    return [m["id"] for m in answer.json()["messages"]]


# -- TestGetChatCost ---------------------------------------------------------------------------


def test_get_chat_cost__zero_requests(api: Contract) -> None:
    """TestGetChatCost/ZeroRequests: a chat without a finished model request reports zeros."""
    hold_next_turn(api)
    chat = api.create_chat("empty chat")
    cost = api.request("GET", f"{CHATS}/{chat['id']}/cost")
    assert cost.status_code == 200
    assert cost.json()["chat_id"] == chat["id"]
    assert cost.json()["total_cost_micros"] == 0
    assert cost.json()["request_count"] == 0
    assert cost.json()["unpriced_request_count"] == 0


def cost(api: Contract, chat_id: str) -> dict[str, Any]:
    answer = api.request("GET", f"{CHATS}/{chat_id}/cost")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    assert found["chat_id"] == chat_id
    assert found["unpriced_request_count"] == 0
    return found


def spawn(api: Contract, root_id: str, prompt: str) -> str:
    """A sub-agent chat of ``root_id``, its first turn finished."""
    child = api.server.model.spawn_child(root_id, prompt, time.monotonic())
    wait_status(api, child.id)
    return str(child.id)


def test_get_chat_cost__rolls_up_chat_tree(api: Contract) -> None:
    """TestGetChatCost/RollsUpChatTree: the root and its sub-agent chat each report the whole
    tree's spend and request count (the server's test goes one level deeper, to a grandchild;
    the fake spawns one level). The fake prices its own model steps, so the totals are
    compared with each other rather than with the server's figures."""
    root = api.create_chat("root chat")["id"]
    wait_status(api, root)
    assert send(api, root, "second request").status_code == 200
    wait_status(api, root)
    child = spawn(api, root, "child chat")
    costs = [cost(api, chat_id) for chat_id in (root, child)]
    assert [c["request_count"] for c in costs] == [3, 3]
    assert costs[0]["total_cost_micros"] == costs[1]["total_cost_micros"] > 0


def test_get_chat_cost__isolates_sibling_chat_trees(api: Contract) -> None:
    """TestGetChatCost/IsolatesSiblingChatTrees: one tree's spend does not reach another's."""
    first = api.create_chat("first root chat")["id"]
    wait_status(api, first)
    alone = cost(api, first)
    second = api.create_chat("second root chat")["id"]
    wait_status(api, second)
    child = spawn(api, second, "second root subagent")
    assert cost(api, first) == alone
    assert alone["request_count"] == 1
    costs = [cost(api, chat_id) for chat_id in (second, child)]
    assert [c["request_count"] for c in costs] == [2, 2]
    assert costs[0]["total_cost_micros"] == costs[1]["total_cost_micros"]


# -- TestChatModelOverrides, TestUserChatPersonalModelOverrides --------------------------------


def test_chat_model_overrides__legacy_routes_removed(api: Contract) -> None:
    """TestChatModelOverrides/LegacyRoutesRemoved: the old per-context override route is gone."""
    answer = api.request("GET", f"{CHATS}/config/model-override/general")
    assert answer.status_code == 404


def test_user_chat_personal_model_overrides__legacy_route_removed(api: Contract) -> None:
    """TestUserChatPersonalModelOverrides/LegacyRouteRemoved: the old personal override route
    is gone."""
    answer = api.request("GET", f"{CHATS}/config/user-personal-model-overrides")
    assert answer.status_code == 404


# -- TestGetChatsByWorkspace -------------------------------------------------------------------

WORKSPACES = tuple(str(uuid.UUID(int=n + 1)) for n in range(3))


@pytest.fixture
def workspaces() -> Iterator[Contract]:
    with served(workspace_ids=WORKSPACES) as contract:
        yield contract


def workspace_chat(api: Contract, title: str, workspace_id: str) -> str:
    chat_id: str = api.create_chat(title, workspace_id=workspace_id)["id"]
    wait_status(api, chat_id)
    return chat_id


def by_workspace(api: Contract, *workspace_ids: str) -> httpx.Response:
    return api.request(
        "GET", f"{CHATS}/by-workspace", params={"workspace_ids": ",".join(workspace_ids)}
    )


def archive(api: Contract, chat_id: str) -> None:
    answer = api.request("PATCH", f"{CHATS}/{chat_id}", {"archived": True})
    assert answer.status_code == 204, answer.text


def test_get_chats_by_workspace__empty_request_returns_empty_map(workspaces: Contract) -> None:
    """TestGetChatsByWorkspace/EmptyRequestReturnsEmptyMap: no ids, an empty map."""
    answer = by_workspace(workspaces)
    assert answer.status_code == 200
    assert answer.json() == {}


def test_get_chats_by_workspace__workspace_with_no_chats_omitted(workspaces: Contract) -> None:
    """TestGetChatsByWorkspace/WorkspaceWithNoChatsOmitted: a workspace without a chat is left
    out."""
    answer = by_workspace(workspaces, WORKSPACES[0])
    assert answer.status_code == 200
    assert answer.json() == {}


def test_get_chats_by_workspace__returns_chat_linked_to_workspace(workspaces: Contract) -> None:
    """TestGetChatsByWorkspace/ReturnsChatLinkedToWorkspace: the workspace maps to its chat."""
    chat_id = workspace_chat(workspaces, "workspace chat", WORKSPACES[0])
    answer = by_workspace(workspaces, WORKSPACES[0])
    assert answer.status_code == 200
    assert answer.json() == {WORKSPACES[0]: chat_id}


def test_get_chats_by_workspace__archived_chats_excluded(workspaces: Contract) -> None:
    """TestGetChatsByWorkspace/ArchivedChatsExcluded: an archived chat does not count."""
    chat_id = workspace_chat(workspaces, "soon to be archived", WORKSPACES[0])
    archive(workspaces, chat_id)
    answer = by_workspace(workspaces, WORKSPACES[0])
    assert answer.status_code == 200
    assert answer.json() == {}


def test_get_chats_by_workspace__returns_latest_non_archived_chat(workspaces: Contract) -> None:
    """TestGetChatsByWorkspace/ReturnsLatestNonArchivedChat: of several chats, the newest one
    that is not archived."""
    older = workspace_chat(workspaces, "older archived", WORKSPACES[0])
    archive(workspaces, older)
    workspace_chat(workspaces, "older active", WORKSPACES[0])
    newer = workspace_chat(workspaces, "newer active", WORKSPACES[0])
    answer = by_workspace(workspaces, WORKSPACES[0])
    assert answer.status_code == 200
    assert answer.json() == {WORKSPACES[0]: newer}


def test_get_chats_by_workspace__multiple_workspaces(workspaces: Contract) -> None:
    """TestGetChatsByWorkspace/MultipleWorkspaces: each workspace maps to its own chat; one
    without a chat is absent."""
    chat_a = workspace_chat(workspaces, "chat for workspace A", WORKSPACES[0])
    chat_b = workspace_chat(workspaces, "chat for workspace B", WORKSPACES[1])
    answer = by_workspace(workspaces, *WORKSPACES)
    assert answer.status_code == 200
    assert answer.json() == {WORKSPACES[0]: chat_a, WORKSPACES[1]: chat_b}


def test_get_chats_by_workspace__rejects_too_many_workspace_ids(workspaces: Contract) -> None:
    """TestGetChatsByWorkspace/RejectsTooManyWorkspaceIDs: 26 ids are refused."""
    answer = by_workspace(workspaces, *(str(uuid.uuid4()) for _ in range(26)))
    assert answer.status_code == 400


# -- TestSubmitToolResults ---------------------------------------------------------------------


def requires_action(api: Contract, tool_call_ids: list[str]) -> str:
    """A chat with a dynamic tool, waiting in ``requires_action`` for the given calls."""
    api.server.config.scripts.push(
        Script(
            [
                CallClientTool(name=TOOL, args={"key": "value"}, tool_call_id=i)
                for i in tool_call_ids
            ]
        )
    )
    chat = api.create_chat(
        "call the tool",
        unsafe_dynamic_tools=[
            {"name": TOOL, "description": "a test dynamic tool", "input_schema": {"type": "object"}}
        ],
    )
    assert wait_status(api, chat["id"])["status"] == "requires_action"
    return str(chat["id"])


def submit(api: Contract, chat_id: str, results: list[dict[str, Any]]) -> httpx.Response:
    return api.request("POST", f"{CHATS}/{chat_id}/tool-results", {"results": results})


def result(call_id: str, output: Any) -> dict[str, Any]:
    return {"tool_call_id": call_id, "output": output}


def test_submit_tool_results__success(api: Contract) -> None:
    """TestSubmitToolResults/Success: the chat leaves requires_action and each result is
    persisted as a tool message."""
    chat_id = requires_action(api, ["call_abc", "call_def"])
    answer = submit(api, chat_id, [result("call_abc", "result_a"), result("call_def", "result_b")])
    assert answer.status_code == 204, answer.text
    assert api.request("GET", f"{CHATS}/{chat_id}").json()["status"] != "requires_action"
    messages = api.request("GET", f"{CHATS}/{chat_id}/messages").json()["messages"]
    assert [m["role"] for m in messages].count("tool") == 2


def test_submit_tool_results__wrong_status(api: Contract) -> None:
    """TestSubmitToolResults/WrongStatus: a chat not in requires_action answers 409."""
    chat = api.create_chat("wrong-status-test")
    wait_status(api, chat["id"])
    answer = submit(api, chat["id"], [result("call_xyz", "nope")])
    assert answer.status_code == 409


def test_submit_tool_results__missing_result(api: Contract) -> None:
    """TestSubmitToolResults/MissingResult: one of two results is not enough."""
    chat_id = requires_action(api, ["call_one", "call_two"])
    answer = submit(api, chat_id, [result("call_one", "partial")])
    assert answer.status_code == 400


def test_submit_tool_results__unexpected_result(api: Contract) -> None:
    """TestSubmitToolResults/UnexpectedResult: a result for a call that is not pending."""
    chat_id = requires_action(api, ["call_real"])
    answer = submit(api, chat_id, [result("call_bogus", "wrong")])
    assert answer.status_code == 400


def test_submit_tool_results__invalid_json_output(api: Contract) -> None:
    """TestSubmitToolResults/InvalidJSONOutput: an output that is not JSON answers 400."""
    chat_id = requires_action(api, ["call_json"])
    raw = b'{"results":[{"tool_call_id":"call_json","output":not-json,"is_error":false}]}'
    answer = api.request(
        "POST",
        f"{CHATS}/{chat_id}/tool-results",
        content=raw,
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 400


def test_submit_tool_results__duplicate_tool_call_id(api: Contract) -> None:
    """TestSubmitToolResults/DuplicateToolCallID: the same call answered twice."""
    chat_id = requires_action(api, ["call_dup1", "call_dup2"])
    answer = submit(
        api, chat_id, [result("call_dup1", "result_a"), result("call_dup1", "result_b")]
    )
    assert answer.status_code == 400
    assert "Duplicate tool_call_id" in answer.json()["message"]


def test_submit_tool_results__empty_results(api: Contract) -> None:
    """TestSubmitToolResults/EmptyResults: an empty list answers 400."""
    chat_id = requires_action(api, ["call_empty"])
    answer = submit(api, chat_id, [])
    assert answer.status_code == 400


def test_submit_tool_results__archived_chat(api: Contract) -> None:
    """TestSubmitToolResults/ArchivedChat: an archived chat refuses tool results."""
    chat_id = requires_action(api, ["call_archived"])
    # The server's test archives the row in the database, past the route's refusal to
    # archive a chat that waits for tool results; so does this one, on the fake's row.
    api.server.model.chat(chat_id).archived = True
    answer = submit(api, chat_id, [result("call_archived", "should fail")])
    assert answer.status_code == 400
    assert "archived" in answer.json()["message"]


# -- TestChatLimitsFromDeploymentConfig --------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "limit"),
    [({}, MAX_QUEUE_SIZE), ({"max_queue": 2}, 2), ({"max_queue": 25}, 25)],
    ids=["default", "lower", "higher"],
)
def test_chat_limits_from_deployment_config__max_queued_messages_per_chat(
    config: dict[str, int], limit: int
) -> None:
    """TestChatLimitsFromDeploymentConfig/MaxQueuedMessagesPerChat (Default, Lower, Higher):
    sends to a running chat queue up to the limit, then answer 429 with the limit in the
    detail. The fake's ``max_queue`` stands for the deployment option."""
    with served(**config) as api:
        hold_next_turn(api)
        chat_id = api.create_chat("queue cap")["id"]
        wait_status(api, chat_id, frozenset({"running"}))
        for i in range(limit):
            answer = send(api, chat_id, f"queued message {i}", busy_behavior="queue")
            assert answer.status_code == 200, answer.text
            assert answer.json()["queued"] is True
        refused = send(api, chat_id, f"queued message {limit}", busy_behavior="queue")
        assert refused.status_code == 429
        assert refused.json()["message"] == "Message queue is full."
        assert refused.json()["detail"] == f"Maximum {limit} messages can be queued."
        page = api.request("GET", f"{CHATS}/{chat_id}/messages").json()
        assert len(page["queued_messages"]) == limit


# -- TestPostChats_DynamicToolValidation -------------------------------------------------------


def create_with_tools(api: Contract, tools: list[dict[str, Any]]) -> httpx.Response:
    body = {
        "organization_id": api.server.organization_id,
        "content": text("hello"),
        "unsafe_dynamic_tools": tools,
    }
    return api.request("POST", CHATS, body)


def test_post_chats_dynamic_tool_validation__too_many_tools(api: Contract) -> None:
    """TestPostChats_DynamicToolValidation/TooManyTools: 251 tools are refused."""
    answer = create_with_tools(api, [{"name": f"tool-{i}"} for i in range(251)])
    assert answer.status_code == 400
    assert answer.json()["message"] == "Too many dynamic tools."


def test_post_chats_dynamic_tool_validation__empty_tool_name(api: Contract) -> None:
    """TestPostChats_DynamicToolValidation/EmptyToolName: a tool needs a name."""
    answer = create_with_tools(api, [{"name": ""}])
    assert answer.status_code == 400
    assert answer.json()["message"] == "Dynamic tool name must not be empty."


def test_post_chats_dynamic_tool_validation__duplicate_tool_name(api: Contract) -> None:
    """TestPostChats_DynamicToolValidation/DuplicateToolName: two tools of one name."""
    answer = create_with_tools(api, [{"name": "dup-tool"}, {"name": "dup-tool"}])
    assert answer.status_code == 400
    assert answer.json()["message"] == "Duplicate dynamic tool name."


# -- TestGetChatMessages_Pagination ------------------------------------------------------------


def messages(api: Contract, chat_id: str, **params: Any) -> httpx.Response:
    return api.request("GET", f"{CHATS}/{chat_id}/messages", params=params)


def test_get_chat_messages_pagination__no_cursor_returns_all_desc_plus_queued(
    api: Contract,
) -> None:
    """TestGetChatMessages_Pagination/NoCursorReturnsAllDESCPlusQueued: newest first, with the
    queue."""
    chat_id, ids = seed_chat(api, 5, queued=True)
    answer = messages(api, chat_id)
    assert page_ids(answer) == ids[::-1]
    assert answer.json()["has_more"] is False
    assert len(answer.json()["queued_messages"]) == 1


def test_get_chat_messages_pagination__before_id_returns_older_and_suppresses_queued(
    api: Contract,
) -> None:
    """TestGetChatMessages_Pagination/BeforeIDReturnsOlderAndSuppressesQueued."""
    chat_id, ids = seed_chat(api, 5, queued=True)
    answer = messages(api, chat_id, before_id=ids[2])
    assert page_ids(answer) == [ids[1], ids[0]]
    assert answer.json()["has_more"] is False
    assert not answer.json()["queued_messages"]


def test_get_chat_messages_pagination__after_id_returns_newer_in_asc_order_for_monotonic_polling(
    api: Contract,
) -> None:
    """TestGetChatMessages_Pagination/AfterIDReturnsNewerInASCOrderForMonotonicPolling."""
    chat_id, ids = seed_chat(api, 5, queued=True)
    answer = messages(api, chat_id, after_id=ids[1])
    assert page_ids(answer) == [ids[2], ids[3], ids[4]]
    assert answer.json()["has_more"] is False
    assert not answer.json()["queued_messages"]


def test_get_chat_messages_pagination__after_and_before_id_returns_open_range(
    api: Contract,
) -> None:
    """TestGetChatMessages_Pagination/AfterAndBeforeIDReturnsOpenRange: newest first."""
    chat_id, ids = seed_chat(api, 5, queued=True)
    answer = messages(api, chat_id, after_id=ids[0], before_id=ids[4])
    assert page_ids(answer) == [ids[3], ids[2], ids[1]]
    assert answer.json()["has_more"] is False
    assert not answer.json()["queued_messages"]


def test_get_chat_messages_pagination__limit_caps_after_id_page_to_oldest_and_sets_has_more(
    api: Contract,
) -> None:
    """TestGetChatMessages_Pagination/LimitCapsAfterIDPageToOldestAndSetsHasMore."""
    chat_id, ids = seed_chat(api, 5, queued=True)
    answer = messages(api, chat_id, after_id=ids[0], limit=2)
    assert page_ids(answer) == [ids[1], ids[2]]
    assert answer.json()["has_more"] is True
    assert not answer.json()["queued_messages"]


def refuses_after_id(api: Contract, after_id: str) -> None:
    chat_id, _ = seed_chat(api, 1)
    answer = messages(api, chat_id, after_id=after_id)
    assert answer.status_code == 400
    assert answer.json()["message"] == "Query parameters have invalid values."
    assert "after_id" in [v["field"] for v in answer.json()["validations"]]


def test_get_chat_messages_pagination__negative_after_id_returns400(api: Contract) -> None:
    """TestGetChatMessages_Pagination/NegativeAfterIDReturns400: a validation error names
    ``after_id``."""
    refuses_after_id(api, "-1")


def test_get_chat_messages_pagination__non_numeric_after_id_returns400(api: Contract) -> None:
    """TestGetChatMessages_Pagination/NonNumericAfterIDReturns400: a validation error names
    ``after_id``."""
    refuses_after_id(api, "abc")


def test_get_chat_messages_pagination__after_id_at_or_above_max_returns_empty(
    api: Contract,
) -> None:
    """TestGetChatMessages_Pagination/AfterIDAtOrAboveMaxReturnsEmpty: the caught-up poll."""
    chat_id, ids = seed_chat(api, 3, queued=True)
    answer = messages(api, chat_id, after_id=ids[-1])
    assert page_ids(answer) == []
    assert answer.json()["has_more"] is False
    assert not answer.json()["queued_messages"]


@pytest.mark.parametrize(("after", "before"), [(2, 0), (1, 1)], ids=["transposed", "equal"])
def test_get_chat_messages_pagination__after_id_greater_than_or_equal_before_id_returns_400(
    api: Contract, after: int, before: int
) -> None:
    """TestGetChatMessages_Pagination/AfterIDGreaterThanOrEqualBeforeIDReturns400
    (Transposed, Equal)."""
    chat_id, ids = seed_chat(api, 3)
    answer = messages(api, chat_id, after_id=ids[after], before_id=ids[before])
    assert answer.status_code == 400
    assert answer.json()["message"] == "after_id must be less than before_id."


def test_get_chat_messages_pagination__after_id_polling_walks_burst_without_gaps(
    api: Contract,
) -> None:
    """TestGetChatMessages_Pagination/AfterIDPollingWalksBurstWithoutGaps: polling with
    ``after_id`` and a page size under the burst returns every message once, in order."""
    chat_id, ids = seed_chat(api, 61)
    seen: list[int] = []
    cursor = ids[0]
    for _ in range(60 // 25 + 2):
        answer = messages(api, chat_id, after_id=cursor, limit=25)
        page = page_ids(answer)
        if not page:
            assert answer.json()["has_more"] is False
            break
        seen.extend(page)
        cursor = page[-1]
        if not answer.json()["has_more"]:
            break
    assert seen == ids[1:]


# -- TestChatOwnerOnlyWriteHandlers ------------------------------------------------------------


def test_chat_owner_only_write_handlers__owner_can_send_messages(api: Contract) -> None:
    """TestChatOwnerOnlyWriteHandlers/OwnerCanSendMessages: the owner sends to their chat."""
    chat = api.create_chat("owner chat for authz test")
    answer = send(api, chat["id"], "owner should succeed")
    assert answer.status_code == 200, answer.text


# -- TestChatReadState -------------------------------------------------------------------------


def has_unread(api: Contract, chat_id: str) -> bool:
    listed = {chat["id"]: chat for chat in api.request("GET", CHATS).json()}
    return bool(listed[chat_id]["has_unread"])


def test_chat_read_state__mark_read_and_unread(api: Contract) -> None:
    """TestChatReadState/MarkReadAndUnread: a chat with an answer the owner never opened is
    unread; ``read`` marks it read and unread again."""
    chat = api.create_chat("read state chat")
    wait_status(api, chat["id"])
    assert has_unread(api, chat["id"]) is True
    assert api.request("PATCH", f"{CHATS}/{chat['id']}", {"read": True}).status_code == 204
    assert has_unread(api, chat["id"]) is False
    assert api.request("PATCH", f"{CHATS}/{chat['id']}", {"read": False}).status_code == 204
    assert has_unread(api, chat["id"]) is True
