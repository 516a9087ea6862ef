"""The file routes of the fake server: upload and download (server-behaviour 1.2; wire 7).

Uploads are checked as the server checks them: the organization, the allowlist of media types,
10 MiB, a file name, and the bytes' own type against the declared one (the server classifies
what it receives).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote

from .._constants import ALLOWED_MEDIA_TYPES, MAX_ATTACHMENT_BYTES
from .._json import loads
from ._errors import FakeApiError
from ._http import FakeHttpResponse, Query, not_found
from ._rows import FakeFile
from ._store import ChatStore
from ._util import UUID_RE

__all__ = ["Files", "file_too_large"]


def file_too_large() -> FakeApiError:
    """The 413 of an upload over the 10 MiB limit."""
    return FakeApiError(
        413, "File too large.", detail=f"Maximum file size is {MAX_ATTACHMENT_BYTES} bytes."
    )


class Files:
    """Stores uploads and serves them back."""

    def __init__(self, store: ChatStore) -> None:
        self._store = store

    def upload(self, query: Query, headers: Mapping[str, str], body: bytes, now: float) -> FakeFile:
        """``POST /chats/files?organization=`` (server-behaviour 1.2; wire 7): allowlist and
        byte classification (the 10 MiB limit is the route's body limit, checked first)."""
        store = self._store
        t = store.advance_clock(now)
        org = query.get("organization")
        if not org:
            raise FakeApiError(400, "Missing organization query parameter.")
        if UUID_RE.match(org.lower()) is None:
            raise FakeApiError(400, "Invalid organization ID.")
        if org.lower() != store.organization_id:
            raise FakeApiError(403, "You are not a member of the specified organization.")
        declared = headers.get("content-type", "").split(";")[0].strip().lower()
        if declared != "application/octet-stream" and declared not in ALLOWED_MEDIA_TYPES:
            raise FakeApiError(
                400,
                "Unsupported file type.",
                detail="Allowed types: " + ", ".join(ALLOWED_MEDIA_TYPES) + ".",
            )
        if not body:
            raise FakeApiError(400, "Invalid file.", detail="The file is empty.")
        detected = _classify(body)
        if declared == "application/octet-stream":
            if detected not in ALLOWED_MEDIA_TYPES:
                raise FakeApiError(
                    400,
                    "Unsupported file type.",
                    detail="Allowed types: " + ", ".join(ALLOWED_MEDIA_TYPES) + ".",
                )
            media_type = detected
        elif not _compatible(declared, detected, body):
            raise FakeApiError(400, "File content type does not match Content-Type header.")
        else:
            media_type = declared
        name = _disposition_filename(headers.get("content-disposition"))
        if not name:
            if store.config.require_upload_filename:
                raise FakeApiError(400, "Filename is required.")
            name = "file"
        stored = FakeFile(
            id=store.new_uuid(),
            organization_id=store.organization_id,
            owner_id=store.user_id,
            name=name,
            media_type=media_type,
            data=bytes(body),
            created_at=store.timestamp(t),
        )
        store.files[stored.id] = stored
        return stored

    def download(self, file_id: str) -> FakeHttpResponse:
        """``GET /chats/files/{file}``: the bytes with their type, inline for images."""
        file_id = file_id.lower()
        if UUID_RE.match(file_id) is None:
            raise FakeApiError(400, "Invalid file ID.")
        stored = self._store.files.get(file_id)
        if stored is None:
            raise not_found()
        disposition = "inline" if stored.media_type.startswith("image/") else "attachment"
        return FakeHttpResponse(
            status=200,
            headers=(
                ("Content-Type", stored.media_type),
                ("Content-Disposition", f'{disposition}; filename="{_ascii_name(stored.name)}"'),
                ("Cache-Control", "private, max-age=31536000, immutable"),
            ),
            body=stored.data,
        )


# -- what the bytes are ------------------------------------------------------------------------


def _classify(data: bytes) -> str:
    """What the bytes look like (server-behaviour 1.2: the server classifies uploads)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    if b"\x00" in data:
        return "application/octet-stream"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            loads(stripped)
        except ValueError:
            pass
        else:
            return "application/json"
    return "text/plain"


def _compatible(declared: str, detected: str, data: bytes) -> bool:
    if declared == detected:
        return True
    if declared in ("text/plain", "text/csv", "text/markdown"):
        return detected in ("text/plain", "application/json")
    return False


def _disposition_filename(value: str | None) -> str | None:
    """The file name of a ``Content-Disposition`` header (``filename*`` preferred)."""
    if not value:
        return None
    plain: str | None = None
    for param in value.split(";")[1:]:
        key, _, raw = param.strip().partition("=")
        key = key.strip().lower()
        raw = raw.strip()
        if key == "filename*" and "''" in raw:
            name = unquote(raw.split("''", 1)[1])
            if name:
                return name
        elif key == "filename":
            if len(raw) >= 2 and raw[0] == raw[-1] == '"':
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
            plain = raw or None
    return plain


def _ascii_name(name: str) -> str:
    return "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "_" for c in name)
