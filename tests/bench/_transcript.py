"""The benchmark transcripts: one streamed assistant turn as the server sends it.

A transcript of ``n`` deltas over ``messages`` assistant messages is, one wire event per line
(compact JSON, non-ASCII characters unescaped, as the server writes them)::

    status running
    for each assistant message (ids 2, 3, ...; id 1 is the user's prompt):
        message_part reasoning deltas   (a tenth of the message's deltas, rounded)
        message_part text deltas        (the rest)
        message                         (the committed message: the joined reasoning and
                                         text, and the message's usage)
    status waiting

The ``n`` deltas are split as evenly as possible over the messages (the first ones get one
more). Every delta is exactly ``CHUNK`` characters of sentence-like text, all in the Basic
Multilingual Plane, with the occasional newline, quoted word and non-ASCII character so JSON
escaping and UTF-8 decoding are part of the work. Deltas carry episode coordinates
(``history_version`` 1, ``generation_attempt`` 1, ``seq`` counting from 1 across the turn), as
current servers send them.

Every part, a delta's and a committed message's, has the server's shape: the members of every
part type that the server never omits (``url``, ``media_type``, ``file_name``, ``start_line``,
``end_line``, ``content``, ``context_file_path``, ``skill_name``) are written on each part, empty,
and all members come in the server's field order. Parts are laid out by the fake server's
``part_json``, as it writes them on its streams.

The output depends only on the arguments: the text comes from a ``random.Random`` seeded with
``SEED`` and the timestamps are fixed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from coder_proto.fake._rows import part_json

__all__ = [
    "CHAT_ID",
    "CHUNK",
    "REASONING_SHARE",
    "SEED",
    "VERSION",
    "events",
    "lines",
    "split_evenly",
    "usage_for",
]

#: Bumped whenever the output changes, so cached transcripts of an older version are not used.
VERSION = 2
#: The chat every transcript belongs to.
CHAT_ID = "c0ffee00-1234-4abc-8def-0123456789ab"
#: The user who sent the prompt and the model configuration that answered it.
USER_ID = "7e57ab1e-0000-4000-8000-00000000000a"
MODEL_CONFIG_ID = "5ca1ab1e-0000-4000-8000-00000000000b"
#: Characters per delta (about one token each).
CHUNK = 4
#: The share of each message's deltas that are reasoning (streamed before its text).
REASONING_SHARE = 0.1
SEED = 20250101
#: The id of the first assistant message (the prompt is message 1, so a stream opened after
#: it reads from ``after_id=1``).
FIRST_MESSAGE_ID = 2

_VOCABULARY = (
    "a an the this that each every some one two few many of to in on at by for with from "
    "into over under after before while agent chat model server client stream socket frame "
    "event delta message part snapshot status usage token cursor buffer queue workspace tool "
    "call result reply prompt turn step segment reader writer parser decoder encoder reads "
    "writes sends keeps drops joins splits opens closes starts ends waits runs checks counts "
    "quickly slowly once again first last next new old small large full empty whole partial"
)
_WORDS = tuple(_VOCABULARY.split())
#: Non-ASCII pieces, each one UTF-16 code unit per character.
_ACCENTED = ("café", "naïve", "résumé", "über", "señal", "façade", "déjà")
_SYMBOLS = ("—", "…", "°C", "±", "→")


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` counts differing by at most one, the larger ones first."""
    base, extra = divmod(total, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


class _Prose:
    """An endless supply of sentence-like text, cut into deltas of ``CHUNK`` characters."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.buffer = ""

    def _sentence(self) -> str:
        rng = self.rng
        words = []
        for _ in range(rng.randint(5, 14)):
            roll = rng.random()
            if roll < 0.003:
                words.append(f'"{rng.choice(_WORDS)}"')
            elif roll < 0.0075:
                words.append(rng.choice(_ACCENTED))
            elif roll < 0.012:
                words.append(rng.choice(_SYMBOLS))
            else:
                words.append(rng.choice(_WORDS))
        words[0] = words[0].capitalize()
        end = "\n" if rng.random() < 0.08 else " "
        return " ".join(words) + "." + end

    def deltas(self, count: int) -> list[str]:
        need = count * CHUNK
        while len(self.buffer) < need:
            self.buffer += self._sentence()
        text, self.buffer = self.buffer[:need], self.buffer[need:]
        return [text[i : i + CHUNK] for i in range(0, need, CHUNK)]


def usage_for(index: int, deltas: int, reasoning: int) -> dict[str, int]:
    """The usage of the ``index``-th assistant message (from 0) of ``deltas`` deltas, of which
    ``reasoning`` are reasoning: one output token per delta, a prompt that grows a little per
    step, a cache written by the first step and read by the later ones."""
    prompt = 1200 + 37 * index
    return {
        "input_tokens": prompt,
        "output_tokens": deltas,
        "total_tokens": prompt + deltas,
        "reasoning_tokens": reasoning,
        "cache_creation_tokens": 2048 if index == 0 else 0,
        "cache_read_tokens": 2048 * index,
        "context_limit": 200_000,
        "total_cost_micros": 1500 + 15 * deltas,
        "total_runtime_ms": 50 + deltas // 10,
    }


def _timestamp(index: int) -> str:
    """A fixed RFC 3339 time, one millisecond per event of the turn."""
    seconds, millis = divmod(index, 1000)
    minutes, seconds = divmod(seconds, 60)
    return f"2025-01-01T00:{minutes % 60:02d}:{seconds:02d}.{millis:03d}000Z"


def _status(value: str) -> dict[str, Any]:
    return {"type": "status", "chat_id": CHAT_ID, "status": {"status": value}}


def _part(kind: str, text: str) -> dict[str, Any]:
    """A text or reasoning part as the server writes it: every member it never omits, empty
    where the part's type does not use it, in its field order."""
    return part_json({"type": kind, "text": text}, zero_value_keys=True)


def _delta(kind: str, text: str, seq: int) -> dict[str, Any]:
    return {
        "type": "message_part",
        "chat_id": CHAT_ID,
        "message_part": {
            "role": "assistant",
            "part": _part(kind, text),
            "history_version": 1,
            "generation_attempt": 1,
            "seq": seq,
        },
    }


def events(n: int, messages: int = 1) -> Iterator[dict[str, Any]]:
    """The transcript's events, in stream order."""
    if messages < 1 or n < messages:
        raise ValueError(f"need at least one delta per message (n={n}, messages={messages})")
    prose = _Prose(random.Random(SEED))
    yield _status("running")
    emitted, seq = 1, 0
    for index, count in enumerate(split_evenly(n, messages)):
        reasoning_count = round(count * REASONING_SHARE)
        reasoning = prose.deltas(reasoning_count)
        text = prose.deltas(count - reasoning_count)
        for kind, chunks in (("reasoning", reasoning), ("text", text)):
            for chunk in chunks:
                seq += 1
                yield _delta(kind, chunk, seq)
        emitted += count
        content = [_part("reasoning", "".join(reasoning))] if reasoning else []
        content.append(_part("text", "".join(text)))
        yield {
            "type": "message",
            "chat_id": CHAT_ID,
            "message": {
                "id": FIRST_MESSAGE_ID + index,
                "chat_id": CHAT_ID,
                "created_by": USER_ID,
                "model_config_id": MODEL_CONFIG_ID,
                "created_at": _timestamp(emitted),
                "role": "assistant",
                "content": content,
                "usage": usage_for(index, count, reasoning_count),
            },
        }
        emitted += 1
    yield _status("waiting")


def lines(n: int, messages: int = 1) -> Iterator[str]:
    """The transcript as JSON lines (without line ends)."""
    for event in events(n, messages):
        yield json.dumps(event, ensure_ascii=False, separators=(",", ":"))
