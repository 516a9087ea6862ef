"""The chat routes of the fake server outside the turn loop (server-behaviour 1.2, 1.3, 2.2):
compact and clear the model context, recover an invalid state, the prompt history, a
proposed title, the workspace diff, the latest chat of each workspace and signed downloads.

The model context is the part of a chat's history its next model call reads. A chat keeps a
``context_floor``: the id of the last message before the context starts (0, the whole
history, until the chat is compacted or cleared). Compacting writes a summary the model reads
in place of what it replaces, which the API never returns (the server's summary rows are
model-only); clearing drops that history from the context without a summary. Both leave the
transcript as it is.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Final, NoReturn

import attrs

from .._constants import STATUS_ERROR, STATUS_INTERRUPTING, STATUS_RUNNING, STATUS_WAITING
from ._context import ScriptContext
from ._errors import FakeApiError
from ._http import FakeHttpResponse, Query, not_found
from ._rows import FakeChat, FakeFile
from ._run import Run
from ._script import Script
from ._store import ChatStore, content_text
from ._subscriptions import Subscriptions
from ._transitions import transition_refused
from ._util import UUID_RE, rfc3339
from ._worker import Worker

__all__ = ["DOWNLOAD_URL_LIFETIME", "ChatExtras"]

#: How long a signed download URL stays valid, in seconds.
DOWNLOAD_URL_LIFETIME: Final = 300.0
_DEFAULT_PROMPTS: Final = 500
_MAX_PROMPTS: Final = 2000
_MAX_WORKSPACE_IDS: Final = 25
_QUERY_INVALID: Final = "Query parameters have invalid values."
#: The detail of a compaction refused while the chat's model is at work.
_COMPACT_BUSY_DETAILS: Final = {
    STATUS_RUNNING: "Compaction is not available while the chat is generating.",
    STATUS_INTERRUPTING: "Compaction is not available while the chat is generating.",
}


@attrs.define
class _Signed:
    file_id: str
    expires_at: float


class ChatExtras:
    """Compaction, clearing and the read-only chat routes beside the turn loop."""

    def __init__(self, store: ChatStore, worker: Worker, subscriptions: Subscriptions) -> None:
        self._store = store
        self._worker = worker
        self._subscriptions = subscriptions
        self._signed: dict[str, _Signed] = {}

    # -- the model context ------------------------------------------------------------------

    def compact(self, chat: FakeChat, now: float) -> FakeChat:
        """``POST /chats/{chat}/compact``: W, E0 → R0 and E1 → R1 (RequestCompaction). A
        worker writes the summary, then the chat settles as after a turn (an E1 chat goes on
        with its queue head). 409 when nothing is new since the last compaction or clear."""
        store = self._store
        t = store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot compact an archived chat.")
        if chat.status not in (STATUS_WAITING, STATUS_ERROR):
            raise FakeApiError(
                409,
                "Cannot compact the chat in its current state.",
                detail=_COMPACT_BUSY_DETAILS.get(chat.status),
            )
        new = [m for m in chat.visible_messages() if m.id > chat.context_floor]
        if not new:
            raise FakeApiError(
                409,
                "Nothing to compact.",
                detail="The chat has no conversation to summarize after the latest compaction.",
            )
        store.begin(chat, t)
        chat.context_floor = new[-1].id
        chat.context_summary = _summary(chat.context_summary, new)
        chat.last_error = None
        chat.status = STATUS_RUNNING
        self._worker.stop_run(chat)
        run = Run.create(
            Script(()),
            ScriptContext(chat_id=chat.id, prompt=""),
            chat.last_model_config_id,
            t + store.config.run_start_delay,
        )
        self._worker.runs[chat.id] = run
        chat.worker_active = True
        self._subscriptions.publish("status_change", chat)
        return chat

    def clear(self, chat: FakeChat, now: float) -> FakeChat:
        """``POST /chats/{chat}/clear``: W, E0 → W (ClearContext), at once and with no model
        call: the next prompt starts from an empty context; the transcript stays."""
        store = self._store
        t = store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot clear an archived chat.")
        if chat.status not in (STATUS_WAITING, STATUS_ERROR) or chat.queue:
            raise FakeApiError(409, "Cannot clear the chat in its current state.")
        # A compaction's summary is context too: only an empty context has nothing to clear.
        if chat.context_summary is None and not any(
            m.id > chat.context_floor for m in chat.visible_messages()
        ):
            raise FakeApiError(409, "Nothing to clear.")
        store.begin(chat, t)
        chat.context_floor = max((m.id for m in chat.visible_messages()), default=0)
        chat.context_summary = None
        chat.last_error = None
        chat.status = STATUS_WAITING
        self._subscriptions.publish("status_change", chat)
        return chat

    @staticmethod
    def reconcile(chat: FakeChat) -> NoReturn:
        """``POST /chats/{chat}/reconcile-invalid``: the fake never reaches an invalid state
        (archived while running), so this is always the server's 409, with the state
        machine's refusal in its detail."""
        raise transition_refused("Chat is not in an invalid state.", "ReconcileInvalidState", chat)

    # -- reads ------------------------------------------------------------------------------

    def prompts(self, chat: FakeChat, query: Query) -> dict[str, Any]:
        """``GET /chats/{chat}/prompts``: the user's prompts newest first, text parts joined,
        blank ones left out; ``limit`` 0 (500) to 2000."""
        raw = query.get("limit")
        limit = 0
        if raw is not None and raw != "":
            text = raw.strip()
            if not text.isdigit() or int(text) >= 2**31:
                raise FakeApiError(400, _QUERY_INVALID)
            limit = int(text)
        if limit > _MAX_PROMPTS:
            raise FakeApiError(400, f"Invalid limit parameter (0-{_MAX_PROMPTS}).")
        prompts = []
        for message in reversed(chat.visible_messages()):
            if message.role != "user":
                continue
            text = "".join(
                str(p.get("text", "")) for p in message.content if p.get("type") == "text"
            )
            if text.strip():
                prompts.append({"id": message.id, "text": text})
        return {"prompts": prompts[: limit or _DEFAULT_PROMPTS]}

    @staticmethod
    def propose_title(chat: FakeChat) -> dict[str, Any]:
        """``POST /chats/{chat}/title/propose``: a title from the first prompt's first line,
        not stored."""
        first = next((m for m in chat.visible_messages() if m.role == "user"), None)
        text = content_text(first.content).strip() if first is not None else ""
        line = text.splitlines()[0] if text else ""
        return {"title": (line[:80] or "New Chat")}

    @staticmethod
    def diff(chat: FakeChat, query: Query) -> dict[str, Any]:
        """``GET /chats/{chat}/diff``: the diff the chat's workspace changes make; the fake
        has no workspace, so the diff is empty (the server's answer for a chat without a
        repository). A reference selector (``origin`` and ``branch``, both or neither: 400)
        names none of the chat's references: 404."""
        origin, branch = query.get("origin"), query.get("branch")
        if (origin is None) != (branch is None):
            raise FakeApiError(
                400, "Invalid diff selector.", detail="origin and branch must be given together."
            )
        if origin is not None:
            raise not_found()
        return {"chat_id": chat.id}

    def by_workspace(self, query: Query) -> dict[str, str]:
        """``GET /chats/by-workspace?workspace_ids=a,b``: each workspace's latest chat that is
        not archived; workspaces without one are left out."""
        raw = query.get("workspace_ids") or ""
        if not raw:
            return {}
        items = raw.split(",")
        if len(items) > _MAX_WORKSPACE_IDS:
            raise FakeApiError(400, f"Too many workspace IDs, maximum is {_MAX_WORKSPACE_IDS}.")
        wanted = []
        for item in items:
            value = item.strip().lower()
            if UUID_RE.match(value) is None:
                raise FakeApiError(400, f"Invalid workspace ID {item!r}: invalid UUID")
            wanted.append(value)
        latest: dict[str, FakeChat] = {}
        for chat in self._store.chats.values():
            workspace = chat.workspace_id
            if workspace not in wanted or chat.archived:
                continue
            seen = latest.get(workspace)
            if seen is None or chat.updated_at >= seen.updated_at:
                latest[workspace] = chat
        return {workspace: chat.id for workspace, chat in latest.items()}

    # -- signed downloads -------------------------------------------------------------------

    def download_url(self, file_id: str, now: float) -> dict[str, Any]:
        """``POST /chats/files/{file}/download-url``: a URL carrying a token that downloads
        the file without a session for ``DOWNLOAD_URL_LIFETIME`` seconds. The URL starts with
        the configured ``access_url`` (a served fake sets it to its own address); without one
        it is a path on the same server."""
        stored = self._file(file_id)
        t = self._store.advance_clock(now)
        token = self._store.new_uuid().replace("-", "") + self._store.new_uuid().replace("-", "")
        # The expiry is a whole second of the wall clock, as a signed token's claim is.
        offset = self._store.config.wall_clock_offset
        expires_wall = math.floor(t + DOWNLOAD_URL_LIFETIME + offset)
        self._signed[token] = _Signed(stored.id, expires_wall - offset)
        path = f"/api/v2/chats/files/{stored.id}/download?token={token}"
        return {
            "url": self._store.config.access_url.rstrip("/") + path,
            "expires_at": rfc3339(expires_wall),
            "sha256": hashlib.sha256(stored.data).hexdigest(),
            "size_bytes": len(stored.data),
            "name": stored.name,
            "mime_type": stored.media_type,
        }

    def download(self, file_id: str, query: Query, now: float) -> FakeHttpResponse:
        """``GET /chats/files/{file}/download?token=...``: the bytes for a valid, unexpired
        token of that file; 404 for anything else (the server says no more)."""
        t = self._store.advance_clock(now)
        signed = self._signed.get(query.get("token") or "")
        if signed is None or signed.expires_at <= t or signed.file_id != file_id.lower():
            raise not_found()
        stored = self._store.files.get(signed.file_id)
        if stored is None:
            raise not_found()
        return FakeHttpResponse(
            status=200,
            headers=(
                ("Content-Type", stored.media_type),
                ("Cache-Control", "no-store"),
            ),
            body=stored.data,
        )

    def _file(self, file_id: str) -> FakeFile:
        lowered = file_id.lower()
        if UUID_RE.match(lowered) is None:
            raise FakeApiError(400, "Invalid file ID.")
        stored = self._store.files.get(lowered)
        if stored is None:
            raise not_found()
        return stored


def _summary(previous: str | None, messages: list[Any]) -> str:
    """The summary a compaction writes: the previous one, then one line per message."""
    lines = [previous] if previous else []
    for message in messages:
        text = content_text(message.content).strip().replace("\n", " ")
        lines.append(f"{message.role}: {text[:200]}")
    return "\n".join(lines)
