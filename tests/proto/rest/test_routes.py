"""REST operation builders and classifiers (wire 2, 3.6, 10; D10, D11, D17, D24)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError, CoderApiError, CoderProtocolError
from coder_proto._rest import routes as ops
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._wire import (
    CreateChatMessageRequest,
    CreateChatRequest,
    FileInput,
    TextInput,
    ToolResultInput,
)

CHAT = {"id": "c1", "organization_id": "o", "status": "running", "title": "t"}
JSON_CT = ("Content-Type", "application/json")


def reply(status: int, body: Any = None, *, raw: bytes | None = None, **kw: Any) -> HttpResponse:
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    return HttpResponse(status=status, body=data, **kw)


def api_error(
    parse: Callable[..., Any], request: HttpRequest, response: HttpResponse
) -> CoderApiError:
    with pytest.raises(CoderApiError) as info:
        parse(request, response)
    return info.value


# -- create_chat ------------------------------------------------------------------------------


def test_wire_2_create_chat_posts_the_request_body_as_json() -> None:
    body = CreateChatRequest(
        organization_id="org", content=(TextInput("hi"), FileInput("f1")), system_prompt="s"
    )
    request = ops.build_create_chat(body)
    assert (request.op, request.method, request.path) == ("create_chat", "POST", "/api/v2/chats")
    assert request.headers == (JSON_CT,)
    assert json.loads(request.body or b"") == {
        "organization_id": "org",
        "content": [{"type": "text", "text": "hi"}, {"type": "file", "file_id": "f1"}],
        "client_type": "api",
        "system_prompt": "s",
    }
    chat = ops.parse_create_chat(request, reply(201, CHAT))
    assert (chat.id, chat.status) == ("c1", "running")


def test_create_chat_validates_its_arguments() -> None:
    with pytest.raises(CoderAgentError, match="organization_id"):
        ops.build_create_chat(CreateChatRequest(organization_id="", content=(TextInput("x"),)))
    with pytest.raises(CoderAgentError, match="CreateChatRequest"):
        ops.build_create_chat({"organization_id": "o"})  # type: ignore[arg-type]


def test_wire_10_create_chat_error_carries_message_and_detail() -> None:
    request = ops.build_create_chat(CreateChatRequest(organization_id="o", content=()))
    error = api_error(
        ops.parse_create_chat,
        request,
        reply(400, {"message": "No chat model is available in this organization.", "detail": "d"}),
    )
    assert error.status == 400
    assert str(error) == (
        "Coder API POST /api/v2/chats failed (400): "
        "No chat model is available in this organization. — d"
    )
    assert error.chat_id is None


@pytest.mark.parametrize(
    "response",
    [reply(201), reply(201, []), reply(200, {"title": "no id"}), reply(200, raw=b"{not json")],
)
def test_wire_2_a_success_with_the_wrong_shape_is_a_protocol_error(response: HttpResponse) -> None:
    request = ops.build_create_chat(CreateChatRequest(organization_id="o", content=()))
    with pytest.raises(CoderProtocolError, match="POST /api/v2/chats returned an unexpected body"):
        ops.parse_create_chat(request, response)


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (reply(201), "the body is empty"),
        (reply(201, raw=b"{not json"), "the body is not valid JSON"),
        (reply(200, raw=b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
        # A surrogate escape sends the document to the decoder that repairs it (D32).
        (reply(200, raw=b"[" * 100_000 + b'"\\ud800"' + b"]" * 100_000), "nested too deeply"),
        (reply(200, raw=b"{" + b'"a":{' * 50_000 + b"}" * 50_001), "nested too deeply"),
    ],
)
def test_wire_2_an_answer_that_is_not_a_document_says_what_it_is(
    response: HttpResponse, why: str
) -> None:
    """A body nested 100,000 deep is reported as such, with the limit, not as a value of the
    wrong type; so are an empty body and one that is not JSON."""
    request = ops.build_get_chat("c1")
    with pytest.raises(CoderProtocolError) as info:
        ops.parse_get_chat(request, response)
    message = str(info.value)
    assert message.startswith("Coder API GET /api/v2/chats/c1 returned an unexpected body")
    assert why in message and "NoneType" not in message
    if why == "nested too deeply":
        assert f"recursion limit, {sys.getrecursionlimit()})" in message


# -- per-chat routes and id validation --------------------------------------------------------


def test_wire_2_get_chat_has_no_body_and_quotes_the_id() -> None:
    request = ops.build_get_chat("a/b c?")
    assert (request.op, request.method, request.path) == (
        "get_chat",
        "GET",
        "/api/v2/chats/a%2Fb%20c%3F",
    )
    assert request.body is None
    assert request.headers == ()
    assert ops.parse_get_chat(request, reply(200, CHAT)).id == "c1"


@pytest.mark.parametrize("bad", ["", "   ", None, 5, b"c1"])
def test_chat_ids_must_be_non_empty_strings(bad: Any) -> None:
    builders: list[Callable[[Any], HttpRequest]] = [
        ops.build_get_chat,
        ops.build_archive_chat,
        ops.build_get_chat_cost,
        lambda c: ops.build_get_messages(c),
        lambda c: ops.build_interrupt_chat(c),
        lambda c: ops.build_update_chat(c, title="t"),
        lambda c: ops.build_delete_queued_message(c, 1),
        lambda c: ops.build_submit_tool_results(c, []),
        lambda c: ops.build_create_chat_message(c, CreateChatMessageRequest(content=())),
    ]
    for build in builders:
        with pytest.raises(CoderAgentError, match="chat_id must be a non-empty string"):
            build(bad)


def test_ids_that_are_not_valid_unicode_are_refused_with_a_library_error() -> None:
    """A lone surrogate cannot go into a URL: a typed error naming the argument, never a
    ``UnicodeEncodeError`` out of the route builder."""
    for build in (ops.build_get_chat, lambda c: ops.build_interrupt_chat(c)):
        with pytest.raises(CoderAgentError, match="chat_id must be valid Unicode text"):
            build("chat-\ud800")
    with pytest.raises(CoderAgentError, match="file_id must be valid Unicode text"):
        ops.build_get_chat_file("\udfff")
    # Surrogate pairs written as one character are ordinary text.
    assert ops.build_get_chat("c\U0001f600").path == "/api/v2/chats/c%F0%9F%98%80"


def test_wire_10_errors_on_chat_routes_name_the_chat_even_after_a_legacy_rewrite() -> None:
    selector = PrefixSelector("/api/experimental/chats")
    request = selector.begin(ops.build_get_chat("c 1")).request
    assert request.path == "/api/experimental/chats/c%201"
    error = api_error(ops.parse_get_chat, request, reply(404, {"message": "Resource not found"}))
    assert (error.status, error.path, error.chat_id) == (404, request.path, "c 1")
    assert not error.retryable


def test_error_message_falls_back_to_the_status_text() -> None:
    request = ops.build_get_chat("c1")
    error = api_error(ops.parse_get_chat, request, reply(503, raw=b"<html>"))
    assert str(error) == "Coder API GET /api/v2/chats/c1 failed (503): Service Unavailable"
    assert error.retryable


# -- list_chats ------------------------------------------------------------------------------


def test_list_chats_sends_query_parameters_only_when_given() -> None:
    assert ops.build_list_chats().path == "/api/v2/chats"
    request = ops.build_list_chats(
        q="archived:false", labels={"a": "b c", "k": "v"}, limit=5, offset=0
    )
    assert (
        request.path
        == "/api/v2/chats?q=archived%3Afalse&label=a%3Ab%20c&label=k%3Av&limit=5&offset=0"
    )
    assert request.op == "list_chats"
    chats = ops.parse_list_chats(request, reply(200, [CHAT, {**CHAT, "id": "c2"}]))
    assert [c.id for c in chats] == ["c1", "c2"]
    with pytest.raises(CoderProtocolError):
        ops.parse_list_chats(request, reply(200, {"chats": []}))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"q": 3},
        {"labels": {"": "x"}},
        {"labels": {"a": 1}},
        {"limit": 0},
        {"offset": -1},
        {"offset": "1"},
    ],
)
def test_list_chats_rejects_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(CoderAgentError):
        ops.build_list_chats(**kwargs)


# -- update_chat / archive_chat --------------------------------------------------------------


def test_wire_2_update_chat_sends_only_the_given_fields() -> None:
    assert ops.build_update_chat("c1", title="T").json == {"title": "T"}
    assert ops.build_update_chat("c1", archived=False).json == {"archived": False}
    request = ops.build_update_chat("c1", title="T", archived=True)
    assert (request.op, request.method, request.path) == (
        "update_chat",
        "PATCH",
        "/api/v2/chats/c1",
    )
    assert request.body == b'{"title":"T","archived":true}'
    assert ops.parse_update_chat(request, reply(204)) is None
    error = api_error(
        ops.parse_update_chat, request, reply(400, {"message": "Title cannot be empty."})
    )
    assert error.server_message == "Title cannot be empty."


@pytest.mark.parametrize("kwargs", [{}, {"title": 5}, {"archived": "yes"}, {"archived": 1}])
def test_update_chat_rejects_empty_or_mistyped_updates(kwargs: dict[str, Any]) -> None:
    with pytest.raises(CoderAgentError):
        ops.build_update_chat("c1", **kwargs)


def test_wire_2_archive_chat_sends_exactly_archived_true_with_its_own_op() -> None:
    request = ops.build_archive_chat("c1")
    assert (request.op, request.method, request.path) == (
        "archive_chat",
        "PATCH",
        "/api/v2/chats/c1",
    )
    assert request.body == b'{"archived":true}'
    assert request.headers == (JSON_CT,)
    assert ops.parse_archive_chat(request, reply(204)) == "archived"


def test_D10_already_archived_counts_as_success() -> None:
    request = ops.build_archive_chat("c1")
    outcome = ops.parse_archive_chat(request, reply(400, {"message": "Chat is already archived."}))
    assert outcome == "already_archived"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (409, "Cannot archive an active chat. Interrupt or wait for the chat to finish first."),
        (400, "Chat archive state can only be changed on the root chat."),
        (404, "Chat is already archived."),
        (400, "Chat is already not archived."),
    ],
)
def test_D10_other_archive_errors_are_raised(status: int, message: str) -> None:
    request = ops.build_archive_chat("c1")
    error = api_error(ops.parse_archive_chat, request, reply(status, {"message": message}))
    assert (error.status, error.server_message, error.chat_id) == (status, message, "c1")
    assert not ops.is_already_archived(error)


def test_is_already_archived_only_matches_the_exact_400() -> None:
    request = ops.build_archive_chat("c1")
    error = api_error(
        ops.parse_get_chat, request, reply(400, {"message": "Chat is already archived."})
    )
    assert ops.is_already_archived(error)
    assert not ops.is_already_archived(ValueError("Chat is already archived."))


# -- messages --------------------------------------------------------------------------------


def test_wire_2_create_chat_message() -> None:
    body = CreateChatMessageRequest(content=(TextInput("hi"),), busy_behavior="interrupt")
    request = ops.build_create_chat_message("c1", body)
    assert (request.op, request.method, request.path) == (
        "create_chat_message",
        "POST",
        "/api/v2/chats/c1/messages",
    )
    assert request.json == {
        "content": [{"type": "text", "text": "hi"}],
        "busy_behavior": "interrupt",
    }
    response = ops.parse_create_chat_message(
        request,
        reply(
            200,
            {
                "queued": True,
                "queued_message": {"id": 4, "chat_id": "c1", "content": [], "created_at": ""},
            },
        ),
    )
    assert response.queued
    assert response.queued_message is not None
    assert response.queued_message.id == 4
    with pytest.raises(CoderAgentError, match="CreateChatMessageRequest"):
        ops.build_create_chat_message("c1", {"content": []})  # type: ignore[arg-type]
    error = api_error(
        ops.parse_create_chat_message,
        request,
        reply(
            429,
            {"message": "Message queue is full.", "detail": "Maximum 20 messages can be queued."},
        ),
    )
    assert (error.status, error.retryable, error.detail) == (
        429,
        True,
        "Maximum 20 messages can be queued.",
    )


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({}, "/api/v2/chats/c1/messages"),
        ({"limit": 1}, "/api/v2/chats/c1/messages?limit=1"),
        ({"after_id": 10}, "/api/v2/chats/c1/messages?after_id=10"),
        (
            {"before_id": 20, "after_id": 10, "limit": 200},
            "/api/v2/chats/c1/messages?before_id=20&after_id=10&limit=200",
        ),
    ],
)
def test_wire_2_get_messages_query_only_when_given(kwargs: dict[str, Any], path: str) -> None:
    request = ops.build_get_messages("c1", **kwargs)
    assert (request.op, request.method, request.path, request.body) == (
        "get_messages",
        "GET",
        path,
        None,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"before_id": 0},
        {"after_id": -1},
        {"limit": 0},
        {"after_id": True},
        {"before_id": "3"},
        {"limit": 1.0},
    ],
)
def test_get_messages_cursors_must_be_positive_integers(kwargs: dict[str, Any]) -> None:
    name = next(iter(kwargs))
    with pytest.raises(CoderAgentError, match=f"{name} must be a positive integer"):
        ops.build_get_messages("c1", **kwargs)


def test_get_messages_parses_the_page() -> None:
    request = ops.build_get_messages("c1", limit=1)
    page = ops.parse_get_messages(
        request,
        reply(
            200,
            {
                "messages": [
                    {"id": 9, "chat_id": "c1", "role": "user", "created_at": "", "content": []}
                ],
                "queued_messages": [],
                "has_more": True,
            },
        ),
    )
    assert [m.id for m in page.messages] == [9]
    assert page.has_more
    with pytest.raises(CoderProtocolError):
        ops.parse_get_messages(request, reply(200, {"messages": "nope"}))


def test_wire_2_submit_tool_results_posts_results() -> None:
    results = [
        ToolResultInput(tool_call_id="t1", output={"ok": 1}),
        ToolResultInput(tool_call_id="t2", output="x", is_error=True),
    ]
    request = ops.build_submit_tool_results("c1", results)
    assert (request.op, request.method, request.path) == (
        "submit_tool_results",
        "POST",
        "/api/v2/chats/c1/tool-results",
    )
    assert request.json == {
        "results": [
            {"tool_call_id": "t1", "output": {"ok": 1}, "is_error": False},
            {"tool_call_id": "t2", "output": "x", "is_error": True},
        ]
    }
    assert ops.parse_submit_tool_results(request, reply(204)) is None
    error = api_error(
        ops.parse_submit_tool_results,
        request,
        reply(409, {"message": "Chat is not waiting for tool results."}),
    )
    assert error.status == 409
    with pytest.raises(CoderAgentError, match="ToolResultInput"):
        ops.build_submit_tool_results("c1", [{"tool_call_id": "t"}])  # type: ignore[list-item]


def test_wire_2_interrupt_has_no_body_and_wait_only_when_asked() -> None:
    request = ops.build_interrupt_chat("c1")
    assert (request.op, request.method, request.path) == (
        "interrupt_chat",
        "POST",
        "/api/v2/chats/c1/interrupt",
    )
    assert (request.body, request.headers) == (None, ())
    assert ops.build_interrupt_chat("c1", wait=True).path == "/api/v2/chats/c1/interrupt?wait=true"
    chat = ops.parse_interrupt_chat(request, reply(200, {**CHAT, "status": "interrupting"}))
    assert chat.status == "interrupting"
    error = api_error(
        ops.parse_interrupt_chat,
        request,
        reply(409, {"message": "Chat is not in an interruptible state."}),
    )
    assert error.status == 409


def test_wire_2_delete_queued_message() -> None:
    request = ops.build_delete_queued_message("c1", 7)
    assert (request.op, request.method, request.path, request.body) == (
        "delete_queued_message",
        "DELETE",
        "/api/v2/chats/c1/queue/7",
        None,
    )
    assert ops.parse_delete_queued_message(request, reply(204)) is None
    error = api_error(
        ops.parse_delete_queued_message,
        request,
        reply(404, {"message": "Queued message not found."}),
    )
    assert error.status == 404
    for bad in (0, -3, True, "7", None):
        with pytest.raises(CoderAgentError, match="queued_message_id"):
            ops.build_delete_queued_message("c1", bad)  # type: ignore[arg-type]


def test_d35_edit_queued_message_sends_only_the_given_fields() -> None:
    request = ops.build_edit_queued_message("c1", 7, editing=True)
    assert (request.op, request.method, request.path, request.json) == (
        "edit_queued_message",
        "PATCH",
        "/api/v2/chats/c1/queue/7",
        {"editing": True},
    )
    full = ops.build_edit_queued_message(
        "c1",
        7,
        content=(TextInput("new"),),
        editing=False,
        model_config_id="m",
        reasoning_effort="high",
    )
    assert full.json == {
        "content": [{"type": "text", "text": "new"}],
        "editing": False,
        "model_config_id": "m",
        "reasoning_effort": "high",
    }
    assert ops.parse_edit_queued_message(request, reply(204)) is None
    error = api_error(
        ops.parse_edit_queued_message, request, reply(404, {"message": "Queued message not found."})
    )
    assert error.status == 404


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "needs content, editing"),
        ({"editing": 1}, "editing must be a bool"),
        ({"reasoning_effort": "high"}, "need content as well"),
        ({"model_config_id": "m", "editing": True}, "need content as well"),
        ({"content": (TextInput("x"),), "model_config_id": ""}, "model_config_id must be"),
        ({"content": (TextInput("x"),), "reasoning_effort": 3}, "reasoning_effort must be"),
    ],
)
def test_d35_edit_queued_message_refuses_what_the_server_would(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(CoderAgentError, match=match):
        ops.build_edit_queued_message("c1", 7, **kwargs)


def test_d35_promote_queued_message_posts_without_a_body() -> None:
    request = ops.build_promote_queued_message("c1", 7)
    assert (request.op, request.method, request.path, request.body) == (
        "promote_queued_message",
        "POST",
        "/api/v2/chats/c1/queue/7/promote",
        None,
    )
    assert ops.parse_promote_queued_message(request, reply(202, {"message": "ok"})) is None
    error = api_error(ops.parse_promote_queued_message, request, reply(409, {"message": "empty"}))
    assert error.status == 409
    with pytest.raises(CoderAgentError, match="queued_message_id"):
        ops.build_promote_queued_message("c1", 0)


def test_d35_a_paused_archive_refusal_says_the_queue_head_is_under_edit() -> None:
    request = ops.build_archive_chat("c1")
    paused = reply(409, {"message": "Cannot archive: a chat in this family is paused at ..."})
    error = api_error(ops.parse_archive_chat, request, paused)
    assert ops.is_paused_refusal(error) and not error.retryable
    assert "queue head is under edit" in str(error) and "c1" in str(error)
    active = api_error(ops.parse_archive_chat, request, reply(409, {"message": "active"}))
    assert not ops.is_paused_refusal(active)
    assert not ops.is_paused_refusal(ValueError("paused"))
    bare = ops.paused_archive_error(error, None)
    assert "archiving the chat was refused" in str(bare)


# -- files and cost --------------------------------------------------------------------------


def test_wire_2_get_chat_file_bytes_and_media_type() -> None:
    request = ops.build_get_chat_file("f/1")
    assert (request.op, request.method, request.path) == (
        "get_chat_file",
        "GET",
        "/api/v2/chats/files/f%2F1",
    )
    got = ops.parse_get_chat_file(
        request, reply(200, raw=b"\x89PNG", headers=(("content-type", "image/png"),))
    )
    assert (got.data, got.media_type) == (b"\x89PNG", "image/png")
    assert "4 bytes" in repr(got)
    for headers in ((), (("Content-Type", "  "),)):
        fallback = ops.parse_get_chat_file(request, reply(200, raw=b"x", headers=headers))
        assert fallback.media_type == "application/octet-stream"
    error = api_error(ops.parse_get_chat_file, request, reply(404))
    assert (error.status, error.chat_id) == (404, None)
    with pytest.raises(CoderAgentError, match="file_id"):
        ops.build_get_chat_file("")


def test_D17_get_chat_cost() -> None:
    request = ops.build_get_chat_cost("c1")
    assert (request.op, request.method, request.path) == (
        "get_chat_cost",
        "GET",
        "/api/v2/chats/c1/cost",
    )
    cost = ops.parse_get_chat_cost(
        request,
        reply(
            200,
            {
                "chat_id": "c1",
                "total_cost_micros": 1500,
                "request_count": 3,
                "unpriced_request_count": 0,
                "new": 1,
            },
        ),
    )
    assert (
        cost.chat_id,
        cost.total_cost_micros,
        cost.request_count,
        cost.unpriced_request_count,
    ) == ("c1", 1500, 3, 0)
    assert cost.raw["new"] == 1
    assert ops.parse_get_chat_cost(request, reply(200, {"chat_id": "c1"})).total_cost_micros is None
    with pytest.raises(CoderProtocolError):
        ops.parse_get_chat_cost(request, reply(200, {"chat_id": "c1", "request_count": "many"}))


def test_upload_helpers_are_reexported() -> None:
    from coder_proto._rest import uploads

    assert ops.build_upload_chat_file is uploads.build_upload_chat_file
    assert ops.parse_upload_chat_file is uploads.parse_upload_chat_file


# -- robustness ------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_keys = st.sampled_from(
    [
        "id",
        "status",
        "messages",
        "queued_messages",
        "message",
        "queued_message",
        "content",
        "role",
        "chat_id",
        "has_more",
        "queued",
        "last_error",
        "mcp_server_ids",
        "total_cost_micros",
        "title",
    ]
)
_shaped = st.dictionaries(_keys, _json, max_size=6)
_PARSERS: list[tuple[Callable[..., Any], HttpRequest]] = [
    (
        ops.parse_create_chat,
        ops.build_create_chat(CreateChatRequest(organization_id="o", content=())),
    ),
    (ops.parse_get_chat, ops.build_get_chat("c1")),
    (ops.parse_list_chats, ops.build_list_chats()),
    (
        ops.parse_create_chat_message,
        ops.build_create_chat_message("c1", CreateChatMessageRequest(content=())),
    ),
    (ops.parse_get_messages, ops.build_get_messages("c1")),
    (ops.parse_interrupt_chat, ops.build_interrupt_chat("c1")),
    (ops.parse_get_chat_cost, ops.build_get_chat_cost("c1")),
    (ops.parse_archive_chat, ops.build_archive_chat("c1")),
    (ops.parse_get_chat_file, ops.build_get_chat_file("f1")),
    (ops.parse_upload_chat_file, ops.build_upload_chat_file("o", b"x", media_type="text/plain")),
]


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=len(_PARSERS) - 1),
    status=st.sampled_from([200, 201, 204, 400, 404, 409, 500]),
    body=st.one_of(_json, _shaped, st.lists(_shaped, max_size=2)),
)
def test_classifiers_raise_only_library_errors_on_any_body(
    index: int, status: int, body: Any
) -> None:
    """Bad remote input gets a typed error: whatever the body, a classifier returns a value or
    raises a CoderAgentError subclass, never KeyError/TypeError/ValueError."""
    parse, request = _PARSERS[index]
    if status >= 300:
        with pytest.raises(CoderApiError):
            parse(request, reply(status, body))
        return
    try:
        parse(request, reply(status, body))
    except CoderAgentError:
        pass
