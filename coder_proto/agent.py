"""The agent core: everything ``CoderAgent`` does that is not I/O (state machines H.1, H.2,
P; DECISIONS D5, D7, D17; the seed README's "Custom tools", "Files", "Workspace files" and
"Structured output").

Every adapter's ``CoderAgent`` is a thin shell around one ``AgentCore``:

* construction validates the settings and builds the ``SessionConfig`` and ``Session``
  (H.2): the client tools (``coder_proto.tools``), the ``organization_id`` default from
  ``CODER_ORGANIZATION_ID``, the structured-output tool and the workspace-files adapter check;
* ``prepare_prompt`` turns what a caller passes (a string, content parts, messages as classes
  or dicts, ``Attachment`` files given as bytes, a path or a file object, ``AttachedFile``
  references) into a ``PromptPlan``: the files the adapter must read, then the prompt messages
  (appendix P). Bytes are uploaded by the turn itself (P.3);
* ``plan_tools`` answers a ``RunTools`` action as far as the core can (D5): unknown tools and
  invalid input become error outcomes, the structured-output tool is acknowledged in place,
  and what is left are ``ToolInvocation`` values whose callables the adapter awaits;
* ``generate`` returns a ``GenerateCall``: the turn to drive, and after it the structured-output
  ladder (accept a valid filed answer, nudge an idle chat once, or fail);
* ``begin`` / ``end`` are the single-flight guard around a whole call (G.2), including the
  adapter's own preparation (reading files) before the turn exists.

The adapter performs I/O only: it reads the files a plan names, drives the machines, awaits
the tool callables (in a worker thread for plain functions where its runtime needs that) and
reports outcomes. ``max_retries`` (C.5) is the turn's own bookkeeping (``Turn``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

import attrs

from ._options import AgentOptions, option_keywords
from .actions import ToolOutcome
from .calls import Call, ChatCalls
from .cleanup import InterruptResult
from .client import ClientSettings, UploadPlan, plan_upload
from .constants import (
    DEFAULT_MAX_STEPS,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
)
from .errors import CoderAgentError
from .history import FileUrlResolver, UIMessage, to_ui_messages
from .machine import CoreMachine
from .operations import ChatCost, build_get_messages, check_chat_id, parse_get_messages
from .parts import ToolCall
from .prefix import PrefixSelector
from .prompt import (
    AssistantMessage,
    FileContent,
    Message,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserContent,
    UserMessage,
    normalize_prompt,
)
from .session import ReaderFactory, Session, SessionConfig
from .tools import (
    Tool,
    ToolContext,
    ToolInputError,
    _is_model_type,
    encode_output,
)
from .transcript import Recorder
from .transport_events import TransportEventSink
from .turn import Turn, TurnResult
from .uploads import check_attachment_size, check_media_type
from .usage import sum_usage
from .wire.chats import ChatModelConfig, FileReferenceInput
from .wire.messages import ChatMessage

__all__ = [
    "ENV_ORGANIZATION_ID",
    "NUDGE_PROMPT",
    "STRUCTURED_OUTPUT_ACK",
    "STRUCTURED_OUTPUT_TOOL",
    "AgentCalls",
    "AgentClient",
    "AgentCore",
    "AgentShell",
    "AttachedFile",
    "Attachment",
    "GenerateCall",
    "GenerateResult",
    "HistoryJob",
    "PromptPlan",
    "StructuredOutput",
    "StructuredOutputError",
    "ToolInvocation",
    "ToolPlan",
    "WorkspaceFiles",
    "WorkspaceUpload",
    "WorkspaceWrite",
    "check_connection",
    "prepare_attachment",
    "prepare_prompt",
    "segment_sink",
]

logger = logging.getLogger("coder_proto")

#: The environment variable ``organization_id`` defaults from (the fake server prints it).
ENV_ORGANIZATION_ID: Final = "CODER_ORGANIZATION_ID"

#: The structured-output tool's name (seed README "Structured output").
STRUCTURED_OUTPUT_TOOL: Final = "structured_output"
_STRUCTURED_OUTPUT_DESCRIPTION: Final = (
    "Submit your final structured answer as JSON. Call this exactly once, when your work is "
    "complete."
)
#: The result the structured-output tool answers a valid filing with: an acknowledgement, so
#: the model ends its turn naturally instead of the loop stopping on the call (rule 1).
STRUCTURED_OUTPUT_ACK: Final = (
    "Output received. Wind down and end your turn. Do not call structured_output again."
)
_STRUCTURED_OUTPUT_INSTRUCTIONS: Final = (
    "Submit your final answer by calling the structured_output tool exactly once."
)
#: The one re-prompt sent to an idle chat whose turn ended without a valid filing (rule 3).
NUDGE_PROMPT: Final = (
    "Call the structured_output tool now with your final answer, matching its input schema "
    "exactly. Do not answer in prose."
)
#: The property a non-object structured output is wrapped in (tool inputs are objects).
_WRAPPED_VALUE: Final = "value"

_SINGLE_FLIGHT: Final = (
    "A generation is already in flight on this agent (single-flight): wait for it to finish "
    "before starting another, or use one agent per concurrent session"
)

# -- results ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class GenerateResult(TurnResult):
    """What ``generate()`` and a finished ``stream()`` return: the ``TurnResult`` fields, plus
    ``output``, the validated structured answer when the agent has an ``output_type`` (else
    ``None``). When a structured-output nudge ran, ``steps`` and ``usage`` cover both turns
    and the other fields describe the nudge's final step."""

    output: Any = None

    @classmethod
    def from_turn(cls, result: TurnResult, *, output: Any = None) -> GenerateResult:
        fields = {a.name: getattr(result, a.name) for a in attrs.fields(TurnResult)}
        return cls(**fields, output=output)


def _merge(results: Sequence[TurnResult]) -> TurnResult:
    """One result for consecutive turns of one call: every step, the summed usage (F.5, D17)
    and every source; the rest from the last turn."""
    last = results[-1]
    if len(results) == 1:
        return last
    steps = tuple(step for result in results for step in result.steps)
    sources = {source.id: source for result in results for source in result.sources}
    return attrs.evolve(
        last,
        steps=steps,
        usage=sum_usage(result.usage for result in results),
        sources=tuple(sources.values()),
    )


# -- files --------------------------------------------------------------------------------------


def _is_bytes(value: object) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)


@attrs.frozen(kw_only=True)
class Attachment:
    """A file to attach to a user message (seed README "Files"): uploaded by the turn that
    sends it (which makes that turn effectful for retries, C.5).

    ``content`` is bytes, a path (``str`` or ``os.PathLike``; text must be encoded first) or a
    binary file object. ``media_type`` defaults from the file name's extension, ``filename``
    from the path or the file object's name (``coder_proto.client.plan_upload``). The content
    kind and the media-type allowlist are checked at construction, the 10 MiB cap as soon as
    the bytes are known: before anything is sent (wire 7).
    """

    content: Any = attrs.field(repr=False)
    media_type: str | None = None
    filename: str | None = None

    def __attrs_post_init__(self) -> None:
        self.plan()

    def plan(self) -> UploadPlan:
        """The upload plan with its media type checked against the allowlist (wire 7): the
        bytes in ``data``, or the ``path`` / ``stream`` the adapter reads."""
        plan = plan_upload(self.content, media_type=self.media_type, filename=self.filename)
        return attrs.evolve(plan, media_type=check_media_type(plan.media_type))


@attrs.frozen(kw_only=True)
class AttachedFile:
    """A file uploaded once with ``attach()`` and referenced by id in later prompts (no
    re-upload). Usable directly as a content part, or through ``to_file_part()``."""

    file_id: str
    media_type: str
    filename: str | None = None

    def to_file_part(self) -> FileContent:
        """The prompt part referencing this upload (P.3: a file by id)."""
        return FileContent(file_id=self.file_id, media_type=self.media_type, filename=self.filename)


@attrs.frozen(kw_only=True)
class _PendingRead:
    """A placeholder for an attachment whose bytes the adapter is reading."""

    index: int
    media_type: str
    filename: str | None


def _file_data(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CoderAgentError(
            f"Unsupported file content: the file object returned {type(data).__name__}, "
            "expected bytes (open the file in binary mode)."
        )
    body = bytes(data)
    check_attachment_size(len(body))
    return body


@attrs.frozen(kw_only=True)
class PromptPlan:
    """A prompt waiting for its files: ``reads`` are the upload plans whose ``path`` or
    ``stream`` the adapter reads (as the client's ``upload_chat_file`` does), in order;
    ``build`` takes their bytes and returns the prompt messages."""

    reads: tuple[UploadPlan, ...]
    _template: tuple[Any, ...] = attrs.field(alias="template", repr=False)

    def build(self, contents: Sequence[object]) -> tuple[Message, ...]:
        """The prompt's messages with the read bytes in place (type- and size-checked,
        wire 7)."""
        if len(contents) != len(self.reads):
            raise CoderAgentError(
                f"expected the contents of {len(self.reads)} files, got {len(contents)}"
            )
        out: list[Message] = []
        for message in self._template:
            if isinstance(message, UserMessage):
                parts = tuple(
                    FileContent(
                        data=_file_data(contents[p.index]),
                        media_type=p.media_type,
                        filename=p.filename,
                    )
                    if isinstance(p, _PendingRead)
                    else p
                    for p in message.content
                )
                message = UserMessage(parts)
            out.append(message)
        return tuple(out)


class _PromptBuilder:
    def __init__(self) -> None:
        self.reads: list[UploadPlan] = []

    def attachment(self, item: Attachment) -> UserContent | _PendingRead:
        plan = item.plan()
        media_type = plan.media_type
        assert media_type is not None
        if plan.data is not None:
            return FileContent(
                data=_file_data(plan.data), media_type=media_type, filename=plan.filename
            )
        self.reads.append(plan)
        return _PendingRead(
            index=len(self.reads) - 1, media_type=media_type, filename=plan.filename
        )

    def part(self, item: object) -> UserContent | _PendingRead:
        if isinstance(item, str):
            return TextContent(item)
        if isinstance(item, TextContent | FileContent | FileReferenceInput):
            return item
        if isinstance(item, Attachment):
            return self.attachment(item)
        if isinstance(item, AttachedFile):
            return item.to_file_part()
        if isinstance(item, Mapping):
            return self.part_dict(item)
        raise CoderAgentError(f"unsupported content part of type {type(item).__name__}")

    def part_dict(self, item: Mapping[str, Any]) -> UserContent | _PendingRead:
        kind = item.get("type")
        if kind == "text":
            text = item.get("text")
            if not isinstance(text, str):
                raise CoderAgentError('a "text" part needs a string "text"')
            return TextContent(text)
        if kind == "file":
            file_id = item.get("file_id")
            if isinstance(file_id, str) and file_id:
                return FileContent(
                    file_id=file_id,
                    media_type=item.get("media_type"),
                    filename=item.get("filename"),
                )
            if "data" not in item:
                raise CoderAgentError('a "file" part needs "data" (bytes or a path) or "file_id"')
            return self.attachment(
                Attachment(
                    content=item["data"],
                    media_type=item.get("media_type"),
                    filename=item.get("filename"),
                )
            )
        raise CoderAgentError(f'unsupported content part type {kind!r} (use "text" or "file")')

    def content(self, value: object) -> tuple[UserContent | _PendingRead, ...]:
        if isinstance(value, str):
            return (TextContent(value),)
        if isinstance(value, Sequence) and not _is_bytes(value):
            return tuple(self.part(item) for item in value)
        return (self.part(value),)

    def message(self, item: Mapping[str, Any]) -> Any:
        role = item.get("role")
        content = item.get("content")
        if role == "user":
            return UserMessage(self.content(content if content is not None else ()))  # type: ignore[arg-type]
        if role == "system":
            if not isinstance(content, str):
                raise CoderAgentError("a system message's content must be a string")
            return SystemMessage(content)
        if role == "assistant":
            return AssistantMessage()
        if role == "tool":
            return ToolMessage(tuple(self.tool_result(r) for r in _as_list(content, "tool")))
        raise CoderAgentError(
            f"unsupported message role {role!r} (use system, user, assistant or tool)"
        )

    @staticmethod
    def tool_result(item: object) -> ToolResultContent:
        if not isinstance(item, Mapping) or not isinstance(item.get("tool_call_id"), str):
            raise CoderAgentError('a tool message holds results with a "tool_call_id" string')
        name = item.get("tool_name")
        return ToolResultContent(
            tool_call_id=item["tool_call_id"],
            output=encode_output(item.get("output")),
            is_error=item.get("is_error") is True,
            tool_name=name if isinstance(name, str) else "",
        )


def _as_list(value: object, role: str) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise CoderAgentError(f"a {role} message's content must be a list")


_MESSAGE_CLASSES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def _is_message(item: object) -> bool:
    return isinstance(item, _MESSAGE_CLASSES) or (isinstance(item, Mapping) and "role" in item)


def prepare_prompt(prompt: object = None, messages: object = None) -> PromptPlan:
    """What a caller passed to ``generate`` / ``stream`` as a ``PromptPlan`` (appendix P).

    Exactly one of ``prompt`` and ``messages`` is given. A prompt is a string, one content part
    or a sequence of them (strings, ``TextContent``, ``FileContent``, ``Attachment``,
    ``AttachedFile``, ``{"type": "text" | "file", ...}`` dicts), or a sequence of messages.
    Messages are ``SystemMessage`` / ``UserMessage`` / ``AssistantMessage`` / ``ToolMessage``
    or dicts with a ``role`` (``system``, ``user``, ``assistant``, ``tool``) and ``content``.
    Attachments given as bytes are size-checked now; paths and file objects become ``reads``.
    Raises ``CoderAgentError`` on anything else."""
    if (prompt is None) == (messages is None):
        raise CoderAgentError("pass either a prompt or messages (exactly one of them)")
    builder = _PromptBuilder()
    items: list[Any]
    if messages is not None:
        if _is_message(messages):
            items = [messages]
        elif isinstance(messages, Sequence) and not isinstance(messages, str | bytes):
            items = list(messages)
        else:
            items = [None]
        if not all(_is_message(i) for i in items):
            raise CoderAgentError("messages must hold only messages (classes or role dicts)")
    elif isinstance(prompt, str):
        return PromptPlan(reads=(), template=normalize_prompt(prompt))
    elif _is_message(prompt):
        items = [prompt]
    elif isinstance(prompt, Sequence) and not _is_bytes(prompt):
        items = list(prompt)
    else:
        items = [prompt]
    template: tuple[Any, ...]
    if messages is not None or (items and all(_is_message(i) for i in items)):
        template = tuple(builder.message(i) if isinstance(i, Mapping) else i for i in items)
    elif any(_is_message(i) for i in items):
        raise CoderAgentError("a prompt sequence must hold only messages or only content parts")
    else:
        parts = tuple(builder.part(i) for i in items)
        template = (UserMessage(parts),)  # type: ignore[arg-type]
    return PromptPlan(reads=tuple(builder.reads), template=template)


def prepare_attachment(
    content: object, *, media_type: str | None = None, filename: str | None = None
) -> UploadPlan:
    """``attach()``'s checks before any I/O (wire 7): the upload plan with its media type
    resolved and allowlisted, and bytes content size-checked."""
    plan = Attachment(content=content, media_type=media_type, filename=filename).plan()
    if plan.data is not None:
        check_attachment_size(len(plan.data))
    return plan


# -- client tools (D5) --------------------------------------------------------------------------


def _failure_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@attrs.frozen(kw_only=True)
class ToolInvocation:
    """One client tool call the adapter must run: ``call()`` invokes the tool's function with
    the validated input (and its ``ToolContext``); await the value when ``is_async`` (or
    when it is awaitable), then report ``succeeded(value)`` or ``failed(exception)``."""

    call_part: ToolCall
    tool: Tool
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def tool_call_id(self) -> str:
        return self.call_part.tool_call_id

    @property
    def is_async(self) -> bool:
        return self.tool.is_async

    def call(self) -> Any:
        """Call the tool's function (its return value may be awaitable)."""
        func = self.tool.func
        assert func is not None
        return func(*self.args, **self.kwargs)

    def succeeded(self, value: Any) -> ToolOutcome:
        """The outcome for the value the function returned (``encode_output``)."""
        return ToolOutcome(tool_call_id=self.tool_call_id, output=encode_output(value))

    def failed(self, exc: BaseException) -> ToolOutcome:
        """The D5 error outcome for an exception the function raised."""
        logger.info("client tool %r raised %s", self.tool.name, type(exc).__name__, exc_info=exc)
        return ToolOutcome(tool_call_id=self.tool_call_id, output=_failure_text(exc), is_error=True)


@attrs.frozen(kw_only=True)
class ToolPlan:
    """How to answer one ``RunTools`` action (D5): ``outcomes`` are decided already (unknown
    tools, invalid input, tools without a function, structured-output filings);
    ``invocations`` must be run by the adapter. Report every outcome, in any order, with
    ``turn.tool_results`` (the turn orders and completes them)."""

    outcomes: tuple[ToolOutcome, ...] = ()
    invocations: tuple[ToolInvocation, ...] = ()


def plan_tool_calls(
    calls: Iterable[ToolCall],
    tools: Mapping[str, Tool],
    *,
    chat_id: str | None = None,
    structured_output: StructuredOutput | None = None,
) -> ToolPlan:
    """D5 for one pause's client calls, deduplicated by id: an unregistered name, input that
    fails validation, or a tool without a function gets an error outcome with a string
    message; a structured-output filing is acknowledged (or answered with its validation
    error, so the model retries in the loop); every other call becomes a ``ToolInvocation``."""
    outcomes: list[ToolOutcome] = []
    invocations: list[ToolInvocation] = []
    seen: set[str] = set()
    for call in calls:
        if call.tool_call_id in seen:
            continue
        seen.add(call.tool_call_id)
        if structured_output is not None and call.tool_name == structured_output.name:
            outcomes.append(structured_output.answer(call))
            continue
        tool = tools.get(call.tool_name)
        if tool is None:
            outcomes.append(
                ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    output=f"unknown tool {call.tool_name!r}: no client tool of that name is "
                    "registered",
                    is_error=True,
                )
            )
            continue
        if tool.func is None:
            outcomes.append(
                ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    output=f"tool {tool.name!r} has no function to run",
                    is_error=True,
                )
            )
            continue
        try:
            parsed = tool.parse_input(call.input)
        except ToolInputError as exc:
            outcomes.append(
                ToolOutcome(tool_call_id=call.tool_call_id, output=str(exc), is_error=True)
            )
            continue
        context = ToolContext(
            chat_id=chat_id, tool_call_id=call.tool_call_id, tool_name=call.tool_name
        )
        args, kwargs = tool.call_args(parsed, context)
        invocations.append(ToolInvocation(call_part=call, tool=tool, args=args, kwargs=kwargs))
    return ToolPlan(outcomes=tuple(outcomes), invocations=tuple(invocations))


# -- structured output --------------------------------------------------------------------------


class StructuredOutputError(CoderAgentError):
    """The turn ended without a valid ``structured_output`` filing, after the one nudge an idle
    chat gets (seed README "Structured output", rules 2 and 3). ``problems`` are the
    validation problems of the newest invalid filing (empty when the model filed nothing);
    ``result`` is the call's result, for inspection."""

    def __init__(
        self,
        message: str,
        *,
        chat_id: str | None = None,
        problems: Sequence[str] = (),
        result: TurnResult | None = None,
    ) -> None:
        super().__init__(message, chat_id=chat_id)
        self.problems = tuple(problems)
        self.result = result

    def _state(self) -> dict[str, Any]:
        return {"chat_id": self.chat_id, "problems": self.problems}


class StructuredOutput:
    """The ``structured_output`` tool pattern (seed README "Structured output"), as data and
    decisions:

    * ``tool`` is the client tool whose input schema is the answer's schema: an attrs class,
      a dataclass or a pydantic model (the answer is an instance), any other type
      ``coder_proto.tools`` can describe (a non-object type is wrapped as ``{"value": ...}``
      and unwrapped again), or an explicit JSON Schema mapping (the answer is the validated
      JSON value);
    * ``answer`` acknowledges a valid filing in the tool loop, and answers an invalid one with
      its validation problems as an error result so the model retries (rule 2);
    * ``find`` scans every step's calls from the newest back and returns the first filing that
      validates: a schema-invalid re-filing never shadows a valid answer (rule 2).
    """

    name: str = STRUCTURED_OUTPUT_TOOL

    def __init__(self, output_type: Any, *, description: str | None = None) -> None:
        self.output_type = output_type
        desc = description or _STRUCTURED_OUTPUT_DESCRIPTION
        #: True when the answer travels as ``{"value": ...}`` (any type but a model class).
        self.wrapped = False
        if isinstance(output_type, Mapping):
            self.tool = Tool.from_schema(self.name, output_type, description=desc, kwargs=False)
        elif _is_model_type(output_type):
            self.tool = Tool.from_model(output_type, name=self.name, description=desc)
        else:
            self.wrapped = True

            # Only the signature matters: ``answer`` acknowledges filings in the core.
            def structured_output(value: Any) -> None: ...

            structured_output.__annotations__ = {"value": output_type, "return": None}
            self.tool = Tool.from_function(structured_output, name=self.name, description=desc)

    def __repr__(self) -> str:
        return f"StructuredOutput({self.output_type!r})"

    def parse(self, call: ToolCall) -> Any:
        """The validated answer a filing carries; raises ``ToolInputError``."""
        value = self.tool.parse_input(call.input)
        return value[_WRAPPED_VALUE] if self.wrapped else value

    def answer(self, call: ToolCall) -> ToolOutcome:
        """The tool loop's result for a filing (the acknowledgement, or the validation error)."""
        try:
            self.parse(call)
        except ToolInputError as exc:
            return ToolOutcome(tool_call_id=call.tool_call_id, output=str(exc), is_error=True)
        return ToolOutcome(tool_call_id=call.tool_call_id, output=STRUCTURED_OUTPUT_ACK)

    def find(self, result: TurnResult) -> tuple[bool, Any, tuple[str, ...]]:
        """``(found, answer, problems)``: the newest valid filing across all steps (rule 2);
        ``problems`` describe the newest invalid one when none validates."""
        problems: tuple[str, ...] = ()
        for step in reversed(result.steps):
            for call in reversed(step.tool_calls):
                if call.tool_name != self.name or call.provider_executed:
                    continue
                try:
                    return True, self.parse(call), ()
                except ToolInputError as exc:
                    if not problems:
                        problems = (str(exc),)
        return False, None, problems


def _idle(result: TurnResult) -> bool:
    """The chat is idle after ``result``: the run settled by itself (rule 3 never nudges a
    chat that is still busy: a tool-call stop winds down after D7's interrupt, and a
    promotion settle means another prompt is running)."""
    return result.finish_reason == "stop" and result.settled_by is None and bool(result.chat_id)


# -- workspace files ----------------------------------------------------------------------------


class WorkspaceFiles(Protocol):
    """A workspace-files adapter (seed README "Workspace files"): whoever holds a connection
    to the workspace supplies it. ``workspace_id`` must equal the agent's (H.2.3).
    ``write_file(path, data)`` writes the bytes as-is (sync or async, as the runtime's
    adapter expects) and may return the path it wrote."""

    @property
    def workspace_id(self) -> str: ...

    def write_file(self, path: str, data: bytes) -> Any: ...


@attrs.frozen(kw_only=True)
class WorkspaceUpload:
    """What ``upload_to_workspace()`` wrote: the path (as the adapter reported it, else the
    one asked for) and the size in bytes."""

    path: str
    size: int


def _check_workspace_files(adapter: object, workspace_id: str | None) -> None:
    if adapter is None:
        return
    if not callable(getattr(adapter, "write_file", None)):
        raise CoderAgentError("workspace_files must have a write_file(path, data) method")
    adapter_id = getattr(adapter, "workspace_id", None)
    if adapter_id != workspace_id:
        raise CoderAgentError(
            f"the workspace_files adapter is for workspace {adapter_id!r} but the agent's "
            f"workspace_id is {workspace_id!r} (H.2)"
        )


def _check_workspace_path(path: object) -> str:
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise CoderAgentError(f"a workspace path must be a non-empty string, got {path!r}")
    return path


# -- history --------------------------------------------------------------------------------------


class HistoryJob(CoreMachine[tuple[ChatMessage, ...]]):
    """Every message of a chat, oldest first: newest-first pages of ``page_size`` walked back
    with ``before_id`` until the server says there is no more (wire 2)."""

    def __init__(
        self, selector: PrefixSelector, chat_id: str, *, now: float, page_size: int = 200
    ) -> None:
        super().__init__(selector)
        self.chat_id = check_chat_id(chat_id)
        self.page_size = page_size
        self._start(now)

    def _run(self) -> Generator[None, None, tuple[ChatMessage, ...]]:
        by_id: dict[int, ChatMessage] = {}
        before: int | None = None
        while True:
            page = yield from self._rest(
                build_get_messages(self.chat_id, before_id=before, limit=self.page_size),
                parse_get_messages,
            )
            fresh = [m for m in page.messages if m.id not in by_id]
            for message in fresh:
                by_id[message.id] = message
            if not page.has_more or not fresh:
                break
            before = min(m.id for m in fresh)
        return tuple(by_id[k] for k in sorted(by_id))


# -- the agent ------------------------------------------------------------------------------------


def _env_str(env: Mapping[str, str] | None, name: str) -> str | None:
    value = (env or {}).get(name)
    return value if isinstance(value, str) and value.strip() else None


class GenerateCall:
    """One ``generate()`` call: its first ``turn``, then ``advance`` with each turn's result
    until a ``GenerateResult`` comes back (seed README "Structured output", rule 3)."""

    def __init__(self, core: AgentCore, messages: Sequence[Message], *, now: float) -> None:
        self._core = core
        self._results: list[TurnResult] = []
        self.nudged = False
        self.turn: Turn = core.session.generate(messages, now=now)

    def advance(self, result: TurnResult, *, now: float) -> Turn | GenerateResult:
        """The next turn to drive (the one nudge), or the call's result. Raises
        ``StructuredOutputError`` when the answer is missing or invalid and no nudge is
        left (or the chat is not idle)."""
        self._results.append(result)
        merged = _merge(self._results)
        output = self._core.output
        if output is None:
            return GenerateResult.from_turn(merged)
        found, value, problems = output.find(merged)
        if found:
            return GenerateResult.from_turn(merged, output=value)
        if not self.nudged and _idle(result):
            self.nudged = True
            logger.info("no valid structured_output filing; nudging the idle chat once")
            self.turn = self._core.session.generate(NUDGE_PROMPT, now=now)
            return self.turn
        detail = f": {problems[0]}" if problems else ""
        what = "no valid" if problems else "no"
        raise StructuredOutputError(
            f"the turn ended with {what} structured_output filing"
            f"{' after one nudge' if self.nudged else ''}{detail}",
            chat_id=merged.chat_id,
            problems=problems,
            result=merged,
        )


class AgentCore:
    """The pure part of one ``CoderAgent`` (see the module docstring). ``options`` are its
    settings (``AgentOptions``; the defaults when ``None``); ``base_url`` and ``token`` come
    from the adapter's client; ``selector`` is that client's prefix state
    (one per client, wire 1.4); ``env`` supplies ``CODER_ORGANIZATION_ID``. Construction does
    no I/O (H.1) and raises ``CoderAgentError`` on bad settings."""

    def __init__(
        self,
        options: AgentOptions | None = None,
        *,
        base_url: str,
        token: str | None,
        chat_id: str | None = None,
        last_seen_message_id: int | None = None,
        workspace_files: WorkspaceFiles | None = None,
        selector: PrefixSelector | None = None,
        sink: TransportEventSink | None = None,
        reader_factory: ReaderFactory | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if options is None:
            options = AgentOptions()
        elif not isinstance(options, AgentOptions):
            raise CoderAgentError(f"options must be an AgentOptions, got {options!r}")
        self.options = options
        organization_id = options.organization_id
        if organization_id is None:
            organization_id = _env_str(env, ENV_ORGANIZATION_ID)
        if not isinstance(organization_id, str) or not organization_id.strip():
            raise CoderAgentError(
                "organization_id is required: pass it, or set the "
                f"{ENV_ORGANIZATION_ID} environment variable"
            )
        self.tools: dict[str, Tool] = dict(options.tools)
        self.output: StructuredOutput | None = None
        instructions = options.instructions
        if options.output_type is not None:
            if STRUCTURED_OUTPUT_TOOL in self.tools:
                raise CoderAgentError(
                    f"a tool named {STRUCTURED_OUTPUT_TOOL!r} clashes with output_type"
                )
            self.output = StructuredOutput(options.output_type)
            instructions = "\n\n".join(
                t for t in (instructions, _STRUCTURED_OUTPUT_INSTRUCTIONS) if t
            )
        _check_workspace_files(workspace_files, options.workspace_id)
        self.workspace_files = workspace_files
        registered = [t.to_dynamic_tool() for t in self.tools.values()]
        if self.output is not None:
            registered.append(self.output.tool.to_dynamic_tool())
        config = SessionConfig(
            base_url=base_url,
            token=token,
            organization_id=organization_id,
            model=options.model,
            instructions=instructions,
            tools=tuple(registered),
            workspace_id=options.workspace_id,
            mcp_server_ids=options.mcp_server_ids,
            plan_mode=options.plan_mode,
            reasoning_effort=options.reasoning_effort,
            busy_behavior=options.busy_behavior,
            request_timeout=options.request_timeout,
            max_steps=options.max_steps,
            max_retries=options.max_retries,
            settle_deadline=options.settle_deadline,
            settle_retry_delay=options.settle_retry_delay,
            chat_id=chat_id,
            last_seen_message_id=last_seen_message_id,
        )
        self.organization_id = organization_id
        self.session = Session(config, selector=selector, sink=sink, reader_factory=reader_factory)
        self._busy = False

    def __repr__(self) -> str:
        return (
            f"AgentCore(chat_id={self.session.chat_id!r}, "
            f"last_seen_message_id={self.session.last_seen_message_id!r}, busy={self.busy})"
        )

    @property
    def config(self) -> SessionConfig:
        return self.session.config

    # -- single flight (G.2) ---------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """True while a ``generate`` / ``stream`` call is in flight."""
        turn = self.session.in_flight
        return self._busy or (turn is not None and not turn.done)

    def begin(self) -> None:
        """Enter a call; raises ``CoderAgentError`` at once when one is in flight."""
        if self.busy:
            raise CoderAgentError(_SINGLE_FLIGHT)
        self._busy = True

    def end(self) -> None:
        """Leave the call entered with ``begin``."""
        self._busy = False

    # -- calls -------------------------------------------------------------------------------

    def generate(self, messages: Sequence[Message], *, now: float) -> GenerateCall:
        """Start a ``generate()`` call on the prepared ``messages``."""
        return GenerateCall(self, messages, now=now)

    def stream(self, messages: Sequence[Message], *, now: float) -> Turn:
        """Start a ``stream()`` turn; its parts are delivered live in ``turn.parts``."""
        return self.session.stream(messages, now=now)

    def stream_result(self, result: TurnResult) -> GenerateResult:
        """A finished stream's result, with the structured answer when one was filed validly
        (a stream is never nudged: its consumer has seen the turn already)."""
        output = None
        if self.output is not None:
            _found, output, _problems = self.output.find(result)
        return GenerateResult.from_turn(result, output=output)

    def plan_tools(self, calls: Iterable[ToolCall]) -> ToolPlan:
        """``plan_tool_calls`` with the agent's tools, chat and structured output."""
        return plan_tool_calls(
            calls, self.tools, chat_id=self.session.chat_id, structured_output=self.output
        )

    def workspace_upload(self, path: object) -> tuple[WorkspaceFiles, str]:
        """``upload_to_workspace()``'s checks: the adapter and the validated path."""
        if self.workspace_files is None:
            raise CoderAgentError(
                "upload_to_workspace needs a workspace_files adapter (and its workspace_id)"
            )
        return self.workspace_files, _check_workspace_path(path)

    def workspace_write(self, content: object, path: object) -> WorkspaceWrite:
        """``upload_to_workspace()``'s plan: the checks of ``workspace_upload`` and what to
        read (bytes, a path or a binary file object)."""
        adapter, target = self.workspace_upload(path)
        return WorkspaceWrite(adapter=adapter, target=target, plan=plan_upload(content))

    def require_chat(self) -> str:
        """The session's chat (or the last known one) for chat-level operations."""
        chat_id = self.session.chat_id or self.session.last_known_chat_id
        if chat_id is None:
            raise CoderAgentError("the agent has no chat yet: run a turn first")
        return chat_id


# -- the adapters' shared shell ---------------------------------------------------------------


def segment_sink(
    client_sink: TransportEventSink, own_sink: TransportEventSink | None
) -> TransportEventSink:
    """The session's sink when the agent runs on a supplied client (wire 11, D24): the
    ``segment:*`` events go to the agent's own sink, everything else (``http:*``, ``ws:*``) to
    the client's. Without an agent hook every event goes to the client's sink."""
    if own_sink is None:
        return client_sink
    own = own_sink

    def route(event: Any) -> None:
        if event.type.startswith("segment:"):
            own.emit(event)
        else:
            client_sink.emit(event)

    return TransportEventSink(route, wall_clock=client_sink.wall_clock)


@attrs.frozen(kw_only=True)
class WorkspaceWrite:
    """One ``upload_to_workspace()`` call, checked before any I/O (seed README "Workspace
    files"): the adapter reads ``plan`` whole (no allowlist, no size cap; ``plan.data`` is
    already there for bytes), checks what it read with ``data``, calls
    ``adapter.write_file(target, data)`` and reports ``result(written, data)``."""

    adapter: WorkspaceFiles
    target: str
    plan: UploadPlan

    @staticmethod
    def data(read: object) -> bytes:
        """The bytes a file object returned (``CoderAgentError`` for anything else)."""
        if not isinstance(read, bytes | bytearray | memoryview):
            raise CoderAgentError(
                f"the file object returned {type(read).__name__}, expected bytes "
                "(open the file in binary mode)"
            )
        return bytes(read)

    def result(self, written: object, data: bytes) -> WorkspaceUpload:
        """The path the adapter reported (when a non-empty string), else the target."""
        path = written if isinstance(written, str) and written else self.target
        return WorkspaceUpload(path=path, size=len(data))


class AgentCalls:
    """The agent's plain operations (wire 2, 7, 8, H.3; D11, D17), defined once for every
    adapter: each returns a ``coder_proto.calls.Call`` that the adapter's ``CoderAgent`` method
    of the same name and signature performs (``coder_proto.calls.public_method``)."""

    def __init__(self, core: AgentCore) -> None:
        self._core = core

    def __repr__(self) -> str:
        return f"AgentCalls({self._core!r})"

    def _chat_calls(self) -> ChatCalls:
        session = self._core.session
        return ChatCalls(session.selector, session.config.base_url)

    def interrupt(
        self, *, wait: bool = False, timeout: float | None = None
    ) -> Call[InterruptResult]:
        """Interrupt the session's chat (or the last known one) (H.3, D4): ``interrupted`` is
        ``False`` when there is no chat. With ``wait``, poll until the chat settled, at most
        ``timeout`` seconds (15 by default; builtin ``TimeoutError`` after that, D11). On the
        blocking adapter it may be called from another thread while a turn runs: that turn
        then settles and returns."""
        session = self._core.session
        return Call(
            machine=lambda now, _data: session.interrupt(now=now, wait=wait, timeout=timeout),
            session=session,
        )

    def list_models(self) -> Call[tuple[ChatModelConfig, ...]]:
        """The organization's model configs (wire 8), to pick a ``model`` hint."""
        return self._chat_calls().list_model_configs(self._core.organization_id)

    def get_chat_cost(self, chat_id: str | None = None) -> Call[ChatCost]:
        """The chat's cost (``GET {P}/{chat}/cost``; D17: never called implicitly). Defaults
        to the session's chat, else the last known one."""
        return self._chat_calls().get_chat_cost(chat_id or self._core.require_chat())

    def attach(
        self, content: object, *, media_type: str | None = None, filename: str | None = None
    ) -> Call[AttachedFile]:
        """Upload a file once (wire 7: allowlisted media types, 10 MiB) and return a reference
        to put in later prompts without re-uploading. ``content`` is bytes, a path or a binary
        file object; the media type defaults from the file name's extension."""
        plan = prepare_attachment(content, media_type=media_type, filename=filename)
        kind = plan.media_type
        assert kind is not None
        name = plan.filename
        upload = self._chat_calls().upload_chat_file(
            self._core.organization_id, content, media_type=kind, filename=name
        )
        return Call(
            machine=upload.machine,
            read=upload.read,
            finish=lambda file_id: AttachedFile(file_id=file_id, media_type=kind, filename=name),
        )

    def history(self, *, file_url: FileUrlResolver | None = None) -> Call[list[UIMessage]]:
        """The chat's whole history as UI messages (state machines I), oldest first."""
        core = self._core
        chat_id = core.require_chat()
        selector = core.session.selector
        return Call(
            machine=lambda now, _data: HistoryJob(selector, chat_id, now=now),
            finish=lambda messages: to_ui_messages(messages, file_url=file_url),
        )


class AgentClient(Protocol):
    """What ``AgentShell`` needs of an adapter's ``CoderChatClient``."""

    settings: ClientSettings
    selector: PrefixSelector
    sink: TransportEventSink
    driver: Any

    def _make_sink(self, callback: Callable[[Any], object] | None) -> TransportEventSink: ...


ClientT = TypeVar("ClientT", bound=AgentClient)
HttpClientT = TypeVar("HttpClientT")


class AgentShell(Generic[ClientT, HttpClientT]):
    """The runtime-independent half of every adapter's ``CoderAgent`` (DESIGN "Public API";
    H.1, H.2): the constructor and its checks, the client it talks through and the event
    routing, the session-state properties. An adapter subclasses it with its client class
    (``_client_class``) and adds the methods that perform I/O.

    One agent is one server chat, created by the first turn and reused by the next ones
    (H.1). Connection: ``client`` (a ``CoderChatClient`` of the same runtime, never closed
    here) or ``base_url`` / ``token`` (defaulting to ``CODER_URL`` / ``CODER_SESSION_TOKEN``)
    with ``http_client`` (the runtime's httpx client) and ``verify``.

    Settings: ``options`` (an ``AgentOptions``) and the same settings as keywords; a keyword
    passed explicitly overrides the field of ``options`` (see ``AgentOptions``).
    ``organization_id`` defaults to ``CODER_ORGANIZATION_ID``. Durations are seconds:
    ``request_timeout`` bounds each segment (C.3), ``settle_deadline`` and
    ``settle_retry_delay`` bound cleanup (H.4, H.5). ``tools`` are ``@tool`` functions,
    ``Tool`` objects (explicit JSON Schema, attrs classes, dataclasses, pydantic models) or
    plain functions, as a sequence or a name -> tool mapping. ``output_type`` enables the
    structured-output tool (``result.output``). ``chat_id`` and ``last_seen_message_id``
    resume a chat. ``on_transport_event`` receives transport events; with a supplied ``client`` the
    ``http:*`` and ``ws:*`` events go to that client's hook and this one receives the
    ``segment:*`` events (all of them go to the client's hook when the agent has none).
    ``recorder`` (a ``coder_proto.transcript.Recorder``) is told what crosses the wire
    (``docs/transcripts.md``). Construction does no I/O.
    """

    #: The adapter's ``CoderChatClient`` class: a supplied client must be one.
    _client_class: ClassVar[type[Any]]

    @option_keywords
    def __init__(
        self,
        *,
        options: AgentOptions | None = None,
        organization_id: str | None = None,
        model: str | None = None,
        instructions: str | None = None,
        tools: Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | None = None,
        output_type: Any = None,
        request_timeout: float | None = None,
        chat_id: str | None = None,
        last_seen_message_id: int | None = None,
        workspace_id: str | None = None,
        workspace_files: WorkspaceFiles | None = None,
        mcp_server_ids: Sequence[str] = (),
        reasoning_effort: str | None = None,
        plan_mode: str | None = None,
        busy_behavior: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_retries: int = 0,
        settle_deadline: float = SETTLE_DEADLINE,
        settle_retry_delay: float = SETTLE_RETRY_DELAY,
        on_transport_event: Callable[[Any], object] | None = None,
        client: ClientT | None = None,
        base_url: str | None = None,
        token: str | None = None,
        http_client: HttpClientT | None = None,
        verify: Any = True,
        recorder: Recorder | None = None,
    ) -> None:
        # The option keywords are folded into ``options`` (``option_keywords``).
        assert options is not None
        client_class = self._client_class
        if client is not None:
            check_connection(client, base_url=base_url, token=token, http_client=http_client)
            if not isinstance(client, client_class):
                runtime = client_class.__module__.partition(".")[0]
                raise CoderAgentError(f"client must be a {runtime} CoderChatClient")
            self._owns_client = False
            own = client._make_sink(on_transport_event) if on_transport_event else None
            sink = segment_sink(client.sink, own)
        else:
            client = client_class(
                base_url,
                token,
                http_client=http_client,
                verify=verify,
                on_transport_event=on_transport_event,
                recorder=recorder,
            )
            assert client is not None
            self._owns_client = True
            sink = client.sink
        self._client: ClientT = client
        self._driver: Any = client.driver
        if recorder is not None:
            # Transcripts (docs/transcripts.md): the driver reports what crosses the wire.
            self._driver.recorder = recorder
        self._core = AgentCore(
            options,
            base_url=client.settings.base_url,
            token=client.settings.token,
            chat_id=chat_id,
            last_seen_message_id=last_seen_message_id,
            workspace_files=workspace_files,
            selector=client.selector,
            sink=sink,
            env=os.environ,
        )
        self._calls = AgentCalls(self._core)
        self._closed = False
        self._setup()

    def _setup(self) -> None:
        """For the adapter: state of its own, set up at the end of construction."""

    def __repr__(self) -> str:
        return (
            f"<CoderAgent chat_id={self.chat_id!r} "
            f"last_seen_message_id={self.last_seen_message_id!r}>"
        )

    @property
    def client(self) -> ClientT:
        """The raw chat client this agent talks through."""
        return self._client

    @property
    def chat_id(self) -> str | None:
        """The session's chat: ``None`` before the first turn created it, or after a reset or a
        fresh-chat stream failure (C.5)."""
        return self._core.session.chat_id

    @property
    def last_seen_message_id(self) -> int | None:
        """The resume cursor (D.1): persist it with ``chat_id`` to resume in another process."""
        return self._core.session.last_seen_message_id

    @property
    def last_known_chat_id(self) -> str | None:
        """The last chat a turn ran on; ``interrupt`` and ``archive`` target it after a reset."""
        return self._core.session.last_known_chat_id

    @property
    def stranded_chat_ids(self) -> tuple[str, ...]:
        """Chats failed fresh-chat turns discarded, oldest first; ``archive`` retires them."""
        return self._core.session.stranded_chat_ids


def check_connection(
    client: object, *, base_url: object, token: object, http_client: object
) -> None:
    """A supplied ``client`` excludes the connection settings that would build one
    (``CoderAgentError`` otherwise)."""
    if client is not None and (
        base_url is not None or token is not None or http_client is not None
    ):
        raise CoderAgentError("pass either client or base_url/token/http_client, not both")
