"""pydantic-ai on a Coder chat: ``CoderModel`` is a pydantic-ai ``Model`` whose requests are
model round trips of one Coder chat (docs/integrations/pydantic-ai.md).

pydantic-ai runs the tool loop: each request is one ``CoderAgent.segment``. The tools and
output tools of the request are registered with the chat as client tools; when the model calls
them the chat pauses and the response carries the calls, which pydantic-ai runs and answers in
its next request, whose tool returns resume the paused run. Only the newest user prompt of a
request travels: the chat keeps the conversation. Importing this module imports pydantic-ai
(the ``pydantic-ai`` extra).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai import messages as pai
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_jsonable_python

from coder_io_asyncio import (
    AgentOptions,
    CoderAgent,
    CoderAgentError,
    FileContent,
    GenerateResult,
    ReasoningDelta,
    SystemMessage,
    TextContent,
    TextDelta,
    Tool,
    ToolCall,
    ToolMessage,
    ToolResult,
    ToolResultContent,
    UserMessage,
)

__all__ = ["CoderModel", "CoderStreamedResponse"]

#: ``GenerateResult.finish_reason`` as pydantic-ai's ``FinishReason``.
_FINISH_REASONS: Mapping[str, pai.FinishReason] = {
    "stop": "stop",
    "tool-calls": "tool_call",
    "length": "length",
    "content-filter": "content_filter",
    "error": "error",
}
#: The tool return outcomes the chat sees as error results.
_ERROR_OUTCOMES = frozenset({"failed", "retried", "denied", "interrupted"})
#: The answer a paused call gets when the next request carries no return for it.
_NOT_ANSWERED = "The tool call was not answered."


class CoderModel(Model):
    """A pydantic-ai ``Model`` backed by one Coder chat.

    ``Agent(model=CoderModel(...), tools=[...], output_type=...)`` runs pydantic-ai's agent
    loop on a Coder agent: every request is one model round trip of the chat
    (``CoderAgent.segment``), the function and output tools are the chat's client tools, and
    pydantic-ai runs them. The keywords are ``CoderAgent``'s (``client``, ``base_url``,
    ``token``, ``organization_id``, ``model``, ``instructions``, ``request_timeout`` ...,
    or ``options``); ``tools`` and ``output_type`` come from pydantic-ai's agent instead.
    ``model_name`` is the name pydantic-ai reports (default: the Coder model hint, else
    ``"coder"``); ``settings`` and ``profile`` are pydantic-ai's.

    One model is one conversation: a request whose history holds no earlier response starts a
    fresh chat, later requests continue it. The chat's id is ``chat_id`` here and
    ``provider_details["chat_id"]`` on every response. The chat's tools are fixed when it is
    created, so a request that brings other tools to a running conversation raises
    ``CoderAgentError``. Close the model with ``aclose()`` (or ``async with``): it archives
    the chat unless ``archive=False``.
    """

    def __init__(
        self,
        *,
        model_name: str | None = None,
        settings: ModelSettings | None = None,
        profile: Any = None,
        **agent_kwargs: Any,
    ) -> None:
        super().__init__(settings=settings, profile=profile)
        for key in ("tools", "output_type"):
            if key in agent_kwargs:
                raise CoderAgentError(f"{key} come from the pydantic-ai agent, not CoderModel")
        options = agent_kwargs.get("options")
        hint = agent_kwargs.get("model") or (
            options.model if isinstance(options, AgentOptions) else None
        )
        self._model_name = model_name or hint or "coder"
        self._agent_kwargs = agent_kwargs
        self._agent: CoderAgent | None = None
        self._retired: list[CoderAgent] = []
        self._tool_names: tuple[str, ...] | None = None
        self._pending: dict[str, str] = {}

    # -- pydantic-ai's Model ---------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """The model name pydantic-ai reports."""
        return self._model_name

    @property
    def system(self) -> str:
        """The provider pydantic-ai reports: ``"coder"``."""
        return "coder"

    @property
    def chat_id(self) -> str | None:
        """The Coder chat of the conversation, once its first request created it."""
        return None if self._agent is None else self._agent.chat_id

    async def request(
        self,
        messages: list[pai.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> pai.ModelResponse:
        """One model round trip of the chat, read to its end."""
        async with self.request_stream(
            messages, model_settings, model_request_parameters
        ) as streamed:
            async for _event in streamed:
                pass
        return streamed.get()

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[pai.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """One model round trip of the chat, streamed: text, reasoning and the server's tools
        as they arrive; the client tool calls it pauses on at the end. Leaving the block
        before the end interrupts the run on the server."""
        model_settings, params = self.prepare_request(model_settings, model_request_parameters)
        agent = self._agent_for(messages, params)
        resume, prompt = self._plan(messages)
        if resume is not None:
            # The chat is paused on calls a user prompt now follows (pydantic-ai ended the
            # run on its output tool): answer them first, then send the prompt.
            async with agent.segment(messages=[resume]) as wind_down:
                settled = await wind_down.get_final_result()
            if settled.finish_reason == "tool-calls":
                # The model called tools again while winding down: nobody will run them, and a
                # paused chat would hold the prompt in its queue. Stop the run first.
                await agent.interrupt(wait=True)
        async with agent.segment(messages=prompt) as segment:
            streamed = CoderStreamedResponse(
                model_request_parameters=params,
                _model_name=self._model_name,
                _parts=segment,
                _model=self,
            )
            yield streamed

    # -- the chat --------------------------------------------------------------------------

    def _agent_for(
        self, messages: Sequence[pai.ModelMessage], params: ModelRequestParameters
    ) -> CoderAgent:
        definitions = [*params.function_tools, *params.output_tools]
        names = tuple(sorted(d.name for d in definitions))
        fresh = not any(isinstance(m, pai.ModelResponse) for m in messages)
        agent = self._agent
        if agent is not None and names != self._tool_names:
            if not fresh and agent.chat_id is not None:
                raise CoderAgentError(
                    "a Coder chat's tools are fixed when it is created: this request brings "
                    f"{list(names)} to a chat created with {list(self._tool_names or ())}"
                )
            agent = None
        if agent is None:
            if self._agent is not None:
                self._retired.append(self._agent)
            agent = CoderAgent(**self._agent_kwargs, tools=[_coder_tool(d) for d in definitions])
            self._agent = agent
            self._tool_names = names
            self._pending = {}
        elif fresh and agent.chat_id is not None:
            agent.reset_session()
            self._pending = {}
        return agent

    def _plan(self, messages: Sequence[pai.ModelMessage]) -> tuple[ToolMessage | None, list[Any]]:
        """The segment's prompt: the last request's tool returns for the paused calls (a
        resume), or its user prompt (a new message), with the system prompts and
        instructions that a chat's creation sends."""
        if not messages or not isinstance(messages[-1], pai.ModelRequest):
            raise CoderAgentError("a request's history must end with a pydantic-ai ModelRequest")
        last = messages[-1]
        system = [
            SystemMessage(part.content)
            for m in messages
            if isinstance(m, pai.ModelRequest)
            for part in m.parts
            if isinstance(part, pai.SystemPromptPart) and part.content
        ]
        if last.instructions:
            system.append(SystemMessage(last.instructions))
        answers: dict[str, ToolResultContent] = {}
        content: list[Any] = []
        for part in last.parts:
            if isinstance(part, pai.ToolReturnPart) and part.tool_call_id in self._pending:
                answers[part.tool_call_id] = ToolResultContent(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    output=to_jsonable_python(part.content, fallback=str),
                    is_error=part.outcome in _ERROR_OUTCOMES,
                )
            elif isinstance(part, pai.UserPromptPart):
                content.extend(_user_content(part.content))
        resume: ToolMessage | None = None
        if self._pending:
            results = tuple(
                answers.get(call_id)
                or ToolResultContent(
                    tool_call_id=call_id, tool_name=name, output=_NOT_ANSWERED, is_error=True
                )
                for call_id, name in self._pending.items()
            )
            self._pending = {}
            resume = ToolMessage(results)
            if not content:
                return None, [*system, resume]
        if not content:
            raise CoderAgentError(
                "nothing to send: the request holds no user prompt and no tool returns for "
                "the calls the chat waits on"
            )
        return resume, [*system, UserMessage(tuple(content))]

    def _settled(self, result: GenerateResult) -> None:
        if result.finish_reason == "tool-calls":
            self._pending = {c.tool_call_id: c.tool_name for c in result.tool_calls}

    async def aclose(self, *, archive: bool = True) -> None:
        """Close the chat's agent (``CoderAgent.aclose``): archive the chat unless
        ``archive=False``, which leaves it to be continued from ``chat_id``."""
        agents = [*self._retired, *([self._agent] if self._agent is not None else [])]
        self._retired.clear()
        self._agent = None
        for agent in agents:
            await agent.aclose(archive=archive)

    async def __aenter__(self) -> CoderModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@dataclass
class CoderStreamedResponse(StreamedResponse):
    """One Coder model round trip as pydantic-ai's ``StreamedResponse``: text and reasoning
    deltas, the server's own tools as native tool calls and returns, and the client tool
    calls; usage, finish reason and the chat id (``provider_details``) once it ends."""

    _model_name: str = ""
    _parts: Any = None
    _model: Any = None
    _timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))

    async def _get_event_iterator(self) -> AsyncIterator[pai.ModelResponseStreamEvent]:
        manager = self._parts_manager
        async for part in self._parts:
            if isinstance(part, TextDelta):
                for event in manager.handle_text_delta(vendor_part_id=part.id, content=part.delta):
                    yield event
            elif isinstance(part, ReasoningDelta):
                for event in manager.handle_thinking_delta(
                    vendor_part_id=part.id, content=part.delta, provider_name="coder"
                ):
                    yield event
            elif isinstance(part, ToolCall):
                if part.provider_executed:
                    yield manager.handle_part(
                        vendor_part_id=part.tool_call_id,
                        part=pai.NativeToolCallPart(
                            tool_name=part.tool_name,
                            args=part.input,
                            tool_call_id=part.tool_call_id,
                            provider_name="coder",
                        ),
                    )
                else:
                    event = manager.handle_tool_call_part(
                        vendor_part_id=part.tool_call_id,
                        tool_name=part.tool_name,
                        args=part.input,
                        tool_call_id=part.tool_call_id,
                    )
                    yield event
            elif isinstance(part, ToolResult):
                yield manager.handle_part(
                    vendor_part_id=f"{part.tool_call_id}:result",
                    part=pai.NativeToolReturnPart(
                        tool_name=part.tool_name,
                        content=part.result,
                        tool_call_id=part.tool_call_id,
                        provider_name="coder",
                    ),
                )
        result = await self._parts.get_final_result()
        if result.error is not None:
            raise result.error
        usage = result.usage
        self._usage = RequestUsage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_read_tokens=usage.cache_read_tokens or 0,
            cache_write_tokens=usage.cache_write_tokens or 0,
        )
        self.finish_reason = _FINISH_REASONS.get(result.finish_reason)
        self.provider_details = {
            "chat_id": result.chat_id,
            "last_seen_message_id": result.last_seen_message_id,
            "finish_reason": result.finish_reason,
        }
        self._model._settled(result)

    @property
    def model_name(self) -> str:
        """The model name pydantic-ai reports."""
        return self._model_name

    @property
    def provider_name(self) -> str:
        """``"coder"``."""
        return "coder"

    @property
    def provider_url(self) -> str | None:
        """Not reported."""
        return None

    @property
    def timestamp(self) -> datetime:
        """When the round trip started."""
        return self._timestamp


def _coder_tool(definition: ToolDefinition) -> Tool:
    return Tool.from_schema(
        definition.name,
        dict(definition.parameters_json_schema),
        # A segment hands the calls back: the chat's tools are never run here.
        lambda _input: None,
        description=definition.description or "",
        kwargs=False,
    )


def _user_content(content: str | Sequence[Any]) -> list[Any]:
    if isinstance(content, str):
        return [TextContent(content)]
    out: list[Any] = []
    for item in content:
        if isinstance(item, str):
            out.append(TextContent(item))
        elif isinstance(item, pai.BinaryContent):
            out.append(FileContent(data=item.data, media_type=item.media_type))
        else:
            raise CoderAgentError(
                f"a Coder chat takes text and file bytes in a prompt, not {type(item).__name__}"
            )
    return out
