"""The owner's read marker: ``has_unread`` on a chat, moved by ``PATCH {"read": ...}`` and by
the owner's stream opening and closing (server-behaviour 3.1)."""

from __future__ import annotations

from .support import TERMINAL, Api


def unread(api: Api, chat_id: str) -> bool:
    listed = {c["id"]: c for c in api.request("GET", "").json()}
    assert api.chat(chat_id)["has_unread"] is listed[chat_id]["has_unread"]
    return bool(listed[chat_id]["has_unread"])


def test_a_chat_is_unread_once_the_agent_answers_until_marked_read() -> None:
    api = Api()
    chat_id = api.create("hello")
    api.run_until(chat_id, TERMINAL)
    assert unread(api, chat_id)
    assert api.request("PATCH", f"/{chat_id}", {"read": True}).status == 204
    assert not unread(api, chat_id)
    assert api.request("PATCH", f"/{chat_id}", {"read": False}).status == 204
    assert unread(api, chat_id)


def test_a_chat_without_an_answer_is_never_unread() -> None:
    api = Api()
    chat_id = api.create("hello")
    assert api.request("PATCH", f"/{chat_id}", {"read": False}).status == 204
    assert not unread(api, chat_id)


def test_read_must_be_a_boolean_and_nothing_changes_when_it_is_not() -> None:
    api = Api()
    chat_id = api.create("hello")
    api.run_until(chat_id, TERMINAL)
    refused = api.request("PATCH", f"/{chat_id}", {"read": "yes", "title": "renamed"})
    assert refused.status == 400
    assert refused.json()["message"] == "Request body must be valid JSON."
    assert refused.json()["detail"] == "read must be a boolean"
    assert api.chat(chat_id)["title"] != "renamed"
    assert unread(api, chat_id)


def test_the_owner_stream_marks_the_chat_read_when_it_opens_and_when_it_closes() -> None:
    api = Api()
    chat_id = api.create("hello")
    api.run_until(chat_id, TERMINAL)
    assert unread(api, chat_id)
    stream = api.model.open_stream(chat_id, 0, api.now)
    assert not unread(api, chat_id)
    assert api.send(chat_id, "again").status == 200
    api.run_until(chat_id, TERMINAL)
    assert unread(api, chat_id)
    stream.close()
    assert not unread(api, chat_id)


def test_moving_the_read_marker_is_not_activity_and_keeps_the_chats_place() -> None:
    api = Api()
    chat_id = api.create("hello")
    api.run_until(chat_id, TERMINAL)
    before = api.chat(chat_id)["updated_at"]
    api.advance(5)
    assert api.request("PATCH", f"/{chat_id}", {"read": True}).status == 204
    assert api.chat(chat_id)["updated_at"] == before
    api.advance(5)
    assert api.request("PATCH", f"/{chat_id}", {"read": False, "pin_order": 1}).status == 204
    assert api.chat(chat_id)["updated_at"] != before
