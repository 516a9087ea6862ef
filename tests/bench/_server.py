"""The fake Coder server for the end-to-end, memory and fleet benchmarks, in its own process.

Run as ``python -m tests.bench._server --deltas N``: every turn on any chat streams the
transcript of ``N`` deltas (the same reasoning and text, in the same 4-character deltas, as
``transcript-N.jsonl``), then commits it; the prompt ``warm up`` gets a short answer. One JSON line on stdout gives ``url``, ``token``,
``organization_id`` and ``model``; the server stops when stdin closes.

A separate process keeps the server's work (JSON encoding, framing) off the measured client's
interpreter and CPU time.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._data import transcript_lines

__all__ = ["WARM_UP", "main", "transcript_texts"]

#: The prompt a measuring process sends first; the server answers it with one short sentence.
WARM_UP = "warm up"


def transcript_texts(n: int) -> tuple[str, str]:
    """The reasoning and the text of the transcript's (single) assistant message."""
    for line in reversed(transcript_lines(n)):
        if line.startswith('{"type":"message"'):
            content = json.loads(line)["message"]["content"]
            reasoning = "".join(p["text"] for p in content if p["type"] == "reasoning")
            text = "".join(p["text"] for p in content if p["type"] == "text")
            return reasoning, text
    raise ValueError(f"transcript-{n} has no message snapshot")


def _server(args: argparse.Namespace) -> Any:
    from coder_integrations.fake_server import FakeCoderServer
    from coder_proto.fake import FakeConfig, Say, Script, ScriptBook, Think

    reasoning, text = transcript_texts(args.deltas)
    items: list[Any] = [Think(reasoning, chunk=4)] if reasoning else []
    items.append(Say(text, chunk=4))
    script = Script(tuple(items), chunk_delay=args.chunk_delay)
    book = ScriptBook(default=script)
    # A short answer to the benchmarks' warm-up prompt.
    book.add(rf"^{WARM_UP}$", Script((Say("Ready.", chunk=4),)))
    config = FakeConfig(
        chunk_delay=args.chunk_delay,
        run_start_delay=args.start_delay,
        scripts=book,
        message_id_gaps=False,
        # The real server keeps at most ~1 MB of parts per episode for replay and drops the
        # rest (server-behaviour 3.3); a benchmark turn must arrive whole.
        part_buffer_bytes=1 << 40,
    )
    return FakeCoderServer(
        config=config, ping_interval=args.ping_interval, ping_timeout=args.ping_interval
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench._server")
    parser.add_argument("--deltas", type=int, required=True)
    parser.add_argument("--chunk-delay", type=float, default=1e-5)
    parser.add_argument("--start-delay", type=float, default=0.3)
    parser.add_argument("--ping-interval", type=float, default=15.0)
    args = parser.parse_args(argv)
    with _server(args) as server:
        model = getattr(server, "model", None)
        info = {
            "url": server.url,
            "token": server.token,
            "organization_id": server.organization_id,
            "model": model if isinstance(model, str) else None,
        }
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
