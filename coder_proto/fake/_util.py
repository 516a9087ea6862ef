"""Small pure helpers for the fake server: timestamps, ids and JSON text.

The core may not read a clock or import ``datetime`` (docs/architecture.md rule 2), so RFC 3339 text is
computed from epoch seconds by hand, and UUIDs come from a seeded ``random.Random``.
"""

from __future__ import annotations

import random
import re
from typing import Any, Final

from .._json import dumps

__all__ = ["UUID_RE", "encode_json", "new_uuid", "rfc3339"]

UUID_RE: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

_MICROS_PER_DAY: Final = 86_400_000_000

#: Go's encoding/json escapes these inside strings; they never occur outside strings in JSON
#: text, so a plain replacement on the encoded text is exact.
_HTML_ESCAPES: Final = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Proleptic Gregorian (year, month, day) for days since 1970-01-01 (H. Hinnant)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def rfc3339(seconds: float) -> str:
    """UTC RFC 3339 text for epoch ``seconds``, microsecond precision with trailing zeros
    trimmed, as Go's ``time.Time`` marshals (RFC3339Nano)."""
    total = round(seconds * 1_000_000)
    days, rem = divmod(total, _MICROS_PER_DAY)
    secs, micros = divmod(rem, 1_000_000)
    year, month, day = _civil_from_days(days)
    hh, rem_s = divmod(secs, 3600)
    mm, ss = divmod(rem_s, 60)
    frac = f".{micros:06d}".rstrip("0") if micros else ""
    return f"{year:04d}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}{frac}Z"


def new_uuid(rng: random.Random) -> str:
    """A version-4 UUID string drawn from ``rng`` (deterministic for a seeded generator)."""
    n = rng.getrandbits(128)
    n = (n & ~(0xF << 76)) | (0x4 << 76)
    n = (n & ~(0xC << 60)) | (0x8 << 60)
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def encode_json(value: Any, *, html_escape: bool) -> bytes:
    """Compact UTF-8 JSON; with ``html_escape`` the text matches Go's encoder, which writes
    ``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\uXXXX`` escapes."""
    data = dumps(value)
    if html_escape:
        for raw, escaped in _HTML_ESCAPES:
            if raw in data:
                data = data.replace(raw, escaped)
    return data
