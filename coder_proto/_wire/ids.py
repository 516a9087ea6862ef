"""Identifiers the server sends (wire 3.9).

A chat, file, organization or workspace id goes into the paths of the requests that follow
(``{P}/{chat}/stream``, ``{P}/files/{id}``), a message or queue-entry id into a cursor or a
path, a tool-call id into the results a client posts back; chat ids also decide which stream
events are the chat's own (D31). Such a value is checked where it is parsed, and one that is
not an identifier is a ``CoderProtocolError`` at once: it is never repaired (D32 repairs text
shown to users, not names of things) and never used.

- **Resource ids** (chats, files, organizations, owners, workspaces, agents): the server's
  are UUIDs; any ASCII letter or digit, then letters, digits, ``-`` and ``_``, at most 64
  characters, is accepted, so the short names test servers give (``chat-1``, ``c1``) pass too.
  An empty string where the field is optional means "none", as an absent field does.
- **Message and queue-entry ids**: integers from 1 to 2**63 - 1 (int64, assigned by the
  database).
- **Tool-call ids** (the model provider's): at most 256 characters, none of them a control
  character, a line or paragraph separator, a surrogate or U+FFFD (what a lone surrogate
  became when the document was decoded).

The messages say what is wrong with a value (its length, the first character that may not be
there and where) without repeating it.
"""

from __future__ import annotations

import re
from typing import Any, Final

from .._errors import CoderProtocolError

__all__ = [
    "MAX_MESSAGE_ID",
    "MAX_RESOURCE_ID",
    "MAX_TOOL_CALL_ID",
    "check_resource_id",
    "get_resource_id",
    "message_id",
    "opt_resource_id",
    "req_resource_id",
    "tool_call_id",
]

#: The longest resource id accepted (a UUID is 36 characters).
MAX_RESOURCE_ID: Final = 64
#: The longest tool-call id accepted.
MAX_TOOL_CALL_ID: Final = 256
#: The largest message or queue-entry id (int64).
MAX_MESSAGE_ID: Final = 2**63 - 1

_RESOURCE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_NOT_RESOURCE: Final = re.compile(r"[^A-Za-z0-9_-]")
_NOT_IN_CALL_ID: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffd]")


def _refuse(where: str, key: str, kind: str, why: str) -> CoderProtocolError:
    return CoderProtocolError(f"malformed {where}: {key!r} is not a valid {kind}: {why}")


def _character(value: str, at: int) -> str:
    return f"U+{ord(value[at]):04X} at position {at}"


def check_resource_id(value: str, where: str, key: str) -> str:
    """``value`` when it is a resource id (module docstring); else ``CoderProtocolError``."""
    if len(value) <= MAX_RESOURCE_ID and _RESOURCE.fullmatch(value) is not None:
        return value
    if not value:
        why = "it is empty"
    elif len(value) > MAX_RESOURCE_ID:
        why = f"{len(value)} characters, more than {MAX_RESOURCE_ID}"
    elif (bad := _NOT_RESOURCE.search(value)) is not None:
        why = _character(value, bad.start())
    else:  # every character may be there, but not first
        why = f"it starts with {value[0]!r}"
    raise _refuse(where, key, "identifier", why)


def _string(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None or type(value) is str:
        return value
    raise CoderProtocolError(
        f"malformed {where}: {key!r} should be a string, got {type(value).__name__}"
    )


def req_resource_id(obj: dict[str, Any], key: str, where: str) -> str:
    """The resource id at ``key``, which must be present."""
    value = _string(obj, key, where)
    if value is None:
        raise CoderProtocolError(f"malformed {where}: {key!r} is required")
    return check_resource_id(value, where, key)


def opt_resource_id(obj: dict[str, Any], key: str, where: str) -> str | None:
    """The resource id at ``key``, or ``None`` when it is absent, ``null`` or ``""``."""
    value = _string(obj, key, where)
    if not value:
        return None
    return check_resource_id(value, where, key)


def get_resource_id(obj: dict[str, Any], key: str, where: str) -> str:
    """The resource id at ``key``, or ``""`` when it is absent, ``null`` or ``""``."""
    return opt_resource_id(obj, key, where) or ""


def message_id(value: int, where: str, key: str) -> int:
    """``value`` when it is a message or queue-entry id (1 to 2**63 - 1); else
    ``CoderProtocolError``."""
    if 0 < value <= MAX_MESSAGE_ID:
        return value
    why = "it is not positive" if value <= 0 else "it is larger than a 64-bit integer"
    raise _refuse(where, key, "id", why)


def tool_call_id(value: str, where: str, key: str = "tool_call_id") -> str:
    """``value`` when it is a tool-call id or empty (module docstring); else
    ``CoderProtocolError``."""
    if len(value) > MAX_TOOL_CALL_ID:
        why = f"{len(value)} characters, more than {MAX_TOOL_CALL_ID}"
        raise _refuse(where, key, "tool-call id", why)
    bad = _NOT_IN_CALL_ID.search(value)
    if bad is not None:
        raise _refuse(where, key, "tool-call id", _character(value, bad.start()))
    return value
