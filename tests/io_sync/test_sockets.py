"""The blocking driver's socket and worker I/O with small test machines over loopback
(``coder_proto._actions``): writes a slow peer cannot take at once are flushed when the socket
is writable, a burst is handed to the machines chunk by chunk as it is read, a peer's end and
its reset become ``connection_lost`` / ``connection_failed``, a refused connect fails,
connections the session opens between turns are connected by whoever drives next, and
background jobs that sleep are ticked by the worker thread (D22)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync._driver import _READ_CHUNK, Deadline, Driver, _Socket
from coder_proto import CoderAgentError
from coder_proto._actions import Action, CloseConnection, OpenConnection, RunInBackground, SendData
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._engine import CoreMachine
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_get_chat
from tests.machine_call import calls_of, machine_call


def start_on(driver: Driver, machine: Any, *, session: Any = None, tools: Any = None) -> Any:
    """``machine`` started on ``driver`` as a call (``tests.machine_call``); ``tools`` (a
    runner of the model's calls) decides the outcomes of its tool pauses."""
    invoke = None if tools is None else (lambda invocations: tools(calls_of(invocations)))
    return driver.call(
        machine_call(machine, session=session, tools=tools is not None), invoke=invoke
    )


def run_on(driver: Driver, machine: Any, *, deadline: Any = None, **kwargs: Any) -> Any:
    """``start_on``, then the result (by ``deadline``)."""
    return start_on(driver, machine, **kwargs).result(deadline)


class Pipe:
    """Opens one connection, writes ``payload`` once connected, collects what it reads, and
    finishes at the peer's end (the bytes) or a failure (raised as ``CoderAgentError``)."""

    def __init__(self, port: int, payload: bytes = b"") -> None:
        self.payload = payload
        self.received = bytearray()
        self.failure: str | None = None
        self.done = False
        self.cancelled = False
        self.outbox: list[Action] = [
            OpenConnection(conn_id=1, host="127.0.0.1", port=port, tls=False)
        ]

    def actions(self) -> list[Action]:
        out, self.outbox = self.outbox, []
        return out

    def next_deadline(self) -> float | None:
        return None

    def tick(self, now: float) -> None:
        pass

    def response_received(self, request_id: int, response: HttpResponse, now: float) -> None:
        pass

    def request_failed(self, request_id: int, message: str, now: float) -> None:
        pass

    def connection_made(self, conn_id: int, now: float) -> None:
        if self.payload:
            self.outbox.append(SendData(conn_id=1, data=self.payload))

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self.received += data

    def connection_lost(self, conn_id: int, now: float) -> None:
        self.done = True

    def connection_failed(self, conn_id: int, message: str, now: float) -> None:
        self.failure = message
        self.done = True

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        self.done = self.cancelled = True
        self.outbox.append(CloseConnection(conn_id=1))

    def result(self) -> bytes:
        if self.failure is not None:
            raise CoderAgentError(self.failure)
        return bytes(self.received)


@contextlib.contextmanager
def peer(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A one-connection loopback server running ``handle`` in a thread; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10.0)

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                handle(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        thread.join(10.0)
        listener.close()


def test_a_large_write_to_a_slow_reader_is_flushed_when_the_socket_is_writable() -> None:
    size = 16 * 1024 * 1024
    got: list[int] = []

    def slow_reader(conn: socket.socket) -> None:
        time.sleep(0.3)  # the client's send buffer fills up meanwhile
        total = 0
        while total < size and (chunk := conn.recv(1 << 20)):
            total += len(chunk)
        got.append(total)
        conn.sendall(b"ok")

    with peer(slow_reader) as port:
        driver = Driver(base_url="http://127.0.0.1:9", token=None)
        assert run_on(driver, Pipe(port, b"x" * size), deadline=Deadline(20)) == b"ok"
        driver.close()
    assert got == [size]


def test_the_peers_end_is_connection_lost_after_its_last_bytes() -> None:
    with peer(lambda conn: conn.sendall(b"hello" * 1000)) as port:
        driver = Driver(base_url="http://127.0.0.1:9", token=None)
        assert run_on(driver, Pipe(port)) == b"hello" * 1000
        assert driver.open_connections == 0
        driver.close()


def test_a_reset_connection_is_connection_failed() -> None:
    def reset(conn: socket.socket) -> None:
        conn.sendall(b"partial")
        time.sleep(0.1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with peer(reset) as port:
        driver = Driver(base_url="http://127.0.0.1:9", token=None)
        pipe = Pipe(port)
        with pytest.raises(CoderAgentError, match=r"[Rr]eset"):
            run_on(driver, pipe)
        assert bytes(pipe.received) == b"partial"
        driver.close()


def test_a_refused_connect_is_connection_failed() -> None:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    driver = Driver(base_url="http://127.0.0.1:9", token=None)
    with pytest.raises(CoderAgentError, match=r"Connection|refused"):
        run_on(driver, Pipe(port))
    assert driver.open_connections == 0
    driver.close()


def test_a_caller_deadline_closes_an_idle_connection() -> None:
    release = threading.Event()
    with peer(lambda conn: release.wait(5.0)) as port:
        driver = Driver(base_url="http://127.0.0.1:9", token=None)
        pipe = Pipe(port)
        with pytest.raises(TimeoutError):
            run_on(driver, pipe, deadline=Deadline(0.3))
        assert pipe.cancelled and driver.open_connections == 0
        release.set()
        driver.close()


class Opener(Pipe):
    """Asks for one connection in its session's scope and is done at once: what the
    session's own connect between turns (a redial) looks like to the driver."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.outbox = [OpenConnection(conn_id=99, host="127.0.0.1", port=port, tls=False)]
        self.done = True


def test_a_connection_the_session_opens_between_turns_is_connected_by_the_next_leader() -> None:
    """Nobody performs I/O between calls: a connect the session asked for then (a paused
    stream's redial, H.6) is performed by the next thread that waits on the sockets."""
    accepted = threading.Event()

    def note(conn: socket.socket) -> None:
        accepted.set()
        conn.recv(1)

    with peer(note) as port, peer(lambda conn: conn.sendall(b"bye")) as other:
        driver = Driver(base_url="http://127.0.0.1:9", token=None)
        session = Session(
            SessionConfig(base_url="http://127.0.0.1:9", token="t", organization_id="org")
        )
        start_on(driver, Opener(port), session=session)
        assert driver.open_connections == 1 and not accepted.is_set()
        assert run_on(driver, Pipe(other)) == b"bye"
        assert accepted.wait(5.0)
        driver.close()
        assert driver.open_connections == 0


class Sleeper(CoreMachine[str]):
    """A background job that sleeps, then sends one request (as a 409-retrying archive or a
    settle poll does)."""

    def __init__(self, selector: PrefixSelector, *, now: float, pause: float) -> None:
        super().__init__(selector)
        self.pause = pause
        self._start(now)

    def _run(self) -> Generator[None, None, str]:
        yield from self._sleep_until(self.now + self.pause)
        yield from self._rest(build_get_chat("missing"), lambda req, resp: resp.status)
        return "answered"


class Spawner(CoreMachine[None]):
    def __init__(self, job: Any) -> None:
        super().__init__(PrefixSelector())
        self._job = job
        self._start(time.monotonic())

    def _run(self) -> Generator[None, None, None]:
        self._emit(RunInBackground(job=self._job))
        return None
        yield  # pragma: no cover - a generator


def test_the_worker_ticks_a_sleeping_background_job_d22() -> None:
    with FakeCoderServer(chunk_delay=0.001) as server:
        driver = Driver(base_url=server.url, token=server.token)
        with driver.locked() as now:
            job = Sleeper(PrefixSelector("/api/v2/chats"), now=now, pause=0.3)
        started = time.monotonic()
        run_on(driver, Spawner(job))
        assert time.monotonic() - started < 0.2  # the caller never waits for it
        assert driver.background_jobs == 1 and driver.worker_alive
        assert driver.wait_background(5.0)
        assert time.monotonic() - started >= 0.3
        assert job.result() == "answered"
        assert server.counters.requests["get_chat"] == 1
        driver.close()
        assert not driver.worker_alive


def test_each_chunk_read_reaches_the_machines_before_the_next_is_read() -> None:
    # A burst the peer sent at once is handed on chunk by chunk: the driver never holds a
    # batch of chunks (up to a megabyte) while the machines wait for the first.
    reader, writer = socket.socketpair()
    with reader, writer:
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        writer.setblocking(False)
        sent = 0
        with contextlib.suppress(BlockingIOError):
            while sent < 4 * _READ_CHUNK:
                sent += writer.send(b"x" * _READ_CHUNK)
        assert sent > _READ_CHUNK  # more than one read's worth waits in the socket
        writer.close()
        reader.setblocking(False)
        fed: list[int] = []
        left_unread: list[int] = []

        def feed(data: bytes) -> None:
            fed.append(len(data))
            left_unread.append(len(reader.recv(sent, socket.MSG_PEEK)))

        assert _Socket(reader).read(feed) == (True, None)
    assert sum(fed) == sent
    assert left_unread[0] == sent - fed[0] > 0
