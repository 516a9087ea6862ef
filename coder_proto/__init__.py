"""coder_proto: the sans-I/O core of the Coder Agents client.

Everything the Coder chat protocol needs, as pure state machines that take bytes, HTTP
responses, tool results and the current time, and return actions. No sockets, no event loop,
no clock: any runtime can drive it (``coder_io_asyncio``, ``coder_io_trio``, ``coder_io_sync``,
or your own loop).

A loop of your own drives one ``Connection``: start tasks on it (an agent turn, a plain
client call, the watch), perform the commands it hands out (``OpenSocket``, ``WriteSocket``,
``CloseSocket``, ``StartHttp``, ``CancelHttp``, ``InvokeTools``, ``CancelTools``,
``ApplyStore``, ``TaskMoved``) and report what happened through its input methods
(``socket_*``, ``http_*``, ``tool_returned`` / ``tool_raised``, ``store_returned`` /
``store_raised``, ``tick``). ``ApplyStore`` comes only from a durable job
(``coder_proto.durable.DurableJob``) started with ``start_machine``.

``__all__`` is the vocabulary every runtime shares: the errors, the output parts and results
of a turn, prompt messages, client tools, the values the raw client takes and returns, history
as UI messages, and transport events. Each adapter package re-exports exactly these names
beside its own runtime classes, so one ``except`` clause or ``isinstance`` check works on every
runtime. Durable workflows (``coder_proto.durable``), transcripts (``coder_proto.transcript``)
and the fake server's model (``coder_proto.fake``) are public packages of their own; every
other module is an implementation detail.
"""

from ._agent.agent_core import GenerateResult
from ._agent.history import (
    UIDynamicToolPart,
    UIFilePart,
    UIMessage,
    UIReasoningPart,
    UISourceUrlPart,
    UITextPart,
)
from ._agent.prompt import (
    AssistantMessage,
    FileContent,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from ._agent.prompt_plan import AttachedFile, Attachment
from ._agent.segment import StepResult
from ._agent.session_calls import ArchiveResult, InterruptResult
from ._agent.structured_output import StructuredOutputError
from ._agent.tool_calls import ToolInvocation
from ._agent.tools import Tool, ToolContext, ToolInputError, tool
from ._agent.turn import TurnResult
from ._agent.workspace_files import WorkspaceFiles, WorkspaceUpload
from ._connection import (
    ApplyStore,
    CancelHttp,
    CancelTools,
    CloseSocket,
    Conn,
    Connection,
    HttpCall,
    InvokeTools,
    OpenSocket,
    StartHttp,
    StoreRequest,
    Task,
    TaskMoved,
    ToolRun,
    WriteSocket,
)
from ._errors import (
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderNetworkError,
    CoderProtocolError,
    CoderStreamError,
)
from ._options import AgentOptions
from ._outputs import (
    ErrorPart,
    Finish,
    OutputPart,
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
from ._rest.chat_extras import ChatDiff, ChatFileDownloadUrl, ChatPrompt, EditedMessage
from ._rest.jobs import WorkspacePreview
from ._rest.routes import ArchiveOutcome, ChatCost, ChatFile
from ._stream.watch import WatchBackoff
from ._transport_events import (
    HttpErrorEvent,
    HttpRequestEvent,
    HttpResponseEvent,
    SegmentSettleEvent,
    SegmentStartEvent,
    TransportEvent,
    WsCloseEvent,
    WsDialEvent,
    WsErrorEvent,
    WsEventEvent,
    WsOpenEvent,
    WsRedialEvent,
)
from ._version import __version__ as __version__
from ._wire.chats import (
    Chat,
    ChatMessagesResponse,
    ChatModelConfig,
    ChatWatchEvent,
    CreateChatMessageRequest,
    CreateChatMessageResponse,
    CreateChatRequest,
    DynamicTool,
    FileInput,
    FileReferenceInput,
    TextInput,
    ToolResultInput,
)
from ._wire.fields import MISSING
from ._wire.message_parts import (
    ChatMessagePart,
    ContextFilePart,
    FilePart,
    FileReferencePart,
    HookNoticePart,
    ReasoningPart,
    SkillPart,
    SourcePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UnknownPart,
)
from ._wire.messages import ChatError, ChatMessage, ChatMessageUsage, ChatQueuedMessage
from .durable import DurableToolContext, crash_safe

# Grouped by what a user meets, not alphabetically.
__all__ = [  # noqa: RUF022
    # the embedder's object, its tasks and the commands it hands out
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
    # errors
    "CoderAgentError",
    "CoderApiError",
    "CoderChatError",
    "CoderNetworkError",
    "CoderProtocolError",
    "CoderStreamError",
    "StructuredOutputError",
    "ToolInputError",
    # settings
    "AgentOptions",
    # what a turn delivers (output parts) and returns
    "ErrorPart",
    "Finish",
    "GenerateResult",
    "OutputPart",
    "ReasoningDelta",
    "ReasoningEnd",
    "ReasoningStart",
    "Source",
    "StepResult",
    "StreamStart",
    "TextDelta",
    "TextEnd",
    "TextStart",
    "ToolCall",
    "ToolInputEnd",
    "ToolInputStart",
    "ToolResult",
    "TurnResult",
    "Usage",
    # prompts
    "AssistantMessage",
    "AttachedFile",
    "Attachment",
    "FileContent",
    "SystemMessage",
    "TextContent",
    "ToolMessage",
    "ToolResultContent",
    "UserMessage",
    # client tools and crash-safe tools
    "DurableToolContext",
    "Tool",
    "ToolContext",
    "crash_safe",
    "tool",
    # what the agent's and the client's other operations take and return
    "ArchiveOutcome",
    "ArchiveResult",
    "ChatCost",
    "ChatDiff",
    "ChatFile",
    "ChatFileDownloadUrl",
    "ChatPrompt",
    "EditedMessage",
    "InterruptResult",
    "WatchBackoff",
    "WorkspaceFiles",
    "WorkspacePreview",
    "WorkspaceUpload",
    # the wire values of the raw client
    "MISSING",
    "Chat",
    "ChatError",
    "ChatMessage",
    "ChatMessagePart",
    "ChatMessageUsage",
    "ChatMessagesResponse",
    "ChatModelConfig",
    "ChatQueuedMessage",
    "ChatWatchEvent",
    "ContextFilePart",
    "CreateChatMessageRequest",
    "CreateChatMessageResponse",
    "CreateChatRequest",
    "DynamicTool",
    "FileInput",
    "FilePart",
    "FileReferenceInput",
    "FileReferencePart",
    "HookNoticePart",
    "ReasoningPart",
    "SkillPart",
    "SourcePart",
    "TextInput",
    "TextPart",
    "ToolCallPart",
    "ToolResultInput",
    "ToolResultPart",
    "UnknownPart",
    # a chat's history as UI messages
    "UIDynamicToolPart",
    "UIFilePart",
    "UIMessage",
    "UIReasoningPart",
    "UISourceUrlPart",
    "UITextPart",
    # transport events (observability)
    "HttpErrorEvent",
    "HttpRequestEvent",
    "HttpResponseEvent",
    "SegmentSettleEvent",
    "SegmentStartEvent",
    "TransportEvent",
    "WsCloseEvent",
    "WsDialEvent",
    "WsErrorEvent",
    "WsEventEvent",
    "WsOpenEvent",
    "WsRedialEvent",
]
