"""The ``coder`` model for Simon Willison's ``llm`` (``docs/integrations/llm.md``).

Installed with the ``llm`` extra, the package registers this module as an ``llm`` plugin, so
``llm -m coder "..."`` and ``llm chat -m coder`` run turns on a Coder agent chat. The
deployment is ``CODER_URL`` (or the ``url`` option); the session token is ``llm``'s key
``coder`` (``llm keys set coder``) or ``CODER_SESSION_TOKEN``.

One ``llm`` conversation is one Coder chat: the first prompt creates it and the chat id and
cursor are kept in the response's ``response_json``, which ``llm`` logs; ``llm -c`` and every
later prompt of ``llm chat`` read them back and continue the same chat. The chat is left in
place (not archived) after each prompt, so that the conversation can go on.

Importing this module imports ``llm``; importing ``coder_io_sync`` does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import llm
from llm.parts import StreamEvent
from pydantic import Field

from coder_io_sync import (
    AgentOptions,
    Attachment,
    CoderAgent,
    GenerateResult,
    ReasoningDelta,
    TextDelta,
    Tool,
    ToolCall,
    ToolResult,
)

__all__ = ["CoderModel", "register_models"]

#: The media types a Coder chat accepts as attachments (docs/agents.md "Files").
ATTACHMENT_TYPES = frozenset(
    {
        "application/pdf",
        "application/json",
        "text/plain",
        "text/markdown",
        "text/csv",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    }
)


class CoderModel(llm.KeyModel):
    """``llm``'s model ``coder``: each prompt is one turn of a Coder agent chat.

    ``-s`` / ``--system`` is the instructions of a new chat; ``-a`` attaches files (the types
    a Coder chat takes); ``-T`` / ``--functions`` tools run as client tools inside the turn;
    ``--schema`` asks for structured output. Options (``-o``) are the agent's settings; a
    conversation's first prompt fixes those that belong to the chat (the model, the
    workspace, the organization, the tools).
    """

    model_id = "coder"
    needs_key = "coder"
    key_env_var = "CODER_SESSION_TOKEN"
    can_stream = True
    supports_tools = True
    supports_schema = True
    attachment_types = ATTACHMENT_TYPES

    class Options(llm.Options):
        url: str | None = Field(
            default=None, description="The Coder deployment's URL (default: CODER_URL)"
        )
        model: str | None = Field(
            default=None,
            description="A model hint: a model-config id, provider:model, a model id or a "
            "display-name substring",
        )
        organization_id: str | None = Field(
            default=None, description="The organization new chats belong to"
        )
        workspace_id: str | None = Field(default=None, description="The chat's workspace")
        reasoning_effort: str | None = Field(default=None, description="The reasoning effort")
        plan_mode: str | None = Field(default=None, description="The plan mode")
        request_timeout: float | None = Field(
            default=None, description="Seconds one model round trip may take"
        )
        timeout: float | None = Field(default=None, description="Seconds the whole prompt may take")
        max_steps: int = Field(
            default=AgentOptions().max_steps, description="Model round trips a prompt may take"
        )

    def __str__(self) -> str:
        return "Coder agent: coder"

    def execute(
        self,
        prompt: llm.Prompt,
        stream: bool,
        response: llm.Response,
        conversation: llm.Conversation | None,
        key: str | None,
    ) -> Iterator[str | StreamEvent]:
        """Run the prompt as one turn of the conversation's Coder chat, yielding its text
        (and its reasoning and tool calls as ``llm`` stream events); the chat id, cursor,
        finish reason and usage are recorded on ``response``."""
        options = cast("CoderModel.Options", prompt.options)
        # Only llm's own tools: llm refuses server-side tools a model does not declare.
        tools = cast("list[llm.Tool]", prompt.tools)
        content: list[Any] = [prompt.prompt] if prompt.prompt else []
        content += [_coder_attachment(attachment) for attachment in prompt.attachments]
        chat_id, last_seen = _session(prompt)
        agent = CoderAgent(
            base_url=options.url,
            token=key,
            organization_id=options.organization_id,
            model=options.model,
            instructions=prompt.system or None,
            tools=[_coder_tool(tool) for tool in tools],
            output_type=prompt.schema,
            request_timeout=options.request_timeout,
            chat_id=chat_id,
            last_seen_message_id=last_seen,
            workspace_id=options.workspace_id,
            reasoning_effort=options.reasoning_effort,
            plan_mode=options.plan_mode,
            max_steps=options.max_steps,
        )
        try:
            if prompt.schema is not None:
                result = agent.generate(content, timeout=options.timeout)
                yield json.dumps(result.output)
            else:
                with agent.stream(content, timeout=options.timeout) as turn:
                    for part in turn:
                        yield from _events(part)
                    result = turn.get_final_result()
        finally:
            chat_id, last_seen = agent.chat_id, agent.last_seen_message_id
            agent.close(archive=False)
            _record(response, chat_id, last_seen)
        _finish(response, result)
        # A part with no text whose metadata keeps the chat for the conversation's next prompt.
        keep = {"chat_id": result.chat_id, "last_seen_message_id": result.last_seen_message_id}
        yield StreamEvent(type="reasoning", chunk="", provider_metadata={"coder": keep})


def _session(prompt: llm.Prompt) -> tuple[str | None, int | None]:
    """The Coder chat id and cursor the conversation's newest answer carries, if any.

    ``prompt.messages`` is the whole conversation as ``llm`` replays it, from its log on
    ``llm -c`` and from memory in ``llm chat``; each answer carries its chat in a part's
    ``provider_metadata``."""
    for message in reversed(prompt.messages):
        for part in reversed(message.parts):
            coder = (getattr(part, "provider_metadata", None) or {}).get("coder")
            if isinstance(coder, dict) and isinstance(coder.get("chat_id"), str):
                last_seen = coder.get("last_seen_message_id")
                return coder["chat_id"], last_seen if isinstance(last_seen, int) else None
    return None, None


def _record(response: llm.Response, chat_id: str | None, last_seen: int | None) -> None:
    coder = {"chat_id": chat_id, "last_seen_message_id": last_seen}
    response.response_json = {**(response.response_json or {}), "coder": coder}


def _finish(response: llm.Response, result: GenerateResult) -> None:
    coder = response.response_json["coder"]  # type: ignore[index]
    coder["finish_reason"] = result.finish_reason
    coder["steps"] = len(result.steps)
    usage = result.usage
    details = {
        name: value
        for name, value in (
            ("cache_read_tokens", usage.cache_read_tokens),
            ("cache_write_tokens", usage.cache_write_tokens),
            ("reasoning_tokens", usage.reasoning_tokens),
        )
        if value
    }
    response.set_usage(
        input=usage.input_tokens, output=usage.output_tokens, details=details or None
    )


def _events(part: object) -> list[str | StreamEvent]:
    """An output part as what ``llm`` streams: text as text, reasoning as a reasoning event,
    tool calls and results as events of calls already executed (the agent ran them)."""
    if isinstance(part, TextDelta):
        return [part.delta]
    if isinstance(part, ReasoningDelta):
        return [StreamEvent(type="reasoning", chunk=part.delta)]
    if isinstance(part, ToolCall):
        return [
            StreamEvent(
                type=kind, chunk=chunk, tool_call_id=part.tool_call_id, server_executed=True
            )
            for kind, chunk in (("tool_call_name", part.tool_name), ("tool_call_args", part.input))
        ]
    if isinstance(part, ToolResult):
        output = part.result if isinstance(part.result, str) else json.dumps(part.result)
        return [
            StreamEvent(
                type="tool_result",
                chunk=output,
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                server_executed=True,
            )
        ]
    return []


def _coder_tool(tool: llm.Tool) -> Tool:
    """An ``llm`` tool as a Coder client tool calling the same implementation."""
    schema = tool.input_schema or {"type": "object", "properties": {}}
    return Tool.from_schema(tool.name, schema, tool.implementation, description=tool.description)


def _coder_attachment(attachment: llm.Attachment) -> Attachment:
    name = attachment.path.rsplit("/", 1)[-1] if attachment.path else None
    return Attachment(
        content=attachment.content_bytes(),  # type: ignore[no-untyped-call]
        media_type=attachment.resolve_type(),  # type: ignore[no-untyped-call]
        filename=name,
    )


@llm.hookimpl
def register_models(register: Any) -> None:
    """``llm``'s plugin hook: registers the ``coder`` model."""
    register(CoderModel())
