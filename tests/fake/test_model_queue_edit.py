"""The fake's queue edits and ``paused`` state, driven through ``handle_http`` with a manual
clock (server-behaviour 2.4, 2.6; D35): the edit route's codes and messages, the pause at a
turn boundary with the head under edit, and every way out of it."""

from __future__ import annotations

from typing import Any

from coder_proto.fake import Fail, Say, Script, Wait

from .support import Api, text_content, text_of

#: Keeps a chat running for 10 s of model time.
LONG = Script((Say("partial answer "), Wait(10.0), Say("the rest")))
SHORT = Script((Say("short answer"),))


def queue_path(chat_id: str, queued_id: int | str) -> str:
    return f"/{chat_id}/queue/{queued_id}"


def edit(api: Api, chat_id: str, queued_id: int | str, **body: Any) -> Any:
    return api.request("PATCH", queue_path(chat_id, queued_id), body)


def running_with_queue(api: Api, *texts: str) -> tuple[str, list[int]]:
    chat_id = api.create("long", script=LONG)
    api.advance(0.1)
    ids = []
    for text in texts:
        response = api.send(chat_id, text)
        assert response.status == 200, response.json()
        ids.append(int(response.json()["queued_message"]["id"]))
    return chat_id, ids


def queue(api: Api, chat_id: str) -> list[dict[str, Any]]:
    return list(api.messages(chat_id)["queued_messages"])


def paused_chat(api: Api, *texts: str) -> tuple[str, list[int]]:
    """A chat paused at its head (``texts[0]``) under edit, the other entries behind it."""
    chat_id, ids = running_with_queue(api, *texts)
    assert edit(api, chat_id, ids[0], editing=True).status == 204
    api.run_until(chat_id, {"paused"})
    return chat_id, ids


def default_model(api: Api) -> str:
    spec = api.model.catalog.default_spec()
    assert spec is not None
    return api.model.catalog.config_id(spec)


def error_of(response: Any) -> tuple[int, str]:
    return response.status, str(response.json()["message"])


# -- the edit route (server-behaviour 2.6) ---------------------------------------------------------


def test_d35_edit_validates_like_the_server() -> None:
    api = Api()
    chat_id, (qid,) = running_with_queue(api, "queued")
    assert error_of(edit(api, chat_id, "not-an-int", editing=True)) == (
        400,
        "Invalid queued message ID.",
    )
    assert error_of(edit(api, chat_id, qid)) == (400, "Nothing to edit.")
    assert error_of(edit(api, chat_id, qid, editing="yes"))[0] == 400
    assert error_of(edit(api, chat_id, qid, editing=True, reasoning_effort="high")) == (
        400,
        "model_config_id and reasoning_effort require content.",
    )
    assert error_of(edit(api, chat_id, qid, model_config_id=default_model(api))) == (
        400,
        "model_config_id and reasoning_effort require content.",
    )
    assert queue(api, chat_id)[0].get("editing_since") is None, "a refused edit begins none"
    assert error_of(edit(api, chat_id, qid, content=[])) == (400, "Content is required.")
    assert error_of(
        edit(api, chat_id, qid, content=text_content("x"), reasoning_effort="bogus")
    ) == (400, "Invalid reasoning_effort value.")
    assert edit(api, chat_id, qid + 100, editing=True).status == 404
    assert error_of(edit(api, chat_id, qid + 100, editing=True))[1] == "Queued message not found."


def test_d35_edit_of_an_entry_that_is_gone_is_a_404_and_archived_chats_refuse() -> None:
    api = Api()
    chat_id = api.create("short", script=SHORT)
    api.run_until(chat_id, {"waiting"})
    assert error_of(edit(api, chat_id, 1, editing=True)) == (404, "Queued message not found.")
    assert api.archive(chat_id).status == 204
    assert error_of(edit(api, chat_id, 1, editing=True)) == (
        400,
        "Cannot edit queued messages in an archived chat.",
    )


def test_d35_content_edits_keep_overrides_unless_given() -> None:
    api = Api()
    chat_id, (qid,) = running_with_queue(api, "original")
    model = default_model(api)
    assert (
        edit(
            api,
            chat_id,
            qid,
            content=text_content("with overrides"),
            model_config_id=model,
            reasoning_effort="high",
        ).status
        == 204
    )
    entry = queue(api, chat_id)[0]
    assert (text_of(entry), entry["model_config_id"], entry["reasoning_effort"]) == (
        "with overrides",
        model,
        "high",
    )
    assert edit(api, chat_id, qid, content=text_content("content only")).status == 204
    entry = queue(api, chat_id)[0]
    assert (text_of(entry), entry["reasoning_effort"]) == ("content only", "high")


def test_d35_one_entry_at_a_time_is_under_edit_and_beginning_again_keeps_the_time() -> None:
    api = Api()
    chat_id, (first, second) = running_with_queue(api, "one", "two")
    assert edit(api, chat_id, second, editing=True).status == 204
    assert edit(api, chat_id, first, editing=True).status == 204
    since = queue(api, chat_id)[0]["editing_since"]
    assert "editing_since" not in queue(api, chat_id)[1], "the previous edit ended"
    api.advance(1.0)
    assert edit(api, chat_id, first, editing=True).status == 204
    assert queue(api, chat_id)[0]["editing_since"] == since
    assert edit(api, chat_id, first, editing=False).status == 204
    assert "editing_since" not in queue(api, chat_id)[0]
    assert api.status(chat_id) == "running", "ending an edit of a running chat changes nothing"


# -- pausing (server-behaviour 2.6) -----------------------------------------------------------------


def test_d35_a_turn_that_ends_with_its_head_under_edit_pauses_and_promotes_nothing() -> None:
    api = Api()
    chat_id, (head, _behind) = running_with_queue(api, "head", "behind")
    assert edit(api, chat_id, head, editing=True).status == 204
    stream = api.stream(chat_id)
    events = stream.pull_until_status({"paused"})
    statuses = [e["status"]["status"] for e in events if e["type"] == "status"]
    assert statuses[-1] == "paused"
    assert [q["id"] for q in queue(api, chat_id)] == [head, _behind]
    users = [m for m in api.messages(chat_id)["messages"] if m["role"] == "user"]
    assert [text_of(m) for m in users] == ["long"], "nothing was promoted"
    assert api.chat(chat_id)["status"] == "paused"


def test_d35_an_edit_behind_the_head_pauses_only_once_that_entry_is_the_head() -> None:
    api = Api()
    chat_id, (_head, behind) = running_with_queue(api, "head", "behind")
    assert edit(api, chat_id, behind, editing=True).status == 204
    api.model.config.scripts.push(LONG)
    api.advance(11.0)
    assert api.status(chat_id) == "running"
    assert [q["id"] for q in queue(api, chat_id)] == [behind], "the head was promoted"
    api.run_until(chat_id, {"paused"})
    assert [q["id"] for q in queue(api, chat_id)] == [behind]


def test_d35_an_interruption_that_finishes_with_its_head_under_edit_pauses() -> None:
    api = Api(interrupt_delay=0.5)
    chat_id, (head,) = running_with_queue(api, "head")
    assert edit(api, chat_id, head, editing=True).status == 204
    assert api.interrupt(chat_id).status == 200
    api.run_until(chat_id, {"paused"})
    assert [q["id"] for q in queue(api, chat_id)] == [head]


def test_d35_a_paused_chat_refuses_interrupts_and_archives_and_queues_sends() -> None:
    api = Api()
    chat_id, (head,) = paused_chat(api, "head")
    assert error_of(api.interrupt(chat_id))[0] == 409
    assert error_of(api.archive(chat_id)) == (
        409,
        "Cannot archive: a chat in this family is paused at a queued message under edit. "
        "Finish editing, send, or remove that message first.",
    )
    for busy in ("queue", "interrupt"):
        response = api.send(chat_id, f"sent with {busy}", busy=busy)
        assert response.json()["queued"] is True
        assert api.status(chat_id) == "paused"
    assert len(queue(api, chat_id)) == 3
    assert edit(api, chat_id, head, content=text_content("rewritten")).status == 204
    assert api.status(chat_id) == "paused", "a content edit keeps the pause"


def test_d35_a_paused_chat_refuses_an_edit_of_another_entry() -> None:
    api = Api()
    chat_id, (head, behind) = paused_chat(api, "head", "behind")
    assert edit(api, chat_id, behind, editing=True).status == 409
    entries = queue(api, chat_id)
    assert entries[0]["editing_since"] and "editing_since" not in entries[1]
    assert edit(api, chat_id, head, editing=True).status == 204, "the head may begin again"


def test_d35_ending_the_heads_edit_sends_it() -> None:
    api = Api()
    chat_id, (head, behind) = paused_chat(api, "head", "behind")
    api.model.config.scripts.push(SHORT)
    response = edit(api, chat_id, head, content=text_content("edited head"), editing=False)
    assert response.status == 204
    assert api.status(chat_id) == "running"
    last = api.messages(chat_id)["messages"][0]
    assert (last["role"], text_of(last), last["queued_message_id"]) == ("user", "edited head", head)
    assert [q["id"] for q in queue(api, chat_id)] == [behind]


def test_d35_deleting_the_paused_head_goes_on_and_deleting_behind_it_keeps_the_pause() -> None:
    api = Api()
    chat_id, (head, _behind, last) = paused_chat(api, "head", "behind", "last")
    assert api.request("DELETE", queue_path(chat_id, last)).status == 204
    assert api.status(chat_id) == "paused"
    api.model.config.scripts.push(SHORT)
    assert api.request("DELETE", queue_path(chat_id, head)).status == 204
    assert api.status(chat_id) == "running"
    assert text_of(api.messages(chat_id)["messages"][0]) == "behind"
    assert queue(api, chat_id) == []

    chat_id, (only,) = paused_chat(api, "only")
    assert api.request("DELETE", queue_path(chat_id, only)).status == 204
    assert api.status(chat_id) == "waiting"


def test_d35_promoting_from_paused_sends_the_entry_and_the_head_keeps_its_edit() -> None:
    api = Api()
    chat_id, (head, behind) = paused_chat(api, "head", "behind")
    api.model.config.scripts.push(SHORT)
    assert api.request("POST", queue_path(chat_id, behind) + "/promote").status == 202
    assert api.status(chat_id) == "running"
    assert text_of(api.messages(chat_id)["messages"][0]) == "behind"
    assert queue(api, chat_id)[0]["editing_since"]
    api.run_until(chat_id, {"paused"})
    api.model.config.scripts.push(SHORT)
    assert api.request("POST", queue_path(chat_id, head) + "/promote").status == 202
    assert api.status(chat_id) == "running"
    assert queue(api, chat_id) == []
    api.run_until(chat_id, {"waiting"})


def test_d35_an_errored_chat_with_its_head_under_edit_does_not_promote_on_a_send() -> None:
    api = Api()
    chat_id = api.create("fail", script=Script((Say("x"), Wait(1.0), Fail(message="boom"))))
    head = int(api.send(chat_id, "queued while running").json()["queued_message"]["id"])
    assert edit(api, chat_id, head, editing=True).status == 204
    api.run_until(chat_id, {"error"})
    assert api.send(chat_id, "another").json()["queued"] is True
    assert api.status(chat_id) == "error"
    assert len(queue(api, chat_id)) == 2
    assert edit(api, chat_id, head, editing=False).status == 204
    assert api.status(chat_id) == "error", "ending the edit of an errored chat does not promote"


def test_d35_a_drop_before_the_terminal_status_covers_paused() -> None:
    api = Api()
    chat_id, (head,) = running_with_queue(api, "head")
    assert edit(api, chat_id, head, editing=True).status == 204
    api.model.faults.close_before_terminal_status(1, chat_id=chat_id)
    stream = api.stream(chat_id)
    api.run_until(chat_id, {"paused"})
    events = stream.pull()
    assert stream.sub.closed
    assert not any(e["type"] == "status" and e["status"]["status"] == "paused" for e in events)


def test_d35_promoting_the_head_under_edit_of_a_running_chat_ends_its_edit() -> None:
    api = Api(interrupt_delay=0.5)
    chat_id, (head,) = running_with_queue(api, "head")
    assert edit(api, chat_id, head, editing=True).status == 204
    api.model.config.scripts.push(SHORT)
    assert api.request("POST", queue_path(chat_id, head) + "/promote").status == 202
    assert api.status(chat_id) == "interrupting"
    assert "editing_since" not in queue(api, chat_id)[0]
    api.run_until(chat_id, {"running"})
    assert queue(api, chat_id) == [], "the interruption sent it instead of pausing"


def test_d35_a_queued_send_keeps_its_reasoning_effort_on_the_entry() -> None:
    api = Api()
    chat_id, _ids = running_with_queue(api)
    body = {"content": text_content("effortful"), "reasoning_effort": "low"}
    entry = api.request("POST", f"/{chat_id}/messages", body).json()["queued_message"]
    assert entry["reasoning_effort"] == "low"
    assert queue(api, chat_id)[0]["reasoning_effort"] == "low"
