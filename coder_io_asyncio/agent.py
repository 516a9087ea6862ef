"""``CoderAgent`` on asyncio: one Coder chat session driven turn by turn (state machines G, H;
DECISIONS D5, D7, D10, D17, D22; DESIGN "Public API").

The class is a thin shell around ``coder_proto.agent.AgentCore``: the core validates the
settings, prepares prompts, plans every client-tool batch (D5) and decides the
structured-output ladder; this module only reads the files a prompt names, drives the core's
machines on the client's ``Driver`` and awaits the tool callables. Plain (sync) tool
functions run in a worker thread (``asyncio.to_thread``), so a slow tool never stalls the
stream's reading and pings; coroutine functions are awaited on the loop. The calls of one
pause run concurrently.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import pathlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar

import httpx

from coder_proto.actions import ToolOutcome
from coder_proto.agent import (
    AgentCore,
    AttachedFile,
    GenerateResult,
    HistoryJob,
    PromptPlan,
    ToolInvocation,
    WorkspaceFiles,
    WorkspaceUpload,
    prepare_attachment,
    prepare_prompt,
)
from coder_proto.cleanup import ArchiveResult, InterruptResult
from coder_proto.client import plan_upload
from coder_proto.constants import (
    BACKGROUND_TASK_BOUND,
    DEFAULT_MAX_STEPS,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
)
from coder_proto.errors import CoderAgentError
from coder_proto.history import FileUrlResolver, UIMessage, to_ui_messages
from coder_proto.operations import ChatCost
from coder_proto.parts import OutputPart, TextDelta, ToolCall
from coder_proto.tools import Tool
from coder_proto.transcript import Recorder
from coder_proto.transport_events import TransportEventSink
from coder_proto.turn import Turn
from coder_proto.wire.chats import ChatModelConfig

from ._driver import Driver, Run, VerifyTypes, transport_sink
from .client import CoderChatClient, ToThread, _read_upload

__all__ = ["AgentStream", "CoderAgent"]

logger = logging.getLogger("coder_io_asyncio")


def _now() -> float:
    return time.monotonic()


class CoderAgent:
    """A Coder Agents chat session on asyncio (DESIGN "Public API").

    One agent is one server chat, created by the first turn and reused by the next ones
    (H.1). Connection: ``client`` (a ``CoderChatClient``, never closed here) or ``base_url`` /
    ``token`` (defaulting to ``CODER_URL`` / ``CODER_SESSION_TOKEN``) with ``http_client`` and
    ``verify``. ``organization_id`` defaults to ``CODER_ORGANIZATION_ID``. Durations are
    seconds: ``request_timeout`` bounds each segment (C.3), ``settle_deadline`` and
    ``settle_retry_delay`` bound cleanup (H.4, H.5). ``tools`` are ``@tool`` functions,
    ``Tool`` objects (explicit JSON Schema, attrs classes, dataclasses, pydantic models) or
    plain functions, as a sequence or a name -> tool mapping. ``output_type`` enables the
    structured-output tool (``result.output``). ``on_transport_event`` receives transport
    events (sync or async callable); with a supplied ``client`` the ``http:*`` and ``ws:*``
    events go to that client's hook and this one receives the ``segment:*`` events (all of
    them go to the client's hook when the agent has none).

    Construction does no I/O. ``async with`` disposes of the agent on exit: interrupt, then
    archive, bounded by ``settle_deadline`` and never raising (H.5). The agent is
    single-flight: a second concurrent ``generate`` / ``stream`` raises ``CoderAgentError``.
    """

    # The runtime seam: the trio adapter's agent is this class with its own client class,
    # stream class and tool concurrency (the async method bodies are runtime-neutral).
    _client_class: ClassVar[type[CoderChatClient]] = CoderChatClient
    _stream_class: ClassVar[type[AgentStream]]

    def __init__(
        self,
        *,
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
        client: CoderChatClient | None = None,
        base_url: str | None = None,
        token: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        verify: VerifyTypes = True,
        recorder: Recorder | None = None,
    ) -> None:
        if client is not None:
            if base_url is not None or token is not None or http_client is not None:
                raise CoderAgentError("pass either client or base_url/token/http_client, not both")
            if not isinstance(client, self._client_class):
                raise CoderAgentError("client must be a CoderChatClient")
            self._owns_client = False
            sink = _segment_sink(client.sink, on_transport_event, client._make_sink)
        else:
            client = self._client_class(
                base_url,
                token,
                http_client=http_client,
                verify=verify,
                on_transport_event=on_transport_event,
                recorder=recorder,
            )
            self._owns_client = True
            sink = client.sink
        self._client = client
        self._driver: Driver = client.driver
        if recorder is not None:
            # Transcripts (docs/transcripts.md): the driver reports what crosses the wire.
            self._driver.recorder = recorder
        self._core = AgentCore(
            base_url=client.settings.base_url,
            token=client.settings.token,
            organization_id=organization_id,
            model=model,
            instructions=instructions,
            tools=tools,
            output_type=output_type,
            request_timeout=request_timeout,
            chat_id=chat_id,
            last_seen_message_id=last_seen_message_id,
            workspace_id=workspace_id,
            workspace_files=workspace_files,
            mcp_server_ids=mcp_server_ids,
            reasoning_effort=reasoning_effort,
            plan_mode=plan_mode,
            busy_behavior=busy_behavior,
            max_steps=max_steps,
            max_retries=max_retries,
            settle_deadline=settle_deadline,
            settle_retry_delay=settle_retry_delay,
            selector=client.selector,
            sink=sink,
            env=os.environ,
        )
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"<CoderAgent chat_id={self.chat_id!r} "
            f"last_seen_message_id={self.last_seen_message_id!r}>"
        )

    # -- session state (H.1) ---------------------------------------------------------------

    @property
    def client(self) -> CoderChatClient:
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

    def reset_session(self) -> None:
        """Start a fresh chat on the next turn (H.1); a paused stream is closed."""
        now = _now()
        if self._driver.recorder is not None:
            self._driver.recorder.session_call("reset_session", now)
        actions = self._core.session.reset_session(now)
        if actions:
            self._driver.perform(actions, session=self._core.session)

    # -- turns -------------------------------------------------------------------------------

    async def generate(self, prompt: object = None, *, messages: object = None) -> GenerateResult:
        """Run one turn to completion (the whole client-tool loop) and return its result:
        final text, every step, the whole turn's usage, finish reason, tool calls and results,
        sources, and ``output`` with ``output_type``. ``prompt`` is a string, content parts
        (text, ``Attachment``, ``AttachedFile`` ...) or messages; ``messages`` takes messages
        only. A run that fails raises its typed error; cancelling the call interrupts the run
        on the server and re-raises the cancellation (D22)."""
        core = self._core
        core.begin()
        try:
            plan = prepare_prompt(prompt, messages)
            call = core.generate(await self._build(plan), now=_now())
            turn: Turn = call.turn
            while True:
                result = await self._driver.run(turn, session=core.session, tools=self._run_tools)
                step = call.advance(result, now=_now())
                if isinstance(step, GenerateResult):
                    return step
                turn = step
        finally:
            core.end()

    def stream(self, prompt: object = None, *, messages: object = None) -> AgentStream:
        """A streaming turn: ``async with agent.stream(prompt) as s:`` then ``async for part in
        s`` (output parts, live), or ``async for delta in s.text_stream``, and ``await
        s.get_final_result()``. A failure of the run is raised by the iteration; leaving the
        block before the turn finished interrupts the run."""
        return self._stream_class(self, prompt, messages)

    async def _build(self, plan: PromptPlan) -> Sequence[Any]:
        to_thread = self._client._to_thread
        return plan.build([await _read_upload(upload, to_thread) for upload in plan.reads])

    async def _run_tools(self, calls: tuple[ToolCall, ...]) -> list[ToolOutcome]:
        plan = self._core.plan_tools(calls)
        outcomes = list(plan.outcomes)
        if plan.invocations:
            outcomes += await self._invoke_all(plan.invocations)
        return outcomes

    async def _invoke_all(self, invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
        """Run the calls of one pause concurrently; one outcome per call, in order."""
        return list(await asyncio.gather(*(_invoke(i) for i in invocations)))

    # -- cleanup (H.3-H.5) -------------------------------------------------------------------

    async def interrupt(
        self, *, wait: bool = False, timeout: float | None = None
    ) -> InterruptResult:
        """Interrupt the session's chat (or the last known one) (H.3, D4): ``interrupted`` is
        ``False`` when there is no chat. With ``wait``, poll until the chat settled, at most
        ``timeout`` seconds (15 by default; builtin ``TimeoutError`` after that, D11)."""
        session = self._core.session
        machine = session.interrupt(now=_now(), wait=wait, timeout=timeout)
        return await self._driver.run(machine, session=session)

    async def archive(self) -> ArchiveResult:
        """Archive the session's chat and every stranded one (H.4, D10), retrying 409s while
        the chat winds down, within ``settle_deadline``."""
        session = self._core.session
        return await self._driver.run(session.archive(now=_now()), session=session)

    async def aclose(self, *, archive: bool = True) -> None:
        """Dispose of the agent (H.5): interrupt, then archive, bounded by ``settle_deadline``;
        await the background work (at most 10 s, D22); close the client if the agent created
        it. With ``archive=False`` the chat is left as it is, to be continued later from
        ``chat_id`` and ``last_seen_message_id``: only the connections are closed. Never
        raises (except the caller's own cancellation). Idempotent."""
        if self._closed:
            return
        self._closed = True
        session = self._core.session
        try:
            if archive and not self._driver.closed:
                # The dispose machine logs and collects its failures; it never raises.
                await self._driver.run(session.dispose(now=_now()), session=session)
            elif not self._driver.closed:
                actions = session.close_retained_stream(_now())
                if actions:
                    self._driver.perform(actions, session=session)
        except Exception:
            logger.warning("agent disposal failed", exc_info=True)
        finally:
            if self._owns_client:
                await self._client.aclose()
            elif not self._driver.closed:
                await self._driver.wait_background(BACKGROUND_TASK_BOUND)

    async def __aenter__(self) -> CoderAgent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- plain operations --------------------------------------------------------------------

    async def list_models(self) -> tuple[ChatModelConfig, ...]:
        """The organization's model configs (wire 8), to pick a ``model`` hint."""
        return await self._client.list_model_configs(self._core.organization_id)

    async def get_chat_cost(self, chat_id: str | None = None) -> ChatCost:
        """The chat's cost (``GET {P}/{chat}/cost``; D17: never called implicitly). Defaults
        to the session's chat, else the last known one."""
        return await self._client.get_chat_cost(chat_id or self._core.require_chat())

    async def attach(
        self, content: object, *, media_type: str | None = None, filename: str | None = None
    ) -> AttachedFile:
        """Upload a file once (wire 7: allowlisted media types, 10 MiB) and return a reference
        to put in later prompts without re-uploading. ``content`` is bytes, a path or a binary
        file object; the media type defaults from the file name's extension."""
        plan = prepare_attachment(content, media_type=media_type, filename=filename)
        assert plan.media_type is not None
        file_id = await self._client.upload_chat_file(
            self._core.organization_id, content, media_type=plan.media_type, filename=plan.filename
        )
        return AttachedFile(file_id=file_id, media_type=plan.media_type, filename=plan.filename)

    async def upload_to_workspace(self, content: object, path: str) -> WorkspaceUpload:
        """Write ``content`` (bytes, a path or a binary file object) as-is to ``path`` on the
        agent's workspace through the ``workspace_files`` adapter (seed README "Workspace
        files"): no allowlist, no size cap, no unpacking."""
        adapter, target = self._core.workspace_upload(path)
        data = await _read_whole(content, self._client._to_thread)
        written = adapter.write_file(target, data)
        if inspect.isawaitable(written):
            written = await written
        return WorkspaceUpload(
            path=written if isinstance(written, str) and written else target, size=len(data)
        )

    async def history(self, *, file_url: FileUrlResolver | None = None) -> list[UIMessage]:
        """The chat's whole history as UI messages (state machines I), oldest first."""
        session = self._core.session
        job = HistoryJob(session.selector, self._core.require_chat(), now=_now())
        messages = await self._driver.run(job)
        return to_ui_messages(messages, file_url=file_url)


class AgentStream:
    """One streaming turn (``CoderAgent.stream``); use it as an async context manager.

    ``async for part in stream`` yields the output parts (``TextDelta``, ``ToolCall``,
    ``Finish`` ...) live; ``stream.text_stream`` yields only the text deltas' strings. Each
    part is delivered once, to whichever lens reads it. ``await stream.get_final_result()``
    drains what is left and returns the ``GenerateResult`` (an error event of the run is in
    ``result.error``; a failure of the run itself, such as a lost stream or the
    ``request_timeout``, is raised).
    """

    def __init__(self, agent: CoderAgent, prompt: object, messages: object) -> None:
        self._agent = agent
        self._prompt = prompt
        self._messages = messages
        self._run: Run[Any] | None = None
        self._final: GenerateResult | None = None
        self._entered = False

    def __repr__(self) -> str:
        state = "not started" if self._run is None else ("done" if self._run.done else "live")
        return f"<AgentStream {state}>"

    async def __aenter__(self) -> AgentStream:
        if self._entered:
            raise CoderAgentError("a stream can be entered only once")
        self._entered = True
        agent = self._agent
        core = agent._core
        core.begin()
        try:
            plan = prepare_prompt(self._prompt, self._messages)
            turn = core.stream(await agent._build(plan), now=_now())
            self._run = agent._driver.start(turn, session=core.session, tools=agent._run_tools)
        except BaseException:
            core.end()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._run is not None and not self._run.done:
                # Tearing the stream down early interrupts the run (seed "Timeouts &
                # cancellation"); with an exception it is the caller's reason (D22).
                self._run.cancel(exc)
        finally:
            self._agent._core.end()

    def _live(self) -> Run[Any]:
        if self._run is None:
            raise CoderAgentError("use the stream inside `async with agent.stream(...) as s:`")
        return self._run

    def __aiter__(self) -> AsyncIterator[OutputPart]:
        return self._parts()

    async def _parts(self) -> AsyncIterator[OutputPart]:
        run = self._live()
        async for part in run.parts():
            yield part
        await run.result()

    @property
    def text_stream(self) -> AsyncIterator[str]:
        """The text deltas of the turn, as strings, live."""
        return self._text()

    async def _text(self) -> AsyncIterator[str]:
        async for part in self._parts():
            if type(part) is TextDelta:
                yield part.delta

    async def get_final_result(self) -> GenerateResult:
        """Wait for the turn to finish (draining the parts nobody read) and return its
        result, with ``output`` when a structured answer was filed validly."""
        if self._final is None:
            run = self._live()
            async for _part in run.parts():
                pass
            self._final = self._agent._core.stream_result(await run.result())
        return self._final


CoderAgent._stream_class = AgentStream


# -- helpers shared by the methods above ------------------------------------------------------


async def _invoke(invocation: ToolInvocation) -> ToolOutcome:
    """Run one client tool: coroutine functions on the loop, plain ones in a worker thread."""
    try:
        if invocation.is_async:
            value = await invocation.call()
        else:
            value = await asyncio.to_thread(invocation.call)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        return invocation.failed(exc)
    return invocation.succeeded(value)


async def _read_whole(content: object, to_thread: ToThread = asyncio.to_thread) -> bytes:
    """Workspace files have no size cap: bytes as given, a path or a file object read whole
    (in a worker thread unless ``read`` is a coroutine function)."""
    plan = plan_upload(content)
    if plan.data is not None:
        return plan.data
    if plan.path is not None:
        path = plan.path
        try:
            return bytes(await to_thread(pathlib.Path(path).read_bytes))
        except OSError as exc:
            raise CoderAgentError(f"cannot read {path!r}: {exc}") from exc
    data = await _read_upload(plan, to_thread)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CoderAgentError(
            f"the file object returned {type(data).__name__}, expected bytes "
            "(open the file in binary mode)"
        )
    return bytes(data)


def _segment_sink(
    client_sink: TransportEventSink,
    callback: Callable[[Any], object] | None,
    make_sink: Callable[[Callable[[Any], object] | None], TransportEventSink] = transport_sink,
) -> TransportEventSink:
    """The session's sink with a supplied client: ``segment:*`` events to the agent's hook
    (or the client's when the agent has none), everything else to the client's hook."""
    if callback is None:
        return client_sink
    own = make_sink(callback)

    def route(event: Any) -> None:
        if event.type.startswith("segment:"):
            own.emit(event)
        else:
            client_sink.emit(event)

    return TransportEventSink(route, wall_clock=time.time)
