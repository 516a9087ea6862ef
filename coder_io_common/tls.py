"""The TLS context of the WebSocket stream sockets, for every adapter (docs/architecture.md "The adapters":
TLS verification on by default, with the same ``verify`` choices httpx offers; D12: a bad
setting is a local configuration error, raised at once)."""

from __future__ import annotations

import os
import ssl
from typing import TypeAlias

from coder_proto import CoderAgentError

__all__ = ["VerifyTypes", "ssl_context"]

#: What ``verify`` accepts, as in httpx: on/off, a CA bundle (file or directory), a context.
VerifyTypes: TypeAlias = bool | str | os.PathLike[str] | ssl.SSLContext


def ssl_context(verify: VerifyTypes = True) -> ssl.SSLContext:
    """The TLS context for ``verify``, with httpx's meaning: ``True`` verifies against
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's bundle (the system store when
    certifi is missing); ``False`` disables verification; a path is a CA bundle file or
    directory; an ``ssl.SSLContext`` is used as is. Anything else, or an unreadable bundle, is
    a local configuration error: ``CoderAgentError`` (D12)."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is True:
        cafile = os.environ.get("SSL_CERT_FILE")
        capath = os.environ.get("SSL_CERT_DIR")
        if cafile:
            return _load_bundle(cafile, None)
        if capath:
            return _load_bundle(None, capath)
        try:
            import certifi
        except ImportError:  # pragma: no cover - httpx depends on certifi
            return ssl.create_default_context()
        return _load_bundle(certifi.where(), None)
    if verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str | os.PathLike):
        path = os.fspath(verify)
        if os.path.isdir(path):
            return _load_bundle(None, path)
        return _load_bundle(path, None)
    raise CoderAgentError(
        f"verify must be True, False, a CA bundle path or an ssl.SSLContext, got {verify!r}"
    )


def _load_bundle(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise CoderAgentError(
            f"cannot load the CA bundle {cafile or capath!r} for TLS verification: {exc}"
        ) from exc
