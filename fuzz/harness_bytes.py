"""The byte-level harness: arbitrary bytes and frames into the WebSocket client, the stream
reader and the turn translator. Runs under atheris (``python -m fuzz.harness_bytes
fuzz/_work/bytes_corpus -max_total_time=600``, with the ``fuzz`` extra installed) or under the
built-in mutation engine of ``python -m fuzz``.

``TestOneInput(data)`` picks a target from the first byte:

* ``0``: ``WebSocketClient.receive_data`` with the bytes in chunks (after a valid 101 answer
  or not), then the end of stream;
* ``1``: the reader + translator pipeline (``fuzz.pipeline.run_stream``): frames separated by
  ``0xFF``, connections by ``0xFE``;
* ``2``: ``parse_frame`` of the bytes as text, every event into a ``TurnTranslator``.

Only library errors (``CoderAgentError``) may escape the core; anything else, or an
``internal error`` wrapper, is a finding. Every loop is bounded by the input's size.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from coder_proto import CoderAgentError
from coder_proto._stream.translator import TurnTranslator
from coder_proto._stream.websocket import WebSocketClient
from coder_proto._wire.events import parse_frame

from .pipeline import Finding, handshake_response, run_stream

__all__ = ["MAX_INPUT", "TestOneInput", "seed_inputs"]

#: Inputs are cut to this size: every loop below is bounded by it.
MAX_INPUT = 64 * 1024
FRAME_SEP = 0xFF
CONN_SEP = 0xFE


def _websocket(body: bytes) -> None:
    client = WebSocketClient("ws://fuzz.invalid/api/v2/chats/c/stream", token=None)
    request = client.initiate()
    flags = body[0] if body else 0
    data = body[1:]
    if flags & 1:
        data = handshake_response(request) + data
    step = (flags >> 1) % 17 + 1 if flags & 0x40 else len(data) or 1
    for i in range(0, len(data), step):
        for event in client.receive_data(data[i : i + step]):
            _ = event
        client.data_to_send()
    client.receive_data(None)
    if flags & 0x80:
        client.close()
        client.data_to_send()


def _split(data: bytes, sep: int) -> list[bytes]:
    return data.split(bytes((sep,)))


def _reader(body: bytes) -> None:
    connections: list[list[str | bytes]] = []
    for raw_conn in _split(body, CONN_SEP)[:8]:
        frames: list[str | bytes] = []
        for raw in _split(raw_conn, FRAME_SEP)[:512]:
            if raw[:1] == b"\x00":
                frames.append(bytes((0x81, min(len(raw) - 1, 125))) + raw[1:126])
            else:
                frames.append(raw.decode("utf-8", "replace"))
        connections.append(frames)
    run_stream(connections, chat_id="chat-1", dynamic_tool_names=("get_weather",))


def _translator(body: bytes) -> None:
    translator = TurnTranslator(dynamic_tool_names=("get_weather",), chat_id="chat-1")
    for raw in _split(body, FRAME_SEP)[:512]:
        try:
            events = parse_frame(raw.decode("utf-8", "replace"))
        except CoderAgentError:
            continue
        for event in events:
            translator.ingest(event)
            if translator.dead_end is not None:
                return
    translator.finish()


_TARGETS = (_websocket, _reader, _translator)


def TestOneInput(data: bytes) -> None:
    """One input (atheris' entry point). Raises ``Finding`` (or the escaped exception)."""
    if not data:
        return
    body = data[1:MAX_INPUT]
    try:
        _TARGETS[data[0] % len(_TARGETS)](body)
    except CoderAgentError as exc:
        if "internal error" in exc.message:
            raise Finding(f"an internal error was wrapped: {exc.message}") from exc


def seed_inputs(streams: Iterable[Iterable[Iterable[str]]]) -> list[bytes]:
    """Seeds for the three targets from recorded streams (lists of connections of frames)."""
    out: list[bytes] = [b"\x00\x01", b"\x00\x41\x81\x05hello", b"\x02[]"]
    for connections in streams:
        conns = [bytes((FRAME_SEP,)).join(f.encode() for f in frames) for frames in connections]
        joined = bytes((CONN_SEP,)).join(conns)
        out.append(b"\x01" + joined)
        out.append(b"\x02" + conns[0] if conns else b"\x02")
        first = next(iter(connections), [])
        payload = b"".join(
            bytes((0x81, 126)) + len(f.encode()).to_bytes(2, "big") + f.encode()
            if len(f.encode()) >= 126
            else bytes((0x81, len(f.encode()))) + f.encode()
            for f in first
            if len(f.encode()) < 65536
        )
        out.append(b"\x00\x01" + payload)
    return out


def main() -> None:  # pragma: no cover - needs atheris
    import atheris

    atheris.instrument_all()
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()
