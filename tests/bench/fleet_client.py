"""Only the client fleet's lines (``fleet.<runtime>.memory`` and ``fleet.<runtime>.cpu``), at
sizes of one's choosing:

    python -m tests.bench.fleet_client --runtime trio --sizes 100,1000,10000 [--json]

The full suite measures them with the rest of the fleet suite (the core lines, the core on
asyncio, Temporal); this runs the client lines alone, for one runtime or both (``--runtime``
given twice, or left out), at the full run's sizes by default. The largest size is the memory
line's; the CPU line's exponent is fitted through every size. A fleet of 10,000 chats waits
about ten minutes for its streams to open before its runs start (``fleet.open_margin``)."""

from __future__ import annotations

import argparse
import json
import sys

from ._common import Result, Settings
from .fleet import CLIENT_RUNTIMES, _client_lines
from .targets import settle

__all__ = ["main"]


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    if len(sizes) < 2 or sizes[0] < 1:
        raise argparse.ArgumentTypeError("give at least two positive sizes, e.g. 100,1000,10000")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.fleet_client")
    parser.add_argument(
        "--runtime", action="append", choices=CLIENT_RUNTIMES, help="asyncio, trio (default: both)"
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=(100, 1_000, 10_000), help="fleet sizes, comma-separated"
    )
    parser.add_argument("--deltas", type=int, default=None, help="deltas per chat (full: 100)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)

    from dataclasses import replace

    from . import __main__ as bench
    from ._server import transcript_texts

    full = Settings.for_mode("full")
    settings = replace(
        full,
        fleet_sizes=args.sizes,
        fleet_chats=args.sizes[-1],
        fleet_deltas=args.deltas if args.deltas is not None else full.fleet_deltas,
    )
    _, text = transcript_texts(settings.fleet_deltas)
    results: list[Result] = []
    for runtime in args.runtime or CLIENT_RUNTIMES:
        print(f"[bench] fleet.{runtime} {settings.fleet_sizes} ...", file=sys.stderr, flush=True)
        results.extend(settle(r) for r in _client_lines(settings, runtime, len(text)))
    if args.json:
        json.dump([r.to_json() for r in results], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(bench.format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
