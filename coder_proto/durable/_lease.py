"""The workflow lease of a running step, archive or sweep (D27; docs/durable-workflows.md
"Run one step of a workflow at a time").

``WorkflowLease`` decides everything about one holder's lease on ``(tenant, workflow_id)``;
the adapter performs what it asks for and owns the timer:

* ``acquire()`` is an effect program (``WallClock``, ``StoreOp``, ``Sleep``): one
  compare-and-set with ``acquire_lease``; when another owner's lease is live it raises
  ``WorkflowBusyError`` at once, or, when the caller asked to wait (``wait`` seconds), sleeps
  and tries again until the lease is free or the wait is over. Nothing else is read or sent
  before it returns.
* While the holder works, the adapter renews: it sleeps ``renew_delay(wall)`` seconds (a third
  of the duration after the last renewal), performs ``renew_op(wall)`` and reports
  ``renewed(ok, wall)``, or ``renew_failed(error, wall)`` when the store raised. ``False``
  from the store means the lease was taken over: the holder has lost it. A store that keeps
  failing loses it too, once the last confirmed expiry has passed (someone else may hold it
  by then).
* Before every side effect (a store write, a request, a tool run, an agent turn) the adapter
  asks ``guard(effect)``, which raises ``WorkflowLeaseLostError`` once the lease is lost:
  the holder stops before touching what the new holder now owns.
* ``release_op()`` frees the lease at the end, however the work ended (a no-op when it was
  taken over meanwhile).
* Each acquisition took the next number of the workflow's counter (``fencing_token``, D37).
  A crash-safe tool checks the lease right before its effect: ``verify()`` is that check as
  an effect program (``StoreOp`` ``get_lease``, then ``WallClock``), which raises
  ``WorkflowLeaseLostError`` when the store names another acquisition or the holder's own
  clock has passed the last confirmed expiry.

The owner id comes from the adapter (a UUID per holder), as does the wall clock: the core
reads neither.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator
from typing import Any, Final

import attrs

from .._errors import CoderAgentError
from ._effects import Sleep, WallClock
from ._errors import WorkflowBusyError, WorkflowLeaseLostError
from ._records import check_key_part
from ._store import DEFAULT_LEASE_DURATION, Lease, StoreOp, store_call

__all__ = [
    "DEFAULT_LEASE_POLL",
    "WorkflowLease",
    "check_lease_wait",
    "is_side_effect",
]

logger = logging.getLogger("coder_proto")

#: How often a waiting holder tries the lease again, at most (seconds).
DEFAULT_LEASE_POLL: Final = 1.0


def _positive(value: object, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise CoderAgentError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def check_lease_wait(value: object) -> float:
    """``lease_wait`` as seconds: ``None`` or ``0`` (do not wait), or a positive finite
    number; raise ``CoderAgentError`` otherwise."""
    if value is None or (not isinstance(value, bool) and value == 0):
        return 0.0
    return _positive(value, "lease_wait")


def is_side_effect(effect: object) -> bool:
    """True for what changes the world: a store write, a request, a tool run, an agent
    turn, a durable machine's drive. Reads, the clock and sleeps are not."""
    if isinstance(effect, StoreOp):
        return effect.is_write
    return not isinstance(effect, WallClock | Sleep)


@attrs.define
class WorkflowLease:
    """One holder's lease on ``(tenant, workflow_id)`` (see the module docstring).

    ``owner`` is the holder's unique id; ``duration`` the lease's length in seconds (renewed
    every third of it); ``wait`` how long ``acquire`` may wait for a busy lease (``0``: raise
    ``WorkflowBusyError`` at once); ``poll`` how often a waiting ``acquire`` tries again at
    most. ``what`` names the holder's work in errors (``"step"``, ``"archive"``)."""

    tenant: str
    workflow_id: str
    owner: str
    duration: float = DEFAULT_LEASE_DURATION
    wait: float = attrs.field(default=0.0, converter=check_lease_wait)
    poll: float = DEFAULT_LEASE_POLL
    what: str = "step"
    #: The expiry of the lease as last confirmed by the store (wall clock), when held.
    expires_at: float | None = None
    #: True once the lease was found taken over (or could not be renewed before it expired).
    lost: bool = False
    #: The wall-clock time of the last successful acquisition or renewal.
    renewed_at: float | None = None
    #: The number the acquisition took from the workflow's counter (D37), once acquired
    #: (``None`` with a store that keeps no counter).
    fencing_token: int | None = None
    #: The holder's wall clock (supplied by the adapter; the core never reads a clock). With
    #: it, ``guard`` and ``check`` also count the lease lost once its confirmed expiry has
    #: passed: a holder that stalled longer than the lease (a frozen process, a long pause)
    #: stops before its first side effect on waking, not only after a renewal failed.
    clock: Callable[[], float] | None = attrs.field(default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        check_key_part(self.tenant, "tenant")
        check_key_part(self.workflow_id, "workflow_id")
        check_key_part(self.owner, "owner")
        self.duration = _positive(self.duration, "lease_duration")
        self.poll = _positive(self.poll, "the lease poll interval")

    @property
    def held(self) -> bool:
        """True between a successful ``acquire`` and the loss of the lease."""
        return self.expires_at is not None and not self.lost

    @property
    def interval(self) -> float:
        """How often the lease is renewed: a third of its duration (D27)."""
        return self.duration / 3.0

    # -- acquiring -----------------------------------------------------------------------------

    def acquire(self) -> Generator[Any, Any, Lease]:
        """Take the lease (see the module docstring); return it as held. Raises
        ``WorkflowBusyError`` when another owner's live lease is in the way (after waiting up
        to ``wait`` seconds), ``DurableStoreError`` when the store fails."""
        start: float | None = None
        while True:
            wall = float((yield WallClock()))
            if start is None:
                start = wall
            lease: Lease = yield from store_call(
                "acquire_lease", self.tenant, self.workflow_id, self.owner, wall, self.duration
            )
            if lease.held_by(self.owner):
                self.expires_at = lease.expires_at
                self.renewed_at = wall
                self.fencing_token = lease.fencing_token
                self.lost = False
                return lease
            remaining = start + self.wait - wall
            if remaining <= 0:
                raise WorkflowBusyError(
                    tenant=self.tenant,
                    workflow_id=self.workflow_id,
                    owner=lease.owner,
                    expires_at=lease.expires_at,
                )
            # The holder may release early: try again every ``poll`` seconds, and right at
            # its expiry (when a dead holder's lease frees itself).
            until_expiry = max(lease.expires_at - wall, 0.0)
            delay = min(self.poll, remaining, until_expiry) if until_expiry > 0 else 0.0
            logger.debug(
                "workflow %s is leased by %s; trying again in %.3gs",
                self.workflow_id,
                lease.owner,
                delay,
            )
            yield Sleep(max(delay, 0.001))

    # -- renewing ------------------------------------------------------------------------------

    def renew_delay(self, wall: float) -> float:
        """Seconds until the next renewal is due (0 when overdue)."""
        base = self.renewed_at if self.renewed_at is not None else wall
        return max(base + self.interval - wall, 0.0)

    def renew_op(self, wall: float) -> StoreOp:
        """The store call that renews the lease at wall-clock time ``wall``."""
        return StoreOp(
            "renew_lease", (self.tenant, self.workflow_id, self.owner, float(wall), self.duration)
        )

    def renewed(self, ok: object, wall: float) -> None:
        """The store answered a renewal made at ``wall``: ``True`` extends the lease,
        ``False`` means it was taken over (lost)."""
        if ok is True:
            self.renewed_at = float(wall)
            self.expires_at = float(wall) + self.duration
            return
        if not self.lost:
            logger.warning(
                "the lease on workflow %s of tenant %s was taken over; this %s stops before its "
                "next side effect",
                self.workflow_id,
                self.tenant,
                self.what,
            )
        self.lost = True

    def renew_failed(self, error: BaseException, wall: float) -> None:
        """A renewal at ``wall`` raised ``error``. The lease is still ours until its last
        confirmed expiry; past it, it counts as lost (another worker may have taken it)."""
        logger.warning("renewing the lease on workflow %s failed: %s", self.workflow_id, error)
        # Try again soon, not a whole interval later.
        self.renewed_at = float(wall) - self.interval + min(self.poll, self.interval)
        if self.expires_at is None or wall >= self.expires_at:
            self.lost = True

    # -- guarding ------------------------------------------------------------------------------

    def lost_error(
        self, reason: str | None = None, holder: Lease | None = None
    ) -> WorkflowLeaseLostError:
        """The error a holder that lost its lease raises; ``reason`` says how the check of a
        crash-safe tool found out, ``holder`` is the lease the store holds now."""
        message = None
        if reason is not None:
            message = (
                f"this {self.what} no longer holds the lease on workflow {self.workflow_id!r} "
                f"of tenant {self.tenant!r}: {reason}; another worker may run the workflow "
                "now, so the effect must not happen"
            )
        return WorkflowLeaseLostError(
            message,
            tenant=self.tenant,
            workflow_id=self.workflow_id,
            what=self.what,
            owner=holder.owner if holder is not None else None,
            expires_at=holder.expires_at if holder is not None else None,
        )

    def _past_expiry(self, wall: float) -> bool:
        # Read now, not before the store call: a renewal may have confirmed a later expiry
        # meanwhile. Released (``None``) counts as past.
        expires_at = self.expires_at
        return expires_at is None or wall >= expires_at

    def verify(self) -> Generator[Any, Any, None]:
        """The check a crash-safe tool makes right before its effect (D37), as effects: read
        the lease from the store, then the wall clock. Raise ``WorkflowLeaseLostError`` (and
        count the lease lost) when it was already lost, when the store holds another
        acquisition (another owner, or another fencing token) or none, or when the clock
        has passed the expiry last confirmed by the store; ``DurableStoreError`` when the
        store fails. Return ``None`` while the lease is this holder's and fresh."""
        if not self.held:
            raise self.lost_error()
        current: Lease | None = yield from store_call(
            "get_lease", self.tenant, self.workflow_id
        )
        # The clock is read after the store answered: a lease that expired while the read
        # took its time counts as expired.
        wall = float((yield WallClock()))
        if current is None:
            reason = "the store holds no lease on it any more"
        elif not current.held_by(self.owner) or current.fencing_token != self.fencing_token:
            reason = (
                f"the store records a later acquisition (fencing token "
                f"{current.fencing_token}; this {self.what}'s is {self.fencing_token})"
            )
        elif self._past_expiry(wall):
            reason = (
                "by this worker's clock, the expiry the store last confirmed has passed (it "
                "was not renewed in time)"
            )
        else:
            return
        self.lost = True
        raise self.lost_error(reason, current)

    def _expire(self) -> None:
        """With a clock: the lease counts as lost once its confirmed expiry has passed."""
        if self.lost or self.clock is None or self.expires_at is None:
            return
        if self.clock() >= self.expires_at:
            logger.warning(
                "the lease on workflow %s of tenant %s expired before it was renewed; this %s "
                "stops before its next side effect",
                self.workflow_id,
                self.tenant,
                self.what,
            )
            self.lost = True

    def check(self) -> None:
        """Raise ``WorkflowLeaseLostError`` once the lease is lost (or, with a ``clock``,
        past its confirmed expiry)."""
        self._expire()
        if self.lost:
            raise self.lost_error()

    def guard(self, effect: object) -> None:
        """Before performing ``effect``: raise ``WorkflowLeaseLostError`` when it is a side
        effect (``is_side_effect``) and the lease is lost (or, with a ``clock``, past its
        confirmed expiry)."""
        if not is_side_effect(effect):
            return
        self._expire()
        if self.lost:
            raise self.lost_error()

    # -- releasing -----------------------------------------------------------------------------

    def release_op(self) -> StoreOp:
        """The store call that frees the lease (a no-op for the store when it was taken
        over)."""
        return StoreOp("release_lease", (self.tenant, self.workflow_id, self.owner))

    def released(self) -> None:
        """The lease was released: nothing is held any more."""
        self.expires_at = None
