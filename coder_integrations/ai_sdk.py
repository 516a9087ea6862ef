"""A bridge to the AI SDK's chat front ends: agent turns as a "UI message stream".

The AI SDK's ``useChat`` (React, Vue, Svelte ...) posts ``{"id", "messages", "trigger",
"messageId", ...}`` to a backend route and reads back server-sent events, one JSON "chunk" per
event (``start``, ``text-delta``, ``tool-input-available``, ``finish`` ...), ending with
``data: [DONE]``; the response carries the header ``x-vercel-ai-ui-message-stream: v1``. This
module speaks that protocol for an agent turn:

* ``UIMessageStreamEncoder`` turns output parts into chunks. It is pure (no I/O), so it works
  with any runtime and can be tested part by part;
* ``ui_message_chunks`` / ``ui_message_chunks_sync`` run it over a stream's parts and close
  the message (``finish`` with the usage as message metadata, or ``error`` then ``finish``);
  ``encode_sse`` / ``sse_stream`` frame chunks as server-sent events;
* ``ChatRequest`` reads the chat request body; ``ChatSession`` and ``SessionMap`` (with
  ``MemorySessionMap`` as the default) map the front end's chat id to a Coder chat and its
  resume cursor;
* ``ChatBridge`` puts it together: one request body in, one turn on the right chat, SSE bytes
  out (``stream`` on asyncio or trio, ``stream_sync`` for the blocking adapter), and
  ``response`` wraps them in a Starlette / FastAPI ``StreamingResponse``.

No web framework is imported here until ``streaming_response`` is called, and the core package
imports nothing of this module.

Mapping (output part -> chunks):

=====================================  ==============================================================
``StreamStart`` (a model round trip)   ``start-step``, sent with the round trip's first content
                                       (a round trip that shows nothing sends no step)
``TextStart/Delta/End``                ``text-start`` / ``text-delta`` / ``text-end``
``ReasoningStart/Delta/End``           ``reasoning-start`` / ``reasoning-delta`` / ``reasoning-end``
``ToolInputStart``                     ``tool-input-start`` (``providerExecuted`` and ``dynamic``
                                       for the server's tools)
``ToolInputEnd``                       nothing (the protocol has no such chunk; the input follows)
``ToolCall``                           ``tool-input-available`` with the parsed input, or
                                       ``tool-input-error`` when the input is not JSON
``ToolResult``                         ``tool-output-available``, or ``tool-output-error`` for an
                                       error result (client tools' outcomes and server tools')
``Source``                             ``source-url``
``ErrorPart``                          ``error`` with the run's message
``Finish`` (a round trip ended)        ``finish-step``; the last one's reason goes into ``finish``
end of the turn                        ``finish`` with ``finishReason`` and ``messageMetadata``
                                       (usage summed over the steps, the Coder chat id and cursor)
=====================================  ==============================================================

Block ids are made unique within the message (a new round trip numbers its blocks afresh), and
a failure raised by the turn (a lost stream, the request timeout) becomes an ``error`` chunk and
a ``finish`` with reason ``error``, so the front end always sees a closed message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import inspect
import json
import logging
import math
import secrets
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
)
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from coder_proto import (
    Attachment,
    CoderAgentError,
    CoderApiError,
    ErrorPart,
    Finish,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Source,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputEnd,
    ToolInputStart,
    ToolResult,
    Usage,
)

__all__ = [
    "OWNER_LABEL",
    "SSE_DONE",
    "UI_MESSAGE_STREAM_HEADERS",
    "ChatBridge",
    "ChatNotFoundError",
    "ChatRequest",
    "ChatRequestError",
    "ChatSession",
    "ChatUnauthorizedError",
    "MemorySessionMap",
    "SessionMap",
    "UIMessageStreamEncoder",
    "api_error_text",
    "encode_sse",
    "owner_label_value",
    "sse_stream",
    "sse_stream_sync",
    "streaming_response",
    "ui_message_chunks",
    "ui_message_chunks_sync",
    "usage_metadata",
]

logger = logging.getLogger("coder_integrations.ai_sdk")

UI_MESSAGE_STREAM_HEADERS: Mapping[str, str] = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""The response headers of a UI message stream (the protocol marker and no buffering)."""

SSE_DONE = b"data: [DONE]\n\n"
"""The event that ends the stream."""

#: The finish reasons the protocol accepts; anything else is reported as ``other``.
_FINISH_REASONS = frozenset(
    {"stop", "length", "content-filter", "tool-calls", "error", "interrupted", "other"}
)

#: What an unexpected (non-library) failure shows the front end unless ``on_error`` says more:
#: its message could hold anything, so it stays in the server's log.
GENERIC_ERROR_TEXT = "An error occurred."

Chunk = dict[str, Any]


# -- JSON and SSE -----------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as ``None`` (what ``JSON.stringify`` writes)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    """Compact JSON, ASCII-only (a lone surrogate stays an escape, never an encoding error);
    values JSON has no form for are written as their ``str``."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:
        return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False, default=str)


def encode_sse(chunk: Mapping[str, Any]) -> bytes:
    """One chunk as a server-sent event: ``data: {json}`` and a blank line."""
    return b"data: " + _dumps(dict(chunk)).encode("ascii") + b"\n\n"


async def sse_stream(chunks: AsyncIterable[Mapping[str, Any]]) -> AsyncIterator[bytes]:
    """Frame chunks as server-sent events, then ``data: [DONE]``."""
    async for chunk in chunks:
        yield encode_sse(chunk)
    yield SSE_DONE


def sse_stream_sync(chunks: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    """``sse_stream`` for a plain iterable (the blocking adapter)."""
    for chunk in chunks:
        yield encode_sse(chunk)
    yield SSE_DONE


# -- the mapping --------------------------------------------------------------------------------


def usage_metadata(usage: Usage | None) -> dict[str, Any]:
    """``usage`` in the AI SDK's ``LanguageModelUsage`` shape (unknown counts left out)."""
    if usage is None:
        return {}
    fields = {
        "inputTokens": usage.input_tokens,
        "inputTokenDetails": {
            "noCacheTokens": usage.no_cache_tokens,
            "cacheReadTokens": usage.cache_read_tokens,
            "cacheWriteTokens": usage.cache_write_tokens,
        },
        "outputTokens": usage.output_tokens,
        "outputTokenDetails": {
            "textTokens": usage.text_tokens,
            "reasoningTokens": usage.reasoning_tokens,
        },
        "totalTokens": usage.total_tokens,
    }
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if v is not None}
            if value:
                out[key] = value
        elif value is not None:
            out[key] = value
    return out


def _error_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("error", "message"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return _dumps(value)


class UIMessageStreamEncoder:
    """Output parts in, UI message stream chunks out, for one assistant message.

    Call ``start()`` once, ``feed(part)`` for every part of the turn (in order), then
    ``finish()`` (or ``error(text)`` then ``finish()`` when the turn failed); each returns the
    chunks to send, as dicts. ``metadata(value)`` adds message metadata at any point (the AI
    SDK merges it into the message). No I/O, no clock: any runtime can use it.
    """

    def __init__(self, *, message_id: str | None = None) -> None:
        self.message_id = message_id
        #: Model round trips that showed content so far (``start-step`` chunks sent).
        self.steps = 0
        #: Usage summed over the finished round trips (``None`` before the first).
        self.usage: Usage | None = None
        #: The reason of the last round trip's ``Finish`` (``None`` before the first).
        self.finish_reason: str | None = None
        self._step_open = False
        self._started = False
        self._finished = False
        self._errored = False
        self._provider_executed: dict[str, bool] = {}
        self._names: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<UIMessageStreamEncoder steps={self.steps} finished={self._finished}>"

    # -- message boundaries -------------------------------------------------------------------

    def start(self, metadata: Any = None) -> list[Chunk]:
        """The ``start`` chunk (with ``messageId`` and ``messageMetadata`` when given)."""
        if self._started:
            raise CoderAgentError("the message was started already")
        self._started = True
        chunk: Chunk = {"type": "start"}
        if self.message_id is not None:
            chunk["messageId"] = self.message_id
        if metadata is not None:
            chunk["messageMetadata"] = metadata
        return [chunk]

    def metadata(self, metadata: Any) -> list[Chunk]:
        """A ``message-metadata`` chunk."""
        return [{"type": "message-metadata", "messageMetadata": metadata}]

    def error(self, text: str) -> list[Chunk]:
        """An ``error`` chunk for a failure of the turn itself (the open round trip is
        closed first); the message's finish reason becomes ``error``."""
        chunks = self._close_step()
        self._errored = True
        self.finish_reason = "error"
        chunks.append({"type": "error", "errorText": text})
        return chunks

    def finish(self, metadata: Mapping[str, Any] | None = None) -> list[Chunk]:
        """The ``finish`` chunk: the finish reason of the last round trip (``error`` after
        ``error()``) and, as message metadata, ``finishReason``, ``usage`` (see
        ``usage_metadata``), ``steps`` and the entries of ``metadata``."""
        if self._finished:
            return []
        self._finished = True
        chunks = self._close_step()
        reason = self.finish_reason or "other"
        if reason not in _FINISH_REASONS:
            reason = "other"
        meta: dict[str, Any] = {"finishReason": reason, "steps": self.steps}
        usage = usage_metadata(self.usage)
        if usage:
            meta["usage"] = usage
        if metadata:
            meta.update(metadata)
        chunks.append({"type": "finish", "finishReason": reason, "messageMetadata": meta})
        return chunks

    # -- parts ----------------------------------------------------------------------------------

    def feed(self, part: Any) -> list[Chunk]:
        """The chunks for one output part (possibly none)."""
        handler = self._handlers.get(type(part))
        if handler is None:
            raise TypeError(f"not an output part: {part!r}")
        if self._finished:
            raise CoderAgentError("the message was finished already")
        return handler(self, part)

    def _block_id(self, block_id: str) -> str:
        # Each round trip numbers its blocks from 1 again; the message needs distinct ids.
        return block_id if self.steps <= 1 else f"{block_id}-s{self.steps}"

    def _close_step(self) -> list[Chunk]:
        if not self._step_open:
            return []
        self._step_open = False
        return [{"type": "finish-step"}]

    def _ensure_step(self) -> list[Chunk]:
        # A round trip's ``start-step`` waits for its first content, so a round trip that
        # shows nothing (it failed at once, or answered nothing) leaves no empty step in the
        # message. A part before any StreamStart (a hand-built stream) still sits in a step.
        if self._step_open:
            return []
        self._step_open = True
        self.steps += 1
        return [{"type": "start-step"}]

    def _stream_start(self, part: StreamStart) -> list[Chunk]:
        return self._close_step()

    def _finish_part(self, part: Finish) -> list[Chunk]:
        self.finish_reason = part.finish_reason
        self.usage = part.usage if self.usage is None else self.usage + part.usage
        return self._close_step()

    def _text_start(self, part: TextStart) -> list[Chunk]:
        return [*self._ensure_step(), {"type": "text-start", "id": self._block_id(part.id)}]

    def _text_delta(self, part: TextDelta) -> list[Chunk]:
        chunks = self._ensure_step()
        chunks.append({"type": "text-delta", "id": self._block_id(part.id), "delta": part.delta})
        return chunks

    def _text_end(self, part: TextEnd) -> list[Chunk]:
        return [*self._ensure_step(), {"type": "text-end", "id": self._block_id(part.id)}]

    def _reasoning_start(self, part: ReasoningStart) -> list[Chunk]:
        return [*self._ensure_step(), {"type": "reasoning-start", "id": self._block_id(part.id)}]

    def _reasoning_delta(self, part: ReasoningDelta) -> list[Chunk]:
        chunks = self._ensure_step()
        chunks.append(
            {"type": "reasoning-delta", "id": self._block_id(part.id), "delta": part.delta}
        )
        return chunks

    def _reasoning_end(self, part: ReasoningEnd) -> list[Chunk]:
        return [*self._ensure_step(), {"type": "reasoning-end", "id": self._block_id(part.id)}]

    def _tool_flags(self, chunk: Chunk, call_id: str) -> Chunk:
        if self._provider_executed.get(call_id):
            chunk["providerExecuted"] = True
            chunk["dynamic"] = True
        return chunk

    def _tool_input_start(self, part: ToolInputStart) -> list[Chunk]:
        self._provider_executed[part.tool_call_id] = part.provider_executed
        self._names[part.tool_call_id] = part.tool_name
        chunk: Chunk = {
            "type": "tool-input-start",
            "toolCallId": part.tool_call_id,
            "toolName": part.tool_name,
        }
        if part.provider_executed:
            chunk["providerExecuted"] = True
        if part.dynamic:
            chunk["dynamic"] = True
        return [*self._ensure_step(), chunk]

    def _tool_input_end(self, part: ToolInputEnd) -> list[Chunk]:
        return []

    def _tool_call(self, part: ToolCall) -> list[Chunk]:
        self._provider_executed[part.tool_call_id] = part.provider_executed
        self._names[part.tool_call_id] = part.tool_name
        chunks = self._ensure_step()
        try:
            parsed = json.loads(part.input) if part.input.strip() else {}
        except ValueError as exc:
            chunk: Chunk = {
                "type": "tool-input-error",
                "toolCallId": part.tool_call_id,
                "toolName": part.tool_name,
                "input": part.input,
                "errorText": f"the tool input is not valid JSON: {exc}",
            }
        else:
            chunk = {
                "type": "tool-input-available",
                "toolCallId": part.tool_call_id,
                "toolName": part.tool_name,
                "input": parsed,
            }
        if part.provider_executed:
            chunk["providerExecuted"] = True
        if part.dynamic:
            chunk["dynamic"] = True
        chunks.append(chunk)
        return chunks

    def _tool_result(self, part: ToolResult) -> list[Chunk]:
        # A client tool's outcome arrives between two round trips (after the paused step's
        # Finish, before the next StreamStart): it belongs to no step of its own.
        call_id = part.tool_call_id
        if part.is_error:
            chunk: Chunk = {
                "type": "tool-output-error",
                "toolCallId": call_id,
                "errorText": _error_text(part.result),
            }
        else:
            chunk = {"type": "tool-output-available", "toolCallId": call_id, "output": part.result}
        return [self._tool_flags(chunk, call_id)]

    def _source(self, part: Source) -> list[Chunk]:
        chunk: Chunk = {"type": "source-url", "sourceId": part.id, "url": part.url}
        if part.title is not None:
            chunk["title"] = part.title
        return [*self._ensure_step(), chunk]

    def _error_part(self, part: ErrorPart) -> list[Chunk]:
        # An error is no part of the message: it opens no step of its own.
        self._errored = True
        return [{"type": "error", "errorText": part.error.message}]

    _handlers: dict[type, Callable[[UIMessageStreamEncoder, Any], list[Chunk]]] = {
        StreamStart: _stream_start,
        Finish: _finish_part,
        TextStart: _text_start,
        TextDelta: _text_delta,
        TextEnd: _text_end,
        ReasoningStart: _reasoning_start,
        ReasoningDelta: _reasoning_delta,
        ReasoningEnd: _reasoning_end,
        ToolInputStart: _tool_input_start,
        ToolInputEnd: _tool_input_end,
        ToolCall: _tool_call,
        ToolResult: _tool_result,
        Source: _source,
        ErrorPart: _error_part,
    }


# -- running the mapping over a stream ----------------------------------------------------------


def api_error_text(exc: CoderApiError) -> str:
    """What a person reads of a Coder API error: the server's own message (and its detail),
    without the method, path and status a log wants."""
    text = exc.server_message or str(exc)
    if exc.detail:
        text += f" ({exc.detail})"
    return text


def _failure_text(exc: BaseException, on_error: Callable[[BaseException], str] | None) -> str:
    if on_error is not None:
        return on_error(exc)
    if isinstance(exc, CoderApiError):
        # "Coder API POST /api/... failed (400): ..." is for logs; the page shows the reason.
        return api_error_text(exc)
    if isinstance(exc, CoderAgentError):
        # Library errors never hold the token or request bodies.
        return str(exc)
    logger.error("the turn failed with an unexpected error", exc_info=exc)
    return GENERIC_ERROR_TEXT


async def ui_message_chunks(
    parts: AsyncIterable[Any],
    *,
    message_id: str | None = None,
    on_error: Callable[[BaseException], str] | None = None,
    finish_metadata: Callable[[], Mapping[str, Any] | None] | None = None,
) -> AsyncIterator[Chunk]:
    """The chunks of one assistant message for a stream's parts (``async for part in
    parts``), from ``start`` to ``finish``.

    A failure raised by the iteration (``Exception``, not cancellation) becomes an ``error``
    chunk: a library error shows its message, anything else ``"An error occurred."`` (and is
    logged) unless ``on_error(exc)`` returns the text. ``finish_metadata()`` is called once
    the parts are done; its entries are added to the ``finish`` chunk's message metadata."""
    encoder = UIMessageStreamEncoder(message_id=message_id)
    for chunk in encoder.start():
        yield chunk
    try:
        async for part in parts:
            for chunk in encoder.feed(part):
                yield chunk
    except Exception as exc:
        for chunk in encoder.error(_failure_text(exc, on_error)):
            yield chunk
    extra = finish_metadata() if finish_metadata is not None else None
    for chunk in encoder.finish(extra):
        yield chunk


def ui_message_chunks_sync(
    parts: Iterable[Any],
    *,
    message_id: str | None = None,
    on_error: Callable[[BaseException], str] | None = None,
    finish_metadata: Callable[[], Mapping[str, Any] | None] | None = None,
) -> Iterator[Chunk]:
    """``ui_message_chunks`` for a blocking stream (``for part in parts``)."""
    encoder = UIMessageStreamEncoder(message_id=message_id)
    yield from encoder.start()
    try:
        for part in parts:
            yield from encoder.feed(part)
    except Exception as exc:
        yield from encoder.error(_failure_text(exc, on_error))
    extra = finish_metadata() if finish_metadata is not None else None
    yield from encoder.finish(extra)


# -- the chat request -----------------------------------------------------------------------------


class ChatRequestError(CoderAgentError):
    """The chat request body is not one the bridge can run (a web handler answers 400)."""


def _file_attachment(part: Mapping[str, Any]) -> Attachment:
    url = part.get("url")
    media_type = part.get("mediaType")
    if not isinstance(url, str) or not isinstance(media_type, str):
        raise ChatRequestError("a file part needs a string url and mediaType")
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:"):
        raise ChatRequestError(
            "a file part must carry its content as a data: URL (the server cannot fetch URLs)"
        )
    try:
        if head.endswith(";base64"):
            data = base64.b64decode(payload, validate=True)
        else:
            from urllib.parse import unquote_to_bytes

            data = unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as exc:
        raise ChatRequestError(f"a file part's data: URL is malformed: {exc}") from None
    filename = part.get("filename")
    try:
        return Attachment(
            content=data,
            media_type=media_type,
            filename=filename if isinstance(filename, str) else None,
        )
    except CoderAgentError as exc:  # a media type Coder does not take, a file over the cap
        raise ChatRequestError(f"a file part cannot be attached: {exc}") from None


@attrs.frozen(kw_only=True)
class ChatRequest:
    """The body ``useChat`` posts: ``id`` (the front end's chat id), ``messages`` (UI
    messages, each ``{"id", "role", "parts": [...]}``), ``trigger`` (``submit-message`` or
    ``regenerate-message``), ``message_id`` and the extra ``body`` entries the front end added.

    ``prompt`` is what the turn sends: the text and file parts of the last user message
    (Coder keeps the history, so only that message travels).

    ``coder_chat_id`` and ``coder_last_seen_message_id`` are what the newest message carrying
    ``metadata.coder`` says (the bridge writes them into every answer's metadata): a chat the
    backend no longer knows continues there when its user owns it.

    ``user_message_id`` is the UI id of the last user message. ``replaces`` is set when that
    message takes the place of one sent before rather than following it: a regenerate
    (``trigger`` ``regenerate-message``) or an edit (``sendMessage`` with the ``messageId``
    of the user message it rewrites). The bridge then edits the Coder message instead of
    appending a prompt.
    """

    id: str
    messages: tuple[Mapping[str, Any], ...]
    trigger: str = "submit-message"
    message_id: str | None = None
    body: Mapping[str, Any] = attrs.field(factory=dict)
    prompt: tuple[Any, ...] = ()
    coder_chat_id: str | None = None
    coder_last_seen_message_id: int | None = None
    user_message_id: str | None = None
    replaces: str | None = None

    @classmethod
    def from_json(cls, body: Any) -> ChatRequest:
        """Parse and check a decoded request body; ``ChatRequestError`` when it cannot run."""
        if not isinstance(body, Mapping):
            raise ChatRequestError("the chat request body must be a JSON object")
        chat_id = body.get("id")
        if not isinstance(chat_id, str) or not chat_id:
            raise ChatRequestError("the chat request needs a non-empty string id")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
            raise ChatRequestError("the chat request needs messages (a list of UI messages)")
        trigger = body.get("trigger", "submit-message")
        if trigger not in ("submit-message", "regenerate-message"):
            raise ChatRequestError(f"unknown trigger {trigger!r}")
        message_id = body.get("messageId")
        if message_id is not None and not isinstance(message_id, str):
            raise ChatRequestError("messageId must be a string")
        user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        if user is None:
            raise ChatRequestError("the chat request has no user message to send")
        parts = user.get("parts")
        if not isinstance(parts, list):
            raise ChatRequestError("a UI message needs a list of parts")
        prompt: list[Any] = []
        for part in parts:
            if not isinstance(part, Mapping):
                raise ChatRequestError("a message part must be an object")
            if part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise ChatRequestError("a text part needs a string text")
                if text:
                    prompt.append(text)
            elif part.get("type") == "file":
                prompt.append(_file_attachment(part))
        if not prompt:
            raise ChatRequestError("the last user message has no text or file to send")
        extra = {
            k: v for k, v in body.items() if k not in ("id", "messages", "trigger", "messageId")
        }
        coder_chat_id, cursor = _coder_chat_of(messages)
        user_id = user.get("id")
        if user_id is not None and not isinstance(user_id, str):
            raise ChatRequestError("a UI message id must be a string")
        replaces = None
        if trigger == "regenerate-message" or (message_id is not None and message_id == user_id):
            replaces = user_id
        return cls(
            id=chat_id,
            messages=tuple(messages),
            trigger=trigger,
            message_id=message_id,
            body=extra,
            prompt=tuple(prompt),
            coder_chat_id=coder_chat_id,
            coder_last_seen_message_id=cursor,
            user_message_id=user_id,
            replaces=replaces,
        )


def _coder_chat_of(messages: list[Mapping[str, Any]]) -> tuple[str | None, int | None]:
    """The Coder chat id and cursor the newest message with ``metadata.coder`` names."""
    for message in reversed(messages):
        metadata = message.get("metadata")
        coder = metadata.get("coder") if isinstance(metadata, Mapping) else None
        if coder is None:
            continue
        if not isinstance(coder, Mapping) or not isinstance(coder.get("chatId"), str):
            raise ChatRequestError("metadata.coder must be an object with a string chatId")
        cursor = coder.get("lastSeenMessageId")
        if cursor is not None and (type(cursor) is not int or cursor < 0):
            raise ChatRequestError("metadata.coder.lastSeenMessageId must be a whole number")
        return str(coder["chatId"]), cursor
    return None, None


# -- sessions -------------------------------------------------------------------------------------


@attrs.frozen
class ChatSession:
    """Where a front-end chat lives on Coder: the chat id and the resume cursor (both
    ``None`` before its first turn), and ``owner``, the user the bridge's ``authorize`` hook
    named when the chat was made (``None`` without a hook). Only that user reaches it.
    ``message_ids`` maps the UI ids of the user messages sent to the Coder message ids they
    became, so a regenerate or an edit replaces the right one."""

    chat_id: str | None = None
    last_seen_message_id: int | None = None
    owner: str | None = None
    message_ids: Mapping[str, int] = attrs.field(factory=dict, hash=False)

    def agent_kwargs(self) -> dict[str, Any]:
        """``chat_id`` and ``last_seen_message_id``, to pass to ``CoderAgent(...)``."""
        return {"chat_id": self.chat_id, "last_seen_message_id": self.last_seen_message_id}


@runtime_checkable
class SessionMap(Protocol):
    """Maps a front end's chat id to its ``ChatSession``. ``get`` answers ``None`` for an
    unknown chat. Both methods may instead be coroutine functions (an async database); the
    bridge awaits them then (``stream`` only; ``stream_sync`` needs plain ones)."""

    def get(self, ui_chat_id: str) -> Any: ...

    def put(self, ui_chat_id: str, session: ChatSession) -> Any: ...


class MemorySessionMap:
    """A ``SessionMap`` in a dict (one process; thread-safe). Gone when the process ends:
    use your own for chats that must survive a restart."""

    def __init__(self) -> None:
        self._sessions: dict[str, ChatSession] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<MemorySessionMap {len(self._sessions)} chats>"

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, ui_chat_id: str) -> ChatSession | None:
        with self._lock:
            return self._sessions.get(ui_chat_id)

    def put(self, ui_chat_id: str, session: ChatSession) -> None:
        with self._lock:
            self._sessions[ui_chat_id] = session


# -- the bridge -----------------------------------------------------------------------------------

OWNER_LABEL = "coder-agents/owner"
"""The Coder chat label that names the owner of a chat the bridge made (see
``owner_label_value``)."""


def owner_label_value(user: str) -> str:
    """The owner label's value for ``user``: a SHA-256 digest of the user id, so the label
    fits Coder's rules for any id and names no one in the clear."""
    return hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()


class ChatNotFoundError(CoderAgentError):
    """The chat named by the request is not one its user may reach: unknown to the backend
    and to Coder, or another user's. Both read the same (a web handler answers 404), so an id
    tells nobody whether someone else's chat exists."""

    def __init__(self) -> None:
        super().__init__("chat not found")


class ChatUnauthorizedError(CoderAgentError):
    """The bridge's ``authorize`` hook named no user (a web handler answers 401)."""


def _session_of(agent: Any, before: ChatSession, prompt: tuple[str, int] | None) -> ChatSession:
    """The session after a turn; ``prompt`` is the UI id and Coder id of its user message."""
    chat_id = getattr(agent, "chat_id", None)
    if chat_id is None:
        return before
    ids = dict(before.message_ids)
    if prompt is not None:
        ids[prompt[0]] = prompt[1]
    return ChatSession(chat_id, getattr(agent, "last_seen_message_id", None), before.owner, ids)


#: ``_edit_plan``'s answer for "the chat's newest prompt" (message ids are positive).
_NEWEST_PROMPT: Final = 0


def _coder_metadata(agent: Any) -> dict[str, Any]:
    chat_id = getattr(agent, "chat_id", None)
    if chat_id is None:
        return {}
    return {"coder": {"chatId": chat_id, "lastSeenMessageId": agent.last_seen_message_id}}


def _plain(value: Any, refusal: str) -> Any:
    """``value``, which a blocking caller cannot await: an awaitable is refused (a coroutine
    is closed first, so it is not left unawaited)."""
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()
        raise CoderAgentError(refusal)
    return value


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _agent_stream(agent: Any, prompt: list[Any], edit: int | None) -> Any:
    if edit is None:
        return agent.stream(prompt)
    return agent.stream(prompt, edit_message_id=edit)


async def _agent_parts(
    agent: Any,
    prompt: list[Any],
    seen: Callable[[Any], None],
    edit: Callable[[], Awaitable[int | None]],
) -> AsyncGenerator[Any, None]:
    """The parts of one streaming turn (an edit of the Coder message ``edit()`` names, else a
    new prompt). Entering the stream happens at the first part, so a failure there (a prompt
    the agent refuses) becomes an ``error`` chunk like any other."""
    async with _agent_stream(agent, prompt, await edit()) as stream:
        async for part in stream:
            seen(part)
            yield part


def _agent_parts_sync(
    agent: Any,
    prompt: list[Any],
    seen: Callable[[Any], None],
    edit: Callable[[], int | None],
) -> Generator[Any, None, None]:
    with _agent_stream(agent, prompt, edit()) as stream:
        for part in stream:
            seen(part)
            yield part


def _new_message_id() -> str:
    return "msg-" + secrets.token_hex(12)


#: The Coder statuses of a chat id that is not the caller's to reach: a malformed id (400),
#: another user's chat (403 on some servers) or none at all (404).
_NOT_FOUND_STATUSES = frozenset({400, 403, 404, 410})


class _TurnFrames:
    """The SSE frames of a turn in flight, kept so a resumed request can replay and follow
    them (``ChatBridge.resume``). Writers and readers may be on different threads."""

    def __init__(self, owner: str | None) -> None:
        self.owner = owner
        self.frames: list[bytes] = []
        self.done = False
        self._changed = threading.Condition()

    def add(self, frame: bytes) -> None:
        with self._changed:
            self.frames.append(frame)
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self.done = True
            self._changed.notify_all()

    def after(self, seen: int, timeout: float | None) -> tuple[list[bytes], bool]:
        """The frames after the first ``seen`` (waiting up to ``timeout`` for one when there
        are none yet), and whether the turn is over."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.frames) > seen or self.done, timeout)
            return self.frames[seen:], self.done


#: How long a resumed reader waits in one go for the turn's next frame before looking again
#: (a reader on an event loop waits in a worker thread, which this bounds).
_RESUME_WAIT = 1.0


async def _replay(frames: _TurnFrames) -> AsyncIterator[bytes]:
    import anyio

    seen = 0
    while True:
        new, done = frames.after(seen, 0)
        if not new and not done:
            new, done = await anyio.to_thread.run_sync(
                frames.after, seen, _RESUME_WAIT, abandon_on_cancel=True
            )
        for frame in new:
            yield frame
        seen += len(new)
        if done and not new:
            return


def _replay_sync(frames: _TurnFrames) -> Iterator[bytes]:
    seen = 0
    while True:
        new, done = frames.after(seen, _RESUME_WAIT)
        yield from new
        seen += len(new)
        if done and not new:
            return


class ChatBridge:
    """Runs the front end's chat requests as agent turns, each on its user's own chat.

    ``make_agent(request, session)`` returns a fresh agent (``CoderAgent`` of any adapter) on
    the session's chat: pass it ``**session.agent_kwargs()``; give it a shared
    ``CoderChatClient`` so requests reuse connections. The bridge runs one streaming turn with
    the request's prompt, sends the chunks as SSE bytes, writes the chat id and cursor back to
    ``sessions`` (also after a failed turn, whose chat stays reachable) and closes the agent
    without archiving the chat. A client that goes away mid-answer cancels the response, which
    interrupts the run on the server.

    ``authorize(web_request)`` (a function or a coroutine function) names the request's user:
    it returns a user id, or raises (``ChatUnauthorizedError``, or the framework's own 401)
    to refuse. Every chat the bridge makes is bound to that user (the session map's
    ``owner``, and the Coder chat's ``owner_label`` label), and a chat id coming from the
    browser reaches only its owner's chats: anything else is ``ChatNotFoundError``. Without
    the hook every caller is one user (the backend's token), as in a single-user app.

    ``on_error(exc)`` picks the text a failed turn shows (default: a Coder API error's
    message, another library error's message, otherwise ``"An error occurred."``); failed
    turns are logged on the ``coder_integrations.ai_sdk`` logger. ``message_metadata(request,
    session)`` adds entries to the ``finish`` chunk's metadata.

    One request at a time per chat (``useChat`` sends them that way): two concurrent turns on
    one chat would queue on Coder's side rather than run together.
    """

    def __init__(
        self,
        make_agent: Callable[[ChatRequest, ChatSession], Any],
        *,
        sessions: SessionMap | None = None,
        authorize: Callable[[Any], Any] | None = None,
        owner_label: str = OWNER_LABEL,
        on_error: Callable[[BaseException], str] | None = None,
        message_metadata: Callable[[ChatRequest, ChatSession], Mapping[str, Any] | None]
        | None = None,
    ) -> None:
        self.make_agent = make_agent
        self.sessions: SessionMap = sessions if sessions is not None else MemorySessionMap()
        self.authorize = authorize
        self.owner_label = owner_label
        self.on_error = on_error
        self.message_metadata = message_metadata
        self._live: dict[str, _TurnFrames] = {}
        self._said_single_user = False

    def __repr__(self) -> str:
        return f"<ChatBridge sessions={self.sessions!r}>"

    def parse(self, body: Any) -> ChatRequest:
        """The request body (``bytes``, ``str`` or decoded JSON) as a ``ChatRequest``."""
        if isinstance(body, ChatRequest):
            return body
        if isinstance(body, bytes | bytearray | str):
            try:
                body = json.loads(body)
            except ValueError:
                raise ChatRequestError("the chat request body is not JSON") from None
        return ChatRequest.from_json(body)

    # -- who is asking --------------------------------------------------------------------------

    def _checked_user(self, user: Any) -> str:
        if not isinstance(user, str) or not user:
            raise ChatUnauthorizedError("the request names no signed-in user")
        return user

    def _single_user(self) -> None:
        if not self._said_single_user:
            self._said_single_user = True
            logger.warning(
                "ChatBridge has no authorize hook: every caller drives the agent as the "
                "backend's one Coder user and reaches every chat it made"
            )

    async def user_of(self, web_request: Any) -> str | None:
        """The user ``authorize`` names for ``web_request`` (``None`` without a hook);
        ``ChatUnauthorizedError`` when it names none."""
        if self.authorize is None:
            self._single_user()
            return None
        return self._checked_user(await _maybe_await(self.authorize(web_request)))

    def user_of_sync(self, web_request: Any) -> str | None:
        """``user_of`` for a plain ``authorize`` function (the blocking path)."""
        if self.authorize is None:
            self._single_user()
            return None
        user = _plain(
            self.authorize(web_request), "the blocking path needs a plain authorize function"
        )
        return self._checked_user(user)

    # -- which chat -----------------------------------------------------------------------------

    def _known(self, request: ChatRequest, stored: Any, user: str | None) -> ChatSession | None:
        """The session of a chat the backend knows (checked against ``user``), a fresh one,
        or ``None`` when the chat named by the messages' metadata must be asked of Coder."""
        live = self._live.get(request.id)
        if live is not None and live.owner != user:
            raise ChatNotFoundError()
        if stored is not None:
            if not isinstance(stored, ChatSession) or stored.owner != user:
                raise ChatNotFoundError()
            return stored
        if request.coder_chat_id is None:
            return ChatSession(owner=user)
        return None

    def _continued(self, request: ChatRequest, chat: Any, user: str | None) -> ChatSession:
        if user is not None and chat.labels.get(self.owner_label) != owner_label_value(user):
            raise ChatNotFoundError()
        return ChatSession(request.coder_chat_id, request.coder_last_seen_message_id, user)

    async def session_for(self, request: ChatRequest, user: str | None = None) -> ChatSession:
        """The session ``request`` runs on for ``user``: the stored one, a chat named by the
        messages' ``metadata.coder.chatId`` that ``user`` owns on Coder, or a new one.
        ``ChatNotFoundError`` for another user's chat or one Coder does not have."""
        stored = await _maybe_await(self.sessions.get(request.id))
        session = self._known(request, stored, user)
        if session is not None:
            return session
        agent = self.make_agent(request, ChatSession(owner=user))
        try:
            chat = await agent.client.get_chat(request.coder_chat_id)
        except CoderApiError as exc:
            if exc.status in _NOT_FOUND_STATUSES:
                raise ChatNotFoundError() from None
            raise
        finally:
            await agent.aclose(archive=False)
        return self._continued(request, chat, user)

    def session_for_sync(self, request: ChatRequest, user: str | None = None) -> ChatSession:
        """``session_for`` with plain session-map methods and a blocking agent."""
        stored = _plain(
            self.sessions.get(request.id), "stream_sync needs a SessionMap with plain methods"
        )
        session = self._known(request, stored, user)
        if session is not None:
            return session
        agent = self.make_agent(request, ChatSession(owner=user))
        try:
            chat = agent.client.get_chat(request.coder_chat_id)
        except CoderApiError as exc:
            if exc.status in _NOT_FOUND_STATUSES:
                raise ChatNotFoundError() from None
            raise
        finally:
            agent.close(archive=False)
        return self._continued(request, chat, user)

    # -- one turn -------------------------------------------------------------------------------

    def _finish_metadata(
        self, agent: Any, request: ChatRequest, session: ChatSession
    ) -> Callable[[], Mapping[str, Any]]:
        def build() -> Mapping[str, Any]:
            meta: dict[str, Any] = _coder_metadata(agent)
            if self.message_metadata is not None:
                meta.update(self.message_metadata(request, session) or {})
            return meta

        return build

    def _failure_hooks(
        self, agent: Any, request: ChatRequest, session: ChatSession, raised: list[bool]
    ) -> tuple[Callable[[BaseException], str], Callable[[Any], None]]:
        """``on_error`` for the turn (which notes in ``raised`` that the turn raised), and a
        watcher of its parts: both log a failed turn."""

        def log(text: str) -> None:
            chat_id = getattr(agent, "chat_id", None) or session.chat_id
            logger.warning(
                "a chat turn failed (chat %s, UI chat %r): %s", chat_id, request.id, text
            )

        def failed(exc: BaseException) -> str:
            raised.append(True)
            text = _failure_text(exc, self.on_error)
            log(text)
            return text

        def seen(part: Any) -> None:
            if isinstance(part, ErrorPart):
                log(part.error.message)

        return failed, seen

    def _edit_plan(self, request: ChatRequest, before: ChatSession) -> int | None:
        """The Coder message the request's prompt replaces: its id, ``_NEWEST_PROMPT`` for
        the chat's newest prompt (a regenerate the backend has no record of), or ``None``
        for a new prompt."""
        if request.replaces is None or before.chat_id is None:
            return None
        known = before.message_ids.get(request.replaces)
        if known is not None:
            return known
        if request.trigger == "regenerate-message":
            return _NEWEST_PROMPT
        raise ChatRequestError(
            "the edited message is not one this backend sent: send it as a new message"
        )

    def _prompt_id(self, request: ChatRequest, agent: Any, raised: list[bool]) -> bool:
        """Whether to record the Coder id of the turn's user message: a turn that raised may
        not have sent it."""
        return not raised and request.user_message_id is not None and agent.chat_id is not None

    def _label_new_chat(self, before: ChatSession, agent: Any) -> Any:
        """The labelling call for a chat this turn made for a signed-in user, else ``None``."""
        chat_id = getattr(agent, "chat_id", None)
        if before.owner is None or before.chat_id is not None or chat_id is None:
            return None
        return agent.client.update_chat(
            chat_id, labels={self.owner_label: owner_label_value(before.owner)}
        )

    async def _turn(self, request: ChatRequest, before: ChatSession) -> AsyncGenerator[bytes, None]:
        agent = self.make_agent(request, before)
        raised: list[bool] = []
        failed, seen = self._failure_hooks(agent, request, before, raised)

        async def edit() -> int | None:
            plan = self._edit_plan(request, before)
            if plan == _NEWEST_PROMPT:
                return next(iter(p.id for p in await agent.prompts(limit=1)), None)
            return plan

        parts = _agent_parts(agent, list(request.prompt), seen, edit)
        frames = self._live[request.id] = _TurnFrames(before.owner)
        try:
            chunks = ui_message_chunks(
                parts,
                message_id=_new_message_id(),
                on_error=failed,
                finish_metadata=self._finish_metadata(agent, request, before),
            )
            async for chunk in chunks:
                frame = encode_sse(chunk)
                frames.add(frame)
                yield frame
            frames.add(SSE_DONE)
            yield SSE_DONE
        finally:
            self._forget(request.id, frames)
            # Leaving early (the client left) leaves the agent's stream, which interrupts the
            # run; the stream's exit does not wait, so this cannot be held up.
            await parts.aclose()
            await self._after_turn(request, before, agent, raised)

    def _forget(self, ui_chat_id: str, frames: _TurnFrames) -> None:
        """The turn is over: its readers end, and the chat has no turn in flight unless a
        later request of the same chat started one meanwhile."""
        frames.close()
        if self._live.get(ui_chat_id) is frames:
            del self._live[ui_chat_id]

    async def _after_turn(
        self, request: ChatRequest, before: ChatSession, agent: Any, raised: list[bool]
    ) -> None:
        # Also when the response was cancelled (the client left): the cursor must be written
        # and the agent's connections closed, so this part is shielded (the agent bounds its
        # own requests).
        import anyio

        with anyio.CancelScope(shield=True):
            try:
                prompt = None
                if self._prompt_id(request, agent, raised):
                    assert request.user_message_id is not None
                    try:
                        [newest] = await agent.prompts(limit=1)
                        prompt = (request.user_message_id, newest.id)
                    except CoderAgentError as exc:
                        _unrecorded(agent, exc)
                session = _session_of(agent, before, prompt)
                await _maybe_await(self.sessions.put(request.id, session))
                try:
                    await _maybe_await(self._label_new_chat(before, agent))
                except CoderAgentError as exc:
                    _unlabelled(agent, exc)
            finally:
                await agent.aclose(archive=False)

    async def open_stream(
        self, body: Any, *, user: str | None = None
    ) -> AsyncGenerator[bytes, None]:
        """Check the request now (``ChatRequestError``, ``ChatNotFoundError``) and return the
        SSE bytes of its turn, on asyncio or trio (with that runtime's agent)."""
        request = self.parse(body)
        session = await self.session_for(request, user)
        return self._turn(request, session)

    async def stream(self, body: Any, *, user: str | None = None) -> AsyncIterator[bytes]:
        """SSE bytes for one request of ``user``, on asyncio or trio (with that runtime's
        agent). The body and the chat are checked before the first byte: ``ChatRequestError``
        or ``ChatNotFoundError`` is raised by the first ``__anext__``."""
        turn = await self.open_stream(body, user=user)
        try:
            async for frame in turn:
                yield frame
        finally:
            await turn.aclose()

    def _turn_sync(self, request: ChatRequest, before: ChatSession) -> Iterator[bytes]:
        agent = self.make_agent(request, before)
        raised: list[bool] = []
        failed, seen = self._failure_hooks(agent, request, before, raised)

        def edit() -> int | None:
            plan = self._edit_plan(request, before)
            if plan == _NEWEST_PROMPT:
                return next(iter(p.id for p in agent.prompts(limit=1)), None)
            return plan

        parts = _agent_parts_sync(agent, list(request.prompt), seen, edit)
        frames = self._live[request.id] = _TurnFrames(before.owner)
        try:
            for frame in sse_stream_sync(
                ui_message_chunks_sync(
                    parts,
                    message_id=_new_message_id(),
                    on_error=failed,
                    finish_metadata=self._finish_metadata(agent, request, before),
                )
            ):
                frames.add(frame)
                yield frame
        finally:
            self._forget(request.id, frames)
            parts.close()
            try:
                prompt = None
                if self._prompt_id(request, agent, raised):
                    assert request.user_message_id is not None
                    try:
                        [newest] = agent.prompts(limit=1)
                        prompt = (request.user_message_id, newest.id)
                    except CoderAgentError as exc:
                        _unrecorded(agent, exc)
                self.sessions.put(request.id, _session_of(agent, before, prompt))
                try:
                    self._label_new_chat(before, agent)
                except CoderAgentError as exc:
                    _unlabelled(agent, exc)
            finally:
                agent.close(archive=False)

    def open_stream_sync(self, body: Any, *, user: str | None = None) -> Iterator[bytes]:
        """``open_stream`` with a blocking agent (``coder_io_sync``): the checks run now."""
        request = self.parse(body)
        return self._turn_sync(request, self.session_for_sync(request, user))

    def stream_sync(self, body: Any, *, user: str | None = None) -> Iterator[bytes]:
        """SSE bytes for one request with a blocking agent (``coder_io_sync``)."""
        yield from self.open_stream_sync(body, user=user)

    # -- resuming -------------------------------------------------------------------------------

    def _live_turn(self, ui_chat_id: str, user: str | None) -> _TurnFrames | None:
        # A chat that is not the user's reads as one with no turn running: the page asks on
        # every load, before its chat has ever run, and the answer must tell nothing.
        live = self._live.get(ui_chat_id)
        return live if live is not None and live.owner == user else None

    async def resume(
        self, ui_chat_id: str, *, user: str | None = None
    ) -> AsyncIterator[bytes] | None:
        """The UI message stream of ``ui_chat_id``'s turn in flight, from its ``start`` (what
        ``useChat({resume: true})`` reads), or ``None`` when none of ``user``'s turns runs on
        that chat (answer 204): the same for a chat that is idle, unknown or another user's."""
        live = self._live_turn(ui_chat_id, user)
        return None if live is None else _replay(live)

    def resume_sync(self, ui_chat_id: str, *, user: str | None = None) -> Iterator[bytes] | None:
        """``resume``, read by a blocking caller."""
        live = self._live_turn(ui_chat_id, user)
        return None if live is None else _replay_sync(live)

    # -- web framework glue ---------------------------------------------------------------------

    def response(self, body: Any) -> Any:
        """A Starlette / FastAPI ``StreamingResponse`` running ``stream`` for the single-user
        case (an asyncio agent; Starlette serves on asyncio). The body is parsed now, so a bad
        one raises ``ChatRequestError`` in the handler, which can answer 400. ``handle`` does
        the whole route, users included."""
        return streaming_response(self.stream(self.parse(body)))

    def response_sync(self, body: Any, *, user: str | None = None) -> Any:
        """``response`` for a blocking agent, with ``user``'s checks done now (call it from a
        plain ``def`` route, which Starlette runs in its thread pool): Starlette iterates the
        turn in its thread pool too, so the event loop never blocks."""
        return streaming_response(self.open_stream_sync(body, user=user))

    async def handle(self, web_request: Any) -> Any:
        """The whole ``POST {api}`` route on Starlette / FastAPI: the user from ``authorize``,
        the body, the chat, then the turn's stream. Problems answer in plain text, which
        ``useChat`` shows as the error's message: 401 (no user), 400 (a body that cannot
        run), 404 (not the user's chat), 502 (Coder refused)."""
        try:
            user = await self.user_of(web_request)
            body = await web_request.body()
            return streaming_response(await self.open_stream(body, user=user))
        except CoderAgentError as exc:
            return _error_response(exc)

    async def handle_resume(self, web_request: Any, ui_chat_id: str) -> Any:
        """The ``GET {api}/{id}/stream`` route ``useChat({resume: true})`` calls: the turn
        in flight's stream, else 204 (also for a chat that is not the user's)."""
        try:
            user = await self.user_of(web_request)
            frames = await self.resume(ui_chat_id, user=user)
        except CoderAgentError as exc:
            return _error_response(exc)
        if frames is None:
            from starlette.responses import Response

            return Response(status_code=204)
        return streaming_response(frames)


def _unrecorded(agent: Any, exc: CoderAgentError) -> None:
    # Only a later regenerate or edit of this message is affected (it is refused).
    logger.warning("the prompt of chat %s could not be read back: %s", agent.chat_id, exc)


def _unlabelled(agent: Any, exc: CoderAgentError) -> None:
    # The session map still binds the chat to its user; only a restart's check is lost.
    logger.warning("the new chat %s could not be labelled with its owner: %s", agent.chat_id, exc)


def _error_response(exc: CoderAgentError) -> Any:
    """A plain-text answer for a request the bridge cannot run (its text is the message)."""
    from starlette.responses import PlainTextResponse

    if isinstance(exc, ChatUnauthorizedError):
        status = 401
    elif isinstance(exc, ChatNotFoundError):
        status = 404
    elif isinstance(exc, ChatRequestError):
        status = 400
    else:
        status = 502
        logger.warning("a chat request failed: %s", exc)
    text = api_error_text(exc) if isinstance(exc, CoderApiError) else str(exc)
    return PlainTextResponse(text, status_code=status)


_response_class: Any = None


def _ui_response_class() -> Any:
    """A ``StreamingResponse`` that also watches for the client leaving: Starlette otherwise
    notices only when its next write fails, and a turn that streams nothing for a while (a
    slow tool, a long model step) would run on for nobody."""
    global _response_class
    if _response_class is None:
        import anyio
        from starlette.responses import StreamingResponse

        class UIMessageStreamResponse(StreamingResponse):
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                async with anyio.create_task_group() as group:

                    async def stream() -> None:
                        try:
                            await self.stream_response(send)
                        except OSError:
                            pass  # the client left while a chunk was being written
                        group.cancel_scope.cancel()

                    group.start_soon(stream)
                    await self.listen_for_disconnect(receive)
                    # The client left: cancelling the body leaves the agent's stream early,
                    # which interrupts the run on the server.
                    group.cancel_scope.cancel()
                if self.background is not None:
                    await self.background()

        _response_class = UIMessageStreamResponse
    return _response_class


def streaming_response(body: AsyncIterable[bytes] | Iterable[bytes], status_code: int = 200) -> Any:
    """A Starlette ``StreamingResponse`` with the UI message stream headers that stops
    iterating ``body`` as soon as the client disconnects (Starlette and anyio are imported
    here, on first use)."""
    return _ui_response_class()(
        body, status_code=status_code, headers=dict(UI_MESSAGE_STREAM_HEADERS)
    )
