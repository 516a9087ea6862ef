"""``python -m tests.bench.speedups``: the gain of each accelerator listed in
``coder_proto._speedups``, as the ratio of the general path's time to the fast path's.

    python -m tests.bench.speedups            # every measurement, a table
    python -m tests.bench.speedups --json     # one JSON document on stdout

Inputs are built here (stream events shaped as the server sends them), so the script needs
nothing outside the repository. Each pair is timed in alternating rounds in one process and
the best round of each side is compared (the median of the rounds' ratios is shown beside it).
It reports; it does not assert.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from coder_proto import _json
from coder_proto._outputs import TextDelta, make_text_delta
from coder_proto._speedups import orjson, std_loads
from coder_proto._stream.translator import TurnTranslator
from coder_proto._stream.websocket import WebSocketClient
from coder_proto._wire import events as wire_events
from coder_proto._wire.events import MessagePartEvent, StatusEvent, parse_event
from coder_proto._wire.message_parts import parse_part

CHAT_ID = "c0ffee00-1234-4abc-8def-0123456789ab"
URL = f"ws://127.0.0.1:9/api/v2/chats/{CHAT_ID}/stream?after_id=1"
#: Rounds per pair, unless a pair asks for fewer (``--rounds`` overrides every pair).
ROUNDS = 31
_ROUNDS_OVERRIDE = 0
WORDS = ("the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog.")


def delta_event(seq: int) -> dict[str, Any]:
    """One text delta as the server streams it."""
    return {
        "type": "message_part",
        "chat_id": CHAT_ID,
        "message_part": {
            "role": "assistant",
            "part": {"type": "text", "text": WORDS[seq % len(WORDS)]},
            "history_version": 1,
            "generation_attempt": 1,
            "seq": seq,
        },
    }


def one_event_frames(count: int) -> list[str]:
    return [json.dumps([delta_event(i)], separators=(",", ":")) + "\n" for i in range(count)]


def batched_frame(count: int = 256) -> str:
    return json.dumps([delta_event(i) for i in range(count)], separators=(",", ":")) + "\n"


def tool_results_body() -> dict[str, Any]:
    return {
        "results": [
            {
                "tool_call_id": f"call_{i:04d}_0123456789ab",
                "output": {"path": f"/src/module_{i}.py", "lines": 120 + i, "ok": True},
                "is_error": False,
            }
            for i in range(4)
        ]
    }


def _best(run: Callable[[], object], rounds: int, inner: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            run()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def compare(
    name: str, general: Callable[[], object], fast: Callable[[], object], *, rounds: int = ROUNDS
) -> dict[str, Any]:
    """Time both in alternating rounds. ``gain`` is the ratio of the best rounds (general /
    fast: the rounds least disturbed by other processes), ``median_gain`` the median of the
    rounds' own ratios (a round of each side runs back to back)."""
    # Enough calls per round for about 10 ms of the slower side.
    once = max(_best(general, 1, 1), _best(fast, 1, 1), 1e-7)
    inner = max(1, int(0.01 / once))
    rounds = _ROUNDS_OVERRIDE or rounds
    ratios: list[float] = []
    general_s = fast_s = float("inf")
    for i in range(rounds):
        if i % 2:
            f = _best(fast, 1, inner)
            g = _best(general, 1, inner)
        else:
            g = _best(general, 1, inner)
            f = _best(fast, 1, inner)
        ratios.append(g / f)
        general_s, fast_s = min(general_s, g), min(fast_s, f)
    return {
        "name": name,
        "general_s": general_s,
        "fast_s": fast_s,
        "gain": general_s / fast_s,
        "median_gain": statistics.median(ratios),
    }


def _loop(loads: Callable[[str], object], frames: list[str]) -> Callable[[], object]:
    def run() -> object:
        for frame in frames:
            loads(frame)
        return None

    return run


def json_pairs() -> list[dict[str, Any]]:
    frames = one_event_frames(200)
    batch = [batched_frame()]
    out = [
        compare(
            "std_loads vs json.loads, one-event frames",
            _loop(json.loads, frames),
            _loop(std_loads, frames),
        )
    ]
    if orjson is None:
        print("orjson is not installed: its lines are left out", file=sys.stderr)
        return out
    out += [
        compare(
            "loads: orjson vs stdlib path, one-event frames",
            _loop(_json.stdlib_loads, frames),
            _loop(_json.orjson_loads, frames),
        ),
        compare(
            "loads: orjson vs stdlib path, a 256-event frame",
            _loop(_json.stdlib_loads, batch),
            _loop(_json.orjson_loads, batch),
        ),
    ]
    out.append(orjson_stack_pair())
    body = tool_results_body()
    dumps_orjson = orjson.dumps
    out.append(
        compare(
            "dumps: orjson.dumps vs the stdlib, a tool-results body (not used)",
            lambda: _json.dumps(body),
            lambda: dumps_orjson(body),
        )
    )
    return out


def orjson_stack_pair() -> dict[str, Any]:
    """One-event frames over 256 bytes (a tool call) decoded 30 frames down the stack: the
    bracket count spares the look at the stack; without the shortcut (``_SHALLOW`` at 0)
    every frame walks the stack."""
    event = delta_event(1)
    event["message_part"]["part"] = {
        "type": "tool-call",
        "tool_call_id": "call_1",
        "tool_name": "read_file",
        "args": {"path": "/src/module.py", "text": "x" * 400},
    }
    frames = [json.dumps([{**event, "seq": i}], separators=(",", ":")) for i in range(200)]

    def deep(frames_down: int, run: Callable[[], object]) -> object:
        return deep(frames_down - 1, run) if frames_down else run()

    def general() -> object:
        setattr(_json, "_SHALLOW", 0)  # noqa: B010
        try:
            return deep(30, _loop(_json.orjson_loads, frames))
        finally:
            setattr(_json, "_SHALLOW", 128)  # noqa: B010

    return compare(
        "orjson_loads: bracket count vs the stack walk, 680-byte frames 30 frames down",
        general,
        lambda: deep(30, _loop(_json.orjson_loads, frames)),
    )


def core_pair() -> dict[str, Any] | None:
    """What a user sees: frame text through the reader and the translator to output parts,
    with the stream parser decoding on each path."""
    if orjson is None:
        return None
    from ._pipelines import json_backend, translate_frames_run

    frames = one_event_frames(2_000)

    def through(loads: Callable[[str | bytes], Any]) -> Callable[[], object]:
        def run() -> object:
            with json_backend(loads):
                return translate_frames_run(frames)()()

        return run

    return compare(
        "core (frames -> parts): orjson vs stdlib path, 2,000 one-event frames",
        through(_json.stdlib_loads),
        through(_json.orjson_loads),
        rounds=11,
    )


def unscanned_pairs() -> list[dict[str, Any]]:
    """``parse_frame`` with orjson: frames of plain deltas used as orjson decoded them, against
    the scan for long integers before every frame (the decoder wrapped, so ``parse_frame``
    does not recognise it and takes the general path)."""
    if orjson is None:
        return []
    from coder_proto._wire import unicode as wire_unicode

    scanned = _json.orjson_loads

    def wrapped(data: str | bytes) -> Any:
        return scanned(data)

    def run(frames: list[str], loads: Callable[[str | bytes], Any]) -> Callable[[], object]:
        def go() -> object:
            saved = wire_unicode.loads
            wire_unicode.loads = loads
            try:
                return [wire_events.parse_frame(f) for f in frames]
            finally:
                wire_unicode.loads = saved

        return go

    out = []
    for label, frames in (
        ("2,000 one-event frames", one_event_frames(2_000)),
        ("a 256-event frame", [json.dumps([delta_event(i) for i in range(256)]) + "\n"]),
    ):
        assert repr(run(frames, wrapped)()) == repr(run(frames, scanned)())
        out.append(
            compare(
                f"parse_frame with orjson: unscanned vs scanned, {label}",
                run(frames, wrapped),
                run(frames, scanned),
            )
        )
    return out


def _opened_client(*, fast: bool) -> tuple[WebSocketClient, WSConnection]:
    client = WebSocketClient(URL, token="t", max_message_size=1 << 20)
    if not fast:
        # Every byte through wsproto, as tests/proto/stream/test_websocket_fast_path.py
        client._head = None
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(client.initiate())
    assert any(isinstance(e, Request) for e in server.events())
    client.receive_data(server.send(AcceptConnection()))
    return client, server


def websocket_pair() -> dict[str, Any]:
    frames = one_event_frames(200)
    _, server = _opened_client(fast=True)
    data = b"".join(server.send(TextMessage(data=f)) for f in frames)

    def run(fast: bool) -> Callable[[], object]:
        def go() -> object:
            client, _ = _opened_client(fast=fast)
            events = client.receive_data(data)
            assert len(events) == len(frames)
            return events

        return go

    return compare(
        "WebSocketClient._split_frames vs wsproto, 200 one-event frames (one read)",
        run(False),
        run(True),
    )


def _general_message_part(obj: dict[str, Any]) -> MessagePartEvent:
    payload = obj["message_part"]
    return MessagePartEvent(
        payload.get("role"),
        parse_part(payload["part"]),
        payload.get("history_version"),
        payload.get("generation_attempt"),
        payload.get("seq"),
        obj.get("chat_id") or "",
    )


def events_pairs() -> list[dict[str, Any]]:
    decoded = [delta_event(i) for i in range(256)]
    fast_part = wire_events._message_part

    def parts(parse: Callable[[dict[str, Any]], object]) -> Callable[[], object]:
        def run() -> object:
            for item in decoded:
                parse(item)
            return None

        return run

    def general_frame() -> object:
        return [parse_event(item) for item in decoded]

    assert [repr(e) for e in general_frame()] == [
        repr(e) for e in wire_events.events_from_json(decoded)
    ]
    return [
        compare(
            "_message_part vs parse_part + MessagePartEvent(...), per event",
            parts(_general_message_part),
            parts(fast_part),
        ),
        compare(
            "events_from_json vs parse_event per item, a 256-event frame",
            general_frame,
            lambda: wire_events.events_from_json(decoded),
        ),
    ]


def draft_pair() -> dict[str, Any]:
    """A ``MessagePartEvent`` filled through its slot setters, and through the parser's
    draft (plain stores, then the class)."""
    part = wire_events.TextPart(" fox")
    w = wire_events
    new = object.__new__
    draft_class = wire_events._MessagePartDraft

    def general() -> object:
        for _ in range(256):
            event = new(MessagePartEvent)
            w._set_mp_role(event, "assistant")
            w._set_mp_part(event, part)
            w._set_mp_history_version(event, 1)
            w._set_mp_generation_attempt(event, 1)
            w._set_mp_seq(event, 7)
            w._set_mp_chat_id(event, CHAT_ID)
        return None

    def fast() -> object:
        for _ in range(256):
            event = draft_class()
            event.role = "assistant"
            event.part = part
            event.history_version = 1
            event.generation_attempt = 1
            event.seq = 7
            event.chat_id = CHAT_ID
            event.__class__ = MessagePartEvent  # type: ignore[assignment]
        return None

    return compare("MessagePartEvent: draft + __class__ vs six slot setters", general, fast)


def surrogate_scan_pairs() -> list[dict[str, Any]]:
    """The scan for a surrogate escape before decoding: one regular-expression search (the
    fallback) against the backslash steps, on frames shaped as the server sends them."""
    from coder_proto._wire import unicode as wire_unicode

    search = wire_unicode._search_str
    scan = wire_unicode._escape_in_text
    out = []
    for name, frames in (
        ("200 one-event frames", one_event_frames(200)),
        ("a 256-event frame", [batched_frame().replace(" fox", " façade")]),
    ):
        out.append(
            compare(
                f"surrogate-escape scan: backslash steps vs one regex search, {name}",
                _loop(search, frames),
                _loop(scan, frames),
            )
        )
    return out


def parts_pair() -> dict[str, Any]:
    def general() -> object:
        for _ in range(256):
            TextDelta("t1", " fox")
        return None

    def fast() -> object:
        for _ in range(256):
            make_text_delta("t1", " fox")
        return None

    return compare("make_text_delta vs TextDelta(...)", general, fast)


def translator_pair() -> dict[str, Any]:
    events = [wire_events.events_from_json([delta_event(i)])[0] for i in range(256)]

    def live() -> TurnTranslator:
        translator = TurnTranslator(turn_cursor=1)
        translator.ingest(StatusEvent("running", CHAT_ID))
        translator.ingest(events[0])  # opens the text block
        return translator

    def general() -> object:
        translator = live()
        for event in events:
            out: list[Any] = []
            translator._delta(event, out)
        return None

    def fast() -> object:
        translator = live()
        for event in events:
            translator.ingest(event)
        return None

    return compare("TurnTranslator.ingest delta branch vs _delta, 256 deltas", general, fast)


def _no_run(self: Any, events: Any) -> list[Any]:
    """``TurnTranslator.ingest_run`` taking no run, as if another event headed the queue."""
    return []


def segment_pair() -> dict[str, Any]:
    """A whole turn of 2,000 deltas in one frame through the test driver, with the segment's
    read loop taking runs of deltas in one go, and without: with the translator's
    ``ingest_run`` taking no run and the module's ``DELTA_TYPES`` swapped for an empty
    tuple, every event takes the general way through the loop."""
    from coder_proto._agent import segment
    from tests.core_driver import Harness, delta, message, status

    count = 2_000
    frame = [
        status("running"),
        *[delta(" fox", i + 1) for i in range(count)],
        message(5, " fox" * count),
        status("waiting"),
    ]

    def turn(general: bool) -> Callable[[], object]:
        def run() -> object:
            real = segment.DELTA_TYPES
            real_run = TurnTranslator.ingest_run
            if general:
                setattr(segment, "DELTA_TYPES", ())  # noqa: B010
                setattr(TurnTranslator, "ingest_run", _no_run)  # noqa: B010
            try:
                h = Harness()
                handle = h.generate("hi")
                h.send(*frame)
                assert handle.result().text == " fox" * count
            finally:
                setattr(segment, "DELTA_TYPES", real)  # noqa: B010
                setattr(TurnTranslator, "ingest_run", real_run)  # noqa: B010
            return None

        return run

    return compare(
        "segment read loop: runs of deltas vs one event at a time, a 2,000-delta turn",
        turn(True),
        turn(False),
        rounds=11,
    )


def run_all(rounds: int = 0) -> list[dict[str, Any]]:
    """Every measurement; ``rounds`` overrides each pair's number of rounds."""
    global _ROUNDS_OVERRIDE
    _ROUNDS_OVERRIDE = rounds
    try:
        results = json_pairs()
        core = core_pair()
        if core is not None:
            results.append(core)
        results += unscanned_pairs()
        results.append(websocket_pair())
        results += events_pairs()
        results.append(draft_pair())
        results += surrogate_scan_pairs()
        results.append(parts_pair())
        results.append(translator_pair())
        results.append(segment_pair())
    finally:
        _ROUNDS_OVERRIDE = 0
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.speedups", description=__doc__)
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"rounds per pair (default {ROUNDS})"
    )
    args = parser.parse_args(argv)
    results = run_all(args.rounds)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"python {sys.version.split()[0]}, orjson {getattr(orjson, '__version__', '-')}")
    print(f"{'':74} {'general':>12} {'fast':>12} {'gain':>7} {'median':>7}")
    for r in results:
        print(
            f"{r['name']:74} {r['general_s'] * 1e6:9.1f} us {r['fast_s'] * 1e6:9.1f} us"
            f" {r['gain']:6.2f}x {r['median_gain']:6.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
