"""LangChain on a Coder agent: ``ChatCoder``, a LangChain chat model backed by Coder chats
(``docs/integrations/langchain.md``).

Each call is one model round trip of a Coder chat (``CoderAgent.segment``): the server runs its
own tools, and a call to a tool bound with ``bind_tools`` ends the step with the call in
``AIMessage.tool_calls`` while the chat waits for the result. The next call, whose messages end
in the ``ToolMessage`` results, submits them and the run goes on. A conversation keeps its
chat: every answer carries the chat id in ``response_metadata["coder_chat_id"]``, and a call
whose history holds one continues that chat, sending only the messages after it.

All Coder I/O of one ``ChatCoder`` runs on an event loop of its own (one thread), so that the
sync and async entry points (``invoke`` / ``ainvoke``, ``stream`` / ``astream``) share the
conversations' chats and their paused streams. Cancelling an async call interrupts the run on
the server, as cancelling ``CoderAgent.generate`` does.

Images and files in a user message (LangChain's standard blocks, their ``source_type`` forms and
OpenAI's chat format) become Coder chat attachments: their bytes (base64 or a ``data:`` URL)
are checked against the attachment rules before any request, uploaded once per distinct
content and call, and sent as file parts of the message beside its text, in order; a block
naming a Coder file id is sent as that file. Remote URLs are not fetched, and audio and video
have no Coder counterpart: both are refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import queue
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal, TypeAlias, TypeVar
from urllib.parse import unquote_to_bytes, urlsplit

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, model_validator

from coder_io_asyncio import (
    Attachment,
    CoderAgent,
    CoderAgentError,
    CoderChatClient,
    FileContent,
    GenerateResult,
    TextDelta,
    Tool,
    ToolResultContent,
    Usage,
)
from coder_io_asyncio import ToolMessage as CoderToolMessage
from coder_proto.adapter import check_attachment_size

__all__ = ["ChatCoder"]

T = TypeVar("T")

#: The keys of ``response_metadata`` that tie an answer to its Coder chat.
CHAT_ID_KEY = "coder_chat_id"
CURSOR_KEY = "coder_last_seen_message_id"
_DONE = object()
#: Content blocks that restate an answer's tool calls (Anthropic's and LangChain's own).
_CALL_BLOCKS = frozenset({"tool_use", "tool_call"})


class ChatCoder(BaseChatModel):
    """A LangChain chat model backed by Coder Agents chats.

    ``base_url`` / ``token`` / ``organization_id`` default to ``CODER_URL`` /
    ``CODER_SESSION_TOKEN`` / ``CODER_ORGANIZATION_ID`` as for ``CoderAgent``; ``model`` names
    the Coder model config, ``instructions`` and the history's system messages become the
    chat's system prompt when the chat is created, ``request_timeout`` bounds each round trip
    (seconds). ``bind_tools`` registers client tools (LangChain's loop runs them);
    ``with_structured_output`` files the answer through the agent's structured-output tool.
    The chat id and cursor of every answer are in its ``response_metadata``; usage is in
    ``usage_metadata``. ``close()`` (or ``aclose()``) closes the sockets and the model's
    event loop; the chats stay on the server.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, populate_by_name=True)

    base_url: str | None = None
    """The deployment's URL (``CODER_URL`` when left out)."""
    token: SecretStr | None = Field(default=None, alias="api_key")
    """A session token (``CODER_SESSION_TOKEN`` when left out; also ``api_key=``); never
    shown in a repr."""
    organization_id: str | None = None
    """The organization new chats belong to (D33 when left out)."""
    model: str | None = None
    """The Coder model config's model name (the deployment's default when left out)."""
    instructions: str | None = None
    """The system prompt of new chats, before the history's system messages."""
    request_timeout: float | None = Field(default=None, alias="timeout")
    """Seconds one round trip may take before the run is interrupted (also ``timeout=``)."""
    max_retries: int | None = None
    """How often a first turn whose stream was lost is replayed on a fresh chat (C.5)."""
    temperature: float | None = None
    """Accepted for LangChain's common parameters and not sent: a Coder model config sets
    the sampling on the server."""
    max_tokens: int | None = None
    """Accepted for LangChain's common parameters and not sent: a Coder model config sets
    the output limit on the server."""
    stop: list[str] | None = None
    """Accepted for LangChain's common parameters and not sent: Coder has no stop
    sequences."""
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Further ``CoderAgent`` keywords (``workspace_id``, ``mcp_server_ids``, ...)."""

    _loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)
    _thread: threading.Thread | None = PrivateAttr(default=None)
    _client: CoderChatClient | None = PrivateAttr(default=None)
    _agents: dict[str, tuple[CoderAgent, str]] = PrivateAttr(default_factory=dict)
    _open: list[CoderAgent] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @model_validator(mode="after")
    def _from_env(self) -> ChatCoder:
        if self.base_url is None and os.environ.get("CODER_URL"):
            self.base_url = os.environ["CODER_URL"]
        if self.token is None and os.environ.get("CODER_SESSION_TOKEN"):
            self.token = SecretStr(os.environ["CODER_SESSION_TOKEN"])
        return self

    @property
    def _llm_type(self) -> str:
        return "coder"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, "base_url": self.base_url}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "coder"
        params["ls_model_name"] = kwargs.get("model") or self.model or "coder"
        return params

    # -- tools and structured output ---------------------------------------------------------

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind client tools: their schemas are registered with the chat when it is created;
        a call to one ends the round trip with the call in ``AIMessage.tool_calls``. Coder
        has no tool choice: ``tool_choice`` is accepted and not sent."""
        del tool_choice
        formatted = [convert_to_openai_tool(t)["function"] for t in tools]
        return self.bind(tools=formatted, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        include_raw: bool = False,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """An answer shaped by ``schema`` (a pydantic model, TypedDict or JSON Schema): a
        whole Coder turn with the agent's structured-output tool, validated on the client;
        the filing arrives as a tool call, parsed as ``bind_tools`` answers are."""
        function = convert_to_openai_tool(schema)["function"]
        name = function["name"]
        llm = self.bind(
            coder_output=function,
            ls_structured_output_format={
                "kwargs": {"method": "function_calling"},
                "schema": convert_to_openai_tool(schema),
            },
        )
        parser: Runnable[Any, Any]
        if isinstance(schema, type) and is_basemodel_subclass(schema):
            parser = PydanticToolsParser(tools=[schema], first_tool_only=True)
        else:
            parser = JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
        if not include_raw:
            return llm | parser

        def parse(state: Mapping[str, Any]) -> Any:
            return parser.invoke(state["raw"])

        parsed = RunnablePassthrough.assign(
            parsed=RunnableLambda(parse), parsing_error=lambda _: None
        )
        return RunnableMap(raw=llm) | parsed

    # -- LangChain's entry points ------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self._submit(self._round_trip(messages, None, kwargs)).result()
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        future = self._submit(self._round_trip(messages, None, kwargs))
        message = await asyncio.wrap_future(future)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        items: queue.Queue[Any] = queue.Queue()
        future = self._submit(self._round_trip(messages, items.put, kwargs))
        try:
            while True:
                item = items.get()
                if item is _DONE:
                    break
                if run_manager is not None and item.content:
                    run_manager.on_llm_new_token(item.content, chunk=item)
                yield ChatGenerationChunk(message=item)
            future.result()
        finally:
            future.cancel()

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        caller = asyncio.get_running_loop()
        items: asyncio.Queue[Any] = asyncio.Queue()

        def put(item: Any) -> None:
            caller.call_soon_threadsafe(items.put_nowait, item)

        future = self._submit(self._round_trip(messages, put, kwargs))
        try:
            while True:
                item = await items.get()
                if item is _DONE:
                    break
                if run_manager is not None and item.content:
                    await run_manager.on_llm_new_token(item.content, chunk=item)
                yield ChatGenerationChunk(message=item)
            await asyncio.wrap_future(future)
        finally:
            future.cancel()

    # -- the Coder side (on the model's own loop) --------------------------------------------

    def _submit(self, coro: Awaitable[T]) -> Future[T]:
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="coder-langchain", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _round_trip(
        self,
        messages: Sequence[BaseMessage],
        put: Callable[[Any], None] | None,
        kwargs: Mapping[str, Any],
    ) -> AIMessage:
        try:
            chat_id, cursor, new = _split_history(messages)
            output = kwargs.get("coder_output")
            # Every block is checked here, before a chat or an upload exists.
            parts = _prompt(new, fresh=chat_id is None or output is not None, history=messages)
            if output is not None:
                message = await self._structured(messages, parts, output, kwargs.get("model"))
                if put is not None:
                    put(_as_chunk(message))
                return message
            agent, model_name = self._agent_for(
                chat_id, cursor, messages, kwargs.get("tools") or (), kwargs.get("model")
            )
            prompt = await _attach(agent, parts)
            async with agent.segment(prompt) as stream:
                async for part in stream:
                    if put is not None and isinstance(part, TextDelta) and part.delta:
                        put(AIMessageChunk(content=part.delta))
                result = await stream.get_final_result()
            assert result.chat_id is not None  # a step that did not raise ran on a chat
            self._agents[result.chat_id] = (agent, model_name)
            message = _answer(result, model_name)
            if put is not None:
                put(_tail_chunk(message))
            return message
        finally:
            if put is not None:
                put(_DONE)

    def _agent_for(
        self,
        chat_id: str | None,
        cursor: int | None,
        messages: Sequence[BaseMessage],
        tools: Sequence[Mapping[str, Any]],
        model: str | None,
    ) -> tuple[CoderAgent, str]:
        if chat_id is not None and chat_id in self._agents:
            return self._agents[chat_id]
        model = model or self.model
        agent = CoderAgent(
            client=self._chat_client(),
            organization_id=self.organization_id,
            model=model,
            instructions=_instructions(self.instructions, messages),
            request_timeout=self.request_timeout,
            **self._retries(),
            tools=[_schema_tool(t) for t in tools],
            chat_id=chat_id,
            last_seen_message_id=cursor,
            **self.agent_kwargs,
        )
        self._open.append(agent)
        return agent, model or "coder"

    async def _structured(
        self,
        messages: Sequence[BaseMessage],
        parts: list[_Part],
        function: Mapping[str, Any],
        model: str | None,
    ) -> AIMessage:
        schema = dict(function.get("parameters") or {"type": "object"})
        async with CoderAgent(
            client=self._chat_client(),
            organization_id=self.organization_id,
            model=model or self.model,
            instructions=_instructions(self.instructions, messages),
            request_timeout=self.request_timeout,
            **self._retries(),
            output_type=schema,
            **self.agent_kwargs,
        ) as agent:
            result = await agent.generate(await _attach(agent, parts))
        message = _answer(result, model or self.model or "coder")
        message.tool_calls = [
            {
                "name": function["name"],
                "args": dict(result.output),
                "id": f"coder-structured-{result.chat_id}",
                "type": "tool_call",
            }
        ]
        return message

    def _retries(self) -> dict[str, Any]:
        return {} if self.max_retries is None else {"max_retries": self.max_retries}

    def _chat_client(self) -> CoderChatClient:
        if self._client is None:
            self._client = CoderChatClient(
                base_url=self.base_url,
                token=self.token.get_secret_value() if self.token is not None else None,
            )
        return self._client

    # -- closing -----------------------------------------------------------------------------

    async def _close_all(self) -> None:
        agents, self._open, self._agents = self._open, [], {}
        for agent in agents:
            await agent.aclose(archive=False)
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def close(self) -> None:
        """Close the conversations' sockets, the HTTP client and the model's event loop; the
        chats stay on the server (a later call continues them from the history)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._close_all(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    async def aclose(self) -> None:
        """``close()`` from a coroutine, without blocking the caller's loop."""
        await asyncio.to_thread(self.close)


# -- messages ---------------------------------------------------------------------------------


def _split_history(
    messages: Sequence[BaseMessage],
) -> tuple[str | None, int | None, list[BaseMessage]]:
    """The chat the history continues (the newest answer that names one), its cursor, and the
    messages after that answer (all of them for a new chat)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage):
            chat_id = message.response_metadata.get(CHAT_ID_KEY)
            if isinstance(chat_id, str) and chat_id:
                cursor = message.response_metadata.get(CURSOR_KEY)
                return (
                    chat_id,
                    cursor if isinstance(cursor, int) else None,
                    list(messages[index + 1 :]),
                )
    return None, None, list(messages)


def _text(message: BaseMessage) -> str:
    """The text of a message that can carry nothing else (system, assistant and tool
    messages): an image or file there has no place in a Coder chat."""
    texts: list[str] = []
    for part in _blocks(message, files=False):
        assert isinstance(part, str)
        texts.append(part)
    return "".join(texts)


def _blocks(message: BaseMessage, *, files: bool) -> list[_Part]:
    """A message's content in order: its text, and (``files``) the images and files it
    carries, each checked against the attachment rules."""
    content = message.content
    if isinstance(content, str):
        return [content]
    out: list[_Part] = []
    for block in content:
        if isinstance(block, str):
            out.append(block)
        elif block.get("type") == "text":
            out.append(str(block.get("text", "")))
        elif block.get("type") in _CALL_BLOCKS:
            continue  # an answer's calls, also in its tool_calls
        elif block.get("type") in _FILE_BLOCKS:
            if not files:
                raise CoderAgentError(
                    f"a {block.get('type')!r} content block cannot be sent to a Coder chat: "
                    f"only user messages carry images and files, not {message.type} messages"
                )
            out.append(_file(block))
        else:
            raise CoderAgentError(
                f"a {block.get('type')!r} content block cannot be sent to a Coder chat: "
                "only text, images and files reach the chat from LangChain messages"
            )
    return out


#: LangChain's image, file, audio and video blocks (standard, ``source_type`` and OpenAI
#: chat forms); audio and video are refused.
_FILE_BLOCKS = frozenset(
    {"image", "file", "image_url", "text-plain", "audio", "input_audio", "video"}
)
_AUDIO_BLOCKS = frozenset({"audio", "input_audio", "video"})


class _File:
    """An image or file of a user message: bytes to upload, or a Coder file id."""

    __slots__ = ("data", "file_id", "filename", "media_type")

    def __init__(
        self,
        *,
        data: bytes | None = None,
        media_type: str | None = None,
        filename: str | None = None,
        file_id: str | None = None,
    ) -> None:
        self.data, self.media_type, self.filename, self.file_id = (
            data,
            media_type,
            filename,
            file_id,
        )


_Part: TypeAlias = "str | _File"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)


def _file(block: Mapping[str, Any]) -> _File:
    """One image or file block as a checked attachment (wire 7: allowlisted media types,
    10 MiB), before anything is sent."""
    kind = block.get("type")
    if kind in _AUDIO_BLOCKS:
        raise CoderAgentError(
            f"a {kind!r} content block cannot be sent to a Coder chat: "
            "Coder chat attachments take no audio or video (images, PDF and text files only)"
        )
    filename = _filename(block)
    mime_type = block.get("mime_type")
    if kind == "image_url":  # OpenAI chat format
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        return _from_url(url, None, filename)
    nested = block.get("file")
    if kind == "file" and isinstance(nested, Mapping):
        # OpenAI's chat-format file whose data is bare base64 (LangChain turns a data: URL
        # or a file id into the standard block itself): the name gives the media type.
        name = nested.get("filename")
        return _checked(_decode(nested.get("file_data")), None, name)
    source = block.get("source")
    if isinstance(source, Mapping):  # Anthropic's form
        if source.get("type") == "base64":
            return _checked(_decode(source.get("data")), source.get("media_type"), filename)
        return _from_url(source.get("url"), source.get("media_type"), filename)
    if "file_id" in block:
        return _by_id(block["file_id"])
    if "base64" in block:
        return _checked(_decode(block["base64"]), mime_type, filename)
    if kind == "text-plain" and isinstance(block.get("text"), str):
        return _checked(block["text"].encode(), mime_type or "text/plain", filename)
    return _from_url(block.get("url"), mime_type, filename)


def _filename(block: Mapping[str, Any]) -> str | None:
    """The block's file name: its own or among its extras (where LangChain keeps it)."""
    for holder in (block, block.get("extras")):
        if isinstance(holder, Mapping) and isinstance(holder.get("filename"), str):
            return str(holder["filename"]) or None
    return None


def _by_id(file_id: object) -> _File:
    if not isinstance(file_id, str) or _UUID.match(file_id) is None:
        raise CoderAgentError(
            f"file id {file_id!r} names no Coder chat file: Coder file ids are the UUIDs "
            "upload_chat_file returns (send other files as base64 content)"
        )
    return _File(file_id=file_id)


def _decode(data: object) -> bytes:
    if not isinstance(data, str) or not data:
        raise CoderAgentError("an image or file block holds no base64 content")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise CoderAgentError("an image or file block's content is not valid base64") from None


def _from_url(url: object, mime_type: object, filename: str | None) -> _File:
    """A ``data:`` URL's content; any other URL is refused (the client fetches no URLs)."""
    if not isinstance(url, str) or not url:
        raise CoderAgentError("an image or file block holds no content: give base64 or a data: URL")
    if not url.startswith("data:"):
        parts = urlsplit(url)
        where = f"{parts.scheme}://{parts.hostname}" if parts.hostname else f"{parts.scheme}:"
        raise CoderAgentError(
            f"an image or file given by a URL ({where}...) cannot be sent to a Coder chat: "
            "ChatCoder does not fetch URLs; download the content and pass it as base64 or a "
            "data: URL"
        )
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise CoderAgentError("a data: URL without a comma holds no content")
    params = header.split(";")
    declared = params[0].strip() or (mime_type if isinstance(mime_type, str) else None)
    if "base64" in (p.strip().lower() for p in params[1:]):
        data = _decode(payload)
    else:
        data = unquote_to_bytes(payload)
    return _checked(data, declared, filename)


def _checked(data: bytes, mime_type: object, filename: str | None) -> _File:
    """Bytes to upload, with the media type allowlisted (named, or from the file name's
    extension) and the size under 10 MiB: the checks of an upload, before any request."""
    plan = Attachment(
        content=data,
        media_type=mime_type if isinstance(mime_type, str) and mime_type else None,
        filename=filename,
    ).plan()
    check_attachment_size(len(data))
    return _File(data=data, media_type=plan.media_type, filename=plan.filename)


async def _attach(agent: CoderAgent, parts: list[_Part]) -> Any:
    """The prompt with its files uploaded: each distinct content once (media type and
    bytes), in the agent's organization; a prompt without files stays its text."""
    if not any(isinstance(p, _File) for p in parts):
        if all(isinstance(p, str) for p in parts):
            return "".join(p for p in parts if isinstance(p, str))
        return parts  # the tool results of a resume
    uploaded: dict[tuple[str | None, bytes], FileContent] = {}
    prompt: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            prompt.append(part)
        elif part.file_id is not None:
            prompt.append(FileContent(file_id=part.file_id))
        else:
            assert part.data is not None
            key = (part.media_type, part.data)
            if key not in uploaded:
                attached = await agent.attach(
                    part.data, media_type=part.media_type, filename=part.filename
                )
                uploaded[key] = attached.to_file_part()
            prompt.append(uploaded[key])
    return prompt


def _merge(parts: Sequence[_Part]) -> list[_Part]:
    """Adjacent texts joined (empty text is dropped on the wire, P.3)."""
    out: list[_Part] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        else:
            out.append(part)
    return out


def _prompt(new: Sequence[BaseMessage], *, fresh: bool, history: Sequence[BaseMessage]) -> Any:
    """The step's prompt: trailing tool messages resume the pause; otherwise the user text
    and files after the chat's last answer (for a new chat with earlier turns, a transcript of
    them, their files attached in place), as text and ``_File`` parts in order."""
    trailing: list[ToolMessage] = []
    for message in reversed(new):
        if not isinstance(message, ToolMessage):
            break
        trailing.insert(0, message)
    if trailing and not fresh:
        return [
            CoderToolMessage(
                tuple(
                    ToolResultContent(
                        tool_call_id=m.tool_call_id,
                        output=_tool_output(m),
                        is_error=m.status == "error",
                        tool_name=m.name or "",
                    )
                    for m in trailing
                )
            )
        ]
    turns = [m for m in new if not isinstance(m, SystemMessage)]
    latest: list[_Part]
    if trailing:
        # A new chat cannot take results of calls it never made: the whole exchange goes as
        # a transcript, and the model answers from it.
        earlier, latest = turns, ["Go on from the tool results above."]
    else:
        last_user = max(
            (i for i, m in enumerate(turns) if isinstance(m, HumanMessage)), default=None
        )
        if last_user is None:
            raise CoderAgentError("the messages hold no user message to send to the Coder chat")
        earlier = turns[:last_user] if fresh else []
        latest = _blocks(turns[last_user], files=True)
    parts: list[_Part] = []
    if earlier:
        parts.append("The conversation so far:\n")
        for index, message in enumerate(earlier):
            if index:
                parts.append("\n")
            parts += _line(message)
        parts.append("\n\n")
    return _merge([*parts, *latest])


def _tool_output(message: ToolMessage) -> Any:
    """A tool message's output as the wire JSON value: LangChain tools hand dicts and lists
    over as JSON text, which goes back to JSON; any other text stays a string."""
    text = _text(message)
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _line(message: BaseMessage) -> list[_Part]:
    if isinstance(message, AIMessage):
        calls = "".join(
            f" [called {c['name']}({json.dumps(c['args'])}) as {c['id']}]"
            for c in message.tool_calls
        )
        return [f"assistant: {_text(message)}{calls}"]
    if isinstance(message, ToolMessage):
        flag = " (error)" if message.status == "error" else ""
        return [f"tool result for {message.tool_call_id}{flag}: {_text(message)}"]
    return ["user: ", *_blocks(message, files=True)]


def _instructions(instructions: str | None, messages: Sequence[BaseMessage]) -> str | None:
    texts = [instructions] if instructions else []
    texts += [_text(m) for m in messages if isinstance(m, SystemMessage)]
    return "\n\n".join(t for t in texts if t) or None


def _schema_tool(function: Mapping[str, Any]) -> Tool:
    return Tool(
        name=function["name"],
        description=function.get("description") or None,
        input_schema=function.get("parameters") or {"type": "object", "properties": {}},
    )


def _usage(usage: Usage) -> UsageMetadata:
    input_tokens = usage.input_tokens or 0
    output_tokens = usage.output_tokens or 0
    metadata = UsageMetadata(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )
    details: dict[str, int] = {}
    if usage.cache_read_tokens is not None:
        details["cache_read"] = usage.cache_read_tokens
    if usage.cache_write_tokens is not None:
        details["cache_creation"] = usage.cache_write_tokens
    if details:
        metadata["input_token_details"] = details  # type: ignore[typeddict-item]
    if usage.reasoning_tokens is not None:
        metadata["output_token_details"] = {"reasoning": usage.reasoning_tokens}
    return metadata


def _answer(result: GenerateResult, model_name: str) -> AIMessage:
    calls = [
        {
            "name": call.tool_name,
            "args": json.loads(call.input) if call.input else {},
            "id": call.tool_call_id,
            "type": "tool_call",
        }
        for call in result.tool_calls
        if not call.provider_executed
    ]
    finish: Literal["stop", "tool_calls", "error"] | str = (
        "tool_calls" if result.finish_reason == "tool-calls" else result.finish_reason
    )
    return AIMessage(
        content=result.text,
        tool_calls=calls,
        usage_metadata=_usage(result.usage),
        response_metadata={
            CHAT_ID_KEY: result.chat_id,
            CURSOR_KEY: result.last_seen_message_id,
            "finish_reason": finish,
            "model_name": model_name,
            "model_provider": "coder",
        },
        id=f"coder-{result.chat_id}-{result.last_seen_message_id}",
    )


def _tail_chunk(message: AIMessage) -> AIMessageChunk:
    """The chunk that closes a stream: the tool calls, usage and metadata, no text (the text
    went out as deltas)."""
    return AIMessageChunk(
        content="",
        tool_call_chunks=[
            {
                "name": call["name"],
                "args": json.dumps(call["args"]),
                "id": call["id"],
                "index": index,
                "type": "tool_call_chunk",
            }
            for index, call in enumerate(message.tool_calls)
        ],
        usage_metadata=message.usage_metadata,
        response_metadata=message.response_metadata,
        chunk_position="last",
    )


def _as_chunk(message: AIMessage) -> AIMessageChunk:
    tail = _tail_chunk(message)
    tail.content = message.content
    return tail
