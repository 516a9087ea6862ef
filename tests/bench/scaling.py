"""Benchmark 2, scaling: the core at 1k, 10k and 100k deltas, and the exponent ``k`` of
``t ~ n**k`` between the two largest sizes (target: at most 1.05).

Modes:

* ``scaling.frames.one`` / ``scaling.frames.batched``: frames consumed as they arrive;
* ``scaling.backlog.one`` / ``scaling.backlog.batched``: every frame's bytes are handed to the
  reader before the consumer reads the first event (a consumer that fell behind, or a large
  replay): quadratic queues show here.

Each size is measured paired with ``json.loads`` of the same frames. The exponent uses each
size's fastest round (interference only adds time); ``extra`` has the times per size, the
raw exponent, and the exponent of the median core/floor ratio plus one (``normalised``: the
floor is linear, so machine drift between sizes cancels out). ``--quick`` measures 1k, 3k
and 30k deltas (the exponent over one decade, 3k to 30k).
"""

from __future__ import annotations

from typing import Any

from ._common import Result, Settings, cpu_clock, paired, scaling_exponent
from ._data import batched_frames, one_event_frames, transcript_lines
from ._pipelines import backends, json_backend, loads_floor, translate_frames_run, ws_run

__all__ = ["EXPONENT_TARGET", "run"]

EXPONENT_TARGET = 1.05


def run(settings: Settings) -> list[Result]:
    """One result per mode, at the largest size; the smaller sizes are in ``extra``."""
    loads, core_loads = backends()["json"]
    modes = {
        "frames.one": (one_event_frames, False),
        "frames.batched": (batched_frames, False),
        "backlog.one": (one_event_frames, True),
        "backlog.batched": (batched_frames, True),
    }
    sizes = settings.scaling_ns
    out: list[Result] = []
    for mode, (framing, backlog) in modes.items():
        times: dict[int, float] = {}
        floors: dict[int, float] = {}
        ratios: dict[int, float] = {}
        for n in sizes:
            frames = framing(transcript_lines(n))
            measure = ws_run(frames, backlog=True) if backlog else translate_frames_run(frames)
            with json_backend(core_loads):
                pair = paired(
                    measure, loads_floor(frames, loads), rounds=settings.rounds, clock=cpu_clock
                )
            # Exponents come from the fastest rounds: noise only ever adds time.
            times[n], floors[n], ratios[n] = pair.best_value_s, pair.best_floor_s, pair.ratio
        small, large = sizes[-2], sizes[-1]
        exponent = scaling_exponent(small, times[small], large, times[large])
        normalised = 1.0 + scaling_exponent(small, ratios[small], large, ratios[large])
        extra: dict[str, Any] = {
            "exponent": exponent,
            "exponent_normalised": normalised,
            "exponent_floor": scaling_exponent(small, floors[small], large, floors[large]),
            "exponent_first": scaling_exponent(sizes[0], times[sizes[0]], small, times[small]),
            "sizes": list(sizes),
            "times_s": [times[n] for n in sizes],
            "floors_s": [floors[n] for n in sizes],
            "ratios": [ratios[n] for n in sizes],
            "target": f"exponent <= {EXPONENT_TARGET}",
            "meets_target": exponent <= EXPONENT_TARGET,
            "via": "websocket bytes, all buffered first" if backlog else "frame text",
            "clock": "process_time",
        }
        out.append(
            Result(f"scaling.{mode}", large, times[large], floors[large], ratios[large], extra)
        )
    return out
