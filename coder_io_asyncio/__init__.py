"""coder_io_asyncio: the asyncio adapter of the Coder Agents client.

The runtime-independent names (errors, output parts, results, messages, tools) are the
core's (``coder_proto``); the classes and functions below perform I/O on asyncio.
"""

from typing import TYPE_CHECKING

from coder_io_common.stores import STORE_NAMES
from coder_proto.adapter import EMBEDDER_NAMES, RUNTIME_NAMES, USER_NAMES, lazy_exports

from .agent import AgentStream as AgentStream
from .agent import CoderAgent as CoderAgent
from .client import CoderChatClient as CoderChatClient
from .client import watch_chats as watch_chats
from .watch import ChatWatch as ChatWatch

if TYPE_CHECKING:
    from coder_io_common.instrumentation import instrument as instrument
    from coder_io_common.stores import SQLiteStore as SQLiteStore
    from coder_proto import *  # noqa: F403

    from .durable import archive_workflow as archive_workflow
    from .durable import bind_tools as bind_tools
    from .durable import run_turn as run_turn
    from .durable import sweep_orphans as sweep_orphans

__all__ = [*USER_NAMES, *RUNTIME_NAMES, *STORE_NAMES]

# The core's names (all of ``coder_proto.__all__``, as a star import of it would give),
# durable workflows, the stores and instrumentation are imported on first use.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "coder_proto": (*USER_NAMES, *EMBEDDER_NAMES),
        "coder_io_common.instrumentation": ("instrument",),
        "coder_io_common.stores": ("SQLiteStore",),
        ".durable": ("archive_workflow", "bind_tools", "run_turn", "sweep_orphans"),
    },
)
del EMBEDDER_NAMES
