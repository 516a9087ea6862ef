"""Chat attachments: media-type and size checks, ``Content-Disposition``, the upload
request and its answer, and the upload plan of bytes, a path or a file object (wire 7, D20).

Uploads are raw bytes (not multipart) posted to ``{P}/files?organization=<org>`` with the
normalised media type as ``Content-Type``. Every check runs before a request exists, so a file
the server would refuse never leaves the process. ``plan_upload`` turns what a caller passes
into an ``UploadPlan``: the bytes, or the path or file object the adapter must read first, and
the media type and name the upload carries.
"""

from __future__ import annotations

import os
import re
from typing import Any, Final
from urllib.parse import quote

import attrs

from .._constants import ALLOWED_MEDIA_TYPES, MAX_ATTACHMENT_BYTES, MEDIA_TYPE_EXTENSIONS, V2_PREFIX
from .._errors import CoderAgentError, CoderApiError, CoderProtocolError
from .._wire.ids import check_resource_id
from .http import HttpRequest, HttpResponse, api_error_from_response

__all__ = [
    "NO_FILE_ID_MESSAGE",
    "UploadPlan",
    "build_upload_chat_file",
    "check_attachment_size",
    "check_media_type",
    "content_disposition",
    "guess_media_type",
    "normalize_media_type",
    "parse_upload_chat_file",
    "plan_upload",
    "upload_result",
]

#: The message of the ``CoderApiError`` raised for a 2xx upload answer without an id (wire 2).
NO_FILE_ID_MESSAGE: Final = "upload succeeded but the response contained no file id"

_NO_MEDIA_TYPE: Final = (
    "Could not determine the file's media type: pass media_type "
    f"(accepted: {', '.join(ALLOWED_MEDIA_TYPES)})."
)
_ACCEPTED_EXTENSIONS: Final = ", ".join(f".{ext}" for ext in MEDIA_TYPE_EXTENSIONS.values())
_UNSUPPORTED_CONTENT: Final = "Unsupported file content: expected bytes, bytearray or memoryview."
_NON_ASCII_PRINTABLE: Final = re.compile(r"[^\x20-\x7e]")
_QUOTED_SPECIALS: Final = re.compile(r'(["\\])')
# encodeURIComponent leaves A-Z a-z 0-9 - _ . ! ~ * ' ( ) alone; RFC 5987 also wants
# ' ( ) * encoded, so only "-_.!~" (plus letters and digits) stay literal.
_RFC5987_SAFE: Final = "-_.!~"


def normalize_media_type(media_type: str) -> str:
    """The part before the first ``;``, trimmed and lower-cased: parameters such as
    ``charset`` are dropped and never sent (wire 7)."""
    return media_type.split(";", 1)[0].strip().lower()


def _missing_media_type(filename: str | None) -> CoderAgentError:
    """The error for a file without a media type: a name whose extension is none of the
    accepted ones is a file type that is not accepted, anything else asks for ``media_type``."""
    base = _base_name(filename) if type(filename) is str else ""
    extension = base.rsplit(".", 1)[1].lower() if "." in base else ""
    if extension and extension not in _EXTENSION_TYPES:
        return CoderAgentError(
            f'File type ".{extension}" of "{base}" is not accepted for chat attachments '
            f"(accepted: {_ACCEPTED_EXTENSIONS}). Write other file types to a workspace instead."
        )
    return CoderAgentError(_NO_MEDIA_TYPE)


def check_media_type(media_type: str | None, *, filename: str | None = None) -> str:
    """Normalise ``media_type`` and check it against the allowlist (wire 7). Returns the
    normalised type; raises ``CoderAgentError`` with wire 7's message when it is missing or not
    allowed. Without a media type, ``filename``'s extension says whether the file's type is
    one the server does not accept."""
    if media_type is None or type(media_type) is not str:
        raise _missing_media_type(filename)
    normalised = normalize_media_type(media_type)
    if not normalised:
        raise _missing_media_type(filename)
    if normalised not in ALLOWED_MEDIA_TYPES:
        raise CoderAgentError(
            f'Media type "{normalised}" is not allowed for chat attachments '
            f"(allowed: {', '.join(ALLOWED_MEDIA_TYPES)}). "
            "Write other file types to a workspace instead."
        )
    return normalised


def check_attachment_size(size: int) -> None:
    """Raise ``CoderAgentError`` with wire 7's message when ``size`` exceeds 10 MiB
    (10 485 760 bytes; exactly 10 MiB is allowed)."""
    if size > MAX_ATTACHMENT_BYTES:
        raise CoderAgentError(
            f"File is {size} bytes, over the {MAX_ATTACHMENT_BYTES}-byte (10 MiB) chat "
            "attachment limit. Write large files to a workspace instead."
        )


def content_disposition(filename: str | None, media_type: str) -> str:
    """``attachment; filename="<ascii>"; filename*=UTF-8''<pct>`` (wire 7, D20).

    ``<ascii>`` replaces every character outside 0x20-0x7E with ``_`` and then escapes ``"``
    and ``\\`` with a backslash; ``<pct>`` is UTF-8 percent-encoding in the style of
    ``encodeURIComponent`` with ``'()*`` also encoded. Without a name (``None`` or empty) the
    name is ``attachment.<extension of the media type>`` (D20). Control characters can never
    reach the header: they are replaced in the ASCII form and encoded in the other.
    """
    name = filename
    if not name:
        extension = MEDIA_TYPE_EXTENSIONS.get(normalize_media_type(media_type), "bin")
        name = f"attachment.{extension}"
    ascii_name = _QUOTED_SPECIALS.sub(r"\\\1", _NON_ASCII_PRINTABLE.sub("_", name))
    # A lone surrogate cannot be UTF-8 encoded; it becomes "?" rather than an exception.
    encoded = quote(name, safe=_RFC5987_SAFE, errors="replace")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{encoded}"


def build_upload_chat_file(
    organization_id: str,
    data: bytes | bytearray | memoryview,
    *,
    media_type: str,
    filename: str | None = None,
) -> HttpRequest:
    """``POST {P}/files?organization=<org>`` with the raw bytes, ``Content-Type`` = the
    normalised media type and ``Content-Disposition`` always set (wire 7, D20).

    Raises ``CoderAgentError`` before building anything when the organization id is empty, the
    content is not bytes-like, the media type is missing or not allowed, or the file is over
    10 MiB. The body is replayable, so no preflight is needed (wire 1.5).
    """
    if type(organization_id) is not str or not organization_id.strip():
        raise CoderAgentError(
            f"organization_id must be a non-empty string, got {organization_id!r}"
        )
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CoderAgentError(_UNSUPPORTED_CONTENT)
    if filename is not None and type(filename) is not str:
        raise CoderAgentError(f"filename must be a string, got {filename!r}")
    normalised = check_media_type(media_type, filename=filename)
    body = bytes(data)
    check_attachment_size(len(body))
    return HttpRequest.build(
        "upload_chat_file",
        "POST",
        f"{V2_PREFIX}/files",
        query={"organization": organization_id},
        body=body,
        content_type=normalised,
        headers=(("Content-Disposition", content_disposition(filename, normalised)),),
    )


def parse_upload_chat_file(request: HttpRequest, response: HttpResponse) -> str:
    """The uploaded file's id from the 201 ``{"id": "<uuid>"}`` answer.

    A non-2xx raises its ``CoderApiError``; an ``id`` that is not an identifier (wire 3.9)
    raises ``CoderProtocolError``; a 2xx without a non-empty string ``id`` raises
    ``CoderApiError(status=<actual>, method POST, path "{P}/files", message "upload succeeded
    but the response contained no file id")`` (wire 2).
    """
    if not response.ok:
        raise api_error_from_response(request, response)
    body = response.json()
    file_id = body.get("id") if isinstance(body, dict) else None
    if type(file_id) is str and file_id:
        try:
            return check_resource_id(file_id, "upload answer", "id")
        except CoderProtocolError as exc:
            # The id goes into the requests that follow (wire 3.9).
            raise CoderProtocolError(
                f"Coder API {request.method} {request.path.partition('?')[0]} returned an "
                f"unexpected body ({response.status}): {exc.message}"
            ) from None
    raise CoderApiError(
        status=response.status,
        method=request.method,
        path=request.path.partition("?")[0],
        server_message=NO_FILE_ID_MESSAGE,
    )


# -- upload plans (wire 7, D20) ----------------------------------------------------------------

#: Extensions the allowlist's media types are known by (wire 7); anything else needs an
#: explicit ``media_type``.
_EXTENSION_TYPES: Final = {
    **{ext: media for media, ext in MEDIA_TYPE_EXTENSIONS.items()},
    "jpeg": "image/jpeg",
    "markdown": "text/markdown",
    "text": "text/plain",
}


def guess_media_type(filename: str | None) -> str | None:
    """The allowlisted media type a file name's extension stands for (``report.pdf`` ->
    ``application/pdf``), or ``None``. Deterministic: no system MIME database is read."""
    if not filename or type(filename) is not str:
        return None
    base = _base_name(filename)
    if "." not in base:
        return None
    return _EXTENSION_TYPES.get(base.rsplit(".", 1)[1].lower())


def _base_name(filename: str) -> str:
    return filename.replace("\\", "/").rsplit("/", 1)[-1]


@attrs.frozen(kw_only=True)
class UploadPlan:
    """What an adapter must do to upload one file (wire 7): read ``path`` or ``stream`` (a
    binary file object) unless ``data`` is already there, then ``request(organization_id,
    data)``. ``media_type`` and ``filename`` are the caller's, or derived from the name."""

    data: bytes | None = attrs.field(default=None, repr=False)
    path: str | None = None
    stream: Any = attrs.field(default=None, repr=False)
    media_type: str | None = None
    filename: str | None = None

    def request(self, organization_id: str, data: object) -> HttpRequest:
        """The upload request for ``data`` (the bytes read): checks the content type, the
        media type against the allowlist and the 10 MiB cap first (wire 7)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CoderAgentError(
                "Unsupported file content: the file object returned "
                f"{type(data).__name__}, expected bytes (open the file in binary mode)."
            )
        return build_upload_chat_file(
            organization_id, data, media_type=self.media_type or "", filename=self.filename
        )


def plan_upload(
    content: object, *, media_type: str | None = None, filename: str | None = None
) -> UploadPlan:
    """Classify upload ``content`` (wire 7): ``bytes`` / ``bytearray`` / ``memoryview``; a
    path (``str`` or ``os.PathLike``; its base name is the default file name); or a binary file
    object with ``read()`` (its ``name`` attribute, when a string, is the default file name).
    Without ``media_type`` it is guessed from the file name's extension; a missing media type
    fails with wire 7's message when the request is built."""
    if media_type is not None and type(media_type) is not str:
        raise CoderAgentError(f"media_type must be a string, got {media_type!r}")
    if filename is not None and type(filename) is not str:
        raise CoderAgentError(f"filename must be a string, got {filename!r}")
    data: bytes | None = None
    path: str | None = None
    stream: Any = None
    name = filename
    if isinstance(content, bytes | bytearray | memoryview):
        data = bytes(content)
    elif isinstance(content, str | os.PathLike):
        path = os.fspath(content)
        if not isinstance(path, str) or not path:
            raise CoderAgentError(f"a file path must be a non-empty string, got {content!r}")
        if name is None:
            name = path.replace("\\", "/").rsplit("/", 1)[-1] or None
    elif callable(getattr(content, "read", None)):
        stream = content
        if name is None:
            own = getattr(content, "name", None)
            if type(own) is str and own:
                name = own.replace("\\", "/").rsplit("/", 1)[-1] or None
    else:
        raise CoderAgentError(
            "Unsupported file content: expected bytes, a path or a binary file object, "
            f"got {type(content).__name__}."
        )
    return UploadPlan(
        data=data,
        path=path,
        stream=stream,
        media_type=media_type if media_type is not None else guess_media_type(name),
        filename=name,
    )


def upload_result(request: HttpRequest, response: HttpResponse) -> str:
    """The uploaded file's id (wire 2): ``parse_upload_chat_file``."""
    return parse_upload_chat_file(request, response)
