"""The runtime-independent half of every adapter's public API (DESIGN "Public API": the same
names in ``coder_io_asyncio``, ``coder_io_trio`` and ``coder_io_sync``; switching runtime is an
import change).

Errors, output parts, results, prompt messages, tool definitions and durable-tool helpers are
the core's own objects, so one ``except`` clause or ``isinstance`` check works on every
runtime. An adapter re-exports everything listed here and adds its runtime classes and
functions (``CoderAgent``, ``AgentStream``, ``CoderChatClient``, ``ChatWatch``,
``watch_chats``, ``run_turn``, ``archive_workflow``, ``sweep_orphans``, ``bind_tools``)::

    from coder_proto.public import *  # noqa: F403
    from coder_proto.public import __all__ as _shared

    __all__ = [*_shared, *RUNTIME_NAMES]
"""

from ._options import AgentOptions
from .agent import (
    AttachedFile,
    Attachment,
    GenerateResult,
    StructuredOutputError,
    WorkspaceUpload,
)
from .cleanup import ArchiveResult, InterruptResult
from .client import WorkspacePreview
from .durable import DurableToolContext, crash_safe
from .errors import (
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderNetworkError,
    CoderProtocolError,
    CoderStreamError,
)
from .parts import (
    ErrorPart,
    Finish,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Source,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputEnd,
    ToolInputStart,
    ToolResult,
    Usage,
)
from .prompt import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from .segment import StepResult
from .tools import Tool, ToolContext, ToolInputError, tool
from .watch import WatchBackoff

__all__ = [
    "AgentOptions",
    "ArchiveResult",
    "AssistantMessage",
    "AttachedFile",
    "Attachment",
    "CoderAgentError",
    "CoderApiError",
    "CoderChatError",
    "CoderNetworkError",
    "CoderProtocolError",
    "CoderStreamError",
    "DurableToolContext",
    "ErrorPart",
    "Finish",
    "GenerateResult",
    "InterruptResult",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "Source",
    "StepResult",
    "StreamStart",
    "StructuredOutputError",
    "SystemMessage",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolInputEnd",
    "ToolInputError",
    "ToolInputStart",
    "ToolMessage",
    "ToolResult",
    "Usage",
    "UserMessage",
    "WatchBackoff",
    "WorkspacePreview",
    "WorkspaceUpload",
    "crash_safe",
    "tool",
]

#: The names every adapter defines for its runtime (classes and functions of its own).
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
