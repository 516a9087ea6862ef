"""Benchmark 4, memory: peak RSS growth of one long turn.

Each measurement runs in a fresh child process (``python -m tests.bench.memory --child ...``)
that sets everything up, warms up with a short turn, resets the kernel's peak-RSS mark
(``/proc/self/clear_refs``), runs the turn and reads the peak (``VmHWM``) back: the growth is
what the turn itself needed at its worst moment.

* ``memory.stream.<runtime>`` / ``memory.generate.<runtime>``: a turn of the transcript from the
  fake server through ``agent.stream().text_stream`` (text dropped as it comes) and through
  ``agent.generate()`` (the result kept). Targets: stream <= 10 MB; generate <= 2x the text +
  5 MB.
* ``memory.core.stream`` / ``memory.core.generate``: the core alone (reader + translator, fed
  the WebSocket bytes of the whole transcript), parts dropped, or text deltas kept and joined;
  same targets. The growth is the larger of the RSS growth and the traced peak of Python
  allocations (tracemalloc, a second run): RSS alone can hide allocations that reuse memory
  the process freed while building its input.

``ratio`` is growth / budget (at most 1.0 meets the target); ``value_s`` is the turn's wall time.

What an agent line charges the turn, and what it does not. On every runtime the child makes
one agent and runs the warm-up turn before the window: the one-time imports (httpx with the
first agent, wsproto with the first stream), the client and its connection pool are in place
when the peak mark is reset, so the line is the turn's own memory. RSS growth counts only the
pages the turn needed beyond those the process already held: memory freed earlier (by the
imports, by the warm-up) is reused without growing, so the same turn grows less in a process
that happens to have more of it. ``traced_peak_mb`` (one more turn, under tracemalloc) is the
turn's Python allocations at their worst, which the process's history does not change (the
RSS growth can be larger: it also counts the allocator's own overhead and memory allocated
outside Python's tracing, socket buffers among it). The blocking lines rose (stream 0.8 MB to 2.2 MB) when
httpx moved from the adapter's import to its first agent, with the traced peak unchanged
(2.0 MB): the import still came before the window, but left less freed memory for the turn
to reuse, and the growth rose to what the turn really allocated, most of it the driver's
batch of sixteen 64 KiB socket reads held before the first reached the core. The driver now
hands each chunk on as it reads it (traced peak 1.1 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from typing import Any

from ._common import BenchSkipped, Result, Settings, skipped
from ._data import ROOT

__all__ = ["GENERATE_OVERHEAD", "STREAM_BUDGET", "run"]

MB = 1_000_000
MODES = ("stream", "generate")
#: Peak growth allowed for a streamed turn.
STREAM_BUDGET = 10 * MB
#: generate() may hold twice the text plus this.
GENERATE_OVERHEAD = 5 * MB


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise BenchSkipped(f"/proc/self/status has no {field}")


def _reset_peak() -> int:
    """Reset the peak-RSS mark to the current RSS; return the current RSS in bytes."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    return _status_kib("VmRSS") * 1024


def _peak() -> int:
    return _status_kib("VmHWM") * 1024


def _core_child(n: int, mode: str) -> dict[str, Any]:
    from coder_proto import TextDelta

    from ._data import one_event_frames, transcript_lines
    from ._pipelines import ws_bytes

    lines = transcript_lines(n)
    new_reader, reads = ws_bytes(one_event_frames(lines))
    del lines
    # Warm-up: a short turn through the same code, so lazily built caches are not counted.
    from coder_proto._stream.translator import TurnTranslator

    def turn(reads: list[bytes], keep: bool) -> str:
        reader = new_reader()
        translator = TurnTranslator(turn_cursor=1)
        # generate() keeps the text, joined in runs so that it costs about a byte per
        # character (a list of the deltas, or a StringIO, keeps one string object each).
        pending: list[str] = []
        runs: list[str] = []
        events = reader.events
        for chunk in reads:
            reader.data_received(1, chunk, 0.0)
            while events:
                for part in translator.ingest(events.popleft()):
                    if keep and type(part) is TextDelta:
                        pending.append(part.delta)
                        if len(pending) >= 256:
                            runs.append("".join(pending))
                            pending.clear()
        translator.finish()
        return "".join(runs) + "".join(pending)

    turn(reads[:4], mode == "generate")
    base = _reset_peak()
    started = time.perf_counter()
    text = turn(reads, mode == "generate")
    elapsed = time.perf_counter() - started
    growth = _peak() - base
    # RSS can hide what the turn allocates in memory the process freed earlier (building
    # the input); the traced peak of Python allocations cannot.
    del text
    tracemalloc.start()
    text = turn(reads, mode == "generate")
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "growth": max(growth, traced),
        "rss_growth": growth,
        "traced_peak": traced,
        "text_bytes": len(text.encode()),
        "seconds": elapsed,
    }


def _agent_child(n: int, mode: str, runtime: str, info: dict[str, Any]) -> dict[str, Any]:
    from ._agent import PROMPT, agent_class, make_agent, run_on, stream_turn
    from ._server import WARM_UP

    cls = agent_class(runtime)
    result: dict[str, Any] = {}

    def measure_generate(value: Any) -> int:
        text = getattr(value, "text", "")
        return len(text.encode()) if isinstance(text, str) else 0

    if runtime == "sync":

        def main_sync() -> None:
            with make_agent(cls, info) as agent:
                if mode == "generate":
                    agent.generate(WARM_UP)
                else:
                    stream_turn(runtime, agent, WARM_UP)
                base = _reset_peak()
                started = time.perf_counter()
                if mode == "generate":
                    value = agent.generate(PROMPT)
                    result["text_bytes"] = measure_generate(value)
                else:
                    result["text_bytes"] = stream_turn(runtime, agent)
                result["seconds"] = time.perf_counter() - started
                result["growth"] = _peak() - base
                tracemalloc.start()
                if mode == "generate":
                    agent.generate(PROMPT)
                else:
                    stream_turn(runtime, agent)
                result["traced_peak"] = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()

        run_on(runtime, main_sync)
        return result

    async def main_async() -> None:
        async with make_agent(cls, info) as agent:
            if mode == "generate":
                await agent.generate(WARM_UP)
            else:
                await stream_turn(runtime, agent, WARM_UP)
            base = _reset_peak()
            started = time.perf_counter()
            if mode == "generate":
                value = await agent.generate(PROMPT)
                result["text_bytes"] = measure_generate(value)
            else:
                result["text_bytes"] = await stream_turn(runtime, agent)
            result["seconds"] = time.perf_counter() - started
            result["growth"] = _peak() - base
            tracemalloc.start()
            if mode == "generate":
                await agent.generate(PROMPT)
            else:
                await stream_turn(runtime, agent)
            result["traced_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()

    run_on(runtime, main_async)
    return result


def _child(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.memory")
    parser.add_argument("--child", choices=("core", "agent"), required=True)
    parser.add_argument("--mode", choices=("stream", "generate"), required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--runtime", default="asyncio")
    parser.add_argument("--info", default="{}")
    args = parser.parse_args(argv)
    try:
        if args.child == "core":
            out = _core_child(args.n, args.mode)
        else:
            out = _agent_child(args.n, args.mode, args.runtime, json.loads(args.info))
    except BenchSkipped as exc:
        out = {"skipped": str(exc)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def _spawn(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.memory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()
        raise BenchSkipped("measuring child failed: " + (tail[-1] if tail else "no output"))
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def _result(
    name: str, n: int, mode: str, measured: dict[str, Any], extra: dict[str, Any]
) -> Result:
    if "skipped" in measured:
        return skipped(name, n, measured["skipped"])
    growth = measured["growth"]
    text_bytes = measured.get("text_bytes", 0)
    budget = STREAM_BUDGET if mode == "stream" else 2 * text_bytes + GENERATE_OVERHEAD
    target = "<= 10 MB" if mode == "stream" else "<= 2x text + 5 MB"
    return Result(
        name,
        n,
        measured.get("seconds"),
        None,
        growth / budget,
        {
            "growth_mb": round(growth / MB, 3),
            **{
                f"{key}_mb": round(measured[key] / MB, 3)
                for key in ("rss_growth", "traced_peak")
                if key in measured
            },
            "budget_mb": round(budget / MB, 3),
            "text_mb": round(text_bytes / MB, 3),
            "target": target,
            "meets_target": growth <= budget,
            **extra,
        },
    )


def run(settings: Settings) -> list[Result]:
    """The core measurements always; the agent's when the adapters and the fake exist."""
    if not os.path.exists("/proc/self/clear_refs"):
        raise BenchSkipped("peak RSS is read from /proc (Linux only)")
    n = settings.memory_n
    out: list[Result] = []
    for mode in MODES:
        measured = _spawn(["--child", "core", "--mode", mode, "--n", str(n)])
        out.append(
            _result(
                f"memory.core.{mode}",
                n,
                mode,
                measured,
                {"via": "core only: WebSocket bytes -> reader -> translator"},
            )
        )

    from ._agent import RUNTIMES, ServerProcess, agent_class, require_fake_server

    runtimes: list[str] = []
    for runtime in RUNTIMES:
        try:
            require_fake_server()
            agent_class(runtime)
        except BenchSkipped as exc:
            out.extend(skipped(f"memory.{mode}.{runtime}", n, str(exc)) for mode in MODES)
        else:
            runtimes.append(runtime)
    if not runtimes:
        return out
    with ServerProcess(n) as server:
        for runtime in runtimes:
            for mode in MODES:
                name = f"memory.{mode}.{runtime}"
                try:
                    measured = _spawn(
                        [
                            "--child",
                            "agent",
                            "--mode",
                            mode,
                            "--n",
                            str(n),
                            "--runtime",
                            runtime,
                            "--info",
                            json.dumps(server.info),
                        ]
                    )
                except BenchSkipped as exc:
                    out.append(skipped(name, n, str(exc)))
                    continue
                out.append(_result(name, n, mode, measured, {"runtime": runtime}))
    return out


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
