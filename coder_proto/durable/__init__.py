"""Durable workflows as a library (docs/durable-workflows.md; D26): checkpoints, the crash-safe
tool ledger, the send journal, recovery before resubmitting, archive at the end and the orphan
sweep.

The adapters' ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and ``bind_tools`` run
them; what they return is here, with the store protocol (``DurableStore``, or
``AsyncDurableStore`` for an async driver; ``MemoryStore`` for tests), its records, the
errors, and the crash-safe tool helpers. The SQLite and PostgreSQL stores live in
``coder_io_common.stores``.

On a loop of your own (``coder_proto.Connection``), a durable machine runs as a
``DurableJob`` started with ``Connection.start_machine``; its store calls come out as
``coder_proto.ApplyStore`` commands carrying a ``StoreOp`` to perform on the store
(``StoreOp.apply``), answered with ``store_returned`` / ``store_raised``.

Everything in the package is pure: the store is reached through store-call actions (machines)
and effects (programs), the server through ``SendRequest``, the clock through ``now``.
"""

from ._archiving import ArchiveWorkflowResult, SweepResult
from ._errors import DurableStoreError, RecoveryError, WorkflowBusyError, WorkflowLeaseLostError
from ._records import (
    COMMITTING,
    CUT_SHORT,
    DEFAULT_TENANT,
    DONE,
    OUTCOME_ABORTED,
    OUTCOME_FAILED,
    OUTCOME_FINISHED,
    OUTCOME_IN_FLIGHT,
    RESUMED,
    SUBMITTING,
    Checkpoint,
    JournalEntry,
    JournalState,
    LedgerEntry,
    LedgerState,
    StepOutcome,
    StrandedChat,
    idempotency_key,
)
from ._recovery import DEFAULT_COMMIT_WINDOW, DEFAULT_SETTLE_TIMEOUT
from ._step import DurableStepResult
from ._store import (
    DEFAULT_LEASE_DURATION,
    AsyncDurableStore,
    DurableStore,
    Lease,
    MemoryStore,
    StoreOp,
    check_store,
)
from ._store_engine import DurableJob
from ._tools import CrashSafeTool, DurableToolContext, crash_safe

__all__ = [
    "COMMITTING",
    "CUT_SHORT",
    "DEFAULT_COMMIT_WINDOW",
    "DEFAULT_LEASE_DURATION",
    "DEFAULT_SETTLE_TIMEOUT",
    "DEFAULT_TENANT",
    "DONE",
    "OUTCOME_ABORTED",
    "OUTCOME_FAILED",
    "OUTCOME_FINISHED",
    "OUTCOME_IN_FLIGHT",
    "RESUMED",
    "SUBMITTING",
    "ArchiveWorkflowResult",
    "AsyncDurableStore",
    "Checkpoint",
    "CrashSafeTool",
    "DurableJob",
    "DurableStepResult",
    "DurableStore",
    "DurableStoreError",
    "DurableToolContext",
    "JournalEntry",
    "JournalState",
    "Lease",
    "LedgerEntry",
    "LedgerState",
    "MemoryStore",
    "RecoveryError",
    "StepOutcome",
    "StoreOp",
    "StrandedChat",
    "SweepResult",
    "WorkflowBusyError",
    "WorkflowLeaseLostError",
    "check_store",
    "crash_safe",
    "idempotency_key",
]
