"""``CoderAgent`` on trio: one Coder chat session driven turn by turn (state machines G, H;
D5, D7, D10, D17, D22; docs/architecture.md "Public API").

The agent's method bodies are runtime-neutral (``coder_io_asyncio.agent`` drives
``coder_proto._agent.agent_core.AgentCore``'s machines on the client's driver), so this class is that one
on the trio client, with trio's concurrency for tools: the calls of one pause run
concurrently in a nursery, plain (sync) tool functions in worker threads
(``trio.to_thread.run_sync``, abandoned if the turn is cancelled) and coroutine functions on
the trio loop.

Cancellation is trio's: a caller's ``trio.move_on_after`` / ``fail_after`` / cancelled
nursery around ``generate`` interrupts the run on the server (in the background, D22) and lets
``trio.Cancelled`` through unwrapped, so ``fail_after`` raises ``trio.TooSlowError``. Only
``request_timeout`` raises ``CoderChatError(kind="timeout")``. Disposal (``aclose`` /
leaving ``async with``) still happens from an already cancelled scope: it is shielded and
bounded by ``settle_deadline`` plus the 10 s background bound.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import ClassVar

import trio

from coder_io_asyncio import agent as _asyncio_agent
from coder_io_asyncio.client import CoderChatClient as _AsyncioClient
from coder_proto._actions import ToolOutcome
from coder_proto._agent.tool_calls import ToolInvocation
from coder_proto._constants import BACKGROUND_TASK_BOUND

from ._driver import cancelled_now
from .client import CoderChatClient

__all__ = ["AgentStream", "CoderAgent"]

#: Extra time a shielded disposal gets beyond its own bounds (closing sockets and tasks).
_CLOSE_GRACE = 3.0


class AgentStream(_asyncio_agent.AgentStream):
    """One streaming turn (``CoderAgent.stream``); use it as an async context manager.

    ``async for part in stream`` yields the output parts live; ``stream.text_stream`` yields
    only the text deltas' strings; ``await stream.get_final_result()`` returns the
    ``GenerateResult``. Leaving the block before the turn finished (a ``break``, an error, a
    cancelled scope) interrupts the run on the server.
    """


class CoderAgent(_asyncio_agent.CoderAgent):
    """A Coder Agents chat session on trio: the same constructor, methods and results as
    ``coder_io_asyncio.CoderAgent`` (see its documentation), inside ``trio.run``.

    ``client`` must be a ``coder_io_trio.CoderChatClient``; ``http_client`` an
    ``httpx.AsyncClient``. ``async with CoderAgent(...) as agent:`` disposes of the agent on
    exit (interrupt, then archive, H.5), even when the scope around it was cancelled.
    """

    _client_class: ClassVar[type[_AsyncioClient]] = CoderChatClient
    _stream_class: ClassVar[type[_asyncio_agent.AgentStream]] = AgentStream

    async def _invoke_all(self, invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
        return await invoke_all(invocations)

    async def aclose(self, *, archive: bool = True) -> None:
        """Dispose of the agent (H.5): see ``coder_io_asyncio.CoderAgent.aclose``. Called
        from a cancelled scope, the disposal is shielded and bounded (``settle_deadline``
        plus the 10 s background bound)."""
        if not cancelled_now():
            await super().aclose(archive=archive)
            return
        bound = self._core.session.config.settle_deadline + BACKGROUND_TASK_BOUND + _CLOSE_GRACE
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + (bound if math.isfinite(bound) else 60.0)
            await super().aclose(archive=archive)


async def invoke_all(invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
    """Run the calls of one pause concurrently in a nursery; one outcome per call, in order
    (a tool that raises is an error outcome, D5)."""
    outcomes: list[ToolOutcome | None] = [None] * len(invocations)

    async def one(index: int, invocation: ToolInvocation) -> None:
        outcomes[index] = await _invoke(invocation)

    async with trio.open_nursery() as nursery:
        for index, invocation in enumerate(invocations):
            nursery.start_soon(one, index, invocation)
    return [o for o in outcomes if o is not None]


async def _invoke(invocation: ToolInvocation) -> ToolOutcome:
    """Run one client tool: coroutine functions on the loop, plain ones in a worker thread."""
    try:
        if invocation.is_async:
            value = await invocation.call()
        else:
            value = await trio.to_thread.run_sync(invocation.call, abandon_on_cancel=True)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        return invocation.failed(exc)
    return invocation.succeeded(value)
