"""Blocking file reads every adapter performs for uploads (wire 7) and workspace files
(docs/agents.md "Workspace files"). The event-loop adapters run them in a worker thread; the blocking
adapter calls them directly. Read errors are ``CoderAgentError``."""

from __future__ import annotations

import os
import pathlib

from coder_proto import CoderAgentError
from coder_proto.adapter import check_attachment_size

__all__ = ["read_path", "read_upload_path"]


def read_upload_path(path: str) -> bytes:
    """The bytes of a file to upload; one over 10 MiB is refused before it is read
    (wire 7)."""
    try:
        check_attachment_size(os.path.getsize(path))
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise CoderAgentError(f"cannot read the file to upload {path!r}: {exc}") from exc


def read_path(path: str) -> bytes:
    """The whole file at ``path`` (workspace files have no size cap)."""
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise CoderAgentError(f"cannot read {path!r}: {exc}") from exc
