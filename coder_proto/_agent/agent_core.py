"""The agent core: everything ``CoderAgent`` does that is not I/O (state machines H.1, H.2,
P; D5, D7, D17; docs/agents.md "Custom tools", "Files", "Workspace files" and
"Structured output").

Every adapter's ``CoderAgent`` is a thin shell (``coder_proto._shells.agent_shell``) around
one ``AgentCore``:

* construction validates the settings and builds the ``SessionConfig`` and ``Session``
  (H.2): the client tools (``coder_proto._agent.tools``), the ``organization_id`` default from
  ``CODER_ORGANIZATION_ID`` or ``CODER_ORG_ID`` (without either, the first turn asks the
  deployment, D33), the structured-output tool and the workspace-files adapter check;
* the adapter turns what a caller passes into prompt messages with ``prepare_prompt``
  (``coder_proto._agent.prompt_plan``: the files it must read first, appendix P);
* ``plan_tools`` answers a ``RunTools`` action as far as the core can (D5,
  ``coder_proto._agent.tool_calls``): unknown tools and invalid input become error outcomes,
  the structured-output tool is acknowledged in place, and what is left are
  ``ToolInvocation`` values whose callables the adapter awaits;
* ``generate`` returns a ``GenerateCall``: the turn to drive, and after it the structured-output
  ladder (accept a valid filed answer, nudge an idle chat once, or fail;
  ``coder_proto._agent.structured_output``);
* ``begin`` / ``end`` are the single-flight guard around a whole call (G.2), including the
  adapter's own preparation (reading files) before the turn exists.

The adapter performs I/O only: it reads the files a plan names, drives the machines, awaits
the tool callables (in a worker thread for plain functions where its runtime needs that) and
reports outcomes. ``max_retries`` (C.5) is the turn's own bookkeeping (``Turn``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._errors import CoderAgentError
from .._jobs.organization import ENV_ORGANIZATION_ID, organization_from_env
from .._outputs import ToolCall
from .._rest.prefix import PrefixSelector
from .._rest.uploads import plan_upload
from .._stream.usage import sum_usage
from .._transport_events import TransportEventSink
from .options import AgentOptions
from .prompt import Message
from .session import Session
from .session_state import ReaderFactory, SessionConfig
from .tool_calls import ToolPlan, plan_tool_calls
from .turn import Turn, TurnResult
from .workspace_files import (
    WorkspaceFiles,
    WorkspaceWrite,
    check_workspace_files,
    check_workspace_path,
)

if TYPE_CHECKING:
    from .structured_output import StructuredOutput
    from .tools import Tool

__all__ = ["ENV_ORGANIZATION_ID", "AgentCore", "GenerateCall", "GenerateResult"]

logger = logging.getLogger("coder_proto")


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


# -- the agent ----------------------------------------------------------------------------------


def _idle(result: TurnResult) -> bool:
    """The chat is idle after ``result``: the run settled by itself (docs/agents.md rule 3
    never nudges a chat that is still busy: a tool-call stop winds down after D7's interrupt,
    and a promotion settle means another prompt is running)."""
    return result.finish_reason == "stop" and result.settled_by is None and bool(result.chat_id)


class GenerateCall:
    """One ``generate()`` call: its first ``turn``, then ``advance`` with each turn's result
    until a ``GenerateResult`` comes back (docs/agents.md "Structured output", rule 3)."""

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
        from .structured_output import NUDGE_PROMPT, StructuredOutputError

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
    (one per client, wire 1.4); ``env`` supplies ``CODER_ORGANIZATION_ID`` / ``CODER_ORG_ID``
    (D33: with neither and no ``organization_id``, ``organization_id`` stays ``None`` and
    the first request that needs one asks the deployment). Construction does
    no I/O (H.1) and raises ``CoderAgentError`` on bad settings."""

    __slots__ = (
        "_busy",
        "options",
        "organization_id",
        "output",
        "session",
        "tools",
        "workspace_files",
    )

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
            # D33: else the environment; else the first turn asks users/me.
            organization_id = organization_from_env(env)
        elif not organization_id.strip():
            raise CoderAgentError(
                "organization_id must be a non-empty string: pass an organization's id, or "
                "leave it out to use the signed-in user's first organization"
            )
        self.tools: dict[str, Tool] = dict(options.tools)
        self.output: StructuredOutput | None = None
        instructions = options.instructions
        if options.output_type is not None:
            from .structured_output import (
                STRUCTURED_OUTPUT_INSTRUCTIONS,
                STRUCTURED_OUTPUT_TOOL,
                StructuredOutput,
            )

            if STRUCTURED_OUTPUT_TOOL in self.tools:
                raise CoderAgentError(
                    f"a tool named {STRUCTURED_OUTPUT_TOOL!r} clashes with output_type"
                )
            self.output = StructuredOutput(options.output_type)
            instructions = "\n\n".join(
                t for t in (instructions, STRUCTURED_OUTPUT_INSTRUCTIONS) if t
            )
        check_workspace_files(workspace_files, options.workspace_id)
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

    def stream(
        self, messages: Sequence[Message], *, now: float, edit_message_id: int | None = None
    ) -> Turn:
        """Start a ``stream()`` turn; its parts are delivered live in ``turn.parts``. With
        ``edit_message_id`` the prompt replaces that user message instead of following it."""
        return self.session.stream(messages, now=now, edit_message_id=edit_message_id)

    def segment(self, messages: Sequence[Message], *, now: float) -> Turn:
        """Start one model round trip (G.2) in stream mode: it ends when the run settles or
        pauses for client tools, whose calls are left for the caller to run and to answer in
        the next segment's prompt (tool messages)."""
        return self.session.segment(messages, now=now)

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
                "upload_to_workspace needs an agent created with workspace_files=... "
                "(the workspace's file adapter)"
            )
        return self.workspace_files, check_workspace_path(path)

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
