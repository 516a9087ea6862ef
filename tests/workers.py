"""Worker processes of the tests: a module of the repository run as ``python -m <module>``
from its root, with the repository on ``PYTHONPATH``, so the process imports this checkout.

Two kinds are started with it. The durable kill trials (``tests/durable``) talk to a
pre-imported parent over pipes (``Zygote``, ``tests/durable/zygote.py``): one JSON line in
(a workflow process's environment), one JSON line out (its exit code). The Temporal tests
(``tests/temporal/harness.py``) start worker processes that write their output to a log file
and create a file once they are ready, then kill some and stop the rest; the Temporal example's
worker (``examples/temporal/worker.py``) runs the same way.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


class WorkerProcess:
    """``python -m <module>`` with ``env`` added to ``environ`` (this process's environment
    unless given).

    With ``pipe``, its stdin and stdout are text pipes for ``request`` (its stderr is this
    process's); otherwise its output goes to the end of ``log``. With ``ready``, the path is
    passed as ``WORKER_READY`` (removed first): the process creates that file once it is
    ready, which ``wait_ready`` waits for.
    """

    def __init__(
        self,
        module: str,
        *,
        env: dict[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        log: str | None = None,
        ready: str | None = None,
        pipe: bool = False,
    ) -> None:
        self.module = module
        self.log = log
        self.ready = ready
        base = os.environ if environ is None else environ
        environment = {**base, **(env or {}), "PYTHONPATH": str(ROOT)}
        if ready is not None:
            if os.path.exists(ready):
                os.remove(ready)
            environment["WORKER_READY"] = ready
        command = [sys.executable, "-m", module]
        if pipe:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=environment,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            return
        with open(log or os.devnull, "ab") as out:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait for the ``ready`` file; the process exiting first, or ``timeout`` seconds
        passing, fails the test with the end of its log."""
        assert self.ready is not None, "this process was started without a ready file"
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.ready):
            assert self.proc.poll() is None, f"the worker exited: {self.tail()}"
            assert time.monotonic() < deadline, f"the worker never started: {self.tail()}"
            time.sleep(0.05)

    def tail(self) -> str:
        """The end of the log."""
        if self.log is None:
            return ""
        with open(self.log, errors="replace") as f:
            return f.read()[-6000:]

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` as one JSON line; the JSON line the process answers."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"{self.module} died"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        """SIGKILL (unless it has exited), then reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM (a worker shuts down gracefully), SIGKILL if it has not exited within 30
        s; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return int(self.proc.returncode)

    def close(self) -> None:
        """Close its stdin (a piped process ends at the end of its input) and wait for it."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Zygote:
    """One ``tests.durable.zygote`` process: forks a workflow process per ``run``."""

    def __init__(self) -> None:
        self.process = WorkerProcess("tests.durable.zygote", pipe=True)

    def run(self, env: dict[str, str]) -> int:
        """Run one workflow process with ``env``; its exit code (``-9``: SIGKILLed)."""
        return int(self.process.request(env)["exit"])

    def close(self) -> None:
        self.process.close()
