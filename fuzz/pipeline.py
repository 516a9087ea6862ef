"""The stream pipeline the fuzzers drive: ``StreamReader`` (framing, replay dedup, redials)
feeding one ``TurnTranslator`` (state machines A-C), over in-memory connections.

``run_stream(connections, ...)`` plays a list of connections, each a list of text frames
(``bytes`` items are sent raw, to exercise the framing), ending every connection but the last
with a drop; the reader redials after its backoff (virtual time) and the next connection
answers. Events are ingested up to the first terminal status, as a segment reads them.
Everything is bounded by the input: a step budget guards the loop.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any

import attrs

from coder_proto import CoderAgentError, ErrorPart, Finish, ReasoningDelta, TextDelta, ToolCall
from coder_proto._actions import CloseConnection, OpenConnection, SendData
from coder_proto._constants import TERMINAL_STATUSES
from coder_proto._stream.reader import StreamReader
from coder_proto._stream.translator import TurnTranslator
from coder_proto._wire.events import StatusEvent
from coder_proto.transcript._replay import text_frame

__all__ = ["StreamOutcome", "handshake_response", "run_stream"]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Finding(AssertionError):
    """An invariant broke: a bug in the core (or in a harness)."""


def handshake_response(request: bytes) -> bytes:
    """The 101 answer a server gives to the client's upgrade ``request`` (RFC 6455 4.2.2)."""
    key = b""
    for line in request.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )


@attrs.frozen(kw_only=True)
class StreamOutcome:
    """What the pipeline produced."""

    text: str
    reasoning: str
    client_calls: tuple[str, ...]
    usage: dict[str, Any] | None
    error: CoderAgentError | None
    errors_seen: int
    terminal_status: str | None
    parts: int


def _check_error(error: BaseException | None) -> None:
    if error is None:
        return
    if not isinstance(error, CoderAgentError):
        raise Finding(f"a non-library error escaped: {error!r}") from error
    if "internal error" in error.message:
        raise Finding(f"an internal error was wrapped: {error.message}")


def run_stream(
    connections: Sequence[Sequence[str | bytes]],
    *,
    chat_id: str = "chat-1",
    after_id: int | None = None,
    dynamic_tool_names: Sequence[str] = (),
    chunk: int = 0,
    max_steps: int = 100_000,
) -> StreamOutcome:
    """Play ``connections`` through a reader and a translator (see the module docstring).
    ``chunk`` > 0 feeds the bytes in pieces of that size. Raises ``Finding`` when anything but a
    library error escapes."""
    now = 1000.0
    reader = StreamReader(
        chat_id=chat_id,
        base_url="http://fuzz.invalid",
        prefix="/api/v2/chats",
        after_id=after_id,
        token=None,
        reader_id=1,
    )
    translator = TurnTranslator(
        dynamic_tool_names=dynamic_tool_names,
        turn_cursor=after_id or 0,
        chat_id=chat_id,
    )
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[str] = []
    errors = 0
    finish: Finish | None = None
    parts_count = 0
    settled = False
    error: CoderAgentError | None = None
    steps = 0

    def consume(parts: list[Any]) -> None:
        nonlocal errors, finish, parts_count
        for part in parts:
            parts_count += 1
            kind = type(part)
            if kind is TextDelta:
                text.append(part.delta)
            elif kind is ReasoningDelta:
                reasoning.append(part.delta)
            elif kind is ToolCall and not part.provider_executed:
                calls.append(part.tool_call_id)
            elif kind is ErrorPart:
                errors += 1
            elif kind is Finish:
                finish = part

    try:
        reader.start(now)
        index = 0
        pending: list[bytes] = []
        conn_id = 0
        while not reader.done and not settled:
            steps += 1
            if steps > max_steps:
                raise Finding("the pipeline did not settle within its step budget")
            moved = False
            for action in reader.actions():
                moved = True
                if isinstance(action, OpenConnection):
                    conn_id = action.conn_id
                    reader.connection_made(conn_id, now)
                elif isinstance(action, SendData) and action.conn_id == conn_id and not pending:
                    if index < len(connections):
                        frames = connections[index]
                        index += 1
                        data = handshake_response(action.data)
                        pending = [data] + [
                            f if isinstance(f, bytes) else text_frame(f) for f in frames
                        ]
                        pending.append(b"")  # the end of this connection
                    else:
                        pending = [b""]
                elif isinstance(action, CloseConnection):
                    pending = []
            if pending:
                data = pending.pop(0)
                moved = True
                if not data:
                    reader.connection_lost(conn_id, now)
                elif chunk > 0:
                    for i in range(0, len(data), chunk):
                        reader.data_received(conn_id, data[i : i + chunk], now)
                else:
                    reader.data_received(conn_id, data, now)
                while reader.events and not settled:
                    event = reader.events.popleft()
                    consume(translator.ingest(event))
                    if translator.dead_end is not None:
                        raise translator.dead_end
                    if (
                        type(event) is StatusEvent
                        and event.status in TERMINAL_STATUSES
                        and translator.terminal_status is not None
                    ):
                        settled = True
            if not moved:
                deadline = reader.next_deadline()
                if deadline is None:
                    break
                now = max(now, deadline)
                reader.tick(now)
        consume(translator.finish())
        error = reader.error
    except CoderAgentError as exc:
        error = exc
    except Finding:
        raise
    except Exception as exc:
        _check_error(exc)
    _check_error(error)
    usage = None
    if finish is not None:
        usage = finish.usage.to_dict()
        usage.pop("raw", None)
    return StreamOutcome(
        text="".join(text),
        reasoning="".join(reasoning),
        client_calls=tuple(calls),
        usage=usage,
        error=error,
        errors_seen=errors,
        terminal_status=translator.terminal_status,
        parts=parts_count,
    )
