"""``CoderAgent`` on trio: one Coder chat session driven turn by turn (state machines G, H;
D5, D7, D10, D17, D22; ``coder_io_common._async.agent``).

The calls of one pause run concurrently in a nursery, plain (sync) tool functions in worker
threads (``trio.to_thread.run_sync``, abandoned if the turn is cancelled) and coroutine
functions on the trio loop.

Cancellation is trio's: a caller's ``trio.move_on_after`` / ``fail_after`` / cancelled
nursery around ``generate`` interrupts the run on the server (in the background, D22) and lets
``trio.Cancelled`` through unwrapped, so ``fail_after`` raises ``trio.TooSlowError``. Only
``request_timeout`` raises ``CoderChatError(kind="timeout")``. Disposal (``aclose`` /
leaving ``async with``) still happens from an already cancelled scope: it is shielded and
bounded by ``settle_deadline`` plus the 10 s background bound.
"""

from __future__ import annotations

from typing import Any, ClassVar

from coder_io_common._async import agent

from .client import CoderChatClient

__all__ = ["AgentStream", "CoderAgent"]


class AgentStream(agent.AgentStream):
    """One streaming turn (``CoderAgent.stream``); use it as an async context manager.

    ``async for part in stream`` yields the output parts live; ``stream.text_stream`` yields
    only the text deltas' strings; ``await stream.get_final_result()`` returns the
    ``GenerateResult``. Leaving the block before the turn finished (a ``break``, an error, a
    cancelled scope) interrupts the run on the server.
    """


class CoderAgent(agent.CoderAgent):
    """A Coder Agents chat session on trio: the same constructor, methods and results as
    ``coder_io_asyncio.CoderAgent``, inside ``trio.run``.

    ``client`` must be a ``coder_io_trio.CoderChatClient``; ``http_client`` an
    ``httpx.AsyncClient``. Settings: ``options`` (an ``AgentOptions``) and the same settings
    as keywords, a keyword passed explicitly overriding the field of ``options``. ``async
    with CoderAgent(...) as agent:`` disposes of the agent on exit (interrupt, then archive,
    H.5), even when the scope around it was cancelled.
    """

    _client_class: ClassVar[type[Any]] = CoderChatClient
    _stream_class: ClassVar[type[agent.AgentStream]] = AgentStream
