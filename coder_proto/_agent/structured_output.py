"""The ``structured_output`` tool pattern (docs/agents.md "Structured output", rules 1-3):
the tool whose input schema is the answer's schema, the acknowledgement of a valid filing
(rule 1), the validation error an invalid one gets (so the model retries in the loop, rule 2),
the search for the newest valid filing across a turn's steps, and the one nudge an idle chat
gets (rule 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._actions import ToolOutcome
from .._errors import CoderAgentError
from .._outputs import ToolCall
from .tools import Tool, ToolInputError, _is_model_type, json_schema_for
from .turn import TurnResult

__all__ = [
    "NUDGE_PROMPT",
    "STRUCTURED_OUTPUT_ACK",
    "STRUCTURED_OUTPUT_INSTRUCTIONS",
    "STRUCTURED_OUTPUT_TOOL",
    "StructuredOutput",
    "StructuredOutputError",
]


#: The structured-output tool's name (docs/agents.md "Structured output").
STRUCTURED_OUTPUT_TOOL: Final = "structured_output"
_STRUCTURED_OUTPUT_DESCRIPTION: Final = (
    "Submit your final structured answer as JSON. Call this exactly once, when your work is "
    "complete."
)
#: The result the structured-output tool answers a valid filing with: an acknowledgement, so
#: the model ends its turn naturally instead of the loop stopping on the call (docs/agents.md
#: rule 1).
STRUCTURED_OUTPUT_ACK: Final = (
    "Output received. Wind down and end your turn. Do not call structured_output again."
)
#: Appended to the agent's instructions when it has an ``output_type``.
STRUCTURED_OUTPUT_INSTRUCTIONS: Final = (
    "Submit your final answer by calling the structured_output tool exactly once."
)
#: The one re-prompt sent to an idle chat whose turn ended without a valid filing
#: (docs/agents.md rule 3).
NUDGE_PROMPT: Final = (
    "Call the structured_output tool now with your final answer, matching its input schema "
    "exactly. Do not answer in prose."
)
#: The property a non-object structured output is wrapped in (tool inputs are objects).
_WRAPPED_VALUE: Final = "value"


class StructuredOutputError(CoderAgentError):
    """The turn ended without a valid ``structured_output`` filing, after the one nudge an idle
    chat gets (docs/agents.md "Structured output", rules 2 and 3). ``problems`` are the
    validation problems of the newest invalid filing (empty when the model filed nothing);
    ``result`` is the call's result, for inspection."""

    def __init__(
        self,
        message: str,
        *,
        chat_id: str | None = None,
        problems: Sequence[str] = (),
        result: TurnResult | None = None,
    ) -> None:
        super().__init__(message, chat_id=chat_id)
        self.problems = tuple(problems)
        self.result = result

    def _state(self) -> dict[str, Any]:
        return {"chat_id": self.chat_id, "problems": self.problems}


class StructuredOutput:
    """The ``structured_output`` tool pattern (docs/agents.md "Structured output"), as data and
    decisions:

    * ``tool`` is the client tool whose input schema is the answer's schema: an attrs class,
      a dataclass or a pydantic model (the answer is an instance), any other type
      ``coder_proto._agent.tools`` can describe (a non-object type is wrapped as ``{"value": ...}``
      and unwrapped again), or an explicit JSON Schema mapping (the answer is the validated
      JSON value);
    * ``answer`` acknowledges a valid filing in the tool loop, and answers an invalid one with
      its validation problems as an error result so the model retries (rule 2);
    * ``find`` scans every step's calls from the newest back and returns the first filing that
      validates: a schema-invalid re-filing never shadows a valid answer (rule 2).
    """

    name: str = STRUCTURED_OUTPUT_TOOL

    def __init__(self, output_type: Any, *, description: str | None = None) -> None:
        self.output_type = output_type
        desc = description or _STRUCTURED_OUTPUT_DESCRIPTION
        #: True when the answer travels as ``{"value": ...}`` (any type but a model class).
        self.wrapped = False
        if isinstance(output_type, Mapping):
            self.tool = Tool.from_schema(self.name, output_type, description=desc, kwargs=False)
        elif _is_model_type(output_type):
            self.tool = Tool.from_model(output_type, name=self.name, description=desc)
        else:
            self.wrapped = True
            try:
                json_schema_for(output_type)
            except CoderAgentError as exc:
                raise CoderAgentError(
                    f"output_type: {exc}; pass an attrs class, a dataclass, a pydantic model "
                    "or a JSON Schema dict as output_type"
                ) from None

            # Only the signature matters: ``answer`` acknowledges filings in the core.
            def structured_output(value: Any) -> None: ...

            structured_output.__annotations__ = {"value": output_type, "return": None}
            self.tool = Tool.from_function(structured_output, name=self.name, description=desc)

    def __repr__(self) -> str:
        return f"StructuredOutput({self.output_type!r})"

    def parse(self, call: ToolCall) -> Any:
        """The validated answer a filing carries; raises ``ToolInputError``."""
        value = self.tool.parse_input(call.input)
        return value[_WRAPPED_VALUE] if self.wrapped else value

    def answer(self, call: ToolCall) -> ToolOutcome:
        """The tool loop's result for a filing (the acknowledgement, or the validation error)."""
        try:
            self.parse(call)
        except ToolInputError as exc:
            return ToolOutcome(tool_call_id=call.tool_call_id, output=str(exc), is_error=True)
        return ToolOutcome(tool_call_id=call.tool_call_id, output=STRUCTURED_OUTPUT_ACK)

    def find(self, result: TurnResult) -> tuple[bool, Any, tuple[str, ...]]:
        """``(found, answer, problems)``: the newest valid filing across all steps
        (docs/agents.md rule 2);
        ``problems`` describe the newest invalid one when none validates."""
        problems: tuple[str, ...] = ()
        for step in reversed(result.steps):
            for call in reversed(step.tool_calls):
                if call.tool_name != self.name or call.provider_executed:
                    continue
                try:
                    return True, self.parse(call), ()
                except ToolInputError as exc:
                    if not problems:
                        problems = (str(exc),)
        return False, None, problems
