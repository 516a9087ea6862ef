"""Per-connection stream state of the fake server (server-behaviour 3 and 6).

``StreamSubscription`` is one ``/stream`` WebSocket: each ``pull(now)`` runs one DB-style sync
against the chat's version counters and emits the difference from what this connection has
already sent, in the fixed order of server-behaviour 3.4, then relays the current episode's
parts with ``seq`` from 1 (3.3). Everything is level-triggered: intermediate states that
came and went between two pulls are never seen (8.1). Frames are JSON arrays of at most 256
events plus a newline (8.11).

``WatchSubscription`` is one ``/watch`` WebSocket: one JSON object per frame, only events
published while it is open (no snapshot, no replay).

Both apply the connection faults claimed when they were opened (drops, delays, stalls) and
report ``closed`` when the server ends the connection; the adapter then closes it with
``close_code`` (``None``: drop the TCP connection without a close frame).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from .._constants import SERVER_FRAME_BATCH, STATUS_ERROR, STATUS_REQUIRES_ACTION
from ._util import encode_json
from .config import FrameDelay, FrameStall, StreamDrop, drop_matches_event
from .state import FakeChat, part_json

if TYPE_CHECKING:
    from .model import FakeCoderModel

__all__ = ["StreamSubscription", "WatchSubscription"]


class _Connection:
    """Frame release, drops, delays and stalls shared by both kinds of subscription."""

    route = "stream"

    def __init__(self, model: FakeCoderModel, chat_id: str | None) -> None:
        self._model = model
        drop, delay, stall = model.faults.claim_connection_faults(self.route, chat_id)
        self._drop: StreamDrop | None = drop
        self._delay: FrameDelay | None = delay
        self._stall: FrameStall | None = stall
        self._stall_until: float | None = None
        self._outbox: deque[tuple[float, bytes]] = deque()
        self._queued_frames = 0
        self._drop_pending = False
        self._close_code: int | None = None
        #: Frames released to the adapter so far.
        self.frames_sent = 0
        #: True once the server ends this connection (after its last frame).
        self.closed = False
        self._unregistered = False
        self._maybe_start_stall(model._now)

    def _maybe_start_stall(self, now: float) -> None:
        """The stall starts once ``after_frames`` frames have been produced."""
        stall = self._stall
        if (
            stall is not None
            and self._stall_until is None
            and self._queued_frames >= stall.after_frames
        ):
            self._stall_until = math.inf if stall.seconds is None else now + stall.seconds

    @property
    def close_code(self) -> int | None:
        """The WebSocket close code to end with, or ``None`` for an abrupt TCP close."""
        return self._close_code

    def _schedule_drop(self, close_code: int | None) -> None:
        if not self._drop_pending:
            self._drop_pending = True
            self._close_code = close_code

    def _enqueue(self, frames: list[bytes], now: float) -> None:
        drop = self._drop
        for frame in frames:
            if self._drop_pending:
                return
            if (
                drop is not None
                and drop.after_frames is not None
                and self._queued_frames >= drop.after_frames
            ):
                self._schedule_drop(drop.close_code)
                return
            release = now
            if self._delay is not None:
                release += self._delay.seconds
            if self._stall_until is not None:
                release = max(release, self._stall_until)
            if self._outbox:
                release = max(release, self._outbox[-1][0])
            self._outbox.append((release, frame))
            self._queued_frames += 1
            self._maybe_start_stall(now)
            probability = self._model.faults.random_drop_probability
            if probability > 0 and self._model.faults.rng.random() < probability:
                self._schedule_drop(None)
        if (
            drop is not None
            and drop.after_frames is not None
            and self._queued_frames >= drop.after_frames
        ):
            self._schedule_drop(drop.close_code)

    def _release(self, now: float) -> list[bytes]:
        out: list[bytes] = []
        while self._outbox and self._outbox[0][0] <= now:
            out.append(self._outbox.popleft()[1])
        self.frames_sent += len(out)
        if self._drop_pending and not self._outbox:
            self.closed = True
        return out

    def next_deadline(self) -> float | None:
        """When a held-back frame becomes due (``None``: nothing scheduled)."""
        if self.closed:
            return None
        if self._outbox and math.isfinite(self._outbox[0][0]):
            return self._outbox[0][0]
        return None

    def close(self) -> None:
        """The connection ended (either side): stop counting it as open. Idempotent."""
        if not self._unregistered:
            self._unregistered = True
            self.closed = True
            self._model._unregister(self)


class StreamSubscription(_Connection):
    """One ``/chats/{chat}/stream`` connection (see the module docstring)."""

    route = "stream"

    def __init__(self, model: FakeCoderModel, chat: FakeChat, after_id: int) -> None:
        super().__init__(model, chat.id)
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
        self._reset_on_connect = model.faults.history_reset_on_connect
        self._snapshot_failure = model.faults.claim_snapshot_failure(chat.id)
        self._next_envelope_ping = model._now + model.config.envelope_ping_interval
        if self._drop is not None and self._drop.after_frames == 0:
            self._schedule_drop(self._drop.close_code)

    def pull(self, now: float) -> list[bytes]:
        """Advance the model to ``now``, sync, and return the frames due now."""
        if self.closed:
            return []
        self._model.tick(now)
        if self._snapshot_failure is not None and not self._drop_pending:
            error = {"message": "failed to load initial snapshot", "retryable": False}
            self._enqueue(self._frames([self._event("error", error=error)]), now)
            self._schedule_drop(self._snapshot_failure.close_code)
        if not self._drop_pending:
            events, cut = self._cut_at_event(self._collect())
            if events:
                self._enqueue(self._frames(events), now)
            if cut is not None:
                self._schedule_drop(cut.close_code)
        config = self._model.config
        if config.legacy_envelopes and now >= self._next_envelope_ping:
            self._next_envelope_ping = now + config.envelope_ping_interval
            ping = encode_json({"type": "ping", "data": None}, html_escape=False) + b"\n"
            self._enqueue([ping], now)
        return self._release(now)

    def next_deadline(self) -> float | None:
        """When a held-back frame or (legacy envelopes) a JSON ping is due."""
        deadline = super().next_deadline()
        if self.closed or not self._model.config.legacy_envelopes:
            return deadline
        ping = self._next_envelope_ping
        return ping if deadline is None else min(deadline, ping)

    # -- sync -----------------------------------------------------------------------------------

    def _collect(self) -> list[dict[str, Any]]:
        chat = self._model.chats[self.chat_id]
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
        model = self._model
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
            out.extend(self._event("message", message=model.message_json(m)) for m in rows)
        if chat.queue_version > self._qv:
            out.append(
                self._event(
                    "queue_update", queued_messages=[model.queued_json(q) for q in chat.queue]
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
            out.append(
                self._event(
                    "action_required", action_required={"tool_calls": model._action_calls(chat)}
                )
            )
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
        config = self._model.config
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
        config = self._model.config
        out = []
        for i in range(0, len(events), SERVER_FRAME_BATCH):
            batch: Any = events[i : i + SERVER_FRAME_BATCH]
            if config.legacy_envelopes:
                batch = {"type": "data", "data": batch}
            out.append(encode_json(batch, html_escape=config.html_escape) + b"\n")
        return out


class WatchSubscription(_Connection):
    """One ``/chats/watch`` connection: one event object per frame (server-behaviour 6)."""

    route = "watch"

    def __init__(self, model: FakeCoderModel) -> None:
        super().__init__(model, None)
        self._pending: list[dict[str, Any]] = []
        if self._drop is not None and self._drop.after_frames == 0:
            self._schedule_drop(self._drop.close_code)

    def push(self, event: dict[str, Any]) -> None:
        """Queue an event (the model publishes; delivery is best effort)."""
        if not self.closed and not self._drop_pending:
            self._pending.append(event)

    def pull(self, now: float) -> list[bytes]:
        """Advance the model to ``now`` and return the frames due now."""
        if self.closed:
            return []
        self._model.tick(now)
        if self._pending:
            pending, self._pending = self._pending, []
            escape = self._model.config.html_escape
            self._enqueue([encode_json(e, html_escape=escape) + b"\n" for e in pending], now)
        return self._release(now)
