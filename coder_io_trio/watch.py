"""``CoderChatClient.watch_chats()`` on trio: the ``/watch`` subscription as an async iterator
and async context manager (wire 6; the machine is ``coder_proto.watch``). The iteration is
``coder_io_asyncio``'s (runtime-neutral); only the teardown of a dropped iterator differs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from coder_io_asyncio import watch as _asyncio_watch
from coder_proto.constants import V2_PREFIX
from coder_proto.watch import WatchBackoff

if TYPE_CHECKING:
    from ._driver import VerifyTypes

__all__ = ["ChatWatch", "watch_chats"]


class ChatWatch(_asyncio_watch.ChatWatch):
    """Chat lifecycle events for every chat the user can see (wire 6)::

        async with client.watch_chats() as watch:
            async for event in watch:
                print(event.kind, event.chat.id, event.chat.status)

    The subscription starts at the first ``__anext__`` (or on entering the ``async with``):
    the prefix preflight runs then, and its error propagates. Dropped connections are redialed
    forever with backoff (1 s doubling to 30 s, reset once an event is delivered); a 4xx
    upgrade rejection raises a terminal ``CoderApiError``. Leaving the ``async with``,
    ``aclose()``, cancelling the scope that iterates, or dropping the iterator tears the
    socket down at once, even while a read is pending.
    """

    _token: trio.lowlevel.TrioToken | None = None

    def _bind(self) -> None:
        self._token = trio.lowlevel.current_trio_token()

    def _cancel_soon(self, run: Any) -> None:
        token = self._token
        if token is not None:
            # From the garbage collector: hand the cancel to the trio loop (any thread).
            token.run_sync_soon(run.cancel, None)


def watch_chats(
    base_url: str | None = None,
    token: str | None = None,
    *,
    verify: VerifyTypes = True,
    backoff: WatchBackoff | None = None,
) -> ChatWatch:
    """The standalone watch (the reference's ``watchChatEvents``, wire 1.5, 6): no client of
    your own and no preflight; it dials ``/api/v2/chats/watch`` directly. ``base_url`` and
    ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN``. Use
    ``CoderChatClient.watch_chats()`` for prefix selection on older servers."""
    from .client import CoderChatClient

    client = CoderChatClient(base_url, token, verify=verify, prefix=V2_PREFIX)
    return ChatWatch(client, backoff=backoff, owns_client=True)
