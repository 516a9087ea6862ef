"""coder_io_trio: the trio adapter of the Coder Agents client.

The same public names and behaviour as ``coder_io_asyncio`` (everything in its ``__all__``),
on trio: run it inside ``trio.run``. Cancellation is trio's (``move_on_after``,
``fail_after``, cancelled nurseries): a cancelled turn is interrupted on the server and
``trio.Cancelled`` propagates unwrapped (D22).
"""

from coder_proto.agent import (
    AttachedFile,
    Attachment,
    GenerateResult,
    StructuredOutputError,
    WorkspaceUpload,
)
from coder_proto.cleanup import ArchiveResult, InterruptResult
from coder_proto.client import WorkspacePreview
from coder_proto.errors import (
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderNetworkError,
    CoderProtocolError,
    CoderStreamError,
)
from coder_proto.parts import (
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
from coder_proto.prompt import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from coder_proto.segment import StepResult
from coder_proto.tools import Tool, ToolContext, ToolInputError, tool
from coder_proto.watch import WatchBackoff

from .agent import AgentStream, CoderAgent
from .client import CoderChatClient
from .durable import (
    DurableToolContext,
    archive_workflow,
    bind_tools,
    crash_safe,
    run_turn,
    sweep_orphans,
)
from .watch import ChatWatch, watch_chats

__all__ = [
    "AgentStream",
    "ArchiveResult",
    "AssistantMessage",
    "AttachedFile",
    "Attachment",
    "ChatWatch",
    "CoderAgent",
    "CoderAgentError",
    "CoderApiError",
    "CoderChatClient",
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
    "archive_workflow",
    "bind_tools",
    "crash_safe",
    "run_turn",
    "sweep_orphans",
    "tool",
    "watch_chats",
]
