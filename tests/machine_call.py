"""Machines built by hand, run through the connection's high-level entries.

A test that drives a core machine of its own (a session's turn, a REST job, the watch machine,
a relay) hands it to a driver as an ``Operation`` (``Connection.start_call``): ``machine_call``
wraps it, in ``session``'s connection scope when given. With ``tools``, the call's tool pauses
come as ``InvokeTools`` with one invocation per call of the model (``plan_every_call``), and
the test's runner decides each outcome from the calls (``calls_of``), as an embedder that runs
the tools itself would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coder_proto._agent.tool_calls import ToolInvocation, ToolPlan
from coder_proto._agent.tools import Tool
from coder_proto._outputs import ToolCall
from coder_proto._shells.client_calls import Operation

__all__ = ["AgentOf", "calls_of", "machine_call", "plan_every_call"]

#: What every planned invocation names: the test decides the outcome, no function runs.
_ANY_TOOL = Tool(name="any_tool", description=None, input_schema={"type": "object"})


def plan_every_call(calls: Sequence[ToolCall]) -> ToolPlan:
    """A tool policy that leaves every call of a pause to the test's runner."""
    return ToolPlan(invocations=tuple(ToolInvocation(call_part=c, tool=_ANY_TOOL) for c in calls))


def calls_of(invocations: Sequence[ToolInvocation]) -> tuple[ToolCall, ...]:
    """The model's calls behind ``invocations``, in order."""
    return tuple(invocation.call_part for invocation in invocations)


def machine_call(machine: Any, *, session: Any = None, tools: bool = False) -> Operation[Any]:
    """``machine`` (already started by its constructor) as a call, in ``session``'s scope;
    with ``tools``, its pauses planned by ``plan_every_call``."""
    return Operation(
        machine=lambda _now, _data: machine,
        session=session,
        tools=plan_every_call if tools else None,
    )


class AgentOf:
    """The agent side of a session a test built by hand: what ``Connection.reset`` and
    ``start_close`` read (``agent.session``)."""

    def __init__(self, session: Any) -> None:
        self.session = session
