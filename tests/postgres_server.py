"""A throwaway PostgreSQL server for the tests: ``initdb`` in a fresh temporary directory, the
server on a free loopback port (TCP on 127.0.0.1 only, its unix socket inside that directory),
stopped and removed at the end.

The server refuses to run as root, so under root it runs as the ``postgres`` system user (the
directory is handed to that user); otherwise as the current user. Nothing is shared with
another run: the directory is unique, the port is asked from the kernel (and another is tried
if someone took it first), and the socket lives in the directory. If the test process dies,
the kernel stops the server with it (Linux parent-death signal), so no server outlives a
killed run; the directory such a run leaves behind is removed by a later run once it is
stale (no live server in it for ``STALE_AFTER`` seconds).

A missing binary or a server that cannot start raises ``ServerUnavailable`` with what to do;
the fixture turns that into a failure, never a skip. That fixture, ``postgres_server`` in
``tests/conftest.py``, is the one every directory uses (``tests/stores``, ``tests/durable``,
``tests/temporal``): one server per run, and a schema per test (``pg_schema``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import os
import pathlib
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

__all__ = ["PostgresServer", "ServerUnavailable", "find_bin_dir"]

#: Where Debian and Ubuntu put each major version's server binaries.
BIN_GLOB = "/usr/lib/postgresql/*/bin"
#: The variable that names another directory of server binaries.
BIN_ENV = "CODER_TEST_PG_BIN"
#: The superuser the tests connect as (with a password: nothing runs with trust auth on TCP).
USER = "coder_test"
START_TIMEOUT = 60.0
#: A leftover directory older than this with no live server in it is removed.
STALE_AFTER = 600.0
PORT_ATTEMPTS = 5
INSTALL_HINT = (
    "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; .ci/run does "
    "this when the binaries are missing)"
)


class ServerUnavailable(Exception):
    """The PostgreSQL server binaries are missing or the server could not start."""


def find_bin_dir() -> pathlib.Path:
    """The directory holding ``initdb`` and ``postgres``: ``$CODER_TEST_PG_BIN`` when set,
    else the newest major version under ``/usr/lib/postgresql``, else the one on ``PATH``."""
    chosen = os.environ.get(BIN_ENV)
    if chosen:
        if all(os.access(os.path.join(chosen, name), os.X_OK) for name in ("initdb", "postgres")):
            return pathlib.Path(chosen)
        raise ServerUnavailable(f"{BIN_ENV}={chosen} holds no initdb and postgres binaries")

    def major(path: str) -> int:
        match = re.search(r"/(\d+)/bin$", path)
        return int(match.group(1)) if match else 0

    for candidate in sorted(glob.glob(BIN_GLOB), key=major, reverse=True):
        if os.access(os.path.join(candidate, "initdb"), os.X_OK) and os.access(
            os.path.join(candidate, "postgres"), os.X_OK
        ):
            return pathlib.Path(candidate)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return pathlib.Path(initdb).parent
    raise ServerUnavailable(
        f"no PostgreSQL server binaries (looked for {BIN_GLOB}/initdb and initdb on PATH): "
        + INSTALL_HINT
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks Linux to send the child SIGINT (PostgreSQL's fast shutdown)
    when the process that started it dies; ``None`` where that does not exist."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        prctl = ctypes.CDLL(name, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def arm() -> None:
        prctl(pr_set_pdeathsig, signal.SIGINT, 0, 0, 0)

    return arm


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_dirs(parent: pathlib.Path) -> None:
    """Remove the directories that killed runs left in ``parent``: older than
    ``STALE_AFTER`` and with no live server (a run still starting is younger)."""
    for base in parent.glob("coder-pg-*"):
        try:
            if time.time() - base.stat().st_mtime < STALE_AFTER:
                continue
            pid_file = base / "data" / "postmaster.pid"
            if pid_file.exists() and _alive(int(pid_file.read_text().split()[0])):
                continue
        except (OSError, ValueError, IndexError):
            continue
        shutil.rmtree(base, ignore_errors=True)


def _tail(path: pathlib.Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"


class PostgresServer:
    """One PostgreSQL server for a test session (see the module docstring)."""

    def __init__(self) -> None:
        self.password = secrets.token_urlsafe(18)
        self.host = "127.0.0.1"
        self.port = 0
        self.dbname = "postgres"
        self.user = USER
        self.base_dir: pathlib.Path | None = None
        self.bin_dir: pathlib.Path | None = None
        self.version = ""
        self.startup_seconds = 0.0
        self._process: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"PostgresServer({self.host}:{self.port}, {self.base_dir})"

    # -- paths -----------------------------------------------------------------------------

    @property
    def data_dir(self) -> pathlib.Path:
        assert self.base_dir is not None
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> pathlib.Path:
        assert self.base_dir is not None
        return self.base_dir / "sock"

    @property
    def log_path(self) -> pathlib.Path:
        assert self.base_dir is not None
        return self.base_dir / "server.log"

    def conninfo(self, **overrides: Any) -> str:
        """A connection string for the superuser over TCP (``dbname=``... to override)."""
        params = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "dbname": self.dbname,
            "connect_timeout": 10,
            **overrides,
        }
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})

    # -- life cycle ------------------------------------------------------------------------

    def _run_as_server_user(self) -> dict[str, Any]:
        """The ``subprocess`` arguments that drop root for the ``postgres`` user."""
        if os.geteuid() != 0:
            return {}
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise ServerUnavailable(
                "running as root, the PostgreSQL server needs the 'postgres' system user (it "
                "refuses to run as root): create it with 'useradd --system postgres' (.ci/run "
                "does) or run the tests as another user"
            ) from None
        return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}

    def _make_base_dir(self) -> pathlib.Path:
        parent = pathlib.Path(tempfile.gettempdir())
        if self._as and not all(
            os.stat(p).st_mode & 0o001 for p in [parent, *parent.parents]
        ):  # the server user could not reach a directory under a private parent
            parent = pathlib.Path("/tmp")
        remove_stale_dirs(parent)
        base = pathlib.Path(tempfile.mkdtemp(prefix="coder-pg-", dir=parent))
        (base / "sock").mkdir()
        if self._as:
            for path in (base, base / "sock"):
                os.chown(path, self._as["user"], self._as["group"])
        return base

    def start(self) -> None:
        """initdb, then start the server and wait until it accepts connections."""
        started = time.monotonic()
        self.bin_dir = find_bin_dir()
        self._as = self._run_as_server_user()
        self.base_dir = self._make_base_dir()
        self._initdb()
        for _attempt in range(PORT_ATTEMPTS):
            self.port = _free_port()
            if self._launch():
                break
        else:
            raise ServerUnavailable(
                f"PostgreSQL could not bind a free loopback port in {PORT_ATTEMPTS} attempts:\n"
                + _tail(self.log_path)
            )
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            self.version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        self.startup_seconds = time.monotonic() - started

    def _initdb(self) -> None:
        assert self.bin_dir is not None and self.base_dir is not None
        pwfile = self.base_dir / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        command = [
            str(self.bin_dir / "initdb"),
            "--pgdata",
            str(self.data_dir),
            "--username",
            self.user,
            "--pwfile",
            str(pwfile),
            "--auth",
            "scram-sha-256",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-sync",
        ]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "LC_ALL": "C"},
                **self._as,
            )
        finally:
            pwfile.unlink()
        if done.returncode != 0:
            raise ServerUnavailable(
                f"initdb failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
            )

    def _launch(self) -> bool:
        """Start the server on ``self.port``; ``False`` when the port was taken meanwhile."""
        assert self.bin_dir is not None
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "off",  # a throwaway cluster: nothing must survive a power cut
            "shared_buffers": "32MB",
            "max_connections": "100",
            "log_min_messages": "warning",
        }
        command = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            command += ["-c", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_parent_death_signal(),
                **self._as,
            )
        deadline = time.monotonic() + START_TIMEOUT
        pid_file = self.data_dir / "postmaster.pid"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                log_text = _tail(self.log_path)
                self._process = None
                if "could not bind" in log_text or "Address already in use" in log_text:
                    return False
                raise ServerUnavailable(f"the PostgreSQL server exited at start:\n{log_text}")
            with contextlib.suppress(OSError):
                lines = pid_file.read_text().splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready":
                    return True
            time.sleep(0.02)
        self.stop()
        raise ServerUnavailable(
            f"the PostgreSQL server did not become ready in {START_TIMEOUT:.0f} s:\n"
            + _tail(self.log_path)
        )

    def shut_down(self) -> None:
        """Stop the server process (fast shutdown, then immediate, then kill), keeping its
        data: ``start_again()`` brings it back on the same port. Idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            for sig, wait in ((signal.SIGINT, 30), (signal.SIGQUIT, 10), (signal.SIGKILL, 10)):
                process.send_signal(sig)
                try:
                    process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue

    def start_again(self) -> None:
        """Start a server that ``shut_down()`` stopped, on its data and port."""
        if not self._launch():
            raise ServerUnavailable(f"port {self.port} was taken while the server was down")

    def stop(self) -> None:
        """Stop the server and remove its directory. Idempotent."""
        self.shut_down()
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- helpers for tests -----------------------------------------------------------------

    def admin(self) -> psycopg.Connection[Any]:
        """A superuser connection (autocommit) for setting up and inspecting tests."""
        return psycopg.connect(self.conninfo(), autocommit=True)

    def drop_schema(self, schema: str) -> None:
        with self.admin() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
