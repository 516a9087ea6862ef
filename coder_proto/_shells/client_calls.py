"""Every raw ``CoderChatClient`` operation, defined once for the three adapters (wire 2, 6-9;
D4, D10, D11, D16, D17, D20; docs/architecture.md "Public API": the same methods with the same parameters
on every runtime).

``ChatOperations`` holds each operation's public signature and docstring; calling one validates
the arguments (before any request) and returns an ``Operation``: the machine to run, and the file
to read first for an upload. An adapter turns each ``ChatOperations`` method into its own
``async`` or blocking method (``public_method`` copies the name, docstring and signature),
so all its methods do is perform I/O: read the file (in a worker thread where its runtime
needs one), then run the machine on its driver. The agent's plain operations are ``Operation``
values too (``coder_proto._shells.agent_calls.AgentOperations``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from .._agent.session import Session
from .._agent.tool_calls import ToolPlan
from .._jobs.organization import UNKNOWN_ORGANIZATION
from .._outputs import ToolCall
from .._rest.http import HttpRequest
from .._rest.prefix import PrefixSelector
from .._rest.routes import ArchiveOutcome, ChatCost, ChatFile, build_create_chat, parse_create_chat
from .._rest.uploads import UploadPlan, parse_upload_chat_file, plan_upload
from .._wire.chats import (
    Chat,
    ChatMessagesResponse,
    ChatModelConfig,
    CreateChatMessageRequest,
    CreateChatMessageResponse,
    CreateChatRequest,
    DynamicTool,
)
from .client_arguments import (
    chat_input_parts,
    create_chat_message_request,
    create_chat_request,
    tool_result_inputs,
)

if TYPE_CHECKING:
    from .._jobs.operations import RestJob, WorkspacePreview
    from .._rest.chat_extras import ChatDiff, ChatFileDownloadUrl, ChatPrompt, EditedMessage

__all__ = ["Call", "ChatCalls", "ChatOperations", "Operation", "public_method"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _identity(value: Any) -> Any:
    return value


@attrs.frozen(kw_only=True)
class Operation(Generic[T]):
    """One public operation, validated and ready to run. The adapter reads ``read`` first
    when it is set (the path or file object of an upload: blocking I/O), then runs
    ``machine(now, data)`` (``data`` is what it read, else ``None``) on its driver, with
    ``session`` when the machine shares that session's connections, and returns
    ``finish(result)``. A machine that pauses for client tools (a session's own turn) has
    its pauses planned by ``tools`` (a ``ToolPlan`` per batch of calls; without it every
    call gets an error result, D5)."""

    machine: Callable[[float, Any], Any]
    read: UploadPlan | None = None
    session: Session | None = None
    finish: Callable[[Any], T] = _identity
    tools: Callable[[tuple[ToolCall, ...]], ToolPlan] | None = None


def _unwrap_call(annotation: Any) -> Any:
    # The specs' annotations are strings (postponed evaluation): "Operation[X]" reads as "X".
    if (
        isinstance(annotation, str)
        and annotation.startswith("Operation[")
        and annotation.endswith("]")
    ):
        return annotation[len("Operation[") : -1]
    return annotation


def public_method(method: F, spec: Callable[..., Any], *, owner: str) -> F:
    """``method`` (an adapter's wrapper around ``spec``) presented as ``spec``: its name,
    ``owner``-qualified name, docstring and signature, the return annotation ``Operation[X]``
    shown as ``X`` (what the adapter's method returns)."""
    signature = inspect.signature(spec)
    method.__name__ = spec.__name__
    method.__qualname__ = f"{owner}.{spec.__name__}"
    method.__doc__ = spec.__doc__
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=_unwrap_call(signature.return_annotation)
    )
    return method


class ChatOperations:
    """The raw chat operations of one client: its prefix selector (wire 1.4) and base URL.
    Each method's signature and docstring are the adapters' ``CoderChatClient`` method's."""

    def __init__(self, selector: PrefixSelector, base_url: str) -> None:
        self.selector = selector
        self.base_url = base_url

    def __repr__(self) -> str:
        return f"ChatOperations({self.base_url!r})"

    def _rest(self, op: str, *args: Any, **kwargs: Any) -> Operation[Any]:
        from .._jobs.operations import rest_job

        selector = self.selector
        return Operation(
            machine=lambda now, _data: rest_job(selector, op, *args, now=now, **kwargs)
        )

    # -- chats ----------------------------------------------------------------------------

    def create_chat(
        self,
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
    ) -> Operation[Chat]:
        """``POST {P}`` (wire 2.1): a ``CreateChatRequest``, or the same fields as keywords
        (``content`` is a string or input parts). Returns the created ``Chat``. Without
        ``organization_id`` the chat goes to the client's default organization:
        ``CODER_ORGANIZATION_ID`` / ``CODER_ORG_ID``, else the signed-in user's first (D33;
        ``GET /api/v2/users/me``, asked once per client)."""
        body = create_chat_request(
            request,
            organization_id=organization_id,
            content=content,
            system_prompt=system_prompt,
            tools=tools,
            model_config_id=model_config_id,
            reasoning_effort=reasoning_effort,
            workspace_id=workspace_id,
            mcp_server_ids=mcp_server_ids,
            plan_mode=plan_mode,
            labels=labels,
        )
        if request is not None or organization_id is not None:
            return self._rest("create_chat", body)
        from .._jobs.operations import OrganizationRestJob

        selector = self.selector

        def build(organization: str) -> HttpRequest:
            return build_create_chat(attrs.evolve(body, organization_id=organization))

        return Operation(
            machine=lambda now, _data: OrganizationRestJob(
                selector, None, build, parse_create_chat, now=now
            )
        )

    def get_chat(self, chat_id: str) -> Operation[Chat]:
        """``GET {P}/{chat_id}``."""
        return self._rest("get_chat", chat_id)

    def list_chats(
        self,
        *,
        q: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> Operation[tuple[Chat, ...]]:
        """``GET {P}``: the chats visible to the user (search ``q``, ``labels`` filters,
        pagination)."""
        return self._rest("list_chats", q=q, labels=labels, limit=limit, offset=offset)

    def update_chat(
        self,
        chat_id: str,
        *,
        title: str | None = None,
        archived: bool | None = None,
        pin_order: int | None = None,
        labels: Mapping[str, str] | None = None,
        plan_mode: str | None = None,
        workspace_id: str | None = None,
        read: bool | None = None,
    ) -> Operation[None]:
        """``PATCH {P}/{chat_id}`` with only the given fields (wire 2.4): ``pin_order`` 0
        unpins and a positive one pins; ``labels`` replaces the label set; ``plan_mode``
        ``"plan"`` turns plan mode on and ``""`` off; ``read`` moves the owner's read marker
        (``True``: every answer so far is read, ``Chat.has_unread`` turns false)."""
        return self._rest(
            "update_chat",
            chat_id,
            title=title,
            archived=archived,
            pin_order=pin_order,
            labels=labels,
            plan_mode=plan_mode,
            workspace_id=workspace_id,
            read=read,
        )

    def archive_chat(self, chat_id: str) -> Operation[ArchiveOutcome]:
        """``PATCH {P}/{chat_id}`` ``{"archived": true}`` (op ``archive_chat``). Returns
        ``"archived"``, or ``"already_archived"`` for the server's 400 "Chat is already
        archived." (D10). One request: a 409 (the chat is still active) is raised, not
        retried."""
        return self._rest("archive_chat", chat_id)

    def interrupt_chat(
        self,
        chat_id: str,
        *,
        wait: bool = False,
        timeout: float | None = None,
        last_status: str | None = None,
    ) -> Operation[Chat]:
        """``POST {P}/{chat_id}/interrupt`` (D4, D11). With ``wait``, sends ``?wait=true`` and
        polls the chat every second until it is settled, raising the builtin ``TimeoutError``
        after ``timeout`` seconds (15 s by default). ``last_status="requires_action"``
        sends D4's follow-up when the answer says ``running``."""
        from .._jobs.operations import interrupt_job

        selector = self.selector
        return Operation(
            machine=lambda now, _data: interrupt_job(
                selector, chat_id, now=now, wait=wait, timeout=timeout, last_status=last_status
            )
        )

    def get_chat_cost(self, chat_id: str) -> Operation[ChatCost]:
        """``GET {P}/{chat_id}/cost``: the chat tree's cost (D17; never called implicitly)."""
        return self._rest("get_chat_cost", chat_id)

    def compact_chat(self, chat_id: str) -> Operation[Chat]:
        """``POST {P}/{chat_id}/compact`` (wire 2.4): summarise the conversation into a fresh
        model context. Returns the chat, ``running`` while the summary is written; a 409
        means there is nothing to compact or the chat is busy."""
        return self._rest("compact_chat", chat_id)

    def clear_chat(self, chat_id: str) -> Operation[Chat]:
        """``POST {P}/{chat_id}/clear`` (wire 2.4): the next prompt starts from an empty model
        context; the transcript stays. Returns the chat; a 409 means it is busy."""
        return self._rest("clear_chat", chat_id)

    def reconcile_chat(self, chat_id: str) -> Operation[Chat]:
        """``POST {P}/{chat_id}/reconcile-invalid`` (wire 2.4): move a chat stuck in an
        invalid state to ``error``. A 409 means the chat is not in an invalid state."""
        return self._rest("reconcile_chat", chat_id)

    def refresh_chat_context(self, chat_id: str) -> Operation[Chat]:
        """``PUT {P}/{chat_id}/context`` (wire 2.4): pin the chat to its workspace agent's
        latest context (instruction files, skills, MCP configuration), clearing the drift
        that ``chat.raw["context"]["dirty"]`` reports. Returns the chat."""
        return self._rest("refresh_chat_context", chat_id)

    def propose_chat_title(self, chat_id: str) -> Operation[str]:
        """``POST {P}/{chat_id}/title/propose`` (wire 2.4): a suggested title for the chat,
        not stored (set it with ``update_chat(title=...)``)."""
        return self._rest("propose_chat_title", chat_id)

    def get_chat_diff(self, chat_id: str) -> Operation[ChatDiff]:
        """``GET {P}/{chat_id}/diff`` (wire 2.4): the diff of the chat's workspace changes."""
        return self._rest("get_chat_diff", chat_id)

    def get_chats_by_workspace(self, workspace_ids: Sequence[str]) -> Operation[dict[str, str]]:
        """``GET {P}/by-workspace`` (wire 2.4): workspace id → its latest chat that is not
        archived, for at most 25 workspaces; workspaces without one are left out."""
        return self._rest("get_chats_by_workspace", workspace_ids)

    # -- messages -------------------------------------------------------------------------

    def create_chat_message(
        self,
        chat_id: str,
        request: CreateChatMessageRequest | None = None,
        *,
        content: object = None,
        model_config_id: str | None = None,
        reasoning_effort: str | None = None,
        busy_behavior: str | None = None,
        mcp_server_ids: Sequence[str] | None = None,
        plan_mode: str | None = None,
    ) -> Operation[CreateChatMessageResponse]:
        """``POST {P}/{chat_id}/messages`` (wire 2.2): the message was committed
        (``response.message``) or queued (``response.queued``)."""
        body = create_chat_message_request(
            request,
            content=content,
            model_config_id=model_config_id,
            reasoning_effort=reasoning_effort,
            busy_behavior=busy_behavior,
            mcp_server_ids=mcp_server_ids,
            plan_mode=plan_mode,
        )
        return self._rest("create_chat_message", chat_id, body)

    def get_messages(
        self,
        chat_id: str,
        *,
        before_id: int | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> Operation[ChatMessagesResponse]:
        """``GET {P}/{chat_id}/messages``: newest first without cursors, ascending with only
        ``after_id`` (server order, wire 2)."""
        return self._rest(
            "get_messages", chat_id, before_id=before_id, after_id=after_id, limit=limit
        )

    def edit_chat_message(
        self,
        chat_id: str,
        message_id: int,
        content: object,
        *,
        model_config_id: str | None = None,
        reasoning_effort: str | None = None,
        mcp_server_ids: Sequence[str] | None = None,
    ) -> Operation[EditedMessage]:
        """``PATCH {P}/{chat_id}/messages/{message_id}`` (wire 2.4): replace a user message
        (``content`` is a string or input parts) and run the chat again from there; the
        edited message and everything after it leave the history, and the queue is
        emptied. Returns the ``EditedMessage``."""
        parts = chat_input_parts(content)
        return self._rest(
            "edit_chat_message",
            chat_id,
            message_id,
            parts,
            model_config_id=model_config_id,
            reasoning_effort=reasoning_effort,
            mcp_server_ids=mcp_server_ids,
        )

    def get_chat_prompts(
        self, chat_id: str, *, limit: int | None = None
    ) -> Operation[tuple[ChatPrompt, ...]]:
        """``GET {P}/{chat_id}/prompts`` (wire 2.4): the user's prompts, newest first, each
        its text parts joined; at most ``limit`` (1 to 2000; 500 by default)."""
        return self._rest("get_chat_prompts", chat_id, limit=limit)

    def submit_tool_results(self, chat_id: str, results: Sequence[Any]) -> Operation[None]:
        """``POST {P}/{chat_id}/tool-results`` with exactly the results given
        (``ToolResultInput`` or ``ToolOutcome`` values; D5)."""
        return self._rest("submit_tool_results", chat_id, tool_result_inputs(results))

    def delete_queued_message(self, chat_id: str, queued_message_id: int) -> Operation[None]:
        """``DELETE {P}/{chat_id}/queue/{queued_message_id}`` (a queue-entry id). 404/409
        mean it was already promoted or deleted (D9)."""
        return self._rest("delete_queued_message", chat_id, queued_message_id)

    def edit_queued_message(
        self,
        chat_id: str,
        queued_message_id: int,
        *,
        content: object = None,
        editing: bool | None = None,
        model_config_id: str | None = None,
        reasoning_effort: str | None = None,
    ) -> Operation[None]:
        """``PATCH {P}/{chat_id}/queue/{queued_message_id}`` (D35) with only the given
        fields: new ``content`` (a string or input parts; the entry keeps its model and
        effort unless they are given too), ``editing=True`` to begin an edit and
        ``editing=False`` to end it. While the queue head is under edit a run that ends does
        not promote it: the chat stops ``paused``, and ending that edit sends the message.
        The ``model_config_id`` and ``reasoning_effort`` overrides need ``content``. A 404
        means the entry is gone; a 409 that the chat is paused at another entry."""
        parts = None if content is None else chat_input_parts(content)
        return self._rest(
            "edit_queued_message",
            chat_id,
            queued_message_id,
            content=parts,
            editing=editing,
            model_config_id=model_config_id,
            reasoning_effort=reasoning_effort,
        )

    def promote_queued_message(self, chat_id: str, queued_message_id: int) -> Operation[None]:
        """``POST {P}/{chat_id}/queue/{queued_message_id}/promote``: send a queued message
        now. An idle, errored or ``paused`` chat runs it at once; a running one is
        interrupted and runs it next (D35). A 404 means the entry is gone; a 409 that the
        queue is empty."""
        return self._rest("promote_queued_message", chat_id, queued_message_id)

    # -- files ----------------------------------------------------------------------------

    def upload_chat_file(
        self,
        organization_id: str,
        content: object,
        *,
        media_type: str | None = None,
        filename: str | None = None,
    ) -> Operation[str]:
        """``POST {P}/files?organization=...`` with the raw bytes (wire 7, D20); returns the
        file id. ``content`` is bytes, a path or a binary file object; the media type defaults
        from the file name's extension. Allowlist and 10 MiB checks run before any request."""
        return self.upload(organization_id, content, media_type=media_type, filename=filename)

    def upload(
        self,
        organization_id: str | None,
        content: object,
        *,
        media_type: str | None = None,
        filename: str | None = None,
    ) -> Operation[str]:
        """``upload_chat_file``, with ``organization_id=None`` meaning the client's default
        organization (D33)."""
        from .._jobs.operations import OrganizationRestJob, RestJob

        plan = plan_upload(content, media_type=media_type, filename=filename)
        selector = self.selector

        def job(now: float, data: Any) -> RestJob[str]:
            if organization_id is not None:
                request = plan.request(organization_id, data)
                return RestJob(selector, request, parse_upload_chat_file, now=now)
            return OrganizationRestJob(
                selector, None, lambda org: plan.request(org, data), parse_upload_chat_file, now=now
            )

        if plan.data is not None:
            data = plan.data
            # Every check runs now, before any request (the organization may be unknown yet).
            checked = plan.request(organization_id or UNKNOWN_ORGANIZATION, data)
            if organization_id is not None:
                return Operation(
                    machine=lambda now, _data: RestJob(
                        selector, checked, parse_upload_chat_file, now=now
                    )
                )
            return Operation(machine=lambda now, _data: job(now, data))
        return Operation(machine=job, read=plan)

    def get_chat_file(self, file_id: str) -> Operation[ChatFile]:
        """``GET {P}/files/{file_id}``: the bytes and media type."""
        return self._rest("get_chat_file", file_id)

    def get_chat_file_download_url(self, file_id: str) -> Operation[ChatFileDownloadUrl]:
        """``POST {P}/files/{file_id}/download-url`` (wire 2.4): a short-lived signed URL
        that downloads the file without a session token (keep it secret)."""
        return self._rest("get_chat_file_download_url", file_id)

    # -- models ---------------------------------------------------------------------------

    def list_model_configs(
        self, organization_id: str | None = None
    ) -> Operation[tuple[ChatModelConfig, ...]]:
        """The organization's model configs (wire 8, D16): the org route, falling back once to
        the legacy route on 404. Never touches the chat prefix. Without ``organization_id``,
        the client's default organization (as for ``create_chat``, D33)."""
        from .._jobs.operations import ModelConfigsJob

        selector = self.selector
        return Operation(
            machine=lambda now, _data: ModelConfigsJob(selector, organization_id, now=now)
        )

    def resolve_model_config_id(self, hint: str, organization_id: str) -> Operation[str | None]:
        """The config id a model hint designates (wire 8 order), or ``None`` when nothing
        matches. A UUID hint is returned as is, with no request."""
        from .._jobs.operations import ResolveModelJob

        selector = self.selector
        return Operation(
            machine=lambda now, _data: ResolveModelJob(selector, hint, organization_id, now=now)
        )

    # -- workspaces (wire 9) --------------------------------------------------------------

    def preview_url(
        self,
        workspace_id: str,
        port: int,
        *,
        agent_name: str | None = None,
        protocol: str = "http",
    ) -> Operation[WorkspacePreview]:
        """The browser URL of ``port`` on the workspace (wire 9). The port keeps its current
        share level (private to the owner unless shared). No transport events."""
        return self._preview(workspace_id, port, agent_name, protocol, None)

    def share_port(
        self,
        workspace_id: str,
        port: int,
        *,
        share_level: str = "authenticated",
        agent_name: str | None = None,
        protocol: str = "http",
    ) -> Operation[WorkspacePreview]:
        """Upsert the port's share level (``authenticated``, ``organization`` or ``public``)
        and return its URL with the level in effect (wire 9). A 404 means the workspace was
        not found or the server predates port sharing."""
        return self._preview(workspace_id, port, agent_name, protocol, share_level)

    def _preview(
        self,
        workspace_id: str,
        port: int,
        agent_name: str | None,
        protocol: str,
        share_level: str | None,
    ) -> Operation[WorkspacePreview]:
        from .._jobs.operations import PreviewJob

        selector = self.selector
        base_url = self.base_url
        return Operation(
            machine=lambda now, _data: PreviewJob(
                selector,
                base_url=base_url,
                workspace_id=workspace_id,
                port=port,
                agent_name=agent_name,
                protocol=protocol,
                share_level=share_level,
                now=now,
            )
        )


#: The earlier names of ``Operation`` and ``ChatOperations`` (``coder_proto.adapter`` still
#: exports them): the same classes.
Call = Operation
ChatCalls = ChatOperations
