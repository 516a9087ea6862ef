"""What the blocking adapter supplies where the async layer asks its runtime
(``coder_io_common._async.runtime.AsyncRuntime``): the layer in ``coder_io_sync._sync`` is
written from the async one (``.ci/unasync.py``), and its calls of the runtime land here.

Nothing here runs an event loop: a "worker thread" is the calling thread, a block of cleanup
needs no shield, and what would be awaited on a loop (a coroutine function's file object) is
refused with a clear error.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from coder_io_common.files import read_upload_path
from coder_proto import CoderAgentError
from coder_proto.adapter import UploadPlan

__all__ = [
    "BlockingRuntime",
    "Cancelled",
    "Event",
    "Spawned",
    "TaskGroup",
    "discard",
]

#: A one-shot event (what ``AsyncRuntime.event`` gives on a loop).
Event = threading.Event


class Cancelled(BaseException):
    """The task of a ``TaskGroup`` that raises it was cancelled: its wait (``sleep``) ended
    early. It ends the task quietly."""


class Spawned:
    """A thread of a ``TaskGroup``. Cancelling it ends the waits it makes (``sleep``) with
    ``Cancelled``; what it is doing otherwise finishes."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.thread: threading.Thread | None = None

    def cancel(self) -> None:
        """Cancel the task and wait for its thread to end: once ``cancel`` returns, the task
        does nothing more (the lease's renewal writes nothing after it was stopped)."""
        self.cancelled.set()
        assert self.thread is not None
        self.thread.join()


class _Current(threading.local):
    task: Spawned | None = None


_CURRENT = _Current()


class TaskGroup:
    """Threads whose lifetime is a block (``BlockingRuntime.task_group``)."""

    def __init__(self) -> None:
        self._tasks: list[Spawned] = []

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> Spawned:
        """Run ``fn(*args)`` in a thread of the group; its cancellation quietly ends it."""
        task = Spawned()

        def main() -> None:
            _CURRENT.task = task
            with contextlib.suppress(Cancelled):
                fn(*args)

        task.thread = threading.Thread(target=main, name="coder-io-sync-task", daemon=True)
        self._tasks.append(task)
        task.thread.start()
        return task

    def cancel(self) -> None:
        """Cancel every task of the group, and wait for their threads."""
        for task in self._tasks:
            task.cancel()

    def join(self) -> None:
        """Wait for every task of the group."""
        for task in self._tasks:
            assert task.thread is not None
            task.thread.join()


class BlockingRuntime:
    """The calling thread, as the runtime of the generated blocking layer."""

    name: ClassVar[str] = "sync"

    def __init__(self, sleep: Callable[[float], None]) -> None:
        #: The adapter's logger.
        self.logger = logging.getLogger("coder_io_sync")
        #: A sleep that a deferred Ctrl-C interrupts (``coder_io_sync._driver``).
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    #: What ends a blocking call from outside: Ctrl-C.
    cancelled: ClassVar[type[BaseException]] = KeyboardInterrupt

    def to_thread(
        self, fn: Callable[..., Any], /, *args: Any, abandon_on_cancel: bool = False
    ) -> Any:
        """``fn(*args)``, in the calling thread (the thread that would wait anyway)."""
        return fn(*args)

    def call(self, fn: Callable[..., Any], what: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn``, a user's function (``what`` names it: a store method, a tool). Nothing
        here runs an event loop: a coroutine function, or an awaitable result, is refused
        (``CoderAgentError``)."""
        if inspect.iscoroutinefunction(fn):
            raise CoderAgentError(
                f"{what} is a coroutine function; the blocking adapter (coder_io_sync) needs "
                "plain functions"
            )
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            discard(value)
            raise CoderAgentError(
                f"{what} returned an awaitable; the blocking adapter (coder_io_sync) needs plain "
                "functions"
            )
        return value

    def event(self) -> threading.Event:
        """A new event."""
        return threading.Event()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``: in a task of a ``TaskGroup``, until the task is cancelled
        (``Cancelled``); otherwise a sleep that a deferred Ctrl-C interrupts at once."""
        task = _CURRENT.task
        if task is None:
            self._sleep(seconds)
        elif task.cancelled.wait(seconds):
            raise Cancelled

    @contextlib.contextmanager
    def task_group(self) -> Iterator[TaskGroup]:
        """A block whose threads end with it: leaving it waits for them; an exception out of
        the block cancels them first."""
        group = TaskGroup()
        try:
            yield group
        except BaseException:
            group.cancel()
            raise
        group.join()

    def prepare_http(self) -> None:
        """Nothing to import ahead: ``httpx.Client`` imports what it needs with the client."""

    def finishing(self, timeout: float) -> contextlib.AbstractContextManager[Any]:
        """A block of cleanup: nothing cancels a blocking call from outside, so the block
        runs as it is."""
        return contextlib.nullcontext()

    def awaited(self, value: object, what: str) -> Any:
        """An awaitable that ``what`` (a user's function) returned: refused
        (``CoderAgentError``), since nothing here runs an event loop; a coroutine is closed
        first, so that it is not reported as never awaited."""
        discard(value)
        raise CoderAgentError(
            f"{what} returned an awaitable; the blocking adapter (coder_io_sync) needs a plain "
            "method"
        )

    def read_upload(self, plan: UploadPlan) -> object:
        """The bytes of a path or file-object upload. A path over 10 MiB is refused before it
        is read (wire 7); read errors are ``CoderAgentError``; a file object whose ``read`` is
        a coroutine function is refused (the blocking adapter reads plain files)."""
        if plan.path is not None:
            return read_upload_path(plan.path)
        read = plan.stream.read
        if inspect.iscoroutinefunction(read):
            raise CoderAgentError(
                "the file object's read() is a coroutine function; the blocking adapter "
                "(coder_io_sync) needs a plain binary file object"
            )
        try:
            return read()
        except OSError as exc:
            raise CoderAgentError(f"cannot read the file to upload: {exc}") from exc


def discard(value: object) -> None:
    """Close an awaitable nobody will await (a coroutine), if it can be closed."""
    close = getattr(value, "close", None)
    if callable(close):
        close()
