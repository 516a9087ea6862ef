"""An in-memory embedder of a ``coder_proto.Connection``: it performs the connection's commands
the way a real loop would (the contract of ``Connection``), for the tests of the connection
(``test_connection``) and of the machines it drives (``test_connection_machines``).

REST goes to ``http`` (``Respond`` and ``NetworkError`` are answered at once; anything else,
``Hang``, never), sockets connect at once to wsproto server ends (``FakeSocket``), and the clock
is a fake one. What a tool run does is the subclass's to say (``invoke_tools``): by default the
run stays pending.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from coder_proto import (
    CloseSocket,
    Conn,
    Connection,
    InvokeTools,
    OpenSocket,
    StartHttp,
    ToolBatch,
    WriteSocket,
)
from coder_proto._connection import ConnectionCommand
from coder_proto._rest.http import HttpRequest
from tests.core_driver import FakeSocket, NetworkError, Respond

#: Where the fake clock starts.
NOW = 100.0


class _Link:
    """What a ``FakeSocket`` reports to: the harness, for one ``Conn``."""

    def __init__(self, harness: ConnectionHarness, conn: Conn) -> None:
        self.harness = harness
        self.conn = conn

    def deliver_connection(self, conn_id: int, kind: str, payload: Any) -> None:
        harness, conn = self.harness, self.conn
        connection = harness.conn

        def deliver() -> None:
            if kind == "data":
                connection.socket_data(conn, payload, now=harness.now)
            elif kind == "lost":
                connection.socket_closed(conn, now=harness.now)
            else:
                connection.socket_closed(conn, payload, now=harness.now)

        harness.inbox.append(deliver)


class ConnectionHarness:
    """Performs ``conn``'s commands in memory; ``pump`` runs them (and the inputs they lead
    to, one at a time) until none is left."""

    def __init__(self, conn: Connection, http: Callable[[HttpRequest], Any]) -> None:
        self.conn = conn
        self.http = http
        self.now = NOW
        self.performed: list[ConnectionCommand] = []
        self.sockets: list[FakeSocket] = []
        self.inbox: collections.deque[Callable[[], None]] = collections.deque()

    def pump(self) -> None:
        while True:
            out = self.conn.commands()
            for command in out:
                self._perform(command)
            if not out and not self.inbox:
                return
            if self.inbox:
                self.inbox.popleft()()

    def _perform(self, command: ConnectionCommand) -> None:
        self.performed.append(command)
        c = self.conn
        if isinstance(command, OpenSocket):
            conn = command.conn
            sock = FakeSocket(_Link(self, conn), conn.conn_id, len(self.sockets), auto_accept=True)  # type: ignore[arg-type]
            self.sockets.append(sock)
            conn.io = sock
            self.inbox.append(lambda: c.socket_made(conn, now=self.now))
        elif isinstance(command, WriteSocket):
            sock = command.conn.io
            if sock.open:
                sock.from_client(command.data)
        elif isinstance(command, CloseSocket):
            command.conn.io.closed_by_client = True
        elif isinstance(command, StartHttp):
            call = command.call
            reply = self.http(call.request)
            if isinstance(reply, Respond):
                answer = reply.response()
                self.inbox.append(
                    lambda: c.http_finished(
                        call,
                        status=answer.status,
                        headers=answer.headers,
                        body=answer.body,
                        now=self.now,
                    )
                )
            elif isinstance(reply, NetworkError):
                self.inbox.append(lambda: c.http_finished(call, error=reply.message, now=self.now))
        elif isinstance(command, InvokeTools):
            self.invoke_tools(command.run)

    def invoke_tools(self, run: ToolBatch) -> None:
        """A tool run the connection hands over: left pending here."""

    def send(self, *events: dict[str, Any]) -> None:
        """The server writes ``events`` on the newest socket; the harness takes them in."""
        self.sockets[-1].send_events(events)
        self.pump()

    def of(self, kind: type) -> list[Any]:
        """The commands of type ``kind`` performed so far."""
        return [c for c in self.performed if isinstance(c, kind)]
