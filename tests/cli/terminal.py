"""A real pseudo-terminal for driving ``coder-agent`` as a person at a terminal would: the
program's stdin, stdout and stderr are the pty's slave side, which is also its controlling
terminal, so Ctrl-C typed on the master side is a SIGINT from the line discipline and
Ctrl-D an end of input."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time

CLI = [sys.executable, "-m", "coder_integrations.cli"]


def _controlling_terminal() -> None:  # pragma: no cover (runs in the child)
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``coder-agent *argv`` under a pty: ``expect`` what it shows, ``type`` lines, press
    Ctrl-C / Ctrl-D, ``wait`` for its exit status."""

    def __init__(self, *argv: str, env: dict[str, str]) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        self.process = subprocess.Popen(
            [*CLI, *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=_controlling_terminal,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.screen = ""
        self.seen = 0

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the program closed the terminal
            return False
        if not chunk:
            return False
        self.screen += chunk.decode("utf-8", "replace")
        return True

    def expect(self, needle: str, timeout: float = 60) -> str:
        """Wait until ``needle`` appears after what earlier calls consumed; return the text
        up to and including it."""
        deadline = time.monotonic() + timeout
        while needle not in self.screen[self.seen :]:
            left = deadline - time.monotonic()
            assert left > 0, f"{needle!r} never appeared; the terminal shows:\n{self.screen}"
            assert self._read(min(left, 0.5)), f"{needle!r} never appeared:\n{self.screen}"
        end = self.screen.index(needle, self.seen) + len(needle)
        text = self.screen[self.seen : end]
        self.seen = end
        return text

    def type(self, line: str) -> None:
        """Type ``line`` and Enter."""
        os.write(self.master, line.encode() + b"\r")

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def ctrl_d(self) -> None:
        os.write(self.master, b"\x04")

    def wait(self, timeout: float = 60) -> int:
        """The exit status, after reading everything the program wrote."""
        deadline = time.monotonic() + timeout
        while self._read(0.5):
            assert time.monotonic() < deadline, f"still running; the terminal shows:\n{self.screen}"
            if self.process.poll() is not None:
                while self._read(0.1):
                    if not select.select([self.master], [], [], 0)[0]:
                        break
                break
        return self.process.wait(timeout=max(deadline - time.monotonic(), 1))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def environment(**values: str) -> dict[str, str]:
    """This process's environment without the CODER_* settings, plus ``values``."""
    names = ("CODER_URL", "CODER_SESSION_TOKEN", "CODER_ORGANIZATION_ID", "CODER_ORG_ID")
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(values)
    return env
