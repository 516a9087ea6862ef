"""Small pure helpers for the fake server: timestamps, ids and JSON text.

Nothing here reads a clock or draws from the system's randomness (docs/architecture.md rule
2): timestamps are formatted from the epoch seconds the fake's clock gave, and UUIDs come from
a seeded ``random.Random``, so a seeded fake answers with the same ids every run.
"""

from __future__ import annotations

import random
import uuid
from typing import Any, Final

from .._constants import UUID_PATTERN
from .._json import dumps
from .._timestamps import format_rfc3339

__all__ = ["UUID_RE", "encode_json", "new_uuid", "rfc3339"]

#: A UUID in its canonical text form (the client's own pattern: one for both sides).
UUID_RE: Final = UUID_PATTERN

#: Go's encoding/json escapes these inside strings; they never occur outside strings in JSON
#: text, so a plain replacement on the encoded text is exact.
_HTML_ESCAPES: Final = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def rfc3339(seconds: float) -> str:
    """UTC RFC 3339 text for epoch ``seconds``, microsecond precision with trailing zeros
    trimmed, as Go's ``time.Time`` marshals (RFC3339Nano)."""
    return format_rfc3339(seconds)


def new_uuid(rng: random.Random) -> str:
    """A version-4 UUID string drawn from ``rng`` (deterministic for a seeded generator)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def encode_json(value: Any, *, html_escape: bool) -> bytes:
    """Compact UTF-8 JSON; with ``html_escape`` the text matches Go's encoder, which writes
    ``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\uXXXX`` escapes."""
    data = dumps(value)
    if html_escape:
        for raw, escaped in _HTML_ESCAPES:
            if raw in data:
                data = data.replace(raw, escaped)
    return data
