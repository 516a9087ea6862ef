"""``python -m tests.bench``: run the benchmark suite in one process and report ratios.

    python -m tests.bench            # the reference transcripts (100k deltas; a few minutes)
    python -m tests.bench --quick    # smaller inputs, under a minute
    python -m tests.bench --json     # one JSON document: [{name, n, value_s, floor_s, ratio,
                                     #   extra}, ...] on stdout, progress on stderr
    python -m tests.bench --only core,scaling

The run reports; it does not assert (timings on shared machines are noisy). It exits 2 when
the shared directory with the transcript generator is missing, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from ._common import BenchSkipped, Result, Settings, skipped
from ._data import SharedMissing, generator_path

SUITES = ("core", "scaling", "e2e", "memory", "fleet")


def _suite(name: str) -> Callable[[Settings], list[Result]]:
    if name == "core":
        from . import core

        return core.run
    if name == "scaling":
        from . import scaling

        return scaling.run
    if name == "e2e":
        from . import e2e

        return e2e.run
    if name == "memory":
        from . import memory

        return memory.run
    from . import fleet

    return fleet.run


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:.1f}ms" if value < 10 else f"{value:.2f}s"
    return f"{value:.2f}"


def format_table(results: list[Result]) -> str:
    """A plain-text table: one line per result, target and verdict last."""
    header = f"{'name':36} {'n':>8} {'value':>10} {'floor':>10} {'ratio':>7}  target / note"
    lines = [header, "-" * len(header)]
    for r in results:
        extra = r.extra
        if "skipped" in extra:
            note = f"skipped: {extra['skipped']}"
        else:
            note = str(extra.get("target", ""))
            if "exponent" in extra:
                note = f"exponent {extra['exponent']:.3f} ({note})"
            if "meets_target" in extra:
                note += "  ok" if extra["meets_target"] else "  MISSED"
            if "note" in extra:
                note += f"  [{extra['note']}]"
        lines.append(
            f"{r.name:36} {r.n:>8} {_fmt(r.value_s, 's'):>10} {_fmt(r.floor_s, 's'):>10} "
            f"{_fmt(r.ratio):>7}  {note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller inputs, under a minute")
    size.add_argument(
        "--smoke",
        action="store_true",
        help="tiny inputs, one round: checks that the suite runs (for tests)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {SUITES}")
    args = parser.parse_args(argv)

    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    settings = Settings.for_mode(mode)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()] or list(SUITES)
    unknown = [s for s in wanted if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(SUITES)}")
    try:
        generator_path()
    except SharedMissing as exc:
        print(f"tests.bench: {exc}", file=sys.stderr)
        return 2

    results: list[Result] = []
    for name in wanted:
        started = time.perf_counter()
        print(f"[bench] {name} ({mode}) ...", file=sys.stderr, flush=True)
        try:
            results.extend(_suite(name)(settings))
        except BenchSkipped as exc:
            results.append(skipped(name, 0, str(exc)))
        print(
            f"[bench] {name} done in {time.perf_counter() - started:.1f}s",
            file=sys.stderr,
            flush=True,
        )

    if args.json:
        document: list[dict[str, Any]] = [r.to_json() for r in results]
        json.dump(document, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
