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

from typing import Any, ClassVar

from coder_proto import ArchiveResult, GenerateResult

from ._driver import Deadline
from ._sync import agent
from .client import CoderChatClient

__all__ = ["AgentStream", "CoderAgent"]


class CoderAgent(agent.CoderAgent):
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
        with self._driver.deadline(timeout):
            return super().generate(prompt, messages=messages)

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

    def archive(self, *, timeout: float | None = None) -> ArchiveResult:
        """Archive the session's chat and every stranded one (H.4, D10), retrying 409s while
        the chat winds down, within ``settle_deadline``. ``timeout`` (seconds) is the caller's
        deadline: when it passes, the archive stops and the builtin ``TimeoutError`` is raised
        (D22); the chat is left as it was, to archive later."""
        with self._driver.deadline(timeout):
            return super().archive()

    def close(self, *, archive: bool = True) -> None:
        """Dispose of the agent (H.5): interrupt, then archive, bounded by ``settle_deadline``;
        wait for the background work (at most 10 s, D22) and join the worker thread; close the
        client if the agent created it. With ``archive=False`` the chat is left as it is, to be
        continued later from ``chat_id`` and ``last_seen_message_id``: only the connections
        are closed. Never raises (except a ``KeyboardInterrupt``). Idempotent."""
        super().close(archive=archive)


class AgentStream(agent.AgentStream):
    """One streaming turn (``CoderAgent.stream``); use it as a context manager.

    ``for part in stream`` yields the output parts (``TextDelta``, ``ToolCall``, ``Finish``
    ...) live; ``stream.text_stream`` yields only the text deltas' strings. Each part is
    delivered once, to whichever lens reads it. ``stream.get_final_result()`` drains what is
    left and returns the ``GenerateResult`` (an error event of the run is in
    ``result.error``; a failure of the run itself, such as a lost stream or the
    ``request_timeout``, is raised). The socket is read while the consumer waits for the next
    part.
    """

    __slots__ = ("_timeout",)

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
        super().__init__(agent, prompt, messages, segment=segment, edit_message_id=edit_message_id)
        self._timeout = timeout

    def __enter__(self) -> AgentStream:
        # ``timeout`` runs from entering the block: the turn's run is started under it.
        with self._agent._driver.deadline(self._timeout):
            super().__enter__()
        return self
