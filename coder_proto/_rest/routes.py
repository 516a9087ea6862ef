"""Request builders and response classifiers for every chat REST operation (wire 2).

Each operation has a ``build_<op>`` function that validates its arguments and returns the
``HttpRequest`` (v2 path, the Python op name of D24, a JSON body only when the operation has
one, query parameters only when given), and a ``parse_<op>(request, response)`` function that
turns the answer into the typed result. Send the request through a
``coder_proto._rest.prefix.PrefixSelector`` and classify the ``Completed`` answer it returns.

Classifiers follow wire 2's body rules: status 200-299 is success; any other status raises the
``CoderApiError`` of wire 10 (with ``chat_id`` set on per-chat routes); a success whose body does
not have the documented shape raises ``CoderProtocolError``. Arguments are validated before any
request is built: an empty or non-string id or a non-positive message id raises
``CoderAgentError`` naming the argument, and ids are URL-quoted into the path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import quote, unquote, urlencode

import attrs

from .._constants import ALREADY_ARCHIVED_MESSAGE, LEGACY_PREFIX, V2_PREFIX
from .._errors import CoderAgentError, CoderApiError, CoderProtocolError
from .._wire.chats import (
    Chat,
    ChatInputPart,
    ChatMessagesResponse,
    CreateChatMessageRequest,
    CreateChatMessageResponse,
    CreateChatRequest,
    ToolResultInput,
    input_part_to_json,
    parse_chat_list,
    tool_results_body,
)
from .._wire.fields import get_list, opt_int, req_dict
from .._wire.ids import check_resource_id, get_resource_id
from .http import HttpRequest, HttpResponse, api_error_from_response
from .uploads import build_upload_chat_file, parse_upload_chat_file

__all__ = [
    "ArchiveOutcome",
    "ChatCost",
    "ChatFile",
    "build_archive_chat",
    "build_create_chat",
    "build_create_chat_message",
    "build_delete_queued_message",
    "build_edit_queued_message",
    "build_get_chat",
    "build_get_chat_cost",
    "build_get_chat_file",
    "build_get_current_user",
    "build_get_messages",
    "build_interrupt_chat",
    "build_list_chats",
    "build_promote_queued_message",
    "build_submit_tool_results",
    "build_update_chat",
    "build_upload_chat_file",
    "check_chat_id",
    "check_labels",
    "check_positive_id",
    "check_unicode",
    "ensure_ok",
    "is_already_archived",
    "is_paused_refusal",
    "parse_archive_chat",
    "parse_create_chat",
    "parse_create_chat_message",
    "parse_default_organization",
    "parse_delete_queued_message",
    "parse_edit_queued_message",
    "parse_get_chat",
    "parse_get_chat_cost",
    "parse_get_chat_file",
    "parse_get_messages",
    "parse_interrupt_chat",
    "parse_list_chats",
    "parse_promote_queued_message",
    "parse_submit_tool_results",
    "parse_update_chat",
    "parse_upload_chat_file",
]

T = TypeVar("T")

ArchiveOutcome = Literal["archived", "already_archived"]
"""What ``parse_archive_chat`` reports: archived by this call, or already archived (D10)."""

_DEFAULT_FILE_MEDIA_TYPE = "application/octet-stream"


# -- validation ------------------------------------------------------------------------------


def check_chat_id(chat_id: object, name: str = "chat_id") -> str:
    """Return ``chat_id`` when it is a non-blank string; otherwise raise ``CoderAgentError``
    naming the argument."""
    if type(chat_id) is not str or not chat_id.strip():
        raise CoderAgentError(f"{name} must be a non-empty string, got {chat_id!r}")
    return check_unicode(chat_id, name)


def check_unicode(value: str, name: str) -> str:
    """Return ``value`` when it is valid Unicode text; a lone surrogate (which JSON can carry
    as ``\\udXXXX`` but neither a URL nor UTF-8 can) raises ``CoderAgentError`` naming the
    argument. ASCII, nearly every id, is checked without encoding."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CoderAgentError(f"{name} must be valid Unicode text, got {value!r}") from None
    return value


def check_positive_id(value: object, name: str) -> int:
    """Return ``value`` when it is a positive integer (not a bool); otherwise raise
    ``CoderAgentError`` naming the argument (message and queue ids are positive, wire 3.4)."""
    if type(value) is not int or value <= 0:
        raise CoderAgentError(f"{name} must be a positive integer, got {value!r}")
    return value


def _seg(value: str) -> str:
    return quote(value, safe="")


def _chat_route(chat_id: object, *suffix: str) -> str:
    return "/".join((V2_PREFIX, _seg(check_chat_id(chat_id)), *suffix))


# -- classification helpers ------------------------------------------------------------------


def _chat_id_of(request: HttpRequest) -> str | None:
    """The chat id of a per-chat route (``{P}/{chat}/...``), for error context."""
    route = request.path.partition("?")[0]
    for prefix in (V2_PREFIX, LEGACY_PREFIX):
        if route.startswith(prefix + "/"):
            segment = route[len(prefix) + 1 :].partition("/")[0]
            if segment and segment not in ("files", "watch", "by-workspace"):
                return unquote(segment)
    return None


def ensure_ok(request: HttpRequest, response: HttpResponse) -> None:
    """Raise the ``CoderApiError`` of wire 10 unless ``response`` is a 2xx (wire 2)."""
    if not response.ok:
        raise api_error_from_response(request, response, chat_id=_chat_id_of(request))


def _shape(request: HttpRequest, response: HttpResponse, parse: Callable[[Any], T]) -> T:
    ensure_ok(request, response)
    try:
        return parse(response.document())
    except CoderProtocolError as exc:
        raise CoderProtocolError(
            f"Coder API {request.method} {request.path} returned an unexpected body "
            f"({response.status}): {exc.message}",
            chat_id=_chat_id_of(request),
        ) from exc


# -- chats -----------------------------------------------------------------------------------


def build_create_chat(body: CreateChatRequest) -> HttpRequest:
    """``POST {P}`` with the ``CreateChatRequest`` body (wire 2, 2.1)."""
    if not isinstance(body, CreateChatRequest):
        raise CoderAgentError("create_chat needs a CreateChatRequest body")
    check_chat_id(body.organization_id, "organization_id")
    return HttpRequest.build("create_chat", "POST", V2_PREFIX, json=body.to_json())


def parse_create_chat(request: HttpRequest, response: HttpResponse) -> Chat:
    """The created ``Chat`` (201 on the server; any 2xx is accepted)."""
    return _shape(request, response, Chat.from_json)


def build_get_chat(chat_id: str) -> HttpRequest:
    """``GET {P}/{chat_id}``."""
    return HttpRequest.build("get_chat", "GET", _chat_route(chat_id))


def parse_get_chat(request: HttpRequest, response: HttpResponse) -> Chat:
    """The ``Chat`` (200)."""
    return _shape(request, response, Chat.from_json)


def build_list_chats(
    *,
    q: str | None = None,
    labels: Mapping[str, str] | None = None,
    limit: int | None = None,
    offset: int | None = None,
) -> HttpRequest:
    """``GET {P}`` (the chat listing), with the server's search query ``q``, one
    ``label=key:value`` filter per entry of ``labels`` (AND), and pagination ``limit`` /
    ``offset``, each only when given (server-behaviour 1.2)."""
    pairs: list[tuple[str, str]] = []
    if q is not None:
        if type(q) is not str:
            raise CoderAgentError(f"q must be a string, got {q!r}")
        pairs.append(("q", q))
    for key, value in check_labels(labels or {}).items():
        pairs.append(("label", f"{key}:{value}"))
    if limit is not None:
        pairs.append(("limit", str(check_positive_id(limit, "limit"))))
    if offset is not None:
        if type(offset) is not int or offset < 0:
            raise CoderAgentError(f"offset must be a non-negative integer, got {offset!r}")
        pairs.append(("offset", str(offset)))
    path = V2_PREFIX
    if pairs:
        path += "?" + urlencode(pairs, quote_via=quote)
    return HttpRequest.build("list_chats", "GET", path)


def parse_list_chats(request: HttpRequest, response: HttpResponse) -> tuple[Chat, ...]:
    """The listed chats (200, a JSON array)."""
    return _shape(request, response, parse_chat_list)


def build_update_chat(
    chat_id: str,
    *,
    title: str | None = None,
    archived: bool | None = None,
    pin_order: int | None = None,
    labels: Mapping[str, str] | None = None,
    plan_mode: str | None = None,
    workspace_id: str | None = None,
    read: bool | None = None,
) -> HttpRequest:
    """``PATCH {P}/{chat_id}`` with ``{"title"?, "archived"?, "pin_order"?, "labels"?,
    "plan_mode"?, "workspace_id"?, "read"?}``: only the given fields are sent, and at least
    one is required. ``pin_order`` 0 unpins, a positive one pins (or moves a pinned chat
    there); ``labels`` replaces the whole label set (``{}`` removes every label);
    ``plan_mode`` ``"plan"`` turns plan mode on and ``""`` turns it off; ``read`` ``True``
    marks every answer so far as read (``Chat.has_unread`` turns false) and ``False`` marks
    them unread."""
    body: dict[str, Any] = {}
    if title is not None:
        if type(title) is not str:
            raise CoderAgentError(f"title must be a string, got {title!r}")
        body["title"] = title
    if archived is not None:
        if type(archived) is not bool:
            raise CoderAgentError(f"archived must be a bool, got {archived!r}")
        body["archived"] = archived
    if pin_order is not None:
        if type(pin_order) is not int or pin_order < 0:
            raise CoderAgentError(f"pin_order must be a non-negative integer, got {pin_order!r}")
        body["pin_order"] = pin_order
    if labels is not None:
        body["labels"] = check_labels(labels)
    if plan_mode is not None:
        if type(plan_mode) is not str:
            raise CoderAgentError(f"plan_mode must be a string, got {plan_mode!r}")
        body["plan_mode"] = plan_mode
    if workspace_id is not None:
        body["workspace_id"] = check_chat_id(workspace_id, "workspace_id")
    if read is not None:
        if type(read) is not bool:
            raise CoderAgentError(f"read must be a bool, got {read!r}")
        body["read"] = read
    if not body:
        raise CoderAgentError("update_chat needs at least one field to change")
    return HttpRequest.build("update_chat", "PATCH", _chat_route(chat_id), json=body)


def check_labels(labels: object) -> dict[str, str]:
    """``labels`` as a plain dict when it maps non-empty strings to strings; otherwise
    ``CoderAgentError``."""
    if not isinstance(labels, Mapping) or not all(
        type(k) is str and k and type(v) is str for k, v in labels.items()
    ):
        raise CoderAgentError("labels must map non-empty strings to strings")
    return dict(labels)


def parse_update_chat(request: HttpRequest, response: HttpResponse) -> None:
    """Success is any 2xx (204 on the server)."""
    ensure_ok(request, response)


def build_archive_chat(chat_id: str) -> HttpRequest:
    """``PATCH {P}/{chat_id}`` with exactly ``{"archived": true}``, op ``archive_chat``
    (wire 2, D10)."""
    return HttpRequest.build("archive_chat", "PATCH", _chat_route(chat_id), json={"archived": True})


def is_already_archived(error: BaseException) -> bool:
    """True for the server's ``400 "Chat is already archived."`` (D10)."""
    return (
        isinstance(error, CoderApiError)
        and error.status == 400
        and error.server_message == ALREADY_ARCHIVED_MESSAGE
    )


def is_paused_refusal(error: BaseException) -> bool:
    """True for an archive refused because a chat of the family is ``paused`` at a queued
    message under edit (a 409 whose message names the pause, D35): waiting does not end it,
    only finishing the edit, sending the message or removing it does."""
    return (
        isinstance(error, CoderApiError)
        and error.status == 409
        and "paused" in error.server_message.lower()
    )


def paused_archive_error(error: CoderApiError, chat_id: str | None) -> CoderApiError:
    """The ``CoderApiError`` raised for an archive refused by a paused chat (D35): the
    server's answer, with a message saying why it is final and what ends it."""
    target = chat_id or "the chat"
    refused = CoderApiError(
        f"archiving {target} was refused ({error.status}): its queue head is under edit, so "
        "the chat is paused; end the edit (editing=False), promote or delete that queued "
        f"message first. Server said: {error.server_message}",
        status=error.status,
        method=error.method,
        path=error.path,
        server_message=error.server_message,
        detail=error.detail,
        validations=error.validations,
        kind=error.kind,
        chat_id=error.chat_id,
    )
    refused.__cause__ = error
    return refused


def parse_archive_chat(request: HttpRequest, response: HttpResponse) -> ArchiveOutcome:
    """``"archived"`` on a 2xx; ``"already_archived"`` on the 400 whose message is
    "Chat is already archived." (archive is idempotent for us, D10); every other status raises
    its ``CoderApiError`` (a 409 means the chat is still active, or paused at a queued message
    under edit: D35 says so in the error's message)."""
    try:
        ensure_ok(request, response)
    except CoderApiError as exc:
        if is_already_archived(exc):
            return "already_archived"
        if is_paused_refusal(exc):
            raise paused_archive_error(exc, exc.chat_id) from exc
        raise
    return "archived"


# -- messages --------------------------------------------------------------------------------


def build_create_chat_message(chat_id: str, body: CreateChatMessageRequest) -> HttpRequest:
    """``POST {P}/{chat_id}/messages`` with the ``CreateChatMessageRequest`` body (wire 2.2)."""
    if not isinstance(body, CreateChatMessageRequest):
        raise CoderAgentError("create_chat_message needs a CreateChatMessageRequest body")
    return HttpRequest.build(
        "create_chat_message", "POST", _chat_route(chat_id, "messages"), json=body.to_json()
    )


def parse_create_chat_message(
    request: HttpRequest, response: HttpResponse
) -> CreateChatMessageResponse:
    """The ``CreateChatMessageResponse`` (200; wire 3.6)."""
    return _shape(request, response, CreateChatMessageResponse.from_json)


def build_get_messages(
    chat_id: str,
    *,
    before_id: int | None = None,
    after_id: int | None = None,
    limit: int | None = None,
) -> HttpRequest:
    """``GET {P}/{chat_id}/messages`` with ``before_id``, ``after_id`` and ``limit``, each only
    when given (wire 2). Ids and ``limit`` must be positive integers. Order (server): no cursor
    -> newest first; ``after_id`` alone -> ascending."""
    query: dict[str, object] = {}
    if before_id is not None:
        query["before_id"] = check_positive_id(before_id, "before_id")
    if after_id is not None:
        query["after_id"] = check_positive_id(after_id, "after_id")
    if limit is not None:
        query["limit"] = check_positive_id(limit, "limit")
    return HttpRequest.build("get_messages", "GET", _chat_route(chat_id, "messages"), query=query)


def parse_get_messages(request: HttpRequest, response: HttpResponse) -> ChatMessagesResponse:
    """The ``ChatMessagesResponse`` page (200; wire 3.6)."""
    return _shape(request, response, ChatMessagesResponse.from_json)


def build_submit_tool_results(chat_id: str, results: Sequence[ToolResultInput]) -> HttpRequest:
    """``POST {P}/{chat_id}/tool-results`` with ``{"results": [...]}``, exactly the results
    given (the turn machine decides which to send, D5)."""
    items = list(results)
    if not all(isinstance(r, ToolResultInput) for r in items):
        raise CoderAgentError("submit_tool_results needs ToolResultInput values")
    return HttpRequest.build(
        "submit_tool_results",
        "POST",
        _chat_route(chat_id, "tool-results"),
        json=tool_results_body(items),
    )


def parse_submit_tool_results(request: HttpRequest, response: HttpResponse) -> None:
    """Success is any 2xx (204 on the server)."""
    ensure_ok(request, response)


def build_interrupt_chat(chat_id: str, *, wait: bool = False) -> HttpRequest:
    """``POST {P}/{chat_id}/interrupt`` with no body (so no ``Content-Type``), and
    ``?wait=true`` only when ``wait`` (servers ignore it; D11 polls instead)."""
    return HttpRequest.build(
        "interrupt_chat",
        "POST",
        _chat_route(chat_id, "interrupt"),
        query={"wait": True} if wait else None,
    )


def parse_interrupt_chat(request: HttpRequest, response: HttpResponse) -> Chat:
    """The ``Chat`` after the interrupt (200; usually ``interrupting``, or ``running`` when a
    ``requires_action`` pause was cancelled, D4)."""
    return _shape(request, response, Chat.from_json)


def build_delete_queued_message(chat_id: str, queued_message_id: int) -> HttpRequest:
    """``DELETE {P}/{chat_id}/queue/{queued_message_id}``; the id is a queue-entry id."""
    entry = check_positive_id(queued_message_id, "queued_message_id")
    return HttpRequest.build(
        "delete_queued_message", "DELETE", _chat_route(chat_id, "queue", str(entry))
    )


def parse_delete_queued_message(request: HttpRequest, response: HttpResponse) -> None:
    """Success is any 2xx (204). A 404 or 409 means the entry was already promoted or
    deleted (D9); the raised ``CoderApiError`` carries the status."""
    ensure_ok(request, response)


def build_edit_queued_message(
    chat_id: str,
    queued_message_id: int,
    *,
    content: tuple[ChatInputPart, ...] | None = None,
    editing: bool | None = None,
    model_config_id: str | None = None,
    reasoning_effort: str | None = None,
) -> HttpRequest:
    """``PATCH {P}/{chat_id}/queue/{queued_message_id}`` with only the given fields (D35):
    new ``content`` (a content-only edit keeps the entry's model and effort),
    ``editing`` to begin (``True``) or end (``False``) an edit, and the ``model_config_id``
    and ``reasoning_effort`` overrides, which the server takes only together with content.
    At least one field is required."""
    entry = check_positive_id(queued_message_id, "queued_message_id")
    body: dict[str, Any] = {}
    if content is not None:
        body["content"] = [input_part_to_json(p) for p in content]
    if editing is not None:
        if type(editing) is not bool:
            raise CoderAgentError(f"editing must be a bool, got {editing!r}")
        body["editing"] = editing
    overrides = False
    for name, value in (
        ("model_config_id", model_config_id),
        ("reasoning_effort", reasoning_effort),
    ):
        if value is None:
            continue
        if type(value) is not str or not value:
            raise CoderAgentError(f"{name} must be a non-empty string, got {value!r}")
        body[name] = value
        overrides = True
    if not body:
        raise CoderAgentError(
            "edit_queued_message needs content, editing, model_config_id or reasoning_effort"
        )
    if overrides and content is None:
        raise CoderAgentError("model_config_id and reasoning_effort need content as well")
    return HttpRequest.build(
        "edit_queued_message", "PATCH", _chat_route(chat_id, "queue", str(entry)), json=body
    )


def parse_edit_queued_message(request: HttpRequest, response: HttpResponse) -> None:
    """Success is any 2xx (204). A 404 means the entry is gone (promoted or deleted); a 409
    that the chat is paused at another entry under edit (D35)."""
    ensure_ok(request, response)


def build_promote_queued_message(chat_id: str, queued_message_id: int) -> HttpRequest:
    """``POST {P}/{chat_id}/queue/{queued_message_id}/promote`` with no body: send the entry
    now (an idle or paused chat runs it at once, a busy one is interrupted for it; D35)."""
    entry = check_positive_id(queued_message_id, "queued_message_id")
    return HttpRequest.build(
        "promote_queued_message",
        "POST",
        _chat_route(chat_id, "queue", str(entry), "promote"),
    )


def parse_promote_queued_message(request: HttpRequest, response: HttpResponse) -> None:
    """Success is any 2xx (202). A 404 means the entry is gone; a 409 that the queue is
    empty."""
    ensure_ok(request, response)


# -- files and cost --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ChatFile:
    """A downloaded chat file: its bytes and media type."""

    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    media_type: str


def build_get_chat_file(file_id: str) -> HttpRequest:
    """``GET {P}/files/{file_id}``."""
    return HttpRequest.build(
        "get_chat_file", "GET", f"{V2_PREFIX}/files/{_seg(check_chat_id(file_id, 'file_id'))}"
    )


def parse_get_chat_file(request: HttpRequest, response: HttpResponse) -> ChatFile:
    """The raw bytes, with the response's ``Content-Type`` as the media type, falling back to
    ``application/octet-stream`` when it is absent or empty (wire 2)."""
    ensure_ok(request, response)
    media_type = (response.header("content-type") or "").strip() or _DEFAULT_FILE_MEDIA_TYPE
    return ChatFile(data=response.body, media_type=media_type)


@attrs.frozen(kw_only=True)
class ChatCost:
    """``GET {P}/{chat}/cost`` for the whole chat tree (wire 3.7, D17). Counters the server
    leaves out are ``None``."""

    chat_id: str
    total_cost_micros: int | None = None
    request_count: int | None = None
    unpriced_request_count: int | None = None
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Any) -> ChatCost:
        w = "chat cost"
        obj = req_dict(obj, w)
        return cls(
            chat_id=get_resource_id(obj, "chat_id", w),
            total_cost_micros=opt_int(obj, "total_cost_micros", w),
            request_count=opt_int(obj, "request_count", w),
            unpriced_request_count=opt_int(obj, "unpriced_request_count", w),
            raw=obj,
        )


def build_get_chat_cost(chat_id: str) -> HttpRequest:
    """``GET {P}/{chat_id}/cost``; never called implicitly (D17)."""
    return HttpRequest.build("get_chat_cost", "GET", _chat_route(chat_id, "cost"))


def parse_get_chat_cost(request: HttpRequest, response: HttpResponse) -> ChatCost:
    """The ``ChatCost`` (200)."""
    return _shape(request, response, ChatCost.from_json)


# -- the signed-in user (D33) -----------------------------------------------------------------

#: The signed-in user's route: outside the chat routes, so it never takes part in prefix
#: selection (wire 1.3) and is sent the same way whichever prefix is locked.
CURRENT_USER_PATH = "/api/v2/users/me"

#: What a user who belongs to no organization is told (D33).
NO_ORGANIZATION_MESSAGE = (
    "the signed-in user belongs to no organization, so there is none to create chats in: "
    "pass organization_id, or set CODER_ORGANIZATION_ID (or CODER_ORG_ID)"
)


def build_get_current_user() -> HttpRequest:
    """``GET /api/v2/users/me``: the signed-in user, read for the default organization
    (D33)."""
    return HttpRequest.build("get_current_user", "GET", CURRENT_USER_PATH)


def _first_organization(obj: Any) -> str | None:
    w = "user"
    ids = get_list(req_dict(obj, w), "organization_ids", w) or []
    for index, value in enumerate(ids):
        if type(value) is not str:
            raise CoderProtocolError(
                f"user.organization_ids[{index}] must be a string, got {type(value).__name__}"
            )
        # An organization id goes into the requests that follow (wire 3.9).
        check_resource_id(value, w, f"organization_ids[{index}]")
    return ids[0] if ids else None


def parse_default_organization(request: HttpRequest, response: HttpResponse) -> str:
    """The first of the user's ``organization_ids`` (D33). A user with none (an empty list,
    ``null`` or no field) raises ``CoderAgentError`` telling the caller to pass
    ``organization_id``; a body of another shape raises ``CoderProtocolError``."""
    organization_id = _shape(request, response, _first_organization)
    if organization_id is None:
        raise CoderAgentError(NO_ORGANIZATION_MESSAGE)
    return organization_id
