"""RFC 3339 timestamps as the server writes them, on top of ``datetime``.

Nothing here reads a clock: every function turns text into a time or a time (epoch seconds the
caller measured) into text. ``datetime.fromisoformat`` alone is not used for parsing because it
accepts much more than RFC 3339 (dates without a time, basic-format ``20260101T000000``, a
missing offset); the grammar is checked first and ``datetime`` then checks the ranges (month
lengths, leap years).
"""

from __future__ import annotations

import datetime
import re
from typing import Final

__all__ = ["format_rfc3339", "is_rfc3339_time", "parse_rfc3339"]

_UTC: Final = datetime.UTC
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=_UTC)

_TIME: Final = r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
_DATE_TIME_RE: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt]" + _TIME, re.ASCII)
_TIME_RE: Final = re.compile(_TIME, re.ASCII)


def _offset(zone: str) -> datetime.tzinfo | None:
    if zone in ("Z", "z"):
        return _UTC
    hours, minutes = int(zone[1:3]), int(zone[4:6])
    if hours > 23 or minutes > 59:
        return None
    delta = datetime.timedelta(hours=hours, minutes=minutes)
    return datetime.timezone(delta if zone[0] == "+" else -delta)


def parse_rfc3339(text: object) -> datetime.datetime | None:
    """The aware ``datetime`` an RFC 3339 ``date-time`` names (``T``/``Z`` in either case, any
    offset), or ``None`` when ``text`` is not one. Fractions beyond microseconds are cut; a
    leap second (``:60``) is the first instant of the next minute."""
    match = _DATE_TIME_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7), match.group(8)
    tz = _offset(zone)
    if tz is None or second > 60:
        return None
    micros = int((fraction[1:] + "00000")[:6]) if fraction else 0
    try:
        value = datetime.datetime(year, month, day, hour, minute, min(second, 59), micros, tz)
    except ValueError:
        return None
    return value + datetime.timedelta(seconds=1) if second == 60 else value


def is_rfc3339_time(text: object) -> bool:
    """True for an RFC 3339 ``full-time`` (``12:30:00Z``, ``23:59:60.5+01:00``)."""
    match = _TIME_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return False
    hour, minute, second = (int(g) for g in match.groups()[:3])
    return hour <= 23 and minute <= 59 and second <= 60 and _offset(match.group(5)) is not None


def format_rfc3339(seconds: float) -> str:
    """UTC RFC 3339 text for epoch ``seconds`` at microsecond precision, trailing zeros of the
    fraction trimmed, as Go's ``time.Time`` marshals (``RFC3339Nano``)."""
    value = _EPOCH + datetime.timedelta(microseconds=round(seconds * 1_000_000))
    text = value.replace(tzinfo=None).isoformat(timespec="seconds")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + "Z"
