"""Durable workflows as a library (seed durable-workflows; D26): checkpoints, the crash-safe
tool ledger, the send journal, recovery before resubmitting, archive at the end and the orphan
sweep.

Everything here is pure: the store is reached through ``StoreCall`` actions (machines) and
``StoreOp`` effects (programs), the server through ``SendRequest``, the clock through ``now``.
The adapters' ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and ``bind_tools`` perform
them; the SQLite and PostgreSQL stores live in ``coder_io_common.stores``.
"""

from .cleanup import (
    ArchiveWorkflow,
    ArchiveWorkflowResult,
    OrphanSweep,
    SweepResult,
    parse_timestamp,
)
from .effects import Invoke, WallClock
from .errors import DurableStoreError, RecoveryError, WorkflowBusyError
from .machine import DurableMachine, RelayedRequest
from .records import (
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
    LedgerEntry,
    StrandedChat,
    idempotency_key,
)
from .recovery import (
    DEFAULT_COMMIT_WINDOW,
    DEFAULT_SETTLE_TIMEOUT,
    NOT_EXECUTED_MESSAGE,
    PastStep,
    Recovery,
    RecoveryOutcome,
    StructuredAnswer,
)
from .scan import (
    HistoryScan,
    default_step,
    marked_prompt,
    pending_client_calls,
    recover_structured,
    recover_text,
    step_marker,
)
from .step import (
    Drive,
    DurableStepResult,
    RunAgentTurn,
    StepPlan,
    TurnReport,
    latest_step,
    needs_recovery,
    step_program,
    turn_outcome,
)
from .store import (
    DEFAULT_LEASE_DURATION,
    AsyncDurableStore,
    DurableStore,
    Lease,
    MemoryStore,
    StoreCall,
    StoreOp,
    check_store,
    store_call,
)
from .tools import (
    CrashSafeTool,
    DurableBinding,
    DurableToolContext,
    crash_safe,
    run_program,
)

__all__ = [
    "COMMITTING",
    "CUT_SHORT",
    "DEFAULT_COMMIT_WINDOW",
    "DEFAULT_LEASE_DURATION",
    "DEFAULT_SETTLE_TIMEOUT",
    "DEFAULT_TENANT",
    "DONE",
    "NOT_EXECUTED_MESSAGE",
    "OUTCOME_ABORTED",
    "OUTCOME_FAILED",
    "OUTCOME_FINISHED",
    "OUTCOME_IN_FLIGHT",
    "RESUMED",
    "SUBMITTING",
    "ArchiveWorkflow",
    "ArchiveWorkflowResult",
    "AsyncDurableStore",
    "Checkpoint",
    "CrashSafeTool",
    "Drive",
    "DurableBinding",
    "DurableMachine",
    "DurableStepResult",
    "DurableStore",
    "DurableStoreError",
    "DurableToolContext",
    "HistoryScan",
    "Invoke",
    "JournalEntry",
    "Lease",
    "LedgerEntry",
    "MemoryStore",
    "OrphanSweep",
    "PastStep",
    "Recovery",
    "RecoveryError",
    "RecoveryOutcome",
    "RelayedRequest",
    "RunAgentTurn",
    "StepPlan",
    "StoreCall",
    "StoreOp",
    "StrandedChat",
    "StructuredAnswer",
    "SweepResult",
    "TurnReport",
    "WallClock",
    "WorkflowBusyError",
    "check_store",
    "crash_safe",
    "default_step",
    "idempotency_key",
    "latest_step",
    "marked_prompt",
    "needs_recovery",
    "parse_timestamp",
    "pending_client_calls",
    "recover_structured",
    "recover_text",
    "run_program",
    "step_marker",
    "step_program",
    "store_call",
    "turn_outcome",
]
