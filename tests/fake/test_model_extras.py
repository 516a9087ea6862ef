"""The fake's chat routes beside the turn loop (server-behaviour 1.2, 1.3, 2.2): compact and
clear (the state rules, "Nothing to compact."), reconcile-invalid, the prompt history and its
``limit``, a proposed title, the diff, by-workspace (limits and parsing) and signed
downloads (token, file and expiry), each with the server's status and message."""

from __future__ import annotations

import hashlib

import pytest

from coder_proto.fake import Fail, Say, Script, Wait
from coder_proto.fake._extras import DOWNLOAD_URL_LIFETIME

from .support import Api

UNKNOWN = "00000000-0000-4000-8000-000000000000"
WORKSPACE = "11111111-1111-4111-8111-111111111111"


def test_compact_runs_a_summary_pass_then_settles_and_refuses_a_second_one() -> None:
    api = Api()
    chat = api.create("hello")
    busy = api.request("POST", f"/{chat}/compact")
    assert (busy.status, busy.json()["message"]) == (
        409,
        "Cannot compact the chat in its current state.",
    )
    assert busy.json()["detail"] == "Compaction is not available while the chat is generating."
    api.run_until(chat, {"waiting"})
    shown = len(api.messages(chat)["messages"])
    answer = api.request("POST", f"/{chat}/compact")
    assert answer.status == 200 and answer.json()["status"] == "running"
    api.run_until(chat, {"waiting"})
    # The summary is model-only: the transcript is what it was.
    assert len(api.messages(chat)["messages"]) == shown
    assert "user: hello" in (api.model.chats[chat].context_summary or "")
    again = api.request("POST", f"/{chat}/compact")
    assert (again.status, again.json()["message"]) == (409, "Nothing to compact.")
    assert again.json()["detail"] == (
        "The chat has no conversation to summarize after the latest compaction."
    )


def test_compact_of_an_errored_chat_clears_its_error() -> None:
    api = Api()
    chat = api.create("hello", script=Script([Fail(message="boom")]))
    api.run_until(chat, {"error"})
    assert "last_error" in api.chat(chat)
    answer = api.request("POST", f"/{chat}/compact")
    assert answer.status == 200 and "last_error" not in answer.json()
    api.run_until(chat, {"waiting"})


def test_clear_resets_the_context_at_once_and_refuses_busy_or_archived_chats() -> None:
    api = Api()
    chat = api.create("hello", script=Script([Say("a"), Wait(30.0), Say("b")]))
    api.advance(0.5)
    busy = api.request("POST", f"/{chat}/clear")
    assert (busy.status, busy.json()["message"]) == (
        409,
        "Cannot clear the chat in its current state.",
    )
    api.run_until(chat, {"waiting"})
    cleared = api.request("POST", f"/{chat}/clear")
    assert cleared.status == 200 and cleared.json()["status"] == "waiting"
    last = api.messages(chat)["messages"][0]["id"]
    assert api.model.chats[chat].context_floor == last
    nothing = api.request("POST", f"/{chat}/compact")
    assert nothing.json()["message"] == "Nothing to compact."
    assert api.archive(chat).status == 204
    for route, message in (
        ("clear", "Cannot clear an archived chat."),
        ("compact", "Cannot compact an archived chat."),
    ):
        refused = api.request("POST", f"/{chat}/{route}")
        assert (refused.status, refused.json()["message"]) == (400, message)


def test_reconcile_answers_409_as_no_fake_chat_is_ever_invalid() -> None:
    api = Api()
    chat = api.create()
    answer = api.request("POST", f"/{chat}/reconcile-invalid")
    assert (answer.status, answer.json()["message"]) == (409, "Chat is not in an invalid state.")
    assert api.request("POST", f"/{UNKNOWN}/reconcile-invalid").status == 404


def test_prompts_are_the_user_texts_newest_first_and_limit_is_checked() -> None:
    api = Api()
    chat = api.create("first")
    api.run_until(chat, {"waiting"})
    file_only = [{"type": "file", "file_id": _upload(api)}]
    assert api.request("POST", f"/{chat}/messages", {"content": file_only}).status == 200
    api.run_until(chat, {"waiting"})
    api.send(chat, "second")
    api.run_until(chat, {"waiting"})
    prompts = api.request("GET", f"/{chat}/prompts").json()["prompts"]
    assert [p["text"] for p in prompts] == ["second", "first"]
    assert prompts[0]["id"] > prompts[1]["id"]
    one = api.request("GET", f"/{chat}/prompts?limit=1").json()["prompts"]
    assert [p["text"] for p in one] == ["second"]
    assert len(api.request("GET", f"/{chat}/prompts?limit=0").json()["prompts"]) == 2
    assert len(api.request("GET", f"/{chat}/prompts?limit=").json()["prompts"]) == 2
    for bad in ("-1", "x", "99999999999"):
        refused = api.request("GET", f"/{chat}/prompts?limit={bad}")
        assert (refused.status, refused.json()["message"]) == (
            400,
            "Query parameters have invalid values.",
        )
    over = api.request("GET", f"/{chat}/prompts?limit=2001")
    assert (over.status, over.json()["message"]) == (400, "Invalid limit parameter (0-2000).")


def test_title_proposal_and_diff_read_the_chat_without_changing_it() -> None:
    api = Api()
    chat = api.create("Plan the release\nwith details")
    title = api.request("POST", f"/{chat}/title/propose").json()
    assert title == {"title": "Plan the release"}
    assert api.chat(chat)["title"] == "Plan the release with details"
    assert api.request("GET", f"/{chat}/diff").json() == {"chat_id": chat}
    for meth, route in (("POST", "title/propose"), ("GET", "diff"), ("GET", "prompts")):
        assert api.request(meth, f"/{UNKNOWN}/{route}").status == 404


def test_a_chat_whose_prompt_has_no_user_text_is_proposed_the_default_title() -> None:
    api = Api()
    chat = api.create("x")
    for message in api.model.chats[chat].messages:
        message.deleted = True
    assert api.request("POST", f"/{chat}/title/propose").json() == {"title": "New Chat"}


def test_by_workspace_maps_each_workspace_to_its_latest_live_chat() -> None:
    api = Api(workspace_ids=(WORKSPACE,))
    assert api.request("GET", "/by-workspace").json() == {}
    older = api.create("one", workspace_id=WORKSPACE)
    api.run_until(older, {"waiting"})
    api.advance(1.0)
    newer = api.create("two", workspace_id=WORKSPACE)
    api.run_until(newer, {"waiting"})
    api.create("elsewhere")
    # A new message in the older chat makes it the latest activity of the workspace ...
    api.advance(1.0)
    api.send(older, "more")
    api.run_until(older, {"waiting"})
    renamed = api.request("GET", f"/by-workspace?workspace_ids={WORKSPACE}").json()
    assert renamed == {WORKSPACE: older}
    # ... until the newer one has activity again (a rename alone is not activity).
    api.advance(1.0)
    assert api.request("PATCH", f"/{newer}", {"title": "again"}).status == 204
    unchanged = api.request("GET", f"/by-workspace?workspace_ids={WORKSPACE}").json()
    assert unchanged == {WORKSPACE: older}
    api.send(newer, "again")
    api.run_until(newer, {"waiting"})
    found = api.request("GET", f"/by-workspace?workspace_ids={WORKSPACE},{UNKNOWN}").json()
    assert found == {WORKSPACE: newer}
    assert api.archive(newer).status == 204
    found = api.request("GET", f"/by-workspace?workspace_ids={WORKSPACE}").json()
    assert found == {WORKSPACE: older}
    too_many = ",".join([UNKNOWN] * 26)
    refused = api.request("GET", f"/by-workspace?workspace_ids={too_many}")
    assert (refused.status, refused.json()["message"]) == (
        400,
        "Too many workspace IDs, maximum is 25.",
    )
    bad = api.request("GET", "/by-workspace?workspace_ids=nope")
    assert bad.status == 400 and bad.json()["message"].startswith("Invalid workspace ID 'nope'")


def _upload(api: Api, data: bytes = b"hello file") -> str:
    response = api.request(
        "POST",
        f"/files?organization={api.model.organization_id}",
        raw=data,
        headers={
            "Content-Type": "text/plain",
            "Content-Disposition": 'attachment; filename="notes.txt"',
        },
    )
    assert response.status == 201, response.json()
    return str(response.json()["id"])


def test_a_signed_url_downloads_without_a_session_until_it_expires() -> None:
    api = Api()
    file_id = _upload(api)
    signed = api.request("POST", f"/files/{file_id}/download-url").json()
    assert signed["sha256"] == hashlib.sha256(b"hello file").hexdigest()
    assert (signed["size_bytes"], signed["name"], signed["mime_type"]) == (
        10,
        "notes.txt",
        "text/plain",
    )
    got = api.model.handle_http("GET", signed["url"], {}, b"", api.now)
    assert (got.status, got.body, got.header("cache-control")) == (200, b"hello file", "no-store")
    other = _upload(api, b"other")
    wrong_file = signed["url"].replace(file_id, other)
    assert api.model.handle_http("GET", wrong_file, {}, b"", api.now).status == 404
    wrong_token = signed["url"][:-4] + "0000"
    assert api.model.handle_http("GET", wrong_token, {}, b"", api.now).status == 404
    api.model.files.pop(file_id)
    assert api.model.handle_http("GET", signed["url"], {}, b"", api.now).status == 404
    fresh = api.request("POST", f"/files/{other}/download-url").json()
    api.advance(DOWNLOAD_URL_LIFETIME)
    assert api.model.handle_http("GET", fresh["url"], {}, b"", api.now).status == 404


def test_a_download_url_for_an_unknown_or_malformed_file_is_refused() -> None:
    api = Api()
    assert api.request("POST", f"/files/{UNKNOWN}/download-url").status == 404
    bad = api.request("POST", "/files/nope/download-url")
    assert (bad.status, bad.json()["message"]) == (400, "Invalid file ID.")


def test_a_sub_agent_chat_is_a_child_of_its_root_everywhere_but_the_list() -> None:
    api = Api(workspace_ids=(WORKSPACE,))
    root = api.create("lead", workspace_id=WORKSPACE)
    api.run_until(root, {"waiting"})
    child = api.model.spawn_child(root, "look around\nthen report", api.now)
    assert (child.parent_chat_id, child.workspace_id, child.title) == (
        root,
        WORKSPACE,
        "look around",
    )
    api.run_until(child.id, {"waiting"})
    shown = api.chat(root)
    assert [c["id"] for c in shown["children"]] == [child.id]
    assert shown["children"][0]["root_chat_id"] == root
    assert api.chat(child.id)["children"] == []
    assert [c["id"] for c in api.request("GET", "").json()] == [root]
    # The cost is the tree's, whichever member is asked.
    cost = api.request("GET", f"/{child.id}/cost").json()
    assert cost["request_count"] == 2 and cost["chat_id"] == child.id
    assert (
        api.request("GET", f"/{root}/cost").json()["total_cost_micros"]
        == (cost["total_cost_micros"])
    )
    refused = api.archive(child.id)
    assert (refused.status, refused.json()["message"]) == (
        400,
        "Chat archive state can only be changed on the root chat.",
    )
    assert api.archive(root).status == 204
    assert api.model.chats[child.id].archived


def test_only_a_root_chat_starts_sub_agent_chats() -> None:
    api = Api()
    root = api.create("lead")
    child = api.model.spawn_child(root, "   ", api.now)
    assert child.title == "New Chat"
    with pytest.raises(ValueError, match="sub-agent"):
        api.model.spawn_child(child.id, "deeper", api.now)
    with pytest.raises(KeyError):
        api.model.spawn_child(UNKNOWN, "x", api.now)


def test_pins_are_numbered_from_one_and_move_with_their_neighbours() -> None:
    api = Api()
    a, b, c = api.create("a"), api.create("b"), api.create("c")

    def pins() -> dict[str, int]:
        return {
            name: api.chat(chat)["pin_order"] for name, chat in zip("abc", (a, b, c), strict=True)
        }

    def pin(chat: str, order: int) -> None:
        assert api.request("PATCH", f"/{chat}", {"pin_order": order}).status == 204

    pin(a, 7)
    pin(b, 7)
    pin(c, 1)
    assert pins() == {"a": 1, "b": 2, "c": 3}
    pin(c, 1)
    assert pins() == {"a": 2, "b": 3, "c": 1}
    pin(c, 9)
    assert pins() == {"a": 1, "b": 2, "c": 3}
    pin(a, 0)
    assert pins() == {"a": 0, "b": 1, "c": 2}
    child = api.model.spawn_child(a, "sub", api.now)
    refused = api.request("PATCH", f"/{child.id}", {"pin_order": 1})
    assert (refused.status, refused.json()["message"]) == (400, "Cannot pin a child chat.")


def test_an_edit_sets_the_reasoning_effort_and_replaces_the_mcp_selection() -> None:
    api = Api()
    chat = api.create("hello")
    api.run_until(chat, {"waiting"})
    api.model.chats[chat].mcp_server_ids = [WORKSPACE]
    user = next(m for m in api.messages(chat)["messages"] if m["role"] == "user")
    body = {"content": [{"type": "text", "text": "again"}], "reasoning_effort": "high"}
    assert api.request("PATCH", f"/{chat}/messages/{user['id']}", body).status == 200
    shown = api.chat(chat)
    assert (shown["last_reasoning_effort"], shown["mcp_server_ids"]) == ("high", [WORKSPACE])
    api.run_until(chat, {"waiting"})
    user = next(m for m in api.messages(chat)["messages"] if m["role"] == "user")
    body = {"content": [{"type": "text", "text": "once more"}], "mcp_server_ids": []}
    assert api.request("PATCH", f"/{chat}/messages/{user['id']}", body).status == 200
    assert api.chat(chat)["mcp_server_ids"] == []
    user = next(m for m in api.messages(chat)["messages"] if m["role"] == "user")
    body = {"content": [{"type": "text", "text": "x"}], "reasoning_effort": "extreme"}
    refused = api.request("PATCH", f"/{chat}/messages/{user['id']}", body)
    assert (refused.status, refused.json()["message"]) == (400, "Invalid reasoning_effort value.")


def test_a_context_refresh_answers_the_chat() -> None:
    api = Api()
    chat = api.create("hello")
    answer = api.request("PUT", f"/{chat}/context")
    assert answer.status == 200 and answer.json()["id"] == chat
    assert api.request("PUT", f"/{UNKNOWN}/context").status == 404
