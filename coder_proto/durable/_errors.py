"""Errors of the durable-workflow layer (docs/durable-workflows.md; D26).

Both are ``CoderAgentError`` subclasses, so a step's ``except CoderAgentError`` sees them, and
both pickle like every library error (they cross process boundaries in workers and engines).
"""

from __future__ import annotations

from .._errors import CoderAgentError

__all__ = ["DurableStoreError", "RecoveryError"]


class DurableStoreError(CoderAgentError):
    """A checkpoint, ledger, journal or stranded-chat record could not be read or written, or
    a stored record is malformed. The cause (the store's own exception) is ``__cause__``.
    Nothing was decided on a failed read; a failed write leaves the previous record in place."""


class RecoveryError(CoderAgentError):
    """Recovery cannot proceed without risking a duplicated effect: a ``committing`` tool call
    has no re-drive path in this process (the tool is not configured, or its re-drive failed),
    or the server refused the reconciled result set. The chat is left as it was (paused), so a
    later recovery with the tool configured can finish the job."""
