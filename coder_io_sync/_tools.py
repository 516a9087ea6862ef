"""How the blocking adapter runs client tools (D5), where the event-loop adapters use
``coder_io_common._async.tools``: plain functions only, the calls of one pause each in a
thread of its own when there are several (the driver already runs the batch outside the
thread that reads the stream); a coroutine function, or a function that returns an
awaitable, gets an error result, since nothing here runs an event loop."""

from __future__ import annotations

import concurrent.futures
import inspect
from collections.abc import Sequence

from coder_io_common.observer import AgentObserver, observed_tool
from coder_proto import CoderAgentError, ToolInvocation
from coder_proto.adapter import ToolOutcome

from ._runtime import BlockingRuntime, discard

__all__ = ["invoke", "invoke_all"]


def invoke_all(
    runtime: BlockingRuntime,
    invocations: Sequence[ToolInvocation],
    observer: AgentObserver | None = None,
) -> list[ToolOutcome]:
    """Run the calls of one pause; one outcome per call, in order (a tool that raises is an
    error outcome, D5). Several calls run concurrently, each in a thread of its own. Each call
    runs inside ``observer``'s tool hook, if any."""
    call = observed_tool(observer, invoke)
    if len(invocations) == 1:
        return [call(invocations[0])]
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=len(invocations), thread_name_prefix="coder-io-sync-tool"
    ) as pool:
        return list(pool.map(call, invocations))


def invoke(invocation: ToolInvocation) -> ToolOutcome:
    """Run one client tool. The blocking adapter runs plain functions: a coroutine function,
    or a function that returns an awaitable, gets an error result (D5)."""
    if invocation.is_async:
        return invocation.failed(
            CoderAgentError(
                f"tool {invocation.tool.name!r} is a coroutine function; the blocking adapter "
                "(coder_io_sync) runs plain functions"
            )
        )
    try:
        value = invocation.call()
    except Exception as exc:
        return invocation.failed(exc)
    if inspect.isawaitable(value):
        discard(value)
        return invocation.failed(
            CoderAgentError(
                f"tool {invocation.tool.name!r} returned an awaitable; the blocking adapter "
                "(coder_io_sync) runs plain functions"
            )
        )
    return invocation.succeeded(value)
