"""The core's hot path as benchmarks drive it: frame text (or WebSocket bytes) in, output
parts out, through ``StreamReader`` (replay filter, wire 4.5 / state machines B.2),
``TurnTranslator`` (state machines A) and its ``UsageAccumulator`` (F).

Each ``*_run`` function builds what a run needs (untimed) and returns the function to time.
The consumer touches every output part and drops it, like an application printing text.
"""

from __future__ import annotations

import collections
import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from coder_proto import Finish, ReasoningDelta, TextDelta
from coder_proto._actions import SendData
from coder_proto._json import orjson_loads, std_loads
from coder_proto._stream.reader import StreamReader
from coder_proto._stream.translator import DELTA_TYPES, TurnTranslator
from coder_proto._wire import unicode as wire_unicode
from coder_proto._wire.events import parse_frame

from ._data import CHAT_ID, chunked, ws_frames, ws_handshake

__all__ = [
    "READ_SIZE",
    "backends",
    "check_output",
    "frame_entry",
    "json_backend",
    "loads_floor",
    "open_reader",
    "parse_run",
    "reader_frames_run",
    "translate_frames_run",
    "ws_bytes",
    "ws_run",
]

#: Bytes per socket read fed to the reader (what an adapter's 64 KiB reads give).
READ_SIZE = 65536

Timed = Callable[[], object]


Loads = Callable[[str | bytes], Any]


def backends() -> dict[str, tuple[Loads, Loads]]:
    """``name -> (floor, core)`` decoders: the standard library always (the floor is
    ``json.loads``, the core runs ``coder_proto._json.std_loads``, its shortcut to the same
    decoder), and orjson when it is installed (the floor is ``orjson.loads``, the core runs
    ``coder_proto._json.orjson_loads``, what ``coder_proto._json.loads`` is then)."""
    out: dict[str, tuple[Loads, Loads]] = {"json": (json.loads, std_loads)}
    try:
        import orjson
    except ImportError:
        return out
    out["orjson"] = (orjson.loads, orjson_loads)
    return out


@contextlib.contextmanager
def json_backend(loads: Loads) -> Iterator[None]:
    """Make the wire parser decode frames with ``loads`` for the duration."""
    saved = getattr(wire_unicode, "loads")  # noqa: B009 - not re-exported by the module
    setattr(wire_unicode, "loads", loads)  # noqa: B010
    try:
        yield
    finally:
        setattr(wire_unicode, "loads", saved)  # noqa: B010


def open_reader() -> tuple[StreamReader, Any]:
    """A ``StreamReader`` whose connection completed the upgrade against an in-memory wsproto
    server (returned too, to frame what it sends)."""
    reader = StreamReader(
        chat_id=CHAT_ID,
        base_url="http://127.0.0.1:9",
        prefix="/api/v2/chats",
        after_id=1,
        token=None,
        reader_id=1,
    )
    reader.start(0.0)
    reader.actions()
    reader.connection_made(1, 0.0)
    request = b"".join(a.data for a in reader.actions() if isinstance(a, SendData))
    server, response = ws_handshake(request)
    reader.data_received(1, response, 0.0)
    reader.actions()
    if reader.done or reader.state != "open":  # pragma: no cover - the reader's API changed
        raise RuntimeError(f"the stream reader did not open: {reader!r}")
    return reader, server


def frame_entry(reader: StreamReader) -> Callable[[str, float], object]:
    """The reader's entry point for one already-decoded text frame.

    A public ``frame_received(text, now)`` is used when the reader has one; otherwise the
    private ``_on_frame`` that ``data_received`` calls for each text message (the same code
    path, minus wsproto).
    """
    entry = getattr(reader, "frame_received", None)
    if entry is None:
        entry = reader._on_frame
    return entry


def loads_floor(frames: list[str], loads: Loads) -> Callable[[], Timed]:
    """The floor: decode every frame, nothing else."""

    def factory() -> Timed:
        def run() -> object:
            for frame in frames:
                loads(frame)
            return None

        return run

    return factory


def parse_run(frames: list[str]) -> Callable[[], Timed]:
    """``parse_frame`` alone: JSON plus the wire model."""

    def factory() -> Timed:
        def run() -> object:
            count = 0
            for frame in frames:
                count += len(parse_frame(frame))
            return count

        return run

    return factory


def reader_frames_run(frames: list[str]) -> Callable[[], Timed]:
    """Frame text through the reader only (parse + replay filter), events dropped."""

    def factory() -> Timed:
        reader, _ = open_reader()
        entry = frame_entry(reader)
        events = reader.events

        def run() -> object:
            for frame in frames:
                entry(frame, 0.0)
                events.clear()
            return None

        return run

    return factory


def _drain(
    reader: StreamReader, translator: TurnTranslator, collect: list[Any] | None
) -> Callable[[], int]:
    """The consumer of the reader's queue, as a segment's read loop consumes it: the run of
    message parts at the front in one ``ingest_run`` (read where they wait in the queue; none
    when another event heads it), any other event by itself. Every output part is touched
    (counted) and dropped, or kept in ``collect``."""
    events = reader.events
    popleft = events.popleft
    peek = collections.deque.__getitem__
    ingest = translator.ingest
    ingest_run = translator.ingest_run

    def drain() -> int:
        count = 0
        while events:
            parts = ingest_run(events)
            if not parts and events and type(peek(events, 0)) not in DELTA_TYPES:
                parts = ingest(popleft())
            for part in parts:
                count += 1
                if collect is not None:
                    collect.append(part)
        return count

    return drain


def translate_frames_run(
    frames: list[str], *, backlog: bool = False, collect: list[Any] | None = None
) -> Callable[[], Timed]:
    """The core: frame text -> reader -> translator -> output parts (finish included).

    ``backlog``: every frame is handed to the reader before the consumer reads anything.
    ``collect``: keep the parts (for checking), instead of dropping them.
    """

    def factory() -> Timed:
        reader, _ = open_reader()
        entry = frame_entry(reader)
        translator = TurnTranslator(turn_cursor=1)
        drain = _drain(reader, translator, collect)

        def run() -> object:
            count = 0
            if backlog:
                for frame in frames:
                    entry(frame, 0.0)
                count += drain()
            else:
                for frame in frames:
                    entry(frame, 0.0)
                    count += drain()
            for part in translator.finish():
                count += 1
                if collect is not None:
                    collect.append(part)
            return count

        return run

    return factory


def ws_bytes(frames: list[str]) -> tuple[Callable[[], StreamReader], list[bytes]]:
    """A factory of freshly opened readers, and the socket reads carrying ``frames`` after
    the upgrade (server frames do not depend on the handshake, so one encoding serves every
    reader)."""
    _, server = open_reader()
    data = ws_frames(server, frames)
    return (lambda: open_reader()[0]), chunked(data, READ_SIZE)


def ws_run(
    frames: list[str], *, backlog: bool = False, collect: list[Any] | None = None
) -> Callable[[], Timed]:
    """The core from WebSocket bytes: socket reads -> wsproto -> reader -> translator."""
    new_reader, reads = ws_bytes(frames)

    def factory() -> Timed:
        reader = new_reader()
        translator = TurnTranslator(turn_cursor=1)
        drain = _drain(reader, translator, collect)
        data_received = reader.data_received

        def run() -> object:
            count = 0
            if backlog:
                for chunk in reads:
                    data_received(1, chunk, 0.0)
            for chunk in reads if not backlog else ():
                data_received(1, chunk, 0.0)
                count += drain()
            count += drain()
            for part in translator.finish():
                count += 1
                if collect is not None:
                    collect.append(part)
            if reader.done:  # pragma: no cover - a decoding failure would void the numbers
                raise RuntimeError(f"the reader failed: {reader.error!r}")
            return count

        return run

    return factory


def expected_output(lines: list[str]) -> dict[str, int]:
    """What the transcript must translate to (TRANSCRIPT-FORMAT "checksums for a port")."""
    text_chars = 0
    reasoning_chars = 0
    for line in lines:
        if '"type":"message_part"' not in line[:60]:
            continue
        event = json.loads(line)
        part = event["message_part"]["part"]
        if part["type"] == "text":
            text_chars += len(part["text"])
        elif part["type"] == "reasoning":
            reasoning_chars += len(part["text"])
    deltas = sum(1 for line in lines if '"type":"message_part"' in line[:60])
    return {"text_chars": text_chars, "reasoning_chars": reasoning_chars, "output_tokens": deltas}


def check_output(parts: list[Any], lines: list[str]) -> None:
    """Raise ``AssertionError`` unless ``parts`` carry exactly the transcript's text,
    reasoning and usage, ending with one ``Finish`` with reason ``stop``."""
    want = expected_output(lines)
    text = sum(len(p.delta) for p in parts if type(p) is TextDelta)
    reasoning = sum(len(p.delta) for p in parts if type(p) is ReasoningDelta)
    finishes = [p for p in parts if type(p) is Finish]
    got = {
        "text_chars": text,
        "reasoning_chars": reasoning,
        "output_tokens": finishes[-1].usage.output_tokens if finishes else -1,
    }
    if got != want or len(finishes) != 1 or finishes[0].finish_reason != "stop":
        raise AssertionError(f"wrong translation: got {got}, want {want}")
