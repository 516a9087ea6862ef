"""Durable workflows on trio: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``;
``coder_io_common._async.durable``).

A ``DurableStore``'s plain methods and plain tool functions run in worker threads
(``trio.to_thread.run_sync``: a write may wait on another process's lock, which must never
stall the trio loop), an ``AsyncDurableStore``'s coroutines are awaited, the calls of one
pause run in a nursery, and a durable machine's concurrent work runs in a nursery of its own.
Cancellation is trio's: a cancelled scope around ``run_turn`` interrupts the turn (D22); the
checkpoint is still written, shielded and bounded, before ``trio.Cancelled`` propagates
(never inside an exception group).
"""

from __future__ import annotations

from coder_io_common._async.durable import DurableFunctions

from ._runtime import TRIO
from .agent import CoderAgent
from .client import CoderChatClient

__all__ = ["archive_workflow", "bind_tools", "run_turn", "sweep_orphans"]

_functions = DurableFunctions(TRIO, CoderChatClient, CoderAgent, module=__name__)
run_turn = _functions.run_turn
archive_workflow = _functions.archive_workflow
sweep_orphans = _functions.sweep_orphans
bind_tools = _functions.bind_tools
