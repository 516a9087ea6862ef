"""``CoderAgent`` of the event-loop adapters: one Coder chat session driven turn by turn (state
machines G, H; D5, D7, D10, D17, D22; docs/architecture.md "Public API").

The class is a thin shell around the core: ``coder_proto.agent.AgentShell`` holds the
constructor, its checks and the session state, ``AgentCore`` validates the settings,
prepares prompts, plans every client-tool batch (D5) and decides the structured-output
ladder, and ``AgentOperations`` defines the plain operations. This module only reads the files a
prompt names, drives the core's machines on the client's ``Driver`` and awaits the tool
callables: the calls of one pause run concurrently in a task group, plain (sync) tool
functions in worker threads (so a slow tool never stalls the stream's reading and pings;
abandoned if the turn is cancelled), coroutine functions on the loop.

Cancellation is the runtime's: a caller's deadline or cancelled task around ``generate``
interrupts the run on the server (in the background, D22) and lets the runtime's cancellation
through unwrapped. Only ``request_timeout`` raises ``CoderChatError(kind="timeout")``.
Disposal (``aclose`` / leaving ``async with``) still happens when the caller is already
cancelled: bounded by ``settle_deadline`` plus the 10 s background bound.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

from coder_io_common.closing import AsyncClosing
from coder_io_common.files import read_path
from coder_io_common.observer import (
    AgentObserver,
    turn_observation,
)
from coder_proto import (
    ArchiveResult,
    CoderAgentError,
    GenerateResult,
    OutputPart,
    TextDelta,
    ToolInvocation,
    WorkspaceUpload,
)
from coder_proto.adapter import (
    BACKGROUND_TASK_BOUND,
    AgentOperations,
    AgentShell,
    Operation,
    PromptPlan,
    ToolOutcome,
    WorkspaceWrite,
    prepare_prompt,
)

from .client import CoderChatClient, operation
from .driver import Driver, TaskHandle
from .runtime import AsyncRuntime
from .tools import invoke_all

if TYPE_CHECKING:
    import httpx  # noqa: F401 (named by the base class)

__all__ = ["AgentStream", "CoderAgent"]

P = ParamSpec("P")
T = TypeVar("T")

#: Extra time a disposal from a cancelled caller gets beyond its own bounds (closing sockets
#: and tasks); a disposal without finite bounds gets ``_UNBOUNDED_CLOSE``.
_CLOSE_GRACE = 3.0
_UNBOUNDED_CLOSE = 60.0


def _op(
    spec: Callable[Concatenate[AgentOperations, P], Operation[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    return operation(spec, owner="CoderAgent")


class CoderAgent(AgentShell[CoderChatClient, "httpx.AsyncClient"], AsyncClosing):
    """A Coder Agents chat session on an event loop (docs/architecture.md "Public API").

    One agent is one server chat, created by the first turn and reused by the next ones
    (H.1). Connection: ``client`` (a ``CoderChatClient`` of the same adapter, never closed
    here) or ``base_url`` / ``token`` (defaulting to ``CODER_URL`` / ``CODER_SESSION_TOKEN``)
    with ``http_client`` (an ``httpx.AsyncClient``) and ``verify``. Settings: ``options`` (an
    ``AgentOptions``) and the same settings as keywords, a keyword passed explicitly
    overriding the field of ``options``. ``organization_id`` defaults to
    ``CODER_ORGANIZATION_ID`` / ``CODER_ORG_ID``, else the user's first (D33). Durations are seconds: ``request_timeout`` bounds each segment
    (C.3), ``settle_deadline`` and ``settle_retry_delay`` bound cleanup (H.4, H.5). ``tools``
    are ``@tool`` functions, ``Tool`` objects (explicit JSON Schema, attrs classes,
    dataclasses, pydantic models) or plain functions, as a sequence or a name -> tool mapping.
    ``output_type`` enables the structured-output tool (``result.output``).
    ``on_transport_event`` receives transport events (sync or async callable); with a supplied
    ``client`` the ``http:*`` and ``ws:*`` events go to that client's hook and this one
    receives the ``segment:*`` events (all of them go to the client's hook when the agent has
    none). ``recorder`` records a transcript (``docs/transcripts.md``).

    Construction does no I/O. ``async with`` disposes of the agent on exit: interrupt, then
    archive, bounded by ``settle_deadline`` and never raising (H.5), even when the caller was
    cancelled. The agent is single-flight: a second concurrent ``generate`` / ``stream``
    raises ``CoderAgentError``.
    """

    #: The adapter's ``AgentStream`` class.
    _stream_class: ClassVar[type[AgentStream]]
    _driver: Driver
    #: Hooks around turns, tools and events (``coder_io_common.observer``), or ``None``.
    _observer: AgentObserver | None = None

    def _setup(self) -> None:
        self._runtime: AsyncRuntime = self._client.driver.runtime

    def reset_session(self) -> None:
        """Start a fresh chat on the next turn (H.1); a paused stream is closed."""
        self._driver.reset(self._core)

    # -- turns -------------------------------------------------------------------------------

    def _begin(self) -> None:
        # The single-flight check and entry are one step, whichever thread calls (G.2).
        with self._driver.locked():
            self._core.begin()

    def _end(self) -> None:
        with self._driver.locked():
            self._core.end()

    async def generate(self, prompt: object = None, *, messages: object = None) -> GenerateResult:
        """Run one turn to completion (the whole client-tool loop) and return its result:
        final text, every step, the whole turn's usage, finish reason, tool calls and results,
        sources, and ``output`` with ``output_type``. ``prompt`` is a string, content parts
        (text, ``Attachment``, ``AttachedFile`` ...) or messages; ``messages`` takes messages
        only. A run that fails raises its typed error; cancelling the call interrupts the run
        on the server and re-raises the cancellation (D22)."""
        core = self._core
        driver = self._driver
        self._begin()
        seen = turn_observation(self._observer, self, streaming=False)
        try:
            with driver.calling():
                built = await self._build(prepare_prompt(prompt, messages))
                core.end()  # the turn holds the agent from here on, its whole ladder included
                result: GenerateResult = await driver.turn(
                    core, built, invoke=self._invoke
                ).result()
            seen.end(result)
            return result
        except BaseException as exc:
            seen.end(error=exc)
            raise
        finally:
            self._end()

    # async only: begin
    # The blocking adapter's stream and segment take a timeout= (coder_io_sync.agent).
    def stream(
        self,
        prompt: object = None,
        *,
        messages: object = None,
        edit_message_id: int | None = None,
    ) -> AgentStream:
        """A streaming turn: ``async with agent.stream(prompt) as s:`` then ``async for part in
        s`` (output parts, live), or ``async for delta in s.text_stream``, and ``await
        s.get_final_result()``. A failure of the run is raised by the iteration; leaving the
        block before the turn finished interrupts the run. With ``edit_message_id`` (the id of
        one of the chat's user messages, as ``prompts()`` lists them) the prompt replaces that
        message, which drops it and everything after it from the history, and the turn
        streams the run the edit starts (docs/sessions.md)."""
        return self._stream_class(self, prompt, messages, edit_message_id=edit_message_id)

    def segment(self, prompt: object = None, *, messages: object = None) -> AgentStream:
        """One model round trip as a stream, for frameworks that run the tool loop
        themselves (docs/tools.md "Running the tools yourself"): the parts of one segment,
        ending when the run settles or pauses for client tools. A pause's calls are not run:
        ``get_final_result()`` reports them in ``tool_calls`` with ``finish_reason``
        ``"tool-calls"``, and the next ``segment`` with ``messages`` ending in a
        ``ToolMessage`` of their results resumes the run. Leaving the block before the
        segment ended interrupts the run."""
        return self._stream_class(self, prompt, messages, segment=True)

    # async only: end
    async def _build(self, plan: PromptPlan) -> Sequence[Any]:
        read_upload = self._runtime.read_upload
        return plan.build([await read_upload(upload) for upload in plan.reads])

    async def _invoke(self, invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
        """The invocations of one tool pause (the core planned it, D5)."""
        return await invoke_all(self._runtime, invocations, self._observer)

    # -- cleanup (H.3-H.5) -------------------------------------------------------------------

    interrupt = _op(AgentOperations.interrupt)

    async def archive(self) -> ArchiveResult:
        """Archive the session's chat and every stranded one (H.4, D10), retrying 409s while
        the chat winds down, within ``settle_deadline``."""
        return await self._perform(self._calls.archive())

    async def aclose(self, *, archive: bool = True) -> None:
        """Dispose of the agent (H.5): interrupt, then archive, bounded by ``settle_deadline``;
        await the background work (at most 10 s, D22); close the client if the agent created
        it. With ``archive=False`` the chat is left as it is, to be continued later from
        ``chat_id`` and ``last_seen_message_id``: only the connections are closed. Never
        raises (except the caller's own cancellation). Called when the caller is already
        cancelled, the disposal still happens, bounded (``settle_deadline`` plus the 10 s
        background bound). Idempotent."""
        bound = self._core.session.config.settle_deadline + BACKGROUND_TASK_BOUND + _CLOSE_GRACE
        with self._runtime.finishing(bound if math.isfinite(bound) else _UNBOUNDED_CLOSE):
            await self._dispose(archive)

    async def _dispose(self, archive: bool) -> None:
        if self._closed:
            return
        self._closed = True
        driver = self._driver
        try:
            if not driver.closed:
                # The dispose machine logs and collects its failures; it never raises.
                with driver.calling():
                    await driver.close_agent(self._core, archive=archive).result()
        except Exception:
            self._runtime.logger.warning("agent disposal failed", exc_info=True)
        finally:
            if self._owns_client:
                await self._client.aclose()
            elif not driver.closed:
                await driver.wait_background(BACKGROUND_TASK_BOUND)

    # -- plain operations (coder_proto.agent.AgentCalls) ---------------------------------------

    async def _perform(self, call: Operation[T]) -> T:
        return await self._client._perform(call)

    list_models = _op(AgentOperations.list_models)
    get_chat_cost = _op(AgentOperations.get_chat_cost)
    compact = _op(AgentOperations.compact)
    clear = _op(AgentOperations.clear)
    edit_message = _op(AgentOperations.edit_message)
    prompts = _op(AgentOperations.prompts)
    propose_title = _op(AgentOperations.propose_title)
    diff = _op(AgentOperations.diff)
    queued_messages = _op(AgentOperations.queued_messages)
    edit_queued_message = _op(AgentOperations.edit_queued_message)
    promote_queued_message = _op(AgentOperations.promote_queued_message)
    attach = _op(AgentOperations.attach)
    history = _op(AgentOperations.history)

    async def upload_to_workspace(self, content: object, path: str) -> WorkspaceUpload:
        """Write ``content`` (bytes, a path or a binary file object) as-is to ``path`` on the
        agent's workspace through the ``workspace_files`` adapter (docs/agents.md "Workspace
        files"): no allowlist, no size cap, no unpacking. ``write_file`` may be a coroutine
        function on an event loop; the blocking adapter needs a plain method."""
        write = self._core.workspace_write(content, path)
        data = await _read_whole(write, self._runtime)
        written = write.adapter.write_file(write.target, data)
        if inspect.isawaitable(written):
            written = await self._runtime.awaited(written, "workspace_files.write_file")
        return write.result(written, data)


class AgentStream:
    """One streaming turn (``CoderAgent.stream``); use it as an async context manager.

    ``async for part in stream`` yields the output parts (``TextDelta``, ``ToolCall``,
    ``Finish`` ...) live; ``stream.text_stream`` yields only the text deltas' strings. Each
    part is delivered once, to whichever lens reads it. ``await stream.get_final_result()``
    drains what is left and returns the ``GenerateResult`` (an error event of the run is in
    ``result.error``; a failure of the run itself, such as a lost stream or the
    ``request_timeout``, is raised). Leaving the block before the turn finished (a ``break``,
    an error, the caller's cancellation) interrupts the run on the server.
    """

    __slots__ = (
        "_agent",
        "_edit_message_id",
        "_entered",
        "_final",
        "_messages",
        "_prompt",
        "_run",
        "_seen",
        "_segment",
    )

    def __init__(
        self,
        agent: CoderAgent,
        prompt: object,
        messages: object,
        *,
        segment: bool = False,
        edit_message_id: int | None = None,
    ) -> None:
        self._agent = agent
        self._segment = segment
        self._edit_message_id = edit_message_id
        self._prompt = prompt
        self._messages = messages
        self._run: TaskHandle[Any] | None = None
        self._final: GenerateResult | None = None
        self._entered = False
        self._seen = turn_observation(None, agent, streaming=True)

    def __repr__(self) -> str:
        state = "not started" if self._run is None else ("done" if self._run.done else "live")
        return f"<AgentStream {state}>"

    async def __aenter__(self) -> AgentStream:
        if self._entered:
            raise CoderAgentError("a stream can be entered only once")
        self._entered = True
        agent = self._agent
        core = agent._core
        driver = agent._driver
        agent._begin()
        self._seen = turn_observation(agent._observer, agent, streaming=True)
        try:
            with driver.calling():
                built = await agent._build(prepare_prompt(self._prompt, self._messages))
                core.end()  # the turn holds the agent from here on
                self._run = driver.turn(
                    core,
                    built,
                    mode="segment" if self._segment else "stream",
                    edit_message_id=self._edit_message_id,
                    invoke=agent._invoke,
                )
        except BaseException as exc:
            self._seen.end(error=exc)
            agent._end()
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
                # Tearing the stream down early interrupts the run (docs/agents.md "Timeouts and
                # cancellation"); with an exception it is the caller's reason (D22).
                self._run.cancel(exc)
        finally:
            self._seen.end_stream(self._run, exc)
            self._agent._end()

    def _live(self) -> TaskHandle[Any]:
        if self._run is None:
            raise CoderAgentError("use the stream inside `async with agent.stream(...) as s:`")
        return self._run

    def __aiter__(self) -> AsyncIterator[OutputPart]:
        return self._parts()

    async def _parts(self) -> AsyncIterator[OutputPart]:
        # ``TaskHandle.parts`` inline: one async generator step per part, not two.
        run = self._live()
        machine = run.machine
        while True:
            # Read anew after each wait: an idle turn lets its empty deque go.
            parts = machine.parts
            while parts:
                yield parts.popleft()
            if run.done and not parts:
                break
            # async only: begin
            # ``run.wait_changed()`` inline: an open stream's consumer holds no coroutine
            # frame of its own while it waits.
            try:
                await run.changed()
            except run._runtime.cancelled as exc:
                run.cancel(exc)
                raise
            # async only: end
            # blocking: run.wait_changed()
        await run.result()

    @property
    def text_stream(self) -> AsyncIterator[str]:
        """The text deltas of the turn, as strings, live."""
        return self._text()

    async def _text(self) -> AsyncIterator[str]:
        # The parts loop of ``_parts`` inline: one async generator per open stream, not two,
        # and one step of it per delta.
        run = self._live()
        machine = run.machine
        while True:
            parts = machine.parts
            while parts:
                part = parts.popleft()
                if type(part) is TextDelta:
                    yield part.delta
            if run.done and not parts:
                break
            # async only: begin
            try:
                await run.changed()  # ``run.wait_changed()`` inline, as in ``_parts``
            except run._runtime.cancelled as exc:
                run.cancel(exc)
                raise
            # async only: end
            # blocking: run.wait_changed()
        await run.result()

    async def get_final_result(self) -> GenerateResult:
        """Wait for the turn to finish (draining the parts nobody read) and return its
        result, with ``output`` when a structured answer was filed validly."""
        if self._final is None:
            run = self._live()
            async for _part in run.parts():
                pass
            self._final = await run.result()
            self._seen.end(self._final)
        return self._final


# -- workspace files -----------------------------------------------------------------------------


async def _read_whole(write: WorkspaceWrite, runtime: AsyncRuntime) -> bytes:
    """Workspace files have no size cap: bytes as given, a path or a file object read whole
    (in a worker thread unless ``read`` is a coroutine function)."""
    plan = write.plan
    if plan.data is not None:
        return bytes(plan.data)
    if plan.path is not None:
        return bytes(await runtime.to_thread(read_path, plan.path))
    return write.data(await runtime.read_upload(plan))
