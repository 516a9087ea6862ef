"""What every benchmark shares: the result record, run settings and paired measurement.

Timings on shared machines are noisy, so every measurement is *paired* with its floor: each
round times the floor and the measured code back to back (alternating which goes first), and
the reported ratio is the median of the per-round ratios. Absolute seconds are reported too,
but only ratios are compared with targets.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BenchSkipped",
    "Clock",
    "Paired",
    "Result",
    "Settings",
    "cpu_clock",
    "fitted_exponent",
    "paired",
    "scaling_exponent",
    "skipped",
    "wall_clock",
]

Clock = Callable[[], float]
#: CPU seconds of this process: the core benchmarks are single-threaded and CPU-bound, and CPU
#: time is far less disturbed than wall time by other work on the machine.
cpu_clock: Clock = time.process_time
#: Wall seconds, for benchmarks that wait on sockets.
wall_clock: Clock = time.perf_counter


class BenchSkipped(Exception):
    """A benchmark cannot run here; the message says why (shown to the user, kept in JSON)."""


@dataclass
class Result:
    """One line of the report (and one object of ``--json``).

    ``value_s`` is the measured time, ``floor_s`` the floor it is compared with, ``ratio`` the
    median of the paired per-round ratios (or, for memory, growth / budget; for scaling, the
    value/floor ratio at the largest size, the exponent being in ``extra``). ``extra`` holds
    the target, the verdict and anything else worth keeping.
    """

    name: str
    n: int
    value_s: float | None
    floor_s: float | None
    ratio: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "n": self.n,
            "value_s": _finite(self.value_s),
            "floor_s": _finite(self.floor_s),
            "ratio": _finite(self.ratio),
            "extra": self.extra,
        }


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return value


def skipped(name: str, n: int, reason: str) -> Result:
    """A result line for a benchmark that did not run (``extra.skipped`` says why)."""
    return Result(name, n, None, None, None, {"skipped": reason})


@dataclass(frozen=True)
class Settings:
    """Sizes and repetitions for one run of the suite.

    ``full``: the full sizes (100k-delta transcripts, fleets of 100, 1,000 and 10,000 chats).
    ``quick``: the same code on smaller inputs, well under a minute. ``smoke``: tiny inputs,
    one round: checks that everything runs, measures nothing meaningful.
    """

    mode: str
    core_n: int
    scaling_ns: tuple[int, ...]
    rounds: int
    e2e_n: int
    memory_n: int
    fleet_chats: int
    fleet_deltas: int
    #: The fleet sizes of the client lines, smallest first; the largest is ``fleet_chats``.
    fleet_sizes: tuple[int, ...]
    e2e_rounds: int

    @classmethod
    def for_mode(cls, mode: str) -> Settings:
        if mode == "full":
            return cls(
                mode="full",
                core_n=100_000,
                scaling_ns=(1_000, 10_000, 100_000),
                rounds=7,
                e2e_n=100_000,
                memory_n=100_000,
                fleet_chats=10_000,
                fleet_deltas=100,
                fleet_sizes=(100, 1_000, 10_000),
                e2e_rounds=5,
            )
        if mode == "quick":
            return cls(
                mode="quick",
                core_n=10_000,
                scaling_ns=(1_000, 3_000, 30_000),
                rounds=3,
                e2e_n=5_000,
                memory_n=10_000,
                fleet_chats=100,
                fleet_deltas=50,
                fleet_sizes=(10, 30, 100),
                e2e_rounds=3,
            )
        if mode == "smoke":
            return cls(
                mode="smoke",
                core_n=200,
                scaling_ns=(100, 200, 400),
                rounds=1,
                e2e_n=200,
                memory_n=200,
                fleet_chats=4,
                fleet_deltas=20,
                fleet_sizes=(2, 4),
                e2e_rounds=1,
            )
        raise ValueError(f"unknown mode {mode!r}")


@dataclass
class Paired:
    """The outcome of a paired measurement (medians over the rounds)."""

    value_s: float
    floor_s: float
    ratio: float
    values: list[float]
    floors: list[float]

    @property
    def best_value_s(self) -> float:
        """The fastest round: interference from other work only ever adds time."""
        return min(self.values)

    @property
    def best_floor_s(self) -> float:
        return min(self.floors)

    @property
    def spread(self) -> float:
        """Max/min of the per-round ratios: how noisy the rounds were."""
        ratios = [v / f for v, f in zip(self.values, self.floors, strict=True) if f > 0]
        return max(ratios) / min(ratios) if ratios and min(ratios) > 0 else math.inf


def _time_once(factory: Callable[[], Callable[[], object]], clock: Clock) -> float:
    run = factory()  # setup is not timed
    gc.collect()
    start = clock()
    run()
    elapsed = clock() - start
    del run
    return elapsed


def paired(
    measure: Callable[[], Callable[[], object]],
    floor: Callable[[], Callable[[], object]],
    *,
    rounds: int,
    clock: Clock = cpu_clock,
    warmup: bool = True,
) -> Paired:
    """Time ``measure`` and ``floor`` back to back, ``rounds`` times, alternating the order.

    Each argument is a factory: called untimed, it returns the zero-argument function that is
    timed (so per-run setup such as building a reader stays out of the numbers).
    """
    if warmup:
        _time_once(floor, clock)
        _time_once(measure, clock)
    values: list[float] = []
    floors: list[float] = []
    for i in range(max(rounds, 1)):
        if i % 2 == 0:
            f = _time_once(floor, clock)
            v = _time_once(measure, clock)
        else:
            v = _time_once(measure, clock)
            f = _time_once(floor, clock)
        values.append(v)
        floors.append(f)
    ratios = [v / f if f > 0 else math.inf for v, f in zip(values, floors, strict=True)]
    return Paired(
        value_s=statistics.median(values),
        floor_s=statistics.median(floors),
        ratio=statistics.median(ratios),
        values=values,
        floors=floors,
    )


def scaling_exponent(n1: int, t1: float, n2: int, t2: float) -> float:
    """``k`` in ``t ~ n**k`` through two points (1.0 is linear, 2.0 quadratic)."""
    if n1 <= 0 or n2 <= 0 or n1 == n2 or t1 <= 0 or t2 <= 0:
        return math.nan
    return math.log(t2 / t1) / math.log(n2 / n1)


def fitted_exponent(points: list[tuple[int, float]]) -> float:
    """``k`` in ``t ~ n**k`` fitted through ``(n, t)`` points (least squares on the logs)."""
    usable = [(math.log(n), math.log(t)) for n, t in points if n > 0 and t > 0]
    if len({x for x, _ in usable}) < 2:
        return math.nan
    mean_x = statistics.fmean(x for x, _ in usable)
    mean_y = statistics.fmean(y for _, y in usable)
    spread = sum((x - mean_x) ** 2 for x, _ in usable)
    return sum((x - mean_x) * (y - mean_y) for x, y in usable) / spread
