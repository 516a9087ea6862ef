"""``CoderChatClient.watch_chats()`` on trio: the ``/watch`` subscription as an async iterator
and async context manager (wire 6; ``coder_io_common._async.watch``)."""

from __future__ import annotations

from coder_io_common._async import watch

__all__ = ["ChatWatch"]


class ChatWatch(watch.ChatWatch):
    """Chat lifecycle events for every chat the user can see (wire 6), inside ``trio.run``::

        async with client.watch_chats() as watch:
            async for event in watch:
                print(event.kind, event.chat.id, event.chat.status)

    The subscription starts at the first ``__anext__`` (or on entering the ``async with``):
    the prefix preflight runs then, and its error propagates. Dropped connections are redialed
    forever with backoff (1 s doubling to 30 s, reset once an event is delivered); a 4xx
    upgrade rejection raises a terminal ``CoderApiError``. Leaving the ``async with``,
    ``aclose()``, cancelling the scope that iterates, or dropping the iterator tears the
    socket down at once, even while a read is pending (a dropped iterator's teardown runs at
    the loop's next turn). Nothing here emits ``ws:*`` events.
    """
