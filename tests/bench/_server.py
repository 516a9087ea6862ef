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
    from coder_io_common.fake_server import FakeCoderServer
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
    server = FakeCoderServer(
        config=config, ping_interval=args.ping_interval, ping_timeout=args.ping_interval
    )
    if args.wake_by_chat:
        _wake_by_chat(server)
    return server


class _WakersByChat(dict[Any, "str | None"]):
    """The served fake's open WebSockets (wake-up event -> chat id, ``None`` for a watch),
    indexed by chat as well."""

    def __init__(self) -> None:
        super().__init__()
        self.by_chat: dict[str | None, set[Any]] = {}

    def __setitem__(self, event: Any, chat_id: str | None) -> None:
        super().__setitem__(event, chat_id)
        self.by_chat.setdefault(chat_id, set()).add(event)

    def pop(self, event: Any, default: Any = None) -> Any:
        chat_id = super().pop(event, default)
        events = self.by_chat.get(chat_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self.by_chat[chat_id]
        return chat_id


def _wake_by_chat(server: Any) -> None:
    """Make the fake wake only the streams that may have something to send: the streams of
    the chats its ticker advanced (and every watch), and after a REST request none but the
    ticker. The fake wakes every open stream for each request and each tick, which costs it
    time in the square of the open chats; a fleet's requests only create chats (no stream is
    open on a chat yet when it is created), so nothing it measures changes."""
    serving = server._serving
    wakers = serving.wakers = _WakersByChat()

    def wake_all() -> None:
        if serving.tick_wake is not None:
            serving.tick_wake.set()
        if serving.stopping:
            for event in list(wakers):
                event.set()

    def wake_chats(chat_ids: set[str]) -> None:
        for chat_id in (*chat_ids, None):
            for event in wakers.by_chat.get(chat_id, ()):
                event.set()

    serving.wake_all = wake_all
    serving.wake_chats = wake_chats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench._server")
    parser.add_argument("--deltas", type=int, required=True)
    parser.add_argument("--chunk-delay", type=float, default=1e-5)
    parser.add_argument("--start-delay", type=float, default=0.3)
    parser.add_argument("--ping-interval", type=float, default=15.0)
    parser.add_argument("--wake-by-chat", action="store_true")
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
