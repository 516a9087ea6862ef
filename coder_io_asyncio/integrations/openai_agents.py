"""A Coder chat as a model of the OpenAI Agents SDK (``openai-agents``, imported as ``agents``).

``CoderModel`` implements the SDK's ``Model``: each ``get_response`` / ``stream_response`` is
one model round trip on one Coder chat (``CoderAgent.segment``), so the SDK's own ``Runner``
drives the loop. A round trip ends when the run settles or pauses for client tools; the
pause's calls go back to the SDK as function calls, the SDK runs its function tools, and the
next call, whose input ends in their outputs, submits them and resumes the run. Only what is
new travels: the server keeps the history, so a new turn sends the last user message and a
resume the trailing tool outputs. ``CoderModelProvider`` gives a ``Runner`` one such model per
model name. The mapping and what does not map: docs/integrations/openai-agents.md.

Installing the ``openai-agents`` extra provides the SDK; this module imports it when it is
imported itself.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs
from agents import (
    AgentsException,
    FunctionTool,
    Handoff,
    Model,
    ModelProvider,
    ModelSettings,
    ModelTracing,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.usage import Usage as AgentsUsage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from coder_proto import (
    AgentOptions,
    CoderAgentError,
    SystemMessage,
    TextContent,
    TextDelta,
    Tool,
    ToolMessage,
    ToolResultContent,
    Usage,
    UserMessage,
)

from ..agent import CoderAgent
from ..client import CoderChatClient

__all__ = ["CoderModel", "CoderModelProvider"]

#: The id of the one assistant message a round trip's text becomes.
_MESSAGE_ID = "msg_coder"
#: The client tool an agent with an output type files its answer through.
OUTPUT_TOOL = "structured_output"
#: Rounds of rejected filings in a row one model call answers before it gives up.
MAX_REJECTED_FILINGS = 3
_OUTPUT_DESCRIPTION = "File the final answer. Its input is the answer, in the requested shape."
_OUTPUT_INSTRUCTIONS = (
    f"When you have the final answer, call the `{OUTPUT_TOOL}` tool with it as the input, "
    "then end your turn with one short sentence."
)
_ACKNOWLEDGEMENT = "Answer recorded. End your turn now with one short sentence; call no more tools."


@attrs.frozen
class _Done:
    """The end of one model call: its output items, summed usage, steps and chat id."""

    output: list[ResponseOutputItem]
    usage: Usage
    requests: int
    chat_id: str | None


class CoderModel(Model):
    """An OpenAI Agents SDK ``Model`` backed by one Coder chat.

    ``model`` is the Coder model hint (the deployment's default when ``None``). The chat is
    created by the first call, with the agent's instructions and its function tools (and
    handoffs) as client tools; later calls continue it, across ``Runner`` runs too, until
    ``aclose``. ``client`` (a ``CoderChatClient``, never closed here), ``options`` (an
    ``AgentOptions``), ``chat_id`` / ``last_seen_message_id`` (continue an existing chat)
    and any other ``CoderAgent`` keyword configure the chat, as for ``CoderAgent``.
    ``instructions`` and ``tools`` come from the SDK's agent instead. An agent's
    ``output_type`` is filed through a ``structured_output`` client tool that this model
    answers itself. ``chat_id`` and ``last_seen_message_id`` tell where the conversation is.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        client: CoderChatClient | None = None,
        options: AgentOptions | None = None,
        **agent_kwargs: Any,
    ) -> None:
        for key in ("instructions", "tools", "output_type"):
            if key in agent_kwargs:
                raise CoderAgentError(
                    f"{key}= comes from the OpenAI Agents SDK's agent, not from CoderModel"
                )
        self.model = model
        self._client = client
        self._options = options
        self._agent_kwargs = agent_kwargs
        self._agent: CoderAgent | None = None
        self._ids = itertools.count(1)
        #: Answers to the filings of a pause whose other calls the SDK runs (submitted with
        #: their results), and the newest valid filing of the turn.
        self._held: list[ToolResultContent] = []
        self._filed: str | None = None

    def __repr__(self) -> str:
        return f"<CoderModel model={self.model!r} chat_id={self.chat_id!r}>"

    @property
    def chat_id(self) -> str | None:
        """The Coder chat's id, once the first call created it (or the one given)."""
        if self._agent is None:
            return self._agent_kwargs.get("chat_id")
        return self._agent.chat_id

    @property
    def last_seen_message_id(self) -> int | None:
        """The chat's resume cursor, to continue it later with ``last_seen_message_id=``."""
        if self._agent is None:
            return self._agent_kwargs.get("last_seen_message_id")
        return self._agent.last_seen_message_id

    async def __aenter__(self) -> CoderModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self, *, archive: bool = True) -> None:
        """Dispose of the chat as ``CoderAgent.aclose`` does: interrupted and archived, or,
        with ``archive=False``, left to be continued from ``chat_id``."""
        if self._agent is not None:
            await self._agent.aclose(archive=archive)

    async def close(self) -> None:
        """The SDK's ``Model.close``: ``aclose()``."""
        await self.aclose()

    # -- the SDK's Model ----------------------------------------------------------------------

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        """One round trip: the model's text, and the function calls of a pause."""
        trips = self._round_trips(system_instructions, input, tools, handoffs, output_schema)
        done = [item async for item in trips][-1]
        assert isinstance(done, _Done)
        return ModelResponse(
            output=done.output,
            usage=_agents_usage(done.usage, done.requests),
            response_id=done.chat_id,
        )

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """One round trip as Responses stream events: ``response.created``, a
        ``response.output_text.delta`` per text delta (with an output type, one delta of
        the filed answer), then ``response.completed`` with the whole output and usage.
        Closing the stream early interrupts the run."""
        numbers = itertools.count()
        yield ResponseCreatedEvent(
            response=self._response([], None, self.chat_id),
            type="response.created",
            sequence_number=next(numbers),
        )
        trips = self._round_trips(
            system_instructions, input, tools, handoffs, output_schema, live=True
        )
        async for item in trips:
            if isinstance(item, str):
                yield ResponseTextDeltaEvent(
                    content_index=0,
                    delta=item,
                    item_id=_MESSAGE_ID,
                    logprobs=[],
                    output_index=0,
                    type="response.output_text.delta",
                    sequence_number=next(numbers),
                )
            else:
                yield ResponseCompletedEvent(
                    response=self._response(item.output, item.usage, item.chat_id),
                    type="response.completed",
                    sequence_number=next(numbers),
                )

    # -- the round trips ----------------------------------------------------------------------

    async def _round_trips(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        tools: Sequence[Any],
        handoffs: Sequence[Handoff[Any, Any]],
        output_schema: AgentOutputSchemaBase | None,
        *,
        live: bool = False,
    ) -> AsyncIterator[str | _Done]:
        """The steps of one model call: the text deltas (when ``live``), then a ``_Done``.
        With an output type, the answer is filed through the ``structured_output`` tool and
        answered here (docs/agents.md "Structured output", rules 1 and 2): a pause of filings
        only is answered at once and the run goes on; the other calls of a pause go to the
        SDK, the filings' answers wait to be submitted with their results (D5). The newest
        valid filing is the call's text once the run settles. After ``MAX_REJECTED_FILINGS``
        rounds of rejected filings in a row the run is interrupted and ``CoderAgentError``
        raised."""
        schema = output_schema if output_schema and not output_schema.is_plain_text() else None
        agent = self._agent_for(system_instructions, tools, handoffs, schema)
        messages = self._messages(system_instructions, input, schema)
        usage = Usage()
        requests = rejected = 0
        while True:
            async with agent.segment(messages=messages) as step:
                async for part in step:
                    if live and schema is None and isinstance(part, TextDelta) and part.delta:
                        yield part.delta
                result = await step.get_final_result()
            usage += result.usage
            requests += 1
            calls = [call for call in result.tool_calls if not call.provider_executed]
            filings: list[Any] = []
            answers: list[ToolResultContent] = []
            if schema is not None:
                filings = [call for call in calls if call.tool_name == OUTPUT_TOOL]
                answers = [self._answer(schema, call) for call in filings]
            others = [call for call in calls if call not in filings]
            if filings and not others:
                if all(answer.is_error for answer in answers):
                    rejected += 1
                    if rejected > MAX_REJECTED_FILINGS:
                        # Never leave the chat paused on a filing (rule 4).
                        await agent.interrupt()
                        raise CoderAgentError(
                            f"the model filed {rejected} answers in a row that do not match "
                            f"the output type; the run was interrupted ({answers[0].output})"
                        )
                messages = [ToolMessage(tuple(answers))]
                continue
            self._held = answers
            text = result.text
            if not calls and self._filed is not None:
                text, self._filed = self._filed, None
            if live and schema is not None and text:
                yield text
            output = self._output(result.reasoning, text, others)
            yield _Done(output, usage, requests, result.chat_id)
            return

    def _answer(self, schema: AgentOutputSchemaBase, call: Any) -> ToolResultContent:
        try:
            schema.validate_json(call.input)
        except AgentsException as exc:
            return ToolResultContent(
                tool_call_id=call.tool_call_id,
                output=f"The answer does not match the schema: {exc}. Call {OUTPUT_TOOL} "
                "again with a corrected answer.",
                is_error=True,
            )
        self._filed = call.input
        return ToolResultContent(tool_call_id=call.tool_call_id, output=_ACKNOWLEDGEMENT)

    def _messages(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        schema: AgentOutputSchemaBase | None,
    ) -> list[object]:
        """The part of the SDK's input that is new to the chat: trailing function call outputs
        (a resume, with the held answers of the pause's filings), else the last user message
        (a new turn). Anything else leaves no prompt, which the agent refuses."""
        messages: list[object] = []
        if system_instructions:
            messages.append(SystemMessage(system_instructions))
        if schema is not None:
            messages.append(SystemMessage(_OUTPUT_INSTRUCTIONS))
        held, self._held = self._held, []
        if isinstance(input, str):
            self._filed = None
            return [*messages, UserMessage((TextContent(input),))]
        items = [_as_dict(item) for item in input]
        results: list[ToolResultContent] = []
        while items and items[-1].get("type") == "function_call_output":
            item = items.pop()
            results.insert(
                0, ToolResultContent(tool_call_id=item["call_id"], output=item["output"])
            )
        if results:
            return [*messages, ToolMessage((*held, *results))]
        self._filed = None
        if items and items[-1].get("role") == "user":
            return [*messages, UserMessage(_user_content(items[-1]["content"]))]
        return messages

    # -- mapping ------------------------------------------------------------------------------

    def _agent_for(
        self,
        system_instructions: str | None,
        tools: Sequence[Any],
        handoffs: Sequence[Handoff[Any, Any]],
        schema: AgentOutputSchemaBase | None,
    ) -> CoderAgent:
        if self._agent is None:
            client_tools = [_client_tool(t) for t in tools]
            client_tools += [
                Tool.from_schema(h.tool_name, h.input_json_schema, description=h.tool_description)
                for h in handoffs
            ]
            if schema is not None:
                client_tools.append(
                    Tool.from_schema(
                        OUTPUT_TOOL, schema.json_schema(), description=_OUTPUT_DESCRIPTION
                    )
                )
            kwargs = dict(self._agent_kwargs)
            if self.model is not None:
                # Only a name given overrides the options' model (None would clear it).
                kwargs["model"] = self.model
            self._agent = CoderAgent(
                client=self._client, options=self._options, tools=client_tools, **kwargs
            )
        return self._agent

    def _output(self, reasoning: str, text: str, calls: Sequence[Any]) -> list[ResponseOutputItem]:
        turn = next(self._ids)
        output: list[ResponseOutputItem] = []
        if reasoning:
            output.append(
                ResponseReasoningItem(
                    id=f"rs_coder_{turn}",
                    summary=[Summary(text=reasoning, type="summary_text")],
                    type="reasoning",
                )
            )
        if text:
            output.append(
                ResponseOutputMessage(
                    id=_MESSAGE_ID,
                    content=[ResponseOutputText(text=text, annotations=[], type="output_text")],
                    role="assistant",
                    status="completed",
                    type="message",
                )
            )
        output.extend(
            ResponseFunctionToolCall(
                arguments=call.input,
                call_id=call.tool_call_id,
                name=call.tool_name,
                type="function_call",
                id=f"fc_{call.tool_call_id}",
                status="completed",
            )
            for call in calls
        )
        return output

    def _response(
        self, output: list[ResponseOutputItem], usage: Usage | None, chat_id: str | None
    ) -> Response:
        return Response(
            id=chat_id or "",
            created_at=time.time(),
            model=self.model or "coder",
            object="response",
            output=output,
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
            usage=None if usage is None else _response_usage(usage),
        )


class CoderModelProvider(ModelProvider):
    """An OpenAI Agents SDK ``ModelProvider`` of ``CoderModel``: one model, and so one Coder
    chat, per model name (``None`` is the deployment's default model), kept until
    ``aclose``. Pass it as ``RunConfig(model_provider=...)``; the keywords are
    ``CoderModel``'s, shared by every model it makes."""

    def __init__(
        self,
        *,
        client: CoderChatClient | None = None,
        options: AgentOptions | None = None,
        **agent_kwargs: Any,
    ) -> None:
        self._kwargs: dict[str, Any] = {"client": client, "options": options, **agent_kwargs}
        self._models: dict[str | None, CoderModel] = {}

    def get_model(self, model_name: str | None) -> CoderModel:
        """The model of that name, made on the first request for it."""
        model = self._models.get(model_name)
        if model is None:
            model = self._models[model_name] = CoderModel(model_name, **self._kwargs)
        return model

    async def aclose(self) -> None:
        """Close every model made (their chats are archived)."""
        for model in self._models.values():
            await model.aclose()


# -- input and usage -----------------------------------------------------------------------------


def _client_tool(tool: Any) -> Tool:
    if not isinstance(tool, FunctionTool):
        raise CoderAgentError(
            f"CoderModel runs function tools only, not a {type(tool).__name__}: Coder's own "
            "tools (web search, files, shell, MCP) run on the server"
        )
    return Tool.from_schema(tool.name, tool.params_json_schema, description=tool.description)


def _as_dict(item: Any) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    dumped: Mapping[str, Any] = item.model_dump(exclude_unset=True)
    return dumped


def _user_content(content: Any) -> tuple[TextContent, ...]:
    if isinstance(content, str):
        return (TextContent(content),)
    parts = []
    for part in content:
        if part.get("type") != "input_text":
            raise CoderAgentError(
                f"CoderModel sends text only; a user message part of type {part.get('type')!r} "
                "cannot be sent"
            )
        parts.append(TextContent(part["text"]))
    return tuple(parts)


def _agents_usage(usage: Usage, requests: int) -> AgentsUsage:
    counts = _response_usage(usage)
    return AgentsUsage(
        requests=requests,
        input_tokens=counts.input_tokens,
        output_tokens=counts.output_tokens,
        total_tokens=counts.total_tokens,
        input_tokens_details=counts.input_tokens_details,
        output_tokens_details=counts.output_tokens_details,
    )


def _response_usage(usage: Usage) -> ResponseUsage:
    """The Responses API's usage: cache reads are its cached tokens, cache writes its
    ``cache_write_tokens``; an unknown count is 0."""
    return ResponseUsage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        total_tokens=usage.total_tokens or 0,
        input_tokens_details=InputTokensDetails(
            cached_tokens=usage.cache_read_tokens or 0,
            cache_write_tokens=usage.cache_write_tokens or 0,
        ),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens or 0),
    )
