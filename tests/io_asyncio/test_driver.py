"""The asyncio driver over loopback (docs/architecture.md "The adapters"; wire 1.1, 11; D12, D22-D24):
REST through httpx with ``http:*`` events, stream sockets, client tools, the session's
between-turn reading, background interrupts, cancellation that leaves no socket or task, and
TLS verification against a self-signed loopback server.

The fake server runs in its own thread (``with FakeCoderServer()``), so the test's event loop
holds only the client's tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio._runtime import Driver, ssl_context, transport_sink
from coder_proto._actions import ToolOutcome
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._errors import CoderAgentError, CoderNetworkError
from coder_proto._jobs.operations import RestJob, rest_job
from coder_proto._outputs import TextDelta
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_list_chats, parse_list_chats
from coder_proto._stream.watch import WatchBackoff, WatchMachine
from coder_proto._transport_events import TransportEventSink
from coder_proto._wire.chats import DynamicTool
from coder_proto.fake import CallClientTool, Say, Script, Wait
from tests.machine_call import AgentOf, calls_of, machine_call

WEATHER = DynamicTool(
    name="get_weather",
    description="Get the weather.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
TOOL_SCRIPT = Script(
    [CallClientTool(name="get_weather", args={"city": "Paris"}), Say("It is {tool_result}.")]
)
SLOW_SCRIPT = Script([Say("partial "), Wait(30.0), Say("rest")])


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


def arun(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            async with asyncio.timeout(60):
                await fn(*args, **kwargs)

        asyncio.run(main())

    return wrapper


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as fake:
        fake.config.scripts.add("weather", TOOL_SCRIPT)
        fake.config.scripts.add("slow", SLOW_SCRIPT)
        yield fake


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.sink = TransportEventSink(self.events.append, wall_clock=time.time)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def leftover_tasks() -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


async def settle_tasks() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


def session_for(server: FakeCoderServer, selector: PrefixSelector, sink: Any = None) -> Session:
    config = SessionConfig(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        tools=[WEATHER],
    )
    return Session(config, selector=selector, sink=sink)


async def weather_tool(calls: tuple[Any, ...]) -> list[ToolOutcome]:
    return [ToolOutcome(tool_call_id=c.tool_call_id, output={"temp_c": 21}) for c in calls]


# -- REST (wire 1.1, 11; D23, D24) ----------------------------------------------------------------


@arun
async def test_rest_sends_the_token_and_reports_http_events_d24(server: FakeCoderServer) -> None:
    rec = Recorder()
    driver = Driver(base_url=server.url, token=server.token, sink=rec.sink)
    selector = PrefixSelector()
    before = time.time()
    assert (
        await run_on(driver, RestJob(selector, build_list_chats(), parse_list_chats, now=0.0)) == ()
    )
    await run_on(driver, rest_job(selector, "list_chats", now=time.monotonic()))
    await driver.aclose()
    request, response, request2, response2 = rec.events
    assert (request.type, request.id, request.op, request.method, request.path) == (
        "http:request",
        1,
        "list_chats",
        "GET",
        "/api/v2/chats",
    )
    assert (response.type, response.id, response.status, response.ok) == (
        "http:response",
        1,
        200,
        True,
    )
    assert response.duration >= 0 and before <= request.timestamp <= time.time()
    assert (request2.id, response2.id) == (2, 2)  # ids count up per client
    assert server.token not in repr(rec.events)


@arun
async def test_created_http_client_has_no_read_timeout_and_no_accept_header_d23(
    server: FakeCoderServer,
) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    timeout = driver.http_client.timeout
    assert (timeout.read, timeout.write, timeout.pool, timeout.connect) == (None, None, None, 30.0)
    assert "accept" not in driver.http_client.headers
    await driver.aclose()
    assert driver.http_client.is_closed


@arun
async def test_a_user_client_keeps_its_headers_and_stays_open(server: FakeCoderServer) -> None:
    seen: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        seen.append(request)

    user = httpx.AsyncClient(headers={"X-Trace": "abc"}, event_hooks={"request": [record]})
    driver = Driver(base_url=server.url, token=server.token, http_client=user)
    await run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
    await driver.aclose()
    assert not user.is_closed
    (sent,) = seen
    assert sent.headers["X-Trace"] == "abc"
    assert sent.headers["Coder-Session-Token"] == server.token
    assert "content-type" not in sent.headers  # no body, no Content-Type (wire 1.1)
    await user.aclose()


@arun
async def test_a_user_client_timeout_surfaces_as_a_network_error_d23(
    server: FakeCoderServer,
) -> None:
    server.faults.delay_requests("list_chats", 2.0)
    rec = Recorder()
    user = httpx.AsyncClient(timeout=0.05)
    driver = Driver(base_url=server.url, token=server.token, http_client=user, sink=rec.sink)
    with pytest.raises(CoderNetworkError) as info:
        await run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
    assert info.value.retryable and "ReadTimeout" in str(info.value)
    assert rec.types() == ["http:request", "http:error"]
    assert "ReadTimeout" in rec.events[1].message
    await driver.aclose()
    await user.aclose()


@arun
async def test_a_refused_connection_is_a_network_error_without_the_token() -> None:
    with contextlib.closing(__import__("socket").socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rec = Recorder()
    token = "very-secret-token-value"
    driver = Driver(base_url=f"http://127.0.0.1:{port}", token=token, sink=rec.sink)
    with pytest.raises(CoderNetworkError) as info:
        await run_on(driver, rest_job(PrefixSelector(), "get_chat", "c1", now=time.monotonic()))
    await driver.aclose()
    assert info.value.path == "/api/v2/chats/c1"
    assert rec.types() == ["http:request", "http:error"]
    assert token not in repr(rec.events) and token not in str(info.value)


@arun
async def test_an_async_transport_event_callback_is_scheduled_and_its_errors_swallowed(
    server: FakeCoderServer,
) -> None:
    got: list[str] = []

    async def callback(event: Any) -> None:
        got.append(event.type)
        raise RuntimeError("handler bug")

    driver = Driver(base_url=server.url, token=server.token, sink=transport_sink(callback))
    await run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
    await settle_tasks()
    await driver.aclose()
    assert got == ["http:request", "http:response"]


# -- cancellation (D22) ---------------------------------------------------------------------------


@arun
async def test_a_caller_deadline_on_a_stuck_request_is_builtin_timeout_error_d22(
    server: FakeCoderServer,
) -> None:
    # The fake holds its answer for 1 s, then finds the connection gone and closes its end.
    server.faults.delay_requests("list_chats", 1.0)
    rec = Recorder()
    driver = Driver(base_url=server.url, token=server.token, sink=rec.sink)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
    await settle_tasks()
    assert rec.types() == ["http:request", "http:error"]
    assert rec.events[1].message == "request cancelled"
    assert leftover_tasks() == set()
    await wait_for(lambda: server.open_connections == 0)  # before the driver closes
    await driver.aclose()


@arun
async def test_task_cancellation_propagates_unwrapped_d22(server: FakeCoderServer) -> None:
    server.faults.delay_requests("get_chat", 1.0)
    driver = Driver(base_url=server.url, token=server.token)
    task = asyncio.create_task(
        run_on(driver, rest_job(PrefixSelector(), "get_chat", "c", now=time.monotonic()))
    )
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await settle_tasks()
    assert leftover_tasks() == set()
    await wait_for(lambda: server.open_connections == 0)
    await driver.aclose()


@arun
async def test_cancelling_a_stuck_stream_interrupts_in_the_background_and_leaks_nothing(
    server: FakeCoderServer,
) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    selector = PrefixSelector()
    session = session_for(server, selector)
    turn = session.stream("slow please", now=time.monotonic())
    run = start_on(driver, turn, session=session)
    texts: list[str] = []
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):
            async for part in run.parts():
                if isinstance(part, TextDelta):
                    texts.append(part.delta)
    assert "".join(texts) == "partial "
    assert turn.done and turn.cancelled
    assert driver.open_connections == 0  # the stream socket closed at once
    assert await driver.wait_background(5.0)
    assert server.counters.requests["interrupt_chat"] == 1
    await settle_tasks()
    assert leftover_tasks() == set()
    await driver.aclose()
    await wait_for(lambda: server.open_connections == 0)


@arun
async def test_re_raising_cancellation_never_waits_for_the_background_interrupt_d22(
    server: FakeCoderServer,
) -> None:
    server.faults.delay_requests("interrupt_chat", 2.0)
    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await run_on(
                driver, session.generate("slow please", now=time.monotonic()), session=session
            )
    assert time.monotonic() - started < 5.0
    assert driver.background_jobs == 1
    assert not await driver.wait_background(0.05)
    await driver.aclose(background_timeout=0.1)
    assert driver.background_jobs == 0
    await wait_for(lambda: server.open_connections == 0)


@arun
async def test_cancelling_during_a_tool_run_cancels_the_tool_and_stops_the_chat_d22(
    server: FakeCoderServer,
) -> None:
    tool_cancelled = asyncio.Event()

    async def slow_tool(calls: tuple[Any, ...]) -> list[ToolOutcome]:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return []

    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    turn = session.generate("weather?", now=time.monotonic())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await run_on(driver, turn, session=session, tools=slow_tool)
    await settle_tasks()
    assert tool_cancelled.is_set()
    assert driver.open_connections == 0  # the paused stream closed with the turn
    assert await driver.wait_background(5.0)
    assert server.counters.requests["interrupt_chat"] >= 1
    assert server.counters.requests["submit_tool_results"] == 0
    await settle_tasks()
    assert leftover_tasks() == set()
    await driver.aclose()
    await wait_for(lambda: server.open_connections == 0)


# -- turns, tools and the session between turns (H.6) ---------------------------------------------


@arun
async def test_a_client_tool_turn_runs_on_one_socket(server: FakeCoderServer) -> None:
    rec = Recorder()
    driver = Driver(base_url=server.url, token=server.token, sink=rec.sink)
    session = session_for(server, PrefixSelector(), rec.sink)
    result = await run_on(
        driver,
        session.generate("weather in Paris?", now=time.monotonic()),
        session=session,
        tools=weather_tool,
    )
    assert result.text == 'It is {"temp_c":21}.'
    assert server.counters.stream_dials[session.chat_id] == 1
    assert len(rec.of("ws:dial")) == 1 and len(rec.of("segment:start")) == 2
    ops = [e.op for e in rec.of("http:request")]
    assert ops == ["create_chat", "submit_tool_results"]
    await driver.aclose()
    await wait_for(lambda: server.open_connections == 0)


@arun
async def test_a_tool_runner_that_raises_still_answers_every_call_d5(
    server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(calls: tuple[Any, ...]) -> list[ToolOutcome]:
        raise RuntimeError("tool crashed")

    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    with caplog.at_level("WARNING", logger="coder_io_asyncio"):
        result = await run_on(
            driver,
            session.generate("weather?", now=time.monotonic()),
            session=session,
            tools=broken,
        )
    (step_with_tool, _final) = result.steps
    (tool_result,) = step_with_tool.tool_results
    assert tool_result.is_error is True
    assert "the tool runner raised" in caplog.text and "tool crashed" in caplog.text
    await driver.aclose()


@arun
async def test_a_turn_run_without_a_tool_runner_gets_an_error_result_per_call_d5(
    server: FakeCoderServer,
) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    result = await run_on(
        driver, session.generate("weather?", now=time.monotonic()), session=session
    )
    (step_with_tool, _final) = result.steps
    (tool_result,) = step_with_tool.tool_results
    assert tool_result.is_error is True
    assert server.counters.requests["submit_tool_results"] == 1
    await driver.aclose()


@arun
async def test_the_session_keeps_reading_a_paused_stream_between_turns_h6() -> None:
    # The server closes a socket whose pings go unanswered within 0.2 s: the paused stream
    # survives only if the driver keeps reading it while no turn runs.
    with FakeCoderServer(chunk_delay=0.001, ping_interval=0.05, ping_timeout=0.2) as server:
        server.config.scripts.add("weather", TOOL_SCRIPT)
        driver = Driver(base_url=server.url, token=server.token)
        session = session_for(server, PrefixSelector())
        paused = await run_on(
            driver, session.segment("weather?", now=time.monotonic()), session=session
        )
        assert paused.finish_reason == "tool-calls"
        assert session.retained_stream is not None
        await asyncio.sleep(0.8)
        assert server.counters.stream_dials[session.chat_id] == 1
        assert server.counters.open_streams == 1
        driver.reset(AgentOf(session))
        await wait_for(lambda: server.counters.open_streams == 0)
        await driver.aclose()
        await wait_for(lambda: server.open_connections == 0)


@arun
async def test_closing_the_driver_closes_a_paused_stream(server: FakeCoderServer) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    await run_on(driver, session.segment("weather?", now=time.monotonic()), session=session)
    assert driver.open_connections == 1
    await driver.aclose()
    assert driver.open_connections == 0
    await wait_for(lambda: server.open_connections == 0)
    with pytest.raises(CoderAgentError, match="closed"):
        start_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))


# -- TLS (wire 1.1; D12) --------------------------------------------------------------------------


def test_ssl_context_follows_httpx_verify_choices(tmp_path: Path) -> None:
    given = ssl.create_default_context()
    assert ssl_context(given) is given
    off = ssl_context(False)
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname
    on = ssl_context(True)
    assert on.verify_mode == ssl.CERT_REQUIRED and on.check_hostname
    with pytest.raises(CoderAgentError, match="CA bundle"):
        ssl_context(str(tmp_path / "missing.pem"))
    with pytest.raises(CoderAgentError, match="verify must be"):
        ssl_context(3)  # type: ignore[arg-type]


def test_ssl_context_honours_ssl_cert_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nope.pem"))
    with pytest.raises(CoderAgentError, match=r"nope\.pem"):
        ssl_context(True)
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    assert ssl_context(True).verify_mode == ssl.CERT_REQUIRED


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
    """TLS on loopback in front of the fake server (the fake itself speaks plain HTTP)."""

    def __init__(self, target: FakeCoderServer, cert: Path, key: Path) -> None:
        self.target = target
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.server: asyncio.Server | None = None
        self.handshakes = 0

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"https://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> TlsProxy:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 1.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        up_reader, up_writer = await asyncio.open_connection(self.target.host, self.target.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@arun
async def test_tls_with_a_ca_bundle_runs_rest_and_the_stream_socket(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    async with TlsProxy(server, cert, key) as proxy:
        driver = Driver(base_url=proxy.url, token=server.token, verify=str(cert))
        session = Session(
            SessionConfig(
                base_url=proxy.url,
                token=server.token,
                organization_id=server.organization_id,
                tools=[WEATHER],
            ),
            selector=PrefixSelector(),
        )
        result = await run_on(
            driver,
            session.generate("weather in Paris?", now=time.monotonic()),
            session=session,
            tools=weather_tool,
        )
        assert result.text == 'It is {"temp_c":21}.'
        assert server.counters.stream_dials[session.chat_id] == 1
        await driver.aclose()
    await wait_for(lambda: server.open_connections == 0)


@arun
async def test_tls_verification_is_on_by_default(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    async with TlsProxy(server, cert, key) as proxy:
        driver = Driver(base_url=proxy.url, token=server.token)
        with pytest.raises(CoderNetworkError, match="CERTIFICATE_VERIFY_FAILED"):
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
        await wait_for(lambda: watch.attempt >= 3)
        run.cancel()
        assert server.counters.watch_dials == 0 and proxy.handshakes == 0
        await driver.aclose()


@arun
async def test_tls_without_verification_and_with_a_context(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    async with TlsProxy(server, cert, key) as proxy:
        context = ssl.create_default_context(cafile=str(cert))
        for verify in (False, context):
            driver = Driver(base_url=proxy.url, token=server.token, verify=verify)
            assert await run_on(driver, rest_job(PrefixSelector(), "list_chats", now=0.0)) == ()
            await driver.aclose()


# -- how many requests an owned client has in flight ------------------------------------------------


class HoldingServer:
    """A loopback HTTP server that holds every request until ``release`` is set, counting
    how many it holds at once (one request per connection)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.in_flight = 0
        self.most = 0
        self.total = 0
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> HoldingServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.release.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.total += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await self.release.wait()
            self.in_flight -= 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def list_job() -> RestJob[Any]:
    return RestJob(
        PrefixSelector("/api/v2/chats"), build_list_chats(), parse_list_chats, now=time.monotonic()
    )


@arun
async def test_an_owned_client_keeps_at_most_its_pool_size_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fleet of machines on one client: the requests beyond the pool size wait their turn
    in the driver (in order, each answered), never more than the pool size at the server."""
    import coder_io_common._async.driver as module

    monkeypatch.setattr(module, "HTTP_CONCURRENCY", 3)
    async with HoldingServer() as held:
        driver = Driver(base_url=held.url, token="t")
        runs = [start_on(driver, list_job()) for _ in range(8)]
        await wait_for(lambda: held.in_flight == 3)
        await asyncio.sleep(0.05)
        assert (held.in_flight, held.total) == (3, 3)
        # A request cancelled while it waits its turn never reaches the server.
        runs[-1].cancel()
        held.release.set()
        assert [await r.result() for r in runs[:-1]] == [()] * 7
        assert (held.most, held.total) == (3, 7)
        await driver.aclose()


@arun
async def test_a_user_client_is_not_throttled_by_the_driver_d23(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import coder_io_common._async.driver as module

    monkeypatch.setattr(module, "HTTP_CONCURRENCY", 3)
    async with HoldingServer() as held, httpx.AsyncClient() as client:
        driver = Driver(base_url=held.url, token="t", http_client=client)
        runs = [start_on(driver, list_job()) for _ in range(8)]
        await wait_for(lambda: held.in_flight == 8)
        held.release.set()
        assert [await r.result() for r in runs] == [()] * 8
        await driver.aclose()
