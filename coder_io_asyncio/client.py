"""``CoderChatClient`` on asyncio: every raw chat operation as an ``async`` method (wire 2, 6,
7, 8, 9; D4, D10, D11, D16, D17, D20-D24).

The class is a thin shell: each method builds a machine of ``coder_proto.client`` (arguments
are validated there, before any request) and awaits it on the client's ``Driver``. The client
holds the state wire 1 gives a client: one ``PrefixSelector`` (the negotiated chat prefix) and
one ``http:*`` event counter.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeAlias, TypeVar

import httpx

from coder_proto.client import (
    ClientSettings,
    ModelConfigsJob,
    PreviewJob,
    ResolveModelJob,
    RestJob,
    UploadPlan,
    WorkspacePreview,
    create_chat_message_request,
    create_chat_request,
    interrupt_job,
    plan_upload,
    rest_job,
    tool_result_inputs,
)
from coder_proto.errors import CoderAgentError
from coder_proto.operations import ArchiveOutcome, ChatCost, ChatFile
from coder_proto.prefix import PrefixSelector
from coder_proto.transcript import Recorder
from coder_proto.transport_events import TransportEventSink
from coder_proto.uploads import check_attachment_size, parse_upload_chat_file
from coder_proto.watch import WatchBackoff
from coder_proto.wire.chats import (
    Chat,
    ChatMessagesResponse,
    ChatModelConfig,
    CreateChatMessageRequest,
    CreateChatMessageResponse,
    CreateChatRequest,
    DynamicTool,
)

from ._driver import Driver, Runnable, VerifyTypes, transport_sink
from .watch import ChatWatch

__all__ = ["CoderChatClient"]

T = TypeVar("T")

#: Runs a blocking function in a worker thread (``asyncio.to_thread``, or the trio adapter's).
ToThread: TypeAlias = Callable[..., Awaitable[Any]]


class CoderChatClient:
    """The raw Coder chat API on asyncio.

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (explicit
    values win; a missing one raises ``CoderAgentError``); one trailing ``/`` is removed.
    ``http_client`` is used as given (its transport, headers and timeouts; D23) and never
    closed by this client; otherwise one is created (no read timeout, 30 s connect timeout)
    and closed by ``aclose()`` / ``async with``. ``verify`` is the TLS setting of the stream
    sockets and of the created HTTP client (``True``, ``False``, a CA bundle path or an
    ``ssl.SSLContext``). ``on_transport_event`` receives the ``http:*`` events (wire 11,
    D24); it may be a coroutine function. ``prefix`` pins the chat prefix (otherwise it is
    negotiated, wire 1.4). Construction does no I/O. The token never appears in a repr, an
    error, a log record or an event.
    """

    # The runtime seam: the trio adapter's client is this class with its own driver, event
    # sink, worker threads and watch (the async method bodies are runtime-neutral).
    _driver_class: ClassVar[Any] = Driver
    _watch_class: ClassVar[Any] = ChatWatch

    @staticmethod
    def _make_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
        return transport_sink(callback)

    @staticmethod
    async def _to_thread(fn: Callable[..., Any], /, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
        verify: VerifyTypes = True,
        on_transport_event: Callable[[Any], object] | None = None,
        prefix: str | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.settings = ClientSettings.resolve(base_url, token, environ=os.environ)
        #: The client's chat-prefix negotiation state (wire 1.4): one per client.
        self.selector = PrefixSelector(prefix)
        self.sink = self._make_sink(on_transport_event)
        self.driver: Driver = self._driver_class(
            base_url=self.settings.base_url,
            token=self.settings.token,
            http_client=http_client,
            verify=verify,
            sink=self.sink,
            recorder=recorder,
        )

    def __repr__(self) -> str:
        return f"<CoderChatClient {self.settings.base_url} prefix={self.selector.prefix!r}>"

    @property
    def base_url(self) -> str:
        """The deployment URL (one trailing ``/`` removed)."""
        return self.settings.base_url

    @property
    def prefix(self) -> str | None:
        """The negotiated chat prefix, ``None`` until the first conclusive answer."""
        return self.selector.prefix

    # -- life cycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> CoderChatClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close what this client created: background jobs are awaited (at most 10 s, D22),
        sockets closed, and the HTTP client closed unless it was supplied. Idempotent."""
        await self.driver.aclose()

    async def _run(self, machine: Runnable[T]) -> T:
        return await self.driver.run(machine)

    @staticmethod
    def _now() -> float:
        return time.monotonic()

    # -- chats --------------------------------------------------------------------------------

    async def create_chat(
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
    ) -> Chat:
        """``POST {P}`` (wire 2.1): a ``CreateChatRequest``, or the same fields as keywords
        (``content`` is a string or input parts). Returns the created ``Chat``."""
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
        result: Chat = await self._run(
            rest_job(self.selector, "create_chat", body, now=self._now())
        )
        return result

    async def get_chat(self, chat_id: str) -> Chat:
        """``GET {P}/{chat_id}``."""
        result: Chat = await self._run(
            rest_job(self.selector, "get_chat", chat_id, now=self._now())
        )
        return result

    async def list_chats(
        self,
        *,
        q: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> tuple[Chat, ...]:
        """``GET {P}``: the chats visible to the user (search ``q``, ``labels`` filters,
        pagination)."""
        result: tuple[Chat, ...] = await self._run(
            rest_job(
                self.selector,
                "list_chats",
                q=q,
                labels=labels,
                limit=limit,
                offset=offset,
                now=self._now(),
            )
        )
        return result

    async def update_chat(
        self, chat_id: str, *, title: str | None = None, archived: bool | None = None
    ) -> None:
        """``PATCH {P}/{chat_id}`` with only the given fields."""
        await self._run(
            rest_job(
                self.selector,
                "update_chat",
                chat_id,
                title=title,
                archived=archived,
                now=self._now(),
            )
        )

    async def archive_chat(self, chat_id: str) -> ArchiveOutcome:
        """``PATCH {P}/{chat_id}`` ``{"archived": true}`` (op ``archive_chat``). Returns
        ``"archived"``, or ``"already_archived"`` for the server's 400 "Chat is already
        archived." (D10). One request: a 409 (the chat is still active) is raised, not
        retried."""
        result: ArchiveOutcome = await self._run(
            rest_job(self.selector, "archive_chat", chat_id, now=self._now())
        )
        return result

    async def interrupt_chat(
        self,
        chat_id: str,
        *,
        wait: bool = False,
        timeout: float | None = None,
        last_status: str | None = None,
    ) -> Chat:
        """``POST {P}/{chat_id}/interrupt`` (D4, D11). With ``wait``, sends ``?wait=true`` and
        polls the chat every second until it is settled, raising the builtin ``TimeoutError``
        after ``timeout`` seconds (15 s by default). ``last_status="requires_action"``
        sends D4's follow-up when the answer says ``running``."""
        job = interrupt_job(
            self.selector,
            chat_id,
            now=self._now(),
            wait=wait,
            timeout=timeout,
            last_status=last_status,
        )
        return await self._run(job)

    async def get_chat_cost(self, chat_id: str) -> ChatCost:
        """``GET {P}/{chat_id}/cost``: the chat tree's cost (D17; never called implicitly)."""
        result: ChatCost = await self._run(
            rest_job(self.selector, "get_chat_cost", chat_id, now=self._now())
        )
        return result

    # -- messages -----------------------------------------------------------------------------

    async def create_chat_message(
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
    ) -> CreateChatMessageResponse:
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
        result: CreateChatMessageResponse = await self._run(
            rest_job(self.selector, "create_chat_message", chat_id, body, now=self._now())
        )
        return result

    async def get_messages(
        self,
        chat_id: str,
        *,
        before_id: int | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> ChatMessagesResponse:
        """``GET {P}/{chat_id}/messages``: newest first without cursors, ascending with only
        ``after_id`` (server order, wire 2)."""
        result: ChatMessagesResponse = await self._run(
            rest_job(
                self.selector,
                "get_messages",
                chat_id,
                before_id=before_id,
                after_id=after_id,
                limit=limit,
                now=self._now(),
            )
        )
        return result

    async def submit_tool_results(self, chat_id: str, results: Sequence[Any]) -> None:
        """``POST {P}/{chat_id}/tool-results`` with exactly the results given
        (``ToolResultInput`` or ``ToolOutcome`` values; D5)."""
        await self._run(
            rest_job(
                self.selector,
                "submit_tool_results",
                chat_id,
                tool_result_inputs(results),
                now=self._now(),
            )
        )

    async def delete_queued_message(self, chat_id: str, queued_message_id: int) -> None:
        """``DELETE {P}/{chat_id}/queue/{queued_message_id}`` (a queue-entry id). 404/409
        mean it was already promoted or deleted (D9)."""
        await self._run(
            rest_job(
                self.selector, "delete_queued_message", chat_id, queued_message_id, now=self._now()
            )
        )

    # -- files --------------------------------------------------------------------------------

    async def upload_chat_file(
        self,
        organization_id: str,
        content: object,
        *,
        media_type: str | None = None,
        filename: str | None = None,
    ) -> str:
        """``POST {P}/files?organization=...`` with the raw bytes (wire 7, D20); returns the
        file id. ``content`` is bytes, a path or a binary file object; the media type defaults
        from the file name's extension. Allowlist and 10 MiB checks run before any request."""
        plan = plan_upload(content, media_type=media_type, filename=filename)
        data: object = plan.data
        if data is None:
            data = await _read_upload(plan, self._to_thread)
        request = plan.request(organization_id, data)
        result: str = await self._run(
            RestJob(self.selector, request, parse_upload_chat_file, now=self._now())
        )
        return result

    async def get_chat_file(self, file_id: str) -> ChatFile:
        """``GET {P}/files/{file_id}``: the bytes and media type."""
        result: ChatFile = await self._run(
            rest_job(self.selector, "get_chat_file", file_id, now=self._now())
        )
        return result

    # -- models -------------------------------------------------------------------------------

    async def list_model_configs(self, organization_id: str) -> tuple[ChatModelConfig, ...]:
        """The organization's model configs (wire 8, D16): the org route, falling back once to
        the legacy route on 404. Never touches the chat prefix."""
        result: tuple[ChatModelConfig, ...] = await self._run(
            ModelConfigsJob(self.selector, organization_id, now=self._now())
        )
        return result

    async def resolve_model_config_id(self, hint: str, organization_id: str) -> str | None:
        """The config id a model hint designates (wire 8 order), or ``None`` when nothing
        matches. A UUID hint is returned as is, with no request."""
        return await self._run(
            ResolveModelJob(self.selector, hint, organization_id, now=self._now())
        )

    # -- workspaces (wire 9) ------------------------------------------------------------------

    async def preview_url(
        self,
        workspace_id: str,
        port: int,
        *,
        agent_name: str | None = None,
        protocol: str = "http",
    ) -> WorkspacePreview:
        """The browser URL of ``port`` on the workspace (wire 9). The port keeps its current
        share level (private to the owner unless shared). No transport events."""
        return await self._run(
            PreviewJob(
                self.selector,
                base_url=self.base_url,
                workspace_id=workspace_id,
                port=port,
                agent_name=agent_name,
                protocol=protocol,
                now=self._now(),
            )
        )

    async def share_port(
        self,
        workspace_id: str,
        port: int,
        *,
        share_level: str = "authenticated",
        agent_name: str | None = None,
        protocol: str = "http",
    ) -> WorkspacePreview:
        """Upsert the port's share level (``authenticated``, ``organization`` or ``public``)
        and return its URL with the level in effect (wire 9). A 404 means the workspace was
        not found or the server predates port sharing."""
        return await self._run(
            PreviewJob(
                self.selector,
                base_url=self.base_url,
                workspace_id=workspace_id,
                port=port,
                agent_name=agent_name,
                protocol=protocol,
                share_level=share_level,
                now=self._now(),
            )
        )

    # -- watch (wire 6) -----------------------------------------------------------------------

    def watch_chats(self, *, backoff: WatchBackoff | None = None) -> ChatWatch:
        """Lifecycle events of every chat visible to the user (wire 6): use as
        ``async with client.watch_chats() as watch: async for event in watch``."""
        if self.driver.closed:
            raise CoderAgentError("this client is closed")
        watch: ChatWatch = self._watch_class(self, backoff=backoff)
        return watch


async def _read_upload(plan: UploadPlan, to_thread: ToThread = asyncio.to_thread) -> object:
    """The bytes of a path or file-object upload, read in a worker thread (``to_thread``). A
    path over 10 MiB is refused before it is read (wire 7); read errors are
    ``CoderAgentError``."""
    if plan.path is not None:
        return await to_thread(_read_path, plan.path)
    read = plan.stream.read
    try:
        if inspect.iscoroutinefunction(read):
            return await read()
        data = await to_thread(read)
        if inspect.isawaitable(data):
            return await data
        return data
    except OSError as exc:
        raise CoderAgentError(f"cannot read the file to upload: {exc}") from exc


def _read_path(path: str) -> bytes:
    try:
        check_attachment_size(os.path.getsize(path))
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise CoderAgentError(f"cannot read the file to upload {path!r}: {exc}") from exc
