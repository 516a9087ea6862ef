"""The raw client's Python arguments as request bodies (wire 2.1, 2.2, 3.1; D5): what
``create_chat``, ``create_chat_message`` and ``submit_tool_results`` accept besides a ready
request value, checked before any request exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._actions import ToolOutcome
from .._errors import CoderAgentError
from .._jobs.organization import UNKNOWN_ORGANIZATION
from .._rest.routes import check_chat_id
from .._wire.chats import (
    ChatInputPart,
    CreateChatMessageRequest,
    CreateChatRequest,
    DynamicTool,
    FileInput,
    FileReferenceInput,
    TextInput,
    ToolResultInput,
)

__all__ = [
    "chat_input_parts",
    "create_chat_message_request",
    "create_chat_request",
    "tool_result_inputs",
]


def chat_input_parts(content: object) -> tuple[ChatInputPart, ...]:
    """Message content as input parts (wire 3.1): a string is one text part; otherwise a
    non-empty sequence of ``TextInput`` / ``FileInput`` / ``FileReferenceInput`` (strings in
    it become text parts)."""
    if isinstance(content, str):
        return (TextInput(content),)
    if isinstance(content, TextInput | FileInput | FileReferenceInput):
        return (content,)
    if not isinstance(content, Sequence) or isinstance(content, bytes | bytearray):
        raise CoderAgentError(
            "content must be a string or a sequence of TextInput / FileInput / "
            f"FileReferenceInput parts, got {type(content).__name__}"
        )
    parts: list[ChatInputPart] = []
    for item in content:
        if isinstance(item, str):
            parts.append(TextInput(item))
        elif isinstance(item, TextInput | FileInput | FileReferenceInput):
            parts.append(item)
        else:
            raise CoderAgentError(
                f"content parts must be TextInput, FileInput or FileReferenceInput, got {item!r}"
            )
    if not parts:
        raise CoderAgentError("content must not be empty")
    return tuple(parts)


def _opt_text(value: object, name: str) -> str | None:
    if value is None:
        return None
    if type(value) is not str:
        raise CoderAgentError(f"{name} must be a string, got {value!r}")
    return value


def _ids(value: object, name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise CoderAgentError(f"{name} must be a sequence of strings, got {value!r}")
    out = tuple(value)
    if not all(type(v) is str and v for v in out):
        raise CoderAgentError(f"{name} must be non-empty strings")
    return out


def create_chat_request(
    request: CreateChatRequest | None = None,
    *,
    organization_id: str | None = None,
    content: object = None,
    system_prompt: str | None = None,
    tools: Sequence[DynamicTool] = (),
    model_config_id: str | None = None,
    reasoning_effort: str | None = None,
    workspace_id: str | None = None,
    mcp_server_ids: Sequence[str] = (),
    plan_mode: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> CreateChatRequest:
    """The ``CreateChatRequest`` of ``create_chat`` (wire 2.1): ``request`` as given, or one
    built from the keyword fields (``content`` required). Giving both is an error. Without
    ``organization_id`` the body carries ``UNKNOWN_ORGANIZATION`` until the client's default
    organization is known (D33)."""
    fields = (
        organization_id,
        content,
        system_prompt,
        model_config_id,
        reasoning_effort,
        workspace_id,
        plan_mode,
        labels,
    )
    if request is not None:
        if not isinstance(request, CreateChatRequest):
            raise CoderAgentError("create_chat needs a CreateChatRequest or keyword fields")
        if any(f is not None for f in fields) or tools or mcp_server_ids:
            raise CoderAgentError("pass either a CreateChatRequest or keyword fields, not both")
        return request
    if organization_id is None:
        organization_id = UNKNOWN_ORGANIZATION
    if content is None:
        raise CoderAgentError("create_chat needs content")
    if not all(isinstance(t, DynamicTool) for t in tools):
        raise CoderAgentError("tools must be DynamicTool values")
    if labels is not None and (
        not isinstance(labels, Mapping)
        or not all(type(k) is str and type(v) is str for k, v in labels.items())
    ):
        raise CoderAgentError("labels must map strings to strings")
    return CreateChatRequest(
        organization_id=check_chat_id(organization_id, "organization_id"),
        content=chat_input_parts(content),
        system_prompt=_opt_text(system_prompt, "system_prompt"),
        unsafe_dynamic_tools=tuple(tools),
        model_config_id=_opt_text(model_config_id, "model_config_id"),
        reasoning_effort=_opt_text(reasoning_effort, "reasoning_effort"),
        workspace_id=_opt_text(workspace_id, "workspace_id"),
        mcp_server_ids=_ids(mcp_server_ids, "mcp_server_ids"),
        plan_mode=_opt_text(plan_mode, "plan_mode"),
        labels=dict(labels) if labels is not None else None,
    )


def create_chat_message_request(
    request: CreateChatMessageRequest | None = None,
    *,
    content: object = None,
    model_config_id: str | None = None,
    reasoning_effort: str | None = None,
    busy_behavior: str | None = None,
    mcp_server_ids: Sequence[str] | None = None,
    plan_mode: str | None = None,
) -> CreateChatMessageRequest:
    """The ``CreateChatMessageRequest`` of ``create_chat_message`` (wire 2.2): ``request`` as
    given, or one built from the keyword fields (``content`` required; ``busy_behavior`` is
    ``"queue"`` or ``"interrupt"``)."""
    fields = (content, model_config_id, reasoning_effort, busy_behavior, mcp_server_ids, plan_mode)
    if request is not None:
        if not isinstance(request, CreateChatMessageRequest):
            raise CoderAgentError(
                "create_chat_message needs a CreateChatMessageRequest or keyword fields"
            )
        if any(f is not None for f in fields):
            raise CoderAgentError(
                "pass either a CreateChatMessageRequest or keyword fields, not both"
            )
        return request
    if content is None:
        raise CoderAgentError("create_chat_message needs content")
    if busy_behavior not in (None, "queue", "interrupt"):
        raise CoderAgentError(
            f'busy_behavior must be "queue" or "interrupt", got {busy_behavior!r}'
        )
    return CreateChatMessageRequest(
        content=chat_input_parts(content),
        model_config_id=_opt_text(model_config_id, "model_config_id"),
        reasoning_effort=_opt_text(reasoning_effort, "reasoning_effort"),
        busy_behavior=busy_behavior,
        mcp_server_ids=None if mcp_server_ids is None else _ids(mcp_server_ids, "mcp_server_ids"),
        plan_mode=_opt_text(plan_mode, "plan_mode"),
    )


def tool_result_inputs(results: object) -> tuple[ToolResultInput, ...]:
    """The results of ``submit_tool_results`` exactly as given (D5: the raw method passes
    whatever it is given), accepting ``ToolResultInput`` and ``ToolOutcome`` values."""
    if isinstance(results, ToolResultInput | ToolOutcome):
        results = (results,)
    if isinstance(results, str) or not isinstance(results, Sequence):
        raise CoderAgentError("results must be a sequence of ToolResultInput values")
    out: list[ToolResultInput] = []
    for item in results:
        if isinstance(item, ToolResultInput):
            out.append(item)
        elif isinstance(item, ToolOutcome):
            out.append(
                ToolResultInput(
                    tool_call_id=item.tool_call_id, output=item.output, is_error=item.is_error
                )
            )
        else:
            raise CoderAgentError(f"results must be ToolResultInput values, got {item!r}")
    return tuple(out)
