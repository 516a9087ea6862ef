"""Durable workflows as a library (docs/durable-workflows.md; D26): checkpoints, the crash-safe
tool ledger, the send journal, recovery before resubmitting, archive at the end and the orphan
sweep.

The adapters' ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and ``bind_tools`` run
them; what they return is here, with the store protocol (``DurableStore``, or
``AsyncDurableStore`` for an async driver; ``MemoryStore`` for tests), its records, the
errors, and the crash-safe tool helpers. The SQLite and PostgreSQL stores live in
``coder_io_common.stores``.

On a loop of your own (``coder_proto.Connection``), a durable machine runs as a
``DurableWork`` started with ``Connection.start_durable``; its store calls come out as
``coder_proto.ApplyStore`` commands carrying a ``StoreOp`` to perform on the store
(``StoreOp.apply``), answered with ``store_finished``.

Everything in the package is pure: the store is reached through store-call actions (machines)
and effects (programs), the server through ``SendRequest``, the clock through ``now``.
"""

from typing import TYPE_CHECKING

from coder_proto._lazy import lazy_exports

if TYPE_CHECKING:
    from ._archiving import ArchiveWorkflowResult as ArchiveWorkflowResult
    from ._archiving import SweepResult as SweepResult
    from ._errors import DurableStoreError as DurableStoreError
    from ._errors import RecoveryError as RecoveryError
    from ._errors import WorkflowBusyError as WorkflowBusyError
    from ._errors import WorkflowLeaseLostError as WorkflowLeaseLostError
    from ._records import COMMITTING as COMMITTING
    from ._records import CUT_SHORT as CUT_SHORT
    from ._records import DEFAULT_TENANT as DEFAULT_TENANT
    from ._records import DONE as DONE
    from ._records import OUTCOME_ABORTED as OUTCOME_ABORTED
    from ._records import OUTCOME_FAILED as OUTCOME_FAILED
    from ._records import OUTCOME_FINISHED as OUTCOME_FINISHED
    from ._records import OUTCOME_IN_FLIGHT as OUTCOME_IN_FLIGHT
    from ._records import RESUMED as RESUMED
    from ._records import SUBMITTING as SUBMITTING
    from ._records import Checkpoint as Checkpoint
    from ._records import JournalEntry as JournalEntry
    from ._records import JournalState as JournalState
    from ._records import LedgerEntry as LedgerEntry
    from ._records import LedgerState as LedgerState
    from ._records import StepOutcome as StepOutcome
    from ._records import StrandedChat as StrandedChat
    from ._records import check_key_part as check_key_part
    from ._records import idempotency_key as idempotency_key
    from ._recovery import DEFAULT_COMMIT_WINDOW as DEFAULT_COMMIT_WINDOW
    from ._recovery import DEFAULT_SETTLE_TIMEOUT as DEFAULT_SETTLE_TIMEOUT
    from ._step import DurableStepResult as DurableStepResult
    from ._store import DEFAULT_LEASE_DURATION as DEFAULT_LEASE_DURATION
    from ._store import AsyncDurableStore as AsyncDurableStore
    from ._store import DurableStore as DurableStore
    from ._store import Lease as Lease
    from ._store import MemoryStore as MemoryStore
    from ._store import StoreOp as StoreOp
    from ._store import check_lease_request as check_lease_request
    from ._store import check_store as check_store
    from ._store_engine import DurableJob as DurableJob  # the earlier name
    from ._store_engine import DurableMachine as DurableMachine
    from ._store_engine import DurableWork as DurableWork
    from ._tools import CrashSafeTool as CrashSafeTool
    from ._tools import DurableToolContext as DurableToolContext
    from ._tools import LeaseCheck as LeaseCheck
    from ._tools import crash_safe as crash_safe

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
    "DurableJob",  # the earlier name of DurableWork
    "DurableMachine",
    "DurableStepResult",
    "DurableStore",
    "DurableStoreError",
    "DurableToolContext",
    "DurableWork",
    "JournalEntry",
    "JournalState",
    "Lease",
    "LeaseCheck",
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
    "check_key_part",
    "check_lease_request",
    "check_store",
    "crash_safe",
    "idempotency_key",
]

# Each name is imported on first use (``coder_proto._lazy``): the core and the adapters
# reach ``_store`` and ``_tools`` without loading the rest of the package.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._archiving": (
            "ArchiveWorkflowResult",
            "SweepResult",
        ),
        "._errors": (
            "DurableStoreError",
            "RecoveryError",
            "WorkflowBusyError",
            "WorkflowLeaseLostError",
        ),
        "._records": (
            "COMMITTING",
            "CUT_SHORT",
            "DEFAULT_TENANT",
            "DONE",
            "OUTCOME_ABORTED",
            "OUTCOME_FAILED",
            "OUTCOME_FINISHED",
            "OUTCOME_IN_FLIGHT",
            "RESUMED",
            "SUBMITTING",
            "Checkpoint",
            "JournalEntry",
            "JournalState",
            "LedgerEntry",
            "LedgerState",
            "StepOutcome",
            "StrandedChat",
            "check_key_part",
            "idempotency_key",
        ),
        "._recovery": (
            "DEFAULT_COMMIT_WINDOW",
            "DEFAULT_SETTLE_TIMEOUT",
        ),
        "._step": ("DurableStepResult",),
        "._store": (
            "DEFAULT_LEASE_DURATION",
            "AsyncDurableStore",
            "DurableStore",
            "Lease",
            "MemoryStore",
            "StoreOp",
            "check_lease_request",
            "check_store",
        ),
        "._store_engine": (
            "DurableJob",  # the earlier name of DurableWork
            "DurableWork",
            "DurableMachine",
        ),
        "._tools": (
            "CrashSafeTool",
            "DurableToolContext",
            "LeaseCheck",
            "crash_safe",
        ),
    },
)
