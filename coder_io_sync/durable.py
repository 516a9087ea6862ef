"""Durable workflows, blocking: ``run_turn``, ``archive_workflow``, ``sweep_orphans`` and
``bind_tools`` (docs/durable-workflows.md; ``coder_proto.durable``;
``coder_io_sync._sync.durable``, written from ``coder_io_common._async.durable``).

The effects of the core's programs are performed in the calling thread: a ``DurableStore``'s
methods (``SQLiteStore``, ``MemoryStore``) and plain tool functions are called directly, and
an ``AsyncDurableStore`` or a coroutine tool function is refused (``CoderAgentError``), since
nothing here runs an event loop; the lease's renewal timer is a thread of the call.
``run_turn(..., timeout=...)`` is the caller's deadline for the agent turn. A
``KeyboardInterrupt`` while a step waits cancels what runs (D22); the checkpoint is written
and the lease released before it propagates. Run steps of one workflow strictly one after
another; archive at the end of the workflow only.
"""

from __future__ import annotations

from ._driver import BLOCKING
from ._sync.durable import DurableFunctions
from .agent import CoderAgent
from .client import CoderChatClient

__all__ = ["archive_workflow", "bind_tools", "run_turn", "sweep_orphans"]

_functions = DurableFunctions(BLOCKING, CoderChatClient, CoderAgent, module=__name__)
run_turn = _functions.run_turn
archive_workflow = _functions.archive_workflow
sweep_orphans = _functions.sweep_orphans
bind_tools = _functions.bind_tools
