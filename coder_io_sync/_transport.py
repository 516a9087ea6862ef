"""The transport of an ``httpx.Client`` the blocking driver creates: httpx's own, with every
connection bounded by the deadline of the REST call the current thread performs (D29). Imported
with the first client made, so importing the adapter loads neither httpx nor httpcore."""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from ._call_deadline import left

__all__ = ["bounded_transport"]


class _BoundedStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the current call's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, left(timeout, httpcore.ConnectTimeout)
        )
        return _BoundedStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _BoundedBackend(httpcore.NetworkBackend):
    """httpcore's network backend, with every stream bounded by the call's deadline."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, left(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _BoundedStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - the client never dials a unix socket
        stream = self._inner.connect_unix_socket(
            path, left(timeout, httpcore.ConnectTimeout), socket_options
        )
        return _BoundedStream(stream)

    def sleep(self, seconds: float) -> None:  # pragma: no cover - only retries sleep
        self._inner.sleep(seconds)


def bounded_transport(context: ssl.SSLContext) -> httpx.HTTPTransport:
    """The transport of a client created here: httpx's own, its connections bounded by the
    call's deadline. (httpx takes no network backend, so the pool's is wrapped in place.)"""
    transport = httpx.HTTPTransport(verify=context)
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _BoundedBackend(backend)  # type: ignore[union-attr]
    return transport
