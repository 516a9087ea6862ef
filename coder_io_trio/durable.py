"""Durable workflows on trio: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``).

The functions are ``coder_io_asyncio.durable``'s (``DurableFunctions``, runtime-neutral) on a
trio ``DurableRuntime``: a ``DurableStore``'s plain methods and plain tool functions run in
worker threads (``trio.to_thread.run_sync``: a write may wait on another process's lock,
which must never stall the trio loop), an ``AsyncDurableStore``'s coroutines are awaited,
the calls of one pause run in a nursery, and a durable machine's concurrent work runs in a
nursery of its own. Cancellation is trio's: a cancelled scope around ``run_turn`` interrupts
the turn (D22); the checkpoint is still written, shielded and bounded, before
``trio.Cancelled`` propagates.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, ClassVar

import trio

from coder_io_asyncio import durable as _asyncio_durable
from coder_proto._actions import ToolOutcome
from coder_proto._agent.tool_calls import ToolInvocation
from coder_proto.durable._runtime import tool_binder

from .agent import CoderAgent, invoke_all
from .client import CoderChatClient

__all__ = ["archive_workflow", "bind_tools", "run_turn", "sweep_orphans"]

#: How long the checkpoint writes after a cancelled turn may take (they run shielded).
_AFTER_CANCEL_BOUND = 30.0


class _Tasks:
    """The concurrent work of one durable machine's drive: a nursery of keyed tasks, each in
    its own cancel scope, each waking the drive when it ends."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._scopes: dict[tuple[str, int], trio.CancelScope] = {}
        self._wake = trio.Event()
        self._nursery = nursery

    def spawn(self, key: tuple[str, int], work: Awaitable[None]) -> None:
        scope = self._scopes[key] = trio.CancelScope()
        self._nursery.start_soon(self._task, key, scope, work)

    async def _task(self, key: tuple[str, int], scope: trio.CancelScope, work: Any) -> None:
        try:
            with scope:
                await work
        finally:
            if self._scopes.get(key) is scope:
                del self._scopes[key]
            self._wake.set()

    def cancel(self, key: tuple[str, int]) -> None:
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()

    async def wait(self, timeout: float | None) -> None:
        """Until a task ended, at most ``timeout`` seconds."""
        self._wake = trio.Event()
        with trio.move_on_after(math.inf if timeout is None else timeout):
            await self._wake.wait()


class _TrioRuntime(_asyncio_durable.DurableRuntime):
    """Durable effects on trio (see the module docstring)."""

    cancelled: ClassVar[type[BaseException]] = trio.Cancelled

    async def to_thread(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def invoke_all(self, invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
        return await invoke_all(invocations)

    @contextlib.asynccontextmanager
    async def tasks(self) -> AsyncIterator[Any]:
        try:
            async with trio.open_nursery() as nursery:
                try:
                    yield _Tasks(nursery)
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The tasks report their outcomes and never raise, so the group holds what the
            # drive itself raised: the caller's trio.Cancelled, unwrapped (D22).
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise  # pragma: no cover - only one drive raises into one nursery

    async def after_cancel(self, work: Awaitable[Any]) -> Any:
        # The cancelled scope is still cancelled: shield the remaining writes, bounded.
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + _AFTER_CANCEL_BOUND
            return await work


class _BoundCrashSafe(_asyncio_durable._BoundCrashSafe):
    """A bound crash-safe tool's function on trio."""

    runtime: ClassVar[_asyncio_durable.DurableRuntime] = _TrioRuntime()


#: ``bind_tools`` on trio (``coder_proto.durable._runtime.tool_binder``).
bind_tools = tool_binder(_BoundCrashSafe)

_functions = _asyncio_durable.DurableFunctions(
    _TrioRuntime(), CoderChatClient, CoderAgent, _BoundCrashSafe
)
run_turn = _functions.run_turn
archive_workflow = _functions.archive_workflow
sweep_orphans = _functions.sweep_orphans
