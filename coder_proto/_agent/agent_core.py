"""The agent core: everything ``CoderAgent`` does that is not I/O (state machines H.1, H.2,
P; D5, D7, D17; docs/agents.md "Custom tools", "Files", "Workspace files" and
"Structured output").

Every adapter's ``CoderAgent`` is a thin shell (``coder_proto._shells.agent_shell``) around
one ``AgentCore``:

* construction validates the settings and builds the ``SessionConfig`` and ``Session``
  (H.2): the client tools (``coder_proto._agent.tools``), the ``organization_id`` default from
  ``CODER_ORGANIZATION_ID``, the structured-output tool and the workspace-files adapter check;
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from .._constants import DEFAULT_MAX_STEPS, SETTLE_DEADLINE, SETTLE_RETRY_DELAY
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .._rest.prefix import PrefixSelector
from .._rest.uploads import plan_upload
from .._stream.usage import sum_usage
from .._transport_events import TransportEventSink
from .prompt import Message
from .session import Session
from .session_state import ReaderFactory, SessionConfig
from .structured_output import (
    NUDGE_PROMPT,
    STRUCTURED_OUTPUT_INSTRUCTIONS,
    STRUCTURED_OUTPUT_TOOL,
    StructuredOutput,
    StructuredOutputError,
)
from .tool_calls import ToolPlan, plan_tool_calls
from .tools import Tool, tools_by_name
from .turn import Turn, TurnResult
from .workspace_files import (
    WorkspaceFiles,
    WorkspaceWrite,
    check_workspace_files,
    check_workspace_path,
)

__all__ = ["ENV_ORGANIZATION_ID", "AgentCore", "GenerateCall", "GenerateResult"]

logger = logging.getLogger("coder_proto")

#: The environment variable ``organization_id`` defaults from (the fake server prints it).
ENV_ORGANIZATION_ID: Final = "CODER_ORGANIZATION_ID"


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
    """The chat is idle after ``result``: the run settled by itself (rule 3 never nudges a
    chat that is still busy: a tool-call stop winds down after D7's interrupt, and a
    promotion settle means another prompt is running)."""
    return result.finish_reason == "stop" and result.settled_by is None and bool(result.chat_id)


def _env_str(env: Mapping[str, str] | None, name: str) -> str | None:
    value = (env or {}).get(name)
    return value if isinstance(value, str) and value.strip() else None


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
    """The pure part of one ``CoderAgent`` (see the module docstring). ``base_url`` and
    ``token`` come from the adapter's client; ``selector`` is that client's prefix state
    (one per client, wire 1.4); ``env`` supplies ``CODER_ORGANIZATION_ID``. Construction does
    no I/O (H.1) and raises ``CoderAgentError`` on bad settings."""

    def __init__(
        self,
        *,
        base_url: str,
        token: str | None,
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
        selector: PrefixSelector | None = None,
        sink: TransportEventSink | None = None,
        reader_factory: ReaderFactory | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if organization_id is None:
            organization_id = _env_str(env, ENV_ORGANIZATION_ID)
        if not isinstance(organization_id, str) or not organization_id.strip():
            raise CoderAgentError(
                "organization_id is required: pass it, or set the "
                f"{ENV_ORGANIZATION_ID} environment variable"
            )
        if isinstance(mcp_server_ids, str):
            raise CoderAgentError("mcp_server_ids must be a sequence of ids, not one string")
        self.tools: dict[str, Tool] = tools_by_name(tools)
        self.output: StructuredOutput | None = None
        if output_type is not None:
            if STRUCTURED_OUTPUT_TOOL in self.tools:
                raise CoderAgentError(
                    f"a tool named {STRUCTURED_OUTPUT_TOOL!r} clashes with output_type"
                )
            self.output = StructuredOutput(output_type)
            if instructions is not None and not isinstance(instructions, str):
                raise CoderAgentError(f"instructions must be a string, got {instructions!r}")
            instructions = "\n\n".join(
                t for t in (instructions, STRUCTURED_OUTPUT_INSTRUCTIONS) if t
            )
        check_workspace_files(workspace_files, workspace_id)
        self.workspace_files = workspace_files
        registered = [t.to_dynamic_tool() for t in self.tools.values()]
        if self.output is not None:
            registered.append(self.output.tool.to_dynamic_tool())
        config = SessionConfig(
            base_url=base_url,
            token=token,
            organization_id=organization_id,
            model=model,
            instructions=instructions,
            tools=tuple(registered),
            workspace_id=workspace_id,
            mcp_server_ids=tuple(mcp_server_ids or ()),
            plan_mode=plan_mode,
            reasoning_effort=reasoning_effort,
            busy_behavior=busy_behavior,
            request_timeout=request_timeout,
            max_steps=max_steps,
            max_retries=max_retries,
            settle_deadline=settle_deadline,
            settle_retry_delay=settle_retry_delay,
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
