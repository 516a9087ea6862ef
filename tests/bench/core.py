"""Benchmark 1, core: frame text in, output parts out, against ``json.loads`` of the same
frames alone.

The frames carry the server's shape (``_transcript.py``): every part, a delta's and a committed
message's, has the members of every part type the server never omits, empty, in its field
order, so the decoders on both sides read the bytes a real stream brings.

For each JSON backend (the standard library, and orjson when installed) and each framing (one
event per frame, 256 per frame):

* ``core.frames.<framing>``: frame text -> ``StreamReader`` replay filter -> ``TurnTranslator``
  -> output parts and the final ``Finish`` with usage. Target: at most 2.0x the floor.
* ``core.frames.<framing>.m10``: the same on the ten-message transcript.
* ``core.ws.<framing>``: the same from WebSocket bytes (64 KiB socket reads through wsproto and
  ``WebSocketClient``), against the same floor; reported, no target (the floor has no
  WebSocket layer).
* ``core.parse.<framing>`` and ``core.reader.<framing>``: the first stages alone, to show where
  the time goes (not with ``--quick``).
* ``core.gc.<framing>``: the cyclic collector's collections during one run of
  ``core.frames.<framing>`` (at the interpreter's thresholds), per 100,000 deltas, streamed
  and as a backlog (every frame queued before the consumer reads), against those of the
  floor's ``loads`` alone; and the objects the collector tracks and the memory blocks a
  queued delta holds. Reported, no target.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

from ._common import Paired, Result, Settings, cpu_clock, paired
from ._data import batched_frames, one_event_frames, transcript_lines
from ._pipelines import (
    backends,
    check_output,
    frame_entry,
    json_backend,
    loads_floor,
    open_reader,
    parse_run,
    reader_frames_run,
    translate_frames_run,
    ws_run,
)

__all__ = ["CORE_TARGET", "run"]

#: core / json.loads, one-event and batched frames.
CORE_TARGET = 2.0


def _result(
    name: str,
    n: int,
    pair: Paired,
    *,
    events: int,
    target: float | None,
    extra: dict[str, Any],
) -> Result:
    info: dict[str, Any] = {
        "per_event_us": pair.value_s / events * 1e6,
        "floor_per_event_us": pair.floor_s / events * 1e6,
        "spread": round(pair.spread, 3),
        "rounds": len(pair.values),
        "clock": "process_time",
    }
    if target is not None:
        info["target"] = f"<= {target}x"
        info["meets_target"] = pair.ratio <= target
    else:
        info["target"] = "reported"
    info.update(extra)
    return Result(name, n, pair.value_s, pair.floor_s, pair.ratio, info)


def _check(frames: list[str], lines: list[str], *, ws: bool = False) -> None:
    """One untimed run whose output is checked against the transcript, so a fast but wrong
    pipeline cannot report a ratio."""
    parts: list[Any] = []
    factory = ws_run if ws else translate_frames_run
    factory(frames, collect=parts)()()
    check_output(parts, lines)


def _collections(factory: Callable[[], Callable[[], object]]) -> list[int]:
    """The collections of each generation during one run of what ``factory`` builds (built
    first, not counted)."""
    timed = factory()
    gc.collect()
    before = [stats["collections"] for stats in gc.get_stats()]
    timed()
    after = [stats["collections"] for stats in gc.get_stats()]
    return [b - a for a, b in zip(before, after, strict=True)]


def _held(frames: list[str]) -> tuple[int, int]:
    """The objects the collector tracks and the memory blocks allocated that a reader's
    queue holds once every frame is handed to it (a backlog not yet consumed)."""
    reader, _ = open_reader()
    entry = frame_entry(reader)
    gc.collect()
    objects = len(gc.get_objects())
    blocks = sys.getallocatedblocks()
    for frame in frames:
        entry(frame, 0.0)
    held = (len(gc.get_objects()) - objects, sys.getallocatedblocks() - blocks)
    reader.events.clear()
    return held


def _gc_result(name: str, n: int, frames: list[str], floor: Any, events: int) -> Result:
    """``core.gc.<framing>``: collections per 100,000 deltas (streamed, and with every frame
    queued before the consumer reads: a backlog), against the floor's; and the tracked
    objects and memory blocks a queued delta holds."""
    scale = 100_000 / events
    streamed = [round(c * scale, 1) for c in _collections(translate_frames_run(frames))]
    backlog = [
        round(c * scale, 1) for c in _collections(translate_frames_run(frames, backlog=True))
    ]
    per_floor = [round(c * scale, 1) for c in _collections(floor)]
    objects, blocks = _held(frames)
    core_total = sum(streamed)
    return Result(
        name,
        n,
        None,
        None,
        core_total / sum(per_floor) if sum(per_floor) else None,
        {
            "collections_per_100k_deltas": streamed,
            "backlog_collections_per_100k_deltas": backlog,
            "floor_collections_per_100k_deltas": per_floor,
            "tracked_objects_per_queued_delta": round(objects / events, 2),
            "blocks_per_queued_delta": round(blocks / events, 2),
            "thresholds": list(gc.get_threshold()),
            "target": "reported",
            "note": (
                f"gen0/1/2 per 100k deltas {streamed}, backlog {backlog}, floor {per_floor}; "
                f"per queued delta {objects / events:.2f} tracked objects, "
                f"{blocks / events:.2f} blocks"
            ),
        },
    )


def run(settings: Settings) -> list[Result]:
    """Every core measurement, for every available JSON backend."""
    n = settings.core_n
    lines = transcript_lines(n)
    lines_m10 = transcript_lines(n, 10)
    framings = {
        "one": (one_event_frames(lines), one_event_frames(lines_m10)),
        "batched": (batched_frames(lines), batched_frames(lines_m10)),
    }
    std_floor = backends()["json"][0]
    out: list[Result] = []
    for backend, (loads, core_loads) in backends().items():
        suffix = "" if backend == "json" else f"+{backend}"
        with json_backend(core_loads):
            for framing, (frames, frames_m10) in framings.items():
                common = {"backend": backend, "framing": framing, "frames": len(frames)}
                floor = loads_floor(frames, loads)
                _check(frames, lines)
                pair = paired(
                    translate_frames_run(frames), floor, rounds=settings.rounds, clock=cpu_clock
                )
                extra = dict(common)
                if backend != "json":
                    vs_std = paired(
                        translate_frames_run(frames),
                        loads_floor(frames, std_floor),
                        rounds=settings.rounds,
                        clock=cpu_clock,
                    )
                    extra["ratio_vs_stdlib_json_loads"] = vs_std.ratio
                out.append(
                    _result(
                        f"core.frames.{framing}{suffix}",
                        n,
                        pair,
                        events=len(lines),
                        target=CORE_TARGET,
                        extra=extra,
                    )
                )

                _check(frames_m10, lines_m10)
                pair = paired(
                    translate_frames_run(frames_m10),
                    loads_floor(frames_m10, loads),
                    rounds=settings.rounds,
                    clock=cpu_clock,
                )
                out.append(
                    _result(
                        f"core.frames.{framing}.m10{suffix}",
                        n,
                        pair,
                        events=len(lines_m10),
                        target=CORE_TARGET,
                        extra={**common, "messages": 10, "frames": len(frames_m10)},
                    )
                )

                _check(frames, lines, ws=True)
                pair = paired(ws_run(frames), floor, rounds=settings.rounds, clock=cpu_clock)
                out.append(
                    _result(
                        f"core.ws.{framing}{suffix}",
                        n,
                        pair,
                        events=len(lines),
                        target=None,
                        extra=common,
                    )
                )

                out.append(_gc_result(f"core.gc.{framing}{suffix}", n, frames, floor, len(lines)))

                # Where the time goes, stage by stage (not in --quick: it is diagnosis).
                stages = (
                    ()
                    if settings.mode == "quick"
                    else (
                        ("parse", parse_run),
                        ("reader", reader_frames_run),
                    )
                )
                for stage, factory in stages:
                    pair = paired(factory(frames), floor, rounds=settings.rounds, clock=cpu_clock)
                    out.append(
                        _result(
                            f"core.{stage}.{framing}{suffix}",
                            n,
                            pair,
                            events=len(lines),
                            target=None,
                            extra=common,
                        )
                    )
    return out
