"""Where an open, idle chat's memory goes: a tracemalloc snapshot of the fleet benchmark's
client fleet, taken when every stream is open and idle.

    python -m tests.bench.fleet_snapshot --chats 1000 --runtime asyncio [--top 40]

It opens ``--chats`` agents on one client against the benchmark's fake server (one process of
its own, its runs starting only after every stream could open), samples the traced heap as
``fleet.<runtime>.memory`` does, then cancels the chats. It prints the bytes per chat (the
consumer task's share and the library's beside it) and the largest file:line groups, in
bytes per chat (a smaller fleet runs first in the same process, so that the
modules imported on a first stream are not counted)."""

from __future__ import annotations

import argparse
import os
import tracemalloc
from typing import Any

from .fleet import (
    FLEET_TIMEOUT,
    _client_fleet,
    consumer_task_bytes,
    fleet_chunk_delay,
    fleet_ping_interval,
    open_margin,
    raise_fd_limit,
)

__all__ = ["main", "measure"]


def measure(
    runtime: str, chats: int, *, deltas: int = 20, frames: int = 1
) -> tuple[dict[str, Any], Any]:
    """The fleet's sample at ``chats`` chats on ``runtime`` and its tracemalloc snapshot
    (``frames`` frames per trace)."""
    from ._agent import ServerProcess, agent_class

    raise_fd_limit()
    snapshots: list[Any] = []
    with ServerProcess(
        deltas,
        start_delay=open_margin(chats) + 60.0,
        chunk_delay=fleet_chunk_delay(chats),
        ping_interval=fleet_ping_interval(chats),
    ) as server:
        measured = _client_fleet(
            runtime, agent_class(runtime), server.info, chats, FLEET_TIMEOUT, snapshots, frames
        )
    return measured, snapshots[0]


def _short(filename: str) -> str:
    """A path from the repository or from site-packages, without what comes before."""
    for mark in ("/site-packages/", "/lib/python"):
        if mark in filename:
            return filename.split(mark, 1)[1]
    return os.path.relpath(filename) if os.path.isabs(filename) else filename


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.fleet_snapshot")
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--runtime", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--top", type=int, default=30, help="file:line groups to print")
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FILE:LINE",
        help="also print the call paths that allocate at FILE:LINE (a suffix of the path)",
    )
    parser.add_argument("--frames", type=int, default=12, help="frames of a --where path")
    args = parser.parse_args(argv)
    # A small fleet first, as the benchmark's smaller sizes come first: the modules the
    # client imports on its first stream are not a chat's.
    measure(args.runtime, 4)
    frames = args.frames if args.where else 1
    measured, snapshot = measure(args.runtime, args.chats, frames=frames)
    chats = args.chats
    per_chat = measured["traced_per_chat"]
    consumer = consumer_task_bytes(args.runtime, chats)
    print(
        f"{args.runtime}, {chats} chats: {per_chat:,.0f} bytes per chat"
        f" (consumer task {consumer:,.0f}, library {per_chat - consumer:,.0f});"
        f" streaming at sample {measured['early']}, ended {measured['ended_early']},"
        f" redialed {measured['redials']}"
    )
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    for stat in snapshot.statistics("lineno")[: args.top]:
        frame = stat.traceback[0]
        where = f"{_short(frame.filename)}:{frame.lineno}"
        print(f"{stat.size / chats:9.1f} B {stat.count / chats:6.2f}  {where}")
    for wanted in args.where:
        print(f"\n-- call paths allocating at {wanted}")
        for stat in snapshot.statistics("traceback"):
            frame = stat.traceback[-1]  # the allocating frame; its callers before it
            if not f"{frame.filename}:{frame.lineno}".endswith(wanted):
                continue
            print(f"{stat.size / chats:9.1f} B {stat.count / chats:6.2f}")
            for caller in reversed(stat.traceback):
                print(f"      {_short(caller.filename)}:{caller.lineno}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
