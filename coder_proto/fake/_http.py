"""HTTP values of the fake server: its responses, its refusals and the parsing of requests
(server-behaviour 1.1).

``FakeHttpResponse`` is what the pure model answers; the adapter writes it out after
``delay`` seconds. ``FakeApiError`` is how the model's operations refuse a request: the error
body is the server's ``{"message", "detail"?, "validations"?}``.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from .._json import loads
from ._errors import FakeApiError
from ._util import UUID_RE, encode_json

__all__ = [
    "JSON_CONTENT_TYPE",
    "NOT_FOUND_MESSAGE",
    "FakeApiError",
    "FakeHttpResponse",
    "Query",
    "error_response",
    "json_response",
    "lower_headers",
    "not_found",
    "parse_go_int64",
    "parse_json_object",
    "parse_positive_int",
    "parse_target",
    "parse_uuid_param",
    "redact_target",
    "request_token",
    "token_matches",
]

JSON_CONTENT_TYPE: Final = "application/json; charset=utf-8"
NOT_FOUND_MESSAGE: Final = "Resource not found or you do not have access to this resource"


@attrs.frozen(kw_only=True)
class FakeHttpResponse:
    """One HTTP response of the fake. ``delay`` (seconds) is a fault: the adapter waits that
    long before writing it."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = attrs.field(default=b"", repr=lambda b: f"<{len(b)} bytes>")
    delay: float = 0.0

    def json(self) -> Any:
        """The body as JSON (``None`` when empty)."""
        return loads(self.body) if self.body else None

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


def json_response(status: int, value: Any, *, html_escape: bool = True) -> FakeHttpResponse:
    return FakeHttpResponse(
        status=status,
        headers=(("Content-Type", JSON_CONTENT_TYPE),),
        body=encode_json(value, html_escape=html_escape),
    )


def error_response(error: FakeApiError) -> FakeHttpResponse:
    return json_response(error.status, error.body())


def not_found() -> FakeApiError:
    """The server's generic 404 for a resource the caller cannot see."""
    return FakeApiError(404, NOT_FOUND_MESSAGE)


# -- request parsing ------------------------------------------------------------------------


@attrs.frozen
class Query:
    """Parsed query parameters (every value of a repeated key kept, in order)."""

    values: Mapping[str, list[str]] = attrs.Factory(dict)

    def get(self, key: str) -> str | None:
        items = self.values.get(key)
        return items[0] if items else None

    def get_all(self, key: str) -> list[str]:
        return list(self.values.get(key, ()))


def parse_target(target: str) -> tuple[str, Query]:
    """Split a request target into its (percent-decoded) path and query."""
    parts = urlsplit(target)
    return unquote(parts.path), Query(parse_qs(parts.query, keep_blank_values=True))


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object; 400 "Request body must be valid JSON." otherwise
    (Coder's ``httpapi.Read``)."""
    try:
        value = loads(body)
    except (ValueError, TypeError):
        raise FakeApiError(400, "Request body must be valid JSON.") from None
    if not isinstance(value, dict):
        raise FakeApiError(400, "Request body must be valid JSON.", detail="expected an object")
    return value


def request_token(headers: Mapping[str, str], query: Query) -> str | None:
    """The session token from the header, the ``coder_session_token`` query parameter or
    cookie, as Coder's API-key middleware reads it."""
    token = headers.get("coder-session-token")
    if token:
        return token
    token = query.get("coder_session_token")
    if token:
        return token
    for item in headers.get("cookie", "").split(";"):
        name, _, value = item.strip().partition("=")
        if name == "coder_session_token" and value:
            return value
    return None


def token_matches(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def lower_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Request headers as a dict with lower-case names (a mapping or pairs in)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {str(k).lower(): str(v) for k, v in pairs}


def redact_target(target: str) -> str:
    """The target without a ``coder_session_token`` query value (tokens are never kept)."""
    if "coder_session_token" not in target:
        return target
    return re.sub(r"(coder_session_token=)[^&]*", r"\1REDACTED", target)


# -- path and query values ---------------------------------------------------------------------


def parse_uuid_param(value: str) -> str:
    """A path UUID, lower-cased; 400 ``Invalid UUID "x".`` otherwise (Coder's
    ``ParseUUIDParam``)."""
    lowered = value.lower()
    if UUID_RE.match(lowered) is None:
        raise FakeApiError(400, f'Invalid UUID "{value}".')
    return lowered


def parse_go_int64(text: str) -> int:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it: an optional sign and
    decimal digits, nothing else, within int64. Otherwise ``ValueError`` with Go's words."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"strconv.ParseInt: parsing {_go_quote(text)}: invalid syntax")
    number = int(text)
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"strconv.ParseInt: parsing {_go_quote(text)}: value out of range")
    return number


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def parse_positive_int(value: str | None) -> int | None:
    """A positive int64, or ``None`` when the text is not one."""
    if value is None or not re.fullmatch(r"[+-]?\d{1,19}", value.strip()):
        return None
    number = int(value)
    return number if 0 < number < 2**63 else None
