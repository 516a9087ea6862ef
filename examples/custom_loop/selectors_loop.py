"""Embedding the core in your own event loop: one agent turn on ``selectors``, sockets and h11.

This program is the template for code that already owns its loop (gevent, Twisted, a game
loop, an embedded interpreter). It drives one ``coder_proto.Connection`` with the standard
library's ``selectors``, ``socket`` and ``ssl`` and with h11 for HTTP/1.1. It imports nothing
else but the public names of ``coder_proto``: no asyncio, trio or httpx, which is the proof
that the core does no I/O of its own. Run it against the fake server
(``coder-agent fake-server`` prints the three values)::

    python examples/custom_loop/selectors_loop.py --url URL --token TOKEN --org ORG \\
        "What is the weather in Paris?"

How the core is driven (read ``SelectorsLoop`` from ``run`` down):

1. the program starts a task on the connection (``start_turn``) and performs every command
   ``commands()`` hands out: ``OpenSocket`` / ``WriteSocket`` / ``CloseSocket`` on a
   non-blocking socket, ``StartHttp`` as an h11 exchange on a socket of its own,
   ``InvokeTools`` by calling each invocation's function inline, ``ApplyStore`` (only a
   durable job started with ``start_durable`` asks for one) by calling its store inline;
2. every outcome goes back through the connection's input methods with
   ``now = time.monotonic()``: ``socket_made`` / ``socket_data`` / ``socket_closed``,
   ``call.status_received`` / ``http_finished``, ``tool_finished``, ``store_finished``;
3. ``next_deadline()`` is the ``select`` timeout; once it passes the loop calls ``tick``.

The loop decides nothing: which machine hears a socket's bytes, which tool calls to run
(duplicates, unknown tools and invalid input are answered by the core), redials after a dropped
stream, retries, status checks and timeouts are the connection's. Ctrl-C cancels the task: the
connection interrupts the server's run in the background, which the loop finishes (bounded)
before the program exits with status 130. Its simplifications, each a place to do better in a
production loop:

* DNS resolution (``getaddrinfo``) blocks; it is instant for IP literals and ``localhost``.
  Resolve in a worker thread if the loop must never block.
* Every REST request gets its own connection (``Connection: close``): no pool to manage, one
  TCP (and TLS) handshake per call.
* Client tools run inline and block the loop while they run; sockets are read again when they
  return (the core keeps its state meanwhile). Run a slow tool in a worker thread and report
  ``tool_finished`` when it finishes, waking ``select`` with a socket pair as done for signals.
  Async tools are answered with an error.
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
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import h11

from coder_proto import (
    ApplyStore,
    CancelHttp,
    CloseSocket,
    CoderAgentError,
    Conn,
    Connection,
    GenerateResult,
    HttpExchange,
    InvokeTools,
    OpenSocket,
    OutputPart,
    StartHttp,
    StoreRequest,
    Task,
    TextDelta,
    ToolBatch,
    ToolInvocation,
    TransportEvent,
    WriteSocket,
    tool,
)

__all__ = ["Channel", "H11Exchange", "SelectorsLoop", "get_weather", "main"]

logger = logging.getLogger("custom_loop")

READ_SIZE = 65_536
#: The most the loop waits for background work at exit. The work bounds itself (10 s for
#: interrupts); this only guards against one that never finishes.
BACKGROUND_LIMIT = 15.0
#: The runtimes this example must never import (printed in the summary at exit).
RUNTIMES = frozenset({"asyncio", "trio", "httpx"})


def _now() -> float:
    return time.monotonic()


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


class H11Exchange:
    """One ``StartHttp``: its own connection, the request written with h11, the response
    parsed with h11 and reported to the connection (any status: the core classifies it)."""

    def __init__(
        self, loop: SelectorsLoop, call: HttpExchange, tls_context: ssl.SSLContext
    ) -> None:
        self._loop = loop
        self.call = call
        self._h11 = h11.Connection(h11.CLIENT)
        self._response: h11.Response | None = None
        self._body = bytearray()
        self.finished = False
        self.channel: Channel | None = None
        url = urlsplit(call.url)
        target = url.path + (f"?{url.query}" if url.query else "")
        headers = [("Host", url.netloc), ("Connection", "close"), *call.headers]
        if call.body is not None or call.method not in ("GET", "HEAD"):
            headers.append(("Content-Length", str(len(call.body or b""))))
        try:
            out = self._h11.send(h11.Request(method=call.method, target=target, headers=headers))
            if call.body:
                out = (out or b"") + (self._h11.send(h11.Data(data=call.body)) or b"")
            out = (out or b"") + (self._h11.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:
            message = f"invalid request: {exc}"
            loop.soon(lambda: self._fail(message))
            return
        host = url.hostname or "localhost"
        tls = url.scheme == "https"
        self.channel = Channel(
            loop,
            host,
            url.port or (443 if tls else 80),
            tls_context=tls_context if tls else None,
            server_hostname=host,
            on_open=lambda: self._write(out),
            on_data=self._received,
            on_end=self._ended,
        )

    def cancel(self) -> None:
        """``CancelHttp``: drop the connection; nothing is reported."""
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
        connection = self._loop.connection
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
                self.call.status_received(event.status_code, now=_now())
            elif isinstance(event, h11.Data):
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage) and self._response is not None:
                response = self._response
                self._close()
                connection.http_finished(
                    self.call,
                    status=response.status_code,
                    headers=[
                        (k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers
                    ],
                    body=bytes(self._body),
                    reason=response.reason.decode("latin-1"),
                    now=_now(),
                )
            elif isinstance(event, h11.ConnectionClosed):
                self._fail("the connection closed before the response was complete")

    def _fail(self, message: str) -> None:
        if self.finished:
            return
        self._close()
        self._loop.connection.http_finished(self.call, error=message, now=_now())

    def _close(self) -> None:
        self.finished = True
        if self.channel is not None:
            self.channel.close()


# -- the loop ---------------------------------------------------------------------------------


class SelectorsLoop:
    """Performs the commands of one ``Connection`` on a ``selectors`` selector (see the
    module docstring). ``on_part`` receives a streamed task's output parts live; ``on_tool``
    hears of every tool call the loop ran, with its value or exception."""

    def __init__(
        self,
        connection: Connection,
        *,
        tls_context: ssl.SSLContext | None = None,
        on_part: Callable[[OutputPart], None] | None = None,
        on_tool: Callable[[ToolInvocation, Any, BaseException | None], None] | None = None,
    ) -> None:
        self.connection = connection
        self.selector = selectors.DefaultSelector()
        self.tls_context = tls_context if tls_context is not None else ssl.create_default_context()
        self.on_part = on_part
        self.on_tool = on_tool
        self.foreground: Task | None = None
        self._soon: deque[Callable[[], None]] = deque()
        self._interrupted = False
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._old_sigint: Any = None
        self._old_wakeup_fd = -1

    # -- running tasks -----------------------------------------------------------------------

    def run(self, task: Task) -> Any:
        """Drive ``task`` to completion and return its result or raise its typed error. On
        Ctrl-C the task is cancelled and ``KeyboardInterrupt`` propagates at once; the
        background work the cancellation started is left to ``finish_background``."""
        self.foreground = task
        try:
            while True:
                self._pump()
                if task.done:
                    return task.result()
                if self._interrupted:
                    raise KeyboardInterrupt
                self._wait(None)
        except KeyboardInterrupt as exc:
            task.cancel(exc, now=_now())
            self._pump()
            raise

    def finish_background(self, limit: float = BACKGROUND_LIMIT) -> bool:
        """Drive the background work (an interrupt of the server's run) until it is done, at
        most ``limit`` seconds. Another Ctrl-C stops the wait. Returns whether it finished."""
        end = _now() + limit
        self._interrupted = False
        while True:
            self._pump()
            if not self.connection.stats.background_jobs:
                return True
            if self._interrupted or _now() >= end:
                return False
            self._wait(end)

    def close(self) -> None:
        """Shut the connection down (a paused stream is closed cleanly), close every socket
        and restore signal handling."""
        self.connection.close(now=_now())
        self._pump()
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
        in the middle of an input; the wake-up socket makes ``select`` return at once. Call
        from the main thread."""
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, self._woken)
        self._old_wakeup_fd = signal.set_wakeup_fd(self._wake_w.fileno())
        self._old_sigint = signal.signal(signal.SIGINT, self._on_sigint)

    def soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop's next pass (an outcome known while performing)."""
        self._soon.append(callback)

    # -- the heart: perform commands, report outcomes, wait -------------------------------------

    def _pump(self) -> None:
        """Report queued outcomes, tick an expired deadline and perform every command, until
        nothing moves."""
        connection = self.connection
        while True:
            while self._soon:
                self._soon.popleft()()
            deadline = connection.next_deadline()
            if deadline is not None and deadline <= _now():
                connection.tick(now=_now())
            commands = connection.commands()
            for command in commands:
                self._perform(command)
            task = self.foreground
            if task is not None and self.on_part is not None:
                for part in task.take_parts():
                    self.on_part(part)
            if not commands and not self._soon:
                return

    def _wait(self, until: float | None) -> None:
        """Wait for I/O, at most until the connection's next deadline (or ``until``)."""
        deadlines = [d for d in (self.connection.next_deadline(), until) if d is not None]
        if not deadlines and not self.selector.get_map():
            raise RuntimeError("the connection waits for nothing: no socket or deadline")
        timeout = max(0.0, min(deadlines) - _now()) if deadlines else None
        for key, mask in self.selector.select(timeout):
            key.data(mask)

    def _perform(self, command: Any) -> None:
        if isinstance(command, OpenSocket):
            self._open(command.conn)
        elif isinstance(command, WriteSocket):
            channel = command.conn.io
            if channel is not None:
                channel.write(command.data)
        elif isinstance(command, CloseSocket):
            channel = command.conn.io
            if channel is not None:
                channel.close()
        elif isinstance(command, StartHttp):
            command.call.io = H11Exchange(self, command.call, self.tls_context)
        elif isinstance(command, CancelHttp):
            exchange = command.call.io
            if exchange is not None:
                exchange.cancel()
        elif isinstance(command, InvokeTools):
            run = command.run
            for invocation in run.invocations:
                self._invoke(run, invocation)
        elif isinstance(command, ApplyStore):
            self._apply_store(command.call)
        # CancelTools: the tools ran inline, nothing is left to stop. TaskMoved: ``run``
        # checks its task after every pass.

    def _open(self, conn: Conn) -> None:
        connection = self.connection
        conn.io = Channel(
            self,
            conn.host,
            conn.port,
            tls_context=self.tls_context if conn.tls else None,
            server_hostname=conn.server_hostname,
            on_open=lambda: connection.socket_made(conn, now=_now()),
            on_data=lambda data: connection.socket_data(conn, data, now=_now()),
            on_end=lambda error: self._ended(conn, error),
        )

    def _ended(self, conn: Conn, error: str | None) -> None:
        if error is None:
            self.connection.socket_closed(conn, now=_now())
        else:
            self.connection.socket_closed(conn, error, now=_now())

    def _invoke(self, run: ToolBatch, invocation: ToolInvocation) -> None:
        """Call one tool function inline; its value or exception goes back on the next pass
        (a Ctrl-C while it ran cancels the task instead)."""
        connection = self.connection
        error: BaseException | None = None
        value: Any = None
        if invocation.is_async:
            error = TypeError(f"tool {invocation.tool.name!r} is async; this loop runs functions")
        else:
            try:
                value = invocation.call()
            except Exception as exc:
                error = exc
        if self.on_tool is not None:
            self.on_tool(invocation, value, error)
        self.soon(
            lambda: connection.tool_finished(run, invocation, value=value, error=error, now=_now())
        )

    def _apply_store(self, call: StoreRequest) -> None:
        """Perform a durable job's store call inline (a blocking ``DurableStore``, such as
        ``SQLiteStore``; the job's ``store`` is what performs it); the outcome goes back on the
        next pass. A store call is never abandoned halfway."""
        connection = self.connection
        try:
            value = call.runner(call.op)
        except Exception as exc:
            failure = exc
            self.soon(lambda: connection.store_finished(call, error=failure, now=_now()))
        else:
            self.soon(lambda: connection.store_finished(call, value=value, now=_now()))

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self._interrupted = True

    def _woken(self, mask: int) -> None:
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(64):
                pass
        except BlockingIOError:
            pass


# -- the example program ----------------------------------------------------------------------


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather for a city."""
    return {"city": city, "temperature_c": 21, "conditions": "sunny"}


def _print_part(part: OutputPart) -> None:
    if isinstance(part, TextDelta):
        sys.stdout.write(part.delta)
        sys.stdout.flush()


def _fields(value: object, *names: str) -> dict[str, Any]:
    """The named attributes of ``value`` that are set."""
    found = {name: getattr(value, name, None) for name in names}
    return {name: field for name, field in found.items() if field is not None}


def _print_transport_event(event: TransportEvent) -> None:
    if event.type != "ws:event":  # one per stream event: too many to print
        names = [n for n in getattr(type(event), "__slots__", ()) if not n.startswith("_")]
        fields = _fields(event, *(n for n in names if n != "timestamp"))
        print(f"[{event.type}] {json.dumps(fields, default=str)}", file=sys.stderr)


def _summary(
    chat_id: str | None, result: GenerateResult | None, tools: list[dict[str, Any]]
) -> dict[str, Any]:
    usage: dict[str, Any] = {}
    if result is not None:
        usage = _fields(
            result.usage,
            "input_tokens",
            "no_cache_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "output_tokens",
            "reasoning_tokens",
            "text_tokens",
        )
    return {
        "chat_id": chat_id,
        "finish_reason": result.finish_reason if result is not None else None,
        "text": result.text if result is not None else None,
        "steps": len(result.steps) if result is not None else 0,
        "usage": usage,
        "tools": tools,
        "runtime_modules": sorted(m for m in sys.modules if m.partition(".")[0] in RUNTIMES),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python examples/custom_loop/selectors_loop.py",
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
    stderr. Exit status: 0, 1 on a library error, 2 on bad settings, 130 after Ctrl-C."""
    args = build_parser().parse_args(argv)
    if not args.url:
        print("--url (or CODER_URL) is required", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    ran: list[dict[str, Any]] = []

    def record(invocation: ToolInvocation, value: Any, error: BaseException | None) -> None:
        call = invocation.call_part
        try:
            arguments: Any = json.loads(call.input or "{}")
        except ValueError:
            arguments = call.input
        output = value if error is None else f"{type(error).__name__}: {error}"
        ran.append(
            {"name": call.tool_name, "input": arguments, "output": output, "is_error": bool(error)}
        )
        print(f"\n[tool] {call.tool_name}({call.input}) -> {output!r}", file=sys.stderr)

    status, result = 0, None
    try:
        connection = Connection(
            base_url=args.url,
            token=args.token,
            on_event=_print_transport_event if args.verbose else None,
            wall_clock=time.time,
        )
        agent = connection.agent(organization_id=args.org, model=args.model, tools=[get_weather])
        loop = SelectorsLoop(
            connection,
            tls_context=ssl.create_default_context(cafile=args.cafile),
            on_part=_print_part,
            on_tool=record,
        )
    except (CoderAgentError, OSError) as exc:  # a bad setting, an unreadable CA file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    loop.handle_sigint()
    try:
        task = connection.start_turn(agent, args.prompt, mode="stream", now=_now())
        result = loop.run(task)
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
    chat_id = agent.session.chat_id or agent.session.last_known_chat_id
    print("summary: " + json.dumps(_summary(chat_id, result, ran), default=str), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
