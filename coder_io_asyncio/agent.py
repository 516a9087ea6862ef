"""``CoderAgent`` on asyncio: one Coder chat session driven turn by turn (state machines G, H;
D5, D7, D10, D17, D22; ``coder_io_common._async.agent``).

Plain (sync) tool functions run in a worker thread (``asyncio.to_thread``), so a slow tool
never stalls the stream's reading and pings; coroutine functions are awaited on the loop. The
calls of one pause run concurrently. A caller's ``asyncio.timeout`` or a cancelled task
around ``generate`` interrupts the run on the server (in the background, D22) and re-raises
the ``asyncio.CancelledError`` unwrapped, so ``asyncio.timeout`` surfaces as the builtin
``TimeoutError``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from coder_io_common._async import agent

from .client import CoderChatClient

__all__ = ["AgentStream", "CoderAgent"]


class AgentStream(agent.AgentStream):
    """One streaming turn (``CoderAgent.stream``); use it as an async context manager.

    ``async for part in stream`` yields the output parts (``TextDelta``, ``ToolCall``,
    ``Finish`` ...) live; ``stream.text_stream`` yields only the text deltas' strings. Each
    part is delivered once, to whichever lens reads it. ``await stream.get_final_result()``
    drains what is left and returns the ``GenerateResult`` (an error event of the run is in
    ``result.error``; a failure of the run itself, such as a lost stream or the
    ``request_timeout``, is raised). Leaving the block before the turn finished interrupts the
    run on the server.
    """


class CoderAgent(agent.CoderAgent):
    """A Coder Agents chat session on asyncio (docs/architecture.md "Public API").

    One agent is one server chat, created by the first turn and reused by the next ones
    (H.1). Connection: ``client`` (a ``CoderChatClient``, never closed here) or ``base_url`` /
    ``token`` (defaulting to ``CODER_URL`` / ``CODER_SESSION_TOKEN``) with ``http_client`` (an
    ``httpx.AsyncClient``) and ``verify``. Settings: ``options`` (an ``AgentOptions``) and the
    same settings as keywords, a keyword passed explicitly overriding the field of
    ``options``. ``organization_id`` defaults to ``CODER_ORGANIZATION_ID`` / ``CODER_ORG_ID``, else the user's first (D33). Durations are
    seconds: ``request_timeout`` bounds each segment (C.3), ``settle_deadline`` and
    ``settle_retry_delay`` bound cleanup (H.4, H.5). ``tools`` are ``@tool`` functions,
    ``Tool`` objects (explicit JSON Schema, attrs classes, dataclasses, pydantic models) or
    plain functions, as a sequence or a name -> tool mapping. ``output_type`` enables the
    structured-output tool (``result.output``). ``on_transport_event`` receives transport
    events (sync or async callable); with a supplied ``client`` the ``http:*`` and ``ws:*``
    events go to that client's hook and this one receives the ``segment:*`` events (all of
    them go to the client's hook when the agent has none). ``recorder`` records a transcript
    (``docs/transcripts.md``).

    Construction does no I/O. ``async with`` disposes of the agent on exit: interrupt, then
    archive, bounded by ``settle_deadline`` and never raising (H.5). The agent is
    single-flight: a second concurrent ``generate`` / ``stream`` raises ``CoderAgentError``.
    """

    _client_class: ClassVar[type[Any]] = CoderChatClient
    _stream_class: ClassVar[type[agent.AgentStream]] = AgentStream
