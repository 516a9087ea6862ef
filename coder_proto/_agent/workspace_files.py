"""Writing files into the agent's workspace (docs/agents.md "Workspace files"): the adapter that
holds a connection to the workspace (``WorkspaceFiles``), the checks of
``upload_to_workspace()`` before any I/O (``WorkspaceWrite``) and what it returns
(``WorkspaceUpload``).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from .._errors import CoderAgentError
from .._rest.uploads import UploadPlan

__all__ = [
    "WorkspaceFiles",
    "WorkspaceUpload",
    "WorkspaceWrite",
    "check_workspace_files",
    "check_workspace_path",
]


class WorkspaceFiles(Protocol):
    """A workspace-files adapter (docs/agents.md "Workspace files"): whoever holds a connection
    to the workspace supplies it. ``workspace_id`` must equal the agent's (H.2.3).
    ``write_file(path, data)`` writes the bytes as-is (sync or async, as the runtime's
    adapter expects) and may return the path it wrote."""

    @property
    def workspace_id(self) -> str: ...

    def write_file(self, path: str, data: bytes) -> Any: ...


@attrs.frozen(kw_only=True)
class WorkspaceUpload:
    """What ``upload_to_workspace()`` wrote: the path (as the adapter reported it, else the
    one asked for) and the size in bytes."""

    path: str
    size: int


def check_workspace_files(adapter: object, workspace_id: str | None) -> None:
    if adapter is None:
        return
    if not callable(getattr(adapter, "write_file", None)):
        raise CoderAgentError("workspace_files must have a write_file(path, data) method")
    adapter_id = getattr(adapter, "workspace_id", None)
    if adapter_id != workspace_id:
        raise CoderAgentError(
            f"the workspace_files adapter is for workspace {adapter_id!r} but the agent's "
            f"workspace_id is {workspace_id!r}: pass the adapter of the agent's own workspace"
        )


def check_workspace_path(path: object) -> str:
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise CoderAgentError(f"a workspace path must be a non-empty string, got {path!r}")
    return path


@attrs.frozen(kw_only=True)
class WorkspaceWrite:
    """One ``upload_to_workspace()`` call, checked before any I/O (docs/agents.md "Workspace
    files"): the adapter reads ``plan`` whole (no allowlist, no size cap; ``plan.data`` is
    already there for bytes), checks what it read with ``data``, calls
    ``adapter.write_file(target, data)`` and reports ``result(written, data)``."""

    adapter: WorkspaceFiles
    target: str
    plan: UploadPlan

    @staticmethod
    def data(read: object) -> bytes:
        """The bytes a file object returned (``CoderAgentError`` for anything else)."""
        if not isinstance(read, bytes | bytearray | memoryview):
            raise CoderAgentError(
                f"the file object returned {type(read).__name__}, expected bytes "
                "(open the file in binary mode)"
            )
        return bytes(read)

    def result(self, written: object, data: bytes) -> WorkspaceUpload:
        """The path the adapter reported (when a non-empty string), else the target."""
        path = written if isinstance(written, str) and written else self.target
        return WorkspaceUpload(path=path, size=len(data))
