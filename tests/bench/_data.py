"""Benchmark inputs: the reference transcripts, framed as the server frames them.

Transcripts are generated, never committed: ``gen_transcript.py`` (in ``../shared/bench``
beside the project, or ``$CODER_SHARED_DIR/bench``) is run with this interpreter into
``tests/bench/_data/`` (git-ignored) the first time a size is needed. Its format is described
in ``TRANSCRIPT-FORMAT.md`` beside it.

Frames come two ways (wire 4.2): one event per WebSocket text frame (``[event]\\n``), and
batched, up to 256 events per frame, as the real server sends a backlog. ``ws_stream`` turns
frames into the bytes a server writes after the upgrade, built with a wsproto server
connection, so the client's WebSocket layer can be measured too.
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

__all__ = [
    "BATCH",
    "CHAT_ID",
    "DATA_DIR",
    "SharedMissing",
    "batched_frames",
    "chunked",
    "generator_path",
    "one_event_frames",
    "shared_dir",
    "transcript_lines",
    "transcript_path",
    "transcript_text",
    "ws_frames",
    "ws_handshake",
]

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA_DIR = pathlib.Path(__file__).resolve().parent / "_data"
#: Events per frame in the batched framing: the real server's cap (wire 4.2).
BATCH = 256
#: The chat id every generated transcript uses.
CHAT_ID = "c0ffee00-1234-4abc-8def-0123456789ab"


class SharedMissing(Exception):
    """The shared directory with the transcript generator is not there."""


def shared_dir() -> pathlib.Path:
    """``$CODER_SHARED_DIR`` or ``../shared`` beside the project root."""
    return pathlib.Path(os.environ.get("CODER_SHARED_DIR", str(ROOT.parent / "shared")))


def generator_path() -> pathlib.Path:
    """The transcript generator; ``SharedMissing`` names the path looked at when absent."""
    path = shared_dir() / "bench" / "gen_transcript.py"
    if not path.is_file():
        raise SharedMissing(
            f"the transcript generator {path} is missing: the benchmarks need the shared "
            "directory beside the project (../shared) or CODER_SHARED_DIR pointing at it"
        )
    return path


def transcript_path(n: int, messages: int = 1) -> pathlib.Path:
    """The transcript with ``n`` deltas over ``messages`` assistant messages, generated on
    first use (deterministic: the generator is seeded)."""
    suffix = "" if messages == 1 else f"-m{messages}"
    path = DATA_DIR / f"transcript-{n}{suffix}.jsonl"
    if path.is_file():
        return path
    generator = generator_path()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            str(generator),
            "-n",
            str(n),
            "-m",
            str(messages),
            "-o",
            str(DATA_DIR),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if not path.is_file():  # pragma: no cover - the generator's naming changed
        raise SharedMissing(f"{generator} did not write {path.name}")
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
