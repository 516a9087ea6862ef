"""Errors of the durable-workflow layer (docs/durable-workflows.md; D26, D27).

All are ``CoderAgentError`` subclasses, so a step's ``except CoderAgentError`` sees them, and
all pickle like every library error (they cross process boundaries in workers and engines).
"""

from __future__ import annotations

from typing import Any

from .._errors import CoderAgentError

__all__ = ["DurableStoreError", "RecoveryError", "WorkflowBusyError", "WorkflowLeaseLostError"]


class DurableStoreError(CoderAgentError):
    """A checkpoint, ledger, journal or stranded-chat record could not be read or written, or
    a stored record is malformed. The cause (the store's own exception) is ``__cause__``.
    Nothing was decided on a failed read; a failed write leaves the previous record in place."""


class RecoveryError(CoderAgentError):
    """Recovery cannot proceed without risking a duplicated effect: a ``committing`` tool call
    has no re-drive path in this process (the tool is not configured, or its re-drive failed),
    or the server refused the reconciled result set. The chat is left as it was (paused), so a
    later recovery with the tool configured can finish the job."""


class WorkflowBusyError(CoderAgentError):
    """Another worker holds the workflow's lease (D27): it is running a step of the same
    workflow right now, so this one must not touch the workflow's chat or store records.

    Nothing was read or sent when this is raised. ``retryable`` is ``True``: the holder
    releases the lease when its step ends, and a holder that died is outlived by the lease's
    expiry, so the same call succeeds later. ``owner`` is the holder's owner id and
    ``expires_at`` the lease's expiry (wall-clock epoch seconds) as last seen, when known.
    """

    retryable = True

    def __init__(
        self,
        message: str | None = None,
        *,
        tenant: str,
        workflow_id: str,
        owner: str | None = None,
        expires_at: float | None = None,
        chat_id: str | None = None,
    ) -> None:
        if message is None:
            holder = f" ({owner!r} holds its lease)" if owner is not None else ""
            message = (
                f"workflow {workflow_id!r} of tenant {tenant!r} is running elsewhere{holder}; "
                "retry once that step ends"
            )
        super().__init__(message, chat_id=chat_id)
        self.tenant = tenant
        self.workflow_id = workflow_id
        self.owner = owner
        self.expires_at = expires_at

    def _state(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "workflow_id": self.workflow_id,
            "owner": self.owner,
            "expires_at": self.expires_at,
            **super()._state(),
        }


class WorkflowLeaseLostError(WorkflowBusyError):
    """A running step (or archive) lost the workflow's lease (D27): it could not renew it in
    time, and another worker has taken it over (or may have, once its expiry passed while the
    store failed). The step stopped before its next side effect, leaving the workflow's
    chat and records to the new holder; in particular it wrote no checkpoint.

    A crash-safe tool's lease check (``DurableToolContext.check_lease``, D37) raises it too,
    right before the tool's effect, when the store records another acquisition of the lease
    (``owner`` and ``expires_at`` then name the new holder's lease) or when the holder's own
    clock has passed the lease's last confirmed expiry.

    A ``WorkflowBusyError``, hence ``retryable``: the same call, made again, recovers what
    this attempt did once the new holder is done."""

    def __init__(
        self,
        message: str | None = None,
        *,
        tenant: str,
        workflow_id: str,
        what: str = "step",
        owner: str | None = None,
        expires_at: float | None = None,
        chat_id: str | None = None,
    ) -> None:
        if message is None:
            message = (
                f"this {what} lost its lease on workflow {workflow_id!r} of tenant {tenant!r} "
                "(not renewed in time; another worker may run the workflow now) and stopped "
                "before its next side effect"
            )
        super().__init__(
            message,
            tenant=tenant,
            workflow_id=workflow_id,
            owner=owner,
            expires_at=expires_at,
            chat_id=chat_id,
        )
        self.what = what

    def _state(self) -> dict[str, Any]:
        return {"what": self.what, **super()._state()}
