"""Fault injection for the fake Coder server: ``Faults``, a declarative set of failures.

Each rule applies to the next ``times`` matching requests or connections (``None``: all of
them), optionally only for one chat; random faults draw from the ``Faults``' own seeded
generator, so a run is repeatable. The model claims rules as requests and connections arrive
(the ``claim_*`` methods); tests and the command line add them (the other methods).
"""

from __future__ import annotations

import random
from typing import Any, Final

import attrs

__all__ = [
    "Faults",
    "FrameDelay",
    "FrameStall",
    "RequestDelay",
    "RequestFailure",
    "RunStall",
    "SnapshotFailure",
    "StreamDrop",
    "UpgradeRejection",
    "drop_matches_event",
]


@attrs.define(kw_only=True)
class _Rule:
    #: How many more matches this rule applies to (``None``: unlimited).
    remaining: int | None = 1
    chat_id: str | None = None

    def _matches(self, chat_id: str | None) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        return self.chat_id is None or self.chat_id == chat_id

    def _consume(self) -> None:
        if self.remaining is not None:
            self.remaining -= 1


@attrs.define(kw_only=True)
class UpgradeRejection(_Rule):
    """Answer a WebSocket upgrade with ``status`` instead of accepting it."""

    status: int
    route: str | None = "stream"
    message: str | None = None


@attrs.define(kw_only=True)
class RequestFailure(_Rule):
    """Answer a REST operation with ``status`` before the model sees it."""

    op: str
    status: int
    message: str | None = None
    detail: str | None = None


@attrs.define(kw_only=True)
class RequestDelay(_Rule):
    """Hold a REST response back for ``seconds`` (the adapter waits)."""

    op: str
    seconds: float


@attrs.define(kw_only=True)
class StreamDrop(_Rule):
    """End a connection without a final event: after ``after_frames`` frames, or just before
    the ``occurrence``-th event of ``event_type`` (and ``status``, for status events).
    ``close_code`` ``None`` drops the TCP connection without a WebSocket close frame."""

    route: str = "stream"
    after_frames: int | None = None
    event_type: str | None = None
    occurrence: int = 1
    status: str | None = None
    close_code: int | None = None


@attrs.define(kw_only=True)
class FrameDelay(_Rule):
    """Release every frame of a connection ``seconds`` after it was produced."""

    route: str = "stream"
    seconds: float


@attrs.define(kw_only=True)
class FrameStall(_Rule):
    """After ``after_frames`` frames, hold every frame back for ``seconds`` (``None``: for
    the rest of the connection, which stays open)."""

    route: str = "stream"
    after_frames: int = 0
    seconds: float | None = None


#: The server's two stream session errors (``NewSession`` in the server's
#: ``coderd/x/chatd/stream_session.go``; D34).
SNAPSHOT_FAILED: Final = "failed to load initial snapshot"
SUBSCRIBE_FAILED: Final = "failed to subscribe to chat updates"


@attrs.define(kw_only=True)
class SnapshotFailure(_Rule):
    """The stream session cannot be set up: the connection's whole snapshot is one ``error``
    event (``message``, no ``kind``, ``retryable`` false), then the stream ends
    (server-behaviour 3.1, D34). The first ``skip`` matching connections are served
    normally."""

    close_code: int | None = 1000
    message: str = SNAPSHOT_FAILED
    skip: int = 0


@attrs.define(kw_only=True)
class RunStall(_Rule):
    """A capacity stall: the next run stays ``running`` with ``queued_for_capacity`` and no
    parts for ``seconds`` (server-behaviour 2.3, 8.13)."""

    seconds: float


#: The statuses ``close_before_terminal_status`` stops before (``paused``: D35).
_TERMINAL_STATUSES: Final = ("waiting", "paused", "error", "requires_action")


@attrs.define
class Faults:
    """Injected failures, applied deterministically (by ``seed`` where random).

    Every method adds a rule and returns it; ``clear()`` removes them all. The flags
    ``history_reset_on_connect`` (every connect behaves as if history had been edited: D15)
    and ``chatd_disabled`` (503 on every create, mutate and stream route) apply until reset.
    """

    seed: int = 0
    history_reset_on_connect: bool = False
    chatd_disabled: bool = False
    random_drop_probability: float = 0.0
    upgrade_rejections: list[UpgradeRejection] = attrs.Factory(list)
    request_failures: list[RequestFailure] = attrs.Factory(list)
    request_delays: list[RequestDelay] = attrs.Factory(list)
    stream_drops: list[StreamDrop] = attrs.Factory(list)
    frame_delays: list[FrameDelay] = attrs.Factory(list)
    frame_stalls: list[FrameStall] = attrs.Factory(list)
    run_stalls: list[RunStall] = attrs.Factory(list)
    snapshot_failures: list[SnapshotFailure] = attrs.Factory(list)
    rng: random.Random = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def reseed(self, seed: int) -> None:
        """Restart the random faults' generator."""
        self.seed = seed
        self.rng = random.Random(seed)

    def clear(self) -> None:
        """Remove every rule and reset the flags."""
        self.history_reset_on_connect = False
        self.chatd_disabled = False
        self.random_drop_probability = 0.0
        for rules in (
            self.upgrade_rejections,
            self.request_failures,
            self.request_delays,
            self.stream_drops,
            self.frame_delays,
            self.frame_stalls,
            self.run_stalls,
            self.snapshot_failures,
        ):
            rules.clear()

    # -- adding rules ---------------------------------------------------------------------------

    def reject_upgrades(
        self,
        status: int,
        times: int | None = 1,
        *,
        route: str | None = "stream",
        chat_id: str | None = None,
        message: str | None = None,
    ) -> UpgradeRejection:
        """Reject the next ``times`` upgrades to ``route`` (``"stream"``, ``"watch"``, or
        ``None`` for both) with ``status``."""
        rule = UpgradeRejection(
            status=status, remaining=times, route=route, chat_id=chat_id, message=message
        )
        self.upgrade_rejections.append(rule)
        return rule

    def fail_requests(
        self,
        op: str,
        status: int,
        times: int | None = 1,
        *,
        chat_id: str | None = None,
        message: str | None = None,
        detail: str | None = None,
    ) -> RequestFailure:
        """Fail the next ``times`` requests of operation ``op`` (for example
        ``"create_chat_message"``, ``"archive_chat"``; ``"*"`` matches every REST request)."""
        rule = RequestFailure(
            op=op, status=status, remaining=times, chat_id=chat_id, message=message, detail=detail
        )
        self.request_failures.append(rule)
        return rule

    def delay_requests(
        self, op: str, seconds: float, times: int | None = None, *, chat_id: str | None = None
    ) -> RequestDelay:
        """Hold back the responses to ``op`` for ``seconds``."""
        rule = RequestDelay(op=op, seconds=seconds, remaining=times, chat_id=chat_id)
        self.request_delays.append(rule)
        return rule

    def drop_stream_after_frames(
        self,
        frames: int,
        times: int | None = 1,
        *,
        chat_id: str | None = None,
        close_code: int | None = None,
        route: str = "stream",
    ) -> StreamDrop:
        """End the next ``times`` connections after ``frames`` frames (0: at once, after the
        upgrade)."""
        rule = StreamDrop(
            after_frames=frames,
            remaining=times,
            chat_id=chat_id,
            close_code=close_code,
            route=route,
        )
        self.stream_drops.append(rule)
        return rule

    def drop_stream_at(
        self,
        event_type: str,
        *,
        occurrence: int = 1,
        status: str | None = None,
        times: int | None = 1,
        chat_id: str | None = None,
        close_code: int | None = None,
    ) -> StreamDrop:
        """End the next ``times`` stream connections just before their ``occurrence``-th
        event of ``event_type`` (with ``status`` for ``status`` events); the events before it
        are delivered."""
        rule = StreamDrop(
            event_type=event_type,
            occurrence=occurrence,
            status=status,
            remaining=times,
            chat_id=chat_id,
            close_code=close_code,
        )
        self.stream_drops.append(rule)
        return rule

    def close_before_terminal_status(
        self, times: int | None = 1, *, chat_id: str | None = None, close_code: int | None = None
    ) -> StreamDrop:
        """End the next ``times`` stream connections just before a terminal status
        (``waiting``, ``paused``, ``error`` or ``requires_action``) would be sent, so the
        client never sees the turn settle on that connection."""
        rule = StreamDrop(
            event_type="status",
            status="*terminal*",
            remaining=times,
            chat_id=chat_id,
            close_code=close_code,
        )
        self.stream_drops.append(rule)
        return rule

    def delay_frames(
        self,
        seconds: float,
        times: int | None = None,
        *,
        chat_id: str | None = None,
        route: str = "stream",
    ) -> FrameDelay:
        """Delay every frame of the next ``times`` connections by ``seconds``."""
        rule = FrameDelay(seconds=seconds, remaining=times, chat_id=chat_id, route=route)
        self.frame_delays.append(rule)
        return rule

    def stall_frames(
        self,
        after_frames: int = 0,
        seconds: float | None = None,
        times: int | None = 1,
        *,
        chat_id: str | None = None,
        route: str = "stream",
    ) -> FrameStall:
        """Stall the next ``times`` connections after ``after_frames`` frames, for
        ``seconds`` or (``None``) for good: the socket stays open and silent."""
        rule = FrameStall(
            after_frames=after_frames,
            seconds=seconds,
            remaining=times,
            chat_id=chat_id,
            route=route,
        )
        self.frame_stalls.append(rule)
        return rule

    def stall_runs(
        self, seconds: float, times: int | None = 1, *, chat_id: str | None = None
    ) -> RunStall:
        """Hold the next ``times`` runs in a capacity stall for ``seconds``."""
        rule = RunStall(seconds=seconds, remaining=times, chat_id=chat_id)
        self.run_stalls.append(rule)
        return rule

    def fail_snapshots(
        self,
        times: int | None = 1,
        *,
        chat_id: str | None = None,
        close_code: int | None = 1000,
        message: str = SNAPSHOT_FAILED,
        skip: int = 0,
    ) -> SnapshotFailure:
        """The next ``times`` stream connections (after ``skip`` served normally) send only
        one ``error`` event, as the server does when it cannot set up a stream session, and
        end. ``message`` is "failed to load initial snapshot"; the server's other one is
        "failed to subscribe to chat updates" (D34)."""
        rule = SnapshotFailure(
            remaining=times, chat_id=chat_id, close_code=close_code, message=message, skip=skip
        )
        self.snapshot_failures.append(rule)
        return rule

    def drop_streams_randomly(self, probability: float, *, seed: int | None = None) -> None:
        """Drop a stream connection after any frame with ``probability`` (seeded)."""
        if seed is not None:
            self.reseed(seed)
        self.random_drop_probability = probability

    # -- claiming (used by the model) -----------------------------------------------------------

    def claim_upgrade_rejection(self, route: str, chat_id: str | None) -> UpgradeRejection | None:
        for rule in self.upgrade_rejections:
            if (rule.route is None or rule.route == route) and rule._matches(chat_id):
                rule._consume()
                return rule
        return None

    def claim_request_failure(
        self, ops: tuple[str, ...], chat_id: str | None
    ) -> RequestFailure | None:
        for rule in self.request_failures:
            if (rule.op == "*" or rule.op in ops) and rule._matches(chat_id):
                rule._consume()
                return rule
        return None

    def claim_request_delay(self, ops: tuple[str, ...], chat_id: str | None) -> float:
        for rule in self.request_delays:
            if (rule.op == "*" or rule.op in ops) and rule._matches(chat_id):
                rule._consume()
                return rule.seconds
        return 0.0

    def claim_connection_faults(
        self, route: str, chat_id: str | None
    ) -> tuple[StreamDrop | None, FrameDelay | None, FrameStall | None]:
        """The drop, delay and stall rules a new connection is subject to (one of each)."""
        drop = next(
            (r for r in self.stream_drops if r.route == route and r._matches(chat_id)), None
        )
        delay = next(
            (r for r in self.frame_delays if r.route == route and r._matches(chat_id)), None
        )
        stall = next(
            (r for r in self.frame_stalls if r.route == route and r._matches(chat_id)), None
        )
        for rule in (drop, delay, stall):
            if rule is not None:
                rule._consume()
        return drop, delay, stall

    def claim_snapshot_failure(self, chat_id: str) -> SnapshotFailure | None:
        for rule in self.snapshot_failures:
            if rule._matches(chat_id):
                if rule.skip > 0:
                    rule.skip -= 1
                    return None
                rule._consume()
                return rule
        return None

    def claim_run_stall(self, chat_id: str) -> float:
        for rule in self.run_stalls:
            if rule._matches(chat_id):
                rule._consume()
                return rule.seconds
        return 0.0


def drop_matches_event(rule: StreamDrop, event: dict[str, Any]) -> bool:
    """Whether ``event`` is one ``rule`` counts towards its ``occurrence``."""
    if event.get("type") != rule.event_type:
        return False
    if rule.status is None:
        return True
    status = event.get("status")
    value = status.get("status") if isinstance(status, dict) else None
    if rule.status == "*terminal*":
        return value in _TERMINAL_STATUSES
    return bool(value == rule.status)
