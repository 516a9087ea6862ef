"""``FakeCoderServer``: the fake Coder model served on loopback, its lifecycle (an event loop of
its own in a thread, or the caller's asyncio loop) and the ticker that runs the model's
workers at their deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, cast

import attrs
import h11

from coder_proto.fake import FakeCoderModel, FakeConfig, FakeCounters, Faults

from ._http import serve_connection
from ._locked import Locked
from ._serving import Serving, Trace, wait_event
from ._websocket import CLOSE_TIMEOUT

__all__ = ["FakeCoderServer"]

logger = logging.getLogger("coder_integrations.fake_server")


class FakeCoderServer:
    """A fake Coder deployment on ``127.0.0.1`` (see the package docstring).

    ``config`` and ``faults`` default to fresh ones; ``token`` defaults to a random session
    token (``config.token`` is replaced by it); ``config_overrides`` set ``FakeConfig`` fields
    (for example ``chunk_delay=0``, ``legacy_only=True``, ``stamp_promotions=False``). The
    model's wall clock is set to the real one. ``trace``, a function taking one line of text,
    receives a line per request, upgrade, WebSocket frame sent and connection end.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        config: FakeConfig | None = None,
        faults: Faults | None = None,
        ping_interval: float = 15.0,
        ping_timeout: float = 15.0,
        trace: Callable[[str], None] | None = None,
        **config_overrides: Any,
    ) -> None:
        config = config if config is not None else FakeConfig()
        known = {f.name for f in attrs.fields(FakeConfig)}
        for key, value in config_overrides.items():
            if key not in known:
                raise TypeError(f"unknown FakeConfig field {key!r}")
            setattr(config, key, value)
        config.token = token if token is not None else "fake-" + secrets.token_hex(16)
        config.wall_clock_offset = time.time() - time.monotonic()
        self._model = FakeCoderModel(config, faults)
        self._serving = Serving(
            self._model,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            trace=Trace(trace) if trace is not None else None,
        )
        self._lock = self._serving.lock
        self.host = host
        self._requested_port = port
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop_event: asyncio.Event | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # -- public values ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The deployment's base URL, for example ``http://127.0.0.1:53211``."""
        return f"http://{self.host}:{self.port}"

    @property
    def token(self) -> str:
        """The session token clients must send."""
        return self._model.config.token

    @property
    def organization_id(self) -> str:
        """The one organization the fake serves (``users/me`` lists it)."""
        return self._model.organization_id

    @property
    def ping_interval(self) -> float:
        return self._serving.ping_interval

    @ping_interval.setter
    def ping_interval(self, seconds: float) -> None:
        self._serving.ping_interval = seconds

    @property
    def ping_timeout(self) -> float:
        return self._serving.ping_timeout

    @ping_timeout.setter
    def ping_timeout(self, seconds: float) -> None:
        self._serving.ping_timeout = seconds

    @property
    def model(self) -> FakeCoderModel:
        """The model, behind the server's lock (safe from any thread)."""
        return cast(FakeCoderModel, Locked(self._model, self._lock, self.notify))

    @property
    def config(self) -> FakeConfig:
        return cast(FakeConfig, Locked(self._model.config, self._lock, self.notify))

    @property
    def faults(self) -> Faults:
        return cast(Faults, Locked(self._model.faults, self._lock, self.notify))

    @property
    def counters(self) -> FakeCounters:
        return cast(FakeCounters, Locked(self._model.counters, self._lock, self.notify))

    @property
    def open_connections(self) -> int:
        """TCP connections currently open (HTTP and WebSocket)."""
        with self._lock:
            return self._model.counters.open_connections

    @property
    def open_websockets(self) -> int:
        with self._lock:
            return self._model.counters.open_websockets

    def __repr__(self) -> str:
        return f"<FakeCoderServer {self.url}>"

    # -- waking -----------------------------------------------------------------------------

    def notify(self) -> None:
        """Wake the server's ticker and every connection (after a change to the model).
        Safe from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() == self._loop_thread_id:
            self._serving.wake_all()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._serving.wake_all)

    # -- asyncio lifecycle --------------------------------------------------------------------

    async def start_async(self) -> None:
        """Start serving in the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._serving.stopping = False
        self._serving.tick_wake = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._server = await asyncio.start_server(
            self._handle_connection, self.host, self._requested_port
        )
        sockname = self._server.sockets[0].getsockname()
        self.port = int(sockname[1])
        with self._lock:
            self._model.config.access_url = self.url
        self._ticker = asyncio.create_task(self._tick_loop())

    async def stop_async(self) -> None:
        """Stop serving: close the listener and every connection. Idempotent."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        # Besides the cancellation: a loop that was being woken at this very moment must not
        # carry on (a cancellation racing a wake-up used to be lost, and the connection then
        # lasted until its next ping timed out).
        self._serving.stopping = True
        self._serving.wake_all()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if self._ticker is not None:
            self._ticker.cancel()
            tasks.append(self._ticker)
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1.0)

    async def __aenter__(self) -> FakeCoderServer:
        await self.start_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop_async()

    async def serve_forever(self, ready: Callable[[FakeCoderServer], None] | None = None) -> None:
        """Serve until cancelled (or ``stop()`` from another thread); ``ready`` is called
        once the URL is known."""
        await self.start_async()
        assert self._stop_event is not None
        try:
            if ready is not None:
                ready(self)
            await self._stop_event.wait()
        finally:
            await self.stop_async()

    # -- thread lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeCoderServer:
        """Start serving on an event loop in a background thread; returns once listening."""
        if self._thread is not None:
            raise RuntimeError("this FakeCoderServer is already running")
        self._started.clear()
        self._thread = threading.Thread(
            target=self._thread_main, name="fake-coder-server", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            self._thread = None
            raise self._start_error
        return self

    def _thread_main(self) -> None:
        def ready(_server: FakeCoderServer) -> None:
            self._started.set()

        try:
            asyncio.run(self.serve_forever(ready))
        except BaseException as exc:  # reported to the starting thread
            self._start_error = exc
            self._started.set()

    def stop(self) -> None:
        """Stop the background thread's server and wait for it. Idempotent."""
        thread = self._thread
        if thread is None:
            return
        loop, stop = self._loop, self._stop_event
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join()
        self._thread = None

    def __enter__(self) -> FakeCoderServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- waiting helpers ----------------------------------------------------------------------

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until no connection is open (``True``) or ``timeout`` passes (``False``).
        For threaded use; from the server's own loop use ``wait_idle_async``."""
        deadline = time.monotonic() + timeout
        while self.open_connections:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    async def wait_idle_async(self, timeout: float = 5.0) -> bool:
        """``wait_idle`` without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while self.open_connections:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.002)
        return True

    # -- the ticker and the connections ----------------------------------------------------------

    async def _tick_loop(self) -> None:
        """Run the model's workers at their deadlines and wake the connections after each
        step."""
        serving = self._serving
        wake = serving.tick_wake
        assert wake is not None
        while not serving.stopping:
            with self._lock:
                deadline = self._model.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            await wait_event(wake, timeout)
            wake.clear()
            with self._lock:
                self._model.tick(time.monotonic())
                advanced = self._model.drain_advanced()
            serving.wake_chats(advanced)

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        with self._lock:
            counters = self._model.counters
            counters.open_connections += 1
            counters.total_connections += 1
            conn_id = counters.total_connections
        try:
            await serve_connection(self._serving, conn_id, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, h11.RemoteProtocolError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in the fake: log it, drop the connection
            logger.exception("fake server connection failed")
        finally:
            self._tasks.discard(task)
            writer.close()
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await writer.wait_closed()
            except (Exception, asyncio.CancelledError):
                # A client that reads nothing keeps our buffered bytes: drop them.
                writer.transport.abort()
            self._serving.count("open_connections", -1)
