"""Benchmark inputs: transcripts of one streamed turn, framed as the server frames them.

Transcripts come from ``_transcript.py`` (its docstring describes them). A size is generated
the first time it is needed and kept in ``tests/bench/_data/`` (git-ignored), so the child
processes of the end-to-end and memory benchmarks read the same bytes without generating them
again; the file name carries the generator's version.

Frames come two ways: one event per WebSocket text frame (``[event]\\n``), and batched, up to
256 events per frame, as the real server sends a backlog. ``ws_frames`` turns frames into the
bytes a server writes after the upgrade, built with a wsproto server connection, so the
client's WebSocket layer can be measured too.
"""

from __future__ import annotations

import functools
import os
import pathlib
import tempfile

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from . import _transcript

__all__ = [
    "BATCH",
    "CHAT_ID",
    "DATA_DIR",
    "batched_frames",
    "chunked",
    "one_event_frames",
    "transcript_lines",
    "transcript_path",
    "transcript_text",
    "ws_frames",
    "ws_handshake",
]

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA_DIR = pathlib.Path(__file__).resolve().parent / "_data"
#: Events per frame in the batched framing: the real server's cap.
BATCH = 256
#: The chat every generated transcript uses.
CHAT_ID = _transcript.CHAT_ID


def transcript_path(n: int, messages: int = 1) -> pathlib.Path:
    """The transcript with ``n`` deltas over ``messages`` assistant messages, generated on
    first use."""
    suffix = "" if messages == 1 else f"-m{messages}"
    path = DATA_DIR / f"transcript-v{_transcript.VERSION}-{n}{suffix}.jsonl"
    if path.is_file():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed: benchmark processes started together may race for a size.
    fd, tmp = tempfile.mkstemp(dir=DATA_DIR, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for line in _transcript.lines(n, messages):
                f.write(line)
                f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


@functools.lru_cache(maxsize=8)
def transcript_text(n: int, messages: int = 1) -> str:
    return transcript_path(n, messages).read_text(encoding="utf-8")


def transcript_lines(n: int, messages: int = 1) -> list[str]:
    """One JSON event per item, in stream order."""
    return transcript_text(n, messages).splitlines()


def one_event_frames(lines: list[str]) -> list[str]:
    """``[event]\\n`` per event: the worst case, one frame per delta."""
    return [f"[{line}]\n" for line in lines]


def batched_frames(lines: list[str], batch: int = BATCH) -> list[str]:
    """Up to ``batch`` events per frame, as the server sends a backlog."""
    return ["[" + ",".join(lines[i : i + batch]) + "]\n" for i in range(0, len(lines), batch)]


def ws_handshake(request: bytes) -> tuple[WSConnection, bytes]:
    """A wsproto server connection that accepted the client's upgrade ``request``, and the
    response bytes to give the client."""
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(request)
    for event in server.events():
        if isinstance(event, Request):
            return server, server.send(AcceptConnection())
    raise RuntimeError("the client's upgrade request was not understood")


def ws_frames(server: WSConnection, frames: list[str]) -> bytes:
    """The bytes of ``frames`` as server text frames (unmasked, uncompressed)."""
    return b"".join(server.send(TextMessage(data=frame)) for frame in frames)


def chunked(data: bytes, size: int) -> list[bytes]:
    """``data`` as successive socket reads of at most ``size`` bytes."""
    return [data[i : i + size] for i in range(0, len(data), size)]
