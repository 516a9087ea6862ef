"""What an event-loop runtime supplies to the async layer (``AsyncRuntime``).

The async layer (this package) is written once; asyncio (``coder_io_asyncio._runtime``) and
trio (``coder_io_trio._runtime``) each give it one ``AsyncRuntime``: how to start a task that
belongs to a client rather than to its caller, to run a blocking function in a worker thread,
to wait for an event (at most so long), to wake up at a deadline, to run a group of tasks,
how the runtime's cancellation is recognised and let through, and how bytes move on a stream
socket. Nothing else in the layer knows which runtime runs it.

Cancellation differs between the two runtimes, and the interface says where: asyncio delivers
a cancellation once (code after it may await again), trio's is level-triggered (every
checkpoint inside a cancelled scope raises again), so cleanup that must still happen after
the caller's cancellation runs in ``finishing`` / ``shield`` blocks, which are no-ops on
asyncio.
"""

from __future__ import annotations

import abc
import functools
import inspect
import logging
import ssl
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, ClassVar, Protocol

from coder_io_common.files import (
    read_upload_path,
)
from coder_proto import (
    CoderAgentError,
    Conn,
)
from coder_proto.adapter import (
    UploadPlan,
)

__all__ = [
    "CLOSE_GRACE",
    "AsyncRuntime",
    "Cut",
    "Event",
    "LoopToken",
    "SocketHost",
    "Spawned",
    "TaskGroup",
    "Timer",
]

#: How long closing a socket gracefully may take (our end sent after the last bytes, the
#: peer's end awaited) before it is closed anyway.
CLOSE_GRACE = 1.0


class Spawned(Protocol):
    """A task the runtime started. ``lingering`` marks a task that finishes on its own (a
    socket closing gracefully): a closing client gives it a grace period before cancelling
    it."""

    lingering: bool

    def cancel(self) -> None:
        """Cancel the task (idempotent; nothing happens once it ended)."""


class Event(Protocol):
    """A one-shot event (``asyncio.Event``, ``trio.Event``): once set it stays set; a waiter
    that needs a fresh one creates a new event."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self) -> Awaitable[Any]:
        """What to await until the event is set (a coroutine, or a runtime's bare future)."""


class Cut(Protocol):
    """What ``AsyncRuntime.cut_after`` yields: whether its time ran out (the block was cut)."""

    expired: bool


class Timer(Protocol):
    """Calls its callback once the time given to ``arm`` came (``time.monotonic`` seconds)."""

    def arm(self, due: float | None) -> None:
        """Call the callback at ``due`` (``None``: not at all), replacing the earlier time."""

    def close(self) -> None:
        """Stop for good."""


class TaskGroup(Protocol):
    """Tasks whose lifetime is a block (``AsyncRuntime.task_group``)."""

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Spawned:
        """Run ``fn(*args)`` in a task of the group."""

    def cancel(self) -> None:
        """Cancel every task of the group."""


class LoopToken(Protocol):
    """A handle on the running loop, usable from any thread and from a finalizer."""

    def run_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Have the loop call ``fn(*args)`` (raises when the loop is gone)."""


class SocketHost(Protocol):
    """What a runtime's socket code reports to (the driver): every outcome of a socket is one
    call, which feeds the core and performs what it answers."""

    @property
    def ssl(self) -> ssl.SSLContext:
        """The TLS context of the stream sockets (from the client's ``verify``)."""

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> Spawned:
        """Start a task owned by the client (``AsyncRuntime.spawn``)."""

    def adopt(self, task: Spawned) -> Callable[[Spawned], None]:
        """Hold ``task``, which the runtime started on its own (a socket's reader), as a
        task of the client (its close cancels and awaits it); the callable returned is to
        be called with it when it ended."""

    def socket_made(self, conn: Conn) -> None: ...

    def socket_data(self, conn: Conn, data: bytes) -> None: ...

    def socket_lost(self, conn: Conn) -> None: ...

    def socket_failed(self, conn: Conn, error: BaseException) -> None: ...


class AsyncRuntime(abc.ABC):
    """An event-loop runtime, as the async layer uses it (see the module docstring)."""

    #: The runtime's name (``"asyncio"``, ``"trio"``).
    name: ClassVar[str]
    #: The runtime's own cancellation (``asyncio.CancelledError``, ``trio.Cancelled``): the
    #: layer catches it to clean up and re-raises it as it came, never wrapped (D22).
    cancelled: ClassVar[type[BaseException]]

    def __init__(self) -> None:
        #: The adapter's logger (``coder_io_asyncio``, ``coder_io_trio``).
        self.logger = logging.getLogger(f"coder_io_{self.name}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    # -- tasks ------------------------------------------------------------------------------

    @abc.abstractmethod
    def spawn(
        self,
        fn: Callable[..., Awaitable[None]],
        *args: Any,
        done: Callable[[Spawned], None] | None = None,
    ) -> Spawned:
        """Run ``fn(*args)`` in a task that belongs to a client, not to the task calling: the
        caller's cancellation never reaches it (the interrupt a cancelled turn fires must
        still be sent, D22). ``done`` is called with the task when it ended, however it
        ended. An exception it raises is logged, never propagated."""

    @abc.abstractmethod
    def task_group(self) -> AbstractAsyncContextManager[TaskGroup]:
        """A block whose tasks end with it: leaving it normally waits for them; an exception
        out of the block (the caller's cancellation) cancels them, waits for them and is
        re-raised as it came (never in an exception group)."""

    # -- waiting -----------------------------------------------------------------------------

    @abc.abstractmethod
    def event(self) -> Event:
        """A new event."""

    @abc.abstractmethod
    async def wait(self, event: Event, timeout: float | None) -> bool:
        """Wait until ``event`` is set, at most ``timeout`` seconds (``None``: no limit);
        whether it was set."""

    @abc.abstractmethod
    def cut_after(self, seconds: float | None) -> AbstractAsyncContextManager[Cut]:
        """A block cut short ``seconds`` after it began (``None``: never): the work awaited
        inside is cancelled, the block ends without an exception and the ``Cut`` it yields
        says ``expired``. A cancellation from outside passes through as it came. This is
        how a REST call gets a total deadline (D29): however slowly the server sends, the
        whole exchange ends by then."""

    @abc.abstractmethod
    def timer(self, callback: Callable[[], None]) -> Timer:
        """A timer calling ``callback`` (on the loop) at the time it is armed for."""

    @abc.abstractmethod
    def semaphore(self, value: int) -> AbstractAsyncContextManager[Any]:
        """A semaphore: ``async with`` it to hold one of ``value`` places, in arrival
        order."""

    @abc.abstractmethod
    def loop_token(self) -> LoopToken:
        """The running loop's token (``LoopToken``); called on the loop."""

    @abc.abstractmethod
    def current_loop(self) -> object:
        """What identifies the running loop, the same object for the whole of its life (an
        asyncio loop, a trio run's token); called on the loop."""

    # -- threads -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def to_thread(
        self, fn: Callable[..., Any], /, *args: Any, abandon_on_cancel: bool = False
    ) -> Any:
        """``fn(*args)`` in a worker thread, without blocking the loop; its value, whatever it
        is (an awaitable too: awaiting it is the caller's business). With
        ``abandon_on_cancel`` the caller's cancellation returns at once and leaves the thread
        to finish on its own (a client tool); otherwise the thread is waited for (a store
        write completes before the cancellation is delivered; asyncio never waits)."""

    async def read_upload(self, plan: UploadPlan) -> object:
        """The bytes of a path or file-object upload, read in a worker thread. A path over
        10 MiB is refused before it is read (wire 7); read errors are ``CoderAgentError``. A
        file object whose ``read`` is a coroutine function is awaited."""
        if plan.path is not None:
            return await self.to_thread(read_upload_path, plan.path)
        read = plan.stream.read
        try:
            if inspect.iscoroutinefunction(read):
                return await read()
            data = await self.to_thread(read)
            if inspect.isawaitable(data):
                return await data
            return data
        except OSError as exc:
            raise CoderAgentError(f"cannot read the file to upload: {exc}") from exc

    async def call(self, fn: Callable[..., Any], what: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn``, a user's function (``what`` names it: a store method, a tool):
        coroutine functions are awaited, plain ones run in a worker thread (their awaitable
        result awaited)."""
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        if kwargs:
            fn = functools.partial(fn, **kwargs)
        value = await self.to_thread(fn, *args)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (the caller's cancellation ends it)."""
        await self.wait(self.event(), seconds)

    async def awaited(self, value: Awaitable[Any], what: str) -> Any:
        """The value of an awaitable that ``what`` (a user's function) returned: awaited here
        (the blocking adapter refuses it)."""
        return await value

    # -- cancellation ------------------------------------------------------------------------

    @abc.abstractmethod
    def shield(self, timeout: float | None = None) -> AbstractContextManager[Any]:
        """A block of cleanup the caller's cancellation does not interrupt (closing what was
        opened). Where a cancellation is level-triggered (trio) the block is shielded and cut
        after ``timeout`` seconds (``None``: no bound), so that it cannot hang a cancelled
        caller; asyncio delivers a cancellation once, and runs the block as it is."""

    @abc.abstractmethod
    def finishing(self, timeout: float) -> AbstractContextManager[Any]:
        """A block of cleanup that must still happen when the calling task is already
        cancelled: ``shield(timeout)`` then, the block as it is otherwise."""

    # -- I/O ---------------------------------------------------------------------------------

    @abc.abstractmethod
    def prepare_http(self) -> None:
        """Import what the runtime's first HTTP request would import lazily, when a client is
        created, so that a caller's first deadline is spent on the request (no I/O)."""

    @abc.abstractmethod
    def open_socket(self, host: SocketHost, conn: Conn) -> None:
        """Connect ``conn`` (TCP, then TLS with ``host.ssl`` when ``conn.tls``, verifying
        ``conn.server_hostname``), bounded by the connect timeout, then read it until it
        ends: every outcome is reported to ``host``. Keeps its state in ``conn.io``."""

    @abc.abstractmethod
    def write_socket(self, conn: Conn, data: bytes) -> None:
        """Send ``data`` on ``conn`` after what was sent before. When more than
        ``MAX_UNSENT`` bytes were still waiting to be sent before this write, the peer reads
        nothing: the connection is dropped at once and reported to the host as failed
        (``socket_failed``, D30), from the socket's own task."""

    @abc.abstractmethod
    def close_socket(self, conn: Conn) -> None:
        """Close ``conn``: what was written before still goes out, and the peer's end is
        awaited, for at most ``CLOSE_GRACE`` seconds; then the connection is aborted (D30).
        The socket's task lingers until then (``Spawned.lingering``)."""
