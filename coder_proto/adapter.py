"""The names a runtime adapter uses: everything ``coder_io_asyncio``, ``coder_io_trio`` and
``coder_io_sync`` (and their shared layer ``coder_io_common``) take from the core beyond the
user's vocabulary (``coder_proto.__all__``), ``coder_proto.durable`` and
``coder_proto.transcript`` (docs/runtimes.md "Writing an adapter").

An adapter is a loop that drives a ``coder_proto.Connection`` (its commands; ``MachineSlot``
and ``Runnable`` for the machines it runs; ``Job`` is the earlier name of ``MachineSlot``) plus
thin classes around the runtime-independent halves defined here:

- the shells: ``AgentShell`` and ``AgentOperations`` (a ``CoderAgent``'s constructor, state and
  plain operations), ``ClientShell`` and ``ChatOperations`` (a ``CoderChatClient``'s),
  ``Operation`` (one validated operation; ``Call``, ``ChatCalls`` and ``AgentCalls`` are the
  earlier names of these three) with ``public_method`` (an adapter method presented as the
  operation), ``WatchShell`` and ``standalone_watch`` (a ``ChatWatch``'s);
- an agent's session and turns: ``SessionConfig``, ``Session`` and the machines it starts
  (``Turn``, ``GenerateCall``, ``SessionInterrupt``, ``SessionArchive``, ``SessionDispose``),
  ``prepare_prompt`` and its ``PromptPlan``, the ``WorkspaceWrite`` of
  ``upload_to_workspace``, the ``ToolPlan`` of a tool pause and ``ToolOutcome`` (what a client
  tool did);
- what a core machine (``Machine``, ``Runnable``) hands its driver: an ``Action``
  (``OpenConnection``, ``SendData``, ``CloseConnection``, ``SendRequest``, ``CancelRequest``,
  ``RunTools``, ``RunInBackground``), answered with an ``HttpResponse`` for a request;
- the client's settings and limits: ``ClientSettings``, ``PrefixSelector``, ``UploadPlan``,
  ``check_attachment_size``, ``CONNECT_TIMEOUT``, ``HTTP_TIMEOUT``, ``MAX_RESPONSE_BYTES``,
  ``MAX_UNSENT``, the time bounds of an agent's cleanup and background work, the
  ``TransportEventSink`` the ``on_event`` callbacks hang on;
- durable workflows on a runtime: the effects a durable program yields (``Invoke``,
  ``Sleep``, ``WallClock``, ``RunDurable``, ``RunAgentTurn``, ``StartRenewal``,
  ``StopRenewal``), the calls that build those programs (``archive_call``, ``sweep_call``,
  ``crash_safe_program``, ``renewal``, ``tool_binder``), ``run_program`` for a blocking
  runtime, the ``WorkflowLease`` they hold, and ``ProgramJob``, a whole durable call run as a
  task of the ``Connection``;
- the package plumbing every adapter shares: ``lazy_exports`` (names imported on first use,
  PEP 562), ``USER_NAMES`` / ``RUNTIME_NAMES`` / ``EMBEDDER_NAMES`` (what an adapter
  re-exports and defines), ``option_keywords``, ``dumps`` (request-body JSON),
  ``encode_output`` (a tool's return value as JSON), the model-hint resolution of the
  command line.

Like every other core module this one is pure; each name is imported on first use, so
importing the module costs nothing beyond it.
"""

from typing import TYPE_CHECKING

from coder_proto import __all__ as _core_names
from coder_proto._lazy import lazy_exports
from coder_proto._runtime_names import EMBEDDER_NAMES, RUNTIME_NAMES

if TYPE_CHECKING:
    from coder_proto._actions import Action as Action
    from coder_proto._actions import CancelRequest as CancelRequest
    from coder_proto._actions import CloseConnection as CloseConnection
    from coder_proto._actions import Machine as Machine
    from coder_proto._actions import OpenConnection as OpenConnection
    from coder_proto._actions import RunInBackground as RunInBackground
    from coder_proto._actions import RunTools as RunTools
    from coder_proto._actions import SendData as SendData
    from coder_proto._actions import SendRequest as SendRequest
    from coder_proto._actions import ToolOutcome as ToolOutcome
    from coder_proto._agent.agent_core import GenerateCall as GenerateCall
    from coder_proto._agent.options import option_keywords as option_keywords
    from coder_proto._agent.prompt_plan import PromptPlan as PromptPlan
    from coder_proto._agent.prompt_plan import prepare_prompt as prepare_prompt
    from coder_proto._agent.session import Session as Session
    from coder_proto._agent.session_calls import SessionArchive as SessionArchive
    from coder_proto._agent.session_calls import SessionDispose as SessionDispose
    from coder_proto._agent.session_calls import SessionInterrupt as SessionInterrupt
    from coder_proto._agent.session_state import ReaderFactory as ReaderFactory
    from coder_proto._agent.session_state import SessionConfig as SessionConfig
    from coder_proto._agent.tool_calls import ToolPlan as ToolPlan
    from coder_proto._agent.tools import encode_output as encode_output
    from coder_proto._agent.turn import Turn as Turn
    from coder_proto._agent.workspace_files import WorkspaceWrite as WorkspaceWrite
    from coder_proto._connection import CANCELLED_MESSAGE as CANCELLED_MESSAGE
    from coder_proto._connection import ConnectionCommand as ConnectionCommand
    from coder_proto._connection import Job as Job  # the earlier name
    from coder_proto._connection import MachineSlot as MachineSlot
    from coder_proto._connection import Runnable as Runnable
    from coder_proto._constants import BACKGROUND_TASK_BOUND as BACKGROUND_TASK_BOUND
    from coder_proto._constants import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS
    from coder_proto._constants import INTERRUPT_POLL_INTERVAL as INTERRUPT_POLL_INTERVAL
    from coder_proto._constants import INTERRUPT_WAIT_TIMEOUT as INTERRUPT_WAIT_TIMEOUT
    from coder_proto._constants import SETTLE_DEADLINE as SETTLE_DEADLINE
    from coder_proto._constants import SETTLE_RETRY_DELAY as SETTLE_RETRY_DELAY
    from coder_proto._json import dumps as dumps
    from coder_proto._rest.http import HttpResponse as HttpResponse
    from coder_proto._rest.model_hints import is_model_config_uuid as is_model_config_uuid
    from coder_proto._rest.model_hints import resolve_model_hint as resolve_model_hint
    from coder_proto._rest.prefix import PrefixSelector as PrefixSelector
    from coder_proto._rest.settings import CONNECT_TIMEOUT as CONNECT_TIMEOUT
    from coder_proto._rest.settings import HTTP_TIMEOUT as HTTP_TIMEOUT
    from coder_proto._rest.settings import MAX_RESPONSE_BYTES as MAX_RESPONSE_BYTES
    from coder_proto._rest.settings import ClientSettings as ClientSettings
    from coder_proto._rest.uploads import UploadPlan as UploadPlan
    from coder_proto._rest.uploads import check_attachment_size as check_attachment_size
    from coder_proto._shells.agent_calls import AgentCalls as AgentCalls
    from coder_proto._shells.agent_calls import AgentOperations as AgentOperations
    from coder_proto._shells.agent_shell import AgentShell as AgentShell
    from coder_proto._shells.agent_shell import check_connection as check_connection
    from coder_proto._shells.client_calls import Call as Call
    from coder_proto._shells.client_calls import ChatCalls as ChatCalls
    from coder_proto._shells.client_calls import ChatOperations as ChatOperations
    from coder_proto._shells.client_calls import Operation as Operation
    from coder_proto._shells.client_calls import public_method as public_method
    from coder_proto._shells.client_shell import ClientShell as ClientShell
    from coder_proto._shells.watch_feed import StandaloneWatch as StandaloneWatch
    from coder_proto._shells.watch_feed import WatchShell as WatchShell
    from coder_proto._shells.watch_feed import standalone_watch as standalone_watch
    from coder_proto._stream.websocket import MAX_UNSENT as MAX_UNSENT
    from coder_proto._transport_events import TransportEventSink as TransportEventSink
    from coder_proto.durable._effects import Invoke as Invoke
    from coder_proto.durable._effects import Sleep as Sleep
    from coder_proto.durable._effects import WallClock as WallClock
    from coder_proto.durable._lease import WorkflowLease as WorkflowLease
    from coder_proto.durable._program_job import ProgramJob as ProgramJob
    from coder_proto.durable._runtime import BindTools as BindTools
    from coder_proto.durable._runtime import DurableCall as DurableCall
    from coder_proto.durable._runtime import DurableStep as DurableStep
    from coder_proto.durable._runtime import EffectStep as EffectStep
    from coder_proto.durable._runtime import Guard as Guard
    from coder_proto.durable._runtime import RunDurable as RunDurable
    from coder_proto.durable._runtime import StartRenewal as StartRenewal
    from coder_proto.durable._runtime import StopRenewal as StopRenewal
    from coder_proto.durable._runtime import ToolsArg as ToolsArg
    from coder_proto.durable._runtime import archive_call as archive_call
    from coder_proto.durable._runtime import crash_safe_program as crash_safe_program
    from coder_proto.durable._runtime import renewal as renewal
    from coder_proto.durable._runtime import sweep_call as sweep_call
    from coder_proto.durable._runtime import tool_binder as tool_binder
    from coder_proto.durable._step import RunAgentTurn as RunAgentTurn
    from coder_proto.durable._tools import DurableBinding as DurableBinding
    from coder_proto.durable._tools import run_program as run_program

USER_NAMES: tuple[str, ...] = tuple(n for n in _core_names if n not in EMBEDDER_NAMES)
"""``coder_proto.__all__`` without the embedder's vocabulary (``EMBEDDER_NAMES``): the names
every adapter re-exports unchanged, so one ``except`` clause or ``isinstance`` check works on
every runtime."""

# Grouped by what an adapter builds with them, not alphabetically.
__all__ = [  # noqa: RUF022
    # package plumbing
    "lazy_exports",
    "USER_NAMES",
    "RUNTIME_NAMES",
    "EMBEDDER_NAMES",
    # driving a Connection
    "ConnectionCommand",
    "MachineSlot",
    "Job",  # the earlier name of MachineSlot
    "Runnable",
    "Machine",
    "Action",
    "OpenConnection",
    "SendData",
    "CloseConnection",
    "SendRequest",
    "CancelRequest",
    "RunTools",
    "RunInBackground",
    "HttpResponse",
    "CANCELLED_MESSAGE",
    "CONNECT_TIMEOUT",
    "HTTP_TIMEOUT",
    "MAX_RESPONSE_BYTES",
    "MAX_UNSENT",
    "TransportEventSink",
    # the client's half
    "ClientSettings",
    "ClientShell",
    "ChatOperations",
    "Operation",
    "ChatCalls",
    "Call",
    "public_method",
    "PrefixSelector",
    "UploadPlan",
    "check_attachment_size",
    "dumps",
    # the agent's half
    "AgentShell",
    "AgentOperations",
    "AgentCalls",
    "check_connection",
    "option_keywords",
    "SessionConfig",
    "ReaderFactory",
    "Session",
    "SessionArchive",
    "SessionDispose",
    "SessionInterrupt",
    "Turn",
    "GenerateCall",
    "PromptPlan",
    "prepare_prompt",
    "WorkspaceWrite",
    "ToolPlan",
    "ToolOutcome",
    "encode_output",
    "BACKGROUND_TASK_BOUND",
    "DEFAULT_MAX_STEPS",
    "INTERRUPT_POLL_INTERVAL",
    "INTERRUPT_WAIT_TIMEOUT",
    "SETTLE_DEADLINE",
    "SETTLE_RETRY_DELAY",
    # the watch's half
    "WatchShell",
    "standalone_watch",
    "StandaloneWatch",
    # durable workflows on a runtime
    "BindTools",
    "DurableBinding",
    "DurableCall",
    "DurableStep",
    "EffectStep",
    "Guard",
    "Invoke",
    "RunAgentTurn",
    "ProgramJob",
    "RunDurable",
    "Sleep",
    "StartRenewal",
    "StopRenewal",
    "ToolsArg",
    "WallClock",
    "WorkflowLease",
    "archive_call",
    "crash_safe_program",
    "renewal",
    "run_program",
    "sweep_call",
    "tool_binder",
    # the command line's model hints
    "is_model_config_uuid",
    "resolve_model_hint",
]

# Each name is imported on first use (``lazy_exports``): an adapter pays for the modules it
# reaches, as when it imported them itself.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "coder_proto._actions": (
            "Action",
            "CancelRequest",
            "CloseConnection",
            "Machine",
            "OpenConnection",
            "RunInBackground",
            "RunTools",
            "SendData",
            "SendRequest",
            "ToolOutcome",
        ),
        "coder_proto._agent.agent_core": ("GenerateCall",),
        "coder_proto._agent.prompt_plan": (
            "PromptPlan",
            "prepare_prompt",
        ),
        "coder_proto._agent.session": ("Session",),
        "coder_proto._agent.session_calls": (
            "SessionArchive",
            "SessionDispose",
            "SessionInterrupt",
        ),
        "coder_proto._agent.session_state": (
            "ReaderFactory",
            "SessionConfig",
        ),
        "coder_proto._agent.tool_calls": ("ToolPlan",),
        "coder_proto._agent.tools": ("encode_output",),
        "coder_proto._agent.turn": ("Turn",),
        "coder_proto._agent.workspace_files": ("WorkspaceWrite",),
        "coder_proto._connection": (
            "CANCELLED_MESSAGE",
            "ConnectionCommand",
            "Job",  # the earlier name of MachineSlot
            "MachineSlot",
            "Runnable",
        ),
        "coder_proto._constants": (
            "BACKGROUND_TASK_BOUND",
            "DEFAULT_MAX_STEPS",
            "INTERRUPT_POLL_INTERVAL",
            "INTERRUPT_WAIT_TIMEOUT",
            "SETTLE_DEADLINE",
            "SETTLE_RETRY_DELAY",
        ),
        "coder_proto._json": ("dumps",),
        "coder_proto._agent.options": ("option_keywords",),
        "coder_proto._rest.http": ("HttpResponse",),
        "coder_proto._rest.model_hints": (
            "is_model_config_uuid",
            "resolve_model_hint",
        ),
        "coder_proto._rest.prefix": ("PrefixSelector",),
        "coder_proto._rest.settings": (
            "CONNECT_TIMEOUT",
            "HTTP_TIMEOUT",
            "MAX_RESPONSE_BYTES",
            "ClientSettings",
        ),
        "coder_proto._rest.uploads": (
            "UploadPlan",
            "check_attachment_size",
        ),
        "coder_proto._shells.agent_calls": ("AgentOperations", "AgentCalls"),
        "coder_proto._shells.agent_shell": (
            "AgentShell",
            "check_connection",
        ),
        "coder_proto._shells.client_calls": (
            "Call",
            "ChatCalls",
            "ChatOperations",
            "Operation",
            "public_method",
        ),
        "coder_proto._shells.client_shell": ("ClientShell",),
        "coder_proto._shells.watch_feed": (
            "StandaloneWatch",
            "WatchShell",
            "standalone_watch",
        ),
        "coder_proto._stream.websocket": ("MAX_UNSENT",),
        "coder_proto._transport_events": ("TransportEventSink",),
        "coder_proto.durable._effects": (
            "Invoke",
            "Sleep",
            "WallClock",
        ),
        "coder_proto.durable._lease": ("WorkflowLease",),
        "coder_proto.durable._program_job": ("ProgramJob",),
        "coder_proto.durable._runtime": (
            "BindTools",
            "DurableCall",
            "DurableStep",
            "EffectStep",
            "Guard",
            "RunDurable",
            "StartRenewal",
            "StopRenewal",
            "ToolsArg",
            "archive_call",
            "crash_safe_program",
            "renewal",
            "sweep_call",
            "tool_binder",
        ),
        "coder_proto.durable._step": ("RunAgentTurn",),
        "coder_proto.durable._tools": (
            "DurableBinding",
            "run_program",
        ),
    },
)
