"""HTTP values and routing of the fake server (server-behaviour 1).

``FakeHttpResponse`` is what the pure model answers; the adapter writes it out after
``delay`` seconds. ``FakeApiError`` is how the model's operations refuse a request: the error
body is the server's ``{"message", "detail"?, "validations"?}`` (server-behaviour 1.1).

The route table mirrors the server's: the chat routes are mounted under both
``/api/v2/chats`` and ``/api/experimental/chats`` (only the latter in the legacy profile),
the model listings only where the server serves them (D16).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from .._errors import CoderAgentError
from .._json import loads
from ._util import UUID_RE, encode_json

__all__ = [
    "JSON_CONTENT_TYPE",
    "FakeApiError",
    "FakeHttpResponse",
    "Query",
    "RouteMatch",
    "error_response",
    "json_response",
    "match_route",
    "parse_json_object",
    "parse_target",
    "request_token",
    "token_matches",
]

JSON_CONTENT_TYPE: Final = "application/json; charset=utf-8"
NOT_FOUND_MESSAGE: Final = "Resource not found or you do not have access to this resource"
ROUTE_NOT_FOUND_MESSAGE: Final = "Route not found."


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


class FakeApiError(CoderAgentError):
    """A request the fake refuses, as the real server would (status plus error body)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        detail: str | None = None,
        validations: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(f"{status} {message}" + (f" ({detail})" if detail else ""))
        self.status = status
        self.server_message = message
        self.detail = detail
        self.validations = validations

    def _state(self) -> dict[str, Any]:
        return {"status": self.status}

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_api_error,
            (self.status, self.server_message, self.detail, self.validations),
        )

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.server_message}
        if self.detail is not None:
            out["detail"] = self.detail
        if self.validations is not None:
            out["validations"] = self.validations
        return out


def _rebuild_api_error(
    status: int, message: str, detail: str | None, validations: list[dict[str, str]] | None
) -> FakeApiError:
    return FakeApiError(status, message, detail=detail, validations=validations)


def json_response(status: int, value: Any, *, html_escape: bool = True) -> FakeHttpResponse:
    return FakeHttpResponse(
        status=status,
        headers=(("Content-Type", JSON_CONTENT_TYPE),),
        body=encode_json(value, html_escape=html_escape),
    )


def error_response(error: FakeApiError) -> FakeHttpResponse:
    return json_response(error.status, error.body())


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


# -- routes ---------------------------------------------------------------------------------

_ID = r"(?P<{}>[^/]+)"

#: Per-prefix chat routes: (method, path suffix pattern, operation). Order matters: the
#: literal segments come before the ``{chat}`` wildcard, as in the server's router.
_CHAT_ROUTES: Final[tuple[tuple[str, str, str], ...]] = (
    ("GET", r"", "list_chats"),
    ("POST", r"", "create_chat"),
    ("GET", r"/watch", "watch_chats"),
    ("POST", r"/files", "upload_chat_file"),
    ("GET", r"/files/" + _ID.format("file"), "get_chat_file"),
    ("GET", r"/" + _ID.format("chat"), "get_chat"),
    ("PATCH", r"/" + _ID.format("chat"), "update_chat"),
    ("GET", r"/" + _ID.format("chat") + r"/messages", "get_messages"),
    ("POST", r"/" + _ID.format("chat") + r"/messages", "create_chat_message"),
    (
        "PATCH",
        r"/" + _ID.format("chat") + r"/messages/" + _ID.format("message"),
        "edit_chat_message",
    ),
    ("POST", r"/" + _ID.format("chat") + r"/interrupt", "interrupt_chat"),
    ("POST", r"/" + _ID.format("chat") + r"/tool-results", "submit_tool_results"),
    (
        "DELETE",
        r"/" + _ID.format("chat") + r"/queue/" + _ID.format("queued"),
        "delete_queued_message",
    ),
    (
        "POST",
        r"/" + _ID.format("chat") + r"/queue/" + _ID.format("queued") + r"/promote",
        "promote_queued_message",
    ),
    ("GET", r"/" + _ID.format("chat") + r"/stream", "stream_chat"),
    ("GET", r"/" + _ID.format("chat") + r"/cost", "get_chat_cost"),
)
_COMPILED_CHAT_ROUTES: Final = tuple(
    (method, re.compile(pattern + r"$"), op) for method, pattern, op in _CHAT_ROUTES
)

#: Served only under ``/api/experimental/chats`` (server-behaviour 1.1).
_EXPERIMENTAL_ONLY: Final = {
    "/models": "list_models_default_org",
    "/model-configs": "list_model_configs",
}
#: Reserved under ``/api/v2/chats``: 404 instead of falling into ``{chat}``.
_V2_RESERVED: Final = frozenset(
    {"/models", "/model-configs", "/providers", "/user-provider-configs"}
)
_ORG_MODELS: Final = re.compile(
    r"^/api/(?P<api>v2|experimental)/organizations/(?P<org>[^/]+)/chats/models$"
)
_PREFIXES: Final = (("/api/v2/chats", "v2"), ("/api/experimental/chats", "experimental"))

#: Routes that stay readable when the chat daemon is disabled (server-behaviour 1.1).
READ_ONLY_OPS: Final = frozenset(
    {"get_chat", "list_chats", "get_messages", "get_chat_file", "get_chat_cost"}
)
#: Routes served as WebSocket upgrades.
UPGRADE_OPS: Final = frozenset({"stream_chat", "watch_chats"})


@attrs.frozen(kw_only=True)
class RouteMatch:
    """A matched route: the operation name, the API (``v2``/``experimental``) and the path
    parameters."""

    op: str
    api: str
    params: Mapping[str, str] = attrs.Factory(dict)


def match_route(
    method: str, path: str, *, legacy_only: bool, serve_org_models: bool = True
) -> RouteMatch | FakeApiError:
    """The route for ``method path``: a match, or the 404/405 the server's router gives."""
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    org = _ORG_MODELS.match(path)
    if org is not None:
        if legacy_only or not serve_org_models:
            return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
        if method != "GET":
            return FakeApiError(405, "Method not allowed.")
        return RouteMatch(op="list_models", api=org.group("api"), params={"org": org.group("org")})
    for prefix, api in _PREFIXES:
        if path != prefix and not path.startswith(prefix + "/"):
            continue
        if api == "v2" and legacy_only:
            return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
        rest = path[len(prefix) :]
        if rest in _EXPERIMENTAL_ONLY or rest in _V2_RESERVED:
            if api == "v2" or rest not in _EXPERIMENTAL_ONLY:
                return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
            if method != "GET":
                return FakeApiError(405, "Method not allowed.")
            return RouteMatch(op=_EXPERIMENTAL_ONLY[rest], api=api)
        path_matched = False
        for route_method, pattern, op in _COMPILED_CHAT_ROUTES:
            found = pattern.match(rest)
            if found is None:
                continue
            path_matched = True
            if route_method == method:
                return RouteMatch(op=op, api=api, params=found.groupdict())
        if path_matched:
            return FakeApiError(405, "Method not allowed.")
        return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
    return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)


def parse_uuid_param(value: str) -> str:
    """A path UUID, lower-cased; 400 ``Invalid UUID "x".`` otherwise (Coder's
    ``ParseUUIDParam``)."""
    lowered = value.lower()
    if UUID_RE.match(lowered) is None:
        raise FakeApiError(400, f'Invalid UUID "{value}".')
    return lowered


def parse_positive_int(value: str | None) -> int | None:
    """A positive int64, or ``None`` when the text is not one."""
    if value is None or not re.fullmatch(r"[+-]?\d{1,19}", value.strip()):
        return None
    number = int(value)
    return number if 0 < number < 2**63 else None
