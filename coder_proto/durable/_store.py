"""The durable store: one small protocol for checkpoints, the tool ledger, the send journal and
stranded-chat records, an in-memory implementation, and store calls as machine actions.

``DurableStore`` is the synchronous protocol (``MemoryStore`` here, the SQLite store of
``coder_io_sync.durable_sqlite``); ``AsyncDurableStore`` has the same methods as coroutines,
for a user's async database. Adapters accept either: the core never calls a store itself.

A durable machine asks for a store call with the ``StoreCall`` action (a ``StoreOp``: method
name and arguments); the adapter performs it (``op.apply(store)``, awaiting the result when it
is awaitable) and feeds the value back with ``store_result(call_id, value, now)``, or the
exception with ``store_failed(call_id, error, now)``. Store calls are effects like REST
calls: the machines stay deterministic, and tests answer them from a ``MemoryStore``.

Implementing your own store: every method must be atomic on its own (one row), and a write
must be durable when it returns (the guarantees of the whole layer rest on "written before
the effect"). Nothing needs multi-record transactions.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from .._errors import CoderAgentError
from ._errors import DurableStoreError
from ._records import Checkpoint, JournalEntry, LedgerEntry, StrandedChat, check_key_part

__all__ = [
    "STORE_METHODS",
    "AsyncDurableStore",
    "DurableStore",
    "MemoryStore",
    "StoreCall",
    "StoreOp",
    "check_store",
    "store_call",
]


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
        return self.method.startswith(("put_", "delete_", "add_", "remove_", "forget_"))

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
    Not shared across processes, so it survives nothing a real crash would kill."""

    def __init__(self) -> None:
        self.checkpoints: dict[tuple[str, str], Checkpoint] = {}
        self.ledger: dict[tuple[str, str, str], LedgerEntry] = {}
        self.journal: dict[tuple[str, str], JournalEntry] = {}
        self.stranded: dict[tuple[str, str], StrandedChat] = {}

    def __repr__(self) -> str:
        return (
            f"MemoryStore(checkpoints={len(self.checkpoints)}, ledger={len(self.ledger)}, "
            f"journal={len(self.journal)}, stranded={len(self.stranded)})"
        )

    def get_checkpoint(self, tenant: str, workflow_id: str) -> Checkpoint | None:
        return self.checkpoints.get((tenant, workflow_id))

    def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Checkpoint) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(workflow_id, "workflow_id")
        if not isinstance(checkpoint, Checkpoint):
            raise CoderAgentError("put_checkpoint needs a Checkpoint")
        self.checkpoints[(tenant, workflow_id)] = checkpoint

    def delete_checkpoint(self, tenant: str, workflow_id: str) -> None:
        self.checkpoints.pop((tenant, workflow_id), None)

    def checkpointed_chat_ids(self, tenant: str | None = None) -> frozenset[str]:
        return frozenset(
            cp.chat_id for (t, _), cp in self.checkpoints.items() if tenant is None or t == tenant
        )

    def get_ledger(self, tenant: str, chat_id: str, tool_call_id: str) -> LedgerEntry | None:
        return self.ledger.get((tenant, chat_id, tool_call_id))

    def put_ledger(self, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(chat_id, "chat_id")
        check_key_part(tool_call_id, "tool_call_id")
        if not isinstance(entry, LedgerEntry):
            raise CoderAgentError("put_ledger needs a LedgerEntry")
        self.ledger[(tenant, chat_id, tool_call_id)] = entry

    def get_journal(self, tenant: str, chat_id: str) -> JournalEntry | None:
        return self.journal.get((tenant, chat_id))

    def put_journal(self, tenant: str, chat_id: str, entry: JournalEntry) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(chat_id, "chat_id")
        if not isinstance(entry, JournalEntry):
            raise CoderAgentError("put_journal needs a JournalEntry")
        self.journal[(tenant, chat_id)] = entry

    def add_stranded(self, tenant: str, workflow_id: str, chat_id: str) -> None:
        record = StrandedChat(tenant=tenant, workflow_id=workflow_id, chat_id=chat_id)
        self.stranded.setdefault((tenant, chat_id), record)

    def stranded_chats(self, tenant: str | None = None) -> tuple[StrandedChat, ...]:
        return tuple(r for (t, _), r in self.stranded.items() if tenant is None or t == tenant)

    def remove_stranded(self, tenant: str, chat_id: str) -> None:
        self.stranded.pop((tenant, chat_id), None)

    def forget_chat(self, tenant: str, chat_id: str) -> None:
        for key in [k for k in self.ledger if k[0] == tenant and k[1] == chat_id]:
            del self.ledger[key]
        self.journal.pop((tenant, chat_id), None)
