"""coder_proto: the sans-I/O core of the Coder Agents client.

Everything the Coder chat protocol needs, as pure state machines that take bytes, HTTP
responses, tool results and the current time, and return actions. No sockets, no event loop,
no clock: any runtime can drive it (``coder_io_asyncio``, ``coder_io_trio``, ``coder_io_sync``,
or your own loop).

A loop of your own drives one ``Connection``: start tasks on it (an agent turn, a plain
client call, the watch, a durable job, an agent's close), perform the commands it hands out (``OpenSocket``, ``WriteSocket``,
``CloseSocket``, ``StartHttp``, ``CancelHttp``, ``InvokeTools``, ``CancelTools``,
``ApplyStore``, ``TaskMoved``) and report what happened through its input methods
(``socket_*``, ``http_*``, ``tool_finished``, ``store_finished``, ``tick``). ``ApplyStore`` comes only from a durable job (``coder_proto.durable.DurableWork``)
started with ``start_durable``.

``__all__`` is the vocabulary every runtime shares: the errors, the output parts and results
of a turn, prompt messages, client tools, the values the raw client takes and returns, history
as UI messages, and transport events. Each adapter package re-exports exactly these names
beside its own runtime classes, so one ``except`` clause or ``isinstance`` check works on every
runtime. Durable workflows (``coder_proto.durable``), transcripts (``coder_proto.transcript``)
and the fake server's model (``coder_proto.fake``) are public packages of their own, and
``coder_proto.adapter`` holds what a runtime adapter builds on beyond these; every other
module is an implementation detail.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from ._agent.agent_core import AgentCore as AgentCore
    from ._agent.agent_core import GenerateResult as GenerateResult
    from ._agent.history import UIDynamicToolPart as UIDynamicToolPart
    from ._agent.history import UIFilePart as UIFilePart
    from ._agent.history import UIMessage as UIMessage
    from ._agent.history import UIReasoningPart as UIReasoningPart
    from ._agent.history import UISourceUrlPart as UISourceUrlPart
    from ._agent.history import UITextPart as UITextPart
    from ._agent.options import AgentOptions as AgentOptions
    from ._agent.prompt import AssistantMessage as AssistantMessage
    from ._agent.prompt import FileContent as FileContent
    from ._agent.prompt import SystemMessage as SystemMessage
    from ._agent.prompt import TextContent as TextContent
    from ._agent.prompt import ToolMessage as ToolMessage
    from ._agent.prompt import ToolResultContent as ToolResultContent
    from ._agent.prompt import UserMessage as UserMessage
    from ._agent.prompt_plan import AttachedFile as AttachedFile
    from ._agent.prompt_plan import Attachment as Attachment
    from ._agent.segment import StepResult as StepResult
    from ._agent.session_calls import ArchiveResult as ArchiveResult
    from ._agent.session_calls import InterruptResult as InterruptResult
    from ._agent.structured_output import StructuredOutputError as StructuredOutputError
    from ._agent.tool_calls import ToolInvocation as ToolInvocation
    from ._agent.tools import Tool as Tool
    from ._agent.tools import ToolContext as ToolContext
    from ._agent.tools import ToolInputError as ToolInputError
    from ._agent.tools import tool as tool
    from ._agent.turn import TurnResult as TurnResult
    from ._agent.workspace_files import WorkspaceFiles as WorkspaceFiles
    from ._agent.workspace_files import WorkspaceUpload as WorkspaceUpload
    from ._connection import ApplyStore as ApplyStore
    from ._connection import CancelHttp as CancelHttp
    from ._connection import CancelTools as CancelTools
    from ._connection import CloseSocket as CloseSocket
    from ._connection import Conn as Conn
    from ._connection import Connection as Connection
    from ._connection import ConnectionStats as ConnectionStats
    from ._connection import HttpCall as HttpCall  # the earlier name
    from ._connection import HttpExchange as HttpExchange
    from ._connection import InvokeTools as InvokeTools
    from ._connection import OpenSocket as OpenSocket
    from ._connection import StartHttp as StartHttp
    from ._connection import StoreRequest as StoreRequest
    from ._connection import Task as Task
    from ._connection import TaskMoved as TaskMoved
    from ._connection import ToolBatch as ToolBatch
    from ._connection import ToolRun as ToolRun  # the earlier name
    from ._connection import WriteSocket as WriteSocket
    from ._errors import CoderAgentError as CoderAgentError
    from ._errors import CoderApiError as CoderApiError
    from ._errors import CoderChatError as CoderChatError
    from ._errors import CoderNetworkError as CoderNetworkError
    from ._errors import CoderProtocolError as CoderProtocolError
    from ._errors import CoderStreamError as CoderStreamError
    from ._jobs.operations import WorkspacePreview as WorkspacePreview
    from ._outputs import ErrorPart as ErrorPart
    from ._outputs import Finish as Finish
    from ._outputs import OutputPart as OutputPart
    from ._outputs import ReasoningDelta as ReasoningDelta
    from ._outputs import ReasoningEnd as ReasoningEnd
    from ._outputs import ReasoningStart as ReasoningStart
    from ._outputs import Source as Source
    from ._outputs import StreamStart as StreamStart
    from ._outputs import TextDelta as TextDelta
    from ._outputs import TextEnd as TextEnd
    from ._outputs import TextStart as TextStart
    from ._outputs import ToolCall as ToolCall
    from ._outputs import ToolInputEnd as ToolInputEnd
    from ._outputs import ToolInputStart as ToolInputStart
    from ._outputs import ToolResult as ToolResult
    from ._outputs import Usage as Usage
    from ._rest.chat_extras import ChatDiff as ChatDiff
    from ._rest.chat_extras import ChatFileDownloadUrl as ChatFileDownloadUrl
    from ._rest.chat_extras import ChatPrompt as ChatPrompt
    from ._rest.chat_extras import EditedMessage as EditedMessage
    from ._rest.http import HttpRequest as HttpRequest
    from ._rest.routes import ArchiveOutcome as ArchiveOutcome
    from ._rest.routes import ChatCost as ChatCost
    from ._rest.routes import ChatFile as ChatFile
    from ._rest.workspaces import PortShare as PortShare
    from ._stream.watch import WatchBackoff as WatchBackoff
    from ._transport_events import HttpErrorEvent as HttpErrorEvent
    from ._transport_events import HttpRequestEvent as HttpRequestEvent
    from ._transport_events import HttpResponseEvent as HttpResponseEvent
    from ._transport_events import SegmentSettleEvent as SegmentSettleEvent
    from ._transport_events import SegmentStartEvent as SegmentStartEvent
    from ._transport_events import TransportEvent as TransportEvent
    from ._transport_events import WsCloseEvent as WsCloseEvent
    from ._transport_events import WsDialEvent as WsDialEvent
    from ._transport_events import WsErrorEvent as WsErrorEvent
    from ._transport_events import WsEventEvent as WsEventEvent
    from ._transport_events import WsOpenEvent as WsOpenEvent
    from ._transport_events import WsRedialEvent as WsRedialEvent
    from ._version import __version__ as __version__
    from ._wire.chats import ActionToolCall as ActionToolCall
    from ._wire.chats import Chat as Chat
    from ._wire.chats import ChatMessagesResponse as ChatMessagesResponse
    from ._wire.chats import ChatModelConfig as ChatModelConfig
    from ._wire.chats import ChatWatchEvent as ChatWatchEvent
    from ._wire.chats import CreateChatMessageRequest as CreateChatMessageRequest
    from ._wire.chats import CreateChatMessageResponse as CreateChatMessageResponse
    from ._wire.chats import CreateChatRequest as CreateChatRequest
    from ._wire.chats import DynamicTool as DynamicTool
    from ._wire.chats import FileInput as FileInput
    from ._wire.chats import FileReferenceInput as FileReferenceInput
    from ._wire.chats import TextInput as TextInput
    from ._wire.chats import ToolResultInput as ToolResultInput
    from ._wire.fields import MISSING as MISSING
    from ._wire.message_parts import ChatMessagePart as ChatMessagePart
    from ._wire.message_parts import ContextFilePart as ContextFilePart
    from ._wire.message_parts import FilePart as FilePart
    from ._wire.message_parts import FileReferencePart as FileReferencePart
    from ._wire.message_parts import HookNoticePart as HookNoticePart
    from ._wire.message_parts import ReasoningPart as ReasoningPart
    from ._wire.message_parts import SkillPart as SkillPart
    from ._wire.message_parts import SourcePart as SourcePart
    from ._wire.message_parts import TextPart as TextPart
    from ._wire.message_parts import ToolCallPart as ToolCallPart
    from ._wire.message_parts import ToolResultPart as ToolResultPart
    from ._wire.message_parts import UnknownPart as UnknownPart
    from ._wire.messages import ChatError as ChatError
    from ._wire.messages import ChatMessage as ChatMessage
    from ._wire.messages import ChatMessageUsage as ChatMessageUsage
    from ._wire.messages import ChatQueuedMessage as ChatQueuedMessage
    from .durable import DurableToolContext as DurableToolContext
    from .durable import crash_safe as crash_safe

# Grouped by what a user meets, not alphabetically.
__all__ = [  # noqa: RUF022
    # the embedder's object, its tasks and the commands it hands out
    "Connection",
    "ConnectionStats",
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
    "PortShare",
    "WatchBackoff",
    "WorkspaceFiles",
    "WorkspacePreview",
    "WorkspaceUpload",
    # the wire values of the raw client
    "MISSING",
    "ActionToolCall",
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

# Each name is imported on first use (``coder_proto._lazy``): a program pays for the modules
# it reaches.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._agent.agent_core": (
            "AgentCore",
            "GenerateResult",
        ),
        "._agent.history": (
            "UIDynamicToolPart",
            "UIFilePart",
            "UIMessage",
            "UIReasoningPart",
            "UISourceUrlPart",
            "UITextPart",
        ),
        "._agent.prompt": (
            "AssistantMessage",
            "FileContent",
            "SystemMessage",
            "TextContent",
            "ToolMessage",
            "ToolResultContent",
            "UserMessage",
        ),
        "._agent.prompt_plan": (
            "AttachedFile",
            "Attachment",
        ),
        "._agent.segment": ("StepResult",),
        "._agent.session_calls": (
            "ArchiveResult",
            "InterruptResult",
        ),
        "._agent.structured_output": ("StructuredOutputError",),
        "._agent.tool_calls": ("ToolInvocation",),
        "._agent.tools": (
            "Tool",
            "ToolContext",
            "ToolInputError",
            "tool",
        ),
        "._agent.turn": ("TurnResult",),
        "._agent.workspace_files": (
            "WorkspaceFiles",
            "WorkspaceUpload",
        ),
        "._connection": (
            "ApplyStore",
            "CancelHttp",
            "CancelTools",
            "CloseSocket",
            "Conn",
            "Connection",
            "ConnectionStats",
            "HttpCall",  # the earlier name of HttpExchange
            "HttpExchange",
            "InvokeTools",
            "OpenSocket",
            "StartHttp",
            "StoreRequest",
            "Task",
            "TaskMoved",
            "ToolBatch",
            "ToolRun",  # the earlier name of ToolBatch
            "WriteSocket",
        ),
        "._errors": (
            "CoderAgentError",
            "CoderApiError",
            "CoderChatError",
            "CoderNetworkError",
            "CoderProtocolError",
            "CoderStreamError",
        ),
        "._agent.options": ("AgentOptions",),
        "._outputs": (
            "ErrorPart",
            "Finish",
            "OutputPart",
            "ReasoningDelta",
            "ReasoningEnd",
            "ReasoningStart",
            "Source",
            "StreamStart",
            "TextDelta",
            "TextEnd",
            "TextStart",
            "ToolCall",
            "ToolInputEnd",
            "ToolInputStart",
            "ToolResult",
            "Usage",
        ),
        "._rest.chat_extras": (
            "ChatDiff",
            "ChatFileDownloadUrl",
            "ChatPrompt",
            "EditedMessage",
        ),
        "._jobs.operations": ("WorkspacePreview",),
        "._rest.http": ("HttpRequest",),
        "._rest.routes": (
            "ArchiveOutcome",
            "ChatCost",
            "ChatFile",
        ),
        "._rest.workspaces": ("PortShare",),
        "._stream.watch": ("WatchBackoff",),
        "._transport_events": (
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
        ),
        "._version": ("__version__",),
        "._wire.chats": (
            "ActionToolCall",
            "Chat",
            "ChatMessagesResponse",
            "ChatModelConfig",
            "ChatWatchEvent",
            "CreateChatMessageRequest",
            "CreateChatMessageResponse",
            "CreateChatRequest",
            "DynamicTool",
            "FileInput",
            "FileReferenceInput",
            "TextInput",
            "ToolResultInput",
        ),
        "._wire.fields": ("MISSING",),
        "._wire.message_parts": (
            "ChatMessagePart",
            "ContextFilePart",
            "FilePart",
            "FileReferencePart",
            "HookNoticePart",
            "ReasoningPart",
            "SkillPart",
            "SourcePart",
            "TextPart",
            "ToolCallPart",
            "ToolResultPart",
            "UnknownPart",
        ),
        "._wire.messages": (
            "ChatError",
            "ChatMessage",
            "ChatMessageUsage",
            "ChatQueuedMessage",
        ),
        ".durable": (
            "DurableToolContext",
            "crash_safe",
        ),
    },
)
