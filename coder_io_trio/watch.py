"""``CoderChatClient.watch_chats()`` on trio: the ``/watch`` subscription as an async iterator
and async context manager (wire 6; the machine is ``coder_proto._stream.watch``, the consumer's rules
``coder_proto._shells.watch_feed``). The iteration is ``coder_io_asyncio``'s (runtime-neutral); only
the teardown of a dropped iterator differs."""

from __future__ import annotations

from typing import Any

import trio

from coder_io_asyncio import watch as _asyncio_watch

__all__ = ["ChatWatch"]


class ChatWatch(_asyncio_watch.ChatWatch):
    """Chat lifecycle events for every chat the user can see (wire 6), inside ``trio.run``:
    the behaviour of ``coder_io_asyncio.ChatWatch``, with trio's cancellation (cancelling
    the scope that iterates tears the socket down at once)."""

    _token: trio.lowlevel.TrioToken | None = None

    def _bind(self) -> None:
        self._token = trio.lowlevel.current_trio_token()

    def _cancel_soon(self, run: Any) -> None:
        token = self._token
        if token is not None:
            # From the garbage collector: hand the cancel to the trio loop (any thread).
            token.run_sync_soon(run.cancel, None)
