"""The transcript mutator: perturb recorded streams the way servers and networks can, and
check what the client must guarantee (state machines A-C, wire 5).

From a seed transcript, each recorded connection's frames (up to the first terminal status)
form a *stream*. A mutation turns it into one or more connections:

=====================  ===========  ========================================================
mutation               preserving   what it does
=====================  ===========  ========================================================
``drop_reconnect``     yes          drop the connection after any frame and splice in a
                                    server-style reconnect replay (status snapshot,
                                    committed messages past the dial cursor, the current
                                    episode's deltas from seq 1), then the rest
``duplicate``          yes          send a frame twice
``rebatch``            yes          split and merge the event batches differently
``reorder``            yes          move events the server may send in either order
                                    (``queue_update``/``retry``/``preview_reset`` anywhere;
                                    a delta across an adjacent non-terminal status)
``inject_unknown``     yes          add events and parts of unknown types
``truncate``           no           cut a frame's JSON short
``retype``             no           change the type of one field of one event
``garble``             no           flip characters of a frame
=====================  ===========  ========================================================

Invariants, checked on every mutant run through reader + translator
(``fuzz.pipeline.run_stream``): only library errors escape (always); and for the mutations
that keep the server's guarantees: exactly-once text and reasoning, usage independent of the
replays, no lost client tool call, no new error. ``check_replay`` runs a mutated transcript
through the whole turn machine (``coder_proto.transcript._replay``) and checks the same.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Sequence
from typing import Any

import attrs

from coder_proto import CoderAgentError
from coder_proto._constants import TERMINAL_STATUSES
from coder_proto.transcript import (
    Transcript,
    WsEnd,
    WsFrame,
    WsOpenRecord,
    parse_transcript,
    replay,
)

from .pipeline import Finding, StreamOutcome, run_stream

__all__ = [
    "MUTATIONS",
    "PRESERVING",
    "Stream",
    "check_mutant",
    "check_replay",
    "mutate",
    "streams_of",
]

Event = dict[str, Any]


@attrs.frozen(kw_only=True)
class Stream:
    """One recorded connection's events, batched as recorded, up to the first terminal
    status; with what the reader and translator need to know."""

    batches: tuple[tuple[Event, ...], ...]
    chat_id: str
    after_id: int | None
    tool_names: tuple[str, ...]


def _after_id(url: str | None) -> int | None:
    if not url or "after_id=" not in url:
        return None
    raw = url.rpartition("after_id=")[2].partition("&")[0]
    return int(raw) if raw.isdigit() else None


def streams_of(transcript: Transcript) -> list[Stream]:
    """Every accepted connection of ``transcript`` with at least one decodable frame."""
    tools = tuple(t.name for t in transcript.header.settings.tools)
    urls: dict[int, str | None] = {}
    frames: dict[int, list[str]] = {}
    order: list[int] = []
    for record in transcript.records:
        if isinstance(record, WsOpenRecord):
            urls[record.conn] = record.url
            order.append(record.conn)
        elif isinstance(record, WsFrame):
            frames.setdefault(record.conn, []).append(record.text)
    out = []
    for conn in order:
        batches: list[tuple[Event, ...]] = []
        chat_id = ""
        done = False
        for text in frames.get(conn, []):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if not isinstance(value, list):
                continue
            batch: list[Event] = []
            for event in value:
                if not isinstance(event, dict):
                    continue
                batch.append(event)
                chat_id = chat_id or str(event.get("chat_id") or "")
                if _terminal(event):
                    done = True
                    break
            if batch:
                batches.append(tuple(batch))
            if done:
                break
        if batches:
            out.append(
                Stream(
                    batches=tuple(batches),
                    chat_id=chat_id or "chat-1",
                    after_id=_after_id(urls.get(conn)),
                    tool_names=tools,
                )
            )
    return out


def _terminal(event: Event) -> bool:
    if event.get("type") != "status":
        return False
    status = event.get("status")
    return isinstance(status, dict) and status.get("status") in TERMINAL_STATUSES


def _frame(batch: Sequence[Event]) -> str:
    return json.dumps(list(batch), separators=(",", ":")) + "\n"


def _flat(stream: Stream) -> list[Event]:
    return [e for b in stream.batches for e in b]


# -- mutations ---------------------------------------------------------------------------------


def _reconnect_snapshot(events: Sequence[Event], after_id: int | None, chat_id: str) -> list[Event]:
    """What a server sends a fresh connection (server-behaviour 3.4): committed messages past
    the dial cursor, queue, status, error, action_required, preview_reset, then the current
    episode's deltas from seq 1."""
    messages: dict[int, Event] = {}
    queue: Event | None = None
    status: Event | None = None
    error: Event | None = None
    action: Event | None = None
    episode: tuple[Any, Any] | None = None
    deltas: list[Event] = []
    for event in events:
        kind = event.get("type")
        if kind == "message":
            message = event.get("message") or {}
            mid = message.get("id")
            if isinstance(mid, int) and mid > (after_id or 0):
                messages[mid] = event
        elif kind == "queue_update":
            queue = event
        elif kind == "status":
            status = event
        elif kind == "error":
            error = event
        elif kind == "action_required":
            action = event
        elif kind == "message_part":
            payload = event.get("message_part") or {}
            key = (payload.get("history_version"), payload.get("generation_attempt"))
            if key != episode:
                episode = key
                deltas = []
            deltas.append(event)
    out = [messages[k] for k in sorted(messages)]
    if queue is not None:
        out.append(queue)
    out.append(status or {"type": "status", "chat_id": chat_id, "status": {"status": "running"}})
    current = (status or {}).get("status", {}).get("status") if status else "running"
    if current == "error" and error is not None:
        out.append(error)
    if current == "requires_action" and action is not None:
        out.append(action)
    if messages:
        out.append({"type": "preview_reset", "chat_id": chat_id})
    out.extend(deltas)
    return out


def _drop_reconnect(stream: Stream, rng: random.Random) -> list[list[str]]:
    batches = [list(b) for b in stream.batches]
    connections: list[list[str]] = []
    drops = rng.randint(1, 3)
    cuts = sorted(rng.sample(range(len(batches) + 1), k=min(drops, len(batches) + 1)))
    seen: list[Event] = []
    start = 0
    pending_snapshot: list[Event] = []
    for cut in cuts:
        frames = [_frame(pending_snapshot)] if pending_snapshot else []
        for batch in batches[start:cut]:
            frames.append(_frame(batch))
            seen.extend(batch)
        connections.append(frames)
        pending_snapshot = _reconnect_snapshot(seen, stream.after_id, stream.chat_id)
        start = cut
    last = [_frame(pending_snapshot)] if pending_snapshot else []
    last += [_frame(b) for b in batches[start:]]
    connections.append(last)
    return connections


def _duplicate(stream: Stream, rng: random.Random) -> list[list[str]]:
    frames = [_frame(b) for b in stream.batches]
    i = rng.randrange(len(frames))
    frames.insert(i, frames[i])
    return [frames]


def _rebatch(stream: Stream, rng: random.Random) -> list[list[str]]:
    events = _flat(stream)
    frames = []
    i = 0
    while i < len(events):
        size = rng.choice((1, 1, 2, 3, 5, 8, 256))
        frames.append(_frame(events[i : i + size]))
        i += size
    return [frames]


_NOOP_TYPES = ("queue_update", "retry", "preview_reset")


def _reorder(stream: Stream, rng: random.Random) -> list[list[str]]:
    events = _flat(stream)
    movable = [i for i, e in enumerate(events) if e.get("type") in _NOOP_TYPES]
    swaps = [
        i
        for i in range(len(events) - 1)
        if {events[i].get("type"), events[i + 1].get("type")} == {"message_part", "status"}
        and not _terminal(events[i])
        and not _terminal(events[i + 1])
    ]
    if movable and (not swaps or rng.random() < 0.5):
        event = events.pop(rng.choice(movable))
        events.insert(rng.randrange(len(events) + 1), event)
    elif swaps:
        i = rng.choice(swaps)
        events[i], events[i + 1] = events[i + 1], events[i]
    return _rebatch(attrs.evolve(stream, batches=(tuple(events),)), rng)


def _inject_unknown(stream: Stream, rng: random.Random) -> list[list[str]]:
    events = [json.loads(json.dumps(e)) for e in _flat(stream)]
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.4:
            new: Event = {"type": "mystery_event", "chat_id": stream.chat_id, "mystery": {"x": 1}}
            events.insert(rng.randrange(len(events) + 1), new)
        elif choice < 0.7:
            new = {
                "type": "message_part",
                "chat_id": stream.chat_id,
                "message_part": {"role": "assistant", "part": {"type": "hologram", "text": "boo"}},
            }
            events.insert(rng.randrange(len(events) + 1), new)
        else:
            snapshots = [e for e in events if e.get("type") == "message"]
            if snapshots:
                message = rng.choice(snapshots).get("message") or {}
                content = message.get("content")
                if isinstance(content, list):
                    content.insert(rng.randrange(len(content) + 1), {"type": "hologram", "x": 2})
    return _rebatch(attrs.evolve(stream, batches=(tuple(events),)), rng)


def _truncate(stream: Stream, rng: random.Random) -> list[list[str]]:
    frames = [_frame(b) for b in stream.batches]
    i = rng.randrange(len(frames))
    frames[i] = frames[i][: rng.randrange(len(frames[i]))]
    return [frames]


_ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    -1,
    0,
    2**63,
    1.5,
    "x",
    "",
    [],
    {},
    [1, "a"],
    {"type": "text"},
    "\ud800",
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*prefix, key))
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((*prefix, index))
            out += _paths(item, (*prefix, index))
    return out


def _retype(stream: Stream, rng: random.Random) -> list[list[str]]:
    events = [json.loads(json.dumps(e)) for e in _flat(stream)]
    for _ in range(rng.randint(1, 3)):
        event = rng.choice(events)
        paths = _paths(event)
        if not paths:
            continue
        path = rng.choice(paths)
        target = event
        for key in path[:-1]:
            target = target[key]
        # A fresh copy: a shared list or dict could end up inside itself.
        target[path[-1]] = copy.deepcopy(rng.choice(_ODD_VALUES))
    frames = [json.dumps(events[i : i + 4]) + "\n" for i in range(0, len(events), 4)]
    return [frames]


def _garble(stream: Stream, rng: random.Random) -> list[list[str]]:
    frames = [_frame(b) for b in stream.batches]
    i = rng.randrange(len(frames))
    chars = list(frames[i])
    for _ in range(rng.randint(1, 4)):
        j = rng.randrange(len(chars))
        chars[j] = rng.choice('{}[]",:0a\\\x00\u00e9')
    frames[i] = "".join(chars)
    return [frames]


MUTATIONS = {
    "drop_reconnect": _drop_reconnect,
    "duplicate": _duplicate,
    "rebatch": _rebatch,
    "reorder": _reorder,
    "inject_unknown": _inject_unknown,
    "truncate": _truncate,
    "retype": _retype,
    "garble": _garble,
}
PRESERVING = frozenset({"drop_reconnect", "duplicate", "rebatch", "reorder", "inject_unknown"})


def mutate(stream: Stream, name: str, rng: random.Random) -> list[list[str]]:
    """The connections (lists of frame texts) of one mutant."""
    return MUTATIONS[name](stream, rng)


def baseline(stream: Stream) -> StreamOutcome:
    return run_stream(
        [[_frame(b) for b in stream.batches]],
        chat_id=stream.chat_id,
        after_id=stream.after_id,
        dynamic_tool_names=stream.tool_names,
    )


def check_mutant(
    stream: Stream, name: str, rng: random.Random, base: StreamOutcome | None = None
) -> StreamOutcome:
    """Run one mutant and check the invariants; raises ``Finding`` when one breaks."""
    connections = mutate(stream, name, rng)
    chunk = rng.choice((0, 0, 0, 1, 7, 64))
    outcome = run_stream(
        connections,
        chat_id=stream.chat_id,
        after_id=stream.after_id,
        dynamic_tool_names=stream.tool_names,
        chunk=chunk,
    )
    if name in PRESERVING:
        base = base if base is not None else baseline(stream)
        problems = []
        if outcome.text != base.text:
            problems.append(f"text {outcome.text!r} != {base.text!r}")
        if outcome.reasoning != base.reasoning:
            problems.append(f"reasoning {outcome.reasoning!r} != {base.reasoning!r}")
        if outcome.usage != base.usage:
            problems.append(f"usage {outcome.usage} != {base.usage}")
        if set(outcome.client_calls) != set(base.client_calls):
            problems.append(f"client calls {outcome.client_calls} != {base.client_calls}")
        if len(outcome.client_calls) != len(set(outcome.client_calls)):
            problems.append(f"a client call was emitted twice: {outcome.client_calls}")
        if (outcome.error is None) != (base.error is None):
            problems.append(f"error {outcome.error!r} (baseline {base.error!r})")
        if problems:
            raise Finding(f"{name}: " + "; ".join(problems))
    return outcome


def check_replay(text: str, name: str, rng: random.Random) -> None:
    """Mutate the frames of one connection of a whole transcript and replay it through the
    turn machine: only library errors may come out, and nothing may hang (the replay bounds
    itself). Raises ``Finding``."""
    transcript = parse_transcript(text)
    frames = [i for i, r in enumerate(transcript.records) if isinstance(r, WsFrame)]
    if not frames:
        return
    records = list(transcript.records)
    index = rng.choice(frames)
    record = records[index]
    assert isinstance(record, WsFrame)
    stream = Stream(batches=(), chat_id="chat-1", after_id=None, tool_names=())
    try:
        value = json.loads(record.text)
        if isinstance(value, list) and value and all(isinstance(e, dict) for e in value):
            stream = attrs.evolve(stream, batches=(tuple(value),))
    except ValueError:
        pass
    if not stream.batches:
        return
    mutated = mutate(stream, name, rng)
    replacement: list[Any] = []
    for n, conn_frames in enumerate(mutated):
        if n:
            replacement.append(WsEnd(t=record.t, conn=record.conn, how="lost"))
            break  # a drop inside a recorded connection: the reader redials into the next
        replacement += [WsFrame(t=record.t, conn=record.conn, text=f) for f in conn_frames]
    records[index : index + 1] = replacement
    result = replay(attrs.evolve(transcript, records=tuple(records)))
    for turn in result.turns:
        error = turn.error
        if error is None:
            continue
        if not isinstance(error, CoderAgentError):
            raise Finding(f"replay {name}: a non-library error escaped: {error!r}")
        if "internal error" in error.message:
            raise Finding(f"replay {name}: an internal error was wrapped: {error.message}")
