"""The chat routes of the fake server: create, update (title, archive, pin, labels, plan mode),
list and cost (server-behaviour 1.2, 1.3, 1.5, 2.4), and sub-agent chats."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._constants import (
    MAX_TITLE_LENGTH,
    STATUS_INTERRUPTING,
    STATUS_PAUSED,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
    STATUS_WAITING,
)
from . import _validation as check
from ._catalog import ModelCatalog
from ._errors import FakeApiError
from ._http import Query, parse_positive_int
from ._rows import FakeChat
from ._store import ChatStore
from ._subscriptions import Subscriptions
from ._titles import fallback_title
from ._transitions import transition_refused
from ._worker import Worker

__all__ = ["Chats"]

NIL_UUID: Final = "00000000-0000-0000-0000-000000000000"
_ACTIVE_STATUSES: Final = frozenset({STATUS_RUNNING, STATUS_INTERRUPTING, STATUS_REQUIRES_ACTION})
_ARCHIVE_CONFLICT: Final = (
    "Cannot archive an active chat. Interrupt or wait for the chat to finish first."
)
#: The archive refusal of a paused chat (server-behaviour 2.6, D35), word for word.
PAUSED_ARCHIVE_CONFLICT: Final = (
    "Cannot archive: a chat in this family is paused at a queued message under edit. "
    "Finish editing, send, or remove that message first."
)


class Chats:
    """Creates, changes and lists chat rows."""

    def __init__(
        self,
        store: ChatStore,
        catalog: ModelCatalog,
        worker: Worker,
        subscriptions: Subscriptions,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._worker = worker
        self._subscriptions = subscriptions

    def create(self, body: Mapping[str, Any], now: float) -> FakeChat:
        """``POST /chats`` (server-behaviour 1.5): N → R0, status ``running`` at once; without
        content the chat waits for its first message. A ``title`` is the user's."""
        store = self._store
        t = store.advance_clock(now)
        # Fields of the wrong type fail the body's decoding, before any other check.
        org = check.uuid_field(body.get("organization_id"), "organization_id")
        workspace = check.uuid_field(body.get("workspace_id"), "workspace_id")
        if org is None or org == NIL_UUID:
            raise FakeApiError(400, "organization_id is required.")
        if org != store.organization_id:
            raise FakeApiError(403, "You are not a member of the specified organization.")
        owner = check.uuid_field(body.get("owner_id"), "owner_id")
        if owner == NIL_UUID:
            raise FakeApiError(400, "Invalid owner_id: must be a user ID or omitted.")
        if owner is not None and owner != store.user_id:
            # The fake's one user is the deployment's owner, who may create a chat for any
            # active member; no other user exists here.
            raise FakeApiError(400, "Chat owner must be an active member of the organization.")
        # A chat may start without a message: it waits, titled "New Chat", until its first.
        raw_content = body.get("content")
        empty = raw_content is None or raw_content == []
        content = [] if empty else check.content_parts(raw_content, store.files)
        store.check_files_free(None, content)
        user_title = _title(body.get("title"))
        if workspace is not None and workspace not in store.config.workspace_ids:
            raise FakeApiError(
                400, "Workspace not found or you do not have access to this resource"
            )
        model_config_id = self._catalog.resolve(body.get("model_config_id"), None)
        plan_mode = check.plan_mode(body.get("plan_mode"))
        mcp = check.mcp_server_ids(body.get("mcp_server_ids"), store.config.mcp_server_ids)
        labels = check.labels(body.get("labels"))
        tools = check.dynamic_tools(body.get("unsafe_dynamic_tools"))
        client_type = body.get("client_type") or "api"
        if client_type not in ("api", "ui"):
            raise FakeApiError(400, "Invalid client_type.")
        effort = check.reasoning_effort(body.get("reasoning_effort"))
        system_prompt = body.get("system_prompt")
        title = fallback_title(content, store.files)
        chat = FakeChat(
            id=store.new_uuid(),
            organization_id=store.organization_id,
            owner_id=store.user_id,
            owner_username=store.config.username,
            title=user_title or title,
            title_source="user" if user_title else "fallback",
            status=STATUS_WAITING if empty else STATUS_RUNNING,
            created_at=store.timestamp(t),
            updated_at=store.timestamp(t),
            last_model_config_id=model_config_id,
            last_reasoning_effort=effort,
            workspace_id=workspace,
            mcp_server_ids=mcp or [],
            labels=labels or {},
            plan_mode=plan_mode or None,
            client_type=str(client_type),
            system_prompt=system_prompt if isinstance(system_prompt, str) else None,
            dynamic_tools=tools,
        )
        store.chats[chat.id] = chat
        store.begin(chat, t)
        if not empty:
            store.link_files(chat, content)
            message = store.insert(
                chat, t, "user", content, created_by=store.user_id, model_config_id=model_config_id
            )
            self._worker.start_run(chat, message, t)
        self._subscriptions.publish("created", chat)
        return chat

    def spawn_child(self, parent: FakeChat, prompt: str, now: float) -> FakeChat:
        """A sub-agent chat of root chat ``parent``, as the root's agent starts one: running
        at once with ``prompt`` as its first message, the root's organization, owner, model
        and workspace, listed in the root's ``children`` and not in the chat list. A
        sub-agent chat has none of its own (``ValueError``)."""
        if parent.parent_chat_id is not None:
            raise ValueError("a sub-agent chat cannot start sub-agent chats of its own")
        store = self._store
        t = store.advance_clock(now)
        content = [{"type": "text", "text": prompt}]
        chat = FakeChat(
            id=store.new_uuid(),
            organization_id=parent.organization_id,
            owner_id=parent.owner_id,
            owner_username=parent.owner_username,
            title=(prompt.strip().splitlines() or ["New Chat"])[0][:MAX_TITLE_LENGTH],
            status=STATUS_RUNNING,
            created_at=store.timestamp(t),
            updated_at=store.timestamp(t),
            last_model_config_id=parent.last_model_config_id,
            workspace_id=parent.workspace_id,
            parent_chat_id=parent.id,
            client_type=parent.client_type,
        )
        store.chats[chat.id] = chat
        store.begin(chat, t)
        message = store.insert(chat, t, "user", content, created_by=store.user_id)
        self._worker.start_run(chat, message, t)
        self._subscriptions.publish("created", chat)
        return chat

    def update(self, chat: FakeChat, body: Mapping[str, Any], now: float) -> None:
        """``PATCH /chats/{chat}``: title, archive (server-behaviour 2.4), pin, labels, plan
        mode, workspace (a known one, or the nil UUID to unbind), the owner's read marker
        (``read``). 204 on success; a refused request changes nothing."""
        store = self._store
        t = store.advance_clock(now)
        title = _title(body.get("title"))
        workspace = check.uuid_field(body.get("workspace_id"), "workspace_id")
        if workspace not in (None, NIL_UUID, *store.config.workspace_ids):
            raise FakeApiError(
                400, "Workspace not found or you do not have access to this resource"
            )
        pin = body.get("pin_order")
        if pin is not None:
            if not isinstance(pin, int) or isinstance(pin, bool) or pin < 0:
                raise FakeApiError(400, "Pin order must be non-negative.")
            if pin > 0 and (chat.archived or body.get("archived") is True):
                raise FakeApiError(400, "Cannot pin an archived chat.")
            if pin > 0 and chat.parent_chat_id is not None:
                raise FakeApiError(400, "Cannot pin a child chat.")
        plan_mode = check.plan_mode(body.get("plan_mode"))
        labels = check.labels(body.get("labels"))
        read = body.get("read")
        if read is not None and not isinstance(read, bool):
            raise FakeApiError(
                400, "Request body must be valid JSON.", detail="read must be a boolean"
            )
        archived = body.get("archived")
        if archived is not None:
            if chat.parent_chat_id is not None:
                raise FakeApiError(400, "Chat archive state can only be changed on the root chat.")
            if not isinstance(archived, bool):
                raise FakeApiError(
                    400, "Request body must be valid JSON.", detail="archived must be a boolean"
                )
            if archived and chat.archived:
                raise FakeApiError(400, "Chat is already archived.")
            if not archived and not chat.archived:
                raise FakeApiError(400, "Chat is already not archived.")
            # The family archives together or not at all: any member that may not be
            # archived refuses it for all of them.
            for member in (chat, *store.children(chat)) if archived else ():
                if member.status in _ACTIVE_STATUSES:
                    raise transition_refused(_ARCHIVE_CONFLICT, "SetArchived", member)
                if member.status == STATUS_PAUSED:
                    raise FakeApiError(409, PAUSED_ARCHIVE_CONFLICT)
        # A rename or a read marker alone is not activity: the chat keeps its place in the list.
        quiet = (title is not None or read is not None) and all(
            body.get(k) is None for k in body if k not in ("title", "read")
        )
        kept_updated_at = chat.updated_at
        store.begin(chat, t)
        if quiet:
            chat.updated_at = kept_updated_at
        if workspace is not None:
            chat.workspace_id = None if workspace == NIL_UUID else workspace
        if title is not None:
            chat.title = title
            chat.title_source = "user"
            chat.title_updated_at = store.timestamp(t)
            self._subscriptions.publish("title_change", chat)
        if pin is not None:
            self._pin(chat, pin)
        if plan_mode is not None:
            chat.plan_mode = plan_mode or None
        if labels is not None:
            chat.labels = labels
        if read is True:
            chat.mark_read()
        elif read is False:
            # Unread forgets the marker: every assistant message counts as unread again.
            chat.last_read_message_id = 0
        if archived is not None:
            # The archive state of a chat family changes together, from its root; watchers
            # see each chat of it go (deleted) or come back (created), as the server tells.
            family = (chat, *self._store.children(chat))
            for member in family:
                member.archived = archived
            for member in family:
                self._subscriptions.publish("deleted" if archived else "created", member)
            if archived:
                # An archived chat leaves the pinned list; the other pins keep their places.
                chat.pin_order = 0

    def _pin(self, chat: FakeChat, requested: int) -> None:
        """Pin, unpin or move a chat as the server does: 0 unpins; an unpinned chat goes to
        the end of the pinned list whatever the value asked; a pinned one moves to the asked
        position, clamped to the list, its neighbours shifting. Positions stay 1..n."""
        pinned = sorted(
            (c for c in self._store.chats.values() if c.pin_order > 0 and c is not chat),
            key=lambda c: c.pin_order,
        )
        if requested > 0:
            at = min(requested, len(pinned) + 1) if chat.pin_order > 0 else len(pinned) + 1
            pinned.insert(at - 1, chat)
        else:
            chat.pin_order = 0
        for position, row in enumerate(pinned, start=1):
            row.pin_order = position

    def search(self, query: Query) -> list[dict[str, Any]]:
        """``GET /chats``: root chats, pinned ones first, then newest first; ``q`` understands
        ``archived:`` and ``title:``; ``label=k:v`` filters (AND); ``after_id`` (a cursor),
        ``limit`` and ``offset`` paginate."""
        archived: bool | None = False
        title: str | None = None
        searched = False
        for term in (query.get("q") or "").split():
            key, _, value = term.partition(":")
            if key == "archived" and value in ("true", "false"):
                archived = value == "true"
            elif key == "title" and value:
                title = value.lower()
            elif key == "search":
                searched = True
            elif key in ("has_unread", "pr_status", "source"):
                continue
            else:
                raise FakeApiError(400, "Invalid chat search query.")
        if searched and title is not None:
            # The server refuses a full-text search together with a title filter.
            raise FakeApiError(
                400,
                "Invalid chat search query.",
                validations=[
                    {"field": "search", "detail": '"search" cannot be used with "title".'}
                ],
            )
        labels = []
        for item in query.get_all("label"):
            key, sep, value = item.partition(":")
            if not sep or not key:
                raise FakeApiError(400, f"Invalid label filter: {item!r}")
            labels.append((key, value))
        # Pinned chats first, in pin order (as the server sorts them, so they are on the first
        # page); then newest activity first, ties in creation order, newest first.
        ordered = sorted(
            sorted(
                enumerate(self._store.chats.values()),
                key=lambda nc: (nc[1].updated_at, nc[0]),
                reverse=True,
            ),
            key=lambda nc: (nc[1].pin_order == 0, nc[1].pin_order),
        )
        chats = [
            c
            for _, c in ordered
            if c.parent_chat_id is None
            and (archived is None or c.archived == archived)
            and (title is None or title in c.title.lower())
            and all(c.labels.get(k) == v for k, v in labels)
        ]
        after = query.get("after_id")
        if after:
            # A cursor page starts after the named chat in the list's order; a chat that is
            # not in the list leaves nothing after it, as the server's cursor row is missing.
            listed = [c.id for c in chats]
            chats = chats[listed.index(after.lower()) + 1 :] if after.lower() in listed else []
        offset = parse_positive_int(query.get("offset")) or 0
        limit = parse_positive_int(query.get("limit"))
        chats = chats[offset:]
        if limit is not None:
            chats = chats[:limit]
        return [self._listed_json(c) for c in chats]

    def _listed_json(self, chat: FakeChat) -> dict[str, Any]:
        """A chat as the list shows it: with its diff status, which the server fills in for
        every listed chat (the empty one here, as the fake has no git changes to report)."""
        out = self._store.chat_json(chat)
        out["diff_status"] = {
            "chat_id": chat.id,
            "changes_requested": False,
            "additions": 0,
            "deletions": 0,
            "changed_files": 0,
        }
        return out

    def cost_json(self, chat: FakeChat) -> dict[str, Any]:
        """``GET /chats/{chat}/cost``: a made-up price per token, for the whole chat tree (the
        root and its sub-agent chats report the same total)."""
        store = self._store
        root = store.chats[chat.parent_chat_id] if chat.parent_chat_id else chat
        micros = 0
        count = 0
        tree = (root, *store.children(root))
        for message in (m for member in tree for m in member.visible_messages()):
            if message.role == "assistant" and message.usage:
                count += 1
                micros += 3 * message.usage.get("input_tokens", 0) + 15 * message.usage.get(
                    "output_tokens", 0
                )
        return {
            "chat_id": chat.id,
            "total_cost_micros": micros,
            "request_count": count,
            "unpriced_request_count": 0,
        }


def _title(raw: Any) -> str | None:
    """A title a request names (``PATCH`` or create), trimmed: 400 when blank or over
    ``MAX_TITLE_LENGTH`` characters; ``None`` when the request names none."""
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise FakeApiError(400, "Title cannot be empty.")
    if len(raw.strip()) > MAX_TITLE_LENGTH:
        raise FakeApiError(400, f"Title must be at most {MAX_TITLE_LENGTH} characters.")
    return raw.strip()
