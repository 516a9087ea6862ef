"""The names every adapter package (``coder_io_asyncio``, ``coder_io_trio``,
``coder_io_sync``) defines for its runtime, beside the shared vocabulary it re-exports from
``coder_proto`` (docs/architecture.md "Public API": the same names on every runtime; switching runtime is
an import change)::

    from coder_proto import *  # noqa: F403
    from coder_proto.adapter import RUNTIME_NAMES, USER_NAMES

    __all__ = [*USER_NAMES, *RUNTIME_NAMES]

The embedder's vocabulary (``Connection`` and its tasks and commands) is for loops of one's
own; an adapter is such a loop already, so it re-exports only what its users meet.
"""

__all__ = ["EMBEDDER_NAMES", "RUNTIME_NAMES"]

EMBEDDER_NAMES: tuple[str, ...] = (
    "Connection",
    "AgentCore",
    "Task",
    "Conn",
    "HttpExchange",
    "HttpCall",  # the earlier name of HttpExchange
    "HttpRequest",
    "ToolBatch",
    "ToolRun",  # the earlier name of ToolBatch
    "ToolInvocation",
    "OpenSocket",
    "WriteSocket",
    "CloseSocket",
    "StartHttp",
    "CancelHttp",
    "InvokeTools",
    "CancelTools",
    "StoreRequest",
    "ApplyStore",
    "TaskMoved",
    "ConnectionStats",
)
"""The ``coder_proto.__all__`` names that belong to a loop of one's own (``Connection``, its
tasks, handles and commands): an adapter is such a loop, so it does not re-export them."""

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
"""The classes and functions every adapter defines on its own runtime, under these names."""
