"""JSON helpers: fast parsing, compact request bodies, and JavaScript-compatible text.

``loads`` uses orjson when it is installed (the ``speedups`` extra) and the standard library
otherwise; both raise ``ValueError`` subclasses on bad input, which callers turn into the
library's protocol error.

``js_stringify`` reproduces ``JSON.stringify`` (D18): separators ``,`` and ``:``, non-ASCII
kept, keys in received order, integral floats without ``.0`` and JavaScript's exponent rules.
``canonical_json`` is the same number format with keys sorted by UTF-16 code units (K.8), used
to compare queued prompts with materialised user messages (E.2).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

__all__ = ["canonical_json", "dumps", "js_number", "js_stringify", "loads", "std_loads"]

_std_loads: Callable[[str | bytes], Any] = json.loads
# The decoder's C scanner: (text, index) -> (value, end); not in the type stubs.
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def std_loads(data: str | bytes) -> Any:
    """``json.loads``, with a shortcut for the common case of a text document that starts
    with ``[`` or ``{`` and ends with nothing but JSON whitespace: the decoder's scanner is
    called directly, skipping ``json.loads``'s wrapper (two regular-expression scans and three
    calls), which is a quarter of the cost of decoding a one-event stream frame. Everything
    else, errors included, goes through ``json.loads`` itself, so results and exceptions are
    the same."""
    if type(data) is str:
        first = data[:1]
        if first == "[" or first == "{":
            try:
                value, end = _scan_once(data, 0)
            except (StopIteration, ValueError):
                return _std_loads(data)
            if end == len(data) or not data[end:].strip(" \t\n\r"):
                return value
    return _std_loads(data)


try:  # pragma: no cover - depends on the optional extra
    import orjson as _orjson

    def _fast_loads(data: str | bytes) -> Any:
        return _orjson.loads(data)

    loads: Callable[[str | bytes], Any] = _fast_loads
    JSON_BACKEND = "orjson"
except ImportError:  # pragma: no cover - depends on the optional extra
    loads = std_loads
    JSON_BACKEND = "json"

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
        items = list(value.items())
        if sort_keys:
            items.sort(key=lambda kv: str(kv[0]).encode("utf-16-be"))
        return (
            "{" + ",".join(_encode_str(str(k)) + ":" + _write(v, sort_keys) for k, v in items) + "}"
        )
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
