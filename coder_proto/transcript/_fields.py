"""Reading a transcript record's fields strictly: typed access to one JSON object where every
problem is a ``TranscriptError`` naming the record kind, the key and the line, and the
errors a malformed or newer transcript raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .._errors import CoderAgentError

__all__ = ["Fields", "TranscriptError", "TranscriptVersionError", "drop_none", "sub_fields"]


class TranscriptError(CoderAgentError):
    """A transcript is malformed: not JSON, a missing or mistyped field, an unknown record
    kind. ``line`` is the 1-based line number (``None`` when the problem is not one line)."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        full = f"transcript line {line}: {message}" if line is not None else message
        super().__init__(full)
        self.line = line

    def _message_arg(self) -> str:
        return self.message

    def _state(self) -> dict[str, Any]:
        return {}


class TranscriptVersionError(TranscriptError):
    """The transcript was written by a newer format version than this library reads."""


class Fields:
    """Typed access to one record's JSON object; every problem is a ``TranscriptError``."""

    __slots__ = ("data", "kind", "line")

    def __init__(self, data: Mapping[str, Any], kind: str, line: int | None) -> None:
        self.data = data
        self.kind = kind
        self.line = line

    def fail(self, key: str, expected: str) -> TranscriptError:
        return TranscriptError(f"{self.kind} record: {key!r} must be {expected}", line=self.line)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def str_(self, key: str) -> str:
        value = self.data.get(key)
        if type(value) is not str:
            raise self.fail(key, "a string")
        return value

    def opt_str(self, key: str) -> str | None:
        return self.str_(key) if self.has(key) else None

    def int_(self, key: str) -> int:
        value = self.data.get(key)
        if type(value) is not int:
            raise self.fail(key, "an integer")
        return value

    def opt_int(self, key: str) -> int | None:
        return self.int_(key) if self.has(key) else None

    def num(self, key: str) -> float:
        value = self.data.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.fail(key, "a finite number")
        number = float(value)
        if not math.isfinite(number):
            raise self.fail(key, "a finite number")
        return number

    def opt_num(self, key: str) -> float | None:
        return self.num(key) if self.has(key) else None

    def time(self, key: str = "t") -> float:
        value = self.num(key)
        if value < 0:
            raise self.fail(key, "a non-negative number of seconds")
        return value

    def bool_(self, key: str, default: bool = False) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if type(value) is not bool:
            raise self.fail(key, "a boolean")
        return value

    def list_(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if type(value) is not list:
            raise self.fail(key, "a list")
        return value

    def opt_list(self, key: str) -> list[Any] | None:
        return self.list_(key) if self.has(key) else None

    def obj(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        if type(value) is not dict:
            raise self.fail(key, "an object")
        return value

    def str_list(self, key: str) -> tuple[str, ...]:
        items = self.list_(key) if self.has(key) else []
        if not all(type(i) is str for i in items):
            raise self.fail(key, "a list of strings")
        return tuple(items)

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.data.get(key)
        if value not in choices:
            raise self.fail(key, "one of " + ", ".join(repr(c) for c in choices))
        return str(value)

    def conn(self) -> int:
        value = self.int_("conn")
        if value < 1:
            raise self.fail("conn", "a positive integer")
        return value


def sub_fields(data: Any, kind: str, line: int | None) -> Fields:
    if type(data) is not dict:
        raise TranscriptError(f"{kind}: expected an object", line=line)
    return Fields(data, kind, line)


def drop_none(out: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if v is not None}
