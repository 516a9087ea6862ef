"""The names every adapter package (``coder_io_asyncio``, ``coder_io_trio``,
``coder_io_sync``) defines for its runtime, beside the shared vocabulary it re-exports from
``coder_proto`` (docs/architecture.md "Public API": the same names on every runtime; switching runtime is
an import change)::

    from coder_proto import *  # noqa: F403
    from coder_proto._runtime_names import RUNTIME_NAMES, USER_NAMES

    __all__ = [*USER_NAMES, *RUNTIME_NAMES]

The embedder's vocabulary (``Connection`` and its tasks and commands) is for loops of one's
own; an adapter is such a loop already, so it re-exports only what its users meet.
"""

__all__ = ["EMBEDDER_NAMES", "RUNTIME_NAMES", "USER_NAMES"]

#: ``coder_proto.__all__`` names that belong to the embedder's object (not re-exported by the
#: adapters).
EMBEDDER_NAMES: tuple[str, ...] = (
    "Connection",
    "Task",
    "Conn",
    "HttpCall",
    "ToolRun",
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
)

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


def _user_names() -> tuple[str, ...]:
    import coder_proto

    return tuple(n for n in coder_proto.__all__ if n not in EMBEDDER_NAMES)


#: ``coder_proto.__all__`` without the embedder's vocabulary: what every adapter re-exports.
USER_NAMES: tuple[str, ...] = _user_names()
