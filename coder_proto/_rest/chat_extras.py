"""Request builders and response classifiers for the chat routes outside the turn loop
(wire 2.4): editing a sent message, compacting and clearing the model context, the prompt
history, a proposed title, the workspace diff, the latest chat of each workspace, a signed
download URL, and recovering a chat stuck in an invalid state.

They follow the rules of ``coder_proto._rest.routes``: arguments are checked before any
request is built (``CoderAgentError`` naming the argument), ids are URL-quoted into the v2
path, a non-2xx answer raises the ``CoderApiError`` of wire 10 (``chat_id`` set on per-chat
routes), and a success whose body has another shape raises ``CoderProtocolError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from .._constants import V2_PREFIX
from .._errors import CoderAgentError, CoderProtocolError
from .._wire.chats import Chat, ChatInputPart, input_part_to_json
from .._wire.fields import get_list, get_str, opt_str, req_dict, req_int, req_str
from .._wire.ids import message_id, req_resource_id
from .._wire.messages import ChatMessage, parse_messages
from .http import HttpRequest, HttpResponse
from .routes import _chat_route, _seg, _shape, check_chat_id, check_positive_id

__all__ = [
    "MAX_PROMPT_LIMIT",
    "MAX_WORKSPACE_IDS",
    "ChatDiff",
    "ChatFileDownloadUrl",
    "ChatPrompt",
    "EditedMessage",
    "build_clear_chat",
    "build_compact_chat",
    "build_edit_chat_message",
    "build_get_chat_diff",
    "build_get_chat_file_download_url",
    "build_get_chat_prompts",
    "build_get_chats_by_workspace",
    "build_propose_chat_title",
    "build_reconcile_chat",
    "build_refresh_chat_context",
    "parse_chat_answer",
    "parse_edit_chat_message",
    "parse_get_chat_diff",
    "parse_get_chat_file_download_url",
    "parse_get_chat_prompts",
    "parse_get_chats_by_workspace",
    "parse_propose_chat_title",
]

#: The most prompts one ``GET {P}/{chat}/prompts`` returns (the server refuses more).
MAX_PROMPT_LIMIT: Final = 2000
#: The most workspace ids one ``GET {P}/by-workspace`` may name (the server refuses more).
MAX_WORKSPACE_IDS: Final = 25


def _text_tuple(obj: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    items = get_list(obj, key, where) or []
    return tuple(item for item in items if type(item) is str)


# -- types -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class EditedMessage:
    """The answer to an edit (``PATCH {P}/{chat}/messages/{id}``): the replacement user
    message, every user-visible message the edit inserted (``messages``), and the ids of the
    previously visible messages it removed (the edited one and everything after it)."""

    message: ChatMessage
    messages: tuple[ChatMessage, ...] = ()
    deleted_message_ids: tuple[int, ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: Any) -> EditedMessage:
        w = "edit-message response"
        obj = req_dict(obj, w)
        deleted = get_list(obj, "deleted_message_ids", w) or []
        if not all(type(i) is int for i in deleted):
            raise CoderProtocolError(f"{w}.deleted_message_ids must be a list of integers")
        return cls(
            message=ChatMessage.from_json(req_dict(obj.get("message"), f"{w}.message")),
            messages=parse_messages(obj, "messages", w),
            deleted_message_ids=tuple(message_id(i, w, "deleted_message_ids") for i in deleted),
            warnings=_text_tuple(obj, "warnings", w),
        )


@attrs.frozen(kw_only=True)
class ChatPrompt:
    """One user prompt of a chat (``GET {P}/{chat}/prompts``): the message id and its text
    parts joined in order."""

    id: int
    text: str

    @classmethod
    def from_json(cls, obj: Any) -> ChatPrompt:
        w = "chat prompt"
        obj = req_dict(obj, w)
        return cls(id=message_id(req_int(obj, "id", w), w, "id"), text=get_str(obj, "text", w))


@attrs.frozen(kw_only=True)
class ChatDiff:
    """The diff of the chat's workspace changes (``GET {P}/{chat}/diff``): the unified diff
    text (empty when there is none) and, when the server resolved them, the git provider,
    remote, branch and pull request URL."""

    chat_id: str
    diff: str = ""
    provider: str | None = None
    remote_origin: str | None = None
    branch: str | None = None
    pull_request_url: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> ChatDiff:
        w = "chat diff"
        obj = req_dict(obj, w)
        return cls(
            chat_id=req_resource_id(obj, "chat_id", w),
            diff=get_str(obj, "diff", w),
            provider=opt_str(obj, "provider", w),
            remote_origin=opt_str(obj, "remote_origin", w),
            branch=opt_str(obj, "branch", w),
            pull_request_url=opt_str(obj, "pull_request_url", w),
        )


@attrs.frozen(kw_only=True)
class ChatFileDownloadUrl:
    """A short-lived signed URL for a chat file (``POST {P}/files/{file}/download-url``):
    anyone holding ``url`` can download the file until ``expires_at`` without a session
    token, so treat it as a secret. ``sha256``, ``size_bytes``, ``name`` and ``mime_type``
    describe the file."""

    url: str = attrs.field(repr=False)
    expires_at: str
    sha256: str = ""
    size_bytes: int = 0
    name: str = ""
    mime_type: str = ""

    @classmethod
    def from_json(cls, obj: Any) -> ChatFileDownloadUrl:
        w = "file download URL"
        obj = req_dict(obj, w)
        return cls(
            url=req_str(obj, "url", w),
            expires_at=get_str(obj, "expires_at", w),
            sha256=get_str(obj, "sha256", w),
            size_bytes=req_int(obj, "size_bytes", w) if "size_bytes" in obj else 0,
            name=get_str(obj, "name", w),
            mime_type=get_str(obj, "mime_type", w),
        )


# -- messages --------------------------------------------------------------------------------


def build_edit_chat_message(
    chat_id: str,
    message_id: int,
    content: Sequence[ChatInputPart],
    *,
    model_config_id: str | None = None,
    reasoning_effort: str | None = None,
    mcp_server_ids: Sequence[str] | None = None,
) -> HttpRequest:
    """``PATCH {P}/{chat_id}/messages/{message_id}`` with ``{"content": [...],
    "model_config_id"?, "reasoning_effort"?, "mcp_server_ids"?}``: replace a user message
    and run the chat again from there. ``content`` holds input parts (at least one)."""
    message = check_positive_id(message_id, "message_id")
    parts = list(content)
    if not parts:
        raise CoderAgentError("edit_chat_message needs content")
    body: dict[str, Any] = {"content": [input_part_to_json(p) for p in parts]}
    if model_config_id is not None:
        body["model_config_id"] = check_chat_id(model_config_id, "model_config_id")
    if reasoning_effort is not None:
        body["reasoning_effort"] = check_chat_id(reasoning_effort, "reasoning_effort")
    if mcp_server_ids is not None:
        body["mcp_server_ids"] = [check_chat_id(i, "mcp_server_ids") for i in mcp_server_ids]
    return HttpRequest.build(
        "edit_chat_message",
        "PATCH",
        _chat_route(chat_id, "messages", str(message)),
        json=body,
    )


def parse_edit_chat_message(request: HttpRequest, response: HttpResponse) -> EditedMessage:
    """The ``EditedMessage`` (200)."""
    return _shape(request, response, EditedMessage.from_json)


def build_get_chat_prompts(chat_id: str, *, limit: int | None = None) -> HttpRequest:
    """``GET {P}/{chat_id}/prompts`` with ``limit`` (1 to 2000) only when given; the server
    returns at most 500 without it."""
    query: dict[str, object] = {}
    if limit is not None:
        check_positive_id(limit, "limit")
        if limit > MAX_PROMPT_LIMIT:
            raise CoderAgentError(f"limit must be at most {MAX_PROMPT_LIMIT}, got {limit!r}")
        query["limit"] = limit
    return HttpRequest.build(
        "get_chat_prompts", "GET", _chat_route(chat_id, "prompts"), query=query
    )


def _prompts(obj: Any) -> tuple[ChatPrompt, ...]:
    w = "chat prompts"
    items = get_list(req_dict(obj, w), "prompts", w) or []
    return tuple(ChatPrompt.from_json(item) for item in items)


def parse_get_chat_prompts(request: HttpRequest, response: HttpResponse) -> tuple[ChatPrompt, ...]:
    """The chat's user prompts, newest first (200 ``{"prompts": [...]}``)."""
    return _shape(request, response, _prompts)


# -- the chat's context ----------------------------------------------------------------------


def build_compact_chat(chat_id: str) -> HttpRequest:
    """``POST {P}/{chat_id}/compact`` with no body: summarise the conversation so far into a
    fresh model context (the chat runs while it does)."""
    return HttpRequest.build("compact_chat", "POST", _chat_route(chat_id, "compact"))


def build_clear_chat(chat_id: str) -> HttpRequest:
    """``POST {P}/{chat_id}/clear`` with no body: start the next prompt from an empty model
    context; the transcript stays."""
    return HttpRequest.build("clear_chat", "POST", _chat_route(chat_id, "clear"))


def build_reconcile_chat(chat_id: str) -> HttpRequest:
    """``POST {P}/{chat_id}/reconcile-invalid`` with no body: move a chat stuck in an invalid
    state (archived while running) to ``error``."""
    return HttpRequest.build("reconcile_chat", "POST", _chat_route(chat_id, "reconcile-invalid"))


def build_refresh_chat_context(chat_id: str) -> HttpRequest:
    """``PUT {P}/{chat_id}/context`` with no body: pin the chat to its workspace agent's
    latest context (instruction files, skills, MCP configuration) and clear the drift
    marker."""
    return HttpRequest.build("refresh_chat_context", "PUT", _chat_route(chat_id, "context"))


def parse_chat_answer(request: HttpRequest, response: HttpResponse) -> Chat:
    """The ``Chat`` a compact, clear, reconcile or context refresh answers with (200)."""
    return _shape(request, response, Chat.from_json)


def build_propose_chat_title(chat_id: str) -> HttpRequest:
    """``POST {P}/{chat_id}/title/propose`` with no body: a suggested title, not stored."""
    return HttpRequest.build("propose_chat_title", "POST", _chat_route(chat_id, "title", "propose"))


def _title(obj: Any) -> str:
    w = "proposed title"
    return req_str(req_dict(obj, w), "title", w)


def parse_propose_chat_title(request: HttpRequest, response: HttpResponse) -> str:
    """The proposed title (200 ``{"title": ...}``)."""
    return _shape(request, response, _title)


def build_get_chat_diff(chat_id: str) -> HttpRequest:
    """``GET {P}/{chat_id}/diff``."""
    return HttpRequest.build("get_chat_diff", "GET", _chat_route(chat_id, "diff"))


def parse_get_chat_diff(request: HttpRequest, response: HttpResponse) -> ChatDiff:
    """The ``ChatDiff`` (200)."""
    return _shape(request, response, ChatDiff.from_json)


# -- collections and files -------------------------------------------------------------------


def build_get_chats_by_workspace(workspace_ids: Sequence[str]) -> HttpRequest:
    """``GET {P}/by-workspace?workspace_ids=a,b``: at most 25 ids (the server's limit), each a
    non-empty string without a comma."""
    if isinstance(workspace_ids, str):
        raise CoderAgentError("workspace_ids must be a sequence of ids, not one string")
    ids = [check_chat_id(i, "workspace_ids") for i in workspace_ids]
    if len(ids) > MAX_WORKSPACE_IDS:
        raise CoderAgentError(
            f"workspace_ids names {len(ids)} workspaces; the server takes at most "
            f"{MAX_WORKSPACE_IDS}"
        )
    if any("," in i for i in ids):
        raise CoderAgentError("a workspace id cannot contain a comma")
    query = {"workspace_ids": ",".join(ids)} if ids else None
    return HttpRequest.build(
        "get_chats_by_workspace", "GET", f"{V2_PREFIX}/by-workspace", query=query
    )


def _workspace_map(obj: Any) -> dict[str, str]:
    w = "chats by workspace"
    obj = req_dict(obj, w)
    for key, value in obj.items():
        if type(value) is not str:
            raise CoderProtocolError(f"{w}[{key!r}] must be a chat id string, got {value!r}")
    return dict(obj)


def parse_get_chats_by_workspace(request: HttpRequest, response: HttpResponse) -> dict[str, str]:
    """Workspace id → the id of its latest chat that is not archived (200); workspaces
    without one are left out."""
    return _shape(request, response, _workspace_map)


def build_get_chat_file_download_url(file_id: str) -> HttpRequest:
    """``POST {P}/files/{file_id}/download-url`` with no body."""
    return HttpRequest.build(
        "get_chat_file_download_url",
        "POST",
        f"{V2_PREFIX}/files/{_seg(check_chat_id(file_id, 'file_id'))}/download-url",
    )


def parse_get_chat_file_download_url(
    request: HttpRequest, response: HttpResponse
) -> ChatFileDownloadUrl:
    """The ``ChatFileDownloadUrl`` (200)."""
    return _shape(request, response, ChatFileDownloadUrl.from_json)
