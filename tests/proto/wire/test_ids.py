"""Identifiers the server sends are checked where they are parsed (wire 3.9).

An id that is not one (a lone surrogate, which decoding turns into U+FFFD; a line break; a
path segment such as ``../``; an absurd length) is a ``CoderProtocolError`` at once, never a
repaired value used to build the next request, and the message says what is wrong without
repeating the value.
"""

from __future__ import annotations

from typing import Any

import pytest

from coder_proto import CoderApiError, CoderProtocolError
from coder_proto._json import dumps
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.routes import (
    build_create_chat,
    build_get_chat_cost,
    build_get_current_user,
    parse_create_chat,
    parse_default_organization,
    parse_get_chat_cost,
)
from coder_proto._rest.uploads import parse_upload_chat_file
from coder_proto._wire import (
    ActionToolCall,
    Chat,
    ChatMessage,
    ChatMessagesResponse,
    CreateChatRequest,
    TextInput,
    parse_frame,
    parse_part,
    parse_watch_frame,
)
from coder_proto._wire.events import _checked_chat_id
from coder_proto._wire.ids import MAX_MESSAGE_ID, MAX_RESOURCE_ID, MAX_TOOL_CALL_ID
from coder_proto._wire.unicode import decode_json

UUID = "0b1c3d4e-0000-4000-8000-00000000c0de"
HUGE = "x" * 100_000

#: Resource ids every server and test server gives: the real one's UUIDs (either case), the
#: short names of scripted servers, the longest accepted.
GOOD_IDS = [UUID, UUID.upper(), "chat-1", "c", "c1", "org_1", "a" * MAX_RESOURCE_ID]

#: Resource ids that are not, with what the message says about each.
BAD_IDS = [
    ("ab\ufffdcd", "U+FFFD at position 2"),  # a lone surrogate, as decoding leaves it
    ("ab\udc00cd", "U+DC00 at position 2"),  # one that was never decoded
    ("c1\r\nX-Injected: 1", "U+000D at position 2"),
    ("c1\n", "U+000A at position 2"),
    ("../../users/me", "U+002E at position 0"),
    ("c1/interrupt", "U+002F at position 2"),
    ("c 1", "U+0020 at position 1"),
    ("c%2F", "U+0025 at position 1"),
    ("chät", "U+00E4 at position 2"),
    ("-c1", "it starts with '-'"),
    ("_c1", "it starts with '_'"),
    ("", "it is empty"),
    ("a" * (MAX_RESOURCE_ID + 1), f"{MAX_RESOURCE_ID + 1} characters, more than 64"),
    (HUGE, "100000 characters, more than 64"),
]


def _chat(**fields: Any) -> dict[str, Any]:
    return {"id": UUID, "organization_id": UUID, "owner_id": UUID, **fields}


def _refused(call: Any, *args: Any, match: str) -> CoderProtocolError:
    with pytest.raises(CoderProtocolError, match=match) as raised:
        call(*args)
    assert len(str(raised.value)) < 300  # the value is never repeated
    return raised.value


# -- resource ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", GOOD_IDS)
def test_every_id_a_server_gives_is_kept_as_sent(value: str) -> None:
    chat = Chat.from_json(
        _chat(
            id=value,
            organization_id=value,
            owner_id=value,
            workspace_id=value,
            agent_id=value,
            parent_chat_id=value,
            root_chat_id=value,
        )
    )
    assert (chat.id, chat.organization_id, chat.owner_id) == (value, value, value)
    assert (chat.workspace_id, chat.agent_id, chat.parent_chat_id, chat.root_chat_id) == (
        (value,) * 4
    )


@pytest.mark.parametrize(("value", "why"), BAD_IDS)
def test_a_chat_id_that_is_not_an_identifier_is_refused(value: str, why: str) -> None:
    error = _refused(Chat.from_json, _chat(id=value), match="malformed chat: 'id'")
    assert why in str(error)
    if len(value) > 3:
        assert value not in str(error)


@pytest.mark.parametrize(
    "key", ["organization_id", "owner_id", "workspace_id", "agent_id", "parent_chat_id"]
)
@pytest.mark.parametrize(("value", "why"), [b for b in BAD_IDS if b[0]])
def test_every_id_of_a_chat_is_checked(key: str, value: str, why: str) -> None:
    error = _refused(Chat.from_json, _chat(**{key: value}), match=f"'{key}'")
    assert why in str(error)


def test_an_absent_or_empty_optional_id_is_none() -> None:
    chat = Chat.from_json({"id": "c1", "workspace_id": "", "agent_id": None, "organization_id": ""})
    assert (chat.workspace_id, chat.agent_id, chat.parent_chat_id) == (None, None, None)
    assert (chat.organization_id, chat.owner_id) == ("", "")


def test_an_id_of_the_wrong_type_is_refused_as_before() -> None:
    _refused(Chat.from_json, {"id": 5}, match="'id' should be a string, got int")
    _refused(Chat.from_json, {"id": None}, match="'id' is required")
    _refused(Chat.from_json, _chat(workspace_id=[UUID]), match="'workspace_id' should be a string")


def test_a_lone_surrogate_in_a_created_chats_id_is_refused_not_repaired() -> None:
    """The create answer of the hostile-server finding: decoding repairs the surrogate of
    every string (D32), and the id is then refused, not used as ``ab\\ufffdcd``."""
    body = b'{"id":"ab\\ud800cd","organization_id":"' + UUID.encode() + b'"}'
    assert decode_json(body)["id"] == "ab\ufffdcd"
    request = build_create_chat(CreateChatRequest(organization_id=UUID, content=(TextInput("hi"),)))
    error = _refused(
        parse_create_chat,
        request,
        HttpResponse(status=201, body=body),
        match=r"POST /api/v2/chats returned an unexpected body \(201\): malformed chat: 'id'",
    )
    assert "U+FFFD" in str(error)


def test_a_watch_event_naming_an_invalid_chat_is_refused() -> None:
    frame = dumps({"kind": "status_change", "chat": _chat(id="c1\nx")})
    _refused(parse_watch_frame, frame, match="malformed chat: 'id'")


# -- message and queue-entry ids -------------------------------------------------------------------


def _message(**fields: Any) -> dict[str, Any]:
    return {"id": 7, "chat_id": UUID, "role": "assistant", "content": [], **fields}


@pytest.mark.parametrize("value", [1, 7.0, MAX_MESSAGE_ID])
def test_a_message_id_is_a_positive_int64(value: int | float) -> None:
    assert ChatMessage.from_json(_message(id=value)).id == value
    page = ChatMessagesResponse.from_json({"queued_messages": [{"id": value, "chat_id": UUID}]})
    assert page.queued_messages[0].id == value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0, "it is not positive"),
        (-3, "it is not positive"),
        (MAX_MESSAGE_ID + 1, "larger than a 64-bit integer"),
        (10**400, "larger than a 64-bit integer"),
    ],
)
def test_a_message_or_queue_entry_id_outside_int64_is_refused(value: int, why: str) -> None:
    error = _refused(ChatMessage.from_json, _message(id=value), match="'id' is not a valid id")
    assert why in str(error)
    error = _refused(
        ChatMessagesResponse.from_json,
        {"queued_messages": [{"id": value, "chat_id": UUID}]},
        match="malformed queued message: 'id' is not a valid id",
    )
    assert why in str(error)


def test_the_chat_id_of_a_message_and_of_a_queue_entry_is_checked() -> None:
    assert ChatMessage.from_json(_message(chat_id="")).chat_id == ""
    _refused(ChatMessage.from_json, _message(chat_id="../x"), match="chat message: 'chat_id'")
    _refused(
        ChatMessagesResponse.from_json,
        {"queued_messages": [{"id": 1, "chat_id": "a\u2028b"}]},
        match="queued message: 'chat_id'",
    )


# -- tool-call and file ids --------------------------------------------------------------------


GOOD_CALL_IDS = [
    "call_0001_259fe6f4590b",
    "toolu_01A09q90qw90lq917835lq9",
    "functions.get_weather:0",
    "call 7",
    "呼び出し-1",
    "x" * MAX_TOOL_CALL_ID,
]
BAD_CALL_IDS = [
    ("call_\ufffd", "U+FFFD at position 5"),
    ("call_\udc00", "U+DC00 at position 5"),
    ("call\n7", "U+000A at position 4"),
    ("call\x007", "U+0000 at position 4"),
    ("call\x7f", "U+007F at position 4"),
    ("call\x85", "U+0085 at position 4"),
    ("call\u2028", "U+2028 at position 4"),
    ("x" * (MAX_TOOL_CALL_ID + 1), "257 characters, more than 256"),
    (HUGE, "100000 characters, more than 256"),
]


@pytest.mark.parametrize("value", GOOD_CALL_IDS)
def test_a_providers_tool_call_id_is_kept_as_sent(value: str) -> None:
    call = ActionToolCall.from_json({"tool_call_id": value, "tool_name": "t", "args": "{}"})
    assert call.tool_call_id == value
    for kind in ("tool-call", "tool-result"):
        assert parse_part({"type": kind, "tool_call_id": value}).tool_call_id == value  # type: ignore[union-attr]


@pytest.mark.parametrize(("value", "why"), BAD_CALL_IDS)
def test_a_tool_call_id_that_is_not_one_is_refused(value: str, why: str) -> None:
    error = _refused(
        ActionToolCall.from_json,
        {"tool_call_id": value, "tool_name": "t", "args": "{}"},
        match="malformed action_required tool call: 'tool_call_id' is not a valid tool-call id",
    )
    assert why in str(error)
    for kind in ("tool-call", "tool-result"):
        error = _refused(parse_part, {"type": kind, "tool_call_id": value}, match=f"{kind} part")
        assert why in str(error)


def test_a_pending_call_needs_an_id_and_a_part_may_have_none() -> None:
    _refused(
        ActionToolCall.from_json,
        {"tool_call_id": "", "tool_name": "t"},
        match="'tool_call_id' is empty",
    )
    assert parse_part({"type": "tool-call", "tool_name": "t"}).tool_call_id == ""  # type: ignore[union-attr]


def test_a_file_parts_id_is_checked() -> None:
    assert parse_part({"type": "file", "file_id": UUID}).file_id == UUID  # type: ignore[union-attr]
    assert parse_part({"type": "file", "file_id": ""}).file_id == ""  # type: ignore[union-attr]
    assert parse_part({"type": "file", "file_id": None}).file_id is None  # type: ignore[union-attr]
    _refused(parse_part, {"type": "file", "file_id": "../f"}, match="file part: 'file_id'")


def test_an_uploaded_files_id_is_checked() -> None:
    request = HttpRequest.build("upload_chat_file", "POST", "/api/v2/chats/files?organization=o")
    ok = HttpResponse(status=201, body=dumps({"id": UUID}))
    assert parse_upload_chat_file(request, ok) == UUID
    bad = HttpResponse(status=201, body=b'{"id":"f\\ud800"}')
    error = _refused(
        parse_upload_chat_file,
        request,
        bad,
        match=r"POST /api/v2/chats/files returned an unexpected body \(201\): .*'id'",
    )
    assert "organization=o" not in str(error)
    # An answer without an id is still the server's error (wire 2).
    with pytest.raises(CoderApiError):
        parse_upload_chat_file(request, HttpResponse(status=201, body=b'{"id":""}'))


# -- ids in REST answers --------------------------------------------------------------------------


def test_the_default_organization_is_an_identifier() -> None:
    request = build_get_current_user()

    def answer(ids: list[Any]) -> HttpResponse:
        return HttpResponse(status=200, body=dumps({"organization_ids": ids}))

    assert parse_default_organization(request, answer([UUID])) == UUID
    error = _refused(
        parse_default_organization,
        request,
        answer([UUID, "org\r\n"]),
        match=r"malformed user: 'organization_ids\[1\]' is not a valid identifier",
    )
    assert "/api/v2/users/me" in str(error)
    _refused(
        parse_default_organization,
        request,
        answer([[HUGE]]),
        match=r"organization_ids\[0\] must be a string, got list",
    )


def test_a_cost_answer_names_its_chat_by_an_identifier() -> None:
    request = build_get_chat_cost(UUID)
    cost = parse_get_chat_cost(request, HttpResponse(status=200, body=dumps({"chat_id": UUID})))
    assert cost.chat_id == UUID
    _refused(
        parse_get_chat_cost,
        request,
        HttpResponse(status=200, body=dumps({"chat_id": "c/1"})),
        match="malformed chat cost: 'chat_id'",
    )


# -- ids in stream events --------------------------------------------------------------------------


def _delta(chat_id: str, part: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "message_part",
        "chat_id": chat_id,
        "message_part": {"role": "assistant", "part": part or {"type": "text", "text": "a"}},
    }


#: Every way an event reaches its parser: a text delta in an array (the hot path), one in a
#: frame of its own, a delta the shortcut does not build, the other event types, an unknown
#: type, a legacy envelope.
EVENT_SHAPES = [
    lambda c: [_delta(c)],
    lambda c: _delta(c),
    lambda c: [_delta(c, {"type": "tool-call", "tool_call_id": "t", "args_delta": "{"})],
    lambda c: [{"type": "status", "chat_id": c, "status": {"status": "running"}}],
    lambda c: [{"type": "message", "chat_id": c, "message": _message()}],
    lambda c: [{"type": "preview_reset", "chat_id": c}],
    lambda c: [{"type": "mystery", "chat_id": c}],
    lambda c: {"type": "data", "data": [_delta(c)]},
]


@pytest.mark.parametrize("shape", range(len(EVENT_SHAPES)))
@pytest.mark.parametrize(("value", "why"), [b for b in BAD_IDS if b[0]])
def test_an_invalid_chat_id_is_refused_on_every_way_an_event_is_parsed(
    shape: int, value: str, why: str
) -> None:
    make = EVENT_SHAPES[shape]
    # A valid id first, so the check the stream makes once per chat id has passed for one.
    assert parse_frame(dumps(make(UUID)))[0].chat_id == UUID
    assert _checked_chat_id[0] == UUID
    error = _refused(parse_frame, dumps(make(value)), match="'chat_id' is not a valid identifier")
    # A frame is decoded first: its lone surrogates are U+FFFD by then (D32).
    assert why.replace("U+DC00", "U+FFFD") in str(error)
    assert _checked_chat_id[0] == UUID


@pytest.mark.parametrize("shape", range(len(EVENT_SHAPES)))
def test_an_event_without_a_chat_id_names_none(shape: int) -> None:
    for chat_id in ("", 5):
        events = parse_frame(dumps(EVENT_SHAPES[shape](chat_id)))  # type: ignore[arg-type]
        assert events[0].chat_id == ""


def test_a_long_batch_of_one_chats_deltas_is_checked_once_and_kept() -> None:
    frame = dumps([_delta("chat-1") for _ in range(600)])
    events = parse_frame(frame)
    assert len(events) == 600 and {e.chat_id for e in events} == {"chat-1"}
    bad = dumps([_delta("chat-1") for _ in range(599)] + [_delta("chat-1\n")])
    _refused(parse_frame, bad, match="U\\+000A at position 6")
