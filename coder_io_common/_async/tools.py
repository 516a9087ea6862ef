"""How the event-loop adapters run client tools (D5): the calls of one pause concurrently, in
a task group of the runtime; coroutine functions on the loop, plain ones in worker threads.
The blocking adapter's counterpart is ``coder_io_sync._tools`` (the layer written from this
package imports one or the other)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from coder_io_common.observer import AgentObserver, observed_async_tool
from coder_proto import ToolInvocation
from coder_proto.adapter import ToolOutcome

from .runtime import AsyncRuntime

__all__ = ["invoke_all"]


async def invoke_all(
    runtime: AsyncRuntime,
    invocations: Sequence[ToolInvocation],
    observer: AgentObserver | None = None,
) -> list[ToolOutcome]:
    """Run the calls of one pause concurrently; one outcome per call, in order (a tool that
    raises is an error outcome, D5). The caller's cancellation cancels them all. Each call
    runs inside ``observer``'s tool hook, if any."""
    outcomes: list[ToolOutcome | None] = [None] * len(invocations)
    invoke = observed_async_tool(observer, _invoke)

    async def one(index: int, invocation: ToolInvocation) -> None:
        outcomes[index] = await invoke(runtime, invocation)

    async with runtime.task_group() as group:
        for index, invocation in enumerate(invocations):
            group.start_soon(one, index, invocation)
    return [o for o in outcomes if o is not None]


async def _invoke(runtime: AsyncRuntime, invocation: ToolInvocation) -> ToolOutcome:
    """Run one client tool: coroutine functions on the loop, plain ones in a worker thread
    (abandoned if the turn is cancelled)."""
    try:
        if invocation.is_async:
            value = await invocation.call()
        else:
            value = await runtime.to_thread(invocation.call, abandon_on_cancel=True)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        return invocation.failed(exc)
    return invocation.succeeded(value)
