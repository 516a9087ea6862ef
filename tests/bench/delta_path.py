"""``python -m tests.bench.delta_path``: the files a text delta crosses from socket to user.

For each runtime, one turn streams from the fake server (in a child process, not traced) while
a profile hook watches the client process. A window opens when bytes are handed to the core
(the first call of ``Connection.socket_data`` after the previous delivery; the project files
already on the stack at that moment count: the runtime's socket loop and the driver) and
closes when the user's ``for`` loop receives the next text delta. Every project file whose
code runs inside the window counts once. The report gives, per runtime, the number of files
in the most common window and their paths, in the order first entered, and the project
function calls in such a window whose bytes carried one delta (the median); ``--verbose``
lists the functions with their calls per window.

A measurement of structure, not of time: the counts do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

from ._agent import RUNTIMES, ServerProcess, agent_class, make_agent, run_on
from ._common import BenchSkipped

ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = (
    "coder_proto",
    "coder_io_common",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_integrations",
)


def _project_file(filename: str) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in _PACKAGES else None


class _Tracer:
    def __init__(self) -> None:
        self.window: dict[str, None] | None = None
        self.windows: list[tuple[str, ...]] = []
        #: Project-function calls in the open window, and in each closed one.
        self.calls = 0
        self.window_calls: list[int] = []
        #: Deliveries per closed window: the first, and those of the same bytes that follow it
        #: before the next window opens.
        self.window_deltas: list[int] = []
        #: ``file:function`` -> calls, over every window (the verbose report).
        self.functions: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = _project_file(code.co_filename)
        if name is None:
            return
        with self.lock:
            if self.window is None:
                if code.co_name != "socket_data" or not name.endswith("_connection.py"):
                    return
                stack: list[str] = []
                outer: FrameType | None = frame.f_back
                while outer is not None:
                    caller = _project_file(outer.f_code.co_filename)
                    if caller is not None and caller not in stack:
                        stack.append(caller)
                    outer = outer.f_back
                self.window = dict.fromkeys(reversed(stack))
                self.calls = 0
            self.window[name] = None
            self.calls += 1
            self.functions[f"{name}:{code.co_name}"] += 1

    def delivered(self) -> None:
        with self.lock:
            if self.window is not None:
                self.windows.append(tuple(self.window))
                self.window_calls.append(self.calls)
                self.window_deltas.append(1)
                self.window = None
            elif self.window_deltas:
                self.window_deltas[-1] += 1


class DeltaPath(NamedTuple):
    """What one runtime's measurement saw."""

    #: Files in the most common window, and those files in the order first entered.
    file_count: int
    files: tuple[str, ...]
    #: Windows seen (deliveries that followed bytes handed to the core).
    windows: int
    #: Project-function calls in a typical window (from ``socket_data`` to the delivery): the
    #: median over the windows that crossed the most common files with one delta.
    calls: float
    #: ``file:function`` -> calls per window, on average (the ``--verbose`` report).
    functions: dict[str, float]


def measure(runtime: str, deltas: int = 100) -> DeltaPath:
    """The files and calls a text delta crosses from socket to user on ``runtime``."""
    cls = agent_class(runtime)
    tracer = _Tracer()
    # One delta every 10 ms: most socket reads then carry deltas alone.
    with ServerProcess(deltas, chunk_delay=0.01) as server:
        agent = make_agent(cls, server.info)

        def consume_sync() -> None:
            with agent.stream("Stream the benchmark transcript.") as stream:
                for _ in stream.text_stream:
                    tracer.delivered()
            agent.close()

        async def consume_async() -> None:
            async with agent.stream("Stream the benchmark transcript.") as stream:
                async for _ in stream.text_stream:
                    tracer.delivered()
            await agent.aclose()

        threading.setprofile(tracer.profile)
        sys.setprofile(tracer.profile)
        try:
            run_on(runtime, consume_sync if runtime == "sync" else consume_async)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    counts = collections.Counter(tracer.windows)
    if not counts:
        raise BenchSkipped(f"{runtime}: no text delta was delivered")
    files, _ = counts.most_common(1)[0]
    seen = len(tracer.windows)
    # Bytes that carried one delta: a read of several translates them all before the first
    # delivery (a machine under load reads in larger chunks).
    typical = [
        n
        for w, n, d in zip(tracer.windows, tracer.window_calls, tracer.window_deltas, strict=True)
        if w == files and d == 1
    ] or [n for w, n in zip(tracer.windows, tracer.window_calls, strict=True) if w == files]
    return DeltaPath(
        len(files),
        files,
        seen,
        statistics.median(typical),
        {name: n / seen for name, n in tracer.functions.most_common()},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.delta_path")
    parser.add_argument("--runtime", choices=RUNTIMES, action="append")
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="also list the functions called per delta"
    )
    args = parser.parse_args(argv)
    for runtime in args.runtime or RUNTIMES:
        try:
            path = measure(runtime, args.deltas)
        except BenchSkipped as exc:
            print(f"{runtime}: skipped ({exc})")
            continue
        print(
            f"{runtime}: {path.file_count} files from socket to user, {path.calls:.1f} project calls"
            f" per delta ({path.windows} deliveries)"
        )
        for name in path.files:
            print(f"    {name}")
        if args.verbose:
            for function, calls in path.functions.items():
                print(f"    {calls:6.2f}  {function}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
