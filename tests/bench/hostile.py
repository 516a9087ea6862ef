"""``python -m tests.bench.hostile``: time overrun and memory growth per hostile case.

For every case of ``tests/hostile`` (REST answers and chat streams) on every runtime, run the
call once against the misbehaving server and report:

* ``overrun``: how long the call ran past the bound the case sets (``http_timeout`` for a
  REST case, ``request_timeout`` for a stream case); negative when it ended earlier;
* ``peak``: the growth of Python's traced memory at its peak during the call (``tracemalloc``);
* ``outcome``: the error class that ended it, or ``ok``.

and, per runtime, the number of cases run, the worst overrun and the worst peak growth (with
the case each came from). It prints, it does not assert (timings on shared machines are
noisy); the suite asserts only generous outer bounds. ``--only rest|stream``, ``--runtime
sync`` and ``--case NAME`` (repeatable) narrow the run; ``--json`` prints one JSON document:
``{"rows": [...], "summary": [...]}``.

    python -m tests.bench.hostile                 # every case on every runtime (~4 minutes)
    python -m tests.bench.hostile --runtime trio --only rest
"""

from __future__ import annotations

import argparse
import json
import sys
import tracemalloc
from typing import Any

from tests.hostile.cases import BOUND, REST_CASES
from tests.hostile.runtimes import RUNTIMES, Outcome, call, generate
from tests.hostile.server import HostileServer
from tests.hostile.ws_cases import ORG, WS_CASES


def _measure(run: Any) -> tuple[Outcome, int]:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = run()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return out, peak


def _row(kind: str, name: str, runtime: str, bound: float, out: Outcome, peak: int) -> dict[str, Any]:
    return {
        "kind": kind,
        "case": name,
        "runtime": runtime,
        "bound_s": bound,
        "elapsed_s": round(out.elapsed, 3),
        "overrun_s": round(out.elapsed - bound, 3),
        "peak_bytes": peak,
        "outcome": "ok" if out.error is None else type(out.error).__name__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("rest", "stream"))
    parser.add_argument("--runtime", choices=RUNTIMES, action="append")
    parser.add_argument("--case", action="append", help="run only this case (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runtimes = args.runtime or list(RUNTIMES)
    wanted = set(args.case or ())
    rows: list[dict[str, Any]] = []
    if args.only in (None, "rest"):
        for case in REST_CASES:
            if wanted and case.name not in wanted:
                continue
            for runtime in runtimes:
                with HostileServer(case.handler) as server:
                    out, peak = _measure(
                        lambda rt=runtime, url=server.url, c=case: call(
                            rt, url, "get_chat", "c1", client=c.client
                        )
                    )
                rows.append(_row("rest", case.name, runtime, BOUND, out, peak))
                if not args.json:
                    _print(rows[-1])
    if args.only in (None, "stream"):
        for ws_case in WS_CASES:
            if wanted and ws_case.name not in wanted:
                continue
            agent = {"organization_id": ORG, "request_timeout": ws_case.bound}
            for runtime in runtimes:
                with HostileServer(ws_case.stream_handler) as server:
                    out, peak = _measure(
                        lambda rt=runtime, url=server.url, a=agent: generate(rt, url, "hi", agent=a)
                    )
                rows.append(_row("stream", ws_case.name, runtime, ws_case.bound, out, peak))
                if not args.json:
                    _print(rows[-1])
    summary = summarize(rows, runtimes)
    if args.json:
        json.dump({"rows": rows, "summary": summary}, sys.stdout, indent=1)
        print()
        return 0
    print()
    for line in summary:
        print(
            f"{line['runtime']:8} {line['cases']:3} cases  "
            f"worst overrun {line['worst_overrun_s']:+7.2f} s ({line['worst_overrun_case']}), "
            f"worst peak growth {line['worst_peak_bytes'] / 2**20:7.1f} MiB "
            f"({line['worst_peak_case']})"
        )
    return 0


def summarize(rows: list[dict[str, Any]], runtimes: list[str]) -> list[dict[str, Any]]:
    """Per runtime: how many cases ran, the worst overrun of a case's bound and the worst
    peak memory growth, each with its case (``kind/name``)."""
    out: list[dict[str, Any]] = []
    for runtime in runtimes:
        mine = [r for r in rows if r["runtime"] == runtime]
        if not mine:
            continue
        worst_time = max(mine, key=lambda r: r["overrun_s"])
        worst_mem = max(mine, key=lambda r: r["peak_bytes"])
        out.append(
            {
                "runtime": runtime,
                "cases": len(mine),
                "worst_overrun_s": worst_time["overrun_s"],
                "worst_overrun_case": f"{worst_time['kind']}/{worst_time['case']}",
                "worst_peak_bytes": worst_mem["peak_bytes"],
                "worst_peak_case": f"{worst_mem['kind']}/{worst_mem['case']}",
            }
        )
    return out


def _print(row: dict[str, Any]) -> None:
    print(
        f"{row['kind']:6} {row['case']:30} {row['runtime']:8} "
        f"overrun {row['overrun_s']:+7.2f} s  peak {row['peak_bytes'] / 2**20:7.1f} MiB  "
        f"{row['outcome']}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
