"""Edge cases of the pure model: validation branches, hand-built states, subscription
bookkeeping and the error values themselves."""

from __future__ import annotations

import pickle

import pytest

from coder_proto import CoderAgentError
from coder_proto.fake import (
    CallClientTool,
    CallServerTool,
    Cite,
    Fail,
    FakeApiError,
    FakeCoderModel,
    FakeConfig,
    FakeHttpResponse,
    FakeModelSpec,
    FakeQueuedMessage,
    Faults,
    Say,
    Script,
    ScriptBook,
    Wait,
)

from .support import V2, WEATHER_TOOL, Api, messages_of, text_content, text_of, types

LONG = Script((Say("partial "), Wait(10.0), Say("rest")))


def test_fake_api_error_is_a_library_error_and_pickles() -> None:
    error = FakeApiError(
        409, "Conflict here.", detail="why", validations=[{"field": "f", "detail": "d"}]
    )
    assert isinstance(error, CoderAgentError)
    assert str(error) == "409 Conflict here. (why)"
    assert "status=409" in repr(error)
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.status, clone.server_message, clone.detail, clone.validations) == (
        409,
        "Conflict here.",
        "why",
        [{"field": "f", "detail": "d"}],
    )
    assert FakeHttpResponse(status=204).json() is None


def test_chat_accessor_and_default_model_fallback() -> None:
    model = FakeCoderModel(
        FakeConfig(
            models=(
                FakeModelSpec(model="a", display_name="A", enabled=False),
                FakeModelSpec(model="b", display_name="B"),
            )
        )
    )
    api = Api(model)
    chat_id = api.create("x")
    assert model.chat(chat_id).id == chat_id
    assert api.chat(chat_id)["last_model_config_id"] == model.model_config_ids["b"], (
        "first enabled model"
    )
    with pytest.raises(KeyError):
        model.chat("nope")


def test_create_accepts_every_optional_field() -> None:
    workspace = "11111111-1111-4111-8111-111111111111"
    mcp = "22222222-2222-4222-8222-222222222222"
    api = Api(workspace_ids=[workspace], mcp_server_ids=[mcp.upper()])
    chat_id = api.create(
        "x",
        workspace_id=workspace.upper(),
        reasoning_effort="high",
        plan_mode="plan",
        mcp_server_ids=[mcp, mcp.upper()],
        labels={"team": "a"},
        client_type="ui",
        system_prompt="be brief",
        unsafe_dynamic_tools=[WEATHER_TOOL],
    )
    chat = api.chat(chat_id)
    assert chat["workspace_id"] == workspace
    assert chat["last_reasoning_effort"] == "high"
    assert chat["plan_mode"] == "plan"
    assert chat["mcp_server_ids"] == [mcp]
    assert chat["labels"] == {"team": "a"}
    assert chat["client_type"] == "ui"


def test_content_validation_branches() -> None:
    api = Api()
    body = {"organization_id": api.model.organization_id}
    ref = {
        "type": "file-reference",
        "file_name": "a.py",
        "start_line": 1,
        "end_line": 2,
        "content": "x = 1",
    }
    ok = api.request("POST", "", {**body, "content": [{"type": "text", "text": "see"}, ref]})
    assert ok.status == 201
    stored = api.messages(ok.json()["id"])["messages"][0]["content"][1]
    assert {k: stored[k] for k in ref} == ref
    cases = [
        (["not an object"], "content[0] must be an object."),
        (
            [
                {
                    "type": "file-reference",
                    "file_name": "",
                    "start_line": 1,
                    "end_line": 1,
                    "content": "",
                }
            ],
            "content[0].file_name cannot be empty for file-reference.",
        ),
        (
            [
                {
                    "type": "file-reference",
                    "file_name": "a",
                    "start_line": True,
                    "end_line": 1,
                    "content": "",
                }
            ],
            "content[0].start_line is invalid.",
        ),
        ("nope", None),
    ]
    for content, detail in cases:
        response = api.request("POST", "", {**body, "content": content})
        assert response.status == 400
        if detail is not None:
            assert response.json()["detail"] == detail
    upload = api.request(
        "POST",
        f"/files?organization={api.model.organization_id}",
        raw=b"hi",
        headers={
            "Content-Type": "text/plain",
            "Content-Disposition": 'attachment; filename="a.txt"',
        },
    )
    file_part = {"type": "file", "file_id": upload.json()["id"]}
    too_many = api.request("POST", "", {**body, "content": [file_part] * 51})
    assert (too_many.status, too_many.json()["message"]) == (400, "Chat attachment limit reached.")
    assert api.request("POST", "", {**body, "content": [file_part] * 50}).status == 201


def test_attachments_keep_the_50_most_recent() -> None:
    api = Api()
    ids = []
    for n in range(52):
        response = api.request(
            "POST",
            f"/files?organization={api.model.organization_id}",
            raw=f"file {n}".encode(),
            headers={
                "Content-Type": "text/plain",
                "Content-Disposition": f'attachment; filename="{n}.txt"',
            },
        )
        ids.append(response.json()["id"])
    body = {
        "organization_id": api.model.organization_id,
        "content": [{"type": "file", "file_id": i} for i in ids[:50]],
    }
    chat_id = api.request("POST", "", body).json()["id"]
    api.run_until(chat_id, {"waiting"})
    api.request(
        "POST",
        f"/{chat_id}/messages",
        {"content": [{"type": "file", "file_id": i} for i in ids[50:]]},
    )
    files = [f["id"] for f in api.chat(chat_id)["files"]]
    assert files == ids[2:], "linking more evicts the oldest"


def test_a_file_belongs_to_the_one_chat_that_first_carries_it() -> None:
    api = Api()
    upload = api.request(
        "POST",
        f"/files?organization={api.model.organization_id}",
        raw=b"notes",
        headers={
            "Content-Type": "text/plain",
            "Content-Disposition": 'attachment; filename="notes.txt"',
        },
    )
    file_part = {"type": "file", "file_id": upload.json()["id"]}
    body = {"organization_id": api.model.organization_id, "content": [file_part]}
    first = api.request("POST", "", body).json()["id"]
    chats = len(api.model.chats)
    unavailable = {
        "message": "Chat attachment unavailable.",
        "detail": "An attachment is no longer available. Upload it again and retry.",
    }
    refused = api.request("POST", "", body)
    assert (refused.status, refused.json()) == (400, unavailable)
    assert len(api.model.chats) == chats, "nothing was created"
    other = api.create("x")
    api.run_until(other, {"waiting"})
    sent = api.request("POST", f"/{other}/messages", {"content": [file_part]})
    assert (sent.status, sent.json()) == (400, unavailable)
    api.run_until(first, {"waiting"})
    again = api.request("POST", f"/{first}/messages", {"content": [file_part]})
    assert again.status == 200, "the chat that has the file may carry it again"


def test_send_validation_and_optional_fields() -> None:
    mcp = "22222222-2222-4222-8222-222222222222"
    api = Api(mcp_server_ids=[mcp])
    chat_id = api.create("x")
    api.run_until(chat_id, {"waiting"})
    unknown = "33333333-3333-4333-8333-333333333333"
    refused = api.request(
        "POST", f"/{chat_id}/messages", {"content": text_content("y"), "mcp_server_ids": [unknown]}
    )
    assert refused.status == 400
    assert refused.json() == {
        "message": "One or more MCP server IDs are invalid or disabled.",
        "detail": f"Invalid IDs: {unknown}",
    }
    gpt = api.model.model_config_ids["gpt-5"]
    response = api.request(
        "POST",
        f"/{chat_id}/messages",
        {
            "content": [{"type": "text", "text": "y"}],
            "model_config_id": gpt,
            "reasoning_effort": "low",
            "plan_mode": "",
            "mcp_server_ids": [mcp],
        },
    )
    assert response.status == 200
    assert response.json()["message"]["model_config_id"] == gpt
    chat = api.chat(chat_id)
    assert (
        chat["last_model_config_id"],
        chat["last_reasoning_effort"],
        chat["mcp_server_ids"],
    ) == (gpt, "low", [mcp])
    assert "plan_mode" not in chat
    disabled = api.model.model_config_ids["claude-opus-legacy"]
    refused = api.request(
        "POST",
        f"/{chat_id}/messages",
        {"content": [{"type": "text", "text": "y"}], "model_config_id": disabled},
    )
    assert refused.status == 400


def test_dynamic_tools_and_tool_results_shape_errors() -> None:
    api = Api()
    body = {
        "organization_id": api.model.organization_id,
        "content": [{"type": "text", "text": "x"}],
    }
    assert api.request("POST", "", {**body, "unsafe_dynamic_tools": "x"}).status == 400
    chat_id = api.create(
        "w",
        script=Script((CallClientTool(name="get_weather"),)),
        unsafe_dynamic_tools=[WEATHER_TOOL],
    )
    api.run_until(chat_id, {"requires_action"})
    assert api.request("POST", f"/{chat_id}/tool-results", {"results": "x"}).status == 400
    no_id = api.request("POST", f"/{chat_id}/tool-results", {"results": [{"output": 1}]})
    assert (no_id.status, no_id.json()["message"]) == (400, "Invalid tool result.")
    big = api.request(
        "POST", f"/{chat_id}/tool-results", raw=b'{"results": [' + b" " * (256 * 1024) + b"]}"
    )
    assert big.status == 413
    assert api.request("PATCH", f"/{chat_id}", {"archived": "yes"}).status == 400
    assert api.request("PATCH", f"/{chat_id}", raw=b"").status == 400


def test_promote_while_interrupting_keeps_the_wind_down() -> None:
    api = Api(interrupt_delay=1.0)
    chat_id = api.create("x", script=LONG)
    api.send(chat_id, "a")
    qid = api.send(chat_id, "b").json()["queued_message"]["id"]
    api.interrupt(chat_id)
    at = api.model.chats[chat_id].interrupt_at
    assert api.request("POST", f"/{chat_id}/queue/{qid}/promote").status == 202
    assert api.model.chats[chat_id].interrupt_at == at
    assert api.model.chats[chat_id].queue[0].id == qid


def test_interrupt_during_a_capacity_stall_commits_nothing() -> None:
    api = Api()
    api.model.faults.stall_runs(5.0)
    chat_id = api.create("x")
    api.interrupt(chat_id)
    api.run_until(chat_id, {"waiting"})
    assert [m["role"] for m in api.messages(chat_id)["messages"]] == ["user"]


def test_edit_clears_the_queue() -> None:
    api = Api()
    chat_id = api.create("x", script=LONG)
    first = api.messages(chat_id)["messages"][0]["id"]
    api.send(chat_id, "queued")
    stream = api.stream(chat_id)
    stream.pull()
    api.request(
        "PATCH", f"/{chat_id}/messages/{first}", {"content": [{"type": "text", "text": "new"}]}
    )
    assert api.model.chats[chat_id].queue == []
    batch = stream.pull()
    assert types(batch)[0] == "history_reset"
    assert "queue_update" in types(batch)


def test_a_running_chat_whose_worker_is_gone_stays_running() -> None:
    """A lease stall: the chat reads ``running`` and nothing happens."""
    api = Api()
    chat_id = api.create("x", script=LONG)
    api.model.runs.pop(chat_id)
    assert api.model.next_deadline() is None
    api.advance(100)
    assert api.status(chat_id) == "running"


def test_tool_results_without_a_worker_still_resume_the_chat() -> None:
    api = Api()
    chat_id = api.create(
        "w",
        script=Script((CallClientTool(name="get_weather"),)),
        unsafe_dynamic_tools=[WEATHER_TOOL],
    )
    api.run_until(chat_id, {"requires_action"})
    api.model.runs.pop(chat_id)
    call_id = api.pending_ids(chat_id)[0]
    assert api.results(chat_id, [{"tool_call_id": call_id, "output": 1}]).status == 204
    api.run_until(chat_id, {"waiting"})


def test_list_chats_queries() -> None:
    api = Api()
    a = api.create("alpha one")
    b = api.create("beta two")
    listed = api.request("GET", "?q=title:ALPHA has_unread:true").json()
    assert [c["id"] for c in listed] == [a]
    assert len(api.request("GET", "?limit=1").json()) == 1
    assert [c["id"] for c in api.request("GET", "?offset=1&limit=5").json()] == [a], "newest first"
    assert api.request("GET", "").json()[0]["id"] == b


def test_list_chats_after_a_cursor() -> None:
    api = Api()
    a = api.create("alpha one")
    b = api.create("beta two")
    assert [c["id"] for c in api.request("GET", f"?after_id={b.upper()}").json()] == [a]
    assert api.request("GET", f"?after_id={a}").json() == []
    assert api.request("GET", "?after_id=00000000-0000-4000-8000-000000000000").json() == []


def test_fail_with_detail_and_retries_exhausted() -> None:
    api = Api()
    chat_id = api.create("x", script=Script((Fail(message="m", detail="d", kind="auth"),)))
    api.run_until(chat_id, {"error"})
    assert api.chat(chat_id)["last_error"] == {
        "message": "m",
        "detail": "d",
        "kind": "auth",
        "retryable": False,
    }


def test_source_ids_and_server_tool_errors_are_committed() -> None:
    api = Api()
    script = Script(
        (
            Cite(url="https://a/", source_id="s1"),
            CallServerTool(name="x", result="bad", is_error=True),
            Say("ok"),
        )
    )
    chat_id = api.create("x", script=script)
    api.run_until(chat_id, {"waiting"})
    history = api.messages(chat_id)["messages"][::-1]
    assert history[1]["content"][0] == {
        **history[1]["content"][0],
        "type": "source",
        "source_id": "s1",
        "url": "https://a/",
    }
    assert history[2]["content"][0]["is_error"] is True


def test_upload_edge_cases() -> None:
    api = Api()
    org = api.model.organization_id
    bad_utf8 = api.request(
        "POST",
        f"/files?organization={org}",
        raw=b"\xff\xfe bad",
        headers={"Content-Type": "text/plain", "Content-Disposition": 'attachment; filename="a"'},
    )
    assert bad_utf8.status == 400
    star_empty = api.request(
        "POST",
        f"/files?organization={org}",
        raw=b"hi",
        headers={
            "Content-Type": "text/plain",
            "Content-Disposition": 'attachment; filename*=UTF-8\'\'; filename="plain\\"q.txt"',
        },
    )
    assert api.model.files[star_empty.json()["id"]].name == 'plain"q.txt'


def test_queued_message_json_without_model_config() -> None:
    queued = FakeQueuedMessage(id=1, chat_id="c", content=[], created_at="t")
    assert queued.to_json(zero_value_keys=True) == {
        "id": 1,
        "chat_id": "c",
        "content": [],
        "created_at": "t",
    }


def test_subscription_bookkeeping() -> None:
    api = Api()
    chat_id = api.create("x")
    stream = api.stream(chat_id)
    stream.sub.close()
    stream.sub.close()
    assert stream.sub.pull(api.now) == []
    assert stream.sub.next_deadline() is None
    assert api.model.counters.open_streams == 0
    api.model.faults.drop_stream_after_frames(0, route="watch")
    watch = api.watch()
    watch.sub.push({"kind": "x"})
    assert watch.pull() == []
    assert watch.sub.closed
    watch.sub.close()
    assert watch.pull() == []


def test_drops_mid_batch() -> None:
    """Drops cut a multi-frame batch at the right frame; a random drop with probability 1
    ends the connection after its first frame."""
    api = Api(chunk_delay=0.0)
    chat_id = api.create("start")
    for n in range(140):
        api.run_until(chat_id, {"waiting"})
        api.send(chat_id, f"m{n}")
    api.run_until(chat_id, {"waiting"})
    api.model.faults.drop_stream_after_frames(1)
    cut = api.stream(chat_id)
    assert len(cut.sub.pull(api.now)) == 1
    assert cut.sub.closed
    api.model.faults.drop_streams_randomly(1.0, seed=1)
    random_cut = api.stream(chat_id)
    assert len(random_cut.sub.pull(api.now)) == 1
    assert random_cut.sub.closed


def test_rules_for_other_chats_are_skipped() -> None:
    faults = Faults()
    faults.fail_snapshots(chat_id="a")
    assert faults.claim_snapshot_failure("b") is None
    assert faults.claim_snapshot_failure("a") is not None
    assert faults.claim_snapshot_failure("a") is None, "used up"


def test_script_book_json_without_default_and_script_json_without_delay() -> None:
    assert ScriptBook.from_json({"rules": []}).default is None
    assert Script((Say("x"),)).to_json() == {"items": [{"type": "say", "text": "x", "chunk": None}]}


def test_upgrade_to_a_non_stream_route_with_a_bad_token_is_401() -> None:
    api = Api()
    response = api.model.handle_upgrade(f"{V2}/watch", {"Coder-Session-Token": "bad"}, 0.0)
    assert isinstance(response, FakeHttpResponse) and response.status == 401


def test_echo_turn_text() -> None:
    api = Api()
    chat_id = api.create("ping pong")
    events = api.stream(chat_id).pull_until_status({"waiting"})
    assert text_of(messages_of(events)[-1]) == "You said: ping pong"


def test_disposition_parsing_and_header_lookup() -> None:
    api = Api()
    org = api.model.organization_id
    response = api.request(
        "POST",
        f"/files?organization={org}",
        raw=b"hi",
        headers={
            "Content-Type": "text/plain",
            "Content-Disposition": "attachment; size=2; filename*=broken; filename=plain.txt",
        },
    )
    assert api.model.files[response.json()["id"]].name == "plain.txt"
    assert response.header("content-type") == "application/json; charset=utf-8"
    assert response.header("x-missing") is None


def test_run_stalls_for_other_chats_do_not_apply() -> None:
    faults = Faults()
    faults.stall_runs(1.0, chat_id="a")
    assert faults.claim_run_stall("b") == 0.0
    assert faults.claim_run_stall("a") == 1.0


def test_a_drop_at_event_after_a_frame_drop_keeps_the_first_close_code() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.drop_stream_after_frames(0, close_code=1011)
    sub = api.stream(chat_id).sub
    sub._schedule_drop(1000)
    sub.pull(api.now)
    assert sub.closed and sub.close_code == 1011


def test_drain_advanced_reports_chats_whose_workers_moved() -> None:
    api = Api()
    a = api.create("a", script=Script((Wait(0.3), Say("x"))))
    b = api.create("b", script=Script((Wait(100.0),)))
    api.advance(0.01)
    assert api.model.drain_advanced() == {a, b}
    api.advance(0.5)
    assert api.model.drain_advanced() == {a}
    assert api.model.drain_advanced() == set()
    api.advance(200.0)
    assert api.model.drain_advanced() == {b}


def test_drain_touched_reports_the_chats_a_request_may_have_changed() -> None:
    api = Api()
    a = api.create("a", script=Script((Wait(100.0),)))
    b = api.create("b", script=Script((Wait(100.0),)))
    api.advance(0.5)
    # Creating the chats and starting their runs changed both.
    assert api.model.drain_touched() == {a, b}
    assert api.model.drain_touched() == set()
    # Reads, uploads and refused requests change no chat.
    api.chat(a)
    api.messages(b)
    upload = api.request(
        "POST",
        f"/files?organization={api.model.organization_id}",
        raw=b"hi",
        headers={
            "Content-Type": "text/plain",
            "Content-Disposition": 'attachment; filename="a.txt"',
        },
    )
    assert upload.status == 201
    assert api.request("POST", "/00000000-0000-0000-0000-000000000001/interrupt").status == 404
    assert api.model.drain_touched() == set()
    # A change to one chat names that chat only, even when the change is refused.
    assert api.request("PATCH", f"/{b}", {"archived": "yes"}).status == 400
    assert api.model.drain_touched() == {b}
    api.interrupt(a)
    assert api.model.drain_touched() == {a}


def test_drain_touched_names_the_family_of_a_changed_chat() -> None:
    api = Api()
    root = api.create("root")
    api.run_until(root, {"waiting"})
    child = api.model.spawn_child(root, "work", api.now).id
    api.run_until(child, {"waiting"})
    other = api.create("other")
    api.run_until(other, {"waiting"})
    api.model.drain_touched()
    # Archiving the root archives its sub-agent chat too.
    assert api.archive(root).status == 204
    assert api.model.drain_touched() == {root, child}
    assert api.model.chats[child].archived
    # A request on the sub-agent chat names its root as well.
    assert api.request("PATCH", f"/{child}", {"title": "t"}).status == 204
    assert api.model.drain_touched() == {root, child}
