"""``CoderAgent``, blocking: one Coder chat session driven turn by turn (state machines G, H;
D5, D7, D10, D17, D22; docs/architecture.md "Public API").

The class is a thin shell around ``coder_proto._agent.agent_core.AgentCore``: the core validates the
settings, prepares prompts, plans every client-tool batch (D5) and decides the
structured-output ladder; this module reads the files a prompt names, drives the core's
machines on the client's ``Driver`` in the calling thread and calls the tool functions.

Tools are plain functions. The calls of one pause run concurrently, each in a thread of its
own, while the calling thread keeps reading the stream; a coroutine function (or a function
returning an awaitable) gets an error result (D5), since nothing here runs an event loop.

Threads: use one agent per thread. ``generate`` / ``stream`` are single-flight (a second
concurrent call raises ``CoderAgentError``). ``interrupt()``, ``archive()`` and the plain
operations may be called from another thread while a turn runs: ``interrupt()`` from another
thread is the supported way to stop a running ``generate`` (it returns with the turn's
result once the run settled). A ``KeyboardInterrupt`` or the ``timeout=`` of ``generate`` /
``stream`` cancels the turn (the run on the server is interrupted in the background, D22).
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

import httpx

from coder_io_common.closing import Closing
from coder_io_common.files import read_path
from coder_io_common.observer import AgentObserver, observed_tool, turn_observation
from coder_proto import (
    ArchiveResult,
    CoderAgentError,
    GenerateResult,
    OutputPart,
    TextDelta,
    WorkspaceUpload,
)
from coder_proto._actions import ToolOutcome
from coder_proto._agent.prompt_plan import PromptPlan, prepare_prompt
from coder_proto._agent.tool_calls import ToolInvocation
from coder_proto._agent.workspace_files import WorkspaceWrite
from coder_proto._constants import BACKGROUND_TASK_BOUND
from coder_proto._shells.agent_calls import AgentCalls
from coder_proto._shells.agent_shell import AgentShell
from coder_proto._shells.client_calls import Call

from ._driver import Deadline, Driver, Run, sigint_deferred
from .client import CoderChatClient, _read_upload, operation

__all__ = ["AgentStream", "CoderAgent"]

logger = logging.getLogger("coder_io_sync")

P = ParamSpec("P")
T = TypeVar("T")


def _op(spec: Callable[Concatenate[AgentCalls, P], Call[T]]) -> Callable[Concatenate[Any, P], T]:
    return operation(spec, owner="CoderAgent")


class CoderAgent(AgentShell[CoderChatClient, httpx.Client], Closing):
    """A Coder Agents chat session, blocking (docs/architecture.md "Public API").

    One agent is one server chat, created by the first turn and reused by the next ones
    (H.1). Connection: ``client`` (a ``CoderChatClient``, never closed here) or ``base_url`` /
    ``token`` (defaulting to ``CODER_URL`` / ``CODER_SESSION_TOKEN``) with ``http_client`` (an
    ``httpx.Client``) and ``verify``. Settings: ``options`` (an ``AgentOptions``) and the same
    settings as keywords, a keyword passed explicitly overriding the field of ``options``.
    ``organization_id`` defaults to ``CODER_ORGANIZATION_ID`` / ``CODER_ORG_ID``, else the user's first (D33). Durations are seconds: ``request_timeout`` bounds each segment
    (C.3), ``settle_deadline`` and ``settle_retry_delay`` bound cleanup (H.4, H.5). ``tools``
    are ``@tool`` functions, ``Tool`` objects (explicit JSON Schema, attrs classes,
    dataclasses, pydantic models) or plain functions, as a sequence or a name -> tool
    mapping. ``output_type`` enables the structured-output tool (``result.output``).
    ``on_transport_event`` (a plain function) receives transport events; with a supplied
    ``client`` the ``http:*`` and ``ws:*`` events go to that client's hook and this one
    receives the ``segment:*`` events (all of them go to the client's hook when the agent has
    none). It runs while the agent's driver is locked: it must not call the agent.
    ``recorder`` records a transcript (``docs/transcripts.md``).

    Construction does no I/O. ``with`` disposes of the agent on exit: interrupt, then archive,
    bounded by ``settle_deadline`` and never raising (H.5). See the module docstring for
    threads.
    """

    _client_class: ClassVar[type[Any]] = CoderChatClient
    _driver: Driver
    #: Hooks around turns, tools and events (``coder_io_common.observer``), or ``None``.
    _observer: AgentObserver | None = None

    def _setup(self) -> None:
        # The single-flight check and entry are one step, whichever thread calls (G.2).
        self._flight = threading.Lock()

    def reset_session(self) -> None:
        """Start a fresh chat on the next turn (H.1); a paused stream is closed."""
        self._driver.reset(self._core)

    # -- turns -------------------------------------------------------------------------------

    def _begin(self) -> None:
        with self._flight:
            self._core.begin()

    def _end(self) -> None:
        with self._flight:
            self._core.end()

    def generate(
        self, prompt: object = None, *, messages: object = None, timeout: float | None = None
    ) -> GenerateResult:
        """Run one turn to completion (the whole client-tool loop) and return its result:
        final text, every step, the whole turn's usage, finish reason, tool calls and results,
        sources, and ``output`` with ``output_type``. ``prompt`` is a string, content parts
        (text, ``Attachment``, ``AttachedFile`` ...) or messages; ``messages`` takes messages
        only. A run that fails raises its typed error. ``timeout`` (seconds) is the caller's
        deadline for the whole call: when it passes, the run on the server is interrupted and
        the builtin ``TimeoutError`` raised (D22); a ``KeyboardInterrupt`` while waiting does
        the same and propagates. The agent stays usable afterwards."""
        deadline = Deadline.after(timeout)
        core = self._core
        driver = self._driver
        self._begin()
        seen = turn_observation(self._observer, self, streaming=False)
        try:
            with sigint_deferred():
                built = self._build(prepare_prompt(prompt, messages))
                with self._flight:
                    core.end()  # the turn holds the agent from here on, its whole ladder included
                    run = driver.turn(core, built, invoke=self._invoke)
                result: GenerateResult = run.result(deadline)
                seen.end(result)
                return result
        except BaseException as exc:
            seen.end(error=exc)
            raise
        finally:
            self._end()

    def stream(
        self,
        prompt: object = None,
        *,
        messages: object = None,
        timeout: float | None = None,
        edit_message_id: int | None = None,
    ) -> AgentStream:
        """A streaming turn: ``with agent.stream(prompt) as s:`` then ``for part in s``
        (output parts, live), or ``for delta in s.text_stream``, and
        ``s.get_final_result()``. A failure of the run is raised by the iteration; leaving the
        block before the turn finished interrupts the run. ``timeout`` (seconds, from entering
        the block) is the caller's deadline: when it passes while waiting for parts, the run
        is interrupted and the builtin ``TimeoutError`` raised (D22). With
        ``edit_message_id`` (the id of one of the chat's user messages, as ``prompts()`` lists
        them) the prompt replaces that message, which drops it and everything after it from
        the history, and the turn streams the run the edit starts (docs/sessions.md)."""
        return AgentStream(
            self, prompt, messages, Deadline.check(timeout), edit_message_id=edit_message_id
        )

    def segment(
        self, prompt: object = None, *, messages: object = None, timeout: float | None = None
    ) -> AgentStream:
        """One model round trip as a stream, for frameworks that run the tool loop
        themselves (docs/tools.md "Running the tools yourself"): the parts of one segment,
        ending when the run settles or pauses for client tools. A pause's calls are not run:
        ``get_final_result()`` reports them in ``tool_calls`` with ``finish_reason``
        ``"tool-calls"``, and the next ``segment`` with ``messages`` ending in a
        ``ToolMessage`` of their results resumes the run. ``timeout`` is as for ``stream``."""
        return AgentStream(self, prompt, messages, Deadline.check(timeout), segment=True)

    def _build(self, plan: PromptPlan) -> Sequence[Any]:
        return plan.build([_read_upload(upload) for upload in plan.reads])

    def _invoke(self, invocations: Sequence[ToolInvocation]) -> list[ToolOutcome]:
        """The invocations of one tool pause (the core planned it, D5), in the driver's tool
        thread; each runs in a thread of its own when there are several."""
        invoke = observed_tool(self._observer, _invoke)
        if len(invocations) == 1:
            return [invoke(invocations[0])]
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=len(invocations), thread_name_prefix="coder-io-sync-tool"
        ) as pool:
            return list(pool.map(invoke, invocations))

    # -- cleanup (H.3-H.5) -------------------------------------------------------------------

    interrupt = _op(AgentCalls.interrupt)

    def archive(self, *, timeout: float | None = None) -> ArchiveResult:
        """Archive the session's chat and every stranded one (H.4, D10), retrying 409s while
        the chat winds down, within ``settle_deadline``. ``timeout`` (seconds) is the caller's
        deadline: when it passes, the archive stops and the builtin ``TimeoutError`` is raised
        (D22); the chat is left as it was, to archive later."""
        deadline = Deadline.after(timeout)
        with sigint_deferred():
            result: ArchiveResult = self._driver.call(self._calls.archive()).result(deadline)
            return result

    def close(self, *, archive: bool = True) -> None:
        """Dispose of the agent (H.5): interrupt, then archive, bounded by ``settle_deadline``;
        wait for the background work (at most 10 s, D22) and join the worker thread; close the
        client if the agent created it. With ``archive=False`` the chat is left as it is, to be
        continued later from ``chat_id`` and ``last_seen_message_id``: only the connections
        are closed. Never raises (except a ``KeyboardInterrupt``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        driver = self._driver
        try:
            if not driver.closed:
                # The dispose machine logs and collects its failures; it never raises.
                with sigint_deferred():
                    driver.close_agent(self._core, archive=archive).result()
        except Exception:
            logger.warning("agent disposal failed", exc_info=True)
        finally:
            if self._owns_client:
                self._client.close()
            elif not driver.closed:
                driver.wait_background(BACKGROUND_TASK_BOUND)

    # -- plain operations (coder_proto._shells.agent_calls.AgentCalls) ---------------------------------------

    def _perform(self, call: Call[T]) -> T:
        return self._client._perform(call)

    list_models = _op(AgentCalls.list_models)
    get_chat_cost = _op(AgentCalls.get_chat_cost)
    compact = _op(AgentCalls.compact)
    clear = _op(AgentCalls.clear)
    edit_message = _op(AgentCalls.edit_message)
    prompts = _op(AgentCalls.prompts)
    propose_title = _op(AgentCalls.propose_title)
    diff = _op(AgentCalls.diff)
    queued_messages = _op(AgentCalls.queued_messages)
    edit_queued_message = _op(AgentCalls.edit_queued_message)
    promote_queued_message = _op(AgentCalls.promote_queued_message)
    attach = _op(AgentCalls.attach)
    history = _op(AgentCalls.history)

    def upload_to_workspace(self, content: object, path: str) -> WorkspaceUpload:
        """Write ``content`` (bytes, a path or a binary file object) as-is to ``path`` on the
        agent's workspace through the ``workspace_files`` adapter (docs/agents.md "Workspace
        files"): no allowlist, no size cap, no unpacking. The adapter's ``write_file`` must be
        a plain method here."""
        write = self._core.workspace_write(content, path)
        data = _read_whole(write)
        written = write.adapter.write_file(write.target, data)
        if inspect.isawaitable(written):
            _discard(written)
            raise CoderAgentError(
                "workspace_files.write_file returned an awaitable; the blocking adapter "
                "(coder_io_sync) needs a plain method"
            )
        return write.result(written, data)


class AgentStream:
    """One streaming turn (``CoderAgent.stream``); use it as a context manager.

    ``for part in stream`` yields the output parts (``TextDelta``, ``ToolCall``, ``Finish``
    ...) live; ``stream.text_stream`` yields only the text deltas' strings. Each part is
    delivered once, to whichever lens reads it. ``stream.get_final_result()`` drains what is
    left and returns the ``GenerateResult`` (an error event of the run is in
    ``result.error``; a failure of the run itself, such as a lost stream or the
    ``request_timeout``, is raised). The socket is read while the consumer waits for the next
    part.
    """

    def __init__(
        self,
        agent: CoderAgent,
        prompt: object,
        messages: object,
        timeout: float | None = None,
        *,
        segment: bool = False,
        edit_message_id: int | None = None,
    ) -> None:
        self._agent = agent
        self._segment = segment
        self._edit_message_id = edit_message_id
        self._prompt = prompt
        self._messages = messages
        self._timeout = timeout
        self._deadline: Deadline | None = None
        self._run: Run[Any] | None = None
        self._final: GenerateResult | None = None
        self._entered = False
        self._seen = turn_observation(None, agent, streaming=True)

    def __repr__(self) -> str:
        state = "not started" if self._run is None else ("done" if self._run.done else "live")
        return f"<AgentStream {state}>"

    def __enter__(self) -> AgentStream:
        if self._entered:
            raise CoderAgentError("a stream can be entered only once")
        self._entered = True
        deadline = Deadline.after(self._timeout)
        agent = self._agent
        core = agent._core
        driver = agent._driver
        agent._begin()
        self._seen = turn_observation(agent._observer, agent, streaming=True)
        try:
            with sigint_deferred():
                built = agent._build(prepare_prompt(self._prompt, self._messages))
                with agent._flight:
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
        self._deadline = deadline
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._run is not None and not self._run.done:
                # Leaving the stream early interrupts the run (docs/agents.md "Timeouts and
                # cancellation"); with an exception it is the caller's reason (D22).
                self._run.cancel(exc)
        finally:
            self._seen.end_stream(self._run, exc)
            self._agent._end()

    def _live(self) -> Run[Any]:
        if self._run is None:
            raise CoderAgentError("use the stream inside `with agent.stream(...) as s:`")
        return self._run

    def __iter__(self) -> Iterator[OutputPart]:
        return self._parts()

    def _parts(self) -> Iterator[OutputPart]:
        run = self._live()
        yield from run.parts(self._deadline)
        run.result(self._deadline)

    @property
    def text_stream(self) -> Iterator[str]:
        """The text deltas of the turn, as strings, live."""
        return self._text()

    def _text(self) -> Iterator[str]:
        # ``_parts`` inline: one generator less to step through per delta.
        run = self._live()
        for part in run.parts(self._deadline):
            if type(part) is TextDelta:
                yield part.delta
        run.result(self._deadline)

    def get_final_result(self) -> GenerateResult:
        """Wait for the turn to finish (draining the parts nobody read) and return its
        result, with ``output`` when a structured answer was filed validly."""
        if self._final is None:
            run = self._live()
            for _part in run.parts(self._deadline):
                pass
            self._final = run.result(self._deadline)
            self._seen.end(self._final)
        return self._final


# -- helpers shared by the methods above ------------------------------------------------------


def _discard(value: object) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


def _invoke(invocation: ToolInvocation) -> ToolOutcome:
    """Run one client tool. The blocking adapter runs plain functions: a coroutine function,
    or a function that returns an awaitable, gets an error result (D5)."""
    if invocation.is_async:
        return invocation.failed(
            CoderAgentError(
                f"tool {invocation.tool.name!r} is a coroutine function; the blocking adapter "
                "(coder_io_sync) runs plain functions"
            )
        )
    try:
        value = invocation.call()
    except Exception as exc:
        return invocation.failed(exc)
    if inspect.isawaitable(value):
        _discard(value)
        return invocation.failed(
            CoderAgentError(
                f"tool {invocation.tool.name!r} returned an awaitable; the blocking adapter "
                "(coder_io_sync) runs plain functions"
            )
        )
    return invocation.succeeded(value)


def _read_whole(write: WorkspaceWrite) -> bytes:
    """Workspace files have no size cap: bytes as given, a path or a file object read whole."""
    plan = write.plan
    if plan.data is not None:
        return bytes(plan.data)
    if plan.path is not None:
        return read_path(plan.path)
    return write.data(_read_upload(plan))
