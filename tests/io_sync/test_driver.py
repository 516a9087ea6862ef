"""The blocking driver over loopback (docs/architecture.md "The adapters"; wire 1.1, 11; D12, D22-D24):
REST through ``httpx.Client`` with ``http:*`` events, stream sockets, client tools in threads
while the stream is read, background interrupts on the worker thread and its bound, caller
deadlines that leave no socket or thread behind, and TLS verification against a self-signed
loopback server. No event loop runs in the client: the fake server runs in its own thread.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync._driver import Deadline, Driver, ssl_context, transport_sink
from coder_proto import (
    CoderAgentError,
    CoderApiError,
    CoderNetworkError,
    DynamicTool,
    TextDelta,
    WatchBackoff,
)
from coder_proto._actions import RunInBackground, ToolOutcome
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._engine import CoreMachine
from coder_proto._jobs.operations import RestJob, rest_job
from coder_proto._jobs.stopping import ChatInterrupt, InterruptJob
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_list_chats, parse_list_chats
from coder_proto._stream.watch import WatchMachine
from coder_proto._transport_events import TransportEventSink
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
    invoke = None if tools is None else (lambda invocations: tools(calls_of(invocations)))
    return driver.call(
        machine_call(machine, session=session, tools=tools is not None), invoke=invoke
    )


def run_on(driver: Driver, machine: Any, *, deadline: Any = None, **kwargs: Any) -> Any:
    """``start_on``, then the result (by ``deadline``)."""
    return start_on(driver, machine, **kwargs).result(deadline)


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as fake:
        fake.config.scripts.add("weather", TOOL_SCRIPT)
        fake.config.scripts.add("slow", SLOW_SCRIPT)
        yield fake


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Every test ends with no thread of the driver left (tools, worker)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5.0
    while True:
        left = [
            t
            for t in threading.enumerate()
            if t not in before and t.name.startswith("coder-io-sync") and t.is_alive()
        ]
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"threads left behind: {left}")
        time.sleep(0.01)


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.sink = TransportEventSink(self.events.append, wall_clock=time.time)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def session_for(server: FakeCoderServer, selector: PrefixSelector, sink: Any = None) -> Session:
    config = SessionConfig(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        tools=[WEATHER],
    )
    return Session(config, selector=selector, sink=sink)


def weather_tool(calls: tuple[Any, ...]) -> list[ToolOutcome]:
    return [ToolOutcome(tool_call_id=c.tool_call_id, output={"temp_c": 21}) for c in calls]


# -- REST (wire 1.1, 11; D23, D24) ----------------------------------------------------------------


def test_rest_sends_the_token_and_reports_http_events_d24(server: FakeCoderServer) -> None:
    rec = Recorder()
    driver = Driver(base_url=server.url, token=server.token, sink=rec.sink)
    selector = PrefixSelector()
    before = time.time()
    assert run_on(driver, RestJob(selector, build_list_chats(), parse_list_chats, now=0.0)) == ()
    run_on(driver, rest_job(selector, "list_chats", now=time.monotonic()))
    driver.close()
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


def test_created_http_client_has_no_read_timeout_and_no_accept_header_d23(
    server: FakeCoderServer,
) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    timeout = driver.http_client.timeout
    assert (timeout.read, timeout.write, timeout.pool, timeout.connect) == (None, None, None, 30.0)
    assert "accept" not in driver.http_client.headers
    driver.close()
    assert driver.http_client.is_closed
    driver.close()  # idempotent


def test_a_user_client_keeps_its_headers_and_stays_open(server: FakeCoderServer) -> None:
    seen: list[httpx.Request] = []
    user = httpx.Client(headers={"X-Trace": "abc"}, event_hooks={"request": [seen.append]})
    driver = Driver(base_url=server.url, token=server.token, http_client=user)
    run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
    driver.close()
    assert not user.is_closed
    (sent,) = seen
    assert sent.headers["X-Trace"] == "abc"
    assert sent.headers["Coder-Session-Token"] == server.token
    assert "content-type" not in sent.headers  # no body, no Content-Type (wire 1.1)
    user.close()


def test_an_async_http_client_is_refused_with_a_clear_error() -> None:
    with pytest.raises(CoderAgentError, match=r"httpx\.Client"):
        Driver(base_url="http://127.0.0.1:9", token="t", http_client=httpx.AsyncClient())  # type: ignore[arg-type]


def test_a_user_client_timeout_surfaces_as_a_network_error_d23(server: FakeCoderServer) -> None:
    server.faults.delay_requests("list_chats", 2.0)
    rec = Recorder()
    user = httpx.Client(timeout=0.05)
    driver = Driver(base_url=server.url, token=server.token, http_client=user, sink=rec.sink)
    with pytest.raises(CoderNetworkError) as info:
        run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
    assert info.value.retryable and "ReadTimeout" in str(info.value)
    assert rec.types() == ["http:request", "http:error"]
    assert "ReadTimeout" in rec.events[1].message
    driver.close()
    user.close()


def test_a_refused_connection_is_a_network_error_without_the_token() -> None:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    rec = Recorder()
    token = "very-secret-token-value"
    driver = Driver(base_url=f"http://127.0.0.1:{port}", token=token, sink=rec.sink)
    with pytest.raises(CoderNetworkError) as info:
        run_on(driver, rest_job(PrefixSelector(), "get_chat", "c1", now=time.monotonic()))
    driver.close()
    assert info.value.path == "/api/v2/chats/c1"
    assert rec.types() == ["http:request", "http:error"]
    assert token not in repr(rec.events) and token not in str(info.value)


def test_a_coroutine_transport_event_callback_is_refused() -> None:
    async def callback(event: Any) -> None:
        pass

    with pytest.raises(CoderAgentError, match="plain function"):
        transport_sink(callback)
    with pytest.raises(CoderAgentError, match="callable"):
        transport_sink(42)  # type: ignore[arg-type]
    assert not transport_sink(None).enabled


def test_a_raising_transport_event_callback_is_swallowed(server: FakeCoderServer) -> None:
    got: list[str] = []

    def callback(event: Any) -> None:
        got.append(event.type)
        raise RuntimeError("handler bug")

    driver = Driver(base_url=server.url, token=server.token, sink=transport_sink(callback))
    run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
    driver.close()
    assert got == ["http:request", "http:response"]


# -- caller deadlines and cancellation (D22) --------------------------------------------------------


@pytest.mark.parametrize("seconds", [-1, float("nan"), "1", True])
def test_a_bad_timeout_is_a_clear_error(seconds: Any) -> None:
    with pytest.raises(CoderAgentError, match="timeout"):
        Deadline.after(seconds)


def test_no_timeout_and_an_infinite_one_set_no_deadline() -> None:
    assert Deadline.after(None) is None and Deadline.after(float("inf")) is None
    deadline = Deadline.after(2)
    assert deadline is not None and 0 < deadline.remaining() <= 2
    assert "2 s" in str(deadline.error()) and isinstance(deadline.error(), TimeoutError)


def test_a_caller_deadline_on_a_stuck_request_is_builtin_timeout_error_d22(
    server: FakeCoderServer,
) -> None:
    # The fake holds its answer for 2 s; the deadline cuts the request (and its connection).
    server.faults.delay_requests("list_chats", 2.0)
    rec = Recorder()
    driver = Driver(base_url=server.url, token=server.token, sink=rec.sink)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        run_on(
            driver,
            rest_job(PrefixSelector(), "list_chats", now=time.monotonic()),
            deadline=Deadline(0.2),
        )
    assert time.monotonic() - started < 1.5
    assert rec.types() == ["http:request", "http:error"]
    assert rec.events[1].message == "request cancelled"
    wait_for(lambda: server.open_connections == 0)  # before the driver closes
    driver.close()


def test_cancelling_a_stuck_stream_interrupts_in_the_background_and_leaks_nothing(
    server: FakeCoderServer,
) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    selector = PrefixSelector()
    session = session_for(server, selector)
    with driver.locked() as now:
        turn = session.stream("slow please", now=now)
    run = start_on(driver, turn, session=session)
    texts: list[str] = []
    with pytest.raises(TimeoutError):
        for part in run.parts(Deadline(1.0)):
            if isinstance(part, TextDelta):
                texts.append(part.delta)
    assert "".join(texts) == "partial "
    assert turn.done and turn.cancelled
    assert driver.open_connections == 0  # the stream socket closed at once
    assert driver.wait_background(5.0)
    assert server.counters.requests["interrupt_chat"] == 1
    driver.close()
    wait_for(lambda: server.open_connections == 0)


def test_re_raising_never_waits_for_the_background_interrupt_d22(
    server: FakeCoderServer,
) -> None:
    server.faults.delay_requests("interrupt_chat", 2.0)
    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    with driver.locked() as now:
        turn = session.generate("slow please", now=now)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        run_on(driver, turn, session=session, deadline=Deadline(0.5))
    assert time.monotonic() - started < 1.5
    assert driver.background_jobs == 1
    wait_for(lambda: driver.worker_alive)
    assert not driver.wait_background(0.05)
    driver.close(background_timeout=0.1)
    assert driver.background_jobs == 0
    # The worker finishes the request it was in (its answer comes at 2 s), then ends.
    wait_for(lambda: not driver.worker_alive)
    wait_for(lambda: server.open_connections == 0)


def test_a_request_is_cut_when_its_machine_abandons_it(server: FakeCoderServer) -> None:
    """A machine that waits for a request until a deadline of its own (an interrupt that
    waits for the chat to settle, 0.3 s here) gets the builtin ``TimeoutError`` then: the
    blocking request is cut at that deadline, as an event loop's timer would cut it, and
    not left to run until the server answers (2 s)."""
    server.faults.delay_requests("interrupt_chat", 2.0)
    driver = Driver(base_url=server.url, token=server.token)
    with driver.locked() as now:
        machine = ChatInterrupt(
            PrefixSelector("/api/v2/chats"), "chat-1", now=now, wait=True, timeout=0.3
        )
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish in time"):
        run_on(driver, machine)
    assert time.monotonic() - started < 1.5
    driver.close()
    wait_for(lambda: server.open_connections == 0)


class Relay:
    """A machine that only relays another one (as an embedder's wrapper may): it does not
    say when it abandons a request."""

    def __init__(self, inner: CoreMachine[Any]) -> None:
        self.inner = inner

    @property
    def done(self) -> bool:
        return self.inner.done

    def actions(self) -> list[Any]:
        return self.inner.actions()

    def next_deadline(self) -> float | None:
        return self.inner.next_deadline()

    def tick(self, now: float) -> None:
        self.inner.tick(now)

    def response_received(self, request_id: int, response: Any, now: float) -> None:
        self.inner.response_received(request_id, response, now)

    def request_failed(self, request_id: int, message: Any, now: float) -> None:
        self.inner.request_failed(request_id, message, now)

    def cancel(self, now: float, reason: BaseException | None = None) -> None:
        self.inner.cancel(now, reason)

    def result(self) -> Any:
        return self.inner.result()


def test_a_relayed_request_is_bounded_by_the_http_timeout_alone(
    server: FakeCoderServer,
) -> None:
    """Without ``request_deadline`` the request runs to its answer within ``http_timeout``
    (D29): here the answer (the server's 400 for a chat id that is not a UUID) comes after
    0.3 s and is the call's outcome."""
    server.faults.delay_requests("interrupt_chat", 0.3)
    driver = Driver(base_url=server.url, token=server.token)
    with driver.locked() as now:
        machine = ChatInterrupt(PrefixSelector("/api/v2/chats"), "chat-1", now=now)
    with pytest.raises(CoderApiError) as info:
        run_on(driver, Relay(machine))
    assert info.value.status == 400
    driver.close()


class Spawner(CoreMachine[None]):
    """Fires one background job and finishes (as a turn does when it is cut)."""

    def __init__(self, job: Any) -> None:
        super().__init__(PrefixSelector())
        self._job = job
        self._start(time.monotonic())

    def _run(self) -> Generator[None, None, None]:
        self._emit(RunInBackground(job=self._job))
        return None
        yield  # pragma: no cover - a generator


def test_a_background_request_is_bounded_by_its_jobs_deadline_d22(
    server: FakeCoderServer,
) -> None:
    """The worker cuts a stuck background request at the job's own bound (10 s for the
    agent's interrupts; 0.3 s here), and the job ends without waiting for the server."""
    server.faults.delay_requests("interrupt_chat", 2.0)
    driver = Driver(base_url=server.url, token=server.token)
    selector = PrefixSelector("/api/v2/chats")
    with driver.locked() as now:
        job = InterruptJob(selector, "chat-1", now=now, bound=0.3)
    started = time.monotonic()
    run_on(driver, Spawner(job))
    assert driver.background_jobs == 1
    assert driver.wait_background(5.0)
    assert time.monotonic() - started < 1.5
    assert job.done and job.result() is None  # a best-effort interrupt never raises
    wait_for(lambda: not driver.worker_alive)
    driver.close()
    # The fake notices the abandoned connection once its 2 s hold is over.
    wait_for(lambda: server.open_connections == 0)


def test_cancelling_during_a_tool_run_stops_the_chat_and_ignores_the_late_result_d22(
    server: FakeCoderServer,
) -> None:
    release = threading.Event()
    ran: list[str] = []

    def slow_tool(calls: tuple[Any, ...]) -> list[ToolOutcome]:
        ran.append(threading.current_thread().name)
        release.wait(10.0)
        return weather_tool(calls)

    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    with driver.locked() as now:
        turn = session.generate("weather?", now=now)
    with pytest.raises(TimeoutError):
        run_on(driver, turn, session=session, tools=slow_tool, deadline=Deadline(0.5))
    assert ran and ran[0].startswith("coder-io-sync-tools")
    assert driver.open_connections == 0  # the paused stream closed with the turn
    assert driver.wait_background(5.0)
    assert server.counters.requests["interrupt_chat"] >= 1
    release.set()
    time.sleep(0.05)
    assert server.counters.requests["submit_tool_results"] == 0
    driver.close()
    wait_for(lambda: server.open_connections == 0)


# -- turns, tools and the session between turns (H.6) ---------------------------------------------


def test_a_client_tool_turn_runs_on_one_socket(server: FakeCoderServer) -> None:
    rec = Recorder()
    driver = Driver(base_url=server.url, token=server.token, sink=rec.sink)
    session = session_for(server, PrefixSelector(), rec.sink)
    with driver.locked() as now:
        turn = session.generate("weather in Paris?", now=now)
    result = run_on(driver, turn, session=session, tools=weather_tool)
    assert result.text == 'It is {"temp_c":21}.'
    assert server.counters.stream_dials[session.chat_id] == 1
    assert len(rec.of("ws:dial")) == 1 and len(rec.of("segment:start")) == 2
    ops = [e.op for e in rec.of("http:request")]
    assert ops == ["create_chat", "submit_tool_results"]
    driver.close()
    wait_for(lambda: server.open_connections == 0)


def test_a_tool_runner_that_raises_still_answers_every_call_d5(server: FakeCoderServer) -> None:
    def broken(calls: tuple[Any, ...]) -> list[ToolOutcome]:
        raise RuntimeError("tool crashed")

    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    with driver.locked() as now:
        turn = session.generate("weather?", now=now)
    result = run_on(driver, turn, session=session, tools=broken)
    (step_with_tool, _final) = result.steps
    (tool_result,) = step_with_tool.tool_results
    assert tool_result.is_error is True
    driver.close()


def test_the_stream_is_read_while_a_slow_tool_runs_h6() -> None:
    """The server closes a socket whose pings go unanswered within 0.2 s: the stream
    survives a 0.8 s tool only because the calling thread keeps reading it meanwhile."""
    with FakeCoderServer(chunk_delay=0.001, ping_interval=0.05, ping_timeout=0.2) as server:
        server.config.scripts.add("weather", TOOL_SCRIPT)

        def slow_tool(calls: tuple[Any, ...]) -> list[ToolOutcome]:
            time.sleep(0.8)
            return weather_tool(calls)

        driver = Driver(base_url=server.url, token=server.token)
        session = session_for(server, PrefixSelector())
        with driver.locked() as now:
            turn = session.generate("weather?", now=now)
        result = run_on(driver, turn, session=session, tools=slow_tool)
        assert result.text == 'It is {"temp_c":21}.'
        assert server.counters.stream_dials[session.chat_id] == 1
        driver.close()
        wait_for(lambda: server.open_connections == 0)


def test_a_paused_stream_is_left_unread_between_calls_and_closed_by_a_reset_h6(
    server: FakeCoderServer,
) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    with driver.locked() as now:
        segment = session.segment("weather?", now=now)
    paused = run_on(driver, segment, session=session)
    assert paused.finish_reason == "tool-calls"
    assert session.retained_stream is not None and driver.open_connections == 1
    assert server.counters.open_streams == 1
    driver.reset(AgentOf(session))
    assert driver.open_connections == 0
    wait_for(lambda: server.counters.open_streams == 0)
    driver.close()
    wait_for(lambda: server.open_connections == 0)


def test_closing_the_driver_closes_a_paused_stream(server: FakeCoderServer) -> None:
    driver = Driver(base_url=server.url, token=server.token)
    session = session_for(server, PrefixSelector())
    with driver.locked() as now:
        segment = session.segment("weather?", now=now)
    run_on(driver, segment, session=session)
    assert driver.open_connections == 1
    driver.close()
    assert driver.open_connections == 0
    wait_for(lambda: server.open_connections == 0)
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
    assert ssl_context(tmp_path).verify_mode == ssl.CERT_REQUIRED  # a directory of CAs


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
    """TLS on loopback in front of the fake server (which speaks plain HTTP), with threads:
    one accepting, two piping each connection."""

    def __init__(self, target: FakeCoderServer, cert: Path, key: Path) -> None:
        self.target = target
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.handshakes = 0
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._stopped = False

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.listener.getsockname()[1]}"

    def __enter__(self) -> TlsProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(2.0)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            self._open.append(raw)
            self._spawn(self._handle, raw)

    def _handle(self, raw: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        self.handshakes += 1
        upstream = socket.create_connection((self.target.host, self.target.port))
        self._open += [tls, upstream]
        self._spawn(self._pipe, tls, upstream)
        self._spawn(self._pipe, upstream, tls)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


def test_tls_with_a_ca_bundle_runs_rest_and_the_stream_socket(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    with TlsProxy(server, cert, key) as proxy:
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
        with driver.locked() as now:
            turn = session.generate("weather in Paris?", now=now)
        result = run_on(driver, turn, session=session, tools=weather_tool)
        assert result.text == 'It is {"temp_c":21}.'
        assert server.counters.stream_dials[session.chat_id] == 1
        driver.close()
    wait_for(lambda: server.open_connections == 0)


def test_tls_verification_is_on_by_default(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    with TlsProxy(server, cert, key) as proxy:
        driver = Driver(base_url=proxy.url, token=server.token)
        with pytest.raises(CoderNetworkError, match="CERTIFICATE_VERIFY_FAILED"):
            run_on(driver, rest_job(PrefixSelector(), "list_chats", now=time.monotonic()))
        # The stream socket verifies too: the watch never gets past the TLS handshake.
        with driver.locked() as now:
            watch = WatchMachine(
                PrefixSelector("/api/v2/chats"),
                base_url=proxy.url,
                token=server.token,
                now=now,
                backoff=WatchBackoff(initial=0.01, cap=0.02),
            )
        run = start_on(driver, watch)
        run.wait_until(lambda: watch.attempt >= 3)
        run.cancel()
        assert server.counters.watch_dials == 0 and proxy.handshakes == 0
        driver.close()


def test_tls_without_verification_and_with_a_context(
    server: FakeCoderServer, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    with TlsProxy(server, cert, key) as proxy:
        context = ssl.create_default_context(cafile=str(cert))
        for verify in (False, context):
            driver = Driver(base_url=proxy.url, token=server.token, verify=verify)
            assert run_on(driver, rest_job(PrefixSelector(), "list_chats", now=0.0)) == ()
            driver.close()
