"""The names every adapter package (``coder_io_asyncio``, ``coder_io_trio``,
``coder_io_sync``) defines for its runtime, beside the shared vocabulary it re-exports from
``coder_proto`` (docs/architecture.md "Public API": the same names on every runtime; switching runtime is
an import change)::

    from coder_proto import *  # noqa: F403
    from coder_proto import __all__ as _shared
    from coder_proto._runtime_names import RUNTIME_NAMES

    __all__ = [*_shared, *RUNTIME_NAMES]
"""

__all__ = ["RUNTIME_NAMES"]

#: The classes and functions an adapter implements on its own runtime.
RUNTIME_NAMES: tuple[str, ...] = (
    "AgentStream",
    "ChatWatch",
    "CoderAgent",
    "CoderChatClient",
    "archive_workflow",
    "bind_tools",
    "run_turn",
    "sweep_orphans",
    "watch_chats",
)
