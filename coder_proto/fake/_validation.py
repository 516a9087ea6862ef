"""Checks of the fields the fake's requests carry, each refusing as the server words it
(server-behaviour 1.5 and the per-route errors of 1.2-1.3)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any, Final

from .._constants import MAX_ATTACHMENTS_PER_CHAT, MAX_DYNAMIC_TOOLS, REASONING_EFFORTS
from ._errors import FakeApiError
from ._rows import FakeFile
from ._util import UUID_RE

__all__ = [
    "MAX_LABELS",
    "MAX_LABEL_KEY_BYTES",
    "MAX_LABEL_VALUE_BYTES",
    "content_parts",
    "dynamic_tools",
    "go_quote",
    "labels",
    "mcp_server_ids",
    "plan_mode",
    "reasoning_effort",
    "uuid_field",
]


def content_parts(
    raw: Any, files: Mapping[str, FakeFile], field: str = "content"
) -> list[dict[str, Any]]:
    """Input parts → stored parts (server-behaviour 1.5 item 4): text is trimmed; a file part
    must name one of ``files``."""
    if not isinstance(raw, list) or not raw:
        raise FakeApiError(400, "Content is required.")
    out: list[dict[str, Any]] = []
    for n, part in enumerate(raw):
        where = f"{field}[{n}]"
        if not isinstance(part, dict):
            raise FakeApiError(400, "Invalid input part.", detail=f"{where} must be an object.")
        raw_kind = part.get("type")
        # The server matches the type case-insensitively, around blanks.
        kind = raw_kind.strip().lower() if isinstance(raw_kind, str) else raw_kind
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str) or not text.strip():
                raise FakeApiError(
                    400, "Invalid input part.", detail=f"{where}.text cannot be empty."
                )
            out.append({"type": "text", "text": text.strip()})
        elif kind == "file":
            file_id = part.get("file_id")
            if not isinstance(file_id, str) or not file_id:
                raise FakeApiError(
                    400,
                    "Invalid input part.",
                    detail=f"{where}.file_id is required for file parts.",
                )
            stored = files.get(file_id.lower())
            if stored is None:
                raise FakeApiError(
                    400,
                    "Invalid input part.",
                    detail=f"{where} references a file that does not exist.",
                )
            out.append(
                {
                    "type": "file",
                    "media_type": stored.media_type,
                    "name": stored.name,
                    "file_id": stored.id,
                }
            )
        elif kind == "file-reference":
            ref: dict[str, Any] = {"type": "file-reference"}
            for key, kind_of in (
                ("file_name", str),
                ("start_line", int),
                ("end_line", int),
                ("content", str),
            ):
                value = part.get(key, "" if kind_of is str else 0)
                if not isinstance(value, kind_of) or isinstance(value, bool):
                    raise FakeApiError(
                        400, "Invalid input part.", detail=f"{where}.{key} is invalid."
                    )
                ref[key] = value
            if not ref["file_name"]:
                raise FakeApiError(
                    400,
                    "Invalid input part.",
                    detail=f"{where}.file_name cannot be empty for file-reference.",
                )
            out.append(ref)
        else:
            raise FakeApiError(
                400, "Invalid input part.", detail=f'{where}.type "{raw_kind}" is not supported.'
            )
    if sum(1 for p in out if p["type"] == "file") > MAX_ATTACHMENTS_PER_CHAT:
        raise FakeApiError(
            400,
            "Chat attachment limit reached.",
            detail=f"A chat can have at most {MAX_ATTACHMENTS_PER_CHAT} attachments.",
        )
    return out


def reasoning_effort(raw: Any) -> str | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or raw not in REASONING_EFFORTS:
        raise FakeApiError(
            400,
            "Invalid reasoning_effort value.",
            detail=f"Invalid value {json.dumps(raw)}: must be one of {', '.join(REASONING_EFFORTS)}.",
        )
    return raw


def plan_mode(raw: Any) -> str | None:
    if raw is None:
        return None
    if raw not in ("", "plan"):
        raise FakeApiError(400, "Invalid plan_mode value.")
    return str(raw)


def mcp_server_ids(raw: Any, known: Collection[str]) -> list[str] | None:
    """``mcp_server_ids``: a list of UUIDs naming MCP servers of the organization; any other id
    is refused with the server's message, the detail listing the unknown ids."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise _not_json("mcp_server_ids must be an array of UUIDs")
    ids: list[str] = []
    for value in raw:
        if not isinstance(value, str) or UUID_RE.match(value.lower()) is None:
            raise _not_json("mcp_server_ids must be an array of UUIDs")
        if value.lower() not in ids:
            ids.append(value.lower())
    unknown = [v for v in ids if v not in known]
    if unknown:
        raise FakeApiError(
            400,
            "One or more MCP server IDs are invalid or disabled.",
            detail="Invalid IDs: " + ", ".join(unknown),
        )
    return ids


#: The label rules of the real server: a key starts with a letter or digit and goes on with
#: letters, digits, ``.``, ``_``, ``/`` or ``-``; lengths are counted in UTF-8 bytes.
MAX_LABELS: Final = 50
MAX_LABEL_KEY_BYTES: Final = 64
MAX_LABEL_VALUE_BYTES: Final = 256
_LABEL_KEY: Final = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._/-]*")
_LABEL_KEY_TEXT: Final = "^[a-zA-Z0-9][a-zA-Z0-9._/-]*$"


def labels(raw: Any) -> dict[str, str] | None:
    """``labels``: an object of strings, checked as the server checks them; every broken rule
    is one entry of the 400's ``validations`` (field ``labels``)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise _not_json("labels must be an object of strings")
    problems: list[str] = []
    if len(raw) > MAX_LABELS:
        problems.append(f"too many labels ({len(raw)}); maximum is {MAX_LABELS}")
    for key, value in raw.items():
        if key == "":
            problems.append("label key must not be empty")
            continue
        quoted = go_quote(key)
        if len(key.encode()) > MAX_LABEL_KEY_BYTES:
            problems.append(
                f"label key {quoted} exceeds maximum length of {MAX_LABEL_KEY_BYTES} bytes"
            )
        if _LABEL_KEY.fullmatch(key) is None:
            problems.append(
                f"label key {quoted} contains invalid characters; must match {_LABEL_KEY_TEXT}"
            )
        if value == "":
            problems.append(f"label value for key {quoted} must not be empty")
        if len(value.encode()) > MAX_LABEL_VALUE_BYTES:
            problems.append(
                f"label value for key {quoted} exceeds maximum length of "
                f"{MAX_LABEL_VALUE_BYTES} bytes"
            )
    if problems:
        raise FakeApiError(
            400,
            "Invalid labels.",
            validations=[{"field": "labels", "detail": p} for p in problems],
        )
    return dict(raw)


def go_quote(text: str) -> str:
    """``text`` quoted as Go's ``%q`` writes it for printable text: double quotes, with ``"``
    and ``\\`` escaped (JSON's escapes for the rest)."""
    return json.dumps(text, ensure_ascii=False)


def uuid_field(raw: Any, field: str) -> str | None:
    """An optional UUID field of a request body, lower-cased. A value that is not a UUID string
    fails the server's JSON decoding: 400 "Request body must be valid JSON." with the reason."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise _not_json(f"{field} must be a UUID string")
    if UUID_RE.match(raw.lower()) is None:
        if len(raw) != 36:
            raise _not_json(f"invalid UUID length: {len(raw)}")
        raise _not_json("invalid UUID format")
    return raw.lower()


def _not_json(detail: str) -> FakeApiError:
    """The 400 the server's JSON decoding gives a field of the wrong type."""
    return FakeApiError(400, "Request body must be valid JSON.", detail=detail)


def dynamic_tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise FakeApiError(400, "Invalid dynamic tools.")
    if len(raw) > MAX_DYNAMIC_TOOLS:
        raise FakeApiError(
            400, "Too many dynamic tools.", detail=f"Maximum is {MAX_DYNAMIC_TOOLS}."
        )
    seen: set[str] = set()
    out = []
    for tool in raw:
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise FakeApiError(400, "Dynamic tool name must not be empty.")
        if name in seen:
            raise FakeApiError(
                400,
                "Duplicate dynamic tool name.",
                detail=f'Tool "{name}" appears more than once.',
            )
        seen.add(name)
        out.append(dict(tool))
    return out
