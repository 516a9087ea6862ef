"""REST requests as values: the core builds them, an adapter sends them, the core classifies
the response (docs/architecture.md rule 3; wire section 2).

``HttpRequest.path`` is relative to the deployment's base URL and includes the query string,
exactly as transport events and errors report it. Headers never include the session token:
the adapter adds ``Coder-Session-Token`` when it sends the request, so a request value can be
logged, recorded or compared without leaking it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import attrs

from .._errors import CoderApiError, CoderProtocolError
from .._json import dumps, nested_too_deeply
from .._wire.unicode import decode_json

__all__ = ["HttpRequest", "HttpResponse", "api_error_from_response", "build_path"]


def build_path(path: str, query: Mapping[str, object] | None = None) -> str:
    """Join a path and the query parameters that are not ``None`` (in the given order)."""
    if not query:
        return path
    pairs = [(k, _query_value(v)) for k, v in query.items() if v is not None]
    if not pairs:
        return path
    return f"{path}?{urlencode(pairs, quote_via=quote)}"


def _query_value(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


@attrs.frozen(kw_only=True)
class HttpRequest:
    """One REST request.

    ``op`` is the Python operation name reported on transport events (D24), for example
    ``create_chat_message``. ``body`` is the exact bytes to send; ``json`` keeps the JSON value
    it was built from (for transcripts and tests).
    """

    op: str
    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    json: Any = None

    @classmethod
    def build(
        cls,
        op: str,
        method: str,
        path: str,
        *,
        query: Mapping[str, object] | None = None,
        json: Any = None,
        body: bytes | None = None,
        content_type: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> HttpRequest:
        """Build a request; a JSON body gets ``Content-Type: application/json`` (and only a
        request with a body gets a content type, wire 1.1)."""
        hdrs = list(headers)
        if json is not None:
            body = dumps(json)
            content_type = content_type or "application/json"
        if body is not None and content_type:
            hdrs.insert(0, ("Content-Type", content_type))
        return cls(
            op=op,
            method=method.upper(),
            path=build_path(path, query),
            headers=tuple(hdrs),
            body=body,
            json=json,
        )

    def with_path(self, path: str) -> HttpRequest:
        """The same request sent to another path (prefix fallback, wire 1.4)."""
        return attrs.evolve(self, path=path)


@attrs.frozen(kw_only=True)
class HttpResponse:
    """A REST response as the adapter received it (headers lower-cased)."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    reason: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status <= 299

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def json(self) -> Any:
        """The body as JSON; empty text or invalid JSON is ``None`` (wire 2)."""
        if not self.body:
            return None
        try:
            return decode_json(self.body)
        except (ValueError, RecursionError):
            return None

    def document(self) -> Any:
        """The body as JSON, for an answer that must carry one: an empty body, a body that is
        not JSON and JSON nested too deeply each raise ``CoderProtocolError`` saying so."""
        if not self.body:
            raise CoderProtocolError("the body is empty")
        try:
            return decode_json(self.body)
        except (ValueError, RecursionError) as exc:
            if nested_too_deeply(exc):
                raise CoderProtocolError(
                    "the body is JSON nested too deeply (its depth is bounded by the "
                    f"interpreter's recursion limit, {sys.getrecursionlimit()})"
                ) from None
            raise CoderProtocolError("the body is not valid JSON") from None


def api_error_from_response(
    request: HttpRequest, response: HttpResponse, *, chat_id: str | None = None
) -> CoderApiError:
    """Build the ``CoderApiError`` for a non-2xx response (wire 10): the body's ``message``,
    else the status text, else ``"request failed"``; ``detail`` and ``validations`` when the
    body has them."""
    body = response.json()
    message: str | None = None
    detail: str | None = None
    validations: tuple[Any, ...] | None = None
    kind: str | None = None
    if isinstance(body, dict):
        if isinstance(body.get("message"), str) and body["message"]:
            message = body["message"]
        if isinstance(body.get("detail"), str) and body["detail"]:
            detail = body["detail"]
        if isinstance(body.get("validations"), list):
            validations = tuple(body["validations"])
        if isinstance(body.get("kind"), str):
            kind = body["kind"]
    if message is None and response.reason:
        message = response.reason
    return CoderApiError(
        status=response.status,
        method=request.method,
        path=request.path,
        server_message=message,
        detail=detail,
        validations=validations,
        kind=kind,
        chat_id=chat_id,
    )
