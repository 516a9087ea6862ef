"""Every accelerator of the core, chosen in one place, each with its measured gain.

Nothing here changes a result: each accelerator has a general path it must agree with, and a
test that compares the two. The gains are ratios of the general path's time to the fast
path's, on this project's inputs, measured with::

    python -m tests.bench.speedups

(2 shared cores under load from other work, CPython 3.11.7, orjson 3.13.0). Each number is the
median of a pair's per-round ratios, as the range over three runs; ratios, because absolute
times on a shared machine drift. Run it again after touching any code listed here, and update
the numbers.

Selected here:

* ``orjson`` (the ``speedups`` extra): decodes JSON; ``coder_proto._json.loads`` uses it when
  it is installed, under the rule in ``coder_proto._json`` that keeps every value and every
  error what the standard library gives. Gain: see ``ORJSON_GAIN``. Not for a document over
  16 KiB (a long message's snapshot, a long chat's history): orjson's working memory for it
  is about 13 times its size, and such documents are few in a turn (frames of deltas are
  decoded in pieces well under it).
* ``std_loads``: the standard library's decoder with ``json.loads``'s wrapper skipped for a
  document that starts with ``[`` or ``{`` (what every stream frame and REST body is). Gain:
  see ``STD_LOADS_GAIN``.

Hot paths that stay in their modules (moving them would cost the call they save), listed in
``HOT_PATHS`` with their gains.

Not used: ``orjson.dumps`` for request bodies. Its text differs from the standard library's
(``1e16`` for ``1e+16``, ``null`` for NaN) and it refuses what the standard library writes
(integers beyond 64 bits, lone surrogates, non-string keys), and request bodies are a few per
turn, so its gain (``ORJSON_DUMPS_GAIN``) would buy nothing a user could see.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

import attrs

__all__ = [
    "HOT_PATHS",
    "ORJSON_DUMPS_GAIN",
    "ORJSON_GAIN",
    "STD_LOADS_GAIN",
    "HotPath",
    "orjson",
    "std_loads",
]

orjson: ModuleType | None
try:  # pragma: no cover - depends on the optional extra
    import orjson
except ImportError:  # pragma: no cover - depends on the optional extra
    orjson = None

#: ``coder_proto._json.loads`` with orjson over the same with the standard library (both under
#: the library's JSON rule): one-event stream frames, a frame of 256 events, and what a user
#: sees of it: 2,000 one-event frames through the reader and the translator to output parts.
ORJSON_GAIN: Final = (
    "one-event frames 1.4-1.6x, a 256-event frame 1.45-2.0x; frames to output parts through "
    "the reader and the translator 1.3x (1.16-1.22x while every frame was scanned for long "
    "integers; see coder_proto._wire.events.parse_frame in HOT_PATHS)"
)

#: ``orjson.dumps`` over ``json.dumps`` for a tool-results request body (not used; see above).
ORJSON_DUMPS_GAIN: Final = "a tool-results body 18x (best rounds), 12 us -> 0.7 us"

#: ``std_loads`` over ``json.loads``: a one-event stream frame.
STD_LOADS_GAIN: Final = "one-event frames 1.1-1.3x"

_json_loads: Callable[[str | bytes], Any] = json.loads
# The decoder's C scanner: (text, index) -> (value, end); not in the type stubs.
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def std_loads(data: str | bytes) -> Any:
    """``json.loads``, with a shortcut for the common case of a text document that starts
    with ``[`` or ``{`` and ends with nothing but JSON whitespace: the decoder's scanner is
    called directly, skipping ``json.loads``'s wrapper (two regular-expression scans and three
    calls). Everything else, errors included, goes through ``json.loads`` itself, so results
    and exceptions are the same (``tests/proto/test_hot_path.py`` compares them)."""
    if type(data) is str:
        first = data[:1]
        if first == "[" or first == "{":
            try:
                value, end = _scan_once(data, 0)
            except (StopIteration, ValueError):
                return _json_loads(data)
            if end == len(data) or not data[end:].strip(" \t\n\r"):
                return value
    return _json_loads(data)


@attrs.frozen
class HotPath:
    """Code written for speed that stays where it runs: ``where`` is its dotted name, ``what``
    the shortcut and the general path it must agree with, ``gain`` the measured ratio."""

    where: str
    what: str
    gain: str


HOT_PATHS: Final = (
    HotPath(
        "coder_proto._json.orjson_loads",
        "a document over 256 bytes with at most 128 brackets is trusted to nest within the "
        "standard library's room without walking the stack (the bound shorter documents "
        "already had); more brackets than that still compare with the room measured on the "
        "stack (tests/proto/test_json.py compares both paths from deep stacks)",
        "680-byte one-event frames 30 frames down 1.51-1.56x",
    ),
    HotPath(
        "coder_proto._wire.events._typed_deltas",
        "an array frame of text and reasoning deltas is decoded by msgspec in one pass into "
        "Structs made from the wire model's attrs classes, with no dict per event, payload "
        "or part (each delta's event is built from its Structs when needed: EventQueue "
        "below); a message snapshot among the deltas is "
        "decoded in the same pass, its message kept as JSON text for ChatMessage (a frame of "
        "deltas with a commit in it is no longer tried whole, then decoded again in pieces); "
        "any other document, or one the Structs do "
        "not take exactly, is decoded the general way (tests/proto/wire/test_typed_frames.py compares "
        "both on hostile and generated frames)",
        "frame text to events (core.parse) about 2.3x on one-event frames (1.22-1.27x to "
        "0.51-0.57x json.loads), about 2.7x on 256-event frames, now decoded whole "
        "(1.54-1.59x to 0.57-0.59x); with the snapshots among the deltas, core.frames."
        "batched.m10 1.32x to 0.95x json.loads and 2.67x to 2.21x orjson.loads (medians of "
        "three --quick runs)",
    ),
    HotPath(
        "coder_proto._wire.events.parse_text_frame",
        "the reader's entry for a received text frame tries the typed decode first and "
        "once, with no call between it and the reader, then cuts a long frame into pieces "
        "or decodes it the general way as parse_frame does (tests/proto/wire/test_frame_pieces.py "
        "compares both entries on fixed and generated frames)",
        "frame text to events on one-event frames about 1.06x (0.94x of parse_frame's "
        "time, median of 40 interleaved rounds)",
    ),
    HotPath(
        "coder_proto._wire.events.parse_frame",
        "with orjson decoding, a frame whose events all came from the delta hot path, with "
        "coordinates that are ints or absent, is used as orjson decoded it without the scan "
        "for runs of 19 digits: such events keep no other number, and a long integer orjson "
        "read would be a float there. Any other frame is scanned, and decoded again by the "
        "standard library when a run is found (tests/proto/test_json.py compares both paths on "
        "generated frames with long integers wherever they can hide)",
        "2,000 one-event frames 1.26-1.28x, a 256-event frame 1.04-1.05x",
    ),
    HotPath(
        "coder_proto._stream.websocket.WebSocketClient._split_frames",
        "complete unmasked text frames after the upgrade are cut and decoded here instead of "
        "going through wsproto (everything else still does; tests/proto/stream/test_websocket_fast_path.py "
        "compares both on generated byte streams); each frame's WsText is a draft given the "
        "class, without the attrs __init__",
        "200 one-event frames in one read to text 6x (best rounds; medians 6-13x); the "
        "draft WsText: core.ws.one about 1.03x (medians of 21 paired rounds, 4.1-4.97x "
        "against 4.87-5.08x orjson.loads)",
    ),
    HotPath(
        "coder_proto._wire.events._message_part",
        "a text or reasoning delta becomes its part and event without parse_part and without "
        "the classes' __init__ (tests/proto/test_hot_path.py holds it to parse_part's results)",
        "message_part events 1.5-1.65x",
    ),
    HotPath(
        "coder_proto._wire.events._MessagePartDraft",
        "a delta's MessagePartEvent is filled by plain attribute stores in a draft class with "
        "the same slots, then given its class by assigning __class__ (MessagePartEvent has no "
        "__weakref__ slot, so the layouts match), instead of six calls of the frozen class's "
        "slot setters (tests/proto/test_hot_path.py checks the result is the class in every "
        "respect: equality, hash, repr, pickling, evolve, frozen)",
        "MessagePartEvent objects 2.1-2.7x; 256-event frames to output parts 1.07x "
        "(instructions counted under valgrind). TextPart (no __weakref__ slot either) is "
        "built the same way from TextPartDraft: TextPart objects 1.2x, 256-event frames to "
        "output parts 1.008x (instructions counted)",
    ),
    HotPath(
        "coder_proto._wire.events.events_from_json",
        "message_part items of a frame are read by subscript (a missing key or a value that "
        "is not an object goes to _message_part), and a text or plain reasoning delta is "
        "built there, as _message_part builds it (tests/proto/test_hot_path.py compares the "
        "events with the general parser's)",
        "a 256-event frame 1.2-1.36x against parse_event per item; subscripts over "
        "dict.get, 256-event frames to output parts 1.02x (instructions counted)",
    ),
    HotPath(
        "coder_proto._wire.unicode._escape_in_text",
        "the scan for a surrogate escape (``\\ud``/``\\uD``) before a frame is decoded steps "
        "from one backslash to the next (str.find, a memchr) and hands the rest to one "
        "regular-expression search once it has looked at more than one backslash per 256 "
        "characters; the regular expression alone was slow on text that is not ASCII "
        "(tests/proto/test_hot_path.py compares both with substring search, on short and long "
        "text)",
        "over the regular expression: 200 one-event frames 1.2-1.4x, a 256-event frame with "
        "non-ASCII text 40-60x",
    ),
    HotPath(
        "coder_proto._outputs.make_text_delta",
        "TextDelta made without its __init__ frame: a draft class with the same slots "
        "(_TextDeltaDraft; TextDelta and ReasoningDelta have no __weakref__ slot) filled by "
        "plain stores and given the class; TurnTranslator.ingest builds it the same way "
        "inline (tests/proto/test_hot_path.py checks the values are the classes in every "
        "respect)",
        "TextDelta objects 1.4-1.45x; 10,000 deltas through TurnTranslator.ingest 1.1-1.25x "
        "against the slot setters",
    ),
    HotPath(
        "coder_proto._stream.translator.TurnTranslator.ingest",
        "a delta for the open block of its kind is handled inline, its TextDelta or "
        "ReasoningDelta built there too, before the general TurnTranslator._delta that takes "
        "every other delta",
        "256 deltas 1.3-1.45x",
    ),
    HotPath(
        "coder_proto._wire.events._parse_pieces",
        "an array frame over 4 KiB is decoded in pieces of about 4 KiB cut before a delta, "
        "so a 256-delta frame's decoded objects and its events stay under the cyclic "
        "collector's young-generation threshold of 700 on CPython 3.11 and 3.12 instead of "
        "starting a collection on every frame and moving the frame to older generations; a "
        "piece that does not decode, or one longer than 8 KiB, sends the whole frame to one "
        "decode (tests/proto/wire/test_frame_pieces.py compares pieces cut anywhere with the "
        "whole frame, valid or damaged, on both decoding paths, and counts the collections)",
        "100,000 deltas, two alternated runs each: core.frames.batched 2.20x and 2.32x to "
        "1.86x and 1.86x of json.loads, core.frames.batched.m10 2.24x and 2.28x to 1.92x and "
        "1.87x, core.frames.batched.m10+orjson 4.00x and 4.41x to 3.49x and 3.52x of "
        "orjson.loads; 356 young, 32 middle and 2 full collections to 1 young (as many as the "
        "json.loads floor)",
    ),
    HotPath(
        "coder_proto._stream.translator.TurnTranslator.ingest_run",
        "the run of message parts behind an event in the reader's queue is translated in one "
        "call and one loop, the open blocks and pending lists held in locals until an event "
        "takes the general way (tests/proto/stream/test_translator_properties.py holds it to "
        "ingest of each event in turn, gated or not, for any mix of events)",
        "2,000 parsed deltas 1.17x against ingest per event; with plain_reasoning_part, "
        "core.frames.batched 2.36x to 2.19x of json.loads and core.frames.batched.m10 2.40x "
        "to 2.25x (100,000 deltas)",
    ),
    HotPath(
        "coder_proto._wire.message_parts.plain_reasoning_part",
        "a plain reasoning delta's ReasoningPart is filled by four stores in a draft class "
        "(ReasoningPartDraft) and given its class (ReasoningPart has no __weakref__ slot, as "
        "TextPart), and a part with only its type and text skips the lookups of the other "
        "three fields; both stream parsers call it (tests/proto/test_hot_path.py checks the "
        "part is the class in every respect and that both parsers agree with those fields "
        "absent, null or set)",
        "ReasoningPart objects 2.5x (249 to 99 ns); 256 reasoning deltas to events 1.3x "
        "(147 to 113 us)",
    ),
    HotPath(
        "coder_proto._stream.reader.EventQueue",
        "a delta the typed decode took waits in the reader's queue as its msgspec Struct "
        "(the replay filter reads its coordinates there), TurnTranslator.ingest_run reads "
        "its text from the Struct, and its TextPart and MessagePartEvent are built only when "
        "the queue hands the delta to another reader (popleft, an index, iteration, "
        "comparison, copy: tests/proto/stream/test_event_queue.py checks every read gives "
        "parse_frame's events); the segment's read loop and the benchmarks' consumer hand a "
        "run to ingest_run as soon as a delta heads the queue",
        "medians of three alternated --quick runs against the code before it: "
        "core.frames.batched+orjson 2.13x to 1.58x orjson.loads, core.frames.batched.m10"
        "+orjson 2.35x to 1.70x, core.ws.batched+orjson 2.69x to 2.01x, core.ws.one+orjson "
        "4.69x to 3.60x, core.frames.one+orjson 3.88x to 3.67x; core.frames.batched 1.03x "
        "to 0.74x json.loads, core.frames.batched.m10 1.09x to 0.86x, core.ws.one 1.20x to "
        "0.90x; a queued delta holds no object the cyclic collector tracks (2 before) and "
        "5 memory blocks (4 before), and a backlog starts half as many young collections",
    ),
    HotPath(
        "coder_proto._agent.segment.Segment._read_loop",
        "a run of live deltas is translated in one go and delivered at once, instead of one "
        "event per pass of the read loop; the queue goes to TurnTranslator.ingest_run before "
        "its front is looked at (an empty run when another event heads it, which then takes "
        "the general way), so a frame of one delta costs no index and membership test "
        "(tests/proto/stream/test_translator_properties.py and test_event_queue.py take "
        "runs in both orders)",
        "a 2,000-delta turn through the test driver 1.04-1.05x; the queue to ingest_run "
        "first, in the benchmarks' consumer of the same shape (medians of 25 interleaved "
        "rounds): core.frames.one+orjson 1.98x to 1.85x orjson.loads, core.frames.one.m10"
        "+orjson 2.00x to 1.83x, core.ws.one+orjson 2.24x to 2.21x",
    ),
    HotPath(
        "coder_proto._stream.reader.StreamReader._on_frame",
        "a frame holding one delta of the stream's chat, whose chat id is the one last "
        "checked, is decoded by the reader itself and its replay filter applied inline, with "
        "no list loop and no call between the frame and the queue; every other frame goes "
        "through the loop over its events, without a second decode "
        "(tests/proto/stream/test_event_queue.py compares it with a reader that builds every "
        "event, over replays, a redial, new episodes, another chat's and untrackable deltas); "
        "and TurnTranslator.ingest_run translates a queue holding one text or reasoning "
        "delta for an open block of its kind, what such a frame leaves, in one step before "
        "its loop is set up (the same tests compare runs of one delta with ingest event by "
        "event)",
        "with the one-delta step of TurnTranslator.ingest_run, medians of four alternated "
        "--quick runs against the code before them, on frames in the server's shape: "
        "core.frames.one+orjson 2.71x to 2.17x orjson.loads, core.frames.one.m10+orjson "
        "2.88x to 2.25x, core.ws.one+orjson 2.63x to 2.29x; core.frames.one 0.69x to 0.56x "
        "json.loads, core.frames.one.m10 0.74x to 0.60x",
    ),
)
