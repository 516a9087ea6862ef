"""The core embedded in a plain ``selectors`` loop (the custom-loop template).

``examples/custom_loop/selectors_loop.py`` runs in a subprocess exactly as documented
(``python examples/custom_loop/selectors_loop.py --url ... "prompt"``), with an import hook
that refuses asyncio, trio and httpx, against the fake server. The server runs in this process
(its own thread) because the ``coder-agent fake-server`` command has no flags for fault
injection. What a user of the example sees is asserted: the streamed text, the client tool
run once with the model's input, its result on the server, the usage and finish reason of the
turn, and a stream drop healed without duplicated text (state machines B.2, C.2.7, G.4, H.6;
D5, D17, D22).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, ReportUsage, Say, Script, Think, Wait

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "custom_loop" / "selectors_loop.py"
RUNTIMES = ("asyncio", "trio", "httpx")

#: Installed as ``sitecustomize`` in the example's process: any attempt to import a runtime
#: fails loudly (and is reported on stderr, in case the importer swallows the ImportError).
IMPORT_HOOK = f"""
import sys

class _RefuseRuntimes:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {RUNTIMES!r}:
            sys.stderr.write("refused import: " + name + "\\n")
            raise ImportError("the embedding example must not import " + name)
        return None

sys.meta_path.insert(0, _RefuseRuntimes())
"""

WEATHER = {"city": "Paris", "temperature_c": 21, "conditions": "sunny"}
WEATHER_SCRIPT = Script(
    (
        Think("Checking the weather."),
        ReportUsage(input_tokens=10, output_tokens=5),
        CallClientTool(name="get_weather", args={"city": "Paris"}),
        Say("In Paris it is {tool_result}, enjoy."),
        ReportUsage(input_tokens=20, output_tokens=7),
    )
)
EXPECTED_TEXT = 'In Paris it is {"city":"Paris","temperature_c":21,"conditions":"sunny"}, enjoy.'


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    # The run waits a little before its first model call, so the example's stream is open
    # before any part is produced and the drop below lands in the live stream.
    with FakeCoderServer(chunk_delay=0.005, run_start_delay=0.3) as srv:
        srv.config.scripts.add(r"weather", WEATHER_SCRIPT)
        srv.config.scripts.add(r"slow", Script((Say("Working on it"), Wait(60.0), Say("done"))))
        yield srv


@pytest.fixture
def hook_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "sitecustomize.py").write_text(IMPORT_HOOK)
    return tmp_path


def example(
    server: FakeCoderServer,
    hook_dir: pathlib.Path,
    prompt: str,
    *extra: str,
    url: str | None = None,
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODER_", "COVERAGE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(hook_dir), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    command = [
        sys.executable,
        str(SCRIPT),
        "--url",
        url or server.url,
        "--token",
        server.token,
        "--org",
        server.organization_id,
        *extra,
        prompt,
    ]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def summary_of(stderr: str) -> dict[str, Any]:
    lines = [line for line in stderr.splitlines() if line.startswith("summary: ")]
    assert len(lines) == 1, stderr
    value: dict[str, Any] = json.loads(lines[0].removeprefix("summary: "))
    return value


def assert_no_runtime(stderr: str, summary: dict[str, Any]) -> None:
    assert "refused import" not in stderr, stderr
    assert summary["runtime_modules"] == []


def test_a_full_tool_turn_with_a_stream_drop_on_a_selectors_loop(
    server: FakeCoderServer, hook_dir: pathlib.Path
) -> None:
    """One streamed turn: the client tool runs once with the model's input (D5), its result
    reaches the server and the model's answer, the stream dropped mid-text is redialed and the
    text arrives exactly once (B.2, C.2.7), usage is summed over both steps (F.5, D17), and the
    process never imports asyncio, trio or httpx."""
    # The live stream ends (no close frame) just before the 7th delta, after the tool ran.
    server.faults.drop_stream_at("message_part", occurrence=7)
    proc = example(server, hook_dir, "What is the weather in Paris?", "--verbose")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    summary = summary_of(stderr)

    assert stdout == EXPECTED_TEXT + "\n"
    assert summary["text"] == EXPECTED_TEXT
    assert summary["finish_reason"] == "stop"
    assert summary["steps"] == 2
    assert summary["usage"]["input_tokens"] == 30
    assert summary["usage"]["output_tokens"] == 12
    assert summary["tools"] == [
        {"name": "get_weather", "input": {"city": "Paris"}, "output": WEATHER, "is_error": False}
    ]
    assert_no_runtime(stderr, summary)

    # The drop happened and was healed by one redial of the same reader.
    assert stderr.count("[ws:redial]") == 1, stderr
    chat_id = summary["chat_id"]
    assert server.counters.stream_dials[chat_id] == 2
    # The result reached the server once, as the tool message the model answered from.
    assert server.counters.requests["submit_tool_results"] == 1
    chat = server.model.chats[chat_id]
    results = [p for m in chat.messages if m.role == "tool" for p in m.content]
    assert [(p["tool_name"], p["result"]) for p in results] == [("get_weather", WEATHER)]
    assert chat.status == "waiting"
    # Every socket the example opened is closed.
    assert server.wait_idle(5.0)


def test_an_unregistered_tool_gets_an_error_result_and_the_turn_goes_on(
    server: FakeCoderServer, hook_dir: pathlib.Path
) -> None:
    """D5: a call to a tool the program does not have is answered by the connection with an
    error result (a string), never left pending; the loop is never asked to run it."""
    server.config.scripts.add(
        r"forecast",
        Script((CallClientTool(name="get_forecast", args={"days": 3}), Say("Got {tool_result}"))),
    )
    proc = example(server, hook_dir, "forecast please")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    summary = summary_of(stderr)
    assert summary["tools"] == []
    [chat] = server.model.chats.values()
    results = [p for m in chat.messages if m.role == "tool" for p in m.content]
    [result] = results
    assert result["tool_name"] == "get_forecast" and result.get("is_error") is True
    assert isinstance(result["result"], str) and "get_forecast" in result["result"]
    assert stdout.startswith("Got ")
    assert summary["finish_reason"] == "stop"
    assert_no_runtime(stderr, summary)
    assert server.wait_idle(5.0)


def test_ctrl_c_interrupts_the_run_once_and_leaves_no_socket(
    server: FakeCoderServer, hook_dir: pathlib.Path
) -> None:
    """D22: Ctrl-C cancels the turn; the server run is interrupted exactly once before the
    program exits (status 130), and every connection is closed."""
    proc = example(server, hook_dir, "slow, please")
    assert proc.stdout is not None
    seen = ""
    while "Working on it" not in seen:
        char = proc.stdout.read(1)
        assert char, "the example ended before streaming any text"
        seen += char
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "done" not in seen + stdout
    summary = summary_of(stderr)
    assert summary["finish_reason"] is None
    assert_no_runtime(stderr, summary)
    assert server.counters.requests["interrupt_chat"] == 1
    [chat] = server.model.chats.values()
    deadline = time.monotonic() + 5.0
    while chat.status != "waiting" and time.monotonic() < deadline:
        time.sleep(0.02)
        [chat] = server.model.chats.values()
    assert chat.status == "waiting"
    assert server.wait_idle(5.0)


# -- TLS ---------------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A self-signed certificate for 127.0.0.1 (the openssl command line makes it)."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl makes the test certificate: tests/setup-machine installs it")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@contextlib.contextmanager
def tls_proxy(upstream_port: int, cert: pathlib.Path, key: pathlib.Path) -> Iterator[int]:
    """Terminate TLS on a loopback port and relay the plain bytes to ``upstream_port`` (one
    thread per connection; either side closing closes both)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def relay(raw: socket.socket) -> None:
        try:
            client = context.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()
            return
        upstream = socket.create_connection(("127.0.0.1", upstream_port))
        try:
            while not stop.is_set():
                ready: list[socket.socket] = [client] if client.pending() else []
                ready = ready or select.select([client, upstream], [], [], 0.1)[0]
                for source in ready:
                    data = source.recv(65_536)
                    if not data:
                        return
                    (upstream if source is client else client).sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            raw.settimeout(None)
            threading.Thread(target=relay, args=(raw,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        acceptor.join()
        listener.close()


def test_the_same_turn_over_tls_with_a_verified_certificate(
    server: FakeCoderServer,
    hook_dir: pathlib.Path,
    certificate: tuple[pathlib.Path, pathlib.Path],
) -> None:
    """An https URL: REST and the wss stream both go through the loop's non-blocking TLS
    handshake, verified against the given CA file, and the turn completes as over plain TCP."""
    cert, key = certificate
    with tls_proxy(server.port, cert, key) as port:
        url = f"https://127.0.0.1:{port}"
        proc = example(server, hook_dir, "weather in Paris", "--cafile", str(cert), url=url)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert stdout == EXPECTED_TEXT + "\n"
    summary = summary_of(stderr)
    assert [t["input"] for t in summary["tools"]] == [{"city": "Paris"}]
    assert_no_runtime(stderr, summary)
    assert server.counters.streams_accepted[summary["chat_id"]] == 1


def test_tls_verification_is_on_by_default(
    server: FakeCoderServer,
    hook_dir: pathlib.Path,
    certificate: tuple[pathlib.Path, pathlib.Path],
) -> None:
    """Without the CA file the self-signed certificate is refused: the turn fails with a
    typed network error and nothing reaches the server."""
    cert, key = certificate
    with tls_proxy(server.port, cert, key) as port:
        proc = example(server, hook_dir, "weather in Paris", url=f"https://127.0.0.1:{port}")
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    assert "CoderNetworkError" in stderr
    assert "CERTIFICATE_VERIFY_FAILED" in stderr
    assert server.counters.requests["create_chat"] == 0
