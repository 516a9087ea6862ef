"""Builders and classifiers of the chat routes beside the turn loop (wire 2.4): message edit,
prompts, compact, clear, reconcile, title proposal, diff, by-workspace and signed download
URLs; the new ``update_chat`` fields; ``Chat``'s labels, pin order and children."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coder_proto import CoderAgentError, CoderApiError, CoderProtocolError
from coder_proto._rest import chat_extras as ops
from coder_proto._rest import routes
from coder_proto._rest.http import HttpResponse
from coder_proto._wire import TextInput
from coder_proto._wire.chats import Chat

CHAT = {"id": "c1", "status": "running"}
MESSAGE = {"id": 7, "chat_id": "c1", "role": "user", "created_at": "", "content": []}


def reply(status: int, body: Any = None) -> HttpResponse:
    return HttpResponse(status=status, body=b"" if body is None else json.dumps(body).encode())


def test_edit_patches_the_message_with_only_the_given_fields() -> None:
    request = ops.build_edit_chat_message(
        "c1",
        7,
        [TextInput("new")],
        model_config_id="m",
        reasoning_effort="high",
        mcp_server_ids=["s"],
    )
    assert (request.op, request.method, request.path) == (
        "edit_chat_message",
        "PATCH",
        "/api/v2/chats/c1/messages/7",
    )
    assert json.loads(request.body or b"") == {
        "content": [{"type": "text", "text": "new"}],
        "model_config_id": "m",
        "reasoning_effort": "high",
        "mcp_server_ids": ["s"],
    }
    plain = ops.build_edit_chat_message("c1", 7, [TextInput("new")])
    assert json.loads(plain.body or b"") == {"content": [{"type": "text", "text": "new"}]}
    edited = ops.parse_edit_chat_message(
        request,
        reply(200, {"message": MESSAGE, "messages": [MESSAGE], "deleted_message_ids": [7, 8]}),
    )
    assert (edited.message.id, edited.deleted_message_ids, len(edited.messages)) == (7, (7, 8), 1)


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (("c1", 0, [TextInput("x")]), "message_id"),
        (("c1", 7, []), "needs content"),
        (("", 7, [TextInput("x")]), "chat_id"),
    ],
)
def test_edit_arguments_are_checked_before_any_request(args: Any, wanted: str) -> None:
    with pytest.raises(CoderAgentError, match=wanted):
        ops.build_edit_chat_message(*args)


def test_an_edit_answer_of_another_shape_is_a_protocol_error() -> None:
    request = ops.build_edit_chat_message("c1", 7, [TextInput("x")])
    for body in ({"message": MESSAGE, "deleted_message_ids": ["x"]}, {"messages": []}):
        with pytest.raises(CoderProtocolError):
            ops.parse_edit_chat_message(request, reply(200, body))
    with pytest.raises(CoderApiError) as error:
        ops.parse_edit_chat_message(request, reply(404, {}))
    assert (error.value.status, error.value.chat_id) == (404, "c1")


def test_prompts_send_limit_only_when_given_and_parse_newest_first() -> None:
    assert ops.build_get_chat_prompts("c1").path == "/api/v2/chats/c1/prompts"
    request = ops.build_get_chat_prompts("c1", limit=2000)
    assert request.path == "/api/v2/chats/c1/prompts?limit=2000"
    prompts = ops.parse_get_chat_prompts(
        request, reply(200, {"prompts": [{"id": 9, "text": "b"}, {"id": 3, "text": "a"}]})
    )
    assert prompts == (ops.ChatPrompt(id=9, text="b"), ops.ChatPrompt(id=3, text="a"))
    assert ops.parse_get_chat_prompts(request, reply(200, {"prompts": None})) == ()
    for limit in (0, 2001, True):
        with pytest.raises(CoderAgentError, match="limit"):
            ops.build_get_chat_prompts("c1", limit=limit)


@pytest.mark.parametrize(
    ("build", "op", "suffix"),
    [
        (ops.build_refresh_chat_context, "refresh_chat_context", "context"),
        (ops.build_compact_chat, "compact_chat", "compact"),
        (ops.build_clear_chat, "clear_chat", "clear"),
        (ops.build_reconcile_chat, "reconcile_chat", "reconcile-invalid"),
    ],
)
def test_context_operations_post_no_body_and_answer_the_chat(
    build: Any, op: str, suffix: str
) -> None:
    request = build("c 1")
    assert (request.op, request.method, request.path, request.body) == (
        op,
        "PUT" if op == "refresh_chat_context" else "POST",
        f"/api/v2/chats/c%201/{suffix}",
        None,
    )
    assert ops.parse_chat_answer(request, reply(200, CHAT)).status == "running"
    with pytest.raises(CoderApiError) as error:
        ops.parse_chat_answer(request, reply(409, {}))
    assert error.value.chat_id == "c 1"


def test_title_proposal_and_diff() -> None:
    request = ops.build_propose_chat_title("c1")
    assert (request.method, request.path) == ("POST", "/api/v2/chats/c1/title/propose")
    assert ops.parse_propose_chat_title(request, reply(200, {"title": "T"})) == "T"
    with pytest.raises(CoderProtocolError):
        ops.parse_propose_chat_title(request, reply(200, {}))
    request = ops.build_get_chat_diff("c1")
    assert (request.method, request.path) == ("GET", "/api/v2/chats/c1/diff")
    diff = ops.parse_get_chat_diff(
        request, reply(200, {"chat_id": "c1", "diff": "+x", "branch": "main"})
    )
    assert (diff.diff, diff.branch, diff.provider) == ("+x", "main", None)


def test_by_workspace_joins_the_ids_and_checks_them() -> None:
    request = ops.build_get_chats_by_workspace(["a", "b"])
    assert (request.op, request.path) == (
        "get_chats_by_workspace",
        "/api/v2/chats/by-workspace?workspace_ids=a%2Cb",
    )
    assert ops.build_get_chats_by_workspace([]).path == "/api/v2/chats/by-workspace"
    assert ops.parse_get_chats_by_workspace(request, reply(200, {"a": "c1"})) == {"a": "c1"}
    with pytest.raises(CoderProtocolError):
        ops.parse_get_chats_by_workspace(request, reply(200, {"a": 1}))
    with pytest.raises(CoderApiError) as error:
        ops.parse_get_chats_by_workspace(request, reply(400, {}))
    assert error.value.chat_id is None
    for bad, wanted in (("ab", "sequence"), (["x"] * 26, "at most 25"), (["a,b"], "comma")):
        with pytest.raises(CoderAgentError, match=wanted):
            ops.build_get_chats_by_workspace(bad)


def test_a_download_url_is_asked_for_a_file_and_kept_out_of_reprs() -> None:
    request = ops.build_get_chat_file_download_url("f1")
    assert (request.method, request.path) == ("POST", "/api/v2/chats/files/f1/download-url")
    body = {
        "url": "https://x/api/v2/chats/files/f1/download?token=secret",
        "expires_at": "2026-01-01T00:00:00Z",
        "sha256": "ab",
        "size_bytes": 3,
        "name": "a.txt",
        "mime_type": "text/plain",
    }
    signed = ops.parse_get_chat_file_download_url(request, reply(200, body))
    assert (signed.size_bytes, signed.name, signed.url) == (3, "a.txt", body["url"])
    assert "secret" not in repr(signed)
    bare = ops.parse_get_chat_file_download_url(request, reply(200, {"url": "u"}))
    assert bare.size_bytes == 0


def test_update_chat_sends_pins_labels_plan_mode_and_workspace() -> None:
    request = routes.build_update_chat("c1", pin_order=0, labels={}, plan_mode="", workspace_id="w")
    assert json.loads(request.body or b"") == {
        "pin_order": 0,
        "labels": {},
        "plan_mode": "",
        "workspace_id": "w",
    }
    for kwargs, wanted in (
        ({"pin_order": -1}, "pin_order"),
        ({"pin_order": True}, "pin_order"),
        ({"labels": {"": "x"}}, "labels"),
        ({"labels": ["x"]}, "labels"),
        ({"plan_mode": 1}, "plan_mode"),
        ({}, "at least one"),
    ):
        with pytest.raises(CoderAgentError, match=wanted):
            routes.build_update_chat("c1", **kwargs)


def test_chat_reads_labels_pin_order_and_children() -> None:
    chat = Chat.from_json(
        {
            "id": "root",
            "labels": {"team": "a", "bad": 1},
            "pin_order": 2,
            "children": [{"id": "kid", "parent_chat_id": "root"}],
        }
    )
    assert (chat.labels, chat.pin_order) == ({"team": "a"}, 2)
    assert [c.parent_chat_id for c in chat.children] == ["root"]
    built = Chat(id="root", labels={"team": "a"}, pin_order=2, children=(Chat(id="kid"),))
    out = built.to_json()
    assert (out["labels"], out["pin_order"], out["children"][0]["id"]) == ({"team": "a"}, 2, "kid")
    assert "children" not in Chat(id="x").to_json()
    assert hash(built) == hash(
        Chat(id="root", labels={"other": "b"}, pin_order=2, children=(Chat(id="kid"),))
    )


@pytest.mark.parametrize(
    ("parse", "obj"),
    [
        (ops.ChatPrompt.from_json, {"id": 0, "text": "a"}),
        (ops.ChatDiff.from_json, {"chat_id": "../c1", "diff": ""}),
        (
            ops.EditedMessage.from_json,
            {
                "message": {"id": 4, "chat_id": "c1", "role": "user", "content": []},
                "deleted_message_ids": [4, -1],
            },
        ),
    ],
)
def test_identifiers_in_the_extra_routes_answers_are_checked(parse: Any, obj: Any) -> None:
    """Wire 3.9: a message id under 1 or a chat id that is not an identifier is refused."""
    with pytest.raises(CoderProtocolError):
        parse(obj)
