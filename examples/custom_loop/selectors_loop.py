"""Embedding the core in your own event loop: one agent turn on ``selectors``, sockets and h11.

This module is the template for programs that already own their loop (gevent, Twisted, a game
loop, an embedded interpreter). It drives ``coder_proto`` with the standard library's
``selectors``, ``socket`` and ``ssl`` and with h11 for HTTP/1.1; it imports no asyncio, trio
or httpx, which is the proof that the core does no I/O of its own. Run it against the fake
server (``coder-agent fake-server`` prints the three values)::

    python -m tests.embedding.selectors_loop --url URL --token TOKEN --org ORG \\
        "What is the weather in Paris?"

How the core is driven (read ``SelectorsLoop`` from ``run`` down):

1. the machine being run (a ``Turn`` from ``Session.stream``) and every background job hand
   over their ``actions()``; the loop performs each one: ``OpenConnection`` / ``SendData`` /
   ``CloseConnection`` on a non-blocking socket, ``SendRequest`` as an h11 exchange on a socket
   of its own, ``RunTools`` by calling the tool functions inline, ``RunInBackground`` by
   adopting the job as one more machine to drive;
2. every outcome goes back with ``now = time.monotonic()``: bytes as ``data_received``,
   responses as ``response_received``, tool outcomes as ``tool_results``;
3. the earliest ``next_deadline()`` is the ``select`` timeout; once it passes the loop calls
   ``tick(now)``.

The routing rule: socket inputs go to the ``Turn`` while it runs and to the ``Session``
otherwise (the session owns the stream a client-tool pause keeps open, state machines H.6);
REST outcomes go back to the machine that sent the request. Ctrl-C cancels the turn (D22):
the turn starts a background interrupt of the server's run, which the loop finishes (bounded)
before the program exits with status 130.

The loop decides nothing: redials after a dropped stream, retries, status checks and timeouts
are the core's (DESIGN "The adapters"). Its simplifications, each a place to do better in a
production loop:

* DNS resolution (``getaddrinfo``) blocks; it is instant for IP literals and ``localhost``.
  Resolve in a worker thread if the loop must never block.
* Every REST request gets its own connection (``Connection: close``): no pool to manage, one
  TCP (and TLS) handshake per call.
* Client tools run inline and block the loop while they run; sockets are read again when they
  return (the core keeps its state meanwhile). Run a slow tool in a worker thread and feed
  ``tool_results`` when it finishes, waking ``select`` with a socket pair as done for signals.
  Async tools are answered with an error result.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import selectors
import signal
import socket
import ssl
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import SplitResult, urlsplit

import attrs
import h11

from coder_proto import (
    CoderAgentError,
    DynamicTool,
    OutputPart,
    TextDelta,
    Tool,
    ToolCall,
    ToolContext,
    TurnResult,
    tool,
)
from coder_proto._actions import (
    Action,
    CancelRequest,
    CloseConnection,
    Machine,
    OpenConnection,
    RunInBackground,
    RunTools,
    SendData,
    SendRequest,
    ToolOutcome,
)
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._agent.tools import encode_output, tools_by_name
from coder_proto._agent.turn import Turn
from coder_proto._constants import SESSION_TOKEN_HEADER
from coder_proto._engine import CoreMachine
from coder_proto._rest.http import HttpResponse
from coder_proto._transport_events import TransportEventSink

__all__ = ["Channel", "HttpExchange", "SelectorsLoop", "get_weather", "main"]

logger = logging.getLogger("tests.embedding")

T = TypeVar("T")
READ_SIZE = 65_536
#: The most the loop waits for background jobs at exit. The jobs bound themselves (10 s for
#: interrupts, D22); this only guards against one that never finishes.
BACKGROUND_LIMIT = 15.0
#: The runtimes this example must never import (printed in the summary at exit).
RUNTIMES = frozenset({"asyncio", "trio", "httpx"})


def _now() -> float:
    return time.monotonic()


class Driven(Protocol):
    """What the loop needs of everything it drives: a ``Machine`` or the ``Session``."""

    def actions(self) -> list[Action]: ...

    def next_deadline(self) -> float | None: ...

    def tick(self, now: float) -> None: ...


# -- a non-blocking connection ------------------------------------------------------------------


class Channel:
    """One non-blocking TCP connection on the selector, TLS when ``tls_context`` is given.

    ``on_open()`` fires once the connection (and the TLS handshake) is up, ``on_data(bytes)``
    for every read, ``on_end(error)`` once when the peer closes (``None``) or the socket fails
    (a message). ``close()`` is the owner's: no callback fires after it.
    """

    def __init__(
        self,
        loop: SelectorsLoop,
        host: str,
        port: int,
        *,
        tls_context: ssl.SSLContext | None,
        server_hostname: str | None,
        on_open: Callable[[], None],
        on_data: Callable[[bytes], None],
        on_end: Callable[[str | None], None],
    ) -> None:
        self._loop = loop
        self._selector = loop.selector
        self._tls_context = tls_context
        self._server_hostname = server_hostname or host
        self._on_open, self._on_data, self._on_end = on_open, on_data, on_end
        self._state = "connecting"  # -> "handshake" (TLS) -> "open" -> "closed"
        self._out = bytearray()
        self._events = 0
        self._silenced = False
        self._sock: socket.socket | None = None
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )[0]
            self._sock = socket.socket(family, kind, proto)
            self._sock.setblocking(False)
            code = self._sock.connect_ex(address)
        except OSError as exc:
            self._fail(str(exc))
            return
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            self._fail(os.strerror(code))
            return
        self._want(selectors.EVENT_WRITE)  # writable means connected, or failed

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is written as soon as the connection is open."""
        if self._state == "closed":
            return
        self._out += data
        if self._state == "open":
            self._flush()

    def close(self) -> None:
        """Write what is queued if the socket takes it now (a WebSocket close frame is a few
        bytes), then close. No callback fires afterwards."""
        if self._state == "open" and self._out and self._sock is not None:
            try:
                self._sock.send(self._out)
            except OSError:
                pass
        self._silenced = True
        self._shut()

    def on_ready(self, mask: int) -> None:
        """The selector reported readiness (``key.data`` of this socket)."""
        sock = self._sock
        if sock is None or self._state == "closed":
            return
        if self._state == "connecting":
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._fail(os.strerror(code))
                return
            if self._tls_context is None:
                self._opened()
                return
            # TLS on a non-blocking socket: wrap without handshaking, then step the handshake
            # on readiness; each step says which readiness it needs next.
            self._want(0)
            try:
                self._sock = self._tls_context.wrap_socket(
                    sock, server_hostname=self._server_hostname, do_handshake_on_connect=False
                )
            except (OSError, ValueError) as exc:
                self._fail(f"TLS setup failed: {exc}")
                return
            self._state = "handshake"
        if self._state == "handshake":
            self._handshake()
            return
        if mask & selectors.EVENT_WRITE:
            self._flush()
        if mask & selectors.EVENT_READ and self._state == "open":
            self._read()

    def _handshake(self) -> None:
        sock = self._sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want(selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            self._want(selectors.EVENT_WRITE)
        except OSError as exc:  # ssl.SSLError (a bad certificate included) is an OSError
            self._fail(f"TLS handshake failed: {exc}")
        else:
            self._opened()

    def _opened(self) -> None:
        self._state = "open"
        self._flush()
        if self._state == "open":
            self._on_open()

    def _read(self) -> None:
        # Read until the socket would block: with TLS, decrypted bytes can wait inside the
        # SSL object where select() cannot see them.
        while self._state == "open" and self._sock is not None:
            try:
                data = self._sock.recv(READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as exc:
                self._fail(str(exc) or type(exc).__name__)
                return
            if not data:
                self._end(None)
                return
            self._on_data(data)

    def _flush(self) -> None:
        while self._out and self._sock is not None:
            try:
                sent = self._sock.send(self._out)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as exc:
                self._fail(str(exc) or type(exc).__name__)
                return
            del self._out[:sent]
        if self._state == "open":
            self._want(selectors.EVENT_READ | (selectors.EVENT_WRITE if self._out else 0))

    def _want(self, events: int) -> None:
        if events == self._events or self._sock is None:
            return
        if self._events == 0:
            self._selector.register(self._sock, events, self.on_ready)
        elif events == 0:
            self._selector.unregister(self._sock)
        else:
            self._selector.modify(self._sock, events, self.on_ready)
        self._events = events

    def _fail(self, message: str) -> None:
        self._end(message or "socket error")

    def _end(self, error: str | None) -> None:
        if self._state == "closed":
            return
        self._shut()
        # Reported on the loop's next pass, never from inside an action being performed (a
        # write can fail there): a machine takes its inputs one at a time, in order.
        self._loop.soon(lambda: None if self._silenced else self._on_end(error))

    def _shut(self) -> None:
        self._want(0)
        self._state = "closed"
        if self._sock is not None:
            self._sock.close()


# -- one REST request over h11 ------------------------------------------------------------------


class HttpExchange:
    """One ``SendRequest``: its own connection, the request written with h11, the response
    parsed with h11 and reported to ``machine`` as ``response_received`` (any status: the
    core classifies it) or ``request_failed`` (no complete response)."""

    def __init__(
        self,
        loop: SelectorsLoop,
        machine: Machine,
        action: SendRequest,
        base: SplitResult,
        tls_context: ssl.SSLContext,
        token: str | None,
    ) -> None:
        self._loop = loop
        self.machine = machine
        self.request_id = action.request_id
        self._h11 = h11.Connection(h11.CLIENT)
        self._response: h11.Response | None = None
        self._body = bytearray()
        self.finished = False
        self.channel: Channel | None = None
        request = action.request
        headers = [("Host", base.netloc), ("Connection", "close"), *request.headers]
        if token:
            headers.append((SESSION_TOKEN_HEADER, token))  # the adapter's job (rest.py)
        if request.body is not None or request.method not in ("GET", "HEAD"):
            headers.append(("Content-Length", str(len(request.body or b""))))
        target = base.path.rstrip("/") + request.path
        try:
            out = self._h11.send(h11.Request(method=request.method, target=target, headers=headers))
            if request.body:
                out = (out or b"") + (self._h11.send(h11.Data(data=request.body)) or b"")
            out = (out or b"") + (self._h11.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:
            message = f"invalid request: {exc}"
            loop.soon(lambda: self._fail(message))
            return
        host = base.hostname or "localhost"
        tls = base.scheme == "https"
        self.channel = Channel(
            loop,
            host,
            base.port or (443 if tls else 80),
            tls_context=tls_context if tls else None,
            server_hostname=host,
            on_open=lambda: self._write(out),
            on_data=self._received,
            on_end=self._ended,
        )

    def cancel(self) -> None:
        """``CancelRequest``: drop the connection; nothing is reported."""
        self._close()

    def _write(self, data: bytes) -> None:
        if self.channel is not None:
            self.channel.write(data)

    def _received(self, data: bytes) -> None:
        self._h11.receive_data(data)
        self._parse()

    def _ended(self, error: str | None) -> None:
        if error is not None:
            self._fail(error)
            return
        self._h11.receive_data(b"")  # EOF ends a response without Content-Length
        self._parse()
        self._fail("the connection closed before the response was complete")

    def _parse(self) -> None:
        while not self.finished:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._fail(f"invalid HTTP response: {exc}")
                return
            if event is h11.NEED_DATA:
                return
            if isinstance(event, h11.Response):
                self._response = event
            elif isinstance(event, h11.Data):
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage) and self._response is not None:
                response = HttpResponse(
                    status=self._response.status_code,
                    body=bytes(self._body),
                    headers=tuple(
                        (k.decode("latin-1"), v.decode("latin-1"))
                        for k, v in self._response.headers
                    ),
                    reason=self._response.reason.decode("latin-1"),
                )
                self._close()
                self.machine.response_received(self.request_id, response, _now())
            elif isinstance(event, h11.ConnectionClosed):
                self._fail("the connection closed before the response was complete")

    def _fail(self, message: str) -> None:
        if self.finished:
            return
        self._close()
        self.machine.request_failed(self.request_id, message, _now())

    def _close(self) -> None:
        self.finished = True
        self._loop.forget_exchange(self)
        if self.channel is not None:
            self.channel.close()


# -- the loop ---------------------------------------------------------------------------------


class SelectorsLoop:
    """Drives a ``Session``'s machines on one ``selectors`` selector (see the module
    docstring). ``tools`` are the client tools by name; ``on_part`` receives the stream-mode
    output parts live; ``on_tool`` hears of every tool call and its outcome."""

    def __init__(
        self,
        session: Session,
        tools: Mapping[str, Tool],
        *,
        tls_context: ssl.SSLContext | None = None,
        on_part: Callable[[OutputPart], None] | None = None,
        on_tool: Callable[[ToolCall, ToolOutcome], None] | None = None,
    ) -> None:
        self.session = session
        self.tools = dict(tools)
        self.selector = selectors.DefaultSelector()
        self.tls_context = tls_context if tls_context is not None else ssl.create_default_context()
        self.on_part = on_part
        self.on_tool = on_tool
        self.foreground: CoreMachine[Any] | None = None
        self.background: list[Machine] = []
        self._base = urlsplit(session.config.base_url)
        self._connections: dict[int, Channel] = {}
        self._exchanges: dict[tuple[int, int], HttpExchange] = {}
        self._soon: deque[Callable[[], None]] = deque()
        self._interrupted = False
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._old_sigint: Any = None
        self._old_wakeup_fd = -1

    # -- running machines --------------------------------------------------------------------

    def run(self, machine: CoreMachine[T]) -> T:
        """Drive ``machine`` (a turn, or a cleanup machine such as ``session.archive``) to
        completion and return its result or raise its typed error. On Ctrl-C the machine is
        cancelled (D22) and ``KeyboardInterrupt`` propagates at once; the background work the
        cancellation started is left to ``finish_background``."""
        self.foreground = machine
        try:
            while True:
                self._pump()
                if machine.done:
                    return machine.result()
                if self._interrupted:
                    raise KeyboardInterrupt
                self._wait(None)
        except KeyboardInterrupt as exc:
            if not machine.done:
                machine.cancel(_now(), exc)
                self._pump()
            raise

    def finish_background(self, limit: float = BACKGROUND_LIMIT) -> bool:
        """Drive the background jobs (interrupts, withdrawals) until they are done, at most
        ``limit`` seconds: an agent closing awaits them (D22). Another Ctrl-C stops the wait.
        Returns whether every job finished."""
        end = _now() + limit
        self._interrupted = False
        while True:
            self._pump()
            if not self.background:
                return True
            if self._interrupted or _now() >= end:
                return False
            self._wait(end)

    def close(self) -> None:
        """Close the session's retained stream and every socket, restore signal handling."""
        for action in self.session.close_retained_stream(_now()):
            self._perform(self.session, action)
        for channel in list(self._connections.values()):
            channel.close()
        self._connections.clear()
        for exchange in list(self._exchanges.values()):
            exchange.cancel()
        if self._wake_r is not None and self._wake_w is not None:
            signal.signal(signal.SIGINT, self._old_sigint)
            signal.set_wakeup_fd(self._old_wakeup_fd)
            self.selector.unregister(self._wake_r)
            self._wake_r.close()
            self._wake_w.close()
            self._wake_r = self._wake_w = None
        self.selector.close()

    def handle_sigint(self) -> None:
        """Turn Ctrl-C into a flag checked between steps, so ``KeyboardInterrupt`` never lands
        in the middle of a machine's step; the wake-up socket makes ``select`` return at once.
        Call from the main thread."""
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, self._woken)
        self._old_wakeup_fd = signal.set_wakeup_fd(self._wake_w.fileno())
        self._old_sigint = signal.signal(signal.SIGINT, self._on_sigint)

    def soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop's next pass (an outcome known while performing)."""
        self._soon.append(callback)

    def forget_exchange(self, exchange: HttpExchange) -> None:
        self._exchanges.pop((id(exchange.machine), exchange.request_id), None)

    # -- the heart: perform actions, feed outcomes, wait --------------------------------------

    def _driven(self) -> list[Driven]:
        machines: list[Driven] = []
        if self.foreground is not None:
            machines.append(self.foreground)
        if not isinstance(self.foreground, Turn) or self.foreground.done:
            machines.append(self.session)  # between turns the session owns its streams (H.6)
        return machines

    def _pump(self) -> None:
        """Feed queued outcomes, perform every action and tick every expired deadline, until
        nothing moves."""
        busy = True
        while busy:
            busy = False
            while self._soon:
                self._soon.popleft()()
                busy = True
            now = _now()
            for machine in self._driven():
                busy = self._step(machine, now) or busy
            for job in list(self.background):
                # A finished job still hands over its last actions once, then leaves.
                finished = job.done
                busy = self._step(job, now) or busy
                if finished:
                    self.background.remove(job)
            turn = self.foreground
            if isinstance(turn, Turn) and self.on_part is not None:
                while turn.parts:
                    self.on_part(turn.parts.popleft())

    def _step(self, machine: Driven, now: float) -> bool:
        busy = False
        for action in machine.actions():
            self._perform(machine, action)
            busy = True
        deadline = machine.next_deadline()
        if deadline is not None and deadline <= now:
            machine.tick(now)
            busy = True
        return busy

    def _wait(self, until: float | None) -> None:
        """Wait for I/O, at most until the earliest deadline (or ``until``)."""
        deadlines = [d for d in (m.next_deadline() for m in self._driven()) if d is not None]
        deadlines += [d for d in (j.next_deadline() for j in self.background) if d is not None]
        if until is not None:
            deadlines.append(until)
        if not deadlines and not self._connections and not self._exchanges:
            raise RuntimeError("the machine waits for nothing: no socket, request or deadline")
        timeout = max(0.0, min(deadlines) - _now()) if deadlines else None
        for key, mask in self.selector.select(timeout):
            key.data(mask)

    def _perform(self, machine: Driven, action: Action) -> None:
        if isinstance(action, OpenConnection):
            self._open(action)
        elif isinstance(action, SendData):
            channel = self._connections.get(action.conn_id)
            if channel is not None:
                channel.write(action.data)
        elif isinstance(action, CloseConnection):
            channel = self._connections.pop(action.conn_id, None)
            if channel is not None:
                channel.close()
        elif isinstance(action, SendRequest):
            assert isinstance(machine, CoreMachine)  # requests come from turns and jobs
            key = (id(machine), action.request_id)
            self._exchanges[key] = HttpExchange(
                self, machine, action, self._base, self.tls_context, self.session.config.token
            )
        elif isinstance(action, CancelRequest):
            exchange = self._exchanges.pop((id(machine), action.request_id), None)
            if exchange is not None:
                exchange.cancel()
        elif isinstance(action, RunTools):
            assert isinstance(machine, Turn)
            outcomes = [self._run_tool(call) for call in action.calls]
            if not self._interrupted:  # a Ctrl-C while tools ran cancels the turn instead
                self.soon(lambda: machine.tool_results(outcomes, _now()))
        elif isinstance(action, RunInBackground):
            self.background.append(action.job)

    def _open(self, action: OpenConnection) -> None:
        conn_id = action.conn_id
        self._connections[conn_id] = Channel(
            self,
            action.host,
            action.port,
            tls_context=self.tls_context if action.tls else None,
            server_hostname=action.server_hostname,
            on_open=lambda: self._stream_target().connection_made(conn_id, _now()),
            on_data=lambda data: self._stream_target().data_received(conn_id, data, _now()),
            on_end=lambda error: self._connection_ended(conn_id, error),
        )

    def _stream_target(self) -> Turn | Session:
        """The routing rule: the running turn, else the session (H.6)."""
        turn = self.foreground
        if isinstance(turn, Turn) and not turn.done:
            return turn
        return self.session

    def _connection_ended(self, conn_id: int, error: str | None) -> None:
        self._connections.pop(conn_id, None)
        target = self._stream_target()
        if error is None:
            target.connection_lost(conn_id, _now())
        else:
            target.connection_failed(conn_id, error, _now())

    def _run_tool(self, call: ToolCall) -> ToolOutcome:
        """Run one client tool call inline. D5: an unknown tool, invalid input or an exception
        becomes an error result with a string message."""
        found = self.tools.get(call.tool_name)
        outcome: ToolOutcome
        if found is None or found.func is None:
            outcome = _error(call, f"tool {call.tool_name!r} is not registered")
        elif found.is_async:
            outcome = _error(call, f"tool {call.tool_name!r} is async; this loop runs functions")
        else:
            context = ToolContext(
                chat_id=self.session.chat_id,
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
            )
            try:
                args, kwargs = found.call_args(found.parse_input(call.input), context)
                value = found.func(*args, **kwargs)
            except Exception as exc:
                logger.warning("client tool %s failed: %s", call.tool_name, exc)
                outcome = _error(call, str(exc) or type(exc).__name__)
            else:
                outcome = ToolOutcome(tool_call_id=call.tool_call_id, output=encode_output(value))
        if self.on_tool is not None:
            self.on_tool(call, outcome)
        return outcome

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self._interrupted = True

    def _woken(self, mask: int) -> None:
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(64):
                pass
        except BlockingIOError:
            pass


def _error(call: ToolCall, message: str) -> ToolOutcome:
    return ToolOutcome(tool_call_id=call.tool_call_id, output=message, is_error=True)


# -- the example program ----------------------------------------------------------------------


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather for a city."""
    return {"city": city, "temperature_c": 21, "conditions": "sunny"}


def _print_part(part: OutputPart) -> None:
    if isinstance(part, TextDelta):
        sys.stdout.write(part.delta)
        sys.stdout.flush()


def _print_transport_event(event: Any) -> None:
    if event.type != "ws:event":  # one per stream event: too many to print
        fields = {k: v for k, v in attrs.asdict(event).items() if k != "timestamp"}
        print(f"[{event.type}] {json.dumps(fields, default=str)}", file=sys.stderr)


def _summary(
    session: Session, result: TurnResult | None, tools: list[dict[str, Any]]
) -> dict[str, Any]:
    usage = attrs.asdict(result.usage) if result is not None else {}
    return {
        "chat_id": session.last_known_chat_id,
        "finish_reason": result.finish_reason if result is not None else None,
        "text": result.text if result is not None else None,
        "steps": len(result.steps) if result is not None else 0,
        "usage": {k: v for k, v in usage.items() if k != "raw" and v is not None},
        "tools": tools,
        "runtime_modules": sorted(m for m in sys.modules if m.partition(".")[0] in RUNTIMES),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.embedding.selectors_loop",
        description="Run one agent turn with a client tool on a selectors event loop.",
    )
    env = os.environ.get
    parser.add_argument("--url", default=env("CODER_URL"), help="deployment URL (CODER_URL)")
    parser.add_argument("--token", default=env("CODER_SESSION_TOKEN"), help="session token")
    parser.add_argument("--org", default=env("CODER_ORGANIZATION_ID"), help="organization id")
    parser.add_argument("--model", default=None, help="model hint (default: the server's)")
    parser.add_argument("--cafile", default=None, help="CA bundle to verify an https URL with")
    parser.add_argument("--verbose", action="store_true", help="print transport events")
    parser.add_argument("prompt", help="the user's prompt")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one streamed turn; print the text on stdout, then a one-line JSON summary on
    stderr. Exit status: 0, 1 on a library error, 130 after Ctrl-C."""
    args = build_parser().parse_args(argv)
    if not args.url:
        print("--url (or CODER_URL) is required", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    tools = tools_by_name([get_weather])
    ran: list[dict[str, Any]] = []

    def record(call: ToolCall, outcome: ToolOutcome) -> None:
        try:
            arguments: Any = json.loads(call.input or "{}")
        except ValueError:
            arguments = call.input
        ran.append(
            {
                "name": call.tool_name,
                "input": arguments,
                "output": outcome.output,
                "is_error": outcome.is_error,
            }
        )
        print(f"\n[tool] {call.tool_name}({call.input}) -> {outcome.output!r}", file=sys.stderr)

    dynamic_tools: tuple[DynamicTool, ...] = tuple(t.to_dynamic_tool() for t in tools.values())
    status, result = 0, None
    try:
        config = SessionConfig(
            base_url=args.url,
            token=args.token,
            organization_id=args.org,
            model=args.model,
            # attrs types converter=tuple as Iterable[_T_co] (a typed converter would fix it)
            tools=dynamic_tools,  # type: ignore[arg-type]
        )
        sink = TransportEventSink(
            _print_transport_event if args.verbose else None, wall_clock=time.time
        )
        session = Session(config, sink=sink)
        loop = SelectorsLoop(
            session,
            tools,
            tls_context=ssl.create_default_context(cafile=args.cafile),
            on_part=_print_part,
            on_tool=record,
        )
    except (CoderAgentError, OSError) as exc:  # a bad setting, an unreadable CA file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    loop.handle_sigint()
    try:
        result = loop.run(session.stream(args.prompt, now=_now()))
        print()
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the chat's run", file=sys.stderr)
        status = 130
    except CoderAgentError as exc:
        print(f"\nerror: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = 1
    finally:
        if not loop.finish_background():
            print("background work did not finish", file=sys.stderr)
        loop.close()
    print("summary: " + json.dumps(_summary(session, result, ran), default=str), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
