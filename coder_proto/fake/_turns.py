"""The routes that start, steer and end turns: send a message, interrupt, submit tool results
and edit a message (server-behaviour 2.2, 2.5, 5.4, 8.3, 8.7; D4, D15).

Every one is a transition of the lifecycle state machine: it runs in one transaction, moves the
chat's status and publishes a watch event (server-behaviour 6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._constants import (
    STATUS_ERROR,
    STATUS_INTERRUPTING,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
    STATUS_WAITING,
)
from . import _validation as check
from ._catalog import ModelCatalog
from ._errors import FakeApiError
from ._http import parse_positive_int
from ._rows import FakeChat, FakeQueuedMessage
from ._store import CANCEL_BY_EDIT, CANCEL_BY_USER, CANCEL_BY_USER_MESSAGE, ChatStore
from ._subscriptions import Subscriptions
from ._titles import fallback_title
from ._transitions import transition_refused
from ._worker import Worker

__all__ = ["Turns"]


class Turns:
    """The turn-steering routes of one server."""

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

    def send_message(self, chat: FakeChat, body: Mapping[str, Any], now: float) -> dict[str, Any]:
        """``POST /chats/{chat}/messages`` in every state (server-behaviour 2.2, 2.5, 8.3)."""
        store = self._store
        t = store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot send messages to an archived chat.")
        busy = body.get("busy_behavior")
        if busy in (None, ""):
            busy = "queue"
        if busy not in ("queue", "interrupt"):
            raise FakeApiError(
                400, "Invalid busy_behavior value.", detail='Must be "queue" or "interrupt".'
            )
        content = check.content_parts(body.get("content"), store.files)
        store.check_files_free(chat, content)
        model_config_id = self._catalog.resolve(
            body.get("model_config_id"), chat.last_model_config_id
        )
        effort = check.reasoning_effort(body.get("reasoning_effort"))
        plan_mode = check.plan_mode(body.get("plan_mode"))
        mcp = check.mcp_server_ids(
            body.get("mcp_server_ids"), [*store.config.mcp_server_ids, *chat.mcp_server_ids]
        )
        status = chat.status
        direct = status in (STATUS_WAITING, STATUS_ERROR) and not chat.queue
        max_queue = store.config.max_queue
        if not direct and len(chat.queue) >= max_queue:
            raise FakeApiError(
                429, "Message queue is full.", detail=f"Maximum {max_queue} messages can be queued."
            )
        store.begin(chat, t)
        if direct:
            # A queued send keeps its model and effort on the queued message; the chat takes
            # them when the message is promoted.
            chat.last_model_config_id = model_config_id
            if effort is not None:
                chat.last_reasoning_effort = effort
        if plan_mode is not None:
            chat.plan_mode = plan_mode or None
        if mcp is not None:
            chat.mcp_server_ids = mcp
        store.link_files(chat, content)
        if direct:
            # W, E0 → R0: straight into history; last_error cleared. The first message of a
            # chat created without one names it, unless the user did.
            if chat.title_source == "fallback" and not any(
                m.role == "user" for m in chat.visible_messages()
            ):
                chat.title = fallback_title(content, store.files)
            cancelled = store.cancel_pending(chat, t, CANCEL_BY_USER_MESSAGE)
            message = store.insert(
                chat, t, "user", content, created_by=store.user_id, model_config_id=model_config_id
            )
            chat.last_error = None
            chat.status = STATUS_RUNNING
            self._worker.start_run(chat, message, t)
            self._subscriptions.publish("status_change", chat)
            return {
                "message": store.message_json(message),
                "messages": [store.message_json(m) for m in [*cancelled, message]],
                "queued": False,
            }
        queued = FakeQueuedMessage(
            id=store.next_queued_id(),
            chat_id=chat.id,
            content=content,
            created_at=store.timestamp(t),
            created_by=store.user_id,
            model_config_id=model_config_id,
            reasoning_effort=effort,
        )
        chat.queue.append(queued)
        store.queue_changed(chat)
        response: dict[str, Any] = {"queued": True, "queued_message": store.queued_json(queued)}
        if status == STATUS_ERROR and chat.queue[0].editing_since is None:
            # E1 → R1: the new message joins the tail and the head is promoted (E1P, the head
            # under edit, stays as it is: server-behaviour 2.6).
            promoted = store.promote_head(chat, t)
            chat.last_error = None
            chat.status = STATUS_RUNNING
            self._worker.start_run(chat, promoted, t)
            response["messages"] = [store.message_json(promoted)]
        elif status == STATUS_RUNNING and busy == "interrupt":
            chat.status = STATUS_INTERRUPTING
            chat.interrupt_at = t + store.config.interrupt_delay
        elif status == STATUS_REQUIRES_ACTION and busy == "interrupt":
            cancelled = store.cancel_pending(chat, t, CANCEL_BY_USER_MESSAGE)
            chat.status = STATUS_RUNNING
            self._worker.resume_run(chat, t, [CANCEL_BY_USER_MESSAGE for _ in cancelled])
            response["messages"] = [store.message_json(m) for m in cancelled]
        # Every send is a transition, and transitions publish (server-behaviour 6).
        self._subscriptions.publish("status_change", chat)
        return response

    def interrupt(self, chat: FakeChat, now: float) -> FakeChat:
        """``POST /chats/{chat}/interrupt``: returns at once (server-behaviour 8.7); R → I
        with a wind-down after ``interrupt_delay``; A → R with cancellations (D4); 409 in W,
        E and I."""
        store = self._store
        t = store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot interrupt an archived chat.")
        if chat.status == STATUS_RUNNING:
            store.begin(chat, t)
            chat.status = STATUS_INTERRUPTING
            chat.interrupt_at = t + store.config.interrupt_delay
        elif chat.status == STATUS_REQUIRES_ACTION:
            store.begin(chat, t)
            cancelled = store.cancel_pending(chat, t, CANCEL_BY_USER)
            chat.status = STATUS_RUNNING
            self._worker.resume_run(chat, t, [CANCEL_BY_USER for _ in cancelled])
        else:
            raise transition_refused("Chat is not in an interruptible state.", "Interrupt", chat)
        self._subscriptions.publish("status_change", chat)
        return chat

    def submit_tool_results(self, chat: FakeChat, body: Mapping[str, Any], now: float) -> None:
        """``POST /chats/{chat}/tool-results``: exact-set validation (server-behaviour 5.4)."""
        store = self._store
        t = store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot submit tool results to an archived chat.")
        results = body.get("results")
        if results is not None and not isinstance(results, list):
            raise FakeApiError(
                400, "Request body must be valid JSON.", detail="results must be an array"
            )
        if not results:
            raise FakeApiError(400, "At least one tool result is required.")
        if chat.status != STATUS_REQUIRES_ACTION:
            raise FakeApiError(
                409,
                "Chat is not waiting for tool results.",
                detail=f'chat status is "{chat.status}", expected "requires_action"',
            )
        pending = {str(c.get("tool_call_id")): c for c in chat.pending_tool_calls()}
        seen: list[str] = []
        for result in results:
            call_id = result.get("tool_call_id") if isinstance(result, dict) else None
            if not isinstance(call_id, str):
                raise FakeApiError(400, "Invalid tool result.", detail="tool_call_id is required.")
            if call_id in seen:
                raise FakeApiError(
                    400,
                    "Duplicate tool_call_id in results.",
                    detail=f'Duplicate tool call ID "{call_id}".',
                )
            seen.append(call_id)
            assert isinstance(result, dict)
            if "output" not in result:
                raise FakeApiError(400, "Tool result output must be valid JSON.")
        for call_id in pending:
            if call_id not in seen:
                raise FakeApiError(
                    400, "Missing tool result.", detail=f'Missing result for tool call "{call_id}".'
                )
        for call_id in seen:
            if call_id not in pending:
                raise FakeApiError(
                    400,
                    "Unexpected tool result.",
                    detail=f'No pending tool call with ID "{call_id}".',
                )
        store.begin(chat, t)
        by_id = {r["tool_call_id"]: r for r in results}
        outputs = []
        for call_id, call in pending.items():
            result = by_id[call_id]
            part: dict[str, Any] = {
                "type": "tool-result",
                "tool_call_id": call_id,
                "tool_name": call.get("tool_name", ""),
                "result": result.get("output"),
            }
            if result.get("is_error") is True:
                part["is_error"] = True
            part["created_at"] = store.timestamp(t)
            store.insert(chat, t, "tool", [part])
            outputs.append(result.get("output"))
        chat.requires_action_deadline = None
        chat.status = STATUS_RUNNING
        self._worker.resume_run(chat, t, outputs)
        self._subscriptions.publish("status_change", chat)

    def edit_message(
        self, chat: FakeChat, message_id: str, body: Mapping[str, Any], now: float
    ) -> dict[str, Any]:
        """``PATCH /chats/{chat}/messages/{id}``: any non-archived state → R0; soft-deletes the
        message and everything after it, clears the queue, inserts the replacement. Streams
        answer with ``history_reset`` (server-behaviour 2.2, 3.3; D15)."""
        store = self._store
        t = store.advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot edit messages in an archived chat.")
        mid = parse_positive_int(message_id)
        if mid is None:
            raise FakeApiError(400, "Invalid chat message ID.")
        target = next((m for m in chat.visible_messages() if m.id == mid), None)
        if target is None:
            raise FakeApiError(404, "Chat message not found.")
        if target.role != "user":
            raise FakeApiError(400, "Only user messages can be edited.")
        content = check.content_parts(body.get("content"), store.files)
        store.check_files_free(chat, content)
        model_config_id = self._catalog.resolve(
            body.get("model_config_id"), target.model_config_id or chat.last_model_config_id
        )
        effort = check.reasoning_effort(body.get("reasoning_effort"))
        mcp = check.mcp_server_ids(
            body.get("mcp_server_ids"), [*store.config.mcp_server_ids, *chat.mcp_server_ids]
        )
        self._worker.stop_run(chat)
        chat.interrupt_at = None
        store.begin(chat, t)
        store.history_changed(chat)
        deleted = [m for m in chat.visible_messages() if m.id >= mid]
        for message in deleted:
            message.deleted = True
            message.changed_at = chat.history_version
        chat.edited = True
        if chat.queue:
            chat.queue.clear()
            store.queue_changed(chat)
        store.cancel_pending(chat, t, CANCEL_BY_EDIT)
        store.link_files(chat, content)
        replacement = store.insert(
            chat, t, "user", content, created_by=store.user_id, model_config_id=model_config_id
        )
        chat.last_error = None
        chat.last_model_config_id = model_config_id
        if effort is not None:
            chat.last_reasoning_effort = effort
        if mcp is not None:
            # The edit replaces the chat's MCP server selection before the turn runs.
            chat.mcp_server_ids = mcp
        chat.status = STATUS_RUNNING
        self._worker.start_run(chat, replacement, t)
        self._subscriptions.publish("status_change", chat)
        return {
            "message": store.message_json(replacement),
            "messages": [store.message_json(replacement)],
            "deleted_message_ids": [m.id for m in deleted],
        }
