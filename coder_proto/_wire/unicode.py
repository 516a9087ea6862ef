"""Valid Unicode from the wire (D32).

JSON can spell a lone UTF-16 surrogate (``"\\ud800"``), which Python decodes to a ``str`` no
codec can encode. Such text never reaches a user: a decoded document that could hold one
(its source spells a surrogate escape) has every lone surrogate replaced by U+FFFD. Valid
pairs are already one code point once decoded, so whatever surrogate is left is lone. The
raw text is untouched, so a transcript keeps the wire's escapes and replays to the same
values.
"""

from __future__ import annotations

import re
from typing import Any

from .._json import js_stringify, loads, std_loads

# ``loads`` is the decoder in use: ``parse_frame`` reads it here, and tests and benchmarks
# swap it to run one decoding path.
__all__ = ["decode_json", "loads", "valid_json_text", "valid_text"]

_LONE = re.compile("[\ud800-\udfff]")
# A surrogate escape (``\ud...`` or ``\uD...``) in one scan: for text that is not ASCII,
# one regular-expression search costs a third of the two substring searches it replaces.
_ESCAPE = re.compile(r"\\u[dD]")
_ESCAPE_BYTES = re.compile(rb"\\u[dD]")
_search_str = _ESCAPE.search
_search_bytes = _ESCAPE_BYTES.search


def _may_hold_surrogates(data: str | bytes) -> bool:
    if isinstance(data, str):
        return _escape_in_text(data)
    return _search_bytes(data) is not None


def _escape_in_text(data: str) -> bool:
    """Whether ``data`` spells a surrogate escape (``\\ud``/``\\uD``).

    Backslashes are few in most frames, and finding one is a memchr: each is looked at
    until more than one per 256 characters has been, then the regular expression scans the
    rest (for text full of escapes, where stepping from one to the next would cost more)."""
    i = data.find("\\")
    budget = (len(data) >> 8) + 1
    while i >= 0:
        after = data[i + 1 : i + 3]
        if after == "ud" or after == "uD":
            return True
        budget -= 1
        if not budget:
            return _search_str(data, i + 1) is not None
        i = data.find("\\", i + 1)
    return False


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return _LONE.sub("\ufffd", text)


def _repair(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return _LONE.sub("\ufffd", value)
    if kind is list:
        return [_repair(v) for v in value]
    if kind is dict:
        return {_LONE.sub("\ufffd", k): _repair(v) for k, v in value.items()}
    return value


def decode_json(data: str | bytes) -> Any:
    """Decode a JSON document whose strings are valid Unicode. Raises what the decoder
    raises (``ValueError``, ``RecursionError``) for a document it cannot decode."""
    if isinstance(data, str):
        # Most frames hold no backslash at all: one memchr, no call.
        if "\\" not in data or not _escape_in_text(data):
            return loads(data)
    elif _search_bytes(data) is None:
        return loads(data)
    # The standard decoder accepts lone surrogates (a faster one may refuse them).
    return _repair(std_loads(data))


def valid_json_text(text: str) -> str:
    """JSON text (a tool call's input) whose strings decode to valid Unicode: a document
    that spells a lone surrogate is written again with U+FFFD in its place; text that is
    not JSON has its own lone surrogates replaced. Anything else passes through as is."""
    text = _LONE.sub("\ufffd", text)
    if not _may_hold_surrogates(text):
        return text
    try:
        value = std_loads(text)
    except (ValueError, RecursionError):
        return text
    if _repair(value) == value:
        return text  # only valid pairs
    return js_stringify(_repair(value))
