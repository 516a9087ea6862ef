r"""JSON: decoding server and model text, compact request bodies, JavaScript-compatible text.

Decoding (``loads``) follows one rule whichever decoder runs: **the value, or the error, is the
one the standard library's ``json.loads`` gives**.

* orjson (the ``speedups`` extra, chosen in ``coder_proto._speedups``) decodes when it is
  installed. Any input it refuses is decoded again by the standard library, whose answer (a
  value or an error) is the result: NaN and Infinity, numbers beyond the double range (``inf``),
  lone surrogates (``"\ud800"``, or UTF-8-encoded surrogates in bytes), UTF-16/32 bytes, a
  UTF-8 byte order mark in bytes, and every invalid document, so errors carry the standard
  library's message. An input with a run of 19 or more digits goes to the standard library
  without asking orjson, because orjson reads integers beyond 64 bits as floats (the standard
  library keeps them exact). Inputs that are neither ``str`` nor ``bytes`` go to the standard
  library too (``TypeError``). A document longer than 16 KiB goes to the standard library
  as well: orjson's working memory is about 13 times the document's size.
* Nesting: the standard library stops where the interpreter's recursion limit falls (on 3.11
  about 1,000 levels less the caller's stack; from 3.12 its C recursion limit, which the
  caller's Python frames do not use), here a ``ValueError`` and never a ``RecursionError``; orjson stops at 1,024 levels. A document orjson decodes that has more
  brackets than the standard library has room for at that call is decoded again by the
  standard library, so both paths stop at the same depth.
* Both paths give what JSON gives for the rest: the last of duplicate keys wins (at the first
  one's position), ``-0.0`` stays negative, ``-0`` is the integer 0, floats are correctly
  rounded. ``tests/proto/test_json.py`` runs every check on both paths and compares them on
  generated text.

Every error is a ``ValueError`` (``json.JSONDecodeError``, ``UnicodeDecodeError``, the
integer-digits limit, the nesting limit) or a ``TypeError`` for an input of the wrong type;
callers turn them into the library's protocol error.

Encoding (``dumps``, request bodies) uses the standard library on both paths (see
``coder_proto._speedups`` for why not orjson).

``js_stringify`` reproduces ``JSON.stringify`` (D18): separators ``,`` and ``:``, non-ASCII
kept, keys in received order, integral floats without ``.0`` and JavaScript's exponent rules.
``canonical_json`` is the same number format with keys sorted by UTF-16 code units (K.8), used
to compare queued prompts with materialised user messages (E.2). Keys that are not strings
are written as ``json.dumps`` writes them (``true``, ``1``, ``null``); other key types are a
``TypeError``, as there.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from ._speedups import orjson as _orjson
from ._speedups import std_loads

__all__ = [
    "REFUSED",
    "canonical_json",
    "decoders",
    "dumps",
    "js_number",
    "js_stringify",
    "loads",
    "long_digit_run",
    "nested_too_deeply",
    "orjson_loads",
    "orjson_unscanned",
    "std_loads",
    "stdlib_loads",
]

_TOO_DEEP: Final = "JSON nested too deeply for the interpreter's recursion limit"

# The standard library's decoder takes one level of the interpreter's recursion limit per
# nesting level, below the caller's frames and its own (json.loads, decode, raw_decode) and a
# margin. From 3.12 its room is larger (the C recursion limit, which Python frames do not
# take), so this estimate errs low and sends a deep document back to the standard library, which
# decides it as it would have without orjson.
_STDLIB_FRAMES: Final = 16
# Documents of at most twice this many bytes (so at most this deep) are not checked against
# the room left: a caller with less room than this would fail long before it got here.
_SHALLOW: Final = 128


def stdlib_loads(data: str | bytes) -> Any:
    """``loads`` on the standard library alone (the path without orjson)."""
    try:
        return std_loads(data)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None


def nested_too_deeply(error: BaseException) -> bool:
    """Whether ``error``, raised by a decoder, says that the document was nested more deeply
    than the interpreter's recursion limit leaves room for (rather than that it is not
    JSON)."""
    return isinstance(error, RecursionError) or (
        isinstance(error, ValueError) and error.args == (_TOO_DEEP,)
    )


def _stdlib_room() -> int:
    """The nesting levels the standard library's decoder can reach from here."""
    depth = 0
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return sys.getrecursionlimit() - depth - _STDLIB_FRAMES


def _within_room(size: int, brackets: int, deeper: int) -> bool:
    """Whether a document of ``size`` characters (or bytes) with ``brackets`` opening
    brackets nests within the standard library's room, for a decoder called ``deeper``
    frames below this function's caller. Depth is at most half the size and at most the
    bracket count: with no more brackets than ``_SHALLOW`` the stack is not looked at."""
    if brackets <= _SHALLOW:
        return True
    room = _stdlib_room() + 1 - deeper  # + 1: this function's own frame
    return size <= 2 * room or brackets <= room


# Digits map to "0" and "{" to "[" (every other byte to itself): a run of 19 zeros is a run of
# 19 digits, and the "[" count is the number of opening brackets.
_SCAN_TABLE: Final = bytes.maketrans(b"123456789{", b"000000000[")
_RUN: Final = 19
_LONG_DIGIT_RUN: Final = b"0" * _RUN
_encode = str.encode
_translate = bytes.translate
_find = bytes.find
_orjson_decode: Callable[[str | bytes], Any] = _orjson.loads if _orjson is not None else std_loads
#: What ``orjson_unscanned`` returns for a document whose orjson value cannot be used.
REFUSED: Final = object()


#: A document longer than this (characters or bytes) is decoded by the standard library.
#: orjson's working memory for a document is about 13 times its size (a turn's last message
#: snapshot of 460 KB: 6.0 MB, against the standard library's 0.46 MB for the value), which
#: made that one decode the peak of a streamed turn's memory. Documents this long are few in a
#: turn (a message's snapshot, a REST body); frames of deltas are decoded typed by msgspec, or
#: in pieces well under it (``coder_proto._wire.events.parse_frame``); and on text that is not
#: ASCII the standard library is the faster one.
_LONG = 16_384


def orjson_loads(data: str | bytes) -> Any:
    """``loads`` with orjson, under the rule in the module docstring (the standard library
    alone when orjson is not installed)."""
    if _orjson is not None:
        raw: bytes = b""  # other types, and documents over _LONG, go to the standard library
        kind = type(data)
        if kind is str:
            if len(data) <= _LONG:
                raw = _encode(data, "utf-8", "surrogatepass")  # type: ignore[arg-type]
        elif kind is bytes and len(data) <= _LONG:
            raw = data  # type: ignore[assignment]
        # A document shorter than a run is not scanned.
        scanned = _translate(raw, _SCAN_TABLE) if len(raw) >= _RUN else b""
        if raw and _find(scanned, _LONG_DIGIT_RUN) < 0:
            try:
                value = _orjson_decode(raw)
            except _orjson.JSONDecodeError:
                pass  # the standard library decides, below
            else:
                # The scan table maps "{" to "[": the count is every opening bracket.
                size = len(raw)
                if size <= 2 * _SHALLOW or _within_room(size, scanned.count(b"["), 0):
                    return value
    # Here rather than through stdlib_loads, so the standard library starts from the same
    # stack depth as on the other path.
    try:
        return std_loads(data)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None


def orjson_unscanned(data: str) -> Any:
    """orjson's value for ``data`` without the digit-run scan, or ``REFUSED``.

    The value is the one ``loads`` gives **except that an integer of 19 or more digits may
    be a float**. A caller that can see from what it built that every number it kept is an
    ``int`` uses the value as it is (a float read from a long integer is never an ``int``);
    any other caller asks ``long_digit_run`` first. ``REFUSED`` when orjson is not
    installed, refuses the document, the document is longer than ``_LONG`` (``loads`` gives
    it to the standard library), or it may be deeper than the standard library has room
    for: the caller then decodes with ``loads``.

    The caller stands where ``loads``'s own caller stands (one frame above ``loads``, as
    ``decode_json`` is), so the room is counted for a decoder one frame deeper than here.
    """
    size = len(data)
    if _orjson is None or size > _LONG:
        return REFUSED
    try:
        value = _orjson_decode(data)
    except _orjson.JSONDecodeError:
        return REFUSED
    if size <= 2 * _SHALLOW or _within_room(size, data.count("[") + data.count("{"), 1):
        return value
    return REFUSED


def long_digit_run(data: str) -> bool:
    """Whether ``data`` holds a run of 19 or more digits (where orjson may read an integer
    as a float)."""
    if len(data) < _RUN:
        return False
    return _LONG_DIGIT_RUN in _translate(_encode(data, "utf-8", "surrogatepass"), _SCAN_TABLE)


def decoders() -> dict[str, Callable[[str | bytes], Any]]:
    """The decoding paths this installation has, by name: ``"stdlib"`` always, ``"orjson"``
    when it is installed. ``loads`` is the last of them."""
    out: dict[str, Callable[[str | bytes], Any]] = {"stdlib": stdlib_loads}
    if _orjson is not None:
        out["orjson"] = orjson_loads
    return out


#: Decode JSON text (``str`` or UTF-8/16/32 ``bytes``) under the rule in the module docstring.
loads: Callable[[str | bytes], Any] = orjson_loads if _orjson is not None else stdlib_loads

_encode_str = json.JSONEncoder(ensure_ascii=False).encode


def dumps(value: Any) -> bytes:
    r"""Compact UTF-8 JSON for request bodies (keys in insertion order).

    A lone surrogate (the server may send ``"\ud800"`` in an id or in text, and a body can
    echo it back) cannot be UTF-8 encoded; it is written as the JSON escape it came as. The
    only characters UTF-8 refuses are surrogates, and ``json.dumps`` leaves them inside
    strings, where ``backslashreplace``'s ``\udXXXX`` is exactly that escape.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "backslashreplace"
    )


def js_number(value: float) -> str:
    """Format a float the way JavaScript's ``Number.prototype.toString`` does.

    Non-finite values become ``null`` as ``JSON.stringify`` writes them.
    """
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    sign = "-" if value < 0 else ""
    text = repr(abs(value))
    # Split the shortest round-trip repr into digits and a decimal exponent n such that
    # value = 0.d1d2...dk * 10**n (ECMAScript Number::toString, step 5).
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    leading_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    n = len(int_part) + exponent - leading_zeros
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        e_text = f"e+{e}" if e >= 0 else f"e-{-e}"
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + e_text
    return sign + out


def _key(key: Any) -> str:
    """A key as ``json.dumps`` writes it."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _write(value: Any, sort_keys: bool) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _encode_str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value)
    if isinstance(value, dict):
        items = [(_key(k), v) for k, v in value.items()]
        if sort_keys:
            items.sort(key=lambda kv: kv[0].encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(_encode_str(k) + ":" + _write(v, sort_keys) for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_write(v, sort_keys) for v in value) + "]"
    raise TypeError(f"value of type {type(value).__name__} is not JSON serializable")


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` for JSON-compatible Python values (D18)."""
    return _write(value, False)


def canonical_json(value: Any) -> str:
    """Deterministic JSON text: keys sorted recursively by UTF-16 code units, JavaScript
    number format, arrays in order (E.2, K.8)."""
    return _write(value, True)
