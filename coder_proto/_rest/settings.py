"""A raw client's settings (wire 1.1, D23, D24): where it talks to and with which credential,
the ``CODER_URL`` / ``CODER_SESSION_TOKEN`` defaults, the connect timeout of D23, and which
requests a driver reports as ``http:*`` transport events (wire 9, 11), so that no driver
carries policy of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

import attrs

from .._errors import CoderAgentError
from .http import HttpRequest

__all__ = [
    "CONNECT_TIMEOUT",
    "ENV_TOKEN",
    "ENV_URL",
    "UNOBSERVED_OPS",
    "ClientSettings",
    "emits_transport_events",
]


CONNECT_TIMEOUT: Final = 30.0
"""D23: the connect timeout of the HTTP clients an adapter creates (no read timeout: the
core's deadlines bound every wait) and of the stream sockets it opens, in seconds."""

HTTP_TIMEOUT: Final = 60.0
"""D29: a REST call with no deadline from the caller or the core ends at most this many
seconds after its start (to its last body byte); ``http_timeout=None`` lifts it."""

#: D29: a WebSocket dial is bounded from connect to the upgrade's answer.
DIAL_TIMEOUT: Final = 30.0

MAX_RESPONSE_BYTES: Final = 32 * 1024 * 1024
"""D30: a REST response body larger than this ends the call with ``CoderProtocolError``."""
#: Operations that emit no ``http:*`` events: the workspace helpers (wire 9, 11).
UNOBSERVED_OPS: Final = frozenset({"get_workspace", "get_app_host", "share_port"})
#: The environment variables the client defaults from (wire 1.1; docs/decisions.md "Environment and defaults").
ENV_URL: Final = "CODER_URL"
ENV_TOKEN: Final = "CODER_SESSION_TOKEN"


def emits_transport_events(request: HttpRequest) -> bool:
    """True when a driver reports ``request`` as ``http:request`` / ``http:response`` /
    ``http:error`` events (wire 11, D24): every REST call except the workspace helpers
    (wire 9)."""
    return request.op not in UNOBSERVED_OPS


@attrs.frozen(kw_only=True)
class ClientSettings:
    """Where a client talks to and with which credential. The token is never shown."""

    base_url: str
    token: str = attrs.field(repr=False)
    #: D29: the bound of a REST call no caller or core deadline bounds (``None``: none).
    http_timeout: float | None = HTTP_TIMEOUT
    #: D30: the largest REST response body read.
    max_response_bytes: int = MAX_RESPONSE_BYTES

    @staticmethod
    def check_limits(http_timeout: object, max_response_bytes: object) -> tuple[float | None, int]:
        """Validate ``http_timeout`` (seconds above zero, or ``None``) and
        ``max_response_bytes`` (bytes, one or more); anything else is ``CoderAgentError``."""
        timeout: float | None = None
        if http_timeout is not None:
            if isinstance(http_timeout, bool) or not isinstance(http_timeout, int | float):
                raise CoderAgentError(
                    f"http_timeout must be a number of seconds or None, got {http_timeout!r}"
                )
            timeout = float(http_timeout)
            if not timeout > 0:  # NaN included
                raise CoderAgentError(f"http_timeout must be above zero, got {http_timeout!r}")
            if timeout == float("inf"):
                timeout = None
        if (
            isinstance(max_response_bytes, bool)
            or not isinstance(max_response_bytes, int)
            or max_response_bytes < 1
        ):
            raise CoderAgentError(
                f"max_response_bytes must be a whole number of bytes above zero, "
                f"got {max_response_bytes!r}"
            )
        return timeout, max_response_bytes

    @classmethod
    def resolve(
        cls,
        base_url: str | None = None,
        token: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        http_timeout: object = HTTP_TIMEOUT,
        max_response_bytes: object = MAX_RESPONSE_BYTES,
    ) -> ClientSettings:
        """Explicit values win over ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (from ``environ``,
        which the adapter passes as ``os.environ``); one trailing ``/`` of the URL is removed
        (wire 1.1). A missing URL or token, a URL that is not ``http(s)://host...``, or a
        value of the wrong type raises ``CoderAgentError`` saying how to fix it."""
        env = environ if environ is not None else {}
        url = base_url if base_url is not None else env.get(ENV_URL) or None
        secret = token if token is not None else env.get(ENV_TOKEN) or None
        if url is None:
            raise CoderAgentError(
                f"no Coder deployment URL: pass base_url=... or set {ENV_URL} "
                "(for example https://coder.example.com)"
            )
        if type(url) is not str:
            raise CoderAgentError(f"base_url must be a string, got {type(url).__name__}")
        if secret is None or secret == "":
            raise CoderAgentError(f"no Coder session token: pass token=... or set {ENV_TOKEN}")
        if type(secret) is not str:
            raise CoderAgentError(f"token must be a string, got {type(secret).__name__}")
        if any(c in secret for c in "\r\n\x00"):
            raise CoderAgentError("token must not contain line breaks or NUL characters")
        url = url.strip()
        if url.endswith("/"):
            url = url[:-1]
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise CoderAgentError(
                f"base_url must be an http:// or https:// URL with a host, got {url!r}"
            )
        if parts.query or parts.fragment:
            raise CoderAgentError(f"base_url must not carry a query or fragment, got {url!r}")
        timeout, limit = cls.check_limits(http_timeout, max_response_bytes)
        return cls(base_url=url, token=secret, http_timeout=timeout, max_response_bytes=limit)
