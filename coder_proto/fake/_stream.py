"""One ``/chats/{chat}/stream`` connection of the fake server (server-behaviour 3).

Each ``pull(now)`` runs one DB-style sync against the chat's version counters and emits the
difference from what this connection has already sent, in the fixed order of
server-behaviour 3.4, then relays the current episode's parts with ``seq`` from 1 (3.3).
Everything is level-triggered: intermediate states that came and went between two pulls are
never seen (8.1). Frames are JSON arrays of at most 256 events plus a newline (8.11).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .._constants import SERVER_FRAME_BATCH, STATUS_ERROR, STATUS_REQUIRES_ACTION
from ._delivery import Delivery, Source
from ._faults import StreamDrop, drop_matches_event
from ._rows import FakeChat, part_json
from ._util import encode_json

__all__ = ["StreamSubscription"]


class StreamSubscription(Delivery):
    """One ``/chats/{chat}/stream`` connection (see the module docstring)."""

    route = "stream"

    def __init__(self, source: Source, chat: FakeChat, after_id: int) -> None:
        super().__init__(source, chat.id)
        self.chat_id = chat.id
        self.after_id = after_id
        self._first = True
        self._hv = 0
        self._qv = 0
        self._ga = 0
        self._status: str | None = None
        self._error_hv = -1
        self._action_hv = -1
        self._retry_version = 0
        self._episode: tuple[int, int] | None = None
        self._last_seq = 0
        self._event_counts: Counter[str] = Counter()
        self._reset_on_connect = source.faults.history_reset_on_connect
        self._snapshot_failure = source.faults.claim_snapshot_failure(chat.id)
        self._next_envelope_ping = source.store.now + source.store.config.envelope_ping_interval
        if self._drop is not None and self._drop.after_frames == 0:
            self._schedule_drop(self._drop.close_code)

    def pull(self, now: float) -> list[bytes]:
        """Advance the model to ``now``, sync, and return the frames due now."""
        if self.closed:
            return []
        self._source.advance(now)
        if self._snapshot_failure is not None and not self._drop_pending:
            # D34: the whole snapshot is this one event in its own frame, then the close.
            error = {"message": self._snapshot_failure.message, "retryable": False}
            self._enqueue(self._frames([self._event("error", error=error)]), now)
            self._schedule_drop(self._snapshot_failure.close_code)
        if not self._drop_pending:
            events, cut = self._cut_at_event(self._collect())
            if events:
                self._enqueue(self._frames(events), now)
            if cut is not None:
                self._schedule_drop(cut.close_code)
        config = self._source.store.config
        if config.legacy_envelopes and now >= self._next_envelope_ping:
            self._next_envelope_ping = now + config.envelope_ping_interval
            ping = encode_json({"type": "ping", "data": None}, html_escape=False) + b"\n"
            self._enqueue([ping], now)
        return self._release(now)

    def next_deadline(self) -> float | None:
        """When a held-back frame or (legacy envelopes) a JSON ping is due."""
        deadline = super().next_deadline()
        if self.closed or not self._source.store.config.legacy_envelopes:
            return deadline
        ping = self._next_envelope_ping
        return ping if deadline is None else min(deadline, ping)

    # -- sync -----------------------------------------------------------------------------------

    def _collect(self) -> list[dict[str, Any]]:
        chat = self._source.store.chats[self.chat_id]
        events = self._relay(chat)
        events += self._sync(chat)
        events += self._relay(chat)
        self._first = False
        return events

    def _event(self, kind: str, **payload: Any) -> dict[str, Any]:
        event: dict[str, Any] = {"type": kind, "chat_id": self.chat_id}
        event.update(payload)
        return event

    def _sync(self, chat: FakeChat) -> list[dict[str, Any]]:
        """One sync (server-behaviour 3.4): messages → queue_update → status → error →
        action_required → retry → preview_reset."""
        store = self._source.store
        out: list[dict[str, Any]] = []
        history_changed = chat.history_version != self._hv
        if history_changed:
            changed = [m for m in chat.messages if m.changed_at > self._hv]
            reset = any(m.deleted for m in changed) or (
                self._first and (chat.edited or self._reset_on_connect)
            )
            if reset:
                # D15: an edited chat replays everything, whatever after_id says.
                out.append(self._event("history_reset"))
                rows = chat.visible_messages()
            else:
                rows = [m for m in changed if not m.deleted]
                if self._first:
                    rows = [m for m in rows if m.id > self.after_id]
            out.extend(self._event("message", message=store.message_json(m)) for m in rows)
        if chat.queue_version > self._qv:
            out.append(
                self._event(
                    "queue_update", queued_messages=[store.queued_json(q) for q in chat.queue]
                )
            )
            self._qv = chat.queue_version
        if chat.status != self._status:
            out.append(self._event("status", status={"status": chat.status}))
            self._status = chat.status
        if chat.status == STATUS_ERROR and self._error_hv != chat.history_version:
            error = chat.last_error or {
                "message": "The chat request failed unexpectedly.",
                "kind": "generic",
                "retryable": False,
            }
            out.append(self._event("error", error=dict(error)))
            self._error_hv = chat.history_version
        if chat.status == STATUS_REQUIRES_ACTION and self._action_hv != chat.history_version:
            calls = chat.action_calls()
            out.append(self._event("action_required", action_required={"tool_calls": calls}))
            self._action_hv = chat.history_version
        if chat.retry_state_version > self._retry_version:
            if chat.retry_state is not None:
                out.append(self._event("retry", retry=dict(chat.retry_state)))
            self._retry_version = chat.retry_state_version
        attempt_changed = chat.generation_attempt != self._ga and chat.generation_attempt != 0
        if (history_changed and chat.messages) or attempt_changed:
            out.append(self._event("preview_reset"))
            current = chat.current_episode()
            self._episode = (
                (current.history_version, current.generation_attempt)
                if current is not None
                else None
            )
            self._last_seq = 0
        self._hv = chat.history_version
        self._ga = chat.generation_attempt
        return out

    def _relay(self, chat: FakeChat) -> list[dict[str, Any]]:
        """The parts of this connection's episode not yet sent, ``seq`` counting from 1."""
        if self._episode is None:
            return []
        episode = chat.episodes.get(self._episode)
        if episode is None or len(episode.parts) <= self._last_seq:
            return []
        config = self._source.store.config
        out = []
        for seq in range(self._last_seq + 1, len(episode.parts) + 1):
            role, part = episode.parts[seq - 1]
            payload: dict[str, Any] = {
                "role": role,
                "part": part_json(part, zero_value_keys=config.zero_value_keys),
            }
            if config.coordinates:
                payload["history_version"] = episode.history_version
                payload["generation_attempt"] = episode.generation_attempt
                payload["seq"] = seq
            out.append(self._event("message_part", message_part=payload))
        self._last_seq = len(episode.parts)
        return out

    # -- framing --------------------------------------------------------------------------------

    def _cut_at_event(
        self, events: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], StreamDrop | None]:
        """The events to send before a drop-at-event fault fires, and the fault if it does."""
        drop = self._drop
        if drop is None or drop.event_type is None:
            return events, None
        for index, event in enumerate(events):
            if drop_matches_event(drop, event):
                self._event_counts[drop.event_type] += 1
                if self._event_counts[drop.event_type] >= drop.occurrence:
                    return events[:index], drop
        return events, None

    def _frames(self, events: list[dict[str, Any]]) -> list[bytes]:
        config = self._source.store.config
        out = []
        for i in range(0, len(events), SERVER_FRAME_BATCH):
            batch: Any = events[i : i + SERVER_FRAME_BATCH]
            if config.legacy_envelopes:
                batch = {"type": "data", "data": batch}
            out.append(encode_json(batch, html_escape=config.html_escape) + b"\n")
        return out
