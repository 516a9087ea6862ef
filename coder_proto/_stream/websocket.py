"""One client WebSocket connection, sans-I/O, on wsproto (wire 1.1, 4.1-4.2; D12).

``WebSocketClient`` owns the upgrade handshake and the framing of one connection: it turns
the bytes an adapter reads into a short list of events (``WsOpen``, ``WsText``, ``WsClosed``,
``WsRejected``, ``WsFailed``) and queues the bytes the connection itself must write (the
upgrade request, pongs, close frames). It never reads a socket or a clock.

What it guarantees:

* the upgrade request carries ``Coder-Session-Token`` when a token is set, no compression
  extension (like the Go SDK, wire 4.1), and a ``Host`` header with the port when the port is
  not the scheme's default;
* text messages are reassembled from fragments, up to ``max_message_size`` bytes (at least
  4 MiB must be accepted, wire 4.1); a larger message is a ``WsFailed`` and a queued close
  1009;
* pings are answered, pongs and binary messages are ignored, a server close frame is answered;
* an upgrade rejected with an HTTP status is reported once, with its whole body (kept up to a
  bound), so the caller can classify it (D12);
* after a terminal event (``WsClosed``, ``WsRejected``, ``WsFailed``) nothing else is
  reported;
* the session token never appears in a repr, an error message or an event: what the server
  sends back is redacted before it is reported (a close reason, a rejection's body and
  headers, a protocol failure; in a text message, the error objects only, see
  ``coder_proto._redact``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias
from urllib.parse import SplitResult, urlsplit

import attrs

from .._constants import DEFAULT_MAX_MESSAGE_SIZE, SESSION_TOKEN_HEADER
from .._errors import CoderAgentError
from .._redact import Redactor
from .._rest.http import build_path

if TYPE_CHECKING:
    import h11
    from wsproto import ConnectionType, WSConnection
    from wsproto.connection import Connection, ConnectionState
    from wsproto.events import (
        AcceptConnection,
        CloseConnection,
        Ping,
        RejectConnection,
        RejectData,
        Request,
        TextMessage,
    )
    from wsproto.utilities import LocalProtocolError, RemoteProtocolError

__all__ = [
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "WebSocketClient",
    "WsClosed",
    "WsEvent",
    "WsFailed",
    "WsObserver",
    "WsOpen",
    "WsRejected",
    "WsText",
    "websocket_url",
]

#: Close codes this module sends (RFC 6455 7.4.1).
CLOSE_NORMAL: Final = 1000
CLOSE_MESSAGE_TOO_BIG: Final = 1009

#: How much of a rejection body is kept; the rest is read and dropped. The body only feeds
#: an error message (wire 10), so a misbehaving proxy must not make us buffer without bound.
MAX_REJECTION_BODY: Final = 64 * 1024

_DEFAULT_PORTS: Final = {"ws": 80, "wss": 443}

MAX_UNSENT: Final = 1024 * 1024
"""D30: how many bytes an adapter lets wait unsent on a stream connection (pongs, the close
reply). A peer that sends but reads nothing would grow it without bound: past this the adapter
drops the connection (an ordinary connection failure, redialed as any other)."""

#: How much of an upgrade response is searched for the end of its head; past that the
#: connection keeps every byte on the wsproto path.
MAX_RESPONSE_HEAD: Final = 64 * 1024


def websocket_url(base_url: str, path: str, query: Mapping[str, object] | None = None) -> str:
    """The WebSocket URL for ``path`` under ``base_url`` (wire 1.1).

    A leading ``https://`` becomes ``wss://`` and ``http://`` becomes ``ws://``; any other
    scheme is left unchanged (``WebSocketClient`` rejects it later). One trailing ``/`` of the
    base URL is removed. ``query`` parameters that are not ``None`` are appended in order.
    """
    if base_url.startswith("https://"):
        base_url = "wss://" + base_url[len("https://") :]
    elif base_url.startswith("http://"):
        base_url = "ws://" + base_url[len("http://") :]
    if base_url.endswith("/"):
        base_url = base_url[:-1]
    return base_url + build_path(path, query)


# -- events ------------------------------------------------------------------------------------


@attrs.frozen
class WsOpen:
    """The upgrade was accepted; text messages may follow."""


@attrs.frozen(weakref_slot=False)
class WsText:
    """One complete text message (reassembled from its fragments)."""

    text: str = attrs.field(repr=lambda t: f"<{len(t)} chars>")


class _WsTextDraft:
    """The slots of ``WsText``, writable: the fast path fills one with a plain store and
    makes it a ``WsText`` by assigning ``__class__`` (same slots, no ``__weakref__``), once
    per received frame."""

    __slots__ = WsText.__slots__  # type: ignore[attr-defined]

    text: str


@attrs.frozen
class WsClosed:
    """The connection ended. ``code``/``reason`` come from the server's close frame;
    ``code`` is ``None`` for an abrupt end of stream without one (or before the upgrade was
    answered)."""

    code: int | None
    reason: str | None


@attrs.frozen
class WsRejected:
    """The upgrade was answered with an HTTP status other than 101 (wire 5, D12). ``reason``
    is the status text; ``body`` the response body (up to ``MAX_REJECTION_BODY`` bytes);
    ``headers`` the response headers, names lower-cased."""

    status: int
    reason: str
    body: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class WsFailed:
    """The peer violated the WebSocket or HTTP protocol, or sent a message over the size
    limit. The connection is unusable; a close frame is queued when one can be sent.
    ``handshake`` is true when the upgrade's answer was at fault (no frame was read)."""

    message: str
    handshake: bool = False


WsEvent: TypeAlias = WsOpen | WsText | WsClosed | WsRejected | WsFailed

_WS_OPEN: Final = WsOpen()


class WsObserver(Protocol):
    """Hears what a stream reader's connections did, as the reader saw it: the request
    target of each upgrade it sent, and the events its ``WebSocketClient`` decoded (a
    transcript recorder takes these instead of parsing the bytes again). Must not raise."""

    def upgrade_sent(self, conn_id: int, target: str, now: float) -> None: ...

    def ws_events(self, conn_id: int, events: Sequence[WsEvent], now: float) -> None: ...


# -- the connection ----------------------------------------------------------------------------


@functools.cache
def _import_wsproto() -> None:
    """Bind the wsproto and h11 names this module uses, once, when the first
    ``WebSocketClient`` is made: a program that never opens a stream does not load them (and
    the methods find them as plain module globals, as fast as a top-level import would)."""
    global h11, ConnectionType, WSConnection, Connection, ConnectionState
    global AcceptConnection, CloseConnection, Ping, RejectConnection, RejectData
    global Request, TextMessage, LocalProtocolError, RemoteProtocolError
    import h11
    from wsproto import ConnectionType, WSConnection
    from wsproto.connection import Connection, ConnectionState
    from wsproto.events import (
        AcceptConnection,
        CloseConnection,
        Ping,
        RejectConnection,
        RejectData,
        Request,
        TextMessage,
    )
    from wsproto.utilities import LocalProtocolError, RemoteProtocolError


def _split(url: str) -> SplitResult:
    # The URL is never echoed in these messages: it could carry credentials.
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise CoderAgentError("invalid WebSocket URL: cannot parse it") from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise CoderAgentError(
            f"invalid WebSocket URL scheme {parts.scheme!r}: expected ws or wss "
            "(or a base URL starting with http:// or https://)"
        )
    if not parts.hostname:
        raise CoderAgentError("invalid WebSocket URL: no host")
    if parts.username is not None or parts.password is not None:
        raise CoderAgentError(
            "invalid WebSocket URL: credentials in the URL are not supported; use the session token"
        )
    if port == 0:
        raise CoderAgentError("invalid WebSocket URL: port 0")
    return parts


class WebSocketClient:
    """One client WebSocket connection (wire 4.1; D12).

    Construction validates the URL: a scheme other than ``ws``/``wss``, a missing host, a bad
    port or credentials in the URL raise ``CoderAgentError`` at once (a local configuration
    error, D12). Then:

    1. the adapter connects to ``host:port`` (TLS when ``tls``, verifying ``server_hostname``)
       and writes ``initiate()``;
    2. every chunk read goes to ``receive_data`` (``None`` at end of stream), which returns the
       events it completed, in order;
    3. after each ``receive_data`` or ``close`` the adapter writes ``data_to_send()``.
    """

    __slots__ = (
        "_buffer",
        "_closing",
        "_done",
        "_fast",
        "_forward",
        "_fragmented",
        "_head",
        "_initiated",
        "_max_message_size",
        "_message_parts",
        "_message_size",
        "_opened",
        "_outgoing",
        "_redactor",
        "_reject_body",
        "_reject_headers",
        "_reject_status",
        "_request",
        "_token_forms",
        "_ws",
        "host",
        "port",
        "target",
        "tls",
        "url",
    )

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        headers: Sequence[tuple[str, str]] = (),
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        _import_wsproto()
        parts = _split(url)
        hostname = parts.hostname or ""
        scheme = parts.scheme
        self.url = url
        self.host: str = hostname
        self.tls: bool = scheme == "wss"
        self.port: int = parts.port if parts.port is not None else _DEFAULT_PORTS[scheme]
        self.target: str = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = f"[{hostname}]" if ":" in hostname else hostname
        if self.port != _DEFAULT_PORTS[scheme]:
            host_header = f"{host_header}:{self.port}"
        try:
            host_header.encode("idna")
            self.target.encode("ascii")
        except UnicodeError:
            raise CoderAgentError("invalid WebSocket URL: host or path is not encodable") from None
        extra: list[tuple[bytes, bytes]] = []
        if token is not None:
            extra.append((SESSION_TOKEN_HEADER.encode(), _header_value(token)))
        for name, value in headers:
            extra.append((name.encode("latin-1", "replace"), _header_value(value)))
        self._max_message_size = max_message_size
        self._redactor = Redactor(token)
        self._token_forms = self._redactor.forms
        # The handshake's connection until the upgrade is accepted, then only the WebSocket
        # connection it made: the handshake's h11 state is not used again. On the fast path
        # it is dropped between messages (``_release``) and made again when a frame needs it.
        self._ws: WSConnection | Connection | None = WSConnection(ConnectionType.CLIENT)
        self._outgoing = bytearray()
        self._initiated = False
        # Building the request now makes a bad header a configuration error at construction.
        request = Request(host=host_header, target=self.target, extensions=[], extra_headers=extra)
        try:
            self._request = self._connection().send(request)
        except (LocalProtocolError, h11.LocalProtocolError, ValueError, UnicodeError):
            # The underlying message may quote the offending value (the token): drop it.
            raise CoderAgentError(
                "cannot build the WebSocket upgrade request: a header name or value "
                "contains characters HTTP does not allow"
            ) from None
        self._opened = False
        self._closing = False
        self._done = False
        self._message_parts: list[str] = []
        self._message_size = 0
        self._reject_status: int | None = None
        self._reject_headers: tuple[tuple[str, str], ...] = ()
        self._reject_body = bytearray()
        # The fast path for data frames (``_split_frames``): the upgrade response's head is
        # split off so that wsproto parses it alone; after a 101, frames are cut here.
        self._head: bytearray | None = bytearray()
        self._fast = False
        self._buffer = bytearray()
        self._forward = 0
        self._fragmented = False

    def __repr__(self) -> str:
        state = "done" if self._done else "open" if self._opened else "connecting"
        return f"<WebSocketClient {self.url!r} {state}>"

    @property
    def server_hostname(self) -> str | None:
        """The name to verify the TLS certificate against (``None`` without TLS)."""
        return self.host if self.tls else None

    @property
    def opened(self) -> bool:
        """True once the upgrade was accepted."""
        return self._opened

    @property
    def done(self) -> bool:
        """True once a terminal event was reported (or the caller closed the connection)."""
        return self._done

    def initiate(self) -> bytes:
        """The upgrade request, to write right after the TCP/TLS connection is made. Raises
        ``CoderAgentError`` when called twice."""
        if self._initiated:
            raise CoderAgentError("the WebSocket upgrade request was already sent")
        self._initiated = True
        request, self._request = self._request, b""
        return request

    def data_to_send(self) -> bytes:
        """Bytes the connection queued (upgrade replies, pongs, close frames); clears them."""
        if not self._outgoing:
            return b""
        out = bytes(self._outgoing)
        self._outgoing.clear()
        return out

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Queue a close frame (idempotent). Before the upgrade is accepted there is nothing
        to send; after a terminal event this is a no-op."""
        if self._done or self._closing:
            return
        self._closing = True
        if not self._opened:
            self._done = True
            return
        # Open and not closing: wsproto is in its OPEN state (every other state is terminal).
        self._send(CloseConnection(code=code, reason=reason or None))

    def receive_data(self, data: bytes | None) -> list[WsEvent]:
        """Feed bytes read from the socket (``None`` at end of stream) and return the events
        they complete, in order, without the session token. Never raises on bad input: a
        protocol violation becomes a ``WsFailed``."""
        out = self._receive(data)
        forms = self._token_forms
        if forms and out:
            for index, event in enumerate(out):
                if type(event) is WsText:
                    # ``Redactor.json``'s first look, made here: a message without the
                    # token (nearly every one) is kept as it is without a call.
                    text = event.text
                    for form in forms:
                        if form in text:
                            break
                    else:
                        continue
                out[index] = _redacted(event, self._redactor)
        return out

    def _receive(self, data: bytes | None) -> list[WsEvent]:
        if self._done or data == b"":
            # An empty chunk is not end of stream (h11 would read it as one).
            return []
        out: list[WsEvent] = []
        if self._fast:
            if data is None:
                # wsproto gets what is buffered (at most a partial frame) and the end of
                # stream, as if it had read everything itself.
                self._fast = False
                rest = bytes(self._buffer)
                self._buffer.clear()
                if rest:
                    self._feed(rest, out, False)
                if not self._done:  # pragma: no branch - a partial frame ends nothing
                    self._feed(None, out, True)
            else:
                self._buffer += data
                self._split_frames(out)
            return out
        rest = b""
        split = False
        head = self._head
        if head is not None and data is not None:
            start = max(len(head) - 3, 0)
            head += data
            end = head.find(b"\r\n\r\n", start)
            if end >= 0:
                self._head = None
                if head.startswith((b"HTTP/1.1 101 ", b"HTTP/1.1 101\r")):
                    cut = len(data) - (len(head) - end - 4)
                    data, rest = data[:cut], data[cut:]
                    split = True
            elif len(head) > MAX_RESPONSE_HEAD:
                self._head = None
        self._feed(data, out, data is None)
        if split and not self._done:
            if self._opened:
                self._fast = True
                self._buffer += rest
                self._split_frames(out)
            elif rest:  # pragma: no cover - wsproto answers a complete 101 head at once
                self._feed(rest, out, False)
        return out

    # -- internals ---------------------------------------------------------------------------

    def _feed(self, data: bytes | None, out: list[WsEvent], eof: bool) -> None:
        """Bytes (``None``: end of stream) through wsproto, events into ``out``."""
        try:
            self._connection().receive_data(data)
            self._drain(out, eof)
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self._protocol_failure(out, eof, str(exc))
        if eof and not self._done:  # pragma: no cover - wsproto reports every EOF itself
            # Kept so that end of stream always ends the connection, whatever wsproto does.
            self._finish(out, WsClosed(None, None))

    def _split_frames(self, out: list[WsEvent]) -> None:
        """The fast path for the open connection's buffered bytes (wire 4.2).

        A complete, final, unmasked text frame without reserved bits, outside a fragmented
        message and within the size limit, whose payload is valid UTF-8, is decoded here: one
        header check and one ``decode`` instead of wsproto's frame machinery, which costs
        about twenty times as much per small frame (``python -m tests.bench``). Every other
        frame (control frames, fragments, binary, anything invalid or oversized) is handed
        to wsproto whole, from a frame boundary, so wsproto's state and everything it reports
        (pongs, closes, protocol errors and their close codes) stay as before. A partial
        frame waits for more bytes.
        """
        buf = self._buffer
        size = len(buf)
        pos = 0
        append = out.append
        # Only wsproto (``_feed``) and the branch below change these: read again after each.
        fragmented = self._fragmented
        limit = self._max_message_size
        while not self._done:
            forward = self._forward
            if forward:
                take = min(forward, size - pos)
                if not take:
                    break
                self._forward = forward - take
                self._feed(bytes(buf[pos : pos + take]), out, False)
                fragmented = self._fragmented
                pos += take
                continue
            if size - pos < 2:
                break
            first = buf[pos]
            second = buf[pos + 1]
            length = second & 0x7F
            header = 2
            if length == 126:
                if size - pos < 4:
                    break
                length = buf[pos + 2] << 8 | buf[pos + 3]
                header = 4
            elif length == 127:
                if size - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                header = 10
            if second & 0x80:
                header += 4  # a masking key: a server must not send one, wsproto says so
            elif first == 0x81 and not fragmented and length <= limit:
                end = pos + header + length
                if end > size:
                    break
                try:
                    text = buf[pos + header : end].decode("utf-8")
                except UnicodeDecodeError:
                    pass  # wsproto reports it (close 1007)
                else:
                    # WsText(text) without the __init__ frame: a draft given the class.
                    event = _WsTextDraft()
                    event.text = text
                    event.__class__ = WsText  # type: ignore[assignment]
                    append(event)  # type: ignore[arg-type]
                    pos = end
                    continue
            opcode = first & 0x0F
            if opcode == 1 or opcode == 2:
                self._fragmented = fragmented = not first & 0x80
            elif opcode == 0 and first & 0x80:
                self._fragmented = fragmented = False
            self._forward = header + length
        del buf[:pos]
        self._release()

    def _connection(self) -> WSConnection | Connection:
        """wsproto's connection; a fresh one when ``_release`` dropped it."""
        ws = self._ws
        if ws is None:
            ws = self._ws = Connection(ConnectionType.CLIENT)
        return ws

    def _release(self) -> None:
        """Drop wsproto's connection while it is open, with no frame or message half read:
        a fresh one is in the same state, and an open, idle stream does not keep its buffers,
        decoders and event deque (about 1.6 KiB) while it waits. Every frame the fast path
        hands to wsproto starts at a frame boundary, so ``_connection`` makes it again."""
        ws = self._ws
        if (
            ws is not None
            and not self._forward
            and not self._fragmented
            and not self._done
            and ws.state is ConnectionState.OPEN
        ):
            self._ws = None

    def _send(self, event: CloseConnection) -> None:
        self._outgoing += self._connection().send(event)

    def _finish(self, out: list[WsEvent], event: WsEvent) -> None:
        self._done = True
        self._message_parts.clear()
        out.append(event)

    def _drain(self, out: list[WsEvent], eof: bool) -> None:
        ws = self._connection()
        for event in ws.events():
            kind = type(event)
            if kind is TextMessage:
                assert isinstance(event, TextMessage)
                if self._on_text(event, out):
                    return
            elif kind is Ping:
                assert isinstance(event, Ping)
                if ws.state is ConnectionState.OPEN:
                    self._outgoing += ws.send(event.response())
            elif kind is CloseConnection:
                assert isinstance(event, CloseConnection)
                self._on_close(event, out, eof)
                return
            elif kind is AcceptConnection:
                assert isinstance(ws, WSConnection)
                assert ws.connection is not None
                self._ws = ws.connection
                self._opened = True
                out.append(_WS_OPEN)
            elif kind is RejectConnection:
                assert isinstance(event, RejectConnection)
                self._reject_status = event.status_code
                self._reject_headers = tuple(
                    (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in event.headers
                )
                if not event.has_body:
                    self._report_rejection(out)
                    return
            elif kind is RejectData:
                assert isinstance(event, RejectData)
                room = MAX_REJECTION_BODY - len(self._reject_body)
                if room > 0:
                    self._reject_body += event.data[:room]
                if event.body_finished:
                    self._report_rejection(out)
                    return
            # Pong and BytesMessage: nothing to do (the stream is text only, wire 4.2).

    def _on_text(self, event: TextMessage, out: list[WsEvent]) -> bool:
        data = event.data
        size = len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass"))
        self._message_size += size
        if self._message_size > self._max_message_size:
            self._close_with(CLOSE_MESSAGE_TOO_BIG, "message too big")
            self._finish(
                out,
                WsFailed(f"WebSocket message larger than the {self._max_message_size}-byte limit"),
            )
            return True
        if event.message_finished:
            parts = self._message_parts
            if parts:
                parts.append(data)
                data = "".join(parts)
                parts.clear()
            self._message_size = 0
            out.append(WsText(data))
        else:
            self._message_parts.append(data)
        return False

    def _on_close(self, event: CloseConnection, out: list[WsEvent], eof: bool) -> None:
        ws = self._connection()
        state = ws.state
        if eof:
            # wsproto reports end of stream as a close with 1006; callers want "no close frame".
            self._finish(out, WsClosed(None, None))
        elif state is ConnectionState.REMOTE_CLOSING:
            self._outgoing += ws.send(event.response())
            self._finish(out, WsClosed(int(event.code), event.reason))
        elif state is ConnectionState.CLOSED:
            self._finish(out, WsClosed(int(event.code), event.reason))
        else:
            # wsproto reports a frame it cannot parse as a close event without changing state.
            self._close_with(int(event.code), "")
            self._finish(out, WsFailed(f"WebSocket protocol error: {event.reason}"))

    def _close_with(self, code: int, reason: str) -> None:
        if self._connection().state is ConnectionState.OPEN:
            self._send(CloseConnection(code=code, reason=reason or None))
        self._closing = True

    def _report_rejection(self, out: list[WsEvent]) -> None:
        status = self._reject_status or 0
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        self._finish(
            out, WsRejected(status, phrase, bytes(self._reject_body), self._reject_headers)
        )

    def _protocol_failure(self, out: list[WsEvent], eof: bool, message: str) -> None:
        if self._done:  # pragma: no cover - wsproto raises before reporting anything terminal
            return
        if self._reject_status is not None:
            # The status is known; a truncated body does not change what the caller decides.
            self._report_rejection(out)
        elif eof:
            # The peer hung up in the middle of the HTTP response: an ordinary I/O ending
            # (D12), not a protocol violation.
            self._finish(out, WsClosed(None, None))
        else:
            self._closing = True
            if "accept token" in message.lower():
                message = "the server's Sec-WebSocket-Accept does not match the key sent"
            self._finish(out, WsFailed(f"WebSocket handshake failed: {message}", handshake=True))


def _redacted(event: WsEvent, redactor: Redactor) -> WsEvent:
    """``event`` without the token the server may have sent back in it."""
    kind = type(event)
    if kind is WsText:
        assert isinstance(event, WsText)
        text = redactor.json(event.text)
        return event if text is event.text else WsText(text)
    if kind is WsClosed:
        assert isinstance(event, WsClosed)
        if event.reason:
            # The server cuts a close reason to 123 bytes: a token may end it half-written.
            return WsClosed(event.code, redactor.cut_text(event.reason))
    elif kind is WsRejected:
        assert isinstance(event, WsRejected)
        # The body is kept up to MAX_REJECTION_BODY: a token may end it half-written.
        body = redactor.cut_data(event.body)
        return WsRejected(event.status, event.reason, body, redactor.headers(event.headers))
    elif kind is WsFailed:
        assert isinstance(event, WsFailed)
        return WsFailed(redactor.text(event.message), event.handshake)
    return event


def _header_value(value: str) -> bytes:
    # latin-1 is HTTP's historical header charset; anything else is replaced, never quoted.
    return value.encode("latin-1", "replace")
