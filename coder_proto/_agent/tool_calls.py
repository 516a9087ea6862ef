"""The client-tool policy (D5): how the core answers one ``RunTools`` action.

``plan_tool_calls`` deduplicates a pause's calls by id and decides what it can: an
unregistered name, input that fails validation or a tool without a function gets an error
outcome, a structured-output filing is answered in place, and every other call becomes a
``ToolInvocation`` whose function the adapter runs (awaiting it where its runtime needs to)
before reporting ``succeeded(value)`` or ``failed(exception)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._actions import ToolOutcome
from .._outputs import ToolCall

if TYPE_CHECKING:
    from .structured_output import StructuredOutput
    from .tools import Tool

__all__ = ["ToolInvocation", "ToolPlan", "plan_tool_calls"]

logger = logging.getLogger("coder_proto")


def _failure_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@attrs.frozen(kw_only=True)
class ToolInvocation:
    """One client tool call the adapter must run: ``call()`` invokes the tool's function with
    the validated input (and its ``ToolContext``); await the value when ``is_async`` (or
    when it is awaitable), then report ``succeeded(value)`` or ``failed(exception)``."""

    call_part: ToolCall
    tool: Tool
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def tool_call_id(self) -> str:
        return self.call_part.tool_call_id

    @property
    def is_async(self) -> bool:
        return self.tool.is_async

    def call(self) -> Any:
        """Call the tool's function (its return value may be awaitable)."""
        func = self.tool.func
        assert func is not None
        return func(*self.args, **self.kwargs)

    def succeeded(self, value: Any) -> ToolOutcome:
        """The outcome for the value the function returned (``encode_output``)."""
        from .tools import encode_output

        return ToolOutcome(tool_call_id=self.tool_call_id, output=encode_output(value))

    def failed(self, exc: BaseException) -> ToolOutcome:
        """The D5 error outcome for an exception the function raised."""
        logger.warning(
            "client tool %r raised %s (call %s); the model gets an error result",
            self.tool.name,
            type(exc).__name__,
            self.tool_call_id,
            exc_info=exc,
        )
        return ToolOutcome(tool_call_id=self.tool_call_id, output=_failure_text(exc), is_error=True)


@attrs.frozen(kw_only=True)
class ToolPlan:
    """How to answer one ``RunTools`` action (D5): ``outcomes`` are decided already (unknown
    tools, invalid input, tools without a function, structured-output filings);
    ``invocations`` must be run by the adapter. Report every outcome, in any order, with
    ``turn.tool_results`` (the turn orders and completes them)."""

    outcomes: tuple[ToolOutcome, ...] = ()
    invocations: tuple[ToolInvocation, ...] = ()


def plan_tool_calls(
    calls: Iterable[ToolCall],
    tools: Mapping[str, Tool],
    *,
    chat_id: str | None = None,
    structured_output: StructuredOutput | None = None,
) -> ToolPlan:
    """D5 for one pause's client calls, deduplicated by id: an unregistered name, input that
    fails validation, or a tool without a function gets an error outcome with a string
    message; a structured-output filing is acknowledged (or answered with its validation
    error, so the model retries in the loop); every other call becomes a ``ToolInvocation``."""
    from .tools import ToolContext, ToolInputError

    outcomes: list[ToolOutcome] = []
    invocations: list[ToolInvocation] = []
    seen: set[str] = set()
    for call in calls:
        if call.tool_call_id in seen:
            continue
        seen.add(call.tool_call_id)
        if structured_output is not None and call.tool_name == structured_output.name:
            outcomes.append(structured_output.answer(call))
            continue
        tool = tools.get(call.tool_name)
        if tool is None:
            outcomes.append(
                ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    output=f"unknown tool {call.tool_name!r}: no client tool of that name is "
                    "registered",
                    is_error=True,
                )
            )
            continue
        if tool.func is None:
            outcomes.append(
                ToolOutcome(
                    tool_call_id=call.tool_call_id,
                    output=f"tool {tool.name!r} has no function to run",
                    is_error=True,
                )
            )
            continue
        try:
            parsed = tool.parse_input(call.input)
        except ToolInputError as exc:
            outcomes.append(
                ToolOutcome(tool_call_id=call.tool_call_id, output=str(exc), is_error=True)
            )
            continue
        context = ToolContext(
            chat_id=chat_id, tool_call_id=call.tool_call_id, tool_name=call.tool_name
        )
        args, kwargs = tool.call_args(parsed, context)
        invocations.append(ToolInvocation(call_part=call, tool=tool, args=args, kwargs=kwargs))
    return ToolPlan(outcomes=tuple(outcomes), invocations=tuple(invocations))
