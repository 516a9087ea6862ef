"""Durable workflows on asyncio: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``;
``coder_io_common._async.durable``).

A ``DurableStore``'s plain methods and plain tool functions run in a worker thread
(``asyncio.to_thread``: a write may wait on another process's lock, which must never stall
the event loop); an ``AsyncDurableStore``'s coroutines are awaited. A cancelled ``run_turn``
interrupts the turn (D22), writes the checkpoint, then re-raises the
``asyncio.CancelledError``. Run steps of one workflow strictly one after another; archive at
the end of the workflow only.
"""

from __future__ import annotations

from coder_io_common._async.durable import DurableFunctions

from ._runtime import ASYNCIO
from .agent import CoderAgent
from .client import CoderChatClient

__all__ = ["archive_workflow", "bind_tools", "run_turn", "sweep_orphans"]

_functions = DurableFunctions(ASYNCIO, CoderChatClient, CoderAgent, module=__name__)
run_turn = _functions.run_turn
archive_workflow = _functions.archive_workflow
sweep_orphans = _functions.sweep_orphans
bind_tools = _functions.bind_tools
