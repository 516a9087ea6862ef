"""The trio driver's stream sockets over loopback (wire 1.1; D12): TLS with a CA bundle for REST
and the stream socket, verification on by default for both, a refused stream socket redialed,
and a paused stream closed when the driver closes. What every runtime shares (turns, tools,
redials, cancellation) is ``tests/integration``.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from coder_integrations.fake_server import FakeCoderServer
from coder_io_trio._runtime import Driver, _shutdown_write, _Socket, _Task, transport_sink
from coder_proto._actions import ToolOutcome
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._errors import CoderAgentError, CoderNetworkError
from coder_proto._jobs.operations import rest_job
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._stream.watch import WatchBackoff, WatchMachine
from coder_proto._wire.chats import DynamicTool
from coder_proto.fake import CallClientTool, Say, Script
from tests.machine_call import calls_of, machine_call

WEATHER = DynamicTool(
    name="get_weather",
    description="Get the weather.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def start_on(driver: Driver, machine: Any, *, session: Any = None, tools: Any = None) -> Any:
    """``machine`` started on ``driver`` as a call (``tests.machine_call``); ``tools`` (a
    runner of the model's calls) decides the outcomes of its tool pauses."""
    invoke = None
    if tools is not None:

        async def invoke(invocations: Any) -> Any:
            return await tools(calls_of(invocations))

    return driver.call(
        machine_call(machine, session=session, tools=tools is not None), invoke=invoke
    )


async def run_on(driver: Driver, machine: Any, **kwargs: Any) -> Any:
    """``start_on``, then the result."""
    return await start_on(driver, machine, **kwargs).result()


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as fake:
        fake.config.scripts.add(
            "weather",
            Script(
                [
                    CallClientTool(name="get_weather", args={"city": "Paris"}),
                    Say("It is {tool_result}."),
                ]
            ),
        )
        yield fake


def session_for(base_url: str, server: FakeCoderServer) -> Session:
    config = SessionConfig(
        base_url=base_url,
        token=server.token,
        organization_id=server.organization_id,
        tools=[WEATHER],
    )
    return Session(config, selector=PrefixSelector())


async def weather_tool(calls: tuple[Any, ...]) -> list[ToolOutcome]:
    return [ToolOutcome(tool_call_id=c.tool_call_id, output={"temp_c": 21}) for c in calls]


async def until(predicate: Any, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.005)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl makes the test certificate: tests/setup-machine installs it")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


class TlsProxy:
    """TLS on loopback in front of the fake server (which speaks plain HTTP), in threads of
    its own; ``handshakes`` counts the TLS handshakes that succeeded."""

    def __init__(self, target: FakeCoderServer, cert: Path, key: Path) -> None:
        self.target = target
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.handshakes = 0
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> TlsProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.listener.close()
        for thread in self._threads:
            thread.join(5.0)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            self._spawn(self._serve, raw)

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        self.handshakes += 1
        upstream = socket.create_connection((self.target.host, self.target.port))
        self._spawn(self._pipe, upstream, client)
        self._pipe(client, upstream)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            # Shut both down first: that wakes the other direction's thread from its recv.
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def test_tls_with_a_ca_bundle_runs_rest_and_the_stream_socket(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate

    async def main(proxy: TlsProxy) -> Any:
        driver = Driver(base_url=proxy.url, token=server.token, verify=str(cert))
        session = session_for(proxy.url, server)
        result = await run_on(
            driver,
            session.generate("weather in Paris?", now=time.monotonic()),
            session=session,
            tools=weather_tool,
        )
        await driver.aclose()
        return result, session.chat_id

    with TlsProxy(server, cert, key) as proxy:
        result, chat_id = trio.run(main, proxy)
    assert result.text == 'It is {"temp_c":21}.'
    assert server.counters.stream_dials[chat_id] == 1 and proxy.handshakes >= 2
    assert server.wait_idle(5.0)


def test_tls_verification_is_on_by_default_for_rest_and_the_stream_socket(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate

    async def main(proxy: TlsProxy) -> CoderNetworkError:
        driver = Driver(base_url=proxy.url, token=server.token)
        with pytest.raises(CoderNetworkError) as info:
            await run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
        # The stream socket verifies too: the watch never gets past the TLS handshake.
        watch = WatchMachine(
            PrefixSelector("/api/v2/chats"),
            base_url=proxy.url,
            token=server.token,
            now=time.monotonic(),
            backoff=WatchBackoff(initial=0.01, cap=0.02),
        )
        run = start_on(driver, watch)
        await until(lambda: watch.attempt >= 3)
        run.cancel()
        assert driver.open_connections == 0
        await driver.aclose()
        return info.value

    with TlsProxy(server, cert, key) as proxy:
        error = trio.run(main, proxy)
        assert proxy.handshakes == 0
    assert error.path == "/api/v2/chats"
    assert server.counters.watch_dials == 0


def test_a_refused_stream_socket_is_redialed_with_backoff() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}"  # nothing listens there any more

    async def main() -> int:
        driver = Driver(base_url=base_url, token="t")
        watch = WatchMachine(
            PrefixSelector("/api/v2/chats"),
            base_url=base_url,
            token="t",
            now=time.monotonic(),
            backoff=WatchBackoff(initial=0.01, cap=0.02),
        )
        run = start_on(driver, watch)
        await until(lambda: watch.attempt >= 3)
        run.cancel()
        await driver.aclose()
        return driver.open_connections

    assert trio.run(main) == 0


def test_closing_the_driver_closes_a_paused_stream(server: FakeCoderServer) -> None:
    async def main() -> None:
        driver = Driver(base_url=server.url, token=server.token)
        session = session_for(server.url, server)
        paused = await run_on(
            driver, session.segment("weather?", now=time.monotonic()), session=session
        )
        assert paused.finish_reason == "tool-calls" and driver.open_connections == 1
        await driver.aclose()
        assert driver.open_connections == 0
        with pytest.raises(CoderAgentError, match="closed"):
            start_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))

    trio.run(main)
    assert server.wait_idle(5.0)


def test_an_async_transport_event_callback_is_run_in_a_task_and_its_errors_swallowed(
    server: FakeCoderServer,
) -> None:
    got: list[str] = []

    async def callback(event: Any) -> None:
        await trio.sleep(0)
        got.append(event.type)
        raise RuntimeError("handler bug")

    async def main() -> None:
        driver = Driver(base_url=server.url, token=server.token, sink=transport_sink(callback))
        await run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
        await until(lambda: len(got) == 2)
        await driver.aclose()

    trio.run(main)
    assert got == ["http:request", "http:response"]


def test_a_socket_without_a_reader_or_already_closed_is_left_alone() -> None:
    # A connection dropped before its reader started, and a socket closed already (half-closing
    # it fails, and the failure is ignored): neither raises.
    _Socket(Driver(base_url="http://127.0.0.1:1", token="t")).cancel()
    left, right = socket.socketpair()
    right.close()
    left.close()
    _shutdown_write(left)
    assert repr(_Task("_write")) == "<task _write>"


def test_a_reader_cancelled_between_two_reads_reads_no_more_and_ends() -> None:
    # The host cancels the socket's reader from its handler of the first bytes (the reader is
    # between two reads then, not waiting): nothing more is reported, the reader ends, the
    # socket is closed, and cancelling the ended reader again does nothing.
    from coder_io_trio._runtime import TRIO
    from coder_proto._actions import OpenConnection
    from coder_proto._connection import Conn

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    reports: list[object] = []
    ended: list[Any] = []

    class Host:
        ssl = ssl.create_default_context()

        def adopt(self, task: Any) -> Any:
            self.reader = task
            return ended.append

        def socket_made(self, conn: Any) -> None:
            reports.append("made")

        def socket_data(self, conn: Any, data: bytes) -> None:
            reports.append(data)
            self.reader.cancel()

        def socket_lost(self, conn: Any) -> None:  # pragma: no cover - not expected
            reports.append("lost")

        def socket_failed(self, conn: Any, error: BaseException) -> None:  # pragma: no cover
            reports.append(error)

    async def main() -> tuple[bytes, Any]:
        host = Host()
        conn = Conn(None, OpenConnection(conn_id=1, host="127.0.0.1", port=port, tls=False))  # type: ignore[arg-type]
        TRIO.open_socket(host, conn)  # type: ignore[arg-type]
        peer, _ = await trio.to_thread.run_sync(listener.accept)
        with peer:
            peer.sendall(b"first")
            await until(lambda: bool(ended))
            peer.sendall(b"second")  # not read: the reader has ended
            await trio.sleep(0.02)
            host.reader.cancel()
            peer.settimeout(5)
            return peer.recv(10), host.reader

    try:
        closed, reader = trio.run(main)
    finally:
        listener.close()
    assert reports == ["made", b"first"]
    assert closed == b""  # our end closed the connection
    assert ended == [reader] and repr(reader) == "<task _socket>"
