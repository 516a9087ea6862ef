"""The durable store: one small protocol for checkpoints, the tool ledger, the send journal,
stranded-chat records and workflow leases, an in-memory implementation, and store calls as
machine actions.

``DurableStore`` is the synchronous protocol (``MemoryStore`` here; ``SQLiteStore`` and
``PostgresStore`` in ``coder_io_common.stores``); ``AsyncDurableStore`` has the same methods
as coroutines, for a user's async database (``AsyncPostgresStore``). Adapters accept either:
the core never calls a store itself.

A durable machine asks for a store call with the ``StoreCall`` action (a ``StoreOp``: method
name and arguments); the adapter performs it (``op.apply(store)``, awaiting the result when it
is awaitable) and feeds the value back with ``store_result(call_id, value, now)``, or the
exception with ``store_failed(call_id, error, now)``. Store calls are effects like REST
calls: the machines stay deterministic, and tests answer them from a ``MemoryStore``.

Implementing your own store: every method must be atomic on its own (one transaction), and a
write must be durable when it returns (the guarantees of the whole layer rest on "written
before the effect"). Nothing needs a transaction spanning several calls.

Workflow leases (D27). While a step of workflow W runs, its worker holds the lease on
``(tenant, W)``: an owner id (unique per holder, e.g. a UUID per step attempt) and an expiry
in wall-clock epoch seconds. The caller passes the wall clock in (``now``) with the lease's
``duration``; the store computes ``expires_at = now + duration`` and never reads a clock
itself, so workers sharing a store must have clocks that agree to well within the duration.
A lease is live while ``now < expires_at``.

* ``acquire_lease`` is a compare-and-set: it takes the lease when it is free, expired, or
  already held by ``owner`` (which extends it), and returns the lease as it stands afterwards:
  the caller holds it when ``lease.owner == owner``; otherwise the returned lease names the
  live holder and its expiry. Each time it takes the lease, it also takes the next number of
  a counter kept per ``(tenant, workflow_id)`` (D37: 1, 2, 3 ..., never reset, not even when
  the lease is released) in the same transaction, as the lease's ``fencing_token``.
* ``renew_lease`` extends a lease still recorded as ``owner``'s (even past its expiry, as long
  as nobody took it over), keeping its fencing token, and says whether it did; ``False`` means the lease was taken over or
  released, so the caller no longer holds it.
* ``release_lease`` frees the lease if ``owner`` still holds it, and does nothing otherwise
  (never frees a lease another owner took over).
* ``get_lease`` reads the lease as stored (possibly expired), or ``None`` when it is free.
"""

from __future__ import annotations

import _thread
import math
from collections.abc import Generator
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from .._errors import CoderAgentError
from ._errors import DurableStoreError
from ._records import Checkpoint, JournalEntry, LedgerEntry, StrandedChat, check_key_part

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "STORE_METHODS",
    "AsyncDurableStore",
    "DurableStore",
    "Lease",
    "MemoryStore",
    "StoreCall",
    "StoreOp",
    "check_fencing_token",
    "check_lease_request",
    "check_store",
    "store_call",
]

DEFAULT_LEASE_DURATION: Final = 60.0
"""How long a workflow lease lasts unless the caller asks otherwise, in seconds (D27)."""


@attrs.frozen(kw_only=True)
class Lease:
    """A workflow's lease as a store holds it (D27): who holds it (``owner``) and until when
    (``expires_at``, wall-clock epoch seconds), with the number its acquisition took from the
    workflow's counter (``fencing_token``, D37; ``None`` from a store that keeps no counter)."""

    tenant: str
    workflow_id: str
    owner: str
    expires_at: float
    fencing_token: int | None = None

    def __attrs_post_init__(self) -> None:
        check_key_part(self.tenant, "tenant")
        check_key_part(self.workflow_id, "workflow_id")
        check_key_part(self.owner, "owner")
        _check_seconds(self.expires_at, "expires_at")
        check_fencing_token(self.fencing_token)

    def held_by(self, owner: str) -> bool:
        """True when ``owner`` holds this lease (whatever its expiry)."""
        return self.owner == owner

    def live(self, now: float) -> bool:
        """True while the lease has not expired at wall-clock time ``now``."""
        return now < self.expires_at


def _check_seconds(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CoderAgentError(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)


def check_fencing_token(value: object) -> int | None:
    """``value`` when it is a fencing token (D37: a positive integer) or ``None``; raise
    ``CoderAgentError`` otherwise."""
    if value is not None and (type(value) is not int or value < 1):
        raise CoderAgentError(f"fencing_token must be a positive integer, got {value!r}")
    return value


def check_lease_request(
    tenant: str, workflow_id: str, owner: str, now: float, duration: float
) -> float:
    """Validate the arguments of ``acquire_lease`` / ``renew_lease`` and return the expiry
    they ask for (``now + duration``); raise ``CoderAgentError`` naming a bad argument. Every
    store calls it before touching its records."""
    check_key_part(tenant, "tenant")
    check_key_part(workflow_id, "workflow_id")
    check_key_part(owner, "owner")
    start = _check_seconds(now, "now")
    length = _check_seconds(duration, "duration")
    if length <= 0:
        raise CoderAgentError(f"duration must be positive, got {duration!r}")
    expires_at = start + length
    if not math.isfinite(expires_at):
        raise CoderAgentError(f"now + duration must be finite, got {now!r} + {duration!r}")
    return expires_at


@runtime_checkable
class DurableStore(Protocol):
    """The synchronous store protocol. ``tenant=None`` in the listing methods means every
    tenant."""

    def get_checkpoint(self, tenant: str, workflow_id: str) -> Checkpoint | None: ...

    def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Checkpoint) -> None: ...

    def delete_checkpoint(self, tenant: str, workflow_id: str) -> None: ...

    def checkpointed_chat_ids(self, tenant: str | None = None) -> frozenset[str]: ...

    def get_ledger(self, tenant: str, chat_id: str, tool_call_id: str) -> LedgerEntry | None: ...

    def put_ledger(
        self, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry
    ) -> None: ...

    def get_journal(self, tenant: str, chat_id: str) -> JournalEntry | None: ...

    def put_journal(self, tenant: str, chat_id: str, entry: JournalEntry) -> None: ...

    def add_stranded(self, tenant: str, workflow_id: str, chat_id: str) -> None: ...

    def stranded_chats(self, tenant: str | None = None) -> tuple[StrandedChat, ...]: ...

    def remove_stranded(self, tenant: str, chat_id: str) -> None: ...

    def forget_chat(self, tenant: str, chat_id: str) -> None: ...

    def acquire_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> Lease:
        """Compare-and-set, atomically: when the lease on ``(tenant, workflow_id)`` is free,
        expired at ``now`` (``expires_at <= now``) or held by ``owner``, record ``owner``
        with ``expires_at = now + duration`` and the next number of the workflow's counter as
        its ``fencing_token`` (D37). Return the lease as it stands afterwards: ``owner``'s
        when taken, the live holder's otherwise. ``now`` is wall-clock epoch seconds,
        ``duration`` positive seconds."""
        ...

    def renew_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> bool:
        """Atomically: when the lease is still recorded as ``owner``'s, set its expiry to
        ``now + duration`` (its fencing token unchanged) and return ``True``; otherwise (taken over, released, never held)
        change nothing and return ``False``."""
        ...

    def release_lease(self, tenant: str, workflow_id: str, owner: str) -> None:
        """Free the lease if ``owner`` holds it; otherwise do nothing (idempotent)."""
        ...

    def get_lease(self, tenant: str, workflow_id: str) -> Lease | None:
        """The lease as stored, expired or not; ``None`` when nobody holds it."""
        ...


class AsyncDurableStore(Protocol):
    """``DurableStore`` with coroutine methods (an async database driver behind it)."""

    async def get_checkpoint(self, tenant: str, workflow_id: str) -> Checkpoint | None: ...

    async def put_checkpoint(
        self, tenant: str, workflow_id: str, checkpoint: Checkpoint
    ) -> None: ...

    async def delete_checkpoint(self, tenant: str, workflow_id: str) -> None: ...

    async def checkpointed_chat_ids(self, tenant: str | None = None) -> frozenset[str]: ...

    async def get_ledger(
        self, tenant: str, chat_id: str, tool_call_id: str
    ) -> LedgerEntry | None: ...

    async def put_ledger(
        self, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry
    ) -> None: ...

    async def get_journal(self, tenant: str, chat_id: str) -> JournalEntry | None: ...

    async def put_journal(self, tenant: str, chat_id: str, entry: JournalEntry) -> None: ...

    async def add_stranded(self, tenant: str, workflow_id: str, chat_id: str) -> None: ...

    async def stranded_chats(self, tenant: str | None = None) -> tuple[StrandedChat, ...]: ...

    async def remove_stranded(self, tenant: str, chat_id: str) -> None: ...

    async def forget_chat(self, tenant: str, chat_id: str) -> None: ...

    async def acquire_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> Lease: ...

    async def renew_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> bool: ...

    async def release_lease(self, tenant: str, workflow_id: str, owner: str) -> None: ...

    async def get_lease(self, tenant: str, workflow_id: str) -> Lease | None: ...


#: Every method of the store protocol, with the type its value must have (``None`` allowed
#: for the ``get_*`` methods).
STORE_METHODS: Final[dict[str, tuple[type, ...]]] = {
    "get_checkpoint": (Checkpoint, type(None)),
    "put_checkpoint": (type(None),),
    "delete_checkpoint": (type(None),),
    "checkpointed_chat_ids": (frozenset, set),
    "get_ledger": (LedgerEntry, type(None)),
    "put_ledger": (type(None),),
    "get_journal": (JournalEntry, type(None)),
    "put_journal": (type(None),),
    "add_stranded": (type(None),),
    "stranded_chats": (tuple, list),
    "remove_stranded": (type(None),),
    "forget_chat": (type(None),),
    "acquire_lease": (Lease,),
    "renew_lease": (bool,),
    "release_lease": (type(None),),
    "get_lease": (Lease, type(None)),
}


@attrs.frozen
class StoreOp:
    """One store call: ``method`` (a name of ``STORE_METHODS``) and its positional
    ``args``."""

    method: str
    args: tuple[Any, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.method not in STORE_METHODS:
            raise CoderAgentError(f"unknown store method {self.method!r}")

    @property
    def is_write(self) -> bool:
        """True for the calls that change the store."""
        return self.method.startswith(
            ("put_", "delete_", "add_", "remove_", "forget_", "acquire_", "renew_", "release_")
        )

    def apply(self, store: Any) -> Any:
        """Call the method on ``store`` (a ``DurableStore`` or an ``AsyncDurableStore``); the
        value is awaitable for an async store."""
        return getattr(store, self.method)(*self.args)

    def check(self, value: Any) -> Any:
        """``value`` when it has the type the protocol promises; otherwise raise
        ``CoderAgentError`` (a store returning something else is a bug in the store)."""
        kinds = STORE_METHODS[self.method]
        if not isinstance(value, kinds):
            raise CoderAgentError(
                f"store method {self.method} returned {type(value).__name__}, expected "
                + " or ".join(k.__name__ for k in kinds)
            )
        return value


def check_store(store: object) -> None:
    """Raise ``CoderAgentError`` unless ``store`` has every method of the store protocol (a
    ``DurableStore`` or an ``AsyncDurableStore``), before anything is sent."""
    missing = [m for m in STORE_METHODS if not callable(getattr(store, m, None))]
    if missing:
        raise CoderAgentError(
            f"{type(store).__name__} is not a durable store: it lacks " + ", ".join(missing)
        )


def store_call(method: str, *args: Any) -> Generator[StoreOp, Any, Any]:
    """In an effect program: ``value = yield from store_call(method, *args)`` yields one
    ``StoreOp`` and returns its checked value. Whatever the store raised (the adapter throws
    it back in), or a value of the wrong type, becomes ``DurableStoreError`` with the store's
    exception as its cause."""
    op = StoreOp(method, args)
    try:
        value = yield op
    except Exception as exc:
        raise DurableStoreError(
            f"the durable store's {method} failed: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return op.check(value)
    except CoderAgentError as exc:
        raise DurableStoreError(exc.message) from exc


@attrs.frozen(kw_only=True)
class StoreCall:
    """Perform ``op`` on the durable store, then report ``store_result(call_id, value, now)``
    or ``store_failed(call_id, error, now)``. Store calls of one machine are sequential."""

    call_id: int
    op: StoreOp


class MemoryStore:
    """An in-memory ``DurableStore`` (tests, and workers whose durability lives elsewhere).
    Not shared across processes, so it survives nothing a real crash would kill.

    Safe to share between threads (the asyncio and trio adapters call a plain store from
    worker threads): each method holds the store's mutex while it runs, so each is atomic, and
    ``acquire_lease`` is a true compare-and-set. The records are plain dicts (``checkpoints``,
    ``ledger``, ``journal``, ``stranded``, ``leases``, and ``fences``, the last fencing token
    each workflow's counter gave out) for tests to inspect.
    """

    def __init__(self) -> None:
        self.checkpoints: dict[tuple[str, str], Checkpoint] = {}
        self.ledger: dict[tuple[str, str, str], LedgerEntry] = {}
        self.journal: dict[tuple[str, str], JournalEntry] = {}
        self.stranded: dict[tuple[str, str], StrandedChat] = {}
        self.leases: dict[tuple[str, str], Lease] = {}
        self.fences: dict[tuple[str, str], int] = {}
        # A bare mutex (the core starts no thread and never waits on anything else): it makes
        # each method atomic when an adapter calls the store from several worker threads.
        self._mutex = _thread.allocate_lock()

    def __repr__(self) -> str:
        return (
            f"MemoryStore(checkpoints={len(self.checkpoints)}, ledger={len(self.ledger)}, "
            f"journal={len(self.journal)}, stranded={len(self.stranded)}, "
            f"leases={len(self.leases)})"
        )

    # -- checkpoints -------------------------------------------------------------------------

    def get_checkpoint(self, tenant: str, workflow_id: str) -> Checkpoint | None:
        with self._mutex:
            return self.checkpoints.get((tenant, workflow_id))

    def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Checkpoint) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(workflow_id, "workflow_id")
        if not isinstance(checkpoint, Checkpoint):
            raise CoderAgentError("put_checkpoint needs a Checkpoint")
        with self._mutex:
            self.checkpoints[(tenant, workflow_id)] = checkpoint

    def delete_checkpoint(self, tenant: str, workflow_id: str) -> None:
        with self._mutex:
            self.checkpoints.pop((tenant, workflow_id), None)

    def checkpointed_chat_ids(self, tenant: str | None = None) -> frozenset[str]:
        with self._mutex:
            return frozenset(
                cp.chat_id
                for (t, _), cp in self.checkpoints.items()
                if tenant is None or t == tenant
            )

    # -- the tool ledger ---------------------------------------------------------------------

    def get_ledger(self, tenant: str, chat_id: str, tool_call_id: str) -> LedgerEntry | None:
        with self._mutex:
            return self.ledger.get((tenant, chat_id, tool_call_id))

    def put_ledger(self, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(chat_id, "chat_id")
        check_key_part(tool_call_id, "tool_call_id")
        if not isinstance(entry, LedgerEntry):
            raise CoderAgentError("put_ledger needs a LedgerEntry")
        with self._mutex:
            self.ledger[(tenant, chat_id, tool_call_id)] = entry

    # -- the send journal --------------------------------------------------------------------

    def get_journal(self, tenant: str, chat_id: str) -> JournalEntry | None:
        with self._mutex:
            return self.journal.get((tenant, chat_id))

    def put_journal(self, tenant: str, chat_id: str, entry: JournalEntry) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(chat_id, "chat_id")
        if not isinstance(entry, JournalEntry):
            raise CoderAgentError("put_journal needs a JournalEntry")
        with self._mutex:
            self.journal[(tenant, chat_id)] = entry

    # -- stranded chats ----------------------------------------------------------------------

    def add_stranded(self, tenant: str, workflow_id: str, chat_id: str) -> None:
        record = StrandedChat(tenant=tenant, workflow_id=workflow_id, chat_id=chat_id)
        with self._mutex:
            self.stranded.setdefault((tenant, chat_id), record)

    def stranded_chats(self, tenant: str | None = None) -> tuple[StrandedChat, ...]:
        with self._mutex:
            return tuple(r for (t, _), r in self.stranded.items() if tenant is None or t == tenant)

    def remove_stranded(self, tenant: str, chat_id: str) -> None:
        with self._mutex:
            self.stranded.pop((tenant, chat_id), None)

    def forget_chat(self, tenant: str, chat_id: str) -> None:
        with self._mutex:
            for key in [k for k in self.ledger if k[0] == tenant and k[1] == chat_id]:
                del self.ledger[key]
            self.journal.pop((tenant, chat_id), None)

    # -- workflow leases ---------------------------------------------------------------------

    def acquire_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> Lease:
        expires_at = check_lease_request(tenant, workflow_id, owner, now, duration)
        key = (tenant, workflow_id)
        with self._mutex:
            current = self.leases.get(key)
            if current is None or current.owner == owner or not current.live(now):
                fence = self.fences[key] = self.fences.get(key, 0) + 1
                current = self.leases[key] = Lease(
                    tenant=tenant,
                    workflow_id=workflow_id,
                    owner=owner,
                    expires_at=expires_at,
                    fencing_token=fence,
                )
            return current

    def renew_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> bool:
        expires_at = check_lease_request(tenant, workflow_id, owner, now, duration)
        key = (tenant, workflow_id)
        with self._mutex:
            current = self.leases.get(key)
            if current is None or current.owner != owner:
                return False
            self.leases[key] = attrs.evolve(current, expires_at=expires_at)
            return True

    def release_lease(self, tenant: str, workflow_id: str, owner: str) -> None:
        key = (tenant, workflow_id)
        with self._mutex:
            current = self.leases.get(key)
            if current is not None and current.owner == owner:
                del self.leases[key]

    def get_lease(self, tenant: str, workflow_id: str) -> Lease | None:
        with self._mutex:
            return self.leases.get((tenant, workflow_id))
