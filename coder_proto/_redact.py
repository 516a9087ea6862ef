"""Keeping the session token out of what the server says (docs/architecture.md rule 6).

The client never writes the token anywhere but its one request header. A server can still
send it back: in an error body, a response header, a close reason, a stream ``error`` event.
``Redactor`` replaces it with ``<redacted>`` where such text enters the core (the connection's
REST answers, a ``WebSocketClient``'s events), so that no error, log record, transport event,
span or transcript built from it can hold it.

What is replaced: the token as it is, and the forms an echo may spell it in (percent-encoded,
``+`` for spaces, JSON-escaped, with Go's escapes of ``<``, ``>`` and ``&`` too). What is not: chat content. A JSON document the server
answered with success, and every stream or watch frame, keeps its text; only the strings
under an ``error`` or ``last_error`` key (and a legacy ``{"type": "error", "data": ...}``
envelope's data) are redacted there. A body or frame that is not JSON, and every error
answer, is redacted whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final
from urllib.parse import quote, quote_plus

from ._json import dumps
from ._wire.unicode import decode_json

__all__ = ["REDACTED", "Redactor"]

#: What takes the token's place.
REDACTED: Final = "<redacted>"

#: Tokens this long or longer are redacted wherever they occur; shorter ones (no real session
#: token is that short) only where they stand alone, so that ``t`` leaves ``Error`` alone.
MIN_SUBSTRING_TOKEN: Final = 8

#: The keys whose values are error texts in a JSON document the server sent.
_ERROR_KEYS: Final = frozenset({"error", "last_error"})


#: What Go's JSON encoder (the server's) escapes besides what ``json.dumps`` does.
_GO_ESCAPES: Final = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def _forms(token: str) -> tuple[str, ...]:
    """The token and the spellings an echo may use, longest first, without repeats."""
    escaped = json.dumps(token)[1:-1]
    spelled = (
        token,
        quote(token, safe=""),
        quote_plus(token, safe=""),
        escaped,
        json.dumps(token, ensure_ascii=False)[1:-1],
        "".join(_GO_ESCAPES.get(c, c) for c in escaped),
    )
    return tuple(sorted(dict.fromkeys(spelled), key=len, reverse=True))


class Redactor:
    """Replaces the session token in server text (``text``, ``data``, ``headers``, ``json``).
    A redactor without a token changes nothing and reports nothing found."""

    __slots__ = ("_byte_pattern", "_bytes", "_pattern", "_texts", "_token")

    def __init__(self, token: str | None) -> None:
        token = token or ""
        texts = _forms(token) if token else ()
        self._texts = texts
        self._bytes = tuple(form.encode("utf-8", "surrogatepass") for form in texts)
        self._token = token
        self._pattern: re.Pattern[str] | None = None
        self._byte_pattern: re.Pattern[bytes] | None = None
        if token and len(token) < MIN_SUBSTRING_TOKEN:
            alternatives = "|".join(re.escape(form) for form in texts)
            self._pattern = re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])")
            self._byte_pattern = re.compile(self._pattern.pattern.encode("utf-8", "surrogatepass"))

    def __bool__(self) -> bool:
        return bool(self._texts)

    @property
    def forms(self) -> tuple[str, ...]:
        """The spellings of the token ``found`` looks for in text (none without a token)."""
        return self._texts

    def __repr__(self) -> str:
        return f"<Redactor {'armed' if self._texts else 'idle'}>"

    def found(self, text: str | bytes) -> bool:
        """Whether ``text`` may hold the token (in any of its forms)."""
        if isinstance(text, str):
            return any(form in text for form in self._texts)
        return any(data in text for data in self._bytes)

    def text(self, text: str) -> str:
        """``text`` with every occurrence of the token replaced by ``<redacted>`` (a token
        under 8 characters only where no letter, digit, ``-`` or ``_`` touches it)."""
        if not self.found(text):
            return text
        if self._pattern is not None:
            return self._pattern.sub(REDACTED, text)
        for form in self._texts:
            text = text.replace(form, REDACTED)
        return text

    def data(self, data: bytes) -> bytes:
        """``data`` with every occurrence of the token's UTF-8 forms replaced."""
        if not self.found(data):
            return data
        if self._byte_pattern is not None:
            return self._byte_pattern.sub(REDACTED.encode(), data)
        for form in self._bytes:
            data = data.replace(form, REDACTED.encode())
        return data

    def cut_text(self, text: str) -> str:
        """``text``, which may have been cut short (a close reason the server cut to its 123
        bytes, a body kept up to a bound), redacted; a beginning of the token of 8 characters
        or more at its very end is replaced too."""
        text = self.text(text)
        for start in self._starts():
            if text.endswith(start):
                return text[: -len(start)] + REDACTED
        return text

    def cut_data(self, data: bytes) -> bytes:
        """``cut_text`` for bytes."""
        data = self.data(data)
        for start in self._starts():
            encoded = start.encode("utf-8", "surrogatepass")
            if data.endswith(encoded):
                return data[: -len(encoded)] + REDACTED.encode()
        return data

    def _starts(self) -> Iterator[str]:
        """The token's beginnings of 8 characters or more, longest first. Made when a cut
        text is redacted (rare), not kept: every open chat holds redactors, and a token's
        beginnings would be most of their memory."""
        token = self._token
        for size in range(len(token) - 1, MIN_SUBSTRING_TOKEN - 1, -1):
            yield token[:size]

    def headers(self, headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """Header values without the token (names are left alone)."""
        return tuple((name, self.text(value)) for name, value in headers)

    def json(self, document: str) -> str:
        """A JSON document with the error texts in it redacted, its other strings (chat
        content) as they were; text that is not a JSON document is redacted whole. Returns
        ``document`` itself when nothing held the token."""
        if not self.found(document):
            return document
        try:
            value = decode_json(document)
            redacted = self._errors(value, False)
        except (ValueError, RecursionError):
            return self.text(document)
        if redacted == value:
            return document
        return dumps(redacted).decode("utf-8", "surrogatepass")

    def json_data(self, data: bytes) -> bytes:
        """``json`` for a body: a body that is not a JSON document is left as it was (it may
        be a file's bytes); error answers go through ``data`` instead."""
        if not self.found(data):
            return data
        try:
            value = decode_json(data)
            redacted = self._errors(value, False)
        except (ValueError, RecursionError):
            return data
        if redacted == value:
            return data
        return dumps(redacted)

    def _errors(self, value: Any, inside: bool) -> Any:
        """``value`` with every string under an error key redacted (``inside``: ``value``
        itself is under one)."""
        kind = type(value)
        if kind is str:
            return self.text(value) if inside else value
        if kind is list:
            return [self._errors(item, inside) for item in value]
        if kind is dict:
            envelope = not inside and value.get("type") == "error" and "chat_id" not in value
            return {
                key: self._errors(
                    item, inside or key in _ERROR_KEYS or (envelope and key == "data")
                )
                for key, item in value.items()
            }
        return value
