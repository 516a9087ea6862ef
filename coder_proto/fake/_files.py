"""The file routes of the fake server: upload and download (server-behaviour 1.2; wire 7).

Uploads are typed as the newest server types them (D36): the stored type is decided from the
bytes and the file name (plain text is refined by the extension: ``.md`` and ``.markdown`` to
Markdown, ``.csv`` to CSV, ``.json`` to JSON when the bytes are valid JSON), XML and binary
content are refused, and a declared type must agree with the stored one (a declared
``text/plain`` may turn out Markdown, CSV, JSON or SVG; ``application/octet-stream`` takes
whatever the bytes are). Names are trimmed and cut to 255 bytes. Downloads are inline for every
stored type but PDF and SVG, which are attachments, and carry ``X-Content-Type-Options:
nosniff``.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote

from .._constants import ALLOWED_MEDIA_TYPES, MAX_ATTACHMENT_BYTES
from .._json import loads
from ._errors import FakeApiError
from ._http import FakeHttpResponse, Query, not_found
from ._rows import FakeFile
from ._store import ChatStore
from ._util import UUID_RE

__all__ = ["MAX_STORED_NAME_BYTES", "Files", "classify_upload", "file_too_large"]

#: The longest stored file name, in UTF-8 bytes; longer names are cut at a character boundary.
MAX_STORED_NAME_BYTES: Final = 255
#: Declared types that may be stored as a richer text type after classification.
_TEXT_REFINEMENTS: Final = frozenset(
    {"text/markdown", "text/csv", "application/json", "image/svg+xml"}
)
#: What an upload may be stored as: the client's allowlist and SVG, which the server keeps
#: but serves only as a download.
_STORED_TYPES: Final = frozenset({*ALLOWED_MEDIA_TYPES, "image/svg+xml"})
#: Stored types served as an attachment, never shown inline.
_ATTACHMENT_TYPES: Final = frozenset({"application/pdf", "image/svg+xml"})
#: Bytes a content sniffer takes for binary data (control characters other than blanks).
_BINARY_BYTES: Final = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")


def file_too_large() -> FakeApiError:
    """The 413 of an upload over the 10 MiB limit."""
    return FakeApiError(
        413, "File too large.", detail=f"Maximum file size is {MAX_ATTACHMENT_BYTES} bytes."
    )


def _unsupported() -> FakeApiError:
    return FakeApiError(
        400,
        "Unsupported file type.",
        detail="Allowed types: " + ", ".join(ALLOWED_MEDIA_TYPES) + ".",
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
        declared = declared or "application/octet-stream"
        if declared != "application/octet-stream" and declared not in _STORED_TYPES:
            raise _unsupported()
        if not body:
            raise FakeApiError(400, "Invalid file.", detail="The file is empty.")
        name = _stored_name(_disposition_filename(headers.get("content-disposition")) or "")
        if not name and store.config.require_upload_filename:
            raise FakeApiError(
                400,
                "Filename is required.",
                detail="Name the file in the Content-Disposition header.",
            )
        media_type = classify_upload(name, body)
        if media_type not in _STORED_TYPES:
            raise _unsupported()
        if declared != "application/octet-stream" and not _compatible(declared, media_type):
            raise FakeApiError(400, "File content type does not match Content-Type header.")
        name = name or "file"
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
        """``GET /chats/files/{file}``: the bytes with their stored type; inline for every
        stored type but PDF (an attachment), never sniffed by the browser."""
        file_id = file_id.lower()
        if UUID_RE.match(file_id) is None:
            raise FakeApiError(400, "Invalid file ID.")
        stored = self._store.files.get(file_id)
        if stored is None:
            raise not_found()
        kind = "attachment" if stored.media_type in _ATTACHMENT_TYPES else "inline"
        disposition = format_media_type(kind, {"filename": stored.name})
        return FakeHttpResponse(
            status=200,
            headers=(
                ("Content-Type", stored.media_type),
                ("Content-Disposition", disposition),
                ("Cache-Control", "private, max-age=31536000, immutable"),
                ("X-Content-Type-Options", "nosniff"),
            ),
            body=stored.data,
        )


# -- what the bytes are ------------------------------------------------------------------------


def classify_upload(name: str, data: bytes) -> str:
    """The type an upload named ``name`` is stored as: decided from the bytes, plain text
    refined by the extension. A type outside ``ALLOWED_MEDIA_TYPES`` (SVG, XML, binary) is
    returned as detected, for the caller to refuse."""
    if _has_svg_root(data):
        return "image/svg+xml"
    detected = _detect(data)
    if detected == "text/plain":
        return _refine_text(name, data)
    if detected.startswith("text/") and detected not in ("text/csv", "text/xml"):
        return "text/plain"
    return detected


def _detect(data: bytes) -> str:
    """What the bytes alone look like, as a content sniffer tells it."""
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
    if _BINARY_BYTES.search(data):
        return "application/octet-stream"
    try:
        text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    stripped = text.strip()
    lowered = stripped[:64].lower()
    if lowered.startswith("<?xml"):
        return "text/xml"
    if lowered.startswith(("<!doctype html", "<html", "<head", "<body", "<script")):
        return "text/html"
    if stripped[:1] in ("{", "["):
        try:
            loads(stripped)
        except ValueError:
            pass
        else:
            return "application/json"
    if _looks_like_csv(text):
        return "text/csv"
    return "text/plain"


def _looks_like_csv(text: str) -> bool:
    """Two or more records with the same number (two or more) of comma-separated fields."""
    try:
        rows = list(itertools.islice(filter(None, csv.reader(io.StringIO(text))), 10))
    except csv.Error:  # a field over the csv module's limit: not a table
        return False
    return len(rows) >= 2 and len(rows[0]) >= 2 and all(len(r) == len(rows[0]) for r in rows)


def _refine_text(name: str, data: bytes) -> str:
    extension = name.rpartition(".")[2].lower() if "." in name else ""
    if extension == "json":
        try:
            loads(data)
        except ValueError:
            return "text/plain"
        return "application/json"
    if extension in ("md", "markdown"):
        return "text/markdown"
    if extension == "csv":
        return "text/csv"
    return "text/plain"


def _has_svg_root(data: bytes) -> bool:
    """Whether the first element of the bytes, read as XML, is ``<svg>`` (after declarations,
    doctypes, comments and blank text)."""
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if not text.startswith("<", at):
            return False
        for opening, closing in (("<?", "?>"), ("<!--", "-->"), ("<!", ">")):
            if text.startswith(opening, at):
                end = text.find(closing, at + len(opening))
                if end < 0:
                    return False
                at = end + len(closing)
                break
        else:
            found = re.match(r"<([A-Za-z_][\w.\-]*:)?([A-Za-z_][\w.\-]*)", text[at:])
            return found is not None and found.group(2).lower() == "svg"


def _compatible(declared: str, stored: str) -> bool:
    """Whether an upload declared as ``declared`` may be stored as ``stored``."""
    return declared == stored or (declared == "text/plain" and stored in _TEXT_REFINEMENTS)


def _stored_name(name: str) -> str:
    """The name as stored: trimmed, cut to ``MAX_STORED_NAME_BYTES`` at a character boundary."""
    name = name.strip()
    encoded = name.encode()
    if len(encoded) <= MAX_STORED_NAME_BYTES:
        return name
    return encoded[:MAX_STORED_NAME_BYTES].decode("utf-8", "ignore")


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


_TSPECIALS: Final = frozenset('()<>@,;:\\"/[]?=')


def _is_token(text: str) -> bool:
    return bool(text) and all(" " < c < "\x7f" and c not in _TSPECIALS for c in text)


def format_media_type(kind: str, params: Mapping[str, str]) -> str:
    """A header value such as ``inline; filename=a.png``, laid out as Go's
    ``mime.FormatMediaType`` lays it out: a token as is, other ASCII quoted, anything else in
    the RFC 2231 form ``filename*=utf-8''...``."""
    out = kind
    for key, value in sorted(params.items()):
        if any(not (" " <= c < "\x7f" or c == "\t") for c in value):
            encoded = "".join(
                chr(b)
                if " " < chr(b) < "\x7f" and chr(b) not in _TSPECIALS and chr(b) not in "*'%"
                else f"%{b:02X}"
                for b in value.encode()
            )
            out += f"; {key}*=utf-8''{encoded}"
        elif _is_token(value):
            out += f"; {key}={value}"
        else:
            escaped = re.sub(r'(["\\])', r"\\\1", value)
            out += f'; {key}="{escaped}"'
    return out
