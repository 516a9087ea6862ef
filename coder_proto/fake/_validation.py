"""Checks of the fields the fake's requests carry, each refusing as the server words it
(server-behaviour 1.5 and the per-route errors of 1.2-1.3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._constants import MAX_ATTACHMENTS_PER_CHAT, MAX_DYNAMIC_TOOLS, REASONING_EFFORTS
from ._errors import FakeApiError
from ._rows import FakeFile
from ._util import UUID_RE

__all__ = [
    "content_parts",
    "dynamic_tools",
    "labels",
    "mcp_server_ids",
    "plan_mode",
    "reasoning_effort",
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
        kind = part.get("type")
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
                    400, "Invalid input part.", detail=f"{where}.file_name is required."
                )
            out.append(ref)
        else:
            raise FakeApiError(
                400, "Invalid input part.", detail=f'{where}.type "{kind}" is not supported.'
            )
    if sum(1 for p in out if p["type"] == "file") > MAX_ATTACHMENTS_PER_CHAT:
        raise FakeApiError(400, "Chat attachment limit reached.")
    return out


def reasoning_effort(raw: Any) -> str | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or raw not in REASONING_EFFORTS:
        raise FakeApiError(400, "Invalid reasoning_effort value.")
    return raw


def plan_mode(raw: Any) -> str | None:
    if raw is None:
        return None
    if raw not in ("", "plan"):
        raise FakeApiError(400, "Invalid plan_mode value.")
    return str(raw)


def mcp_server_ids(raw: Any) -> list[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(
        isinstance(v, str) and UUID_RE.match(v.lower()) for v in raw
    ):
        raise FakeApiError(400, "One or more MCP server IDs are invalid or disabled.")
    return [v.lower() for v in raw]


def labels(raw: Any) -> dict[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in raw.items()
    ):
        raise FakeApiError(400, "Invalid labels.")
    return dict(raw)


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
