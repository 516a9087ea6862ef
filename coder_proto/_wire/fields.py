"""Typed field extraction for the wire model.

Every accessor returns the value when it has the right type, a default when the key is
absent or ``null``, and raises ``CoderProtocolError`` (never ``KeyError``/``TypeError``) when
the key holds a value of the wrong type. ``where`` names the object for the message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .._errors import CoderProtocolError

__all__ = [
    "MISSING",
    "Missing",
    "fail",
    "get_bool",
    "get_dict",
    "get_int",
    "get_list",
    "get_str",
    "opt_bool",
    "opt_int",
    "opt_str",
    "req_dict",
    "req_int",
    "req_str",
    "slot_setter",
]


class Missing:
    """The type of ``MISSING``: a key that was absent, as opposed to present with ``null``."""

    _instance: Missing | None = None

    def __new__(cls) -> Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final = Missing()
"""A key the server's JSON left out, as opposed to one present with ``null`` (falsy)."""


def fail(where: str, key: str, expected: str, value: Any) -> CoderProtocolError:
    return CoderProtocolError(
        f"malformed {where}: {key!r} should be {expected}, got {type(value).__name__}"
    )


def req_dict(obj: Any, where: str) -> dict[str, Any]:
    if type(obj) is not dict:
        raise CoderProtocolError(
            f"malformed {where}: expected a JSON object, got {type(obj).__name__}"
        )
    return obj


def get_dict(obj: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None or type(value) is dict:
        return value
    raise fail(where, key, "an object", value)


def get_list(obj: dict[str, Any], key: str, where: str) -> list[Any] | None:
    value = obj.get(key)
    if value is None or type(value) is list:
        return value
    raise fail(where, key, "an array", value)


def req_str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if type(value) is str:
        return value
    if value is None:
        raise CoderProtocolError(f"malformed {where}: {key!r} is required")
    raise fail(where, key, "a string", value)


def get_str(obj: dict[str, Any], key: str, where: str, default: str = "") -> str:
    value = obj.get(key)
    if value is None:
        return default
    if type(value) is str:
        return value
    raise fail(where, key, "a string", value)


def opt_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None or type(value) is str:
        return value
    raise fail(where, key, "a string", value)


def _as_int(value: Any) -> int | None:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


def req_int(obj: dict[str, Any], key: str, where: str) -> int:
    value = obj.get(key)
    result = _as_int(value)
    if result is not None:
        return result
    if value is None:
        raise CoderProtocolError(f"malformed {where}: {key!r} is required")
    raise fail(where, key, "an integer", value)


def opt_int(obj: dict[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    result = _as_int(value)
    if result is not None:
        return result
    raise fail(where, key, "an integer", value)


def get_int(obj: dict[str, Any], key: str, where: str, default: int = 0) -> int:
    result = opt_int(obj, key, where)
    return default if result is None else result


def opt_bool(obj: dict[str, Any], key: str, where: str) -> bool | None:
    value = obj.get(key)
    if value is None or type(value) is bool:
        return value
    raise fail(where, key, "a boolean", value)


def get_bool(obj: dict[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = opt_bool(obj, key, where)
    return default if value is None else value


def slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The raw setter of slot ``name`` of a slotted (attrs) class.

    It bypasses a frozen class's ``__setattr__`` as ``object.__setattr__`` does. The classes
    built once per streamed delta (``TextPart``, ``MessagePartEvent``, ``TextDelta`` ...) use it
    in a hand-written ``__init__``, which costs about half of the attrs-generated one
    (``python -m tests.bench``).
    """
    setter: Callable[[Any, Any], None] = cls.__dict__[name].__set__
    return setter
