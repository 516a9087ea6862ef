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
from collections.abc import Callable
from typing import Any, ClassVar

from coder_io_common.files import read_upload_path
from coder_proto._errors import CoderAgentError
from coder_proto._rest.uploads import UploadPlan

__all__ = ["BLOCKING", "BlockingRuntime", "discard"]


class BlockingRuntime:
    """The calling thread, as the runtime of the generated blocking layer."""

    name: ClassVar[str] = "sync"

    def __init__(self) -> None:
        #: The adapter's logger.
        self.logger = logging.getLogger("coder_io_sync")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def to_thread(self, fn: Callable[..., Any], /, *args: Any, abandon_on_cancel: bool = False) -> Any:
        """``fn(*args)``, in the calling thread (the thread that would wait anyway)."""
        return fn(*args)

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


#: The one blocking runtime (``Driver.runtime``).
BLOCKING = BlockingRuntime()
